"""``specguard factory SCENARIO OUTDIR [--seed N] [--size tiny|small]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line and exit code 2, no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Usage(message)


class _Usage(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    from specguard.factory import SCENARIOS, SIZES

    p = _Parser(prog="specguard factory",
                description="Write a small, real checkpoint for one scenario.",
                epilog="scenarios: " + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()))
    p.add_argument("scenario", help=f"one of {', '.join(SCENARIOS)}")
    p.add_argument("outdir", type=Path, help="new or empty directory to write into")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("--size", default="tiny", choices=sorted(SIZES), help="model size preset")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the factory command; returns the exit code (0 ok, 2 bad input)."""
    from specguard.factory import SCENARIOS, write_scenario

    try:
        args = _parser().parse_args(argv)
    except _Usage as e:
        print(f"specguard factory: {e}", file=sys.stderr)
        return 2
    if args.scenario not in SCENARIOS:
        print(f"specguard factory: unknown scenario {args.scenario!r}; "
              f"one of {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    out: Path = args.outdir
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is not a directory" if not out.is_dir() else "exists and is not empty"
        print(f"specguard factory: {out} {what}; give a new or empty directory", file=sys.stderr)
        return 2
    try:
        info = write_scenario(args.scenario, out, seed=args.seed, size=args.size)
    except (OSError, ValueError) as e:
        print(f"specguard factory: {out}: {e}", file=sys.stderr)
        return 2
    n = len(info.expected) + len(info.drafter_expected)
    where = f"{info.path}" + (f" and {info.drafter_path}" if info.drafter_path else "")
    print(f"{args.scenario}: {info.title}\nwrote {n} modules to {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
