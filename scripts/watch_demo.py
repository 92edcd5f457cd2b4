"""Serve a /metrics page for `specguard watch` to read: vLLM 0.33's own Prometheus stat logger
fed the reference engine's speculative decoding of S1 (the README's watch output).

Phase 1 serves the engine loaded under the ``resolver`` policy (draft experts built as stored);
then the "server restarts" with the ``global`` policy (vLLM 0.33's rule: the MXFP4 draft
experts built NVFP4), as a redeploy of the same checkpoint on a stock vLLM would. Each decoded
request is reported through ``PrometheusStatLogger.record`` as vLLM's engine loop reports it,
one request at a time, each taking as long as the engine took to decode it.
Needs torch and vLLM 0.33 importable (the test environment: ``bash scripts/test.sh``).

    python scripts/watch_demo.py --port 8000 --phase 20 &
    specguard watch 127.0.0.1:8000 --interval 2 --window 10 --checkpoint OUTDIR/s1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.integrations import vllm_harness  # noqa: E402

vllm_harness.set_cpu_env()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--phase", type=float, default=20.0, help="seconds per policy (default 20)")
    p.add_argument("--outdir", type=Path, help="where the S1 export goes (default: a temporary directory)")
    args = p.parse_args()

    import torch
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    from specguard.refdecoder.demo import export_all, load_case, prompts_from_held_out
    from specguard.refdecoder.specdec import speculative_generate
    from tests.integrations.watch_server import MetricsServer, VllmMetrics, vllm_config

    torch.set_num_threads(1)
    out = args.outdir or Path(tempfile.mkdtemp(prefix="specguard-watch-demo-"))
    infos = export_all(out, ["s1"])
    prompts = prompts_from_held_out(16, length=48)
    runs = {}
    for policy in ("resolver", "global"):
        loaded = load_case("s1", policy, infos, "cpu")
        runs[policy] = [speculative_generate(loaded.model, q, 48, 3, loaded.drafter) for q in prompts]

    server = MetricsServer(port=args.port)
    print(f"serving {server.url} (checkpoint {infos['s1'].path})", flush=True)
    for policy in ("resolver", "global"):  # a new process per policy: counters restart from zero
        metrics = VllmMetrics(vllm_config(str(infos["s1"].path), "ds4-s1"))
        server.serve(metrics)
        print(f"{time.strftime('%H:%M:%S')} serving the {policy} build", flush=True)
        end, i = time.monotonic() + args.phase, 0
        while time.monotonic() < end:
            g = runs[policy][i % len(prompts)]
            s = g.stats
            metrics.record(SpecDecodingStats(s.k, s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens,
                                             list(s.accepted_per_pos), [s.num_drafts] * s.k), len(g.tokens))
            i += 1
            time.sleep(g.seconds)  # one stream, at the speed the engine decoded this request
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
