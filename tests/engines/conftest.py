"""vLLM 0.33 is installed CPU-only in CI (scripts/test.sh); it must be told so."""

import os

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
