"""A format is declared once (issue 24 item 5): one registered spec per (format,
convention) in formats/specs.py, which classification (the header signature), SG202
(tensors the engine reads), SG402 (what the scale bytes hold) and the codecs
(codecs/packing.py) read; no rule keeps its own table of formats."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specguard.checkpoint.header import TensorInfo
from specguard.codecs.packing import LAYOUTS
from specguard.formats import scheme as s
from specguard.formats.classify import classify_params
from specguard.formats.scheme import Format, Scheme
from specguard.formats.sniff import E4M3, E8M0
from specguard.formats.specs import SPECS, FormatSpec, needs, spec_for

LINT = Path(__file__).resolve().parents[2] / "src" / "specguard" / "lint"
NOT_QUANTIZED = {s.BF16, s.FP16, s.FP32, s.FP8_KV, s.PLAIN_TENSOR, s.MIXED, s.UNKNOWN, s.AMBIGUOUS}


def test_every_quantized_format_has_a_spec():
    missing = [f for f in Format if f not in NOT_QUANTIZED and not any(k[0] == f for k in SPECS)]
    assert not missing


def test_every_codec_layout_reads_its_spec():
    assert set(LAYOUTS) <= set(SPECS), set(LAYOUTS) - set(SPECS)
    for key, lay in LAYOUTS.items():
        assert lay.e8m0_scale == (SPECS[key].scale_element == E8M0), key


def test_mxfp8_is_checked_like_the_other_block_formats():
    """MXFP8 has a packing layout; SG202 now knows its tensors and SG402 its E8M0 scale."""
    for conv in (s.COMPRESSED_TENSORS, None):
        sc = Scheme(s.MXFP8, conv, group_size=32)
        assert needs(sc) and spec_for(sc) is not None and spec_for(sc).scale_element == E8M0
    assert spec_for(Scheme(s.NVFP4, s.MODELOPT)).scale_element == E4M3


def _format_keyed_tables(path: Path) -> list[str]:
    """Dict literals keyed by a Format constant (``{s.NVFP4: ...}``, ``{(s.NVFP4, s.MODELOPT): ...}``)."""
    names = {f.name for f in Format}

    def is_format(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Tuple):
            return any(is_format(e) for e in node.elts)
        if isinstance(node, ast.Attribute):
            return node.attr in names
        return isinstance(node, ast.Name) and node.id in names

    return [f"{path.name}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Dict) and any(is_format(k) for k in node.keys)]


def test_no_rule_keeps_its_own_format_table():
    found = [hit for path in sorted(LINT.glob("*.py")) for hit in _format_keyed_tables(path)]
    assert not found, "read formats/specs.py instead: " + ", ".join(found)


def _module(spec: FormatSpec, scale_dtype: str, with_marks: bool = True) -> dict[str, TensorInfo]:
    """A module's header built from a spec's identity alone: 64 output rows, 256 inputs."""
    ident = spec.identity
    assert ident is not None
    wdtype = "U8" if "U8" in ident.weight_dtypes else sorted(ident.weight_dtypes)[0]
    per_byte = 2 if wdtype in ("U8", "I8") else 1
    group = ident.group or 32
    scale = ident.scale_params[0] if ident.scale_params else "weight_scale"
    out, inp = 64, 256
    weight_shape = (out, inp // 32, 16) if ident.weight == "blocks" else (out, inp // per_byte)
    scale_shape = (out, inp // 32) if ident.weight == "blocks" else (out, inp // group)
    params = {ident.weight: TensorInfo(wdtype, weight_shape, (0, 1)),
              scale: TensorInfo(scale_dtype, scale_shape, (0, 1))}
    extra = (ident.requires | set(ident.companions) | ident.marks) - (set() if with_marks else ident.marks)
    params.update({p: TensorInfo("F32", (), (0, 4)) for p in extra})
    return params


IDENTIFIED = [spec for spec in SPECS.values() if spec.identity is not None]


@pytest.mark.parametrize("spec", IDENTIFIED, ids=lambda spec: f"{spec.format}-{spec.convention}")
def test_classification_reads_each_spec(spec: FormatSpec):
    """Issue 24 item 5: classify names the format a spec's identity describes (the header's
    dtypes and shapes alone), and a U8 scale the spec leaves to the bytes stays ambiguous
    with the spec's format as the guess until settle.py reads them."""
    ident = spec.identity
    labeled = sorted(ident.scale_dtypes - ident.unlabeled) or ["U8"]
    got = classify_params(_module(spec, labeled[0])).scheme
    assert (got.format, got.convention or None) == (spec.format, spec.convention or None), got
    if "U8" in ident.unlabeled and "U8" in ident.scale_dtypes:
        guess = classify_params(_module(spec, "U8", with_marks=False)).scheme
        assert guess.format == s.AMBIGUOUS and str(spec.format) in (guess.reason or ""), guess


def test_every_format_the_header_rules_name_has_an_identity():
    """The FP4 and MX formats are named by their specs only: formats/classify.py holds no
    constant of theirs (a second list would drift, as MXFP8's did)."""
    named = {str(spec.format) for spec in IDENTIFIED}
    assert {"nvfp4", "mxfp4", "mxfp8"} <= named
    text = (Path(s.__file__).parent / "classify.py").read_text()
    names = {f.name for f in Format if str(f) in named}
    assert not [n for n in names if f"s.{n}" in text]
