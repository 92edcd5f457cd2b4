"""A synthetic DeepSeek-V4-sized checkpoint made of sparse files: real headers,
real index, data sections that are holes (the disk stays empty).

Shared by the header, route and lint benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path

DTYPE_BITS = {"U8": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F32": 32, "BF16": 16}


def _expert(prefix: str, fp4: str) -> list[tuple[str, str, list[int]]]:
    """One routed expert's tensors: w1, w2, w3 in NVFP4 (ModelOpt) or MXFP4 (DeepSeek)."""
    out = []
    for w, (o, i) in (("w1", (2048, 7168)), ("w2", (7168, 2048)), ("w3", (2048, 7168))):
        name = f"{prefix}.{w}"
        out.append((f"{name}.weight", "U8", [o, i // 2]))
        if fp4 == "nvfp4":
            out += [(f"{name}.weight_scale", "F8_E4M3", [o, i // 16]),
                    (f"{name}.weight_scale_2", "F32", []), (f"{name}.input_scale", "F32", [])]
        else:
            out.append((f"{name}.scale", "F8_E8M0", [o, i // 32]))
    return out


def tensor_list(n_tensors: int, layers: int = 43, draft_layers: int = 1) -> list[tuple[str, str, list[int]]]:
    """At least ``n_tensors`` tensors: main layers NVFP4, the MTP draft MXFP4 (scenario S1)."""
    tensors: list[tuple[str, str, list[int]]] = [("embed.weight", "BF16", [129280, 7168])]
    experts = max(1, n_tensors // ((layers * 12) + draft_layers * 3))
    for layer in range(layers):
        for lin in ("wq_a", "wq_b", "wkv", "wo_a", "wo_b"):
            tensors += [(f"layers.{layer}.attn.{lin}.weight", "F8_E4M3", [1024, 7168]),
                        (f"layers.{layer}.attn.{lin}.scale", "F8_E8M0", [8, 56])]
        for e in range(experts):
            tensors += _expert(f"layers.{layer}.ffn.experts.{e}", "nvfp4")
    for d in range(draft_layers):
        for e in range(experts):
            tensors += _expert(f"mtp.{d}.ffn.experts.{e}", "mxfp4")
    tensors.append(("head.weight", "BF16", [129280, 7168]))
    return tensors


def write_sparse(root: Path, n_tensors: int = 100_000, shards: int = 64, layers: int = 43) -> Path:
    """Write the checkpoint under ``root`` (reused when already there); ``layers`` main layers and one MTP layer."""
    marker = root / ".complete-v2"
    if marker.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    tensors = tensor_list(n_tensors, layers)
    per = -(-len(tensors) // shards)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        chunk = tensors[s * per : (s + 1) * per]
        header, offset = {}, 0
        for name, dtype, shape in chunk:
            n = DTYPE_BITS[dtype] // 8
            for d in shape:
                n *= d
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = fname
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(root / fname, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)  # a hole, not data
            _plausible_scales(f, 8 + len(raw), header)
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps(_config(n_tensors, layers)))
    marker.touch()
    return root


SCALE_PREFIX = 4096  # bytes of each block scale given real-looking values (what lint samples)


def _plausible_scales(f, data_start: int, header: dict) -> None:
    """Real-looking scale bytes where the content rules look, so lint sees a healthy
    checkpoint: E4M3 block scales spread over the mantissa, E8M0 ones two or
    three exponents wide, per-tensor F32 scales shared by an expert's w1/w3."""
    rng = random.Random(0)
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        n = min(end - begin, SCALE_PREFIX)
        if entry["dtype"] == "F8_E4M3" and name.endswith(".weight_scale"):
            data = bytes(rng.randrange(0x30, 0x7F) for _ in range(n))
        elif entry["dtype"] == "F8_E8M0":
            data = bytes(rng.randrange(0x78, 0x7B) for _ in range(n))
        elif entry["dtype"] == "F32" and entry["shape"] == []:
            data = struct.pack("<f", 2.0**-9 if name.endswith("weight_scale_2") else 2.0**-5)
        else:
            continue
        f.seek(data_start + begin)
        f.write(data)


def _config(n_tensors: int, layers: int = 43) -> dict:
    return {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "num_hidden_layers": layers,
        "num_nextn_predict_layers": 1, "expert_dtype": "fp4",
        "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "weight_block_size": [128, 128],
            "moe_quant_algo": "NVFP4", "ignored_layers": ["mtp.*"],
        },
    }


def default_root() -> Path:
    return Path(os.environ.get("SPECGUARD_BENCH_DIR", "/tmp/specguard-bench")) / "v4-100k"


def bench_checkpoint(doc: str | None = None, repeat: int = 3) -> tuple[Path, argparse.Namespace]:
    """Parse the common benchmark flags and return the (cached) synthetic checkpoint."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--tensors", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=repeat)
    args = ap.parse_args()
    root = write_sparse(default_root().with_name(f"v4-{args.tensors}-{args.shards}"), args.tensors, args.shards)
    return root, args


def take_turns(
    fns: dict[str, Callable[[Path], object]], root: Path, repeat: int, cpu: dict[str, float] | None = None,
    cpu_turns: dict[str, list[float]] | None = None,
) -> tuple[dict, dict]:
    """Best time and last result of each function, taking turns so machine noise hits all alike.

    ``cpu``, when given, receives each function's best CPU time (this process's user +
    system): on a shared machine wall time also counts the waits for other processes.
    ``cpu_turns``, when given, receives every turn's CPU time per function (``paired``)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    cpus: dict[str, list[float]] = {k: [] for k in fns}
    results: dict[str, object] = {}
    for _ in range(repeat):
        for label, fn in fns.items():
            c, t = time.process_time(), time.perf_counter()
            results[label] = fn(root)
            times[label].append(time.perf_counter() - t)
            cpus[label].append(time.process_time() - c)
    if cpu is not None:
        cpu.update({k: min(v) for k, v in cpus.items()})
    if cpu_turns is not None:
        cpu_turns.update(cpus)
    return {k: min(v) for k, v in times.items()}, results


def paired(ours: list[float], base: list[float]) -> str:
    """The ratio ours / base turn by turn (the two ran back to back), as its median and range.

    The best of each alone can come from different moments: on these VMs a phase of
    seconds runs everything 1.5x faster or slower, and one lucky turn of the yardstick
    then moves the ratio of bests by 0.2-0.8 (benchmarks/results/headers.txt). A turn's
    pair shares its moment."""
    ratios = sorted(a / b for a, b in zip(ours, base, strict=True))
    mid = len(ratios) // 2
    median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    return f"{median:.2f} (median of {len(ratios)} turns; {ratios[0]:.2f}-{ratios[-1]:.2f})"


def machine() -> str:
    """The CPU, its count and load (these machines are shared), OS and Python: printed with each result."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"machine: {cpu}, {os.cpu_count()} CPUs (load average {load}), {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")
