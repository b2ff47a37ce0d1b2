"""MRC flows with a connection key share long-lived QPs (as NCCL keeps its QPs per peer)."""

from __future__ import annotations

from dataclasses import replace

from openmrc.sim.experiment import Experiment, TransportConfig
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec
from openmrc.workloads import collectives as C
from tests.narrow import known

SPEC = ClosSpec(planes=2, t0s=2, hosts_per_t0=2, t1s=2, host_gbps=100, fabric_gbps=100)
US = 1_000_000


def _qps(exp: Experiment) -> int:
    return sum(len(h.ctx.qps) for h in exp.hosts)


def test_ring_allreduce_opens_one_qp_pair_per_rank_pair_channel_and_stripe() -> None:
    exp = Experiment(SPEC, seed=2, payloads=True)
    coll = C.allreduce(4, 512 << 10, channels=2, chunks=2)
    exp.add_collective(coll, message=32 << 10, qps=2)
    res = exp.run()
    assert res.all_ok and res.verified
    # 4 ring neighbours x 2 channels x 2 stripes, a QP at each end, for 2(n-1)
    # steps x 2 chunks x 2 channels x 4 ranks = 96 transfers
    assert len(res.flows) == 96
    assert _qps(exp) == 4 * 2 * 2 * 2
    assert all(f.bytes_received == f.size for f in res.flows)


def test_flows_without_a_connection_key_keep_their_own_qps() -> None:
    exp = Experiment(SPEC, seed=2, transport=TransportConfig(qps=2))
    exp.add_flows([FlowSpec(0, 3, 64 << 10, message=16 << 10) for _ in range(3)])
    assert exp.run().all_ok
    assert _qps(exp) == 3 * 2 * 2


def test_failed_link_is_learnt_once_per_connection_not_per_transfer() -> None:
    def run(keep_conn: bool) -> list[dict[str, object]]:
        exp = Experiment(SPEC, seed=3, transport=TransportConfig(ev_count=32))
        coll = C.allreduce(4, 1 << 20)
        flows = coll.flows(None, 64 << 10, 0, "", None, None)
        if not keep_conn:
            flows = [replace(f, conn="") for f in flows]
        exp.faults.link_down("p0t0x0-p0t1x0", at_ps=0)
        exp.add_flows(flows)
        res = exp.run()
        assert res.all_ok
        bad = [e for e in res.ev_events if e["new"] == "ASSUMED_BAD"]
        assert sum(f.evs_assumed_bad for f in res.flows) == len(bad)
        return bad

    shared = run(True)
    fresh = run(False)
    assert shared and fresh
    # each dead EV of a long-lived QP is marked once; fresh QPs re-learn at every step
    keys = [(e["host"], e["qpn"], e["ev"]) for e in shared]
    assert len(keys) == len(set(keys))
    assert len({(e["host"], e["qpn"]) for e in shared}) <= 4  # at most the 4 ring connections
    assert len(fresh) >= 2 * len(shared)


def test_each_flow_counts_the_evs_its_qps_marked_bad_in_its_window() -> None:
    # A flow's evs_assumed_bad: its source QPs' ASSUMED_BAD rows, and on a shared
    # connection only those after the previous flow on it completed up to its own
    # completion (its ev_window), as a scan of every row counts them.
    for keep_conn in (True, False):
        exp = Experiment(SPEC, seed=3, transport=TransportConfig(ev_count=32))
        flows = C.allreduce(4, 1 << 20).flows(None, 64 << 10, 0, "", None, None)
        if not keep_conn:
            flows = [replace(f, conn="") for f in flows]
        exp.faults.link_down("p0t0x0-p0t1x0", at_ps=0)
        exp.add_flows(flows)
        res = exp.run()
        assert res.all_ok
        rows = res.ev_events
        windows = set()
        for flow, got in zip(exp.flows, res.flows, strict=True):
            qpns = {qa.qpn for qa in flow.qas}  # type: ignore[attr-defined]
            lo, hi = flow.ev_window if flow.conn is not None else (None, None)  # type: ignore[attr-defined]
            windows.add((lo is None, hi is None))
            want = sum(
                1
                for e in rows
                if e["host"] == flow.spec.src
                and e["qpn"] in qpns
                and e["new"] == "ASSUMED_BAD"
                and (lo is None or e["time_us"] > lo / 1e6)
                and (hi is None or e["time_us"] <= hi / 1e6)
            )
            assert got.evs_assumed_bad == want
        assert sum(f.evs_assumed_bad for f in res.flows) > 0
        # shared: windows bounded on both sides (and the first flows' open below)
        assert windows == ({(False, False), (True, False)} if keep_conn else {(True, True)})


