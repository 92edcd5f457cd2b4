"""The sniffer on scale bytes written by the project's real codecs."""

from __future__ import annotations

import numpy as np
import pytest

from specguard import codecs
from specguard.formats import scheme as s
from specguard.formats.sniff import E4M3, E8M0, sniff_scale_bytes


@pytest.mark.parametrize("sigma", [0.002, 0.02, 0.2, 2.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_mxfp4_scales_read_as_e8m0_and_nvfp4_as_e4m3(sigma, seed):
    w = np.random.default_rng(seed).normal(0, sigma, (256, 512)).astype(np.float32)
    mx = codecs.quantize(s.MXFP4, w, convention=s.DEEPSEEK)["scale"]
    nv = codecs.quantize(s.NVFP4, w, convention=s.MODELOPT)["weight_scale"]
    a, b = sniff_scale_bytes(mx.view(np.uint8)), sniff_scale_bytes(nv.view(np.uint8))
    assert (a.dtype, b.dtype) == (E8M0, E4M3)
    assert a.confidence > 0.95 and b.confidence > 0.95
    assert a.bytes_read == mx.size


def test_fp8_block_e8m0_scales_and_heavy_tailed_weights():
    rng = np.random.default_rng(3)
    w = (rng.standard_t(3, (512, 1024)) * 0.05).astype(np.float32)
    blk = codecs.quantize(s.FP8_BLOCK, w, convention=s.DEEPSEEK)
    scale = next(v for k, v in blk.items() if k != "weight")
    assert sniff_scale_bytes(scale.view(np.uint8)).dtype == E8M0
    nv = codecs.quantize(s.NVFP4, w, convention=s.MODELOPT)["weight_scale"]
    assert sniff_scale_bytes(nv.view(np.uint8)).dtype == E4M3


def test_sign_bit_rules_out_e4m3():
    r = sniff_scale_bytes(bytes([0x7A, 0x7B, 0x81, 0x7A]))
    assert r.dtype == E8M0 and r.confidence >= 0.99 and "sign bit" in r.evidence


def test_empty():
    assert sniff_scale_bytes(b"").dtype is None


@pytest.mark.parametrize("n", [1, 2, 3, 50, 100, 101, 4095, 4096])
def test_percentiles_read_off_histograms_are_numpys_to_the_bit(n):
    """sniff_many reads the 1st-99th percentile spread off each sample's byte histogram; numpy's
    own ``np.percentile`` over the bytes is the ground truth, bit for bit (the evidence prints it,
    the confidence is a function of it)."""
    from specguard.formats.sniff import _percentile_spreads, sniff_many

    rng = np.random.default_rng(n)
    rows = np.stack([rng.integers(0, 256, n, dtype=np.uint8), rng.integers(120, 128, n, dtype=np.uint8),
                     np.clip(rng.normal(100, 7.3, n), 0, 255).astype(np.uint8),
                     np.clip(rng.standard_t(2, n) * 3 + 60, 0, 255).astype(np.uint8), np.full(n, 7, np.uint8)])
    counts = np.stack([np.bincount(r, minlength=256) for r in rows])
    want = np.diff(np.percentile(rows, [1, 99], axis=1), axis=0)[0]
    assert _percentile_spreads(counts, n).tobytes() == want.tobytes()
    got = sniff_many([r.tobytes() for r in rows])
    for r, sn, spread in zip(rows, got, want.tolist(), strict=True):
        if not np.count_nonzero((r >= 0x80) & (r != 0xFF)):
            words = f"{np.count_nonzero(np.bincount(r))} distinct codes, 1st-99th percentile spread {spread:.0f} codes"
            assert sn.evidence.startswith(f"{words}, max 0x{int(r.max()):02X}")
