"""Coverage-guided fuzzing of one target with atheris (libFuzzer flags pass through).

``python -m tests.fuzz.run TARGET [libFuzzer flags] [CORPUS_DIR ...]``, e.g.
``python -m tests.fuzz.run codec -max_total_time=600 /tmp/new tests/fuzz/corpus/codec``
(libFuzzer adds what it finds to the first directory).  ``fuzz_codec``,
``fuzz_receive`` and ``fuzz_control`` are shortcuts for the three targets.

atheris sees only Python bytecode: a module compiled by mypyc (a normal
install compiles the transport core and the packet classes) is invisible to
it, and coverage never grows.  So the fuzz entry points load openmrc's pure
Python sources: ``OPENMRC_PURE_PYTHON=1`` is set here, before anything imports
openmrc (``openmrc/__init__.py`` reads it once, at import).
"""

from __future__ import annotations

import os
import sys

os.environ["OPENMRC_PURE_PYTHON"] = "1"


def main(name: str, argv: list[str]) -> None:
    """Instrument openmrc (its sources), then hand ``argv`` to libFuzzer."""
    import atheris

    # The package itself first: its __init__ puts the sources-only finder at the
    # front of sys.meta_path, and atheris's instrumenting finder must go in front
    # of that (it wraps the loader the finders after it return), or nothing
    # imported below is instrumented, compiled or not.
    import openmrc

    if not openmrc.PURE_PYTHON:
        raise RuntimeError("openmrc was imported before tests.fuzz.run: fuzzing would be blind")
    with atheris.instrument_imports(include=["openmrc"]):
        from tests.fuzz.targets import TARGETS

    compiled = openmrc.compiled_modules()
    if compiled:
        raise RuntimeError(f"compiled openmrc modules loaded, atheris cannot see them: {compiled}")
    atheris.Setup([sys.argv[0], *argv], TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
