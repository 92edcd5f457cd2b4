"""TRUTH for the published sparse copies, from vLLM 0.33's own code on CPU.

For each published checkpoint (scripts/published_sparse.py, ``--layers 4``):

1. the quant-config class vLLM picks, as ``ModelConfig._verify_quantization`` does:
   the first registered class whose ``override_quantization_method`` claims the
   config, else the config's ``quant_method`` (config.json's ``quantization_config``,
   else hf_quant_config.json as ``modelopt``); built with its real ``from_config``;
2. the ``packed_modules_mapping`` of the model class vLLM's registry resolves for
   ``config.architectures`` (``configure_quant_config`` hands it to the config);
3. for every runtime module specguard lists, the real ``get_quant_method`` on a
   layer of the class specguard says vLLM builds there (``LinearBase``,
   ``RoutedExperts``, ``ParallelLMHead``, ``VocabParallelEmbedding``): the method
   class's name. Method constructors are recorders (kernel selection needs a GPU);
   every routing decision runs unchanged.

Writes ``tests/data/published/<name>/truth.json``; ``--check`` recomputes and exits 1
on any difference (tests/lint/test_published_truth.py runs it on the installed vLLM).
Layers a model class builds with ``quant_config=None`` never reach ``get_quant_method``
and are recorded as ``built without a quant config`` (specguard's claim, from the
model source it cites); modules that are parameters (norms, biases) are not asked.

Runtime prefixes are specguard's (layouts/); where vLLM names a draft module
differently only a recorded build plan (issue 26) can say so.

    PYTHONPATH=src .venv/bin/python scripts/published_truth.py [--check] [NAME ...]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "data" / "published"
LAYERS = 4
NO_QUANT_CONFIG = "built without a quant config"
# DeepSeek-V4's quant configs read the live vLLM config lazily (tests/engines/test_vllm_v0_33.py
# checks them against vLLM on generated cases); these models are left to that test.
SKIP = {"deepseek-v4-flash", "deepseek-v4-flash-dspark",
        # Qwen3.5's vLLM model class needs the torchvision overlay to be inspected (scripts/record_plans.py),
        # which this in-process script does not load; their vLLM side is the recorded Qwen3.5 plan's
        "qwen3.8-2.4t-a95b-fp8", "qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded",
        "qwen3.8-2.4t-a95b-nvfp4-export-mtp-bf16"}


def _published() -> Any:
    spec = importlib.util.spec_from_file_location("published_sparse", HERE / "published_sparse.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("published_sparse", mod)
    spec.loader.exec_module(mod)
    return mod


def quant_config_class(qc: dict, hf_config: Any) -> type | None:
    """``ModelConfig._verify_quantization``'s choice: an override claims it, else quant_method."""
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config

    method = str(qc.get("quant_method", "")).lower()
    for name in QUANTIZATION_METHODS:
        cls = get_quantization_config(name)
        claimed = cls.override_quantization_method(dict(qc), None, hf_config=hf_config)
        if claimed:
            return get_quantization_config(claimed)
    return get_quantization_config(method) if method in QUANTIZATION_METHODS else None


def _recorders(stack: ExitStack, cls: type) -> None:
    """Method classes of ``cls``'s module become name-keeping recorders."""
    import pytest

    mp = stack.enter_context(pytest.MonkeyPatch.context())
    mods = [importlib.import_module(cls.__module__)]
    if cls.__name__ == "CompressedTensorsConfig":  # get_moe_method picks its MoE method in its own modules
        package = cls.__module__.rsplit(".", 1)[0] + ".compressed_tensors_moe"
        import pkgutil

        path = importlib.import_module(package).__path__
        for m in pkgutil.iter_modules(path):
            try:
                mods.append(importlib.import_module(f"{package}.{m.name}"))
            except ImportError:  # a ROCm-only kernel module (aiter): no method this CPU build picks
                continue
    for mod in mods:
        for name, obj in list(vars(mod).items()):
            # compressed-tensors schemes (CompressedTensorsW8A8Fp8 ...) read the live vLLM config
            if name == "CompressedTensorsMoEMethod" or not isinstance(obj, type):
                continue
            if name.endswith(("Method", "FusedMoE")) or name.startswith("CompressedTensorsW"):
                mp.setattr(mod, name, type(name, (), {"__init__": lambda self, *a, **k: None,
                                                      "get_min_capability": classmethod(lambda c: 0)}))
    mod = mods[0]
    for name in ("build_linear_method",):
        if hasattr(mod, name):
            mp.setattr(mod, name, lambda *a, **k: type("ModelOptLinearMethod", (), {})())
    if hasattr(mod, "get_marlin_input_dtype"):
        mp.setattr(mod, "get_marlin_input_dtype", lambda *a, **k: None)
    if "FusedMoEMethodCls" in vars(cls):
        mp.setattr(cls, "FusedMoEMethodCls", type(cls.FusedMoEMethodCls.__name__, (),
                                                  {"__init__": lambda self, *a, **k: None}))
    if hasattr(cls, "_make_moe_method"):
        mp.setattr(cls, "_make_moe_method", lambda self, moe: type("Mxfp4MoEMethod", (), {})())


