"""`specguard demo`: what routing a draft module by the wrong format costs, on a real model.

The trained reference model is exported through the factory into the scenario
layouts, loaded back under each routing policy (``resolver``, ``global``,
``bf16``) and decodes held-out standard-library text with and without
speculation. Printed per policy: acceptance (overall and per draft position),
mean acceptance length, tokens/s, speedup over no speculation, whether the
output is identical to plain greedy decoding, and the LoadGuard report of the
``global`` load; ``--json``: the same as one JSON object (docs/json.md).
Tables go through ``specguard.terminal`` (one record per row where a terminal
is too narrow); the progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch
from rich.console import Console
from rich.table import Table

from specguard.errors import UsageError
from specguard.factory import ScenarioInfo
from specguard.guard import LoadReport
from specguard.refdecoder.corpus import held_out_sample, prompts_sha256
from specguard.refdecoder.policies import POLICIES, Loaded, LoadFailure, export_scenario, load_policy, reference
from specguard.refdecoder.specdec import Runner, SpecStats, cache_size
from specguard.terminal import console, escape, percent, plural, print_table
from specguard.usage import PROG as ERROR_PREFIX
from specguard.usage import ArgumentParser, fail, interrupted

DEMO_SCENARIOS = {
    "s1": "S1: NVFP4 conversion, MTP draft experts stored MXFP4, misleading global config",
    "s2": "S2: compressed-tensors NVFP4 target, BF16 MTP block",
    "s4": "S4: NVFP4 target, separate DSpark drafter checkpoint in native FP4",
}


@dataclass
class PolicyResult:
    """One scenario under one routing policy."""

    scenario: str
    policy: str
    stats: SpecStats | None = None
    plain_tokens_per_s: float = 0.0
    spec_tokens_per_s: float = 0.0
    identical: bool = False
    error: str | None = None  # the load failed: what the engine would have raised
    report: LoadReport | None = None
    routes: dict[str, str] | None = None

    @property
    def speedup(self) -> float:
        return self.spec_tokens_per_s / self.plain_tokens_per_s if self.plain_tokens_per_s else 0.0


def prompts_from_held_out(n: int, length: int = 64, corpus: Path | None = None) -> list[list[int]]:
    """``n`` prompts of ``length`` bytes starting at evenly spaced line starts of held-out text
    (the shipped split; ``corpus``: that of a standard-library copy)."""
    text = held_out_sample(corpus, max_bytes=512 * 1024)
    step = max(1, (len(text) - length) // max(1, n))
    out = []
    for i in range(n):
        start = text.find(b"\n", i * step) + 1
        out.append(list(text[start : start + length]))
    return out


def export_all(workdir: Path, scenarios: Sequence[str]) -> dict[str, ScenarioInfo]:
    """The requested scenarios, plus S8 (all BF16, MTP) as the bf16 reference checkpoint."""
    needs_bf16_checkpoint = any(s != "s4" for s in scenarios)
    names = [*scenarios, "s8"] if needs_bf16_checkpoint else list(scenarios)
    return {name: export_scenario(name, workdir / name) for name in names}


def load_case(scenario: str, policy: str, infos: dict[str, ScenarioInfo], device: str,
              guard: bool = True) -> Loaded:
    """The model and drafter of ``scenario`` under ``policy`` (raises LoadFailure)."""
    if policy == "bf16":
        if scenario == "s4":  # no BF16 DSpark scenario: the shipped BF16 weights themselves
            return reference(dspark=True, device=device)
        return load_policy(infos["s8"].path, "bf16", device=device, guard=guard)
    info = infos[scenario]
    return load_policy(info.path, policy, drafter=info.drafter_path, device=device, guard=guard)


def measure(loaded: Loaded, prompts: list[list[int]], new_tokens: int, k: int,
            tick: Callable[[], None] = lambda: None) -> tuple[SpecStats, float, float, bool]:
    """(stats, plain tok/s, speculative tok/s, identical), plain and speculative runs interleaved.

    Both run on one :class:`Runner` (static caches; CUDA graphs on GPU), so the
    yardstick is plain greedy decoding at its own best, not at Python's pace.
    """
    stats = SpecStats(k)
    plain_s = spec_s = 0.0
    tokens = 0
    identical = True
    size = cache_size(max(len(p) for p in prompts), new_tokens, k)
    runner = Runner(loaded.model, loaded.drafter, k, size)
    for prompt in {len(p): p for p in prompts}.values():  # warm-up: graph capture per prompt length
        runner.greedy(prompt, min(8, new_tokens))
        runner.speculative(prompt, min(8, new_tokens))
    for prompt in prompts:
        plain = runner.greedy(prompt, new_tokens)
        spec = runner.speculative(prompt, new_tokens)
        assert spec.stats is not None
        stats.merge(spec.stats)
        plain_s += plain.seconds
        spec_s += spec.seconds
        tokens += len(plain.tokens)
        identical &= spec.tokens == plain.tokens
        tick()
    return stats, tokens / plain_s, tokens / spec_s, identical


def run_case(scenario: str, policy: str, infos: dict[str, ScenarioInfo], prompts: list[list[int]],
             new_tokens: int, k: int, device: str, tick: Callable[[], None] = lambda: None,
             guard: bool = True) -> PolicyResult:
    try:
        loaded = load_case(scenario, policy, infos, device, guard)
    except LoadFailure as exc:
        for _ in prompts:
            tick()
        return PolicyResult(scenario, policy, error=str(exc))
    stats, plain, spec, same = measure(loaded, prompts, new_tokens, k, tick)
    return PolicyResult(scenario, policy, stats, plain, spec, same, report=loaded.report,
                        routes=loaded.expert_routes)


FIXED = "fixed, global"  # specguard fix's repaired checkpoint under the stock engine's routing


def run_fixed(scenario: str, fixed: dict[str, ScenarioInfo], prompts: list[list[int]], new_tokens: int,
              k: int, device: str, tick: Callable[[], None] = lambda: None, guard: bool = True) -> PolicyResult:
    """The repaired ``scenario`` (refdecoder/repaired.py) under the ``global`` policy, as its own row."""
    result = run_case(scenario, "global", fixed, prompts, new_tokens, k, device, tick, guard)
    result.policy = FIXED
    return result


# ----------------------------------------------------------------------------- output

def result_rows(results: list[PolicyResult]) -> list[list[str]]:
    rows = []
    for r in results:
        if r.error or r.stats is None:
            rows.append([r.policy, "load fails", "-", "-", "-", "-", "-", "-"])
            continue
        per_pos = "/".join(f"{100 * p:.0f}" for p in r.stats.per_position_rate)
        rows.append([r.policy, percent(r.stats.acceptance_rate), per_pos, f"{r.stats.mean_acceptance_length:.2f}",
                     f"{r.spec_tokens_per_s:.1f}", f"{r.plain_tokens_per_s:.1f}", f"{r.speedup:.2f}x",
                     "yes" if r.identical else "NO"])
    return rows


HEADERS = ["policy", "accept", "per pos %", "mean len", "tok/s", "no-spec", "speedup", "identical"]
LEGEND = (  # what the headers mean, one per line: readable at 80 columns and in a pipe
    ("accept", "accepted / draft tokens"),
    ("per pos %", "accepted at draft position i / drafts"),
    ("mean len", "1 + accepted / drafts: tokens per target forward"),
    ("speedup", "tok/s with speculation / no-spec (plain greedy decoding, same model)"),
    ("identical", "output equals plain greedy decoding"),
)


def results_table(scenario: str, results: list[PolicyResult]) -> Table:
    table = Table(title=escape(DEMO_SCENARIOS[scenario]), title_justify="left")
    for h in HEADERS:
        table.add_column(h, justify="left" if h == "policy" else "right", no_wrap=True)
    for row in result_rows(results):
        table.add_row(*(escape(c) for c in row))
    return table


def print_intro(out: Console, prompts: list[list[int]], new_tokens: int, k: int, device: str) -> None:
    out.print(f"Greedy decoding of {plural(len(prompts), 'held-out prompt')} x {new_tokens} tokens, "
              f"k = {k} draft tokens, device {escape(device)}.")
    for word, meaning in LEGEND:
        out.print(f"  {word:<10} {meaning}")


def print_results(out: Console, scenario: str, results: list[PolicyResult]) -> None:
    print_table(out, results_table(scenario, results))
    for r in results:
        if r.error:
            out.print(f"  {r.policy}: the load fails (vLLM 0.33 fails to load this draft too): {escape(r.error)}")
    for r in results:
        if r.policy == "global" and r.report is not None:
            out.print(f"LoadGuard report for the global load ({scenario}); parameters never written "
                      "hold the guard's NaN poison, where vLLM leaves torch.empty memory:")
            if r.report.ok:
                out.print(r.report.summary())
            else:
                print_table(out, r.report.__rich__())


JSON_SCHEMA_VERSION = 1


def result_record(r: PolicyResult) -> dict[str, Any]:
    """One scenario under one policy, as `specguard demo --json` prints it (docs/json.md)."""
    st = r.stats
    return {
        "scenario": r.scenario,
        "policy": r.policy,
        "load_error": r.error,
        "acceptance": st.acceptance_rate if st else None,
        "per_position_acceptance": st.per_position_rate if st else None,
        "mean_acceptance_length": st.mean_acceptance_length if st else None,
        "tokens_per_s": r.spec_tokens_per_s if st else None,
        "no_spec_tokens_per_s": r.plain_tokens_per_s if st else None,
        "speedup": r.speedup if st else None,
        "identical": r.identical if st else None,
        "drafts": st.num_drafts if st else None,
        "draft_tokens": st.num_draft_tokens if st else None,
        "accepted_tokens": st.num_accepted_tokens if st else None,
        "expert_routes": r.routes,
        "guard": r.report.to_dict() if r.report is not None else None,
    }


def write_json(results: list[PolicyResult], settings: dict[str, Any], file: IO[str] | None = None) -> None:
    """One JSON object, one record per line (the layout of the other commands' --json)."""
    out = file or sys.stdout
    scenarios = {s: DEMO_SCENARIOS[s] for s in dict.fromkeys(r.scenario for r in results)}
    head = json.dumps({"schema": JSON_SCHEMA_VERSION, "settings": settings, "scenarios": scenarios})[:-1]
    out.write(head + ', "records": [\n')
    out.write(",\n".join(json.dumps(result_record(r), separators=(",", ":")) for r in results))
    out.write("\n]}\n")


def plot(results: list[PolicyResult], path: Path, k: int) -> list[str]:
    """PNG of per-position acceptance per policy (one panel per scenario); returns the
    policies drawn, the ``--fixed`` row included where it ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r.scenario for r in results))
    policies = [*POLICIES, *([FIXED] if any(r.policy == FIXED for r in results) else [])]  # --fixed: its row too
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.5 * len(scenarios), 3.6), squeeze=False)
    width = 0.8 / len(policies)
    for ax, scenario in zip(axes[0], scenarios, strict=True):
        for i, policy in enumerate(policies):
            r = next((x for x in results if x.scenario == scenario and x.policy == policy), None)
            rates = r.stats.per_position_rate if r and r.stats else [0.0] * k
            label = policy + (" (load fails)" if r and r.error else "")
            xs = [p + i * width for p in range(k)]
            ax.bar(xs, [100 * x for x in rates], width, label=label)
            for x, rate in zip(xs, rates, strict=True):
                if r and r.stats and rate < 0.01:  # make a collapsed drafter visible
                    ax.text(x, 1, "0", ha="center", va="bottom", fontsize=8)
        ax.set_xticks([p + width * (len(policies) - 1) / 2 for p in range(k)], [f"pos {p}" for p in range(k)])
        ax.set_ylim(0, 100)
        ax.set_ylabel("accepted / drafts (%)")
        ax.set_title(scenario.upper())
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return policies


# ----------------------------------------------------------------------------- CLI

PROG = "specguard demo"
EXIT_CODES = "exit codes: 0 ok; 2 bad input or usage (one line on stderr); 130 interrupted"


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n")[0], epilog=EXIT_CODES)
    p.add_argument("--scenario", choices=[*DEMO_SCENARIOS, "all"], default="s1",
                   help="s1: draft experts stored MXFP4 under an NVFP4 config; s2: BF16 MTP block under "
                        "compressed-tensors NVFP4; s4: separate DSpark drafter in native FP4; all: the three "
                        "(default: %(default)s)")
    p.add_argument("-k", "--draft-tokens", type=int, default=3, dest="k", metavar="K",
                   help="draft tokens per step, 1..16 (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=4, metavar="N",
                   help="held-out prompts to decode, 1..256 (default: %(default)s)")
    p.add_argument("--new-tokens", type=int, default=64, metavar="N",
                   help="tokens generated per prompt, 1..1024 (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="CPU threads for torch; 1 is fastest for this small model (default: %(default)s)")
    p.add_argument("--plot", type=Path, metavar="FILE",
                   help="also write a plot of per-position acceptance (PNG, or the format FILE's suffix "
                        "names; needs matplotlib); checked before the run")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of the tables: one record per scenario and policy "
                        "(docs/json.md)")
    p.add_argument("--fixed", action="store_true",
                   help="add a row: the checkpoint repaired by `specguard fix`, under the stock (global) policy")
    p.add_argument("--no-guard", action="store_true",
                   help="load without LoadGuard: never-written parameters keep torch.empty memory, "
                        "so the global policy's results depend on the allocator (seed 001)")
    p.add_argument("--debug", action="store_true", help="show the traceback behind an error (exit code unchanged)")
    return p


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.k <= 16:
        raise UsageError(f"--draft-tokens must be 1..16, not {args.k}")
    if not 1 <= args.prompts <= 256 or not 1 <= args.new_tokens <= 1024:
        raise UsageError("--prompts must be 1..256 and --new-tokens 1..1024")
    if args.threads < 1:
        raise UsageError("--threads must be >= 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {args.device}: no CUDA device is available")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise UsageError(f"--device must be cpu or cuda[:N], not {args.device!r}")
    if args.plot is not None:
        check_plot_path(args.plot)


def check_plot_path(path: Path) -> None:
    """Raise UsageError unless a plot can be written to ``path``: checked before a run
    of minutes, so a typo or a read-only directory costs nothing."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'specguard[plot]'") from None
    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix[1:].lower()
    if suffix and suffix not in kinds:
        raise UsageError(f"--plot {path}: no plot format {suffix!r}; one of {', '.join(sorted(kinds))}")
    parent = path.parent
    if path.is_dir():
        raise UsageError(f"--plot {path}: is a directory")
    if not parent.exists():
        raise UsageError(f"--plot {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise UsageError(f"--plot {path}: {parent} is not a directory")
    try:  # the one sure test (root, read-only mounts, ACLs): write a file there
        with tempfile.TemporaryFile(dir=parent):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write there: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_all(args: argparse.Namespace, scenarios: list[str], prompts: list[list[int]]) -> list[PolicyResult]:
    """Every requested scenario under every policy (and --fixed), a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results: list[PolicyResult] = []
    guard = not args.no_guard
    with _threads(args.threads), tempfile.TemporaryDirectory(prefix="specguard-demo-") as tmp:
        infos = export_all(Path(tmp), scenarios)
        fixed: dict[str, ScenarioInfo] = {}
        if args.fixed:
            from specguard.refdecoder.repaired import fixed_infos

            fixed = fixed_infos(infos, Path(tmp))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console(stderr=True), transient=True) as progress:
            rows = len(POLICIES) + bool(args.fixed)
            task = progress.add_task("decoding", total=len(scenarios) * rows * len(prompts))

            def tick() -> None:
                progress.advance(task)

            for scenario in scenarios:
                for policy in POLICIES:
                    progress.update(task, description=f"{scenario} {policy:8s}")
                    results.append(run_case(scenario, policy, infos, prompts, args.new_tokens, args.k,
                                            args.device, tick, guard=guard))
                if args.fixed:
                    results.append(run_fixed(scenario, fixed, prompts, args.new_tokens, args.k, args.device,
                                             tick, guard=guard))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """`specguard demo`; Ctrl-C propagates as KeyboardInterrupt (cli.main: one line, exit 130)."""
    try:
        args = _parser().parse_args(argv)
        _check(args)
    except UsageError as exc:
        return fail(ERROR_PREFIX, exc)
    scenarios = list(DEMO_SCENARIOS) if args.scenario == "all" else [args.scenario]
    prompts = prompts_from_held_out(args.prompts)
    t0 = time.perf_counter()
    results = run_all(args, scenarios, prompts)
    if args.plot is not None:
        try:
            plot(results, args.plot, args.k)
        except OSError as exc:  # checked before the run; the disk may still fill up or vanish
            return fail(ERROR_PREFIX, f"--plot {args.plot}: {exc.strerror or exc}", debug=args.debug)
    if args.json:
        settings = {"prompts": len(prompts), "prompts_sha256": prompts_sha256(prompts),
                    "new_tokens": args.new_tokens, "k": args.k, "device": args.device, "threads": args.threads,
                    "guard": not args.no_guard, "seconds": round(time.perf_counter() - t0, 1)}
        write_json(results, settings)
        return 0
    out = console()
    print_intro(out, prompts, args.new_tokens, args.k, args.device)
    for scenario in scenarios:
        print_results(out, scenario, [r for r in results if r.scenario == scenario])
    if args.plot is not None:
        out.print(f"plot: {escape(str(args.plot))}")
    out.print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(interrupted(ERROR_PREFIX))
