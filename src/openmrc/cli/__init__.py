"""The ``openmrc`` command line: one module per command, the only package that imports
from all the others.

:mod:`~openmrc.cli.app` assembles the parser and runs a command;
:mod:`~openmrc.cli.demo` (``demo``), :mod:`~openmrc.cli.topo` (``topo``),
:mod:`~openmrc.cli.run` (``run``, ``compare``, ``topology``),
:mod:`~openmrc.cli.paper` (``paper``), :mod:`~openmrc.cli.campaign` (``campaign``),
:mod:`~openmrc.cli.sweep` (``sweep``), :mod:`~openmrc.cli.lab` (``lab``) and
:mod:`~openmrc.cli.net` (``serve``, ``send``, ``perf``, ``wireshark``) each add their
commands.  Importing one command's module (``openmrc.cli.net``, say) does not import
the others.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``openmrc`` console script: :func:`openmrc.cli.app.main`."""
    from .app import main as run

    return run(argv)
