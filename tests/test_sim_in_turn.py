"""benchmarks/sim_in_turn.py: K parts of one run in turn in one process, the sequential
run's events for every K, and its refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCH / "sim_in_turn.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def test_every_k_runs_the_sequential_events(tmp_path: Path) -> None:
    """perm-32 to 10 us cut into 1, 2 and 4 parts run in turn (threads passing one
    baton, the ranks' collectives between them): each K simulates the sequential run's
    events; with more than one part there are windows and packets that crossed, and
    both costs are measured."""
    out = tmp_path / "t.json"
    r = _run("--case", "perm-32", "--k", "1,2,4", "--until-us", "10", "--out", str(out))
    assert r.returncode == 0, r.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [row["k"] for row in runs] == [1, 2, 4]
    seq = subprocess.run(
        [sys.executable, str(BENCH / "sim_speed.py"), "--child", "perm-32", "--until-us", "10"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert seq.returncode == 0, seq.stderr
    events = json.loads(seq.stdout.strip().splitlines()[-1])["events"]
    assert events > 1000
    assert {row["events"] for row in runs} == {events}
    for row in runs[1:]:
        assert row["windows"] > 1 and row["packets_out"] > 0
        assert row["window_ns_per_event"] > 0 and row["exchange_ns_per_event"] > 0
    assert runs[0]["packets_out"] == 0
    assert "perm-32 in 4 part(s)" in r.stdout


def test_refusals() -> None:
    """Bad options: one line naming the option, exit 2."""
    for args, word in (
        (["--case", "alltoall-64"], "--case"),
        (["--k", "0"], "--k"),
        (["--k", "two"], "--k"),
        (["--until-us", "0"], "--until-us"),
    ):
        r = _run(*args)
        assert r.returncode == 2 and word in r.stderr.splitlines()[-1], (args, r.stderr)
