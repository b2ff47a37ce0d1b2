"""Collectives run in the simulator: dependencies honoured, busbw against the line rate."""

from __future__ import annotations

import pytest

from openmrc.sim.experiment import Experiment, TransportConfig
from openmrc.sim.factory import make_experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec
from openmrc.workloads import collectives as C
from tests.narrow import known

SPEC = ClosSpec(planes=2, t0s=2, hosts_per_t0=4, t1s=4, host_gbps=100, fabric_gbps=100)
# non-blocking (T0 uplinks = downlinks), so the NIC is the bottleneck.  A full
# packet on the wire: 4096 B payload + headers (MRC 144 B, RoCE 80 B) + 38 B framing.
HEADERS = {"mrc": 144, "roce": 80}


def _payload_gbps(transport: str) -> float:
    """What one NIC can push in payload: all planes for MRC, one plane for 1-QP RoCE."""
    planes = SPEC.planes if transport == "mrc" else 1
    return planes * SPEC.host_gbps * 4096 / (4096 + HEADERS[transport] + 38)


@pytest.mark.parametrize("transport", ["mrc", "roce"])
@pytest.mark.parametrize("kind", C.KINDS)
def test_collective_completes_in_order_with_busbw_near_line_rate(kind: str, transport: str) -> None:
    exp = make_experiment(SPEC, transport=TransportConfig(name=transport))
    coll = C.build(kind, 8, 4 << 20, channels=2)
    exp.add_collective(coll, message=256 << 10)
    res = exp.run()
    assert res.all_ok
    flows = res.flows
    for t, f in zip(coll.transfers, flows, strict=True):
        assert f.rx_finish_ps is not None
        for d in t.deps:
            # no transfer starts before the data it forwards has arrived
            assert known(f.started_ps) >= known(flows[d].rx_finish_ps)
    (summary,) = res.collectives
    assert summary["complete"] and summary["steps"] == coll.steps
    assert summary["time_us"] * 1e6 == max(known(f.rx_finish_ps) for f in flows)
    bound = _payload_gbps(transport)
    assert 0.8 * bound <= summary["busbw_gbps"] <= bound


def test_ring_on_a_placement_uses_those_hosts() -> None:
    exp = Experiment(SPEC)
    placement = [7, 0, 5, 2]
    exp.add_collective(C.allgather(4, 1 << 20), placement=placement)
    res = exp.run()
    assert res.all_ok
    assert {(f.src, f.dst) for f in res.flows} == {(7, 0), (0, 5), (5, 2), (2, 7)}


def test_straggler_delays_the_whole_step() -> None:
    def step_us(straggler_ps: int) -> list[float]:
        exp = Experiment(SPEC)
        exp.add_collective(
            C.training(
                4,
                [("allreduce", 1 << 20)],
                iterations=2,
                compute_ps=20_000_000,
                straggler=2,
                straggler_ps=straggler_ps,
            )
        )
        res = exp.run()
        assert res.all_ok
        return res.collectives[0]["iteration_us"]

    base = step_us(0)
    slow = step_us(100_000_000)
    assert len(base) == 2
    # one slow rank holds every rank up by its extra compute time ...
    assert slow[0] - base[0] == pytest.approx(100.0, abs=5.0)
    # ... less, in later steps, the part of the ring that needs nothing from it
    collective_us = base[0] - 20.0
    assert 100.0 - collective_us <= slow[1] - base[1] <= 105.0


def test_failed_dependency_fails_its_dependents() -> None:
    exp = Experiment(SPEC, transport=TransportConfig(timeout=1, retry_linear=1, retry_exp=0))
    exp.faults.nic_port_down(1, 0, at_ps=0)
    exp.faults.nic_port_down(1, 1, at_ps=0)
    exp.add_flows([FlowSpec(0, 1, 1 << 16), FlowSpec(2, 3, 1 << 16, deps=(0,))])
    res = exp.run()
    assert res.flows[0].status not in ("ok", "running")
    assert res.flows[1].status == "dependency_failed"


def test_dependency_cycle_and_bad_index_are_refused() -> None:
    exp = Experiment(SPEC)
    with pytest.raises(ValueError, match="cycle"):
        exp.add_flows([FlowSpec(0, 1, 100, deps=(1,)), FlowSpec(1, 0, 100, deps=(0,))])
    with pytest.raises(ValueError, match=r"flow 0\.deps"):
        exp.add_flows([FlowSpec(0, 1, 100, deps=(3,))])


def test_size_sweep_gives_an_nccl_tests_table() -> None:
    from openmrc.sim.nccl_tests import collective_sweep, nccl_table

    rows = collective_sweep(SPEC, "allreduce", [64 << 10, 2 << 20], ranks=4, channels=2)
    assert [r["size"] for r in rows] == [64 << 10, 2 << 20]
    assert all(r["all_ok"] for r in rows)
    # latency dominates small sizes: bandwidth grows with the message size
    assert rows[0]["busbw_gbps"] < rows[1]["busbw_gbps"]
    for r in rows:
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * 3 / 4, rel=1e-3)
    lines = nccl_table(rows).splitlines()
    assert lines[0].split() == ["size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)"]
    assert lines[2].split()[0] == str(2 << 20)
    assert float(lines[2].split()[3]) == pytest.approx(rows[1]["busbw_gbps"] / 8, abs=0.01)


@pytest.mark.parametrize("transport", ["mrc", "roce"])
def test_alltoall_keeps_a_connections_chunks_within_its_slots(transport: str) -> None:
    """NCCL's all-to-all in the simulator: 1 MiB to each peer in 128 KiB chunks; with 2
    slots a connection never has more than 2 chunks sent and not yet arrived."""

    def most_in_flight(slots: int) -> int:
        exp = make_experiment(SPEC, transport=TransportConfig(name=transport))
        coll = C.alltoall(4, 4 << 20, slots=slots)
        exp.add_collective(coll, message=1 << 20)
        res = exp.run()
        assert res.all_ok and res.collectives[0]["complete"]
        conns: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        for t, f in zip(coll.transfers, res.flows, strict=True):
            assert f.rx_finish_ps is not None
            span = (known(f.started_ps), f.rx_finish_ps)
            conns.setdefault((t.src, t.dst, t.channel), []).append(span)
        return max(
            sum(1 for s, e in spans if s <= start < e)
            for spans in conns.values()
            for start, _ in spans
        )

    assert most_in_flight(2) == 2
    assert most_in_flight(C.P2P_STEPS) == C.P2P_STEPS
