"""Helpers for tests whose behaviour differs when modules are compiled by mypyc.

The suite runs twice in CI: against the compiled modules and with
``OPENMRC_PURE_PYTHON=1`` (see ``.ci/run``).  A test that monkeypatches a method
of a compiled class cannot work compiled (compiled callers call it natively), so
it is skipped there and runs in the interpreted pass; a test that hands a
compiled function an argument of the wrong type (``# type: ignore[arg-type]``)
gets mypyc's ``TypeError`` from the function's boundary instead of the error the
Python code raises.
"""

from __future__ import annotations

from typing import Any

import pytest

from openmrc import compiled_modules


def is_compiled(module: str) -> bool:
    """True when ``module`` (dotted name) runs compiled in this process."""
    return module in compiled_modules()


def interpreted_only(*modules: str) -> pytest.MarkDecorator:
    """Skip the test while any of ``modules`` is compiled (it monkeypatches them)."""
    return pytest.mark.skipif(
        any(is_compiled(m) for m in modules),
        reason=f"monkeypatches {', '.join(modules)}, compiled here (runs with OPENMRC_PURE_PYTHON=1)",
    )


def wrong_type_raises(module: str, error: type[Exception], match: str | None = None) -> Any:
    """``pytest.raises`` for an argument of the wrong type handed to ``module``:
    ``error`` (matching ``match``) interpreted, mypyc's ``TypeError`` compiled."""
    if is_compiled(module):
        return pytest.raises(TypeError)
    return pytest.raises(error, match=match)
