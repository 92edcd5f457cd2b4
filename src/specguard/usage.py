"""How every command front end (specguard, specguard factory, specguard demo)
ends: a user's mistake is one line ``specguard: error: MESSAGE`` on stderr, exit 2;
Ctrl-C is ``specguard: interrupted``, exit 130; a reader that stops early
(``| head``) ends the command quietly.

argparse's own style, minus the usage dump, so a pipe or a CI log gets one
line per failure. Anything that is not a SpecguardError is a bug and is left
to propagate as one. Imported before any command runs: standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from specguard.errors import SpecguardError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import NoReturn

PROG = "specguard"  # every error line's prefix, whichever command (factory, demo) printed it
EXIT_BAD_INPUT = 2
EXIT_UNVOUCHED = 3  # route/lint: nothing wrong found, but some module specguard could not vouch for
EXIT_INTERRUPTED = 130


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors raise UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def fail(prog: str, error: SpecguardError | str, *, debug: bool = False) -> int:
    """Print ``PROG: error: MESSAGE`` (one line; ``debug``: the traceback being handled
    first) and return the bad-input exit code."""
    if debug:
        import traceback

        traceback.print_exc()
    print(f"{prog}: error: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT


@contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Within: a Ctrl-C waits (SIGINT blocked in this thread) and is raised as
    KeyboardInterrupt on leaving. For imports: importlib's locks and a class's
    creation are not safe against a KeyboardInterrupt landing inside them (one can
    leave the import lock held, and a thread importing beside it then waits
    forever, or turn into a RuntimeError from ``__set_name__``). A thread started
    within keeps SIGINT blocked for good: the main thread alone answers Ctrl-C."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a Ctrl-C that waited is raised here


def interrupted(prog: str = PROG) -> int:
    """Ctrl-C's answer: print ``PROG: interrupted`` and return exit code 130.

    A KeyboardInterrupt raised inside ``exec``/``eval`` of a string (dataclasses and
    namedtuple build their methods so, on a command's lazy imports) sets the
    interpreter's "unhandled KeyboardInterrupt" flag even though it is caught here, and
    under ``python -m`` the interpreter then ends the process by SIGINT at exit instead
    of with this code (CPython 3.11 main.c; tests/test_terminal.py). Every exec of a
    string clears that flag first: an empty one does only that."""
    print(f"{prog}: interrupted", file=sys.stderr)
    exec("")  # clears the flag (see above); nothing runs
    return EXIT_INTERRUPTED


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once stdout and stderr are flushed, without the
    interpreter's teardown. The entry points call it with the command's answer: its
    files are written and its threads joined by then, and tearing down what a remote
    audit built (40,000 header records, every imported module) cost 60-100 ms of CPU,
    ~8 % of the run (benchmarks/remote.py), for nothing the user sees."""
    import signal
    from contextlib import suppress

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the answer is in: a late Ctrl-C cannot turn it into a traceback
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a reader gone (``| head``) or a closed stream: nothing more to say
            stream.flush()
    os._exit(code)


def reader_gone(code: int) -> int:
    """stdout's reader has gone (``| head``): point stdout at /dev/null, so Python's
    flush at exit says nothing, and return ``code`` (the command's own answer)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # stdout is no file (a test's capture): nothing flushes there at exit
        return code
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return code
