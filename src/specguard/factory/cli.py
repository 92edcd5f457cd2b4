"""``specguard factory SCENARIO OUTDIR [--seed N] [--size tiny|small]``."""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from specguard.errors import SpecguardError, UsageError
from specguard.factory import ScenarioInfo
from specguard.usage import PROG, ArgumentParser, fail

EXIT_CODES = "exit codes: 0 written; 2 bad input or usage (one line on stderr); 130 interrupted (nothing left behind)"


def _parser() -> argparse.ArgumentParser:
    from specguard.factory import SCENARIOS, SIZES

    p = ArgumentParser(prog=f"{PROG} factory",
                       description="Write a small, real checkpoint for one scenario.",
                       epilog=f"{EXIT_CODES}. Scenarios: " + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()))
    p.add_argument("scenario", help=f"one of {', '.join(SCENARIOS)} (case-insensitive)")
    p.add_argument("outdir", type=Path, help="new or empty directory to write into")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("--size", default="tiny", choices=sorted(SIZES), help="model size preset (default: tiny)")
    p.add_argument("--debug", action="store_true", help="show the traceback behind an error (exit code unchanged)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the factory command; returns the exit code (0 ok, 2 bad input)."""
    from specguard.factory import scenario_name

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
        info = _write_whole(args, out)
    except (OSError, SpecguardError) as e:  # unwritable directory; any other error is a bug
        return fail(PROG, f"{out}: {e}", debug=args.debug)
    n = len(info.expected) + len(info.drafter_expected)
    where = f"{out / info.path.name if info.drafter_path else out}" + (
        f" and {out / info.drafter_path.name}" if info.drafter_path else "")
    print(f"{args.scenario}: {info.title}\nwrote {n} modules to {where}")
    return 0


def _write_whole(args: argparse.Namespace, out: Path) -> ScenarioInfo:
    """Write into a temporary sibling, renamed to ``out`` at the end: an error or
    Ctrl-C never leaves a half-written checkpoint behind."""
    from specguard.factory import write_scenario

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}-{os.getpid()}-{secrets.token_hex(4)}"
    try:  # the name is chosen first, so even a Ctrl-C right after mkdir is cleaned up
        tmp.mkdir()
        info = write_scenario(args.scenario, tmp, seed=args.seed, size=args.size)
        if out.exists():
            out.rmdir()  # new or empty, checked above
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return info


if __name__ == "__main__":
    sys.exit(main())
