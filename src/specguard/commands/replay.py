"""A remote audit's finished output, kept by commit: a commit never changes, so the same
command with the same options, by the same specguard in the same environment, prints the
same bytes. A second ``inspect``/``route``/``lint --remote`` of a revision then costs the
one request that resolves it (none for a commit hash), and neither parsing nor routing.

The key holds everything the output depends on besides the commit: specguard's version and
the size and time of every file of its package (an edited rule misses), the command's words
as typed (the parser, one of those files, makes the same options of them every time; another
spelling of the same options is another key), the import path and each of its folders'
times (an engine installed or upgraded misses), and what shapes the rendering (a terminal
and its size, COLUMNS, colour settings).

The console script replays before it imports its parser (``start``): the HEAD leaves
first, the key is worked out while the server answers, and a kept answer is printed and
the process ends; anything else (no entry, a lookup the plain client cannot make) goes on
to the command, which reuses the commit found.
Only an answer the command gave in full is kept: an error, Ctrl-C or a reader gone early
keeps nothing. A damaged entry is a miss (cache.py's checksum).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path
    from typing import IO, Any

VERSION = 1
# What rich and terminal.py read from the environment to decide widths and colours.
_RENDER_ENV = ("COLUMNS", "LINES", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE",
               "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES")
_UNKEYED = frozenset({"func", "argv"})  # parsed options that are code, or the words themselves
# The kept commands' options, as cli.py's parser takes them (tests/test_startup.py checks
# each against it): flags, and options with one value (None: any value; else the choices).
_FLAGS = {"inspect": {"--remote", "--json", "--tensors", "--debug"},
          "route": {"--remote", "--json", "--all", "--debug"},
          "lint": {"--remote", "--json", "--debug"}}
_SCOPE: dict[str, tuple[str, ...] | None] = {
    "--revision": None, "--draft": None, "--draft-method": ("mtp", "dspark", "eagle"),
    "--platform": ("cuda", "rocm", "cpu"), "--engine": ("vllm-0.33", "vllm-0.32", "sglang-0.5.23", "all"),
    "--speculative-draft-model-quantization": None,
}
_VALUED: dict[str, dict[str, tuple[str, ...] | None]] = {
    "inspect": {"--revision": None},
    "route": _SCOPE,
    "lint": {**_SCOPE, "--format": ("text", "json", "sarif"), "--select": None, "--ignore": None,
             "--fail-on": ("info", "warning", "error", "never")},
}


def start(argv: list[str]) -> None:
    """Replay a kept remote audit before anything else imports: the console script calls
    this first, with its arguments. Only where the parser will read them as a remote audit
    of that repo at that revision, beyond doubt; anything else (an abbreviation, an option
    of another command, a value out of its choices) returns at once and the command asks
    as it always did. On a kept answer, prints it and ends the process with its exit code."""
    audit = _remote_audit(argv)
    if audit is None or os.path.exists(audit[0]):  # a local path: no repo to ask (_keepable)
        return
    import _signal  # type: ignore[import-not-found]  # signal.py imports enum: the C module is loaded

    # A connect can wait: Ctrl-C is one line here too, before the command's own handler.
    before = _signal.signal(_signal.SIGINT, _interrupted)
    try:
        from specguard.checkpoint.plainhead import send

        send(*audit)  # the HEAD leaves now; the rest happens while the server answers
        answer = _replay(argv, *audit)
        if answer is not None:
            _print_and_exit(answer)
    finally:
        _signal.signal(_signal.SIGINT, before)


def _replay(argv: list[str], repo_id: str, revision: str | None) -> tuple[int, list[tuple[bool, str]]] | None:
    """The kept answer of these words at the commit the HEAD names; None: no entry, or no
    answer from the plain lookup (the command then asks the full client)."""
    from specguard.checkpoint.revision import resolve
    from specguard.errors import SpecguardError

    keyed: list[str] = []  # worked out while the server answers the HEAD
    try:
        resolved = resolve(repo_id, revision, lambda: keyed.append(_key(argv)), plain_only=True)
    except SpecguardError:  # a bad setting: the command says so, in its words
        return None
    if resolved is None:
        return None
    return _load(_entry(repo_id, *resolved, keyed[0] if keyed else _key(argv)))


def _print_and_exit(answer: tuple[int, list[tuple[bool, str]]]) -> None:
    """Print a kept answer and end the process with its code (usage.exit_now's way, without
    importing usage and with it argparse: ~8 ms of CPU for nothing)."""
    import _signal

    code = answer[0]
    try:  # Ctrl-C meanwhile (a reader that does not read): ``_interrupted``
        for to_stderr, text in answer[1]:
            (sys.stderr if to_stderr else sys.stdout).write(text)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BrokenPipeError:  # the reader has all it wanted (``| head``): as cli.main ends it
        code = 0
    except (OSError, ValueError):
        pass
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # all written: a late Ctrl-C cannot change the code
    os._exit(code)


def _interrupted(signum: int, frame: object) -> None:
    """Ctrl-C while the HEAD leaves, before the command's own handler: nothing written yet."""
    try:
        os.write(2, b"specguard: interrupted\n")
    finally:
        os._exit(130)


