"""`specguard fix`: write a repaired checkpoint (or print the config change)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specguard.checkpoint.source import Checkpoint
from specguard.commands.sources import open_path
from specguard.engines.registry import engine as engine_of
from specguard.engines.registry import installed as installed_engine
from specguard.engines.registry import keys as engine_keys
from specguard.errors import UsageError
from specguard.lint import lint
from specguard.lint.finding import ERROR
from specguard.repair import make_plan
from specguard.repair.diff import config_diff, hf_overrides
from specguard.repair.plan import ALL, Plan, Problem, describe, merged, open_resolvers, runs_for
from specguard.repair.strategies.draft_layers import NO_DRAFTER
from specguard.repair.verify import RepairFailed, verify
from specguard.repair.write import Written, check_out, write_repair
from specguard.resolve import Resolver
from specguard.terminal import console, plural
from specguard.usage import EXIT_UNVOUCHED

EXIT_OK = 0


def lint_check(resolvers: list[Resolver], platform: str) -> Sequence[str]:
    """`specguard lint` on the repaired directory: no error; warnings are returned as notes."""
    findings = lint(resolvers).findings
    errors = [f for f in findings if f.severity == ERROR]
    if errors:
        raise RepairFailed(f"lint on {platform}", f"{errors[0].code}: {errors[0].message}; nothing written")
    return [f.code for f in findings]


def run_fix(args: argparse.Namespace) -> int:
    if args.out is None and not args.diff:
        raise UsageError("fix needs --out DIR (or --diff to print the config change)")
    if args.draft_method == "eagle" and not args.draft:
        raise UsageError("--draft-method eagle repairs a separate EAGLE drafter: pass --draft SRC")
    if args.remote and not args.diff:
        raise UsageError("a remote checkpoint cannot be linked into DIR: use --diff")
    choice = getattr(args, "engine", None)
    engines = engine_keys() if choice == ALL else (choice or installed_engine(),)
    runs = runs_for(engines, args.platform)
    platforms = tuple(dict.fromkeys(p for _, p in runs))
    target = _open(args.source, args)
    drafter = _open(args.draft, args) if args.draft else None
    plan = make_plan(target, drafter, platforms, args.draft_method, engines)
    names = " + ".join(c.name for c in (target, drafter) if c is not None)
    where = _runs_text(runs)
    if plan.clean:
        first = {e: p for e, p in reversed(runs)}  # each engine's first platform class
        left = ", ".join(sorted({c for e, p in first.items()
                                 for c in _lint_errors(target, drafter, p, args.draft_method, e)}))
        if left:
            raise UsageError(f"{names}: every module routes as stored, but lint finds {left}; "
                             "fix repairs routing only (`specguard lint` says what to change)")
        if plan.unvouched:
            _say(f"{names}: nothing to repair that specguard can vouch for on {where}")
            _print_unvouched(plan)
            return EXIT_UNVOUCHED
        _say(f"{names}: every module routes as stored on {where}; nothing to repair")
        return EXIT_OK
    out = Path(args.out) if args.out else None
    if out is not None:
        check_out(plan, out)  # a bad --out is refused before the plan is printed
    _print_problems(plan)
    _print_changes(plan)
    if args.diff:
        _print_diff(plan, out)
        if out is None:
            return EXIT_OK
    if out is None:
        raise UsageError("fix needs --out DIR (or --diff to print the config change)")
    checked = []
    results = write_repair(plan, out, lambda paths: checked.append(
        verify(paths, platforms, args.draft_method, lint_check, engines)))
    for w in results:
        _print_written(w)
    v = checked[-1]
    left = f"; lint warnings left: {', '.join(v.notes)}" if v.notes else ""
    ok = v.modules - v.unvouched
    unknown = f", {v.unvouched} unknown" if v.unvouched else ""
    _say(f"verified: route {ok}/{v.modules} ok{unknown} on {where}; lint: no error{left}")
    if any(ov.reencode for ov in plan.overlays) and set(platforms) - {"cpu"}:
        _say("note: the CPU/XPU class reads no per-layer MXFP4 switch; --platform cuda (or rocm) "
              "repairs with config alone")
    if any(NO_DRAFTER in c.why for ov in plan.overlays for c in ov.changes):
        print(f"note: {NO_DRAFTER}")
    if len(results) > 1 and any(e.startswith("vllm-") for e in plan.engines):
        method = _vllm_method(args.draft_method, plan.overlays[-1].config)
        print(f"serve: vllm serve {results[0].path} --speculative-config "
              f"'{{\"method\": \"{method}\", \"model\": \"{results[1].path}\", ...}}'")
    if len(results) > 1 and any(e.startswith("sglang-") for e in plan.engines):
        print(f"serve: python -m sglang.launch_server --model-path {results[0].path} "
              f"--speculative-draft-model-path {results[1].path} ...")
    if plan.unvouched:
        _print_unvouched(plan)
        return EXIT_UNVOUCHED
    return EXIT_OK


def _runs_text(runs: Sequence[tuple[str, str]], named: bool | None = None) -> str:
    """``cuda, rocm, cpu`` for one engine; ``vLLM 0.33 (cuda, rocm, cpu), vLLM 0.32 (...)`` for
    several (``named``: name the engine even where the runs are one engine's)."""
    by: dict[str, list[str]] = {}
    for key, platform in runs:
        by.setdefault(key, []).append(platform)
    if not (len(by) > 1 if named is None else named):
        return ", ".join(dict.fromkeys(p for ps in by.values() for p in ps))
    return ", ".join(f"{engine_of(k).name} ({', '.join(dict.fromkeys(ps))})" for k, ps in by.items())


def _print_unvouched(plan: Plan) -> None:
    """What the repair left alone because specguard cannot say what the engine builds (exit 3,
    as route and lint: `specguard rule SG205`)."""
    by: dict[tuple[str, str], dict[str, Problem]] = {}
    for p in plan.unvouched:
        why = p.route.vllm.reason if p.route.vllm is not None else p.route.reason
        by.setdefault((p.overlay.checkpoint.name, why), {}).setdefault(p.route.prefix, p)
    for (name, why), ps in by.items():
        _say(f"could not vouch for {len(ps)} module(s) of {name}, left as they are ({describe(list(ps))}): {why}")


def _say(line: str) -> None:
    """A line of the plan or the result: wrapped at words on a terminal, one line in a pipe."""
    console().print(line, markup=False, highlight=False)


def _lint_errors(target: Checkpoint, drafter: Checkpoint | None, platform: str, method: str | None,
                 engine: str) -> set[str]:
    findings = lint(open_resolvers(target, drafter, platform, method, engine)).findings
    return {f.code for f in findings if f.severity == ERROR}


def _open(source: str | None, args: argparse.Namespace) -> Checkpoint:
    ckpt = open_path(source, revision=args.revision, remote=args.remote)
    if ckpt.root is not None and Path(source or ckpt.root).is_file():
        raise UsageError(f"{source}: fix needs a checkpoint directory (config.json beside the shards)")
    return ckpt


def _print_problems(plan: Plan) -> None:
    """One line per checkpoint, verdict and set of platforms: the modules, run-length grouped."""
    runs: dict[tuple, list[tuple[str, str]]] = {}
    for p in plan.problems:
        runs.setdefault((p.overlay.checkpoint.name, p.route.verdict, p.route.prefix), []).append(
            (p.engine, p.platform))
    lines: dict[tuple, list[str]] = {}
    for (name, verdict, prefix), where in runs.items():
        text = _runs_text(where, len(plan.engines) > 1)
        lines.setdefault((name, verdict, text), []).append(prefix)
    for (name, verdict, where), prefixes in lines.items():
        _say(f"{name}: {len(prefixes)} module(s) {verdict} on {where}: {describe(prefixes)}")


def _print_changes(plan: Plan) -> None:
    for ov in plan.overlays:
        who = f"{ov.role}: " if len(plan.overlays) > 1 else ""
        for c in merged(ov.changes):
            _say(f"  {who}{c}  ({c.why})")
        if ov.reencode:
            fmts = sorted(set(ov.reencode.values()))
            _say(f"  {who}re-encode {len(ov.reencode)} module(s) to {', '.join(fmts)} (exact): "
                  f"{describe(ov.reencode)}")


def _print_diff(plan: Plan, out: Path | None) -> None:
    print(config_diff(plan, out), end="")
    if not any(e.startswith("vllm-") for e in plan.engines):
        _say("no --hf-overrides (a vLLM flag): SGLang reads the repaired config files; serve the directory "
             "--out writes (`python -m sglang.launch_server --model-path DIR`)")
        return
    overrides, why = hf_overrides(plan)
    if overrides is None:
        _say(f"no --hf-overrides: {why}")
    else:
        print(f"vllm serve {plan.overlays[0].checkpoint.name} --hf-overrides '{overrides}'")
        _say(f"  ({why})")


def _print_written(w: Written) -> None:
    if w.unchanged:
        _say(f"{w.path}: already holds this repair; left as it is")
        return
    links = len(w.linked) + len(w.symlinked)
    kind = "hard link" if not w.symlinked else ("symlink" if not w.linked else "link")
    if not w.written:
        _say(f"wrote {w.path}: unchanged, {plural(links, kind)}")
        return
    added = f"; adds {_size(w.added_bytes)}" if w.replaced else ""
    _say(f"wrote {w.path}: {plural(len(w.written), 'new file')}, {plural(links, kind)}{added}")
    _say(f"  new: {', '.join(sorted(w.written))}")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{int(n):,} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _vllm_method(draft_method: str | None, drafter: Mapping[str, Any]) -> str:
    """vLLM's ``speculative_config.method`` for a separate drafter: ``eagle3`` for an EAGLE-3
    head (its class names it), ``eagle`` for another EAGLE head, else DSpark."""
    if draft_method != "eagle":
        return "dspark"
    archs = " ".join(str(a) for a in drafter.get("architectures") or ()).lower()
    return "eagle3" if "eagle3" in archs else "eagle"
