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
peak for Python-side objects. The machine this was written on is a shared
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
from specguard.engine.loader import ExpertConfig, ReferenceMoE, fixed_routing, read_tensors
from specguard.guard import LoadGuard

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


def child(root: Path, device: str, guarded: bool, touched: bool) -> dict:
    """One load in this (fresh) process; prints its measurements as JSON."""
    model = BenchModel(ExpertConfig.from_dir(root), device)  # torch.empty: pages untouched
    if touched:
        for p in model.parameters():
            p.data.zero_()
    n_tensors = sum(1 for _ in model.parameters())
    model_bytes = sum(p.nbytes for p in model.parameters())
    _sync(device)
    rss0 = current_rss()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    cuda0 = torch.cuda.memory_allocated() if device == "cuda" else 0
    tracemalloc.start()
    t0 = time.perf_counter()
    ok, recorder = None, 0
    if guarded:
        with LoadGuard(model, policy="report") as g:
            model.load(root)
            recorder = g.recorder_bytes
        _sync(device)
        ok = g.report.ok
    else:
        model.load(root)
        _sync(device)
    seconds = time.perf_counter() - t0
    py_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "seconds": seconds,
        "rss_growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0,
        "cuda_growth": (torch.cuda.max_memory_allocated() - cuda0) if device == "cuda" else 0,
        "py_peak": py_peak, "recorder": recorder, "ok": ok,
        "tensors": n_tensors, "model_bytes": model_bytes,
        "ckpt_tensors": len(json.loads((root / "model.safetensors.index.json").read_text())[
            "weight_map"]),
    }


def run_child(root: Path, args: argparse.Namespace, guarded: bool, touched: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", str(root), "--device", args.device,
           "--threads", str(args.threads)]
    if guarded:
        cmd.append("--guarded")
    if touched:
        cmd.append("--touched")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / 2**20:8.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--experts", type=int, default=24, help="experts per layer (24: ~1.1 GB)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1: stable on a shared 2-core box)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--guarded", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--touched", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        torch.set_num_threads(args.threads)
        print(json.dumps(child(args.child, args.device, args.guarded, args.touched)))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks/guard.py: --device cuda but no CUDA device is visible")

    with tempfile.TemporaryDirectory(prefix="specguard-guard-bench-") as tmp:
        root = Path(tmp)
        size = write_checkpoint(root, args.experts)
        for f in root.glob("*.safetensors"):  # warm the page cache
            f.read_bytes()
        runs: dict[tuple[bool, bool], list[dict]] = {}
        for r in range(args.rounds):  # alternate the order to cancel drift
            for touched in (False, True):
                order = (False, True) if r % 2 == 0 else (True, False)
                for g in order:
                    runs.setdefault((touched, g), []).append(run_child(root, args, g, touched))

    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "-"
    first = runs[(False, True)][0]
    print(f"LoadGuard overhead — device {args.device} ({gpu}), torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, {args.threads} torch thread(s)")
    print(f"model: {first['model_bytes'] / 1e9:.2f} GB in {first['tensors']} parameters, "
          f"checkpoint {size / 1e9:.2f} GB in {first['ckpt_tensors']} tensors, "
          f"{args.rounds} fresh-process loads per cell, alternating")
    ok = all(r["ok"] for (_, g), rs in runs.items() if g for r in rs)
    for touched in (False, True):
        report(runs[(touched, False)], runs[(touched, True)], args.device,
               "touched" if touched else "fresh")
    print(f"guard verdict on every complete load: {'clean' if ok else 'FINDINGS'}")


def report(plain: list[dict], guarded: list[dict], device: str, state: str) -> None:
    tp = [r["seconds"] for r in plain]
    tg = [r["seconds"] for r in guarded]
    mp, mg = statistics.median(tp), statistics.median(tg)
    n = guarded[0]["tensors"]
    print(f"[{state} memory]")
    fp, fg = min(tp), min(tg)
    print(f"  load time, plain (yardstick): median {mp:.3f} s, fastest {fp:.3f} s  "
          f"[{', '.join(f'{t:.3f}' for t in tp)}]")
    print(f"  load time, guarded          : median {mg:.3f} s, fastest {fg:.3f} s  "
          f"[{', '.join(f'{t:.3f}' for t in tg)}]")
    print(f"  overhead: median {100 * (mg / mp - 1):+.1f} % (ratio {mg / mp:.3f}), "
          f"fastest {100 * (fg / fp - 1):+.1f} % (ratio {fg / fp:.3f}); goal <= 5 %")
    key = "cuda_growth" if device == "cuda" else "rss_growth"
    what = "CUDA max_memory_allocated" if device == "cuda" else "peak RSS (ru_maxrss)"
    pp = statistics.median(r[key] for r in plain)
    pg = statistics.median(r[key] for r in guarded)
    print(f"  {what} growth over the load: plain {mib(pp)}, guarded {mib(pg)}, "
          f"difference {mib(pg - pp)} over {n} parameters")
    if device == "cuda":
        rp = statistics.median(r["rss_growth"] for r in plain)
        rg = statistics.median(r["rss_growth"] for r in guarded)
        print(f"  host peak RSS growth: plain {mib(rp)}, guarded {mib(rg)}")
    print(f"  tracemalloc peak (Python objects): plain "
          f"{mib(statistics.median(r['py_peak'] for r in plain))}, guarded "
          f"{mib(statistics.median(r['py_peak'] for r in guarded))}; "
          f"write recorder at exit {guarded[0]['recorder']} B")


if __name__ == "__main__":
    main()
