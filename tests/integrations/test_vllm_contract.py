"""What the plugin expects of vLLM, checked on the installed vLLM 0.33 (0.32: in its probe,
tests/engines/test_engine_versions.py), and hostile checkpoints under the plugin: vLLM's own
methods and vLLM's own load error, with one specguard warning, never an exception of specguard's."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.integrations.vllm import contract
from tests.integrations import plugin_checks


def test_contract_holds_on_the_installed_vllm() -> None:
    assert contract.missing() == []


def test_contract_names_what_a_version_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.model_executor.layers.quantization import fp8

    def get_quant_method(self, module, name):  # a vLLM that renamed the parameters
        return None

    monkeypatch.setattr(fp8.Fp8Config, "get_quant_method", get_quant_method)
    monkeypatch.delattr(fp8, "Fp8LinearMethod")
    lines = contract.missing()
    assert len(lines) == 2, lines
    assert "Fp8Config.get_quant_method(self, module, name)" in lines[0]
    assert lines[1].startswith(f"{fp8.__name__}.Fp8LinearMethod: missing")


@pytest.mark.parametrize("kind", plugin_checks.HOSTILE)
def test_hostile_checkpoint_is_vllms_behaviour_and_one_warning(kind: str, ckpt_root: Path, cpu_vllm: None) -> None:
    got = plugin_checks.hostile(kind, ckpt_root / "hostile")
    assert got["plugin"] == got["vllm"]
    assert got["vllm"]["load"] != "clean"
    assert len(got["warnings"]) == 1 and "cannot read" in got["warnings"][0], got["warnings"]
    assert got["decisions"] == 0