# Draft modules the MTP model builds as a plain torch ``nn.Linear`` (no quant config reaches
# them), checked in the installed source of the class that builds them (``plain_in_source``).
PLAIN_LINEAR = {
    "DeepseekV3ForCausalLM": ("vllm.model_executor.models.deepseek_mtp", "DeepSeekMultiTokenPredictorLayer"),
    "Glm4MoeForCausalLM": ("vllm.model_executor.models.glm4_moe_mtp", "Glm4MoeMultiTokenPredictorLayer"),
}


def plain_in_source(arch: str, leaf: str) -> bool:
    """Does vLLM's MTP layer class for ``arch`` build ``self.{leaf}`` as ``nn.Linear``?"""
    import inspect

    where = PLAIN_LINEAR.get(arch)
    if where is None:
        return False
    cls = getattr(importlib.import_module(where[0]), where[1])
    return f"self.{leaf} = nn.Linear(" in inspect.getsource(cls.__init__)


def _layer(kind: str) -> Any:
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    cls = {"linear": LinearBase, "routed_experts": RoutedExperts, "head": ParallelLMHead,
           "embedding": VocabParallelEmbedding}[kind]
    layer = object.__new__(cls)
    layer.__dict__["moe_config"] = None
    for proj in ("gate", "up", "down"):  # RoutedExperts' checkpoint projection names (compressed-tensors asks)
        layer.__dict__[f"ckpt_{proj}_proj_name"] = f"{proj}_proj"
    return layer


def truth(name: str, path: Path) -> dict[str, str]:
    """Runtime prefix -> the method vLLM 0.33 builds there (see the module docstring)."""
    from vllm.model_executor.model_loader.utils import configure_quant_config
    from vllm.model_executor.models.registry import ModelRegistry

    from specguard.resolve import Resolver

    r = Resolver(Resolver.open(path).checkpoint)
    cfg = json.loads((path / "config.json").read_text())
    hq = path / "hf_quant_config.json"
    qc = cfg.get("quantization_config") or ({"quant_method": "modelopt", **json.loads(hq.read_text())}
                                            if hq.exists() else None)
    hf = NS(**cfg)
    model_cls, _ = ModelRegistry.resolve_model_cls(cfg["architectures"], model_config=NS(
        hf_config=hf, hf_text_config=hf, architectures=cfg["architectures"], runner_type="generate",
        convert_type="none", model_impl="auto", is_hybrid=False))
    out: dict[str, str] = {}
    with ExitStack() as stack:
        obj = None
        if qc is not None:
            cls = quant_config_class(qc, hf)
            if cls is None:
                return {"*": f"unknown quant_method {qc.get('quant_method')!r}"}
            _recorders(stack, cls)
            obj = cls.from_config(dict(qc))
            configure_quant_config(obj, model_cls)
            if cfg.get("q_lora_rank") is not None and "deepseek" in cfg.get("model_type", ""):
                # DeepseekV2ForCausalLM.__init__ adds it to the shared mapping
                obj.packed_modules_mapping = {**obj.packed_modules_mapping,
                                              "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"]}
        for rt in r.routes():
            if rt.kind in ("norm", "other") or rt.stored is None:
                continue
            if rt.role.is_draft and plain_in_source(cfg["architectures"][0], rt.prefix.rsplit(".", 1)[-1]):
                out[rt.prefix] = NO_QUANT_CONFIG + " (nn.Linear)"
                continue
            if r.vllm.built_without_quant_config(rt.prefix, rt.kind):  # routers: GateLinear(quant_config=None)
                out[rt.prefix] = NO_QUANT_CONFIG
                continue
            if obj is None:
                out[rt.prefix] = "unquantized (no quant config)"
                continue
            try:
                m = obj.get_quant_method(_layer(rt.kind), rt.prefix)
            except (ValueError, NotImplementedError) as exc:
                out[rt.prefix] = f"raises {type(exc).__name__}"
                continue
            out[rt.prefix] = "None" if m is None else type(m).__name__
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--check", action="store_true", help="recompute, write nothing, exit 1 on any difference")
    args = ap.parse_args(argv)
    pub = _published()
    names = args.names or sorted(set(pub.MODELS) - SKIP)
    drift = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            got = truth(name, pub.build(name, Path(tmp) / name, LAYERS))
            dest = DATA / name / "truth.json"
            if args.check:
                held = json.loads(dest.read_text()) if dest.exists() else None
                if held != got:
                    drift.append(name)
                    print(f"{name}: truth.json differs from the installed vLLM's answer")
            else:
                dest.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
                print(f"{dest}: {len(got)} runtime modules")
    return 1 if drift else 0


if __name__ == "__main__":
    sys.exit(main())
