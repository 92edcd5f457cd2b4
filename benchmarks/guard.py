"""LoadGuard's cost: the same ~1.1 GB load with and without the guard, one run.

The model is what the guard is for: DeepSeek-V4-shaped routed-expert layers in
vLLM 0.33's ModelOpt NVFP4 parameter layout (u8 packed FP4, E4M3 block scales,
f32 per-tensor scales; H=4096, I=2048 like V4-Flash, ~13.5 MB and 12
checkpoint tensors per expert), loaded expert by expert, shard by shard, with
the reference loader's vLLM semantics, plus BF16 dense projections loaded with
``load_state_dict``. Yardstick: the identical load without the guard.

Each load runs in a fresh process (a load happens once per server process, so
first-call costs count), alternating plain / guarded, page cache warm. Two
memory states: "fresh" (parameters straight from torch.empty, so first-touch
page faults fall inside the timed load: the guard's poison fill takes them
instead of the copies) and "touched" (every parameter zeroed before the timer
in both variants, which isolates the guard's own passes). Peak memory: peak
RSS (``ru_maxrss``) over the RSS just before the load (CPU);
``max_memory_allocated`` over the allocation before it (CUDA); tracemalloc's
peak for Python-side objects, taken in one extra, untimed load per cell
(tracing slows every Python allocation, the guard's write hooks included,
which no real load pays). Each guarded cell also prints where its time goes:
entry (the poison fill, including on fresh memory the page faults it takes
over from the load), the load under the write hooks (against the plain load)
and exit (the read-back check). The machine this was written on is a shared
2-core VM, so each cell also prints its fastest load (the least disturbed).

    python benchmarks/guard.py [--device cpu|cuda] [--rounds 5] [--experts 24] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import ml_dtypes
import numpy as np
import torch
from torch import nn

from specguard.checkpoint.writer import save_file, save_index
from specguard.guard import LoadGuard
from specguard.refdecoder.loader import ExpertConfig, ReferenceMoE, fixed_routing, read_tensors

H, INTER, LAYERS, DENSE = 4096, 2048, 3, 4


def write_checkpoint(root: Path, experts: int) -> int:
    """One shard per layer (bounded writer memory); returns total bytes."""
    rng = np.random.default_rng(0)
    weight_map: dict[str, str] = {}
    total = 0
    shards = [f"layers.{i}" for i in range(LAYERS)] + ["dense"]
    for n, stem in enumerate(shards):
        tensors: dict[str, np.ndarray] = {}
        if stem == "dense":
            for d in range(DENSE):
                w = rng.standard_normal((H, H), dtype=np.float32) * 0.02
                tensors[f"dense.{d}.weight"] = w.astype(ml_dtypes.bfloat16)
        else:
            for e in range(experts):
                for shard, (rows, cols) in (("w1", (INTER, H)), ("w3", (INTER, H)),
                                            ("w2", (H, INTER))):
                    name = f"{stem}.ffn.experts.{e}.{shard}"
                    tensors[f"{name}.weight"] = rng.integers(
                        0, 256, (rows, cols // 2), dtype=np.uint8)
                    tensors[f"{name}.weight_scale"] = rng.integers(
                        0x30, 0x50, (rows, cols // 16), dtype=np.uint8
                    ).view(ml_dtypes.float8_e4m3fn)
                    tensors[f"{name}.weight_scale_2"] = np.array(3e-4, dtype=np.float32)
                    tensors[f"{name}.input_scale"] = np.array(6e-3, dtype=np.float32)
        file = f"model-{n:05d}.safetensors"
        save_file(tensors, root / file)
        weight_map.update(dict.fromkeys(tensors, file))
        total += sum(a.nbytes for a in tensors.values())
        del tensors
    save_index(weight_map, root, total)
    config = {
        "model_type": "deepseek_v4", "num_hidden_layers": LAYERS, "num_nextn_predict_layers": 0,
        "n_routed_experts": experts, "hidden_size": H, "moe_intermediate_size": INTER,
        "expert_dtype": "fp4", "quantization_config": {"moe_quant_algo": "NVFP4"},
    }
    (root / "config.json").write_text(json.dumps(config))
    return total


class BenchModel(nn.Module):
    def __init__(self, config: ExpertConfig, device: str) -> None:
        super().__init__()
        self.moe = ReferenceMoE(config, fixed_routing("nvfp4"), device=device)
        self.dense = nn.ModuleList(
            nn.Linear(H, H, bias=False, dtype=torch.bfloat16, device=device) for _ in range(DENSE)
        )
        for p in self.dense.parameters():
            p.requires_grad_(False)

    def load(self, root: Path) -> None:
        experts = read_tensors(root, lambda n: self.moe.target(n) is not None)
        self.moe.load_weights(experts)
        dense = dict(read_tensors(root, lambda n: n.startswith("dense.")))
        self.dense.load_state_dict({k.removeprefix("dense."): v for k, v in dense.items()})


def current_rss() -> int:
    """Resident bytes now (Linux /proc); ru_maxrss is the peak since start."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


