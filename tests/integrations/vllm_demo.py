"""Print what the plugin logs, on vLLM 0.33's real classes, on CPU (the README's example).

    .venv/bin/python -m tests.integrations.vllm_demo [OUTDIR]

Writes the factory's S1 (MTP) and S1-dspark checkpoints, builds the draft layers
vLLM builds for them with the CUDA-registry quant config (V4.1 class), loads the
MTP draft's expert tensors through vLLM's loader, and lets vLLM's logger print
specguard's lines. Then the same MTP draft built as stock vLLM builds it
(NVFP4), loaded under the plugin's guard: the error the server stops with.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.integrations import vllm_harness as H


def main(outdir: Path) -> None:
    H.set_cpu_env()
    from specguard.factory import write_scenario

    s1 = write_scenario("s1", outdir / "s1").path
    dspark = write_scenario("s1-dspark", outdir / "s1-dspark").path

    from specguard.integrations.vllm import installed, loading, routing

    with installed(), H.cpu_kernel_checks_off():
        print("\n== DSpark drafter of an NVFP4 conversion (S1-dspark), 3 draft layers ==", flush=True)
        cfg = H.engine_config(str(dspark), {"method": "dspark", "num_speculative_tokens": 3})
        H.init_single_rank(cfg)
        quant = H.quant_config(cfg, "cuda")
        for i in range(3):
            H.build_moe(cfg, quant, f"layers.{2 + i}.ffn")
        loading.emit_decisions()

        print("\n== MTP draft of S1: built, then loaded through vLLM's loader ==", flush=True)
        cfg = H.engine_config(str(s1), {"method": "mtp", "num_speculative_tokens": 1})
        model = H.mtp_draft_model(cfg, H.quant_config(cfg, "cuda"))
        with loading.draft_load(str(s1)):
            H.load_draft_weights(cfg, model)

        print("\n== the same draft built as stock vLLM 0.33 builds it (NVFP4) ==", flush=True)
        with routing.vanilla():
            model = H.mtp_draft_model(cfg, H.quant_config(cfg, "cuda"))
        try:
            with loading.draft_load(str(s1)):
                H.load_draft_weights(cfg, model)
        except loading.DraftLoadError as exc:
            print(f"raised DraftLoadError:\n{exc}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="sg-vllm-demo-")))
