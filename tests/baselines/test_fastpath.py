"""The RoCE/IB baseline's per-packet shortcuts compute what the plain forms compute.

The fabric's hot path inlines the ECMP hash and the PFC accounting, the NIC reports
send completions per flow instead of the experiment polling every flow, and the
arrival check keeps a set beside each host's list of watched flows.  Each test here
checks one of them against the plain computation it replaces.
"""

from __future__ import annotations

from typing import Any

from openmrc.baselines.experiment import BaselineExperiment
from openmrc.baselines.fabric import FC_PFC, BaselineFabric, BaselinePort, DestSwitch
from openmrc.baselines.roce import RoceData
from openmrc.sim.engine import Simulator
from openmrc.sim.experiment import TransportConfig
from openmrc.sim.factory import make_experiment
from openmrc.topology import ClosSpec, Topology
from openmrc.workloads import FlowSpec

SMALL = ClosSpec(planes=1, t0s=4, hosts_per_t0=4, t1s=4)


def _sink(pkt: Any, via: Any, epoch: int) -> None:
    """The far end of a port under test: takes whatever arrives."""


def test_routed_uplink_is_the_ecmp_index() -> None:
    """DestSwitch.receive's inlined hash picks the uplink ecmp_index names."""
    sim = Simulator()
    fab = BaselineFabric(sim, Topology(SMALL))
    sw = fab.switches["p0t0x0"]
    assert isinstance(sw, DestSwitch)
    hpt = SMALL.hosts_per_t0
    for k in range(300):
        src, dst, sport = k % hpt, hpt + (k * 7) % (SMALL.hosts - hpt), 49152 + 37 * k
        cand = sw.nh[dst // hpt]
        want = cand[sw.ecmp_index(src, dst, sport, len(cand))]
        before = {id(p): p.tx_pkts + len(p.data) for p in cand}
        via = fab.host_ports[src][0]
        sw.receive(RoceData(1, k, 0, 0, 1000, False, src, dst, sport), via, via.epoch)
        moved = [p for p in cand if p.tx_pkts + len(p.data) != before[id(p)]]
        assert moved == [want], (src, dst, sport)


def test_pfc_accounting_through_accept_and_transmit() -> None:
    """Packets queued through an upstream port charge its ingress bytes, pause it at
    xoff, and leave it at zero and resumed once all are sent."""
    sim = Simulator()
    ports = [
        BaselinePort(sim, n, 100 * 10**9, 1000, _sink, data_limit=1 << 40, prio_limit=1 << 20)
        for n in ("out", "up")
    ]
    out, up = ports
    up.fc, up.xoff, up.xon, up.headroom = FC_PFC, 20_000, 10_000, 100_000
    for psn in range(10):
        out.accept(RoceData(1, psn, 0, 0, 4096 - 58, False, 0, 1, 1), up)
    assert out.tx_pkts == 1  # the first went straight out: its bytes left the buffer
    assert up.ing_bytes == 9 * (out.data[0].size + out.framing)
    assert up.pause_frames == 1 and up.pause_sent
    assert up.max_ing_bytes >= up.xoff
    sim.run()
    assert out.tx_pkts == 10 and up.ing_bytes == 0
    assert not up.pause_sent and not up.paused and up.pause_frames == 1


def _alltoall(hosts: int) -> list[FlowSpec]:
    return [
        FlowSpec(s, d, 256 << 10, message=64 << 10, name=f"a{s}-{d}")
        for s in range(hosts)
        for d in range(hosts)
        if s != d
    ]


def test_completions_are_looked_at_per_flow_not_polled() -> None:
    """The experiment drains a flow's completions only when one of its QPs has
    some (or once after it starts), not every flow of the host at every ACK."""
    exp = make_experiment(SMALL, transport=TransportConfig(name="roce", qps=4), seed=1)
    assert isinstance(exp, BaselineExperiment)
    specs = _alltoall(SMALL.hosts)
    exp.add_flows(specs)
    empty = [0]
    drain = exp._drain_completions

    def counted(flow: Any) -> list[str | None]:
        out = drain(flow)
        if not out:
            empty[0] += 1
        return out

    exp._drain_completions = counted  # type: ignore[method-assign]
    r = exp.run()
    assert all(f.ok for f in r.flows)
    assert empty[0] <= len(specs)  # at most the look after each flow's start


def test_watched_flow_set_follows_the_list() -> None:
    """_rx_candidates answers as a membership test of the list it is given does,
    when the list grows in place and when it is replaced."""
    exp = make_experiment(SMALL, transport=TransportConfig(name="roce"), seed=1)
    assert isinstance(exp, BaselineExperiment)
    exp.add_flows([FlowSpec(0, 5, 8192, name="x"), FlowSpec(1, 5, 8192, name="y")], watch=True)
    exp.run()
    fx, fy = exp._rx_flows[1], exp._rx_flows[2]

    class Host:
        index = 5
        last_rx = 1

    host = Host()
    filler: list[Any] = [object() for _ in range(10)]  # long enough for the set, not a scan
    flows: list[Any] = list(filler)
    assert exp._rx_candidates(host, flows) == []
    flows.append(fy)
    assert exp._rx_candidates(host, flows) == []
    flows.append(fx)  # grew in place
    assert exp._rx_candidates(host, flows) == [fx]
    flows2: list[Any] = [*filler, fy]  # replaced
    assert exp._rx_candidates(host, flows2) == []
    host.last_rx = 2
    assert exp._rx_candidates(host, flows2) == [fy]
    assert exp._rx_candidates(host, [fy]) == [fy]  # a short list
    assert exp._rx_candidates(host, [fx]) == []


def _watched_run(ungated: bool) -> tuple[BaselineExperiment, Any, list[int], list[int]]:
    """A 16-host run of watched flows (4 messages of 16 packets each, 2 QPs), its
    arrival checks counted: all of them, and those made while the sampler was awake
    after a packet that placed no message.  ``ungated``: the hosts call the check
    after every data packet (no sampler to consult: the plain form)."""
    exp = make_experiment(SMALL, transport=TransportConfig(name="roce", qps=2), seed=1)
    assert isinstance(exp, BaselineExperiment)
    n = SMALL.hosts
    exp.add_flows(
        [FlowSpec(s, (s + 5) % n, 256 << 10, message=64 << 10, name=f"w{s}") for s in range(n)],
        watch=True,
    )
    if ungated:
        for host in exp.hosts:
            host.sampler = None
    calls, idle = [0], [0]
    seen: dict[int, int] = {}
    arrived = exp._data_arrived

    def counted(host: Any, now: int) -> None:
        calls[0] += 1
        placed = host.receivers[host.last_rx].messages
        if exp.sampler.armed and seen.get(host.last_rx) == placed:
            idle[0] += 1
        seen[host.last_rx] = placed
        arrived(host, now)

    exp._data_arrived = counted  # type: ignore[method-assign]
    return exp, exp.run(), calls, idle


def test_arrival_check_only_after_a_placed_message() -> None:
    """A RoCE host calls the experiment's arrival check after a data packet that
    placed a message (a flow completes only then) or while the sampler sleeps, not
    after every packet; the flows complete at the same times as with the check
    after every packet.  The sampler's and the check's sums over a connection's
    receiving QPs (compiled helpers) are the plain sums."""
    exp, r, calls, idle = _watched_run(ungated=False)
    _exp0, r0, calls0, idle0 = _watched_run(ungated=True)
    assert all(f.ok for f in r.flows)
    assert idle[0] == 0 and idle0[0] > 0  # (the plain form does check after such packets)
    assert 0 < calls[0] < calls0[0]

    def times(res: Any) -> list[tuple[str, int | None, int | None]]:
        return [(f.name, f.finish_ps, f.rx_finish_ps) for f in res.flows]

    assert times(r) == times(r0)
    assert all(f.rx_finish_ps is not None for f in r.flows)
    for flow in exp.flows:
        rcv = flow.receivers  # type: ignore[attr-defined]
        assert exp._received_bytes(flow) == sum(q.rcvd_bytes for q in rcv) == flow.spec.size
        assert exp._rx_complete(flow) == (sum(q.messages for q in rcv) >= flow.nmsgs)  # type: ignore[attr-defined]
