"""benchmarks/mem_latency.py: the pointer chase it builds and times, and its refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "mem_latency.py"


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)
def test_times_each_size_on_both_page_sizes(tmp_path: Path) -> None:
    """Each size is timed on 4 KiB and on huge pages: a row per size, each time that of a
    real dependent load (a chase whose loads were skipped would time next to nothing)."""
    out = tmp_path / "lat.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "1,4", "--steps", "200000", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())
    assert [row["mib"] for row in rows] == [1, 4]
    for row in rows:
        assert row["ns_4k"] > 0.2 and row["ns_huge"] > 0.2  # a dependent load, not a no-op
    assert "1 MiB" in r.stdout and "4 KiB pages" in r.stdout


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)
def test_chains_overlap_their_misses(tmp_path: Path) -> None:
    """--chains times each size with that many chases at once: eight independent chases
    take far less per load than one (their misses overlap; chases run one after another,
    or each waiting for the last, would take as long as one)."""
    out = tmp_path / "chains.json"
    argv = ["--sizes", "1", "--chains", "1,8", "--steps", "400000", "--out", str(out)]
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(out.read_text())
    one, eight = row["ns_by_chains"]["1"], row["ns_by_chains"]["8"]
    assert one > 0.2 and eight > 0.05
    assert eight < one * 0.6
    assert "8 at once" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--sizes", "0"],
        ["--sizes", "a,b"],
        ["--steps", "0"],
        ["--chains", "0"],
        ["--chains", "a"],
        ["--chains", "65"],
        ["--chains", ""],
    ],
)
def test_bad_options_get_one_line(args: list[str]) -> None:
    """A size or step count that is not a positive whole number: one line, exit 2."""
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("mem_latency:")
