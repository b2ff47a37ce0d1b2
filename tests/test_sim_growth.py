"""benchmarks/sim_growth.py: its runs and windows, its summary, and its refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "sim_growth.py"
SMALL = ["--sizes", "16,32", "--rounds", "2", "--first-us", "5", "--steady-us", "10"]


def _run(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "g.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *SMALL, *extra, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "growth" in r.stdout and "ns an event" in r.stdout
    return dict(json.loads(out.read_text()))


def test_rounds_alternate_and_the_summary_is_the_runs(tmp_path: Path) -> None:
    """Each round runs every size (the smallest twice, reversed order every other round);
    each run times both windows, the same events at each size; the summary is the runs'
    minimum and median, and the growth their ratio from the smallest size to the largest
    and their difference in ns an event."""
    doc = _run(tmp_path, "--small-runs", "2")
    runs = doc["runs"]
    assert [(r["round"], r["hosts"]) for r in runs] == [
        (1, 16), (1, 16), (1, 32), (2, 32), (2, 16), (2, 16)
    ]  # fmt: skip
    for n in (16, 32):
        mine = [r for r in runs if r["hosts"] == n]
        # deterministic: every run of a size simulates the same events in each window
        assert len({(r["first_events"], r["steady_events"]) for r in mine}) == 1
        assert mine[0]["first_events"] > 0 and mine[0]["steady_events"] > 0
    entry = doc["summary"]
    per = {}
    for n in (16, 32):
        vals = sorted(r["steady_cpu"] / r["steady_events"] * 1e9 for r in runs if r["hosts"] == n)
        cell = entry["sizes"][str(n)]["steady"]
        assert cell["min"] == pytest.approx(vals[0], abs=0.1)
        per[n] = cell
    assert entry["growth"]["steady"]["min"] == pytest.approx(
        per[32]["min"] / per[16]["min"] - 1, abs=1e-3
    )
    for k in ("min", "median"):  # and the same growth in ns added per event
        added = entry["growth"]["steady"][f"{k}_added_ns"]
        assert added == pytest.approx(per[32][k] - per[16][k], abs=0.11)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_fabric_only_hosts_reflect_to_their_peers(tmp_path: Path) -> None:
    """--fabric-only: every host sends the packets it was given, and every host gets
    packets back and sends them on (so each has a route that arrives and a port that
    sends); the same events in every run of a size."""
    window = 3
    # (windows past a packet's way there and back, about 20 us)
    extra = ["--first-us", "30", "--steady-us", "60", "--small-runs", "1"]
    doc = _run(tmp_path, "--fabric-only", "--window", str(window), *extra)
    for n in (16, 32):
        mine = [r for r in doc["runs"] if r["hosts"] == n]
        assert len({(r["first_events"], r["steady_events"], r["sent"]) for r in mine}) == 1
        row = mine[0]
        assert row["first_events"] > 0 and row["steady_events"] > 0
        # a host's first sends are its window; more means packets came back to it
        assert row["sent_min"] > window
        assert row["sent"] > 2 * n * window


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_fabric_only_hosts_touch_their_own_state(tmp_path: Path) -> None:
    """--host-bytes: each reflector touches every line of its own state once for every
    packet it sends (the packets it was given and those that came back)."""
    extra = ["--first-us", "30", "--steady-us", "0", "--small-runs", "1", "--rounds", "1"]
    doc = _run(tmp_path, "--fabric-only", "--window", "3", "--host-bytes", "192", *extra)
    for row in doc["runs"]:
        assert row["sent_min"] > 3
        assert row["touched_all"] is True


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_fabric_only_hosts_touch_lines_in_turn_and_work(tmp_path: Path) -> None:
    """--host-lines K: a reflector touches K of its state's lines a packet, the next K in
    turn, so every line as often as the others to within one; --host-work N: N steps of
    its chain a packet sent."""
    extra = ["--first-us", "30", "--steady-us", "0", "--small-runs", "1", "--rounds", "1"]
    doc = _run(tmp_path, "--fabric-only", "--window", "3", "--host-bytes", "640",
               "--host-lines", "3", "--host-work", "7", *extra)  # fmt: skip
    for row in doc["runs"]:
        assert row["sent_min"] > 3
        assert row["touched_all"] is True
        assert row["work_steps"] == 7 * row["sent"]


@pytest.mark.parametrize(
    "args",
    [
        ["--sizes", "1024"],
        ["--sizes", "8192,1024"],
        ["--sizes", "16,x"],
        ["--rounds", "0"],
        ["--small-runs", "0"],
        ["--first-us", "30", "--steady-us", "20"],
        ["--fabric-only", "--window", "0"],
        ["--host-bytes", "64"],
        ["--fabric-only", "--host-bytes", "100"],
        ["--fabric-only", "--host-bytes", "-64"],
        ["--host-work", "10"],
        ["--fabric-only", "--host-bytes", "128", "--host-lines", "3"],
        ["--fabric-only", "--host-lines", "1"],
        ["--fabric-only", "--host-work", "-1"],
    ],
)
def test_bad_options_get_one_line(args: list[str]) -> None:
    """Sizes not ascending or not numbers, no rounds, windows out of order, no packets a
    host: one line, exit 2."""
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("sim_growth:")


def test_a_wide_spread_of_the_smaller_size_is_said() -> None:
    """The smallest size's runs spreading by more than a quarter (a busy machine moves it
    most) get a note that the growth reads low; a narrow spread gets none."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sim_growth_note", SCRIPT)
    assert spec is not None and spec.loader is not None
    growth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(growth)

    def row(hosts: int, first_ns: float) -> dict:
        return {"hosts": hosts, "first_cpu": first_ns * 1e-9 * 1000, "first_events": 1000,
                "steady_cpu": 0.0, "steady_events": 0}  # fmt: skip

    quiet = growth.summarise([row(16, 400), row(16, 440), row(32, 800)], [16, 32])
    assert quiet["sizes"]["16"]["first"]["max"] == pytest.approx(440, abs=0.1)
    assert growth.spread_note(quiet, [16, 32], "perm-16") is None
    busy = growth.summarise([row(16, 400), row(16, 900), row(32, 1000)], [16, 32])
    note = growth.spread_note(busy, [16, 32], "perm-16")
    assert note is not None and note.startswith("note: perm-16's runs spread by +125%")
