"""Loss means loss: an EV is blamed only on evidence that a packet sent on it was
lost without a trim (docs/loss-recovery.md), never for congestion; and real
failures are still blamed, on the right EVs, within a few base RTTs."""

from __future__ import annotations

import random

import pytest

from openmrc.sim.experiment import Experiment
from openmrc.sim.result import Result
from openmrc.topology import ClosSpec
from openmrc.transport.ev import ev_path, ev_plane
from openmrc.workloads import incast, permutation

US = 1_000_000


def _blamed(r: Result) -> list[dict]:
    return [e for e in r.ev_events if e["new"] == "ASSUMED_BAD"]


@pytest.mark.parametrize("planes", [1, 4])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lossless_incast_blames_no_ev(planes: int, seed: int) -> None:
    # 15:1 on 16 hosts with trimming: thousands of trims and deep queues, RACK
    # declares queued packets lost and resends them, but no packet is lost
    # without a trim, so no path may be blamed.
    spec = ClosSpec(planes=planes, t0s=2, hosts_per_t0=8, t1s=8)
    exp = Experiment(spec, seed=seed)
    exp.add_flows(incast(list(range(1, 16)), 0, 1 << 20))
    r = exp.run()
    assert r.all_ok
    totals = r.fabric["totals"]
    assert totals["drops_full"] == totals["drops_header"] == totals["lost"] == 0
    assert sum(f.trims for f in r.flows) > 1000  # congested: the case is exercised
    assert sum(f.timeouts for f in r.flows) == 0
    assert _blamed(r) == []


FAIL_AT = 40 * US
SPEC = ClosSpec(planes=8, t0s=4, hosts_per_t0=4, t1s=4)


def _through(kind: str, ev: int, src: int, dst: int) -> bool:
    """Whether a flow's EV crosses the failed element (plane 2, T0 x1 / T1 x3)."""
    t0s = {src // 4, dst // 4}
    if ev_plane(ev) != 2:
        return False
    if kind == "t0-down":
        return 1 in t0s
    if len(t0s) == 1:
        return False
    if ev_path(ev) % 4 != 3:
        return False
    return kind != "link" or 1 in t0s


@pytest.mark.parametrize("kind", ["link", "t1-silent", "t1-down", "t0-down"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fabric_failures_blame_the_right_evs_within_a_few_base_rtts(kind: str, seed: int) -> None:
    exp = Experiment(SPEC, seed=seed, sample_interval_ps=5 * US)
    exp.add_flows(permutation(16, 6 << 20, random.Random(seed)))
    if kind == "link":
        exp.faults.link_down("p2t0x1-p2t1x3", at_ps=FAIL_AT)
    elif kind == "t1-silent":
        exp.faults.switch_blackhole("p2t1x3", at_ps=FAIL_AT)
    elif kind == "t1-down":
        exp.faults.switch_down("p2t1x3", at_ps=FAIL_AT)
    else:
        exp.faults.switch_down("p2t0x1", at_ps=FAIL_AT)
    r = exp.run(FAIL_AT + 60 * US)
    rtt = exp.base_rtt_ps  # the run's own (NIC and switch latencies included)
    flows = {f.src: f for f in r.flows}
    bad = _blamed(r)
    wrong = [e for e in bad if not _through(kind, e["ev"], e["host"], flows[e["host"]].dst)]
    assert wrong == [], f"healthy EVs blamed: {wrong[:3]}"
    worst = 0
    crossing = [
        f
        for f in r.flows
        if (f.src // 4 != f.dst // 4 or kind == "t0-down")
        and (kind in ("t1-silent", "t1-down") or 1 in (f.src // 4, f.dst // 4))
    ]
    assert crossing
    for f in crossing:
        times = [e["time_us"] * US for e in bad if e["host"] == f.src]
        assert times, f"flow {f.name} never blamed a path through the failure"
        worst = max(worst, min(times) - FAIL_AT)
    print(
        f"{kind} seed {seed}: {len(crossing)} flows cross it, {len(bad)} EVs blamed, "
        f"slowest first blame {worst / rtt:.2f} base RTTs after the failure"
    )
    # Measured 2.8-3.7 base RTTs (seeds 1, 2); 4.1-4.4 for seed 3, whose flows
    # had answered no EV probe before the failure, so their first probe waits
    # one smoothed RTT plus one minimum RTT (see Requester.probe_wait).
    assert worst <= 4.5 * rtt
