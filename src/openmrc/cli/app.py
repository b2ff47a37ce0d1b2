"""The ``openmrc`` command: the parser with every command's module, and the error policy
(one line on stderr and exit 2 for bad input, 141 for a closed pipe, 130 on Ctrl-C or
SIGTERM)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from ..transport.errors import MrcError
from . import campaign, demo, lab, net, paper, run, sweep, topo

#: Exit code when stdout is closed before everything was printed (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors on stderr (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: The simulator's hand-written C event kernel (not a mypyc module).
NATIVE_KERNEL = "openmrc.sim._kernel"
#: The requester's records in hand-written C (not a mypyc module).
NATIVE_RECORDS = "openmrc.transport._txtable"


def _version() -> str:
    from .. import compiled_modules
    from ..version import openmrc_version

    compiled = compiled_modules()
    parts = []
    n = sum(1 for m in compiled if m not in (NATIVE_KERNEL, NATIVE_RECORDS))
    if n:
        parts.append(f"{n} modules compiled by mypyc")
    if NATIVE_KERNEL in compiled:
        parts.append("native event kernel")
    if NATIVE_RECORDS in compiled:
        parts.append("native requester records")
    return f"{openmrc_version()} ({', '.join(parts) or 'pure Python'})"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = _Parser(prog="openmrc", description="Open MRC: transport, simulator, lab.")
    parser.add_argument("--version", action="version", version=f"openmrc {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    for module in (demo, topo, run, paper, sweep, campaign, lab, net):
        module.register(sub)
    return parser


def _terminate_as_interrupt() -> None:
    """Make SIGTERM stop a command the way Ctrl-C does.

    Batch schedulers and ``timeout`` stop a job with SIGTERM; by default
    that kills Python at once, so a long run would lose everything it measured.  As
    a KeyboardInterrupt it takes Ctrl-C's path: the run stops and writes its partial
    results, a lab is torn down.  Only a default disposition is replaced (a parent
    that set SIGTERM to be ignored keeps that), and only on the main thread, where
    Python runs signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``openmrc`` console script (exit codes: docs/cli.md)."""
    parser = build_parser()
    _terminate_as_interrupt()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # stdout was closed early (``| head``): not an error of the run.  Point
        # stdout at /dev/null so that the interpreter's last flush is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"openmrc {args.command}: interrupted", file=sys.stderr)
        return 130
    except (MrcError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split())
        print(f"openmrc {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
