"""benchmarks/event_model.py: the model event loop it builds and times, and its refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "event_model.py"


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)
@pytest.mark.parametrize("scatter", [False, True])
def test_a_row_per_lines_and_prefetch_each_timing_the_events_work(
    tmp_path: Path, scatter: bool
) -> None:
    """Each lines x prefetch pair is timed at both sizes, and an event of 1000 rounds of
    dependent arithmetic costs what they do (a model whose work were skipped would time
    a few ns)."""
    out = tmp_path / "m.json"
    argv = [sys.executable, str(SCRIPT), "--sizes", "64,128", "--lines", "2,3",
            "--prefetch", "0,2", "--work", "1000", "--events", "20000", "--repeat", "1",
            "--out", str(out)]  # fmt: skip
    r = subprocess.run([*argv, *(["--scatter"] if scatter else [])], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())
    assert [(row["lines"], row["prefetch"]) for row in rows] == [(2, 0), (2, 2), (3, 0), (3, 2)]
    for row in rows:
        assert row["scatter"] is scatter
        assert set(row["ns"]) == {"64", "128"}
        assert all(ns > 100 for ns in row["ns"].values())  # 1000 dependent rounds, not skipped
        assert row["growth"] == pytest.approx(row["ns"]["128"] / row["ns"]["64"] - 1, abs=2e-3)
    assert "growth" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--sizes", "8192,1024"],
        ["--sizes", "64"],
        ["--lines", "0"],
        ["--prefetch", "a"],
        ["--events", "0"],
        ["--work", "-1"],
    ],
)
def test_bad_options_get_one_line(args: list[str]) -> None:
    """Sizes not ascending, no lines, a count that is not a number: one line, exit 2."""
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("event_model:")
