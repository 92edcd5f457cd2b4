"""A format is declared once (issue 24 item 5): one registered spec per (format,
convention) in formats/specs.py, which SG202 (tensors the engine reads), SG402 (what
the scale bytes hold) and the codecs (codecs/packing.py) read; no rule keeps its own
table of formats."""

from __future__ import annotations

import ast
from pathlib import Path

from specguard.codecs.packing import LAYOUTS
from specguard.formats import scheme as s
from specguard.formats.scheme import Format, Scheme
from specguard.formats.sniff import E4M3, E8M0
from specguard.formats.specs import SPECS, needs, spec_for

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
