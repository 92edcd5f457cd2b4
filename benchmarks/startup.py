"""CPU time of the light `specguard` commands against the interpreter's own start,
in the same run: each command is a fresh process (the installed console script),
timed by its own rusage (user + system), best of N, taking turns.

    python benchmarks/startup.py [--repeat 20]

Yardsticks: `python -c pass` (the interpreter) and `python -c "import argparse"`
(the interpreter and the parser every CLI needs). Goal: `specguard --version`
and `specguard rule SG201` <= 4x the argparse yardstick. CPU time, not wall
time: on a shared machine the wall clock counts other processes' turns.

Also printed, no goal: the heavy imports (numpy, ml_dtypes: the content rules decode
scale bytes with them) and `specguard lint` of the embedded sample, the quick start's
command: what ml_dtypes' import costs is why pyproject.toml keeps it below 0.7.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synth import machine

PY = sys.executable
SPECGUARD = str(Path(PY).with_name("specguard"))
RUNS: dict[str, list[str]] = {
    "python -c pass": [PY, "-c", "pass"],
    'python -c "import argparse"': [PY, "-c", "import argparse"],
    "specguard --version": [SPECGUARD, "--version"],
    "specguard rule SG201": [SPECGUARD, "rule", "SG201"],
    "specguard --help": [SPECGUARD, "--help"],
    "specguard lint --no-such-option": [SPECGUARD, "lint", "--no-such-option"],
    "specguard rule --all": [SPECGUARD, "rule", "--all"],
    "specguard watch --help": [SPECGUARD, "watch", "--help"],
    'python -c "import numpy"': [PY, "-c", "import numpy"],
    'python -c "import ml_dtypes"': [PY, "-c", "import ml_dtypes"],
    "specguard lint (the embedded sample)": [SPECGUARD, "lint"],
}
YARDSTICK = 'python -c "import argparse"'
GOALS = ("specguard --version", "specguard rule SG201")


def cpu_seconds(cmd: list[str]) -> float:
    """User + system CPU time of one run of ``cmd`` (its own rusage, from wait4)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped here; Popen must not wait for it again
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print(machine())
    import ml_dtypes
    import numpy

    print(f"numpy {numpy.__version__}, ml_dtypes {ml_dtypes.__version__}")
    subprocess.run([SPECGUARD, "lint"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # writes the sample once
    best = {label: float("inf") for label in RUNS}
    for _ in range(args.repeat):
        for label, cmd in RUNS.items():
            best[label] = min(best[label], cpu_seconds(cmd))
    base, interp = best[YARDSTICK], best["python -c pass"]
    print(f"CPU time (user + system), best of {args.repeat}; ratios against {YARDSTICK}")
    for label, t in best.items():
        goal = "  (goal <= 4x)" if label in GOALS else ""
        print(f"  {label:38s} {t * 1000:7.1f} ms  {t / base:5.2f}x  ({t / interp:5.2f}x the bare interpreter){goal}")
    print(f"goals met: {all(best[g] <= 4 * base for g in GOALS)}")


if __name__ == "__main__":
    main()