def _remote_audit(argv: list[str]) -> tuple[str, str | None] | None:
    """(repo id, revision) where ``argv`` is surely a keepable remote audit; else None."""
    if not argv or argv[0] not in _FLAGS or "--remote" not in argv:
        return None
    flags, valued = _FLAGS[argv[0]], _VALUED[argv[0]]
    source, revision = None, None
    words = iter(argv[1:])
    for word in words:
        if word in flags:
            continue
        name, eq, value = word.partition("=")
        if name in valued:
            if not eq:
                value = next(words, "-")
            choices = valued[name]
            if value.startswith("-") or (choices is not None and value not in choices) or name == "--draft":
                return None
            revision = value if name == "--revision" else revision
        elif word.startswith("-") or source is not None or not word:
            return None
        else:
            source = word
    return None if source is None else (source, revision)


def run_cached(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """``run(args)``, or its kept output when this exact audit of this commit was kept."""
    if not _keepable(args):
        return run(args)
    from specguard.checkpoint.revision import resolve

    keyed: list[str] = []  # this audit's key, worked out while the server answers the HEAD
    resolved = resolve(args.source, args.revision, lambda: keyed.append(_key(_words(args))))
    if resolved is not None:  # None: a first audit, which learns its commit as it reads
        answer = _load(_entry(args.source, *resolved, keyed[0] if keyed else _key(_words(args))))
        if answer is not None:
            for to_stderr, text in answer[1]:
                (sys.stderr if to_stderr else sys.stdout).write(text)
            return answer[0]
    from specguard.usage import ctrl_c_deferred

    with ctrl_c_deferred():
        from specguard.checkpoint.source import gc_paused
    # Everything an audit builds (its modules' imports, 40,000 header records, the module table)
    # is kept to its end: the collector, paused over the whole audit (the reading's thread
    # included: the switch is the process's), would rescan the growing heap for nothing
    # (~6 % of a cold audit's CPU, benchmarks/remote.py).
    with gc_paused():
        return _audit(args, run)


def _audit(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """A first audit of this commit (or of these options): read, run, keep its output."""
    from specguard.checkpoint import kept
    from specguard.checkpoint.revision import read_at
    from specguard.usage import ctrl_c_deferred

    with ctrl_c_deferred():  # the reading's thread starts with SIGINT blocked: Ctrl-C stays the main thread's
        from specguard.checkpoint.remote import prefetch

        reading = prefetch(args.source, args.revision)  # under way while the command imports its stages
    out, err = _Recorder(sys.stdout, False), _Recorder(sys.stderr, True)
    chunks: list[tuple[bool, str]] = []
    out.chunks = err.chunks = chunks
    sys.stdout, sys.stderr = out, err
    try:
        with reading:
            code = run(args)
    finally:
        sys.stdout, sys.stderr = out.stream, err.stream
    read = read_at(args.source, args.revision)
    if not out.broken and not err.broken and read is not None:
        import json

        kept.save_checked(_entry(args.source, *read, _key(_words(args))), json.dumps([code, chunks]).encode())
    return code


def _keepable(args: argparse.Namespace) -> bool:
    """A remote audit of one repo (not of a local path, nor with a separate drafter)."""
    if not getattr(args, "remote", False) or not args.source or getattr(args, "draft", None):
        return False
    from pathlib import Path

    return not Path(args.source).exists()  # a local path wins over a repo id (and a drafter may sit beside it)


def _load(path: Path | None) -> tuple[int, list[tuple[bool, str]]] | None:
    """The kept (exit code, output chunks), or None: absent, damaged or of another shape."""
    import json

    from specguard.checkpoint import kept

    payload = kept.load_checked(path)
    if payload is None:
        return None
    try:
        code, chunks = json.loads(bytes(payload))
        if isinstance(code, int) and all(isinstance(e, bool) and isinstance(t, str) for e, t in chunks):
            return code, chunks
    except (ValueError, TypeError):
        pass
    return None


def _entry(repo_id: str, endpoint: str, commit: str, key: str) -> Path | None:
    """Where an audit's output at ``commit`` is kept, by its key (``_key``): beside the
    commit's headers (cache.py)."""
    from specguard.checkpoint import kept

    snapshot = kept.snapshot_path(endpoint, repo_id, commit)
    if snapshot is None:
        return None
    return snapshot.parent / "results" / commit / f"{key}.v{VERSION}"


def _words(args: argparse.Namespace) -> list[str]:
    """The words the command was given (cli.py keeps them as ``args.argv``); else its parsed
    options, for a caller that parsed them itself."""
    words = getattr(args, "argv", None)
    if words is not None:
        return list(words)
    return [f"{k}={v!r}" for k, v in sorted(vars(args).items()) if k not in _UNKEYED]


def _key(words: list[str]) -> str:
    import json  # for _load, which follows: imported while the server answers  # noqa: F401

    from specguard._version import __version__
    from specguard.checkpoint.kept import sha256_hex

    parts: list[Any] = [VERSION, __version__, _package_files(), words, _import_path(), _rendering()]
    return sha256_hex(repr(parts).encode())[:32]


def _package_files() -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every file of the specguard package: its code, plans and data."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    found: list[tuple[str, int, int]] = []
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":
                        stack.append(e.path)
                else:
                    st = e.stat()
                    found.append((e.path, st.st_size, st.st_mtime_ns))
    return sorted(found)


def _import_path() -> list[tuple[str, int]]:
    """Each import path folder and its time: installing or removing a package changes it."""
    times = []
    for p in sys.path:
        try:
            times.append((p, os.stat(p or ".").st_mtime_ns))
        except OSError:
            times.append((p, -1))
    return times


def _rendering() -> list[Any]:
    ttys = [_on_terminal(s) for s in (sys.stdout, sys.stderr)]
    size = None
    if ttys[0]:  # shutil (bz2, lzma: ~2 ms) only where there is a terminal to measure
        import shutil

        size = tuple(shutil.get_terminal_size((0, 0)))
    return [ttys, size, getattr(sys.stdout, "encoding", None), [(v, os.environ.get(v)) for v in _RENDER_ENV]]


def _on_terminal(stream: IO[str]) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, ValueError, OSError):  # a closed stream, a test's capture
        return False


class _Recorder:
    """A stream that writes through and keeps what was written (in order, both streams)."""

    def __init__(self, stream: IO[str], is_stderr: bool) -> None:
        self.stream, self.is_stderr, self.broken = stream, is_stderr, False
        self.chunks: list[tuple[bool, str]] = []

    def write(self, text: str) -> int:
        try:
            n = self.stream.write(text)
        except BrokenPipeError:
            self.broken = True
            raise
        self.chunks.append((self.is_stderr, text))
        return n

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self.broken = True
            raise

    @property
    def unrecorded(self) -> IO[str]:
        """The stream itself, for what must not be replayed (a progress bar)."""
        return self.stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
