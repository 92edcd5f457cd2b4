"""How every command front end (specguard, specguard factory, specguard demo)
reports a user's mistake: one line ``PROG: error: MESSAGE`` on stderr, exit 2.

argparse's own style, minus the usage dump, so a pipe or a CI log gets one
line per failure. Anything that is not a SpecguardError is a bug and is left
to propagate as one.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from specguard.errors import SpecguardError, UsageError

EXIT_BAD_INPUT = 2
EXIT_UNVOUCHED = 3  # route/lint: nothing wrong found, but some module specguard could not vouch for
EXIT_INTERRUPTED = 130


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors raise UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def fail(prog: str, error: SpecguardError | str) -> int:
    """Print ``PROG: error: MESSAGE`` (one line) and return the bad-input exit code."""
    print(f"{prog}: error: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT
