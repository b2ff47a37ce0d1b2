"""openmrc: an open Python implementation of MRC (Multipath Reliable Connection).

Some modules (the transport core, the packet classes, the simulator's NIC; see
``setup.py``) may be installed compiled by mypyc as well as in source form.
``OPENMRC_PURE_PYTHON=1`` in the environment makes every ``openmrc`` import load
the ``.py`` sources instead, so the same installation can run both ways (the
parity test compares them).  :func:`compiled_modules` says which modules are
compiled in this process.  This file is never compiled: the switch must be
installed before any compiled module is imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import (
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    FileFinder,
    ModuleSpec,
    SourceFileLoader,
)
from types import ModuleType

__all__ = ["PURE_PYTHON", "compiled_modules"]


#: True when ``OPENMRC_PURE_PYTHON`` is set (to anything but "" or "0"): sources only.
PURE_PYTHON = os.environ.get("OPENMRC_PURE_PYTHON", "") not in ("", "0")


class _SourceOnlyFinder:
    """A meta-path finder that resolves ``openmrc.*`` to ``.py`` files, never extensions."""

    def __init__(self) -> None:
        self._finders: dict[str, FileFinder] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith(__name__ + ".") or path is None:
            return None
        for entry in path:
            finder = self._finders.get(entry)
            if finder is None:
                finder = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES))
                self._finders[entry] = finder
            spec = finder.find_spec(fullname, target)
            if spec is not None:
                return spec
        return None

    def invalidate_caches(self) -> None:
        self._finders.clear()


if PURE_PYTHON and not any(isinstance(f, _SourceOnlyFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SourceOnlyFinder())


def compiled_modules() -> list[str]:
    """Dotted names of the openmrc modules that are (or, imported, would be) compiled.

    A module counts when an extension module with its name sits beside its
    source, and ``OPENMRC_PURE_PYTHON`` is not set; for a module already
    imported, its loaded file decides.  Empty for a pure-Python installation.
    """
    found: list[str] = []
    for root in __path__:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
            rel = os.path.relpath(dirpath, root)
            prefix = __name__ if rel == "." else __name__ + "." + rel.replace(os.sep, ".")
            for fn in sorted(filenames):
                suffix = next((s for s in EXTENSION_SUFFIXES if fn.endswith(s)), None)
                if suffix is None:
                    continue
                name = f"{prefix}.{fn[: -len(suffix)]}"
                mod = sys.modules.get(name)
                if mod is not None:
                    if (getattr(mod, "__file__", None) or "").endswith(suffix):
                        found.append(name)
                elif not PURE_PYTHON:
                    found.append(name)
    return sorted(found)
