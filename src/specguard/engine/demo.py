"""`specguard demo`: what routing a draft module by the wrong format costs, on a real model.

The trained reference model is exported through the factory into the scenario
layouts, loaded back under each routing policy (``resolver``, ``global``,
``bf16``) and decodes held-out standard-library text with and without
speculation. Printed per policy: acceptance (overall and per draft position),
mean acceptance length, tokens/s, speedup over no speculation, whether the
output is identical to plain greedy decoding, and the LoadGuard report of the
``global`` load.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specguard.engine.corpus import held_out_sample
from specguard.engine.policies import POLICIES, Loaded, LoadFailure, export_scenario, load_policy, reference
from specguard.engine.specdec import SpecStats, greedy_generate, speculative_generate
from specguard.errors import UsageError
from specguard.factory import ScenarioInfo
from specguard.guard import LoadReport
from specguard.usage import ArgumentParser, fail

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
    (of ``corpus``, default: this Python's standard library)."""
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
    """(stats, plain tok/s, speculative tok/s, identical), plain and speculative runs interleaved."""
    stats = SpecStats(k)
    plain_s = spec_s = 0.0
    tokens = 0
    identical = True
    greedy_generate(loaded.model, prompts[0], 8)  # warm-up (CUDA kernels, allocator)
    speculative_generate(loaded.model, prompts[0], 8, k, loaded.drafter)
    for prompt in prompts:
        plain = greedy_generate(loaded.model, prompt, new_tokens)
        spec = speculative_generate(loaded.model, prompt, new_tokens, k, loaded.drafter)
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
    """The repaired ``scenario`` (repair/demo.py) under the ``global`` policy, as its own row."""
    result = run_case(scenario, "global", fixed, prompts, new_tokens, k, device, tick, guard)
    result.policy = FIXED
    return result


# ----------------------------------------------------------------------------- output

def _pct(x: float) -> str:
    return f"{100 * x:5.1f} %"


def result_rows(results: list[PolicyResult]) -> list[list[str]]:
    rows = []
    for r in results:
        if r.error or r.stats is None:
            rows.append([r.policy, "load fails", "-", "-", "-", "-", "-", "-"])
            continue
        per_pos = "/".join(f"{100 * p:.0f}" for p in r.stats.per_position_rate)
        rows.append([r.policy, _pct(r.stats.acceptance_rate), per_pos, f"{r.stats.mean_acceptance_length:.2f}",
                     f"{r.spec_tokens_per_s:.1f}", f"{r.plain_tokens_per_s:.1f}", f"{r.speedup:.2f}x",
                     "yes" if r.identical else "NO"])
    return rows


HEADERS = ["policy", "accept", "per pos %", "mean len", "tok/s", "no-spec", "speedup", "identical"]


def print_results(console: object, scenario: str, results: list[PolicyResult]) -> None:
    from rich.table import Table

    table = Table(title=DEMO_SCENARIOS[scenario], title_justify="left")
    for h in HEADERS:
        table.add_column(h, justify="left" if h == "policy" else "right", no_wrap=True)
    for row in result_rows(results):
        table.add_row(*row)
    console.print(table)  # type: ignore[attr-defined]
    for r in results:
        if r.error:
            console.print(f"  {r.policy}: the load fails (vLLM 0.33 fails to load this draft too): {r.error}")  # type: ignore[attr-defined]
    for r in results:
        if r.policy == "global" and r.report is not None:
            console.print(f"LoadGuard report for the global load ({scenario}); parameters never written "  # type: ignore[attr-defined]
                          "hold the guard's NaN poison, where vLLM leaves torch.empty memory:")
            console.print(str(r.report), soft_wrap=True)  # type: ignore[attr-defined]


