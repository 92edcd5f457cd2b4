"""The plugin never takes vLLM down: its own failures fall back to vLLM's behaviour.

A broken dependency (orjson missing, as when vLLM's environment is built with
``--no-deps``) and exceptions injected into specguard's own code are each one
warning naming the cause, after which vLLM routes and loads as it would without
the plugin. vLLM's own exceptions, and the guard's deliberate DraftLoadError,
still reach vLLM unchanged.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest

from specguard.integrations.vllm import disk, loading, methods, routing, safety
from tests.integrations import vllm_harness as H
from tests.integrations.test_vllm_routing import MXFP4, NVFP4, experts_method

REPO = Path(__file__).resolve().parents[2]

_NO_ORJSON = textwrap.dedent(
    """
    import json, logging, sys
    sys.modules["orjson"] = None  # the dependency is missing: importing it fails
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    from vllm.models.deepseek_v4.quant_config import DeepseekV4FP8Config
    from vllm.config import vllm as vllm_config_module
    print("RESULT " + json.dumps({
        "imported": True,
        "patched": hasattr(DeepseekV4FP8Config.get_quant_method, "__specguard_original__"),
        "config_patched": hasattr(vllm_config_module.VllmConfig.__dict__["_get_quantization_config"],
                                  "__specguard_original__"),
    }))
    """
)


def test_missing_dependency_leaves_vllm_importing_and_routing_as_without_the_plugin() -> None:
    proc, result = H.run_fresh_process(_NO_ORJSON, str(REPO))
    # The version check reads the engine registry, whose stages need orjson: nothing is patched.
    assert result == {"imported": True, "patched": False, "config_patched": False}
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line and "specguard" in line]
    assert len(warnings) == 1, proc.stderr[-3000:]
    # said once for every quant config it would have patched (fp8, ModelOpt, DeepSeek-V4, ...)
    assert "failed (ModuleNotFoundError" in warnings[0]
    assert "orjson" in warnings[0] and "vLLM's behaviour there is unchanged" in warnings[0]


@pytest.fixture
def fresh_warnings() -> None:
    safety._warned.clear()


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected")


def _specguard_warnings(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("registry", ["cpu", "cuda"])
@pytest.mark.parametrize("target", [(methods, "build_method"), (disk, "stored"), (methods, "layer_kind")])
def test_exception_in_specguard_routing_gives_vllms_method_and_one_warning(
    s1_mtp: Any, plugin: None, fresh_warnings: None, specguard_log: list[logging.LogRecord],
    monkeypatch: pytest.MonkeyPatch, registry: str, target: tuple[Any, str],
) -> None:
    monkeypatch.setattr(*target, _fail)
    for _ in range(2):  # the second failure is not logged again
        assert experts_method(s1_mtp, registry, "model.layers.2.ffn")[0] == NVFP4  # vLLM's own
    warnings = _specguard_warnings(specguard_log)
    assert len(warnings) == 1, warnings
    assert "get_quant_method failed (RuntimeError: injected)" in warnings[0]
    assert routing.take_decisions() == []


def test_exception_in_the_resolver_keeps_vllm_routing(
    s1_mtp: Any, plugin: None, specguard_log: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from specguard.resolve import Resolver

    disk.forget_failures()
    monkeypatch.setattr(Resolver, "route", _fail)
    assert experts_method(s1_mtp, "cuda", "model.layers.2.ffn")[0] == NVFP4
    assert any("RuntimeError: injected" in m for m in _specguard_warnings(specguard_log))
    disk.forget_failures()
    monkeypatch.undo()
    assert experts_method(s1_mtp, "cuda", "model.layers.2.ffn")[0] == MXFP4  # working again


def test_vllms_own_exception_still_reaches_vllm(
    plugin: None, fresh_warnings: None, specguard_log: list[logging.LogRecord],
) -> None:
    def vllms_get_quant_method(config: Any, layer: Any, prefix: str) -> Any:
        raise ValueError("vLLM refuses this layer")

    patched = routing.wrap_get_quant_method(vllms_get_quant_method)
    with pytest.raises(ValueError, match="vLLM refuses this layer"):
        patched(object(), object(), "model.layers.0.ffn.experts")
    assert _specguard_warnings(specguard_log) == []  # not specguard's failure: no fallback, no warning


def test_guard_failure_loads_the_draft_unguarded_with_one_warning(
    s1_mtp: Any, s1_dir: Path, plugin: None, fresh_warnings: None,
    specguard_log: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import specguard.guard

    model = H.mtp_draft_model(s1_mtp, H.quant_config(s1_mtp, "cuda"))
    monkeypatch.setattr(specguard.guard, "LoadGuard", _fail)
    with loading.draft_load(str(s1_dir)):
        H.load_draft_weights(s1_mtp, model)  # loads, as vLLM would without the plugin
    (warning,) = _specguard_warnings(specguard_log)
    assert "LoadGuard around the draft's weight load failed (RuntimeError: injected)" in warning


def test_draft_load_error_says_how_to_serve_without_speculation(s1_mtp: Any, s1_dir: Path, plugin: None) -> None:
    with routing.vanilla():  # the draft built as vLLM 0.33 builds it: NVFP4
        model = H.mtp_draft_model(s1_mtp, H.quant_config(s1_mtp, "cuda"))
    with pytest.raises(loading.DraftLoadError) as err, loading.draft_load(str(s1_dir)):
        H.load_draft_weights(s1_mtp, model)
    assert safety.passes_through(err.value)
    assert "start without speculative decoding (drop --speculative-config)" in str(err.value)
