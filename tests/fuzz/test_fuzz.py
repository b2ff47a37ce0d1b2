"""Fuzzing in CI, bounded: corpus replay, a few seconds of atheris per target, Hypothesis.

Longer runs: ``python -m tests.fuzz.fuzz_codec -max_total_time=600 /tmp/new
tests/fuzz/corpus/codec`` (and ``fuzz_receive``, ``fuzz_control``); see
docs/security.md.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.targets import CORPUS, TARGETS

ROOT = Path(__file__).resolve().parents[2]
#: Seconds of coverage-guided fuzzing per target in CI.
CI_SECONDS = int(os.environ.get("OPENMRC_FUZZ_SECONDS", "3"))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_corpus_replays_clean(name: str) -> None:
    files = sorted((CORPUS / name).iterdir())
    assert files, f"empty corpus for {name}"
    for f in files:
        TARGETS[name](f.read_bytes())


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed")
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_atheris_finds_nothing_and_its_coverage_grows(name: str, tmp_path: Path) -> None:
    """A few seconds of atheris per target: no finding, and new coverage found
    beyond the seed corpus (libFuzzer's ``NEW`` lines, new corpus files).

    Run as on a normal install (``OPENMRC_PURE_PYTHON`` removed from the
    environment): the entry point itself must make the code it fuzzes visible
    (mypyc-compiled modules have no Python bytecode to instrument; with them
    loaded the corpus never grows).
    """
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS / name, work)
    seeds = len(list(work.iterdir()))
    env = {k: v for k, v in os.environ.items() if k != "OPENMRC_PURE_PYTHON"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", name, f"-max_total_time={CI_SECONDS}",
         "-rss_limit_mb=2048", f"-artifact_prefix={tmp_path}/", str(work)],
        cwd=ROOT, capture_output=True, text=True, timeout=CI_SECONDS + 120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done" in proc.stderr, proc.stderr[-2000:]
    grown = len(list(work.iterdir()))
    found_new = re.search(r"^#\d+\s+NEW\s", proc.stderr, re.MULTILINE) is not None
    assert found_new and grown > seeds, (seeds, grown, proc.stderr[-2000:])


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.binary(max_size=600))
def test_hypothesis_codec(data: bytes) -> None:
    TARGETS["codec"](data)


@_SETTINGS
@given(
    st.lists(
        st.sampled_from(sorted(f.read_bytes() for f in (CORPUS / "codec").iterdir()))
        | st.binary(max_size=200),
        max_size=6,
    )
)
def test_hypothesis_receive(chunks: list[bytes]) -> None:
    TARGETS["receive"](b"".join(len(c).to_bytes(2, "big") + c for c in chunks))


@_SETTINGS
@given(st.binary(max_size=300) | st.from_regex(rb'\{"op": ?"hello".{0,200}\}', fullmatch=True))
def test_hypothesis_control(data: bytes) -> None:
    TARGETS["control"](data)
