"""openmrc.paper's measuring helpers and shape checks on synthetic results documents:
a check says "holds" for the published shape and "does not hold" without it."""

from __future__ import annotations

from typing import Any

import pytest

from openmrc import paper


def _doc(
    levels: list[tuple[float, float]],
    faults: list[tuple[float, str]],
    end_us: float = 1000.0,
    step: float = 10.0,
    nic_delay_us: float = 20.0,
    timeouts: int = 0,
) -> dict[str, Any]:
    """A two-flow results document whose total goodput is ``levels`` ((from_us, Gb/s), ...)."""
    n = int(end_us / step)
    total = []
    for i in range(n):
        t = i * step
        total.append(next(g for lo, g in reversed(levels) if t >= lo))
    half = [g / 2 for g in total]
    flows = [
        {
            "src": s,
            "dst": d,
            "finish_ps": int(end_us * 1e6),
            "timeouts": timeouts,
            "evs_assumed_bad": 3,
            "steady_goodput_gbps": 700.0,
        }
        for s, d in ((0, 1), (1, 0))
    ]
    return {
        "all_ok": True,
        "flows": flows,
        "sim_end_us": end_us,
        "sample_interval_us": step,
        "goodput_gbps_series": {"a": half, "b": list(half)},
        "fabric": {"faults": [{"time_ps": int(t * 1e6), "kind": k} for t, k in faults]},
        "provenance": {
            "resolved": {"switches": {"nic_port_status_delay_ps": int(nic_delay_us * 1e6)}}
        },
    }


def test_window_mean_takes_the_intervals_inside_the_window() -> None:
    doc = _doc([(0, 100.0), (200, 50.0)], [])
    assert paper.window_mean(doc, 100, 200) == 100.0
    assert paper.window_mean(doc, 200, 400) == 50.0
    assert paper.window_mean(doc, 150, 250) == 75.0
    assert paper.window_min(doc, 0, 400, 20) == 50.0
    with pytest.raises(ValueError):
        paper.window_mean(doc, 101, 105)
    # the steady part ends two sample intervals before the first flow completes
    assert paper.first_finish_us(doc) == 980.0


def test_nic_links_down_holds_for_a_plane_each_and_not_for_no_loss() -> None:
    faults = [(300.0, "nic_port_down"), (500.0, "nic_port_down"), (700.0, "nic_port_down")]
    plane_each = _doc([(0, 1500.0), (300, 1312.5), (500, 1125.0), (700, 937.5)], faults)
    assert paper.check_nic_links_down({"run": plane_each}).holds
    untouched = _doc([(0, 1500.0)], faults)
    verdict = paper.check_nic_links_down({"run": untouched})
    assert not verdict.holds and "1.00, 1.00, 1.00" in verdict.measured
    two_planes_each = _doc([(0, 1500.0), (300, 1125.0), (500, 750.0), (700, 375.0)], faults)
    assert not paper.check_nic_links_down({"run": two_planes_each}).holds


def test_t0_down_and_t1_down_checks() -> None:
    faults = [(400.0, "switch_down")]
    one_plane = _doc([(0, 1500.0), (400, 1312.5)], faults)
    assert paper.check_t0_down({"run": one_plane}).holds
    assert not paper.check_t1_down({"run": one_plane}).holds  # a T1 costs nothing steady
    dip_then_back = _doc([(0, 1500.0), (400, 1000.0), (440, 1500.0)], faults)
    assert paper.check_t1_down({"run": dip_then_back}).holds
    assert not paper.check_t0_down({"run": dip_then_back}).holds
    with_timeouts = _doc([(0, 1500.0), (400, 1000.0), (440, 1500.0)], faults, timeouts=1)
    assert not paper.check_t1_down({"run": with_timeouts}).holds


def test_nic_flap_needs_half_while_down_and_recovery_at_the_end() -> None:
    faults = [(200.0, "flap_down"), (400.0, "flap_up"), (500.0, "flap_down"), (700.0, "flap_up")]
    levels = [(0, 1500.0), (200, 750.0), (400, 1500.0), (500, 750.0), (700, 1500.0)]
    assert paper.check_nic_flap({"run": _doc(levels, faults)}).holds
    stuck = [(0, 1500.0), (200, 750.0), (400, 1500.0), (500, 750.0), (700, 1100.0)]
    assert not paper.check_nic_flap({"run": _doc(stuck, faults)}).holds
    no_loss = [(0, 1500.0)]
    assert not paper.check_nic_flap({"run": _doc(no_loss, faults)}).holds


def test_select_names_the_flag() -> None:
    assert [e.name for e in paper.select("t1-down,t0-down")] == ["t0-down", "t1-down"]
    assert len(paper.select(None)) == len(paper.EXPERIMENTS)
    with pytest.raises(ValueError, match="--only: 'x' is not an experiment"):
        paper.select("x")


def test_run_commands_quote_their_overrides() -> None:
    run = paper.Run("t0-down", always=("faults=[]",), quick=('workload.flows[0].size="1MiB"',))
    assert run.command(False) == "openmrc run scenarios/paper/t0-down.toml --set 'faults=[]'"
    assert run.command(True).endswith("--set 'workload.flows[0].size=\"1MiB\"'")
