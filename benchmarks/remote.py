"""`specguard inspect --remote` against huggingface_hub's `get_safetensors_metadata`,
in the same run, against the same Hub-protocol server (tests/checkpoint/hubserver.py,
run in its own process) with a delay added to every request: a network's round trip.

The checkpoints are the synthetic DeepSeek-V4-shaped ones of synth.py (sparse
files: the server reads only the ranges asked for), at about 625 tensors per
shard: 64 shards (~40,000 tensors) and 163 shards (a DeepSeek-V3's count, ~100,000).
Each run is a fresh process with empty caches; specguard's second audit of the
same commit (its cache) is shown too. Prints wall time, requests and bytes for both.

    python benchmarks/remote.py [--shards 64 163] [--delay 0.05] [--repeat 3]

Goals at 50 ms per request: specguard's whole run <= 0.5x the peer's time, at most
shards + 4 requests, at most 1.05x the bytes a reader needs (every shard's header,
the index and the config files).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synth import default_root, machine, write_sparse

REPO = Path(__file__).resolve().parent.parent
TENSORS_PER_SHARD = 625  # the 40,000 tensors in 64 shards
PEER = (
    "from huggingface_hub import get_safetensors_metadata as g; "
    "m = g('acme/bench'); print(sum(len(f.tensors) for f in m.files_metadata.values()))"
)


def needed_bytes(root: Path) -> tuple[int, int]:
    """(every shard's 8 + header bytes, index + config bytes): what any reader must fetch."""
    headers = 0
    for p in root.glob("*.safetensors"):
        with open(p, "rb") as f:
            headers += 8 + struct.unpack("<Q", f.read(8))[0]
    small = sum(p.stat().st_size for p in root.glob("*.json"))
    return headers, small


class Server:
    def __init__(self, root: Path, delay: float) -> None:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.checkpoint.hubserver", f"acme/bench={root}", "--delay", str(delay)],
            stdout=subprocess.PIPE, text=True, env=env, cwd=REPO,
        )
        self.endpoint = self.proc.stdout.readline().strip()

    def control(self, what: str) -> dict:
        with urllib.request.urlopen(f"{self.endpoint}/_{what}") as r:
            return json.loads(r.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def timed(server: Server, cmd: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """Wall time of one run, and the server's count of its requests and bytes, plus
    the run's CPU seconds (user + system; on a shared machine, wall time waits for others)."""
    server.control("reset")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, {**server.control("stats"), "cpu": cpu}


def read_in_process(label: str, server: Server, tmp: str) -> tuple[float, dict]:
    """Only the reading, in this process (no interpreter start, imports, classification
    or printing): specguard's open_checkpoint(--remote) or the peer's call."""
    import huggingface_hub
    from huggingface_hub import constants

    from specguard.checkpoint import open_checkpoint

    constants.HF_HUB_CACHE = f"{tmp}/hf-in-process"  # a fresh cache: the peer downloads the index again
    os.environ["XDG_CACHE_HOME"] = f"{tmp}/xdg-in-process"
    os.environ["HF_ENDPOINT"] = server.endpoint
    server.control("reset")
    cpu, t = time.process_time(), time.perf_counter()
    if "specguard" in label:
        open_checkpoint("acme/bench", remote=True)
    else:
        huggingface_hub.HfApi(endpoint=server.endpoint).get_safetensors_metadata("acme/bench")
    wall = time.perf_counter() - t
    return wall, {**server.control("stats"), "cpu": time.process_time() - cpu}


def bench(shards: int, delay: float, repeat: int) -> None:
    root = write_sparse(default_root().with_name(f"remote-{shards}"), shards * TENSORS_PER_SHARD, shards)
    header_bytes, small_bytes = needed_bytes(root)
    server = Server(root, delay)
    best: dict[str, tuple[float, dict]] = {}
    try:
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                env = {
                    **os.environ, "HF_ENDPOINT": server.endpoint, "HF_HUB_CACHE": f"{tmp}/hf",
                    "XDG_CACHE_HOME": f"{tmp}/xdg", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
                }
                specguard = [sys.executable, "-m", "specguard.cli", "inspect", "acme/bench", "--remote"]
                runs = {
                    "huggingface_hub get_safetensors_metadata": [sys.executable, "-c", PEER],
                    "specguard inspect --remote": specguard,
                    "specguard inspect --remote, cached": specguard,  # same XDG_CACHE_HOME: a hit
                }
                results = {label: timed(server, cmd, env) for label, cmd in runs.items()}
                for label in ("headers only: huggingface_hub, in-process", "headers only: specguard, in-process"):
                    results[label] = read_in_process(label, server, tmp)
                for label, (wall, stats) in results.items():
                    if label not in best or wall < best[label][0]:
                        best[label] = (wall, stats)
    finally:
        server.close()
    tensors = len(json.loads((root / "model.safetensors.index.json").read_bytes())["weight_map"])
    print(f"{shards} shards, {tensors:,} tensors; {delay * 1000:.0f} ms added per request; best of {repeat}")
    need = header_bytes + small_bytes
    print(f"  needed: {header_bytes:,} header bytes + {small_bytes:,} index/config bytes = {need:,}")
    for label, (wall, stats) in best.items():
        print(f"  {label:38s} {wall * 1000:6.0f} ms ({stats['cpu'] * 1000:4.0f} ms CPU) {stats['requests']:4d} requests"
              f" {stats['bytes']:>11,} bytes ({stats['bytes'] / need:.3f}x needed)")
    peer, _ = best["huggingface_hub get_safetensors_metadata"]
    ours, stats = best["specguard inspect --remote"]
    print(f"  specguard / peer time = {ours / peer:.2f} (goal <= 0.5)")
    reading = best["headers only: specguard, in-process"][0] / best["headers only: huggingface_hub, in-process"][0]
    print(f"  reading only, specguard / peer time = {reading:.2f}")
    print(f"  specguard requests = {stats['requests']} (goal <= shards + 4 = {shards + 4})")
    print(f"  specguard bytes / needed = {stats['bytes'] / need:.3f} (goal <= 1.05)")
    print(f"  cached second audit: {best['specguard inspect --remote, cached'][1]['requests']} request(s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, nargs="+", default=[64, 163])
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"  # before huggingface_hub is imported (read_in_process)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    print(machine())
    for shards in args.shards:
        bench(shards, args.delay, args.repeat)


if __name__ == "__main__":
    main()
