"""`specguard report` on a DeepSeek-sized checkpoint (about 100,000 tensors, 61 + 1 layers):
the time to write the page against `lint` alone in the same run, the page's size, and how
long headless Chromium takes to load and render it.

    python benchmarks/report.py [--tensors 100000] [--repeat 3]
    python benchmarks/report.py --screenshot docs/report-s1.png   # the README's picture: S1's page


Goals: write <= 1.5x lint; page < 2 MB; rendered (load event, scripts run) in < 1 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synth import default_root, machine, take_turns, write_sparse

from specguard.checkpoint import open_checkpoint
from specguard.cli import build_parser
from specguard.commands import report
from specguard.lint import lint
from specguard.resolve import Resolver

LAYERS = 61
ROOT = Path(__file__).resolve().parents[1]


def lint_pass(root: Path) -> object:
    return lint([Resolver(open_checkpoint(root))])


def report_pass(out: Path):
    def run(root: Path) -> object:
        args = build_parser().parse_args(["report", str(root), "-o", str(out)])
        return report.run_report(args)
    return run


def _browser():
    """The report tests' DevTools-pipe driver (tests/report/browser.py), loaded by path."""
    spec = importlib.util.spec_from_file_location("browser", ROOT / "tests" / "report" / "browser.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def render_ms(page: Path, repeat: int) -> list[float]:
    """Navigation start to the end of the load event (the page's scripts have run), per load."""
    b = _browser()
    if b.chromium() is None:
        return []
    out = []
    with b.Browser() as br:
        for _ in range(repeat):
            p = br.open(page.as_uri(), width=1280, height=900)
            assert p.evaluate("document.body.dataset.ready") == "1" and p.console == []
            out.append(p.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"))
    return out


def screenshot(path: Path) -> None:
    """Factory S1's page at 1280 px, the misrouted MTP experts selected."""
    from specguard.factory import write_scenario

    path = path.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the page names the checkpoint as a user typed it: s1
        write_scenario("s1", Path("s1"))
        page = Path(tmp) / "s1.html"
        report.run_report(build_parser().parse_args(["report", "s1", "-o", str(page)]))
        with _browser().Browser() as br:
            p = br.open(page.as_uri(), width=1280, height=1240)
            p.click("td.cell.marked")
            p.screenshot(path)
            assert p.console == []
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tensors", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--screenshot", type=Path, help="write S1's page as a PNG here instead of timing")
    args = ap.parse_args()
    if args.screenshot:
        screenshot(args.screenshot)
        return
    print(machine())
    root = write_sparse(default_root().with_name(f"v3-{args.tensors}-{LAYERS}"), args.tensors, 64, LAYERS)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        cpu: dict[str, float] = {}
        best, _ = take_turns({"lint": lint_pass, "report": report_pass(page)}, root, args.repeat, cpu)
        n = len(open_checkpoint(root).tensors)
        size = page.stat().st_size
        print(f"checkpoint: {n:,} tensors, {LAYERS} + 1 layers; best of {args.repeat}")
        print(f"  lint                            {best['lint'] * 1000:8.1f} ms")
        print(f"  report (lint + fix plan + page) {best['report'] * 1000:8.1f} ms")
        print(f"report / lint = {best['report'] / best['lint']:.2f} (goal <= 1.5); "
              f"CPU: {cpu['report'] / cpu['lint']:.2f}")
        print(f"page: {size:,} bytes = {size / 1024 / 1024:.2f} MB (goal < 2 MB)")
        ms = render_ms(page, args.repeat)
        if ms:
            print(f"headless Chromium, load event end: best {min(ms):.0f} ms, worst {max(ms):.0f} ms "
                  f"of {len(ms)} (goal < 1000 ms)")
        else:
            print("no chromium on PATH: render time not measured")


if __name__ == "__main__":
    main()