VARIANTS = ("plain", "guarded", "guarded+marker")


def child(root: Path, device: str, variant: str, touched: bool, trace: bool = False) -> dict:
    """One load in this (fresh) process; prints its measurements as JSON.
    ``trace``: measure Python-side allocations (tracemalloc), not time."""
    model = BenchModel(ExpertConfig.from_dir(root), device)  # torch.empty: pages untouched
    if touched:
        for p in model.parameters():
            p.data.zero_()
    n_tensors = sum(1 for _ in model.parameters())
    model_bytes = sum(p.nbytes for p in model.parameters())
    if device == "cuda":
        # A plain load launches no kernel (only host-to-device copies), so
        # without this the guard's first kernel would also pay the process's
        # CUDA kernel start-up (the run at commit 9ad0ea2 did not separate it).
        torch.ones(1, device=device).add_(1)
    _sync(device)
    rss0 = current_rss()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    cuda0 = torch.cuda.memory_allocated() if device == "cuda" else 0
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    ok, recorder, phases = None, 0, {}
    if variant == "plain":
        model.load(root)
        _sync(device)
    else:
        # ``with LoadGuard(...)`` spelled out, to time its phases: entry
        # (poison fill), the load under the write hooks, exit (read-back check)
        g = LoadGuard(model, policy="report", marker=variant == "guarded+marker")
        g.__enter__()
        _sync(device)
        t1 = time.perf_counter()
        model.load(root)
        _sync(device)
        t2 = time.perf_counter()
        recorder = g.recorder_bytes
        g.__exit__(None, None, None)
        _sync(device)
        phases = {"enter": t1 - t0, "load": t2 - t1, "exit": time.perf_counter() - t2}
        ok = g.report.ok
    seconds = time.perf_counter() - t0
    py_peak = tracemalloc.get_traced_memory()[1] if trace else None
    tracemalloc.stop()
    return {
        "seconds": seconds,
        "rss_growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0,
        "cuda_growth": (torch.cuda.max_memory_allocated() - cuda0) if device == "cuda" else 0,
        "py_peak": py_peak, "recorder": recorder, "ok": ok, "phases": phases,
        "tensors": n_tensors, "model_bytes": model_bytes,
        "ckpt_tensors": len(json.loads((root / "model.safetensors.index.json").read_text())[
            "weight_map"]),
    }


