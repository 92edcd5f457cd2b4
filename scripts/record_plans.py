"""Re-record vLLM 0.33's build plans into src/specguard/engines/plans/vllm-0.33/ (one command).

    .venv/bin/python scripts/record_plans.py [ARCH ...]

Needs the vLLM 0.33 CPU build scripts/test.sh installs; runs on CPU in a minute or so.
"""

from __future__ import annotations

import sys

from specguard.engines.vllm.recorder import PLANS_DIR, record_all


def main(argv: list[str]) -> int:
    failed = record_all(PLANS_DIR, argv or None)
    for arch, why in failed.items():
        print(f"not recorded: {arch}: {why}", file=sys.stderr)
    print(f"plans in {PLANS_DIR}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
