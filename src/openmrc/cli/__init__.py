"""The ``openmrc`` command line: one module per command, the only package that imports
from all the others.

:mod:`~openmrc.cli.main` assembles the parser and runs a command;
:mod:`~openmrc.cli.demo` (``demo``), :mod:`~openmrc.cli.topo` (``topo``),
:mod:`~openmrc.cli.run` (``run``, ``compare``, ``topology``),
:mod:`~openmrc.cli.paper` (``paper``), :mod:`~openmrc.cli.sweep` (``sweep``),
:mod:`~openmrc.cli.lab` (``lab``) and :mod:`~openmrc.cli.net` (``serve``, ``send``,
``perf``, ``wireshark``) each add their commands.
"""

from .main import main

__all__ = ["main"]
