"""What several commands share: whether to draw a progress bar."""

from __future__ import annotations

import argparse
import sys


def progress_enabled(args: argparse.Namespace) -> bool:
    """A progress bar on stderr: only when stderr is a terminal and ``--no-progress``
    was not given (a pipe or a file gets the plain lines)."""
    if getattr(args, "no_progress", False):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
