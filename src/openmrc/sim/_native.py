"""Which implementation of the fabric's hot path runs: the native kernel or pure Python.

:mod:`openmrc.sim._kernel` (a C extension, ``src/openmrc/sim/_kernel.c``) holds
native versions of the event loop, the egress port, the switch and the host
end.  It is used when it was built and imports, unless the environment
variable ``OPENMRC_PURE_PYTHON`` is ``1`` (the project-wide "no compiled code"
switch, read once at import).  Both give the same results bit for bit.
"""

from __future__ import annotations

import os
from types import ModuleType

#: ``OPENMRC_PURE_PYTHON=1`` forces the pure-Python classes.
PURE_PYTHON = os.environ.get("OPENMRC_PURE_PYTHON") == "1"


def _load() -> ModuleType | None:
    if PURE_PYTHON:
        return None
    try:
        from openmrc.sim import _kernel
    except ImportError:
        return None
    return _kernel


#: The native kernel module, or None when the pure-Python classes are in use.
kernel: ModuleType | None = _load()

#: Whether the simulator runs on the native kernel.
NATIVE = kernel is not None
