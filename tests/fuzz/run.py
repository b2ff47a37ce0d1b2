"""Coverage-guided fuzzing of one target with atheris (libFuzzer flags pass through).

``python -m tests.fuzz.run TARGET [libFuzzer flags] [CORPUS_DIR ...]``, e.g.
``python -m tests.fuzz.run codec -max_total_time=600 /tmp/new tests/fuzz/corpus/codec``
(libFuzzer adds what it finds to the first directory).  ``fuzz_codec``,
``fuzz_receive`` and ``fuzz_control`` are shortcuts for the three targets.
"""

from __future__ import annotations

import sys


def main(name: str, argv: list[str]) -> None:
    """Instrument openmrc, then hand ``argv`` to libFuzzer."""
    import atheris

    with atheris.instrument_imports(include=["openmrc"]):
        from tests.fuzz.targets import TARGETS

    atheris.Setup([sys.argv[0], *argv], TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
