"""Dequantize throughput per format, next to a memory copy counted the same way.

Bytes counted: every stored tensor read + the dequantized output written.
Yardstick, measured in the same run, interleaved with the codec runs: a copy
of a buffer as large as the output, counted as bytes read + bytes written.

CPU (default): the numpy back end (float32 output into a reused buffer, one
thread) against ``np.copyto`` into a reused buffer. Goal: >= 0.25x.
GPU (``--device cuda``): the torch back end with ``compile=True`` (bfloat16
output, what an engine loads) against a device-to-device ``Tensor.copy_``.
Goal: >= 0.6x. Each format's compiled GPU result is checked bit for bit against
the eager torch back end (itself bit-identical to numpy: tests/codecs).

    python benchmarks/codecs.py [--device cpu|cuda] [--rows 4096] [--cols 4096] [--repeat 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

from specguard import codecs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the codec table the tests share
from tests.codecs.cases import TABLE as SHARED
from tests.codecs.cases import decode_options as dequant_opts

# (label, format, convention, quantize options, experts): the benchmarked rows of the
# table the codec tests use (tests/codecs/cases.py); experts > 1 stacks the weight.
CASES = [(c.label, c.format, c.convention, dict(c.options), c.experts) for c in SHARED if c.experts]


def weights(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape, dtype=np.float32)


def shape_of(experts: int, rows: int, cols: int) -> tuple[int, ...]:
    return (experts, rows // experts, cols) if experts > 1 else (rows, cols)


def once(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_cpu(rows: int, cols: int, repeat: int) -> None:
    out_bytes = rows * cols * 4
    src = np.ones(out_bytes, np.uint8)
    dst = np.empty_like(src)
    copy = partial(np.copyto, dst, src)
    print(f"CPU, numpy back end (one thread), float32 output, {rows}x{cols} weights; "
          f"yardstick np.copyto of {out_bytes >> 20} MiB (bytes read + written)")
    print(f"{'format':40s} {'ms':>8s} {'GB/s':>8s} {'copy GB/s':>10s} {'ratio':>6s}")
    ratios = []
    for label, fmt, conv, opts, experts in CASES:
        shape = shape_of(experts, rows, cols)
        q = codecs.quantize(fmt, weights(shape), convention=conv, **opts)
        buf = np.empty(shape, np.float32)  # reused, as the copy reuses dst
        run = partial(codecs.dequantize, fmt, q, convention=conv, out=buf, **dequant_opts(opts))
        moved = sum(v.nbytes for v in q.values()) + out_bytes
        run()
        t_cp, t_dq = [], []
        for _ in range(repeat):  # interleaved, so both see the same machine load
            t_cp.append(once(copy))
            t_dq.append(once(run))
        bw = moved / min(t_dq) / 1e9
        copy_bw = 2 * out_bytes / min(t_cp) / 1e9
        ratios.append(bw / copy_bw)
        print(f"{label:40s} {min(t_dq) * 1e3:8.1f} {bw:8.2f} {copy_bw:10.2f} {bw / copy_bw:6.2f}")
    print(f"geometric mean ratio {np.exp(np.mean(np.log(ratios))):.2f} "
          f"(min {min(ratios):.2f}); goal >= 0.25")


def run_cuda(rows: int, cols: int, repeat: int) -> None:
    import torch

    from specguard.codecs import torch_backend as T

    dev = torch.device("cuda")
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}; torch back end, "
          f"compile=True, bfloat16 output, {rows}x{cols} weights quantized on the GPU; "
          f"yardstick device-to-device copy of the output's bytes (read + written); "
          f"exact = compiled output equals the eager torch back end bit for bit")
    print(f"{'format':40s} {'us':>8s} {'GB/s':>8s} {'copy GB/s':>10s} {'ratio':>6s} exact")
    ratios = []
    for label, fmt, conv, opts, experts in CASES:
        w = torch.randn(shape_of(experts, rows, cols), device=dev)
        q = T.quantize(fmt, w, convention=conv, **opts)
        del w
        dq = dequant_opts(opts)
        run = partial(T.dequantize, fmt, q, convention=conv, dtype=torch.bfloat16, compile=True,
                      **dq)
        out = run()
        eager = T.dequantize(fmt, q, convention=conv, dtype=torch.bfloat16, **dq)
        exact = bool(torch.equal(out.view(torch.int16), eager.view(torch.int16)))
        del eager
        src = torch.empty(out.numel() * out.element_size(), dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        moved = sum(v.numel() * v.element_size() for v in q.values()) + src.numel()
        t_cp = cuda_time(partial(dst.copy_, src), repeat)
        t_dq = cuda_time(run, repeat)
        bw = moved / t_dq / 1e9
        copy_bw = 2 * src.numel() / t_cp / 1e9
        ratios.append(bw / copy_bw)
        print(f"{label:40s} {t_dq * 1e6:8.1f} {bw:8.0f} {copy_bw:10.0f} {bw / copy_bw:6.2f} "
              f"{'yes' if exact else 'NO'}", flush=True)
        del q, out, src, dst
    print(f"geometric mean ratio {np.exp(np.mean(np.log(ratios))):.2f} "
          f"(min {min(ratios):.2f}); goal >= 0.6")


def cuda_time(fn, repeat: int, inner: int = 10) -> float:
    """Best of ``repeat`` CUDA-event timings, each the mean of ``inner`` back-to-back calls."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / inner / 1e3)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--cols", type=int, default=None)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--only", default="", help="run the formats whose label contains this")
    a = p.parse_args()
    CASES[:] = [c for c in CASES if a.only in c[0]]
    if a.device == "cpu":
        run_cpu(a.rows or 4096, a.cols or 4096, a.repeat)
    else:
        run_cuda(a.rows or 32768, a.cols or 8192, a.repeat)


if __name__ == "__main__":
    main()