def plot(results: list[PolicyResult], path: Path, k: int) -> None:
    """PNG of per-position acceptance per policy (one panel per scenario)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r.scenario for r in results))
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.5 * len(scenarios), 3.6), squeeze=False)
    width = 0.8 / len(POLICIES)
    for ax, scenario in zip(axes[0], scenarios, strict=True):
        for i, policy in enumerate(POLICIES):
            r = next((x for x in results if x.scenario == scenario and x.policy == policy), None)
            rates = r.stats.per_position_rate if r and r.stats else [0.0] * k
            label = policy + (" (load fails)" if r and r.error else "")
            xs = [p + i * width for p in range(k)]
            ax.bar(xs, [100 * x for x in rates], width, label=label)
            for x, rate in zip(xs, rates, strict=True):
                if r and r.stats and rate < 0.01:  # make a collapsed drafter visible
                    ax.text(x, 1, "0", ha="center", va="bottom", fontsize=8)
        ax.set_xticks([p + width for p in range(k)], [f"pos {p}" for p in range(k)])
        ax.set_ylim(0, 100)
        ax.set_ylabel("accepted / drafts (%)")
        ax.set_title(scenario.upper())
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI

def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="specguard demo", description=__doc__.split("\n")[0])
    p.add_argument("--scenario", choices=[*DEMO_SCENARIOS, "all"], default="s1")
    p.add_argument("-k", "--draft-tokens", type=int, default=3, dest="k", help="draft tokens per step")
    p.add_argument("--prompts", type=int, default=4, help="held-out prompts to decode")
    p.add_argument("--new-tokens", type=int, default=96, help="tokens generated per prompt")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for torch (1 is fastest for this small model)")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write a PNG of per-position acceptance")
    p.add_argument("--fixed", action="store_true",
                   help="add a row: the checkpoint repaired by `specguard fix`, under the stock (global) policy")
    p.add_argument("--no-guard", action="store_true",
                   help="load without LoadGuard: never-written parameters keep torch.empty memory, "
                        "so the global policy's results depend on the allocator (seed 001)")
    return p


class _BadInput(Exception):
    pass


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.k <= 16:
        raise _BadInput(f"--draft-tokens must be 1..16, not {args.k}")
    if not 1 <= args.prompts <= 256 or not 1 <= args.new_tokens <= 1024:
        raise _BadInput("--prompts must be 1..256 and --new-tokens 1..1024")
    if args.threads < 1:
        raise _BadInput("--threads must be >= 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise _BadInput(f"--device {args.device}: no CUDA device is available")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise _BadInput(f"--device must be cpu or cuda[:N], not {args.device!r}")
    if args.plot is not None:
        if not args.plot.parent.is_dir():
            raise _BadInput(f"--plot {args.plot}: directory {args.plot.parent} does not exist")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise _BadInput("--plot needs matplotlib: pip install 'specguard[plot]'") from None


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    try:
        args = _parser().parse_args(argv)
        _check(args)
    except (_BadInput, UsageError) as exc:
        return fail("specguard demo", str(exc))
    console = Console()
    if not console.is_terminal:  # pipes and logs: keep the tables' rows on one line
        console = Console(width=150)
    scenarios = list(DEMO_SCENARIOS) if args.scenario == "all" else [args.scenario]
    prompts = prompts_from_held_out(args.prompts)
    t0 = time.perf_counter()
    results: list[PolicyResult] = []
    with _threads(args.threads), tempfile.TemporaryDirectory(prefix="specguard-demo-") as tmp:
        infos = export_all(Path(tmp), scenarios)
        if args.fixed:
            from specguard.repair.demo import fixed_infos

            fixed = fixed_infos(infos, Path(tmp))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            rows = len(POLICIES) + bool(args.fixed)
            task = progress.add_task("decoding", total=len(scenarios) * rows * len(prompts))
            for scenario in scenarios:
                for policy in POLICIES:
                    progress.update(task, description=f"{scenario} {policy:8s}")
                    results.append(run_case(scenario, policy, infos, prompts, args.new_tokens, args.k,
                                            args.device, lambda: progress.advance(task),
                                            guard=not args.no_guard))
                if args.fixed:
                    results.append(run_fixed(scenario, fixed, prompts, args.new_tokens, args.k, args.device,
                                             lambda: progress.advance(task), guard=not args.no_guard))
    console.print(f"Greedy decoding of {len(prompts)} held-out prompts x {args.new_tokens} tokens, "
                  f"k = {args.k} draft tokens, device {args.device}. accept = accepted / draft tokens; "
                  "per pos = accepted at position i / drafts; mean len = 1 + accepted / drafts; "
                  "speedup = tok/s with speculation / tok/s of plain greedy decoding of the same model; "
                  "identical = output equals plain greedy decoding.")
    for scenario in scenarios:
        print_results(console, scenario, [r for r in results if r.scenario == scenario])
    if args.plot is not None:
        plot(results, args.plot, args.k)
        console.print(f"plot: {args.plot}")
    console.print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
