"""The plugin as vLLM sees it: entry point, settings, version guard, idempotence, undo."""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path

import pytest

from specguard.integrations.vllm import active, plugin, register, uninstall
from specguard.integrations.vllm.hooks import ORIGINAL
from specguard.integrations.vllm.settings import (
    FIX,
    LOG,
    OFF,
    RAISE,
    WARN,
    Settings,
    SettingsError,
    read_settings,
    version_supported,
)

REPO = Path(__file__).resolve().parents[2]


def _v4_class() -> type:
    from vllm.models.deepseek_v4.quant_config import DeepseekV4FP8Config

    return DeepseekV4FP8Config


def _v41_class() -> type:
    from vllm.model_executor.layers.quantization import get_quantization_config

    from tests.integrations.vllm_harness import cuda_registry

    get_quantization_config("deepseek_v4_fp8")  # imports what the V4.1 module needs on CPU
    with cuda_registry():
        return get_quantization_config("deepseek_v4_fp8")


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    """No plugin installed before or after; environment variables unset."""
    for key in ("SPECGUARD_VLLM", "SPECGUARD_VLLM_GUARD"):
        monkeypatch.delenv(key, raising=False)
    uninstall()
    yield
    uninstall()


def test_settings_defaults_values_and_errors() -> None:
    assert read_settings({}) == Settings(FIX, RAISE)
    assert read_settings({"SPECGUARD_VLLM": " LOG ", "SPECGUARD_VLLM_GUARD": "warn"}) == Settings(
        LOG, WARN
    )
    assert read_settings({"SPECGUARD_VLLM": "off"}).mode == OFF
    with pytest.raises(SettingsError, match=re.escape("SPECGUARD_VLLM='fixx' is not one of off|log|fix")):
        read_settings({"SPECGUARD_VLLM": "fixx"})
    with pytest.raises(SettingsError, match="SPECGUARD_VLLM_GUARD"):
        read_settings({"SPECGUARD_VLLM_GUARD": "ignore"})


@pytest.mark.parametrize(
    ("version", "ok"),
    [("0.33.0", True), ("0.33.4", True), ("0.33.1rc1", True), ("0.33.0+cu130", True),
     ("0.32.0", True), ("0.32.9", True), ("0.31.0", False), ("0.34.0", False), ("1.33.0", False), ("0.33", True),
     ("dev", False)],
)
def test_version_guard(version: str, ok: bool) -> None:
    assert version_supported(version) is ok


def test_register_patches_both_classes_once_and_uninstall_restores(clean: None) -> None:
    v4, v41 = _v4_class(), _v41_class()
    originals = (v4.__dict__["get_quant_method"], v41.__dict__["get_quant_method"],
                 v41.__dict__["_is_nvfp4_expert_layer"])
    register()
    register()  # vLLM may call it again in the same process
    assert active() == Settings(FIX, RAISE)
    patched = (v4.__dict__["get_quant_method"], v41.__dict__["get_quant_method"],
               v41.__dict__["_is_nvfp4_expert_layer"])
    assert [getattr(p, ORIGINAL) for p in patched] == list(originals)  # one layer of wrapping
    uninstall()
    assert (v4.__dict__["get_quant_method"], v41.__dict__["get_quant_method"],
            v41.__dict__["_is_nvfp4_expert_layer"]) == originals
    assert active() is None


def test_off_and_bad_values_leave_vllm_untouched(
    clean: None, monkeypatch: pytest.MonkeyPatch, specguard_log: list[logging.LogRecord]
) -> None:
    original = _v4_class().__dict__["get_quant_method"]
    for value in ("off", "sometimes"):
        monkeypatch.setenv("SPECGUARD_VLLM", value)
        register()
        assert active() is None
        assert _v4_class().__dict__["get_quant_method"] is original
    messages = [r.getMessage() for r in specguard_log]
    assert any("SPECGUARD_VLLM=off" in m for m in messages)
    assert any("'sometimes' is not one of off|log|fix" in m and "inactive" in m for m in messages)


def test_other_vllm_versions_are_left_alone(
    clean: None, monkeypatch: pytest.MonkeyPatch, specguard_log: list[logging.LogRecord]
) -> None:
    monkeypatch.setattr(plugin, "vllm_version", lambda: "0.34.0")
    register()
    assert active() is None
    assert getattr(_v4_class().__dict__["get_quant_method"], ORIGINAL, None) is None
    warnings = [r.getMessage() for r in specguard_log if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "vLLM 0.34.0 is not a version" in warnings[0]  # one warning, nothing patched
    assert "(0.33.x, 0.32.x)" in warnings[0]  # the versions the registry says it runs on


def test_a_registered_version_without_recorded_plans_is_left_alone(
    clean: None, monkeypatch: pytest.MonkeyPatch, specguard_log: list[logging.LogRecord]
) -> None:
    """The supported versions come from the registry: an entry marked for the plugin whose plans
    were never recorded (no plans/vllm-0.34/) gets one warning and no patch."""
    from specguard.engines import registry
    from specguard.engines.vllm.v0_33 import Vllm033

    monkeypatch.setitem(registry._FACTORIES, "vllm-0.34",
                        lambda: registry.Engine("vllm-0.34", "vLLM 0.34", Vllm033, plugin=True))
    monkeypatch.setattr(registry, "_PLUGIN", {*registry._PLUGIN, "vllm-0.34"})
    monkeypatch.setattr(plugin, "vllm_version", lambda: "0.34.1")
    assert registry.engine("vllm-0.34").plugin and not version_supported("0.34.1")
    register()
    assert active() is None
    assert getattr(_v4_class().__dict__["get_quant_method"], ORIGINAL, None) is None
    warnings = [r.getMessage() for r in specguard_log if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "vLLM 0.34.1 is not a version" in warnings[0]
    registry._BUILT.pop("vllm-0.34", None)


_FRESH_PROCESS = textwrap.dedent(
    """
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    import specguard.integrations.vllm as sg
    out = {"active": sg.active() is not None,
           "quant_config_imported_by_plugin": "vllm.models.deepseek_v4.quant_config" in sys.modules,
           "resolver_imported_by_plugin": "specguard.resolve" in sys.modules}
    from vllm.models.deepseek_v4.quant_config import DeepseekV4FP8Config
    out["patched_on_import"] = hasattr(DeepseekV4FP8Config.get_quant_method, "__specguard_original__")
    print("RESULT " + json.dumps(out))
    """
)


def test_vllm_discovers_the_entry_point_in_a_fresh_process() -> None:
    """vLLM's own load_general_plugins() finds ``specguard`` (pip install -e . registers it)."""
    from tests.integrations.vllm_harness import run_fresh_process

    proc, result = run_fresh_process(_FRESH_PROCESS, str(REPO))
    # Registered cheaply (nothing of the DeepSeek-V4 model package imported), patched on import.
    assert result == {"active": True, "quant_config_imported_by_plugin": False,
                      "resolver_imported_by_plugin": False, "patched_on_import": True}
    assert "vllm.specguard specguard: vllm.models.deepseek_v4.quant_config.DeepseekV4FP8Config " \
           "routes by what is stored (SPECGUARD_VLLM=fix, SPECGUARD_VLLM_GUARD=raise)" in proc.stderr
