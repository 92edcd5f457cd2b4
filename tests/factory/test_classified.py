"""specguard's own reader and classifier see every module as the factory built it."""

from __future__ import annotations

import pytest

from specguard.checkpoint.source import open_checkpoint
from specguard.factory import SCENARIOS
from specguard.formats import classify
from specguard.formats.scheme import AMBIGUOUS, FP8_BLOCK, MXFP4, MXFP8, NVFP4
from specguard.formats.settle import settle
from specguard.formats.sniff import E4M3, E8M0, sniff_scale_bytes
from tests.factory.conftest import checkpoints

# What the bytes of a 1-byte block scale hold, by stored format.
SCALE_BYTES = {NVFP4: E4M3, MXFP4: E8M0, MXFP8: E8M0, FP8_BLOCK: E8M0}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_module_classified_as_expected(written, name: str) -> None:
    for path, expected in checkpoints(written[name]):
        ckpt = open_checkpoint(path)
        table = classify(ckpt)
        assert {m.name for m in table} == set(expected)
        for module in table:
            exp = expected[module.name]
            scheme = module.scheme
            if scheme.format == AMBIGUOUS and scheme.candidates:  # a pack width in weight_shape's bytes
                scheme, _ = settle(ckpt, module)
            got = scheme.format
            if got == AMBIGUOUS:  # header cannot tell a U8 scale: the bytes must
                scale = next(t for p, t in module.params.items() if "scale" in p)
                sniff = sniff_scale_bytes(ckpt.read_bytes(scale.name))
                assert sniff.dtype == SCALE_BYTES[exp.format], (module.name, sniff)
                continue
            assert got == exp.format, (module.name, scheme)
            assert tuple(module.missing) == exp.missing, module.name
            if exp.quantized and scheme.group_size and exp.scheme.group_size:
                assert scheme.group_size == exp.scheme.group_size, module.name


def test_ambiguous_case_is_exercised(written) -> None:
    table = classify(open_checkpoint(written["s1-u8"].path))
    assert any(m.scheme.format == AMBIGUOUS for m in table)