def test_concurrent_flows_on_one_connection_get_their_own_bytes_and_completions() -> None:
    exp = Experiment(SPEC, seed=4, payloads=True, transport=TransportConfig(qps=2))
    sizes = [300_000, 123_457, 64 << 10, 200_001]
    specs = [
        FlowSpec(0, 3, size, start_ps=i * 2 * US, message=16 << 10, conn="c", name=f"f{i}")
        for i, size in enumerate(sizes)
    ]
    # a dependent makes the experiment watch the first flow's arrival
    specs.append(FlowSpec(1, 2, 32 << 10, deps=(0,), message=16 << 10))
    exp.add_flows(specs)
    seen: list[list[int]] = []

    def peek() -> None:  # mid-run, several flows in flight on the connection
        part = [f.bytes_received for f in exp.collect().flows[:4]]
        qbs = exp.flows[0].qbs  # type: ignore[attr-defined]
        assert sum(part) == sum(qb.responder.rcvd_bytes for qb in qbs)  # no double count
        seen.append(part)

    for t in (5, 7, 9):
        exp.sim.schedule(t * US, peek)
    res = exp.run()
    assert len(seen) == 3
    assert all(0 <= got <= size for part in seen for got, size in zip(part, sizes, strict=True))
    assert any(0 < got < size for part in seen for got, size in zip(part, sizes, strict=True))
    assert res.all_ok and res.verified
    assert [f.bytes_received for f in res.flows[:4]] == sizes
    assert [len(f.message_finish_ps) for f in res.flows[:4]] == [-(-s // (16 << 10)) for s in sizes]
    assert res.flows[0].rx_finish_ps is not None
    assert known(res.flows[4].started_ps) >= res.flows[0].rx_finish_ps
    assert _qps(exp) == 2 * 2 + 2 * 1 * 2
    # the connection's counters are attributed once: the flows' sum is its total
    qas = exp.flows[0].qas  # type: ignore[attr-defined]
    assert sum(f.retransmits for f in res.flows[:4]) == sum(q.stats.retransmits for q in qas)


def test_a_flow_on_a_failed_connection_fails_at_once_and_so_do_its_dependents() -> None:
    attrs = TransportConfig(timeout=1, retry_linear=1, retry_exp=1)
    exp = Experiment(SPEC, seed=5, transport=attrs)
    for plane in range(SPEC.planes):
        exp.faults.link_down(f"h3-p{plane}t0x1", at_ps=0)  # host 3 unreachable
    later = 5000 * US  # long after the first transfer exhausted its retries
    exp.add_flows(
        [
            FlowSpec(0, 3, 64 << 10, message=16 << 10, conn="c"),
            FlowSpec(0, 3, 64 << 10, start_ps=later, message=16 << 10, conn="c"),
            FlowSpec(1, 2, 64 << 10, start_ps=later, message=16 << 10, send_deps=(1,)),
        ]
    )
    first, second, dependent = exp.run().flows
    assert first.status == "RETRY_EXC_ERR"
    assert second.status == "WR_FLUSH_ERR" and second.finish_ps == later
    assert second.bytes_received == 0 and second.timeouts == 0
    assert dependent.status == "dependency_failed"


def test_a_flow_of_more_messages_than_the_send_queue_holds_runs() -> None:
    """WRITEs are posted as the send queue has room (max_send_wr is 1024): a flow of
    2,500 messages, alone and on a shared connection behind another flow, completes
    with every byte checked; posting them all up front raised "send queue full"."""
    exp = Experiment(SPEC, seed=4, payloads=True, transport=TransportConfig(qps=2))
    size = 2500 * 1024
    exp.add_flows(
        [
            FlowSpec(0, 3, size, message=1024),
            FlowSpec(1, 2, 64 << 10, message=1024, conn="c"),
            FlowSpec(1, 2, size, message=1024, conn="c"),
        ]
    )
    res = exp.run()
    assert res.all_ok and res.verified
    assert [f.bytes_received for f in res.flows] == [size, 64 << 10, size]
