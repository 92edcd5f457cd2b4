"""Re-record vLLM's build plans into src/specguard/plans/vllm-0.33/ (one command).

    .venv/bin/python scripts/record_plans.py [ARCH ...]
    PYTHONPATH=.engines/vllm-0.32 .venv/bin/python scripts/record_plans.py      (into plans/vllm-0.32/)

Needs the vLLM 0.33 CPU build scripts/test.sh installs and the torchvision overlay
scripts/engines.sh installs (Qwen3.5); about 50 CPU s for every plan.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Qwen3.5's module imports torchvision: the overlay, after everything else on the path
sys.path.append(str(Path(__file__).resolve().parents[1] / ".engines" / "torchvision-0.28.0"))

from specguard.engines.vllm.recorder import PLANS_DIR, record_all


def main(argv: list[str]) -> int:
    failed = record_all(PLANS_DIR, argv or None)
    for arch, why in failed.items():
        print(f"not recorded: {arch}: {why}", file=sys.stderr)
    print(f"plans in {PLANS_DIR}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
