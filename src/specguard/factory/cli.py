"""``specguard factory SCENARIO OUTDIR [--seed N] [--size tiny|small]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specguard.errors import SpecguardError, UsageError
from specguard.usage import ArgumentParser, fail

PROG = "specguard factory"


def _parser() -> argparse.ArgumentParser:
    from specguard.factory import SCENARIOS, SIZES

    p = ArgumentParser(prog=PROG,
                description="Write a small, real checkpoint for one scenario.",
                epilog="scenarios: " + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()))
    p.add_argument("scenario", help=f"one of {', '.join(SCENARIOS)} (case-insensitive)")
    p.add_argument("outdir", type=Path, help="new or empty directory to write into")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("--size", default="tiny", choices=sorted(SIZES), help="model size preset (default: tiny)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the factory command; returns the exit code (0 ok, 2 bad input)."""
    from specguard.factory import scenario_name, write_scenario

    try:
        args = _parser().parse_args(argv)
        args.scenario = scenario_name(args.scenario)
    except UsageError as e:
        return fail(PROG, e)
    out: Path = args.outdir
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is not a directory" if not out.is_dir() else "exists and is not empty"
        return fail(PROG, f"{out} {what}; give a new or empty directory")
    try:
        info = write_scenario(args.scenario, out, seed=args.seed, size=args.size)
    except (OSError, SpecguardError) as e:  # unwritable directory; any other error is a bug
        return fail(PROG, f"{out}: {e}")
    n = len(info.expected) + len(info.drafter_expected)
    where = f"{info.path}" + (f" and {info.drafter_path}" if info.drafter_path else "")
    print(f"{args.scenario}: {info.title}\nwrote {n} modules to {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
