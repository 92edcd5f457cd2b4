"""The plugin against whichever vLLM this process imports: its contract, S1's draft routed and
loaded as stored, and hostile checkpoints.

Runs in-process on vLLM 0.33 (tests/integrations/test_vllm_contract.py) and under the vLLM 0.32
overlay inside the one 0.32 subprocess the suite starts (tests/engines/vllm_032_probe.py), so
both versions answer the same questions with their own classes. Every function returns plain
data (JSON for the subprocess).
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integrations import vllm_harness as H

MTP = {"method": "mtp", "num_speculative_tokens": 1}
HOSTILE = ("truncated", "missing", "lying")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelno, record.getMessage()))


def _warnings_during(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``fn()`` and the warnings specguard logged meanwhile."""
    logger = logging.getLogger("vllm.specguard")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        result = fn()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return result, [m for lvl, m in handler.messages if lvl >= logging.WARNING]


def _experts(cfg: Any, registry: str, ffn_prefix: str) -> str:
    quant = H.quant_config(cfg, registry)
    return H.method_name(H.routed_experts(H.build_moe(cfg, quant, ffn_prefix)))


def _load(cfg: Any, ckpt: str, model: Any) -> str:
    """``clean``, or what stopped the draft's weight load (the exception's class and first line)."""
    from specguard.integrations.vllm import loading

    try:
        with loading.draft_load(ckpt):
            H.load_draft_weights(cfg, model)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "clean"


def scenario(name: str, path: Path) -> Path:
    """A factory scenario whose config.json also states ``swiglu_limit`` (10.0, as the published
    DeepSeek-V4-Flash config.json does) and ``hidden_act`` (``silu``, transformers' default): vLLM
    0.32's DeepseekV4MoE reads both from a config object that has no defaults for them."""
    from specguard.factory import write_scenario

    path = write_scenario(name, path).path
    config = json.loads((path / "config.json").read_text())
    config.setdefault("swiglu_limit", 10.0)
    config.setdefault("hidden_act", "silu")
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def s1_draft(ckpt: Path) -> dict:
    """S1's MTP draft experts with and without the plugin (both quant-config classes), and the
    draft's weight load under the plugin's LoadGuard (raising)."""
    from specguard.integrations.vllm import installed, routing

    cfg = H.engine_config(str(ckpt), MTP)
    H.init_single_rank(cfg)
    out: dict = {}
    with H.cpu_kernel_checks_off():
        for registry in ("cpu", "cuda"):
            with routing.vanilla():
                vllm = {p: _experts(cfg, registry, f"model.layers.{p}.ffn") for p in (0, 2)}
            routing.take_decisions()
            with installed():
                plugin = {p: _experts(cfg, registry, f"model.layers.{p}.ffn") for p in (0, 2)}
            decisions = [f"{d.prefix}:{d.stored}->{d.routed}" for d in routing.take_decisions()]
            out[registry] = {"vllm": vllm, "plugin": plugin, "decisions": decisions}
        with installed():
            model = H.mtp_draft_model(cfg, H.quant_config(cfg, "cuda"))
            routing.take_decisions()
            out["load"] = _load(cfg, str(ckpt), model)
    return out


def hostile_checkpoint(kind: str, root: Path) -> Path:
    """S1 made hostile: ``truncated`` (the draft's shard cut inside its header), ``missing`` (a
    main-layer shard the index names deleted), ``lying`` (a header whose offsets run past the file)."""
    path = scenario("s1", root / f"s1-{kind}")
    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    draft_shard = path / index["mtp.0.ffn.experts.0.w1.weight"]
    if kind == "truncated":
        draft_shard.write_bytes(draft_shard.read_bytes()[:100])
    elif kind == "missing":
        main_shard = path / index["layers.0.ffn.experts.0.w1.weight"]
        assert main_shard != draft_shard, "S1 keeps the draft in a shard of its own"
        main_shard.unlink()
    elif kind == "lying":
        raw = draft_shard.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        name = next(k for k in header if k != "__metadata__")
        start, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [start, end + 10 * len(raw)]  # claims bytes the file does not have
        body = json.dumps(header).encode()
        draft_shard.write_bytes(len(body).to_bytes(8, "little") + body + raw[8 + n:])
    else:
        raise ValueError(kind)
    return path


def hostile(kind: str, root: Path) -> dict:
    """Under the plugin a hostile checkpoint routes and loads as vLLM alone does it, with at most
    one specguard warning, and nothing specguard raises reaches vLLM."""
    from specguard.integrations.vllm import disk, installed, routing

    ckpt = hostile_checkpoint(kind, root)
    cfg = H.engine_config(str(ckpt), MTP)
    H.init_single_rank(cfg)
    out: dict = {}
    with H.cpu_kernel_checks_off():
        with routing.vanilla():
            out["vllm"] = {"methods": [_experts(cfg, "cuda", f"model.layers.{p}.ffn") for p in (0, 2)]}
            model = H.mtp_draft_model(cfg, H.quant_config(cfg, "cuda"))
        out["vllm"]["load"] = _load_unguarded(cfg, model)
        disk.forget_failures()
        routing.take_decisions()
        with installed():

            def plugin_run() -> dict:
                methods = [_experts(cfg, "cuda", f"model.layers.{p}.ffn") for p in (0, 2)]
                model = H.mtp_draft_model(cfg, H.quant_config(cfg, "cuda"))
                return {"methods": methods, "load": _load(cfg, str(ckpt), model)}

            try:
                out["plugin"], out["warnings"] = _warnings_during(plugin_run)
            except Exception:
                out["plugin"] = {"raised": traceback.format_exc()[-2000:]}
                out["warnings"] = []
        out["decisions"] = len(routing.take_decisions())
    return out


def _load_unguarded(cfg: Any, model: Any) -> str:
    try:
        H.load_draft_weights(cfg, model)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "clean"


def run_all(root: Path) -> dict:
    """Every check, each one's failure kept as its traceback (the caller asserts on the data)."""
    from specguard.integrations.vllm import contract

    def guarded(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return {"error": traceback.format_exc()[-3000:]}

    s1 = scenario("s1", root / "s1")
    return {
        "contract": guarded(contract.missing),
        "s1": guarded(lambda: s1_draft(s1)),
        "hostile": {k: guarded(lambda k=k: hostile(k, root)) for k in HOSTILE},
    }
