"""The `specguard` command: parses arguments, hands each command to its
handler in ``commands/``.

Bad input or bad usage (a SpecguardError) is one line on stderr and exit code 2
(``--debug`` shows the traceback); any other exception is a bug in specguard
and shows as one.

Parsing imports no stage: `--version`, `--help`, `rule`, a mistyped option and
`watch` never load numpy or ml_dtypes, and a command's own modules are imported
when it runs (tests/test_startup.py checks the import graph; benchmarks/startup.py
times it), with Ctrl-C deferred to their end (usage.py ``ctrl_c_deferred``: a
KeyboardInterrupt inside the import machinery is not always one when it comes out).
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and "--remote" in sys.argv:  # `python -m specguard.cli`: as __main__.py does,
    from specguard.commands.replay import start  # a kept remote audit is replayed before the parser imports

    start(sys.argv[1:])

import argparse
from contextlib import AbstractContextManager, nullcontext

from specguard._version import __version__
from specguard.errors import SpecguardError, UsageError
from specguard.usage import (
    EXIT_BAD_INPUT,
    ArgumentParser,
    ctrl_c_deferred,
    exit_now,
    fail,
    interrupted,
    reader_gone,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

PROG = "specguard"

# The parser's vocabularies, written out so that parsing imports no stage;
# tests/test_startup.py checks each against the stage that owns it.
ENGINE = "vLLM 0.33"  # engines.vllm.v0_33.ENGINE
PLATFORMS = ("cuda", "rocm", "cpu")  # engines.vllm.v0_33.PLATFORMS
DRAFT_METHODS = ("mtp", "dspark", "eagle")  # layouts.roles.DraftKind
SEVERITIES = ("info", "warning", "error")  # lint.finding.Severity, ascending
ENGINE_KEYS = ("vllm-0.33", "vllm-0.32", "sglang-0.5.23")  # engines.registry.keys()
DEFAULT_ENGINE = "vllm-0.33"  # engines.registry.DEFAULT


def _source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source", nargs="?", default=None,
        help="checkpoint directory, .safetensors file or HF repo id (default: the embedded sample)",
    )
    p.add_argument("--revision", help="HF revision (branch, tag or commit) for a repo id")
    p.add_argument("--remote", action="store_true", help="read headers over HTTP (range requests) if not cached")


def _kept(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """A remote audit's output kept by commit (commands/replay.py); the command's modules
    are imported only when it runs."""
    if not args.remote:
        return run(args)
    with ctrl_c_deferred():
        from specguard.commands.replay import run_cached

    return run_cached(args, run)


def _cmd_inspect(args: argparse.Namespace) -> int:
    return _kept(args, _run_inspect)


def _run_inspect(args: argparse.Namespace) -> int:
    with ctrl_c_deferred():
        from specguard.commands.inspect import run_inspect

    return run_inspect(args)


def _cmd_route(args: argparse.Namespace) -> int:
    return _kept(args, _run_route)


def _run_route(args: argparse.Namespace) -> int:
    with ctrl_c_deferred():
        from specguard.commands.route import run_route

    return run_route(args)


def _cmd_lint(args: argparse.Namespace) -> int:
    return _kept(args, _run_lint)


def _run_lint(args: argparse.Namespace) -> int:
    with ctrl_c_deferred():
        from specguard.commands.lint import run_lint

    return run_lint(args)


def _cmd_rule(args: argparse.Namespace) -> int:
    with ctrl_c_deferred():
        from specguard.commands.rule import run_rule

    return run_rule(args)


def _cmd_fix(args: argparse.Namespace) -> int:
    with ctrl_c_deferred():
        from specguard.commands.fix import run_fix

    return run_fix(args)


def _cmd_report(args: argparse.Namespace) -> int:
    with ctrl_c_deferred():
        from specguard.commands.report import run_report

    return run_report(args)


def _cmd_watch(args: argparse.Namespace) -> int:
    with ctrl_c_deferred():
        from specguard.commands.watch import run_watch

    return run_watch(args)


def _demo(argv: list[str]) -> int:
    try:
        with ctrl_c_deferred():
            from specguard.refdecoder.demo import main as demo_main
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        return fail(PROG, "`specguard demo` needs torch: pip install 'specguard[torch]' "
                          "(or `pip install torch==2.13.0` for the CPU build)")
    return demo_main(argv)


def _factory(argv: list[str]) -> int:
    with ctrl_c_deferred():
        from specguard.factory.cli import main as factory_main

    return factory_main(argv)


# Subcommands with parsers of their own: everything after the name is theirs.
PASSTHROUGH: dict[str, Callable[[list[str]], int]] = {"demo": _demo, "factory": _factory}


EXIT_CODES = "exit codes: 0 ok; {what}2 bad input or usage (one line on stderr); {unvouched}130 interrupted"
UNVOUCHED = ("3 could not vouch: nothing else wrong, but specguard does not model what the engine builds for "
             "some module (a verdict `unknown`, SG205); with --engine all the same over every engine's answers: "
             "1 beats 3 beats 0; ")


def exit_codes(what: str = "", vouches: bool = False) -> str:
    """The epilog every command's --help ends with (``what``: what exit code 1 means, if used;
    ``vouches``: the command exits 3 where it cannot vouch for a module)."""
    return EXIT_CODES.format(what=f"1 {what}; " if what else "", unvouched=UNVOUCHED if vouches else "")


def _command(sub: Any, name: str, help: str, exits: str, *, vouches: bool = False,
             **kwargs: Any) -> argparse.ArgumentParser:
    kwargs.setdefault("description", help)
    p = sub.add_parser(name, help=help, epilog=exit_codes(exits, vouches), **kwargs)
    # --debug is accepted after the command too (``specguard lint --debug``).
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the traceback behind an error (exit code unchanged)")
    return p


def _draft_args(p: argparse.ArgumentParser, draft_help: str, every_engine: bool = False) -> None:
    p.add_argument("--draft", metavar="SRC2", help=draft_help)
    p.add_argument("--draft-method", choices=DRAFT_METHODS,
                   help="how the draft is served (default: from config.json: DSpark where it names "
                        "dspark_target_layer_ids, else MTP; eagle needs --draft)")
    p.add_argument("--platform", choices=PLATFORMS, default="cuda",
                   help="vLLM platform whose quant-config class to model (default: cuda)")
    p.add_argument("--engine", choices=[*ENGINE_KEYS, *(["all"] if every_engine else [])], default=None,
                   help="engine version to model (docs/engines.md; default: the installed one when "
                        f"modelled, else {DEFAULT_ENGINE})" + ("; all: every one side by side" if every_engine else ""))
    _sglang_args(p)


SGLANG_KEY = "sglang-0.5.23"  # the engine whose launch flag _sglang_args takes


def _sglang_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--speculative-draft-model-quantization", metavar="METHOD",
                   help=f"{SGLANG_KEY} only: the draft's quantization as SGLang's launch flag of this name sets "
                        "it (unquant: none; default: as the target; docs/engines.md)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser. ``command``: the command being run ("" for none), whose options alone
    need their module imported (watch's come from commands/watch.py); None: every command's."""
    parser = ArgumentParser(
        prog=PROG,
        description="Read what a quantized checkpoint stores, module by module, and check it against its config.",
        epilog="Run `specguard COMMAND --help` for a command's options and exit codes.",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback behind an error (exit code unchanged)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _command(sub, "inspect", "show what every module is stored as (headers only)", "")
    _source_args(p)
    p.add_argument("--json", action="store_true",
                   help="one JSON object: {schema, checkpoint, records: [one record per module]} (docs/json.md)")
    p.add_argument("--tensors", action="store_true", help="one row (with --json: one record) per tensor")
    p.set_defaults(func=_cmd_inspect)

    p = _command(sub, "route", f"each runtime module to the scheme it is stored in, next to {ENGINE}'s choice",
                 "a module is misrouted, missing, refused or names an exclusion pattern that matches nothing",
                 vouches=True)
    _source_args(p)
    _draft_args(p, "separate drafter checkpoint (DSpark/EAGLE speculative_config.model)", every_engine=True)
    p.add_argument("--json", action="store_true",
                   help="one JSON object: {schema, checkpoint, records: [one record per runtime module]}")
    p.add_argument("--all", action="store_true",
                   help="also list main-stack modules that route ok (hidden by default)")
    p.set_defaults(func=_cmd_route)

    p = _command(sub, "lint", "every contradiction between config and disk, as stable rules",
                 "a finding (other than SG205) at least as severe as --fail-on", vouches=True)
    _source_args(p)
    _draft_args(p, "separate drafter checkpoint, linted with the target", every_engine=True)
    p.add_argument("--format", choices=["text", "json", "sarif"], default="text",
                   help="text (one finding per line in a pipe), JSON, or SARIF 2.1.0 (default: text)")
    p.add_argument("--json", action="store_const", dest="format", const="json",
                   help="the same as --format json (as inspect and route take it)")
    p.add_argument("--select", help="comma-separated rule codes or prefixes to run (e.g. SG2,SG401; default: all)")
    p.add_argument("--ignore", help="comma-separated rule codes or prefixes to skip")
    p.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="warning",
                   help="exit 1 when a finding is at least this severe (default: warning)")
    p.set_defaults(func=_cmd_lint)

    p = _command(sub, "rule", "explain a lint rule: specguard rule SG201 (or --all)", "")
    p.add_argument("code", nargs="?", help="a rule code, e.g. SG201 (`specguard rule --all` lists them)")
    p.add_argument("--all", action="store_true", help="list every rule")
    p.set_defaults(func=_cmd_rule)

    p = _command(sub, "fix", "write a repaired checkpoint a stock engine loads as stored (docs/fix.md)", "",
                 vouches=True,
                 usage=f"{PROG} fix [SOURCE] --out DIR [options]\n       {PROG} fix [SOURCE] --diff [options]")
    _source_args(p)
    out = p.add_argument_group("required: --out, --diff or both")
    out.add_argument("--out", metavar="DIR", help="new or empty directory for the repaired checkpoint")
    out.add_argument("--diff", action="store_true",
                     help="print the config change (and a --hf-overrides JSON); alone, it writes nothing")
    p.add_argument("--draft", metavar="SRC2", help="separate drafter checkpoint, repaired with the target")
    p.add_argument("--draft-method", choices=DRAFT_METHODS, help="how the draft is served")
    p.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all",
                   help="vLLM platform classes the repair must route right on (default: all)")
    p.add_argument("--engine", choices=[*ENGINE_KEYS, "all"], default=None,
                   help="engine version the repair must load as stored under (docs/engines.md; default: the "
                        f"installed one when modelled, else {DEFAULT_ENGINE}); all: every modelled one")
    _sglang_args(p)
    p.set_defaults(func=_cmd_fix)

    p = _command(sub, "report", "one self-contained HTML page: summary, module map, findings, repair",
                 "", description="Write one self-contained HTML page (no network, no external files) that "
                 "shows the checkpoint at a glance: verdict per engine, lint's exit code, bytes per stored "
                 "format, a module map coloured by stored format with misrouted cells marked, the findings "
                 "with their rule pages, and the config change `specguard fix` would write.")
    _source_args(p)
    _draft_args(p, "separate drafter checkpoint (DSpark/EAGLE speculative_config.model)", every_engine=True)
    p.add_argument("-o", "--output", metavar="FILE", help="the HTML file to write (default: specguard-report.html)")
    p.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="warning",
                   help="the lint threshold whose exit code the summary states (default: warning)")
    p.set_defaults(func=_cmd_report)

    p = _command(sub, "watch", "speculative-decoding health of a running vLLM server, from its /metrics",
                 "--once: a model alerts (0: healthy or too idle to judge; 2 also: the server cannot be watched)")
    if command in (None, "watch"):
        with ctrl_c_deferred():
            from specguard.commands.watch import add_arguments

        add_arguments(p)
    p.set_defaults(func=_cmd_watch)

    sub.add_parser("demo", help="what misrouting costs: speculative decoding on a trained model (needs torch; "
                                "`specguard demo --help`)")
    sub.add_parser("factory", help="write a scenario checkpoint: specguard factory SCENARIO OUTDIR "
                                   "(`specguard factory --help`)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit code (0 ok, 1 findings, 2 bad input or usage, 3 route/lint could
    not vouch for every module, 130 Ctrl-C)."""
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        if argv and argv[0] in PASSTHROUGH:
            return PASSTHROUGH[argv[0]](argv[1:])
        return _run(argv)
    except KeyboardInterrupt:  # every command leaves nothing half-written; say so in one line
        return interrupted(PROG)
    except BrokenPipeError:  # `specguard rule --all | head`: the reader has all it wanted
        return reader_gone(0)


def _command_in(argv: list[str]) -> str | None:
    """The command named in ``argv`` (its first word that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def _run(argv: list[str]) -> int:
    parser = build_parser(_command_in(argv) or "")
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        return fail(PROG, e)
    args.argv = argv  # the words themselves: a remote audit's output is kept by them (commands/replay.py)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:  # a bare `specguard`: what it takes, where errors go
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with _launched(args):
            return func(args)
    except BrokenPipeError:
        raise  # not the user's system refusing a file: main() ends quietly
    except (SpecguardError, OSError) as e:
        # Bad input or usage, or a file the user's system will not let us read
        # (permissions, a vanished disk); anything else is a bug and shows as one.
        return fail(PROG, e if isinstance(e, SpecguardError) else _os_error(e), debug=getattr(args, "debug", False))


def _launched(args: argparse.Namespace) -> AbstractContextManager[None]:
    """SGLang's launch flag, applied to its engine model for this run (a usage error under
    an engine that has no such flag)."""
    draft_quant = getattr(args, "speculative_draft_model_quantization", None)
    if draft_quant is None:
        return nullcontext()
    if getattr(args, "engine", None) not in (SGLANG_KEY, "all"):
        raise UsageError(f"--speculative-draft-model-quantization is SGLang's launch flag: "
                         f"add --engine {SGLANG_KEY} (or all)")
    from specguard.engines.registry import launched_with

    return launched_with(SGLANG_KEY, draft_quantization=draft_quant)


def _os_error(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{e.strerror or e}"


if __name__ == "__main__":
    exit_now(main())
