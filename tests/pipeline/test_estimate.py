"""``openmrc run --estimate`` / ``compare --estimate``: the cost of a run, printed without
building it, and its memory estimate within 30 % of the peaks measured on the big runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.pipeline.run import load_scenario, run_estimate

ROOT = Path(__file__).resolve().parents[2]
PERM = str(ROOT / "scenarios" / "permutation-64.toml")
RESULTS = ROOT / "benchmarks" / "results"

#: benchmarks/sim_speed.py's big cases as scenarios, and their recorded sequential runs
BIG = [
    (
        "scenarios/permutation-64.toml",
        [
            "fabric.t0s=64",
            "fabric.hosts_per_t0=128",
            "fabric.t1s=128",
            "fabric.link_delay_ps=1000000",
            "workload.size=2000000",
        ],
        "perm-8192-ranks2.json",
    ),
    ("scenarios/scale/sendrecv-42k.toml", [], "sendrecv-42k-ranks2.json"),
    ("scenarios/scale/sendrecv-131072.toml", [], "sendrecv-131072.json"),
]


def _no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make building any scenario fail the test (an estimate builds nothing)."""
    from openmrc.pipeline.scenario import Scenario

    def refuse(self: Scenario) -> None:
        raise AssertionError("the estimate built the scenario")

    monkeypatch.setattr(Scenario, "build", refuse)


def test_run_estimate_prints_the_cost_and_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_build(monkeypatch)
    out = tmp_path / "out"
    assert main(["run", PERM, "--estimate", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert not out.exists()  # nothing written, not even the folder
    assert text.startswith("estimate for permutation-64 [transport mrc]: nothing built or run")
    for field in ("hosts", "ports", "flows", "QPs", "packets", "events", "memory", "time"):
        assert any(line.split()[:1] == [field] for line in text.splitlines()), field
    assert "64 x 8 planes" in text and "128 (" in text  # 64 flows, two QPs each
    # 64 flows of 8 MiB: 2048 packets each
    assert "131,072 data packets" in text


def test_compare_estimate_has_each_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_build(monkeypatch)
    args = ["compare", PERM, "--estimate", "--transports", "mrc,roce", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "[transport mrc]" in text and "[transport roce]" in text
    assert not (tmp_path / "o").exists()
    # compare stripes RoCE over the 8 planes: 8 QPs a connection, 16 a flow
    qps = [line.split()[1] for line in text.splitlines() if line.split()[:1] == ["QPs"]]
    assert qps == ["128", "1,024"]


def test_the_whole_cluster_estimate_is_fast(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_build(monkeypatch)
    started = time.process_time()  # CPU seconds: a loaded machine's wall time is not ours
    big = str(ROOT / "scenarios" / "scale" / "sendrecv-131072.toml")
    assert main(["run", big, "--estimate"]) == 0
    cpu = time.process_time() - started
    assert cpu < 30, cpu  # the run itself: 46 minutes and 19 GiB
    assert "131,072 x 8 planes" in capsys.readouterr().out


@pytest.mark.parametrize(("scenario", "sets", "recorded"), BIG)
def test_the_memory_estimate_is_within_30_percent_of_the_measured_peak(
    scenario: str, sets: list[str], recorded: str
) -> None:
    """Recorded sequential peaks (compiled build): perm-8192 x 8 planes 2,183 MiB,
    sendrecv-42k 6,484 MiB, sendrecv-131072 19,751 MiB (docs/results/estimate.md)."""
    run = json.loads((RESULTS / recorded).read_text())[0]
    sc, _ = load_scenario(str(ROOT / scenario), sets, build=False)
    est = run_estimate(sc)
    assert est.hosts == run["hosts"] and est.flows == run["flows"] and est.qps == run["qps"]
    peak = run["peak_rss_mib"] * 2**20
    assert 0.7 * peak <= est.memory_bytes <= 1.3 * peak, (est.memory_bytes / peak, recorded)
    assert 0.7 * run["events"] <= est.events <= 1.3 * run["events"]
