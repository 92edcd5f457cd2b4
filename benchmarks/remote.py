"""`specguard inspect --remote` against huggingface_hub's `get_safetensors_metadata`,
in the same run, against the same Hub-protocol server (tests/checkpoint/hubserver.py,
run in its own process) with a delay added to every request: a network's round trip.

The checkpoints are the synthetic DeepSeek-V4-shaped ones of synth.py (sparse
files: the server reads only the ranges asked for), at about 625 tensors per
shard: 64 shards (~40,000 tensors) and 163 shards (a DeepSeek-V3's count, ~100,000).
Each run is a fresh process with empty caches; specguard's second audit of the
same commit (its cache) is shown too. Prints wall time, requests and bytes for both.

    python benchmarks/remote.py [--shards 64 163] [--delay 0.05] [--repeat 3] [--busy 2]

Goals at 50 ms per request (issue 25): specguard's whole run <= 0.5x the peer's
time, quiet or busy (``--busy N`` repeats every run with N processes spinning on
the CPU); the cached second audit <= 0.2x the cold one in at most one request; at
most shards + 4 requests and 1.05x the bytes a reader needs (every shard's header,
the index and the config files). CPU time (user + system) is printed beside wall
time: on a shared machine wall time waits for others. ``specguard --version`` is
timed too: the start-up every command pays before it reads anything.

specguard sends its requests over the standard library's sockets (checkpoint/plainhttp.py:
HTTP/1.1 framed as http.client frames it, every request of a round sent at once from one
thread) where that does what huggingface_hub's httpx2 would, and through httpx2 where not
(a proxy setting, among others): the "httpx2" row is the same audit with a proxy set and
bypassed for the server (NO_PROXY), so the full client runs; "plain client / httpx2 client"
is what the hand-written client saves.
Every run uses compiled bytecode, as an installed package does (the package is
compiled first: a sandbox with PYTHONDONTWRITEBYTECODE would otherwise compile
specguard's modules, but not huggingface_hub's, on every run).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
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


@contextlib.contextmanager
def busy(n: int):
    """``n`` processes spinning on the CPU while the runs inside are timed (a loaded machine)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


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


def bench(shards: int, delay: float, repeat: int, spinners: int) -> None:
    root = write_sparse(default_root().with_name(f"remote-{shards}"), shards * TENSORS_PER_SHARD, shards)
    header_bytes, small_bytes = needed_bytes(root)
    server = Server(root, delay)
    best: dict[str, tuple[float, dict]] = {}
    try:
        with busy(spinners):
            for _ in range(repeat):
                for label, result in one_round(server).items():
                    if label not in best or result[0] < best[label][0]:
                        best[label] = result
    finally:
        server.close()
    tensors = len(json.loads((root / "model.safetensors.index.json").read_bytes())["weight_map"])
    load = f"{spinners} CPU spinners running" if spinners else "no extra load"
    print(f"{shards} shards, {tensors:,} tensors; {delay * 1000:.0f} ms added per request; {load}; best of {repeat}")
    need = header_bytes + small_bytes
    print(f"  needed: {header_bytes:,} header bytes + {small_bytes:,} index/config bytes = {need:,}")
    for label, (wall, stats) in best.items():
        print(f"  {label:44s} {wall * 1000:6.0f} ms ({stats['cpu'] * 1000:4.0f} ms CPU) {stats['requests']:4d} requests"
              f" {stats['bytes']:>11,} bytes ({stats['bytes'] / need:.3f}x needed)")
    peer, peer_stats = best[PEER_LABEL]
    ours, stats = best[COLD]
    cached, cached_stats = best[CACHED]
    print(f"  specguard / peer time = {ours / peer:.2f} (goal <= 0.5); CPU {stats['cpu'] / peer_stats['cpu']:.2f}")
    full, full_stats = best[FULL]
    print(f"  plain client / httpx2 client, whole run: time {ours / full:.2f}; "
          f"CPU {stats['cpu'] / full_stats['cpu']:.2f}")
    reading = best[READ_OURS][0] / best[READ_PEER][0]
    print(f"  reading only, specguard / peer time = {reading:.2f}")
    start = best[STARTUP][0]
    print(f"  start-up (specguard --version) / specguard whole run = {start / ours:.2f}; "
          f"whole run less start-up / peer = {(ours - start) / peer:.2f}")
    print(f"  cached / cold audit = {cached / ours:.2f} (goal <= 0.2); CPU {cached_stats['cpu'] / stats['cpu']:.2f};"
          f" {cached_stats['requests']} request(s) (goal <= 1)")
    print(f"  specguard requests = {stats['requests']} (goal <= shards + 4 = {shards + 4})")
    print(f"  specguard bytes / needed = {stats['bytes'] / need:.3f} (goal <= 1.05)")


PEER_LABEL = "huggingface_hub get_safetensors_metadata"
COLD = "specguard inspect --remote"
CACHED = "specguard inspect --remote, cached"
STARTUP = "specguard --version (start-up only)"
READ_PEER = "headers only: huggingface_hub, in-process"
READ_OURS = "headers only: specguard, in-process"
FULL = "specguard inspect --remote, httpx2 client"
# A proxy the user set, bypassed for the server: specguard's full client (httpx2) then runs.
PROXY = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost"}


def one_round(server: Server) -> dict[str, tuple[float, dict]]:
    """Every run once, each from empty caches (the cached audit after the cold one)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ, "HF_ENDPOINT": server.endpoint, "HF_HUB_CACHE": f"{tmp}/hf",
            "XDG_CACHE_HOME": f"{tmp}/xdg", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
        }
        specguard = [sys.executable, "-m", "specguard.cli", "inspect", "acme/bench", "--remote"]
        runs = {
            PEER_LABEL: [sys.executable, "-c", PEER],
            COLD: specguard,
            CACHED: specguard,  # same XDG_CACHE_HOME: a hit
            STARTUP: [sys.executable, "-m", "specguard.cli", "--version"],
        }
        results = {label: timed(server, cmd, env) for label, cmd in runs.items()}
        proxied = {**env, "XDG_CACHE_HOME": f"{tmp}/xdg-httpx2", **PROXY}
        results[FULL] = timed(server, specguard, proxied)
        for label in (READ_PEER, READ_OURS):
            results[label] = read_in_process(label, server, tmp)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, nargs="+", default=[64, 163])
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="also measure with N processes spinning on the CPU")
    args = ap.parse_args()
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"  # before huggingface_hub is imported (read_in_process)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    import specguard

    compileall.compile_dir(Path(specguard.__file__).parent, quiet=1)  # as pip does on install
    print(machine())
    for shards in args.shards:
        for spinners in sorted({0, args.busy}):
            bench(shards, args.delay, args.repeat, spinners)


if __name__ == "__main__":
    main()