def run_child(root: Path, args: argparse.Namespace, variant: str, touched: bool,
              trace: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", str(root), "--device", args.device,
           "--threads", str(args.threads), "--variant", variant]
    if touched:
        cmd.append("--touched")
    if trace:
        cmd.append("--trace")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / 2**20:6.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--experts", type=int, default=24, help="experts per layer (24: ~1.1 GB)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1: stable on a shared 2-core box)")
    ap.add_argument("--states", default="fresh,touched",
                    help="memory states to measure: fresh, touched or both")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="loads to compare (plain is always included)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--variant", default="plain", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--touched", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        torch.set_num_threads(args.threads)
        print(json.dumps(child(args.child, args.device, args.variant, args.touched, args.trace)))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks/guard.py: --device cuda but no CUDA device is visible")
    states = [s.strip() for s in args.states.split(",")]
    if not set(states) <= {"fresh", "touched"}:
        sys.exit(f"benchmarks/guard.py: --states takes fresh and/or touched, not {args.states!r}")
    variants = tuple(v for v in VARIANTS if v == "plain" or v in args.variants.split(","))

    with tempfile.TemporaryDirectory(prefix="specguard-guard-bench-") as tmp:
        root = Path(tmp)
        size = write_checkpoint(root, args.experts)
        for f in root.glob("*.safetensors"):  # warm the page cache
            f.read_bytes()
        runs: dict[tuple[str, str], list[dict]] = {}
        for r in range(args.rounds):
            for state in states:
                order = variants if r % 2 == 0 else variants[::-1]  # cancel drift
                for v in order:
                    runs.setdefault((state, v), []).append(
                        run_child(root, args, v, state == "touched"))
        traced = {(state, v): run_child(root, args, v, state == "touched", trace=True)
                  for state in states for v in variants}

    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "-"
    first = runs[(states[0], "guarded")][0]
    print(f"LoadGuard overhead — device {args.device} ({gpu}), torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, {args.threads} torch thread(s)")
    print(f"model: {first['model_bytes'] / 1e9:.2f} GB in {first['tensors']} parameters, "
          f"checkpoint {size / 1e9:.2f} GB in {first['ckpt_tensors']} tensors, "
          f"{args.rounds} fresh-process loads per cell, order alternating")
    print("variants: plain = yardstick (no guard); guarded = LoadGuard defaults (integer "
          "tensors tracked, not filled); guarded+marker = LoadGuard(marker=True)")
    for state in states:
        report({v: runs[(state, v)] for v in variants}, args.device, state,
               {v: traced[(state, v)]["py_peak"] for v in variants})
    ok = all(r["ok"] for (_, v), rs in runs.items() if v != "plain" for r in rs)
    print(f"guard verdict on every complete load: {'clean' if ok else 'FINDINGS'}")


def report(cells: dict[str, list[dict]], device: str, state: str,
           py_peak: dict[str, int]) -> None:
    print(f"[{state} memory]")
    t = {v: [r["seconds"] for r in rs] for v, rs in cells.items()}
    med = {v: statistics.median(x) for v, x in t.items()}
    fast = {v: min(x) for v, x in t.items()}
    key = "cuda_growth" if device == "cuda" else "rss_growth"
    what = "CUDA peak alloc" if device == "cuda" else "peak RSS"
    mem = {v: statistics.median(r[key] for r in rs) for v, rs in cells.items()}
    for v in cells:
        over = "yardstick" if v == "plain" else (
            f"overhead median {100 * (med[v] / med['plain'] - 1):+5.1f} %, "
            f"fastest {100 * (fast[v] / fast['plain'] - 1):+5.1f} %")
        extra = "" if v == "plain" else f" ({mib(mem[v] - mem['plain'])} vs plain)"
        print(f"  {v:15s} median {med[v]:.3f} s  fastest {fast[v]:.3f} s  {over}; "
              f"{what} growth {mib(mem[v])}{extra}")
        print(f"  {'':15s} [{', '.join(f'{x:.3f}' for x in t[v])}]")
        if v != "plain":
            ph = {k: statistics.median(r["phases"][k] for r in cells[v]) for k in
                  ("enter", "load", "exit")}
            print(f"  {'':15s} phases (median): entry/poison {1e3 * ph['enter']:.1f} ms, load "
                  f"under hooks {1e3 * ph['load']:.1f} ms ({1e3 * (ph['load'] - med['plain']):+.1f}"
                  f" vs plain), exit/check {1e3 * ph['exit']:.1f} ms")
    if device == "cuda":
        rss = {v: statistics.median(r["rss_growth"] for r in rs) for v, rs in cells.items()}
        print("  host peak RSS growth: " + ", ".join(f"{v} {mib(rss[v])}" for v in cells))
    g = cells["guarded"]
    print(f"  Python objects (tracemalloc peak, separate untimed load): plain "
          f"{mib(py_peak['plain'])}, guarded {mib(py_peak['guarded'])}; write recorder at exit "
          f"{g[0]['recorder']} B for {g[0]['tensors']} parameters")


if __name__ == "__main__":
    main()
