"""The `specguard` command's entry point (also `python -m specguard`).

Ctrl-C at any moment is one line, ``specguard: interrupted``, and exit code 130:
while the command's modules import (before cli.main can catch a
KeyboardInterrupt) a signal handler says so and ends the process, nothing
having been written yet; from cli.main on, its ``except KeyboardInterrupt``
does, after the command's own clean-up. This module is imported by the
console script alone: a library user's SIGINT handling is never touched.
"""

import _signal as signal  # type: ignore[import-not-found]  # signal.py imports enum: the C module is loaded
import os


def _interrupted_while_importing(signum: int, frame: object) -> None:
    try:
        os.write(2, b"specguard: interrupted\n")
    finally:
        os._exit(130)


# First, before any import of ours: what is left is the interpreter's own start-up (site
# import, the console script's first line), where Ctrl-C is Python's to report.
signal.signal(signal.SIGINT, _interrupted_while_importing)


def main() -> int:
    """Run `specguard` with sys.argv; the exit code (cli.main's)."""
    import sys

    if "--remote" in sys.argv:  # a kept remote audit is replayed before the parser imports (ends the process)
        from specguard.commands.replay import start

        start(sys.argv[1:])
    from specguard.cli import main as cli_main
    from specguard.usage import interrupted

    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # cli.main catches it from here
        return cli_main()
    except KeyboardInterrupt:  # in the instant before cli.main's own try
        return interrupted()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the answer is in: let the exit finish


def run() -> None:
    """The console script: ``main()``, then the process ends with its exit code at once
    (usage.exit_now: no interpreter teardown)."""
    code = main()
    from specguard.usage import exit_now

    exit_now(code)


if __name__ == "__main__":
    run()
