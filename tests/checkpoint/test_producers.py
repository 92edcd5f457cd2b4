"""Ground truth from tools nobody here wrote.

tests/data/producers/<name>/ holds checkpoints written by llm-compressor,
nvidia-modelopt and auto-round (scripts/producers/make_fixtures.py), each with
an expected.json derived from the recipe handed to the tool -- not from the
headers. Every module must classify as that recipe says: from the header
alone, or -- where the header is ``ambiguous`` (a U8 block scale) -- once its
scale bytes have been sniffed.

Two disagreements this test found were classifier bugs, since fixed: ModelOpt's
4-D FP8 block scale ``[rows, 1, cols, 1]`` and compressed-tensors int4 with a
single group per row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

from specguard.checkpoint import open_checkpoint
from specguard.formats import classify
from specguard.formats.settle import settle

DATA = Path(__file__).resolve().parents[1] / "data" / "producers"
FIXTURES = sorted(p.name for p in DATA.iterdir() if (p / "expected.json").is_file())

# Suffixes the producers write after a module name (tensor = module + "." + suffix).
PARAM_SUFFIXES = frozenset({
    "weight", "bias", "weight_scale", "weight_scale_inv", "weight_scale_2", "input_scale",
    "weight_packed", "weight_global_scale", "input_global_scale", "weight_zero_point",
    "weight_g_idx", "weight_shape", "qweight", "qzeros", "scales", "g_idx", "k_scale",
    "v_scale", "pre_quant_scale", "input_zero_point", "input_scale_2", "output_scale", "SCB",
    "weight_format",
})
# Written after ``<module>.weight.``: bitsandbytes' 4-bit quant state, quanto's qtensor parts.
WEIGHT_PARTS = ("absmax", "quant_map", "nested_absmax", "nested_quant_map", "quant_state.bitsandbytes__nf4",
                "quant_state.bitsandbytes__fp4", "_data", "_data._data", "_scale", "_shift")


def _module_of(key: str) -> str:
    """The module a producer's tensor belongs to (its name minus the parameter part)."""
    for part in WEIGHT_PARTS:
        if key.endswith(".weight." + part):
            return key.removesuffix(".weight." + part)
    stem, _, suffix = key.rpartition(".")
    if suffix in PARAM_SUFFIXES or suffix.startswith("_weight_"):  # torchao: <module>._weight_qdata
        return stem
    if stem.endswith(".experts") and suffix in ("gate_up_proj", "down_proj"):
        return stem  # transformers 5 fused experts: parameters of the ``experts`` module
    return key


def _expected(name: str) -> dict[str, Any]:
    return json.loads((DATA / name / "expected.json").read_text())


# (fixture, module) -> what the header says and why the classifier disagrees.


def _safetensors_files(name: str) -> list[Path]:
    return sorted((DATA / name).glob("*.safetensors"))


def _mismatch(exp: dict[str, Any], scheme: Any) -> str | None:
    """Why the classified scheme is not what the recipe says (None when it is)."""
    diffs = []
    if scheme.format != exp["format"]:
        diffs.append(f"format {scheme.format} != {exp['format']} ({scheme.reason})")
    if "group_size" in exp and scheme.group_size != exp["group_size"]:
        diffs.append(f"group_size {scheme.group_size} != {exp['group_size']}")
    if "block" in exp and list(scheme.block or ()) != exp["block"]:
        diffs.append(f"block {scheme.block} != {exp['block']}")
    # The header cannot always name the writer (FP8 weight+weight_scale looks the
    # same from every stack): an absent convention is fine, a wrong one is not.
    if scheme.convention is not None and scheme.convention != exp["convention"]:
        diffs.append(f"convention {scheme.convention} != {exp['convention']}")
    return "; ".join(diffs) or None


def test_fixtures_exist() -> None:
    tools = {_expected(n)["producer"] for n in FIXTURES}
    assert {"llm-compressor"} <= tools, tools
    assert len(FIXTURES) >= 9


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_is_valid_safetensors(name: str) -> None:
    """The committed files open with the reference reader and hold exactly the
    modules the recipe's architecture has."""
    files = _safetensors_files(name)
    assert files, f"{name}: no safetensors file"
    modules: set[str] = set()
    for f in files:
        with safe_open(f, framework="numpy") as st:
            for key in st.keys():  # noqa: SIM118 - safe_open is not a Mapping
                sl = st.get_slice(key)
                assert sl.get_dtype(), key
                modules.add(_module_of(key))
    assert modules == set(_expected(name)["modules"])


def _settled(name: str) -> dict[str, Any]:
    """Every module's scheme, ambiguous ones settled by their scale bytes."""
    ckpt = open_checkpoint(DATA / name)
    table = classify(ckpt)
    return {m.name: (m.scheme, settle(ckpt, m)[0]) for m in table}


@pytest.mark.parametrize("name", FIXTURES)
def test_every_module_classified_as_the_recipe_says(name: str) -> None:
    expected = _expected(name)["modules"]
    schemes = _settled(name)
    assert set(schemes) == set(expected)
    wrong = {}
    for module, (header_only, settled) in schemes.items():
        exp = expected[module]
        if header_only.format not in (exp["format"], "ambiguous"):
            settled = header_only  # settling must not be what makes it right
        why = _mismatch(exp, settled)
        if why:
            wrong[module] = why
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in sorted(wrong.items()))


@pytest.mark.parametrize("name", FIXTURES)
def test_inspect_shows_no_unknown_or_ambiguous(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """What `specguard inspect` prints for every real-tool checkpoint: every module named."""
    from specguard.cli import main

    assert main(["inspect", str(DATA / name), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    records = out["records"]
    formats = {r["module"]: r["format"] for r in records}
    assert set(formats) == set(_expected(name)["modules"])
    bad = {m: f for m, f in formats.items() if f in ("unknown", "ambiguous")}
    assert not bad, bad
