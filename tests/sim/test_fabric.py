"""Tests of forwarding, timing, queues, trimming and ECN in the simulated fabric."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from openmrc.sim import EgressPort, Fabric, FabricConfig, Simulator
from openmrc.topology import KIND_T0, ClosSpec, Topology, pack_address, unpack_address, usid
from openmrc.transport.ev import make_ev
from openmrc.wire.packets import DataPacket, Opcode, Packet, SackPacket

PS_PER_BYTE_100G = 80
FRAMING = 38


def data(psn: int = 0, length: int = 4096, ev: int = 0) -> DataPacket:
    return DataPacket(1, ev, Opcode.WRITE_MIDDLE, psn, 0, 0, 0, length)


class Sink:
    """Collects what hosts receive."""

    def __init__(self) -> None:
        self.got: list[tuple[int, Packet, int, int]] = []

    def attach(self, fabric: Fabric) -> None:
        for h in range(fabric.topology.spec.hosts):
            fabric.attach_host(h, partial(self.receive, h))

    def receive(self, h: int, pkt: Packet, plane: int, now: int) -> None:
        """Host ``h`` received ``pkt`` on ``plane`` at ``now``."""
        self.got.append((h, pkt, plane, now))


def build(
    spec: ClosSpec | None = None, config: FabricConfig | None = None, seed: int = 1
) -> tuple[Simulator, Fabric, Sink]:
    sim = Simulator(seed)
    fabric = Fabric(sim, Topology(spec or ClosSpec(planes=2, t0s=3, hosts_per_t0=2, t1s=3)), config)
    sink = Sink()
    sink.attach(fabric)
    return sim, fabric, sink


# ----- forwarding and timing ---------------------------------------------------------


@pytest.mark.parametrize("path", [0, 1, 2, 5, 4095])
def test_cross_t0_timing_and_t1(path: int) -> None:
    sim, fabric, sink = build()
    ev = make_ev(1, path)
    pkt = data(ev=ev)
    fabric.send(0, pkt, dst=5)
    sim.run()
    assert len(sink.got) == 1
    h, got, plane, now = sink.got[0]
    assert (h, plane) == (5, 1) and got is pkt and isinstance(got, DataPacket)
    # four links (serialisation + propagation), three switches, the NIC both ends:
    # the default latency model (docs/latency.md), read from the fabric's config
    hop = (4096 + 144 + FRAMING) * PS_PER_BYTE_100G + fabric.topology.spec.link_delay_ps
    assert now == 4 * hop + fabric.config.path_latency_ps(3)
    k = path % 3
    for name, sw in fabric.switches.items():
        expected = name in ("p1t0x0", f"p1t1x{k}", "p1t0x2")
        assert sw.forwarded == (1 if expected else 0), name
    # the spent address: only the downlink uSID is left
    assert isinstance(got.route, int) and unpack_address(got.route) == [usid(3, 1, 1)]
    assert not got.ecn and not got.trimmed


def test_same_t0_timing() -> None:
    sim, fabric, sink = build()
    pkt = data(length=1000, ev=make_ev(0, 3))
    fabric.send(2, pkt, dst=3)
    sim.run()
    (h, _, plane, now) = sink.got[0]
    assert (h, plane) == (3, 0)
    delay = fabric.topology.spec.link_delay_ps
    assert now == 2 * ((1000 + 144 + FRAMING) * 80 + delay) + fabric.config.path_latency_ps(1)
    assert fabric.switches["p0t0x1"].forwarded == 1
    assert sum(sw.forwarded for sw in fabric.switches.values()) == 1


def test_rates_latency_and_framing() -> None:
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=1, t1s=1, host_gbps=400, fabric_gbps=100)
    cfg = FabricConfig(switch_latency_ps=500, framing_bytes=0)
    sim, fabric, sink = build(spec, cfg)
    fabric.send(0, data(length=856), dst=1)  # 1000 bytes
    sim.run()
    host_hop = 1000 * 20 + spec.link_delay_ps
    fab_hop = 1000 * 80 + spec.link_delay_ps
    nic = cfg.nic_tx_latency_ps + cfg.nic_rx_latency_ps  # the defaults: docs/latency.md
    assert sink.got[0][3] == 2 * host_hop + 2 * fab_hop + 3 * 500 + nic


def test_bad_routes_dropped_and_counted() -> None:
    sim, fabric, sink = build()
    route = fabric.path_for(0, 5, make_ev(0, 1))
    # wrong plane: plane-0 route on the plane-1 port -> first T0 refuses it
    p = data()
    p.route = route
    fabric.host_port(0, 1).send(p, 0)
    # T1 asked to go to T0 index 7, which does not exist (t0s = 3)
    bad = unpack_address(route)
    bad[2] = usid(KIND_T0, 0, 7)
    q = data()
    q.route = pack_address(bad)
    fabric.host_port(0, 0).send(q, 0)
    # no route at all
    fabric.host_port(0, 0).send(data(), 0)
    sim.run()
    assert sink.got == []
    assert fabric.switches["p1t0x0"].bad_route == 1
    assert fabric.switches["p0t1x1"].bad_route == 1
    assert fabric.switches["p0t0x0"].bad_route == 1
    assert fabric.metrics.snapshot()["bad_route"] == 3


def test_path_for_cached_and_matches_topology() -> None:
    _, fabric, _ = build()
    ev = make_ev(1, 77, spare=3)
    r = fabric.path_for(1, 4, ev)
    assert r == fabric.topology.path_address(1, 4, ev)
    assert fabric.path_for(1, 4, ev) is r


def test_route_cache_keeps_one_route_per_peer_plane_and_t1() -> None:
    # every EV to a peer under the same T0 has the same route on a plane, and between
    # T0s every EV whose path picks the same T1: the cache keeps one route for them
    # all, and each is the topology's route for the EV asked for
    _, fabric, _ = build(ClosSpec(planes=2, t0s=3, hosts_per_t0=2, t1s=3))
    topo = fabric.topology
    for dst in (1, 4):  # host 0's T0 neighbour, a host under another T0
        for plane in range(2):
            for path in range(40):
                for spare in (0, 9):
                    ev = make_ev(plane, path, spare)
                    assert fabric.path_for(0, dst, ev) == topo.path_address(0, dst, ev)
    cache = fabric.routes_from(0)
    assert len(cache) == 2 * 1 + 2 * 3  # same T0: a route per plane; else per plane and T1


def test_host_port_send_returns_drain_time() -> None:
    _sim, fabric, _ = build()
    port = fabric.host_port(0, 0)
    ser = (4096 + 144 + FRAMING) * 80
    assert port.send(data(0), 0) == ser
    assert port.send(data(1), 0) == 2 * ser
    assert port.busy_until == ser
    with pytest.raises(ValueError, match="now"):
        port.send(data(2), 5)


# ----- one port ---------------------------------------------------------------------


def make_port(sim: Simulator, arrivals: list[tuple[int, Packet]], **kw) -> EgressPort:
    def rx(pkt: Packet, via: EgressPort, epoch: int) -> None:
        arrivals.append((sim.now, pkt))

    args: dict[str, Any] = {"data_limit": 10**9, "prio_limit": 10**9, "framing": 0}
    args.update(kw)
    return EgressPort(sim, "test", 100 * 10**9, 1000, rx, **args)


def test_back_to_back_at_line_rate() -> None:
    sim = Simulator()
    arrivals: list[tuple[int, Packet]] = []
    port = make_port(sim, arrivals)
    pkts = [data(i, length=856) for i in range(5)]
    for p in pkts:
        port.enqueue(p)
    sim.run()
    assert [t for t, _ in arrivals] == [1000 + 80_000 * (i + 1) for i in range(5)]
    assert [p for _, p in arrivals] == pkts
    assert port.tx_pkts == 5 and port.tx_bytes == 5000
    assert port.max_queue_bytes == 4000
    # a later packet after the port went idle starts at once
    sim.schedule(10**9, port.enqueue, data(9, length=856))
    sim.run()
    assert arrivals[-1][0] == 10**9 + 80_000 + 1000


@pytest.mark.parametrize("lasthop", [False, True])
def test_trim_when_full_and_header_priority(lasthop: bool) -> None:
    sim = Simulator()
    arrivals: list[tuple[int, Packet]] = []
    port = make_port(sim, arrivals, data_limit=2000, prio_limit=10**6, lasthop=lasthop)
    pkts = [data(i, length=856) for i in range(6)]  # 1000 bytes each
    for p in pkts:
        port.enqueue(p)
    sack = SackPacket(1, 0, 0, 0, 0)
    port.enqueue(sack)
    sim.run()
    order = [p for _, p in arrivals]
    # 0 was on the wire; 3, 4, 5 trimmed; headers and the SACK go before data 1, 2
    assert order == [pkts[0], pkts[3], pkts[4], pkts[5], sack, pkts[1], pkts[2]]
    assert [p.trimmed for p in pkts] == [False, False, False, True, True, True]
    assert all(p.trimmed_lasthop == lasthop for p in pkts[3:])
    assert all(p.size == 144 for p in pkts[3:])
    assert port.trims == 3 and port.drops_full == 0


def test_no_trimming_drops_and_header_queue_limit() -> None:
    sim = Simulator()
    arrivals: list[tuple[int, Packet]] = []
    port = make_port(sim, arrivals, data_limit=2000, prio_limit=144 * 2, trim=True)
    for i in range(7):
        port.enqueue(data(i, length=856))
    assert port.trims == 4 and port.drops_header == 2  # header queue holds two headers
    port2 = make_port(sim, arrivals, data_limit=2000, trim=False)
    for i in range(5):
        port2.enqueue(data(i, length=856))
    assert port2.drops_full == 2 and port2.trims == 0


def test_ecn_ramp() -> None:
    sim = Simulator(3)
    arrivals: list[tuple[int, Packet]] = []
    kmin, kmax = 20_000, 80_000
    port = make_port(sim, arrivals, ecn=True, kmin=kmin, kmax=kmax)
    pkts = [data(i, length=856) for i in range(2000)]
    queued_before: list[int] = []
    for p in pkts:
        queued_before.append(port.data_bytes)
        port.enqueue(p)
    below = [p.ecn for p, q in zip(pkts, queued_before, strict=True) if q <= kmin]
    above = [p.ecn for p, q in zip(pkts, queued_before, strict=True) if q >= kmax]
    mid = [p.ecn for p, q in zip(pkts, queued_before, strict=True) if kmin < q < kmax]
    assert below and not any(below)
    assert above and all(above)
    assert 0 < sum(mid) < len(mid)
    # probability rises across the ramp
    first, second = mid[: len(mid) // 2], mid[len(mid) // 2 :]
    assert sum(first) < sum(second)
    assert port.ecn_marks == sum(p.ecn for p in pkts)


def incast(config: FabricConfig, senders: int = 5, n: int = 20) -> tuple[Fabric, Sink]:
    """Hosts 0..senders-1 all blast host 5 on plane 0, paths spread over T1s."""
    sim, fabric, sink = build(ClosSpec(planes=1, t0s=3, hosts_per_t0=2, t1s=3), config)
    for h in range(senders):
        for i in range(n):
            fabric.send(h, data(i, ev=make_ev(0, i)), dst=5)
    sim.run()
    return fabric, sink


def test_lasthop_trim_flag_and_ecn_disabled_on_lasthop() -> None:
    cfg = FabricConfig(queue_bytes=30_000, ecn_kmin_bytes=0, ecn_kmax_bytes=1, ecn_lasthop=False)
    fabric, sink = incast(cfg)
    last = fabric.port("p0t0x2", 1)
    assert last.lasthop and not last.ecn
    assert last.trims > 0 and last.ecn_marks == 0
    trimmed = [p for _, p, _, _ in sink.got if isinstance(p, DataPacket) and p.trimmed]
    # lasthop flag exactly on the packets the last hop trimmed
    assert sum(p.trimmed_lasthop for p in trimmed) == last.trims
    assert len(trimmed) - last.trims == sum(port.trims for port in fabric.ports) - last.trims
    assert len(sink.got) == 5 * 20  # trimmed headers are delivered, nothing dropped
    # marks came from the uplinks (not last hop), never from the last hop
    marked = [p for _, p, _, _ in sink.got if p.ecn]
    assert len(marked) == sum(port.ecn_marks for port in fabric.ports)
    assert fabric.port("p0t1x0", 2).ecn_marks > 0


def test_uplink_trim_not_lasthop() -> None:
    # hosts 0 and 1 (T0 0) both send to hosts 4, 5 (T0 2) through T1 0: the uplink congests
    sim, fabric, sink = build(
        ClosSpec(planes=1, t0s=3, hosts_per_t0=2, t1s=3), FabricConfig(queue_bytes=20_000)
    )
    for i in range(30):
        fabric.send(0, data(i, ev=make_ev(0, 0)), dst=4)
        fabric.send(1, data(i, ev=make_ev(0, 3)), dst=5)
    sim.run()
    up = fabric.port("p0t0x0", 2)
    assert up.trims > 0
    trimmed = [p for _, p, _, _ in sink.got if isinstance(p, DataPacket) and p.trimmed]
    assert len(trimmed) == up.trims
    assert not any(p.trimmed_lasthop for p in trimmed)
    assert len(sink.got) == 60


def test_ecn_marks_lasthop_when_enabled() -> None:
    fabric, _sink = incast(FabricConfig(ecn_kmin_bytes=0, ecn_kmax_bytes=1))
    assert fabric.port("p0t0x2", 1).ecn_marks > 0


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="FabricConfig.ecn_kmin_bytes"):
        FabricConfig(ecn_kmin_bytes=10, ecn_kmax_bytes=5).validate()
    with pytest.raises(ValueError, match="FabricConfig.queue_bytes"):
        FabricConfig(queue_bytes=-1).validate()
    with pytest.raises(ValueError, match="FabricConfig.base_rtt_ps"):
        Fabric(Simulator(), Topology(ClosSpec(1, 1, 2, 1)), FabricConfig(base_rtt_ps=-5))
    q, h, kmin, kmax = FabricConfig().port_params(100 * 10**9)
    assert q == 150_000 and h == 150_000 and kmin == 30_000 and kmax == 120_000


def test_metrics_export(tmp_path) -> None:
    fabric, _ = incast(FabricConfig(queue_bytes=30_000))
    path = tmp_path / "m.json"
    fabric.metrics.to_json(path)
    snap = json.loads(path.read_text())
    assert snap["totals"]["trims"] == sum(p.trims for p in fabric.ports) > 0
    assert len(snap["ports"]) == len(fabric.ports)
    files = fabric.metrics.to_csv(tmp_path / "csv")
    assert {f.name for f in files} == {"ports.csv", "switches.csv", "faults.csv", "queues.csv"}
    assert "tx_pkts" in (tmp_path / "csv" / "ports.csv").read_text().splitlines()[0]


def test_queue_sampling_stops_by_itself() -> None:
    sim, fabric, _ = build(ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=1))
    for i in range(10):
        fabric.send(0, data(i), dst=2)
    fabric.metrics.sample_queues(100_000)
    sim.run()
    samples = fabric.metrics.queue_samples
    assert samples and samples[0][1] == "h0:0->p0t0x0"
    assert max(s[2] for s in samples) > 0
    assert sim.now < 10**8


def test_a_nic_builds_each_route_from_one_list_per_destination() -> None:
    # a ring of 256 KiB flows (host h to h + 1) over 8 planes: each host sprays over
    # 256 EVs to one peer and ACKs another; its NIC (SimHost.kick) builds every route
    # from the fabric's route_bases (computed once per source T0 and destination, one
    # per plane) and t1_parts, never through path_for, and every packet's route is
    # the topology's address for its EV
    from openmrc.sim.experiment import Experiment
    from openmrc.workloads import FlowSpec

    spec = ClosSpec(planes=8, t0s=2, hosts_per_t0=4, t1s=4)
    exp = Experiment(spec, seed=1)
    n = spec.hosts
    exp.add_flows([FlowSpec(h, (h + 1) % n, 256 << 10) for h in range(n)])
    fabric = exp.fabric
    topo = fabric.topology
    bases: list[tuple[int, int]] = []
    route_bases = fabric.route_bases

    def counting(src: int, dst: int) -> list[int]:
        bases.append((src // spec.hosts_per_t0, dst))
        return route_bases(src, dst)

    def no_path_for(src: int, dst: int, ev: int) -> int:
        raise AssertionError(f"path_for({src}, {dst}, {ev}) called by the NIC")

    fabric.route_bases = counting  # type: ignore[method-assign]
    fabric.path_for = no_path_for  # type: ignore[method-assign]
    sent: list[tuple[int, int, int, object]] = []
    for host in exp.hosts:
        assert host is not None
        host.taps.append(
            lambda src, peer, pkt, out, _now: (
                sent.append((src, peer, pkt.path_ev, pkt.route)) if out else None
            )
        )
    result = exp.run()
    assert result.all_ok
    # a list per source T0 and destination, made once: the data's and the ACKs' peers
    assert (
        len(bases)
        == len(set(bases))
        == len({(s // 4, d) for s in range(n) for d in ((s + 1) % n, (s - 1) % n)})
    )
    # T0 0's hosts 0-3 send to 1-4 and ACK 7, 0, 1, 2: six destinations (T0 1 alike)
    assert {len(fabric.bases_from(h)) for h in range(n)} == {6}
    planes = {ev & 0xF for _, _, ev, _ in sent}
    assert planes == set(range(8))
    assert len({(src, peer) for src, peer, _, _ in sent}) == 2 * n
    for src, peer, ev, route in sent:
        assert route == topo.path_address(src, peer, ev), (src, peer, ev)


def test_path_for_is_the_topologys_path_address_hit_or_miss() -> None:
    # path_for computes a missed route inline: it must be the topology's address for
    # every source, destination (same T0 or not), plane and T1, on a miss and on the
    # cached hit after it; a bad source, destination or plane raises as the topology does
    spec = ClosSpec(planes=2, t0s=3, hosts_per_t0=4, t1s=4)
    topo = Topology(spec)
    fabric = Fabric(Simulator(seed=0), topo)
    for src in range(spec.hosts):
        for dst in range(spec.hosts):
            if dst == src:
                continue
            for ev in (0, 1, 0x10, 0x21, 0x31, 0x40, 0xFFF1, 0x12340):
                want = topo.path_address(src, dst, ev)
                assert fabric.path_for(src, dst, ev) == want, (src, dst, ev)
                assert fabric.path_for(src, dst, ev) == want, (src, dst, ev)
    for src, dst, ev in ((0, 0, 0), (0, spec.hosts, 0), (0, -1, 0), (0, 1, 2), (-1, 1, 0)):
        with pytest.raises(ValueError):
            fabric.path_for(src, dst, ev)


def test_route_bases_with_a_t1_part_are_the_topologys_path_address() -> None:
    # what the NIC builds a route from: under one T0 the base is the route, between
    # T0s the base ORed with the T1 part the EV picks; either way the topology's
    # address for every source, destination, plane and T1; a bad pair raises
    spec = ClosSpec(planes=2, t0s=3, hosts_per_t0=4, t1s=4)
    topo = Topology(spec)
    fabric = Fabric(Simulator(seed=0), topo)
    hpt, t1s = spec.hosts_per_t0, spec.t1s
    for src in range(spec.hosts):
        for dst in range(spec.hosts):
            if dst == src:
                continue
            bases = fabric.route_bases(src, dst)
            assert fabric.bases_from(src)[dst] is bases  # shared by src's T0
            assert len(bases) == spec.planes
            for ev in (0, 1, 0x10, 0x21, 0x31, 0x40, 0xFFF1, 0x12340):
                plane = ev & 0xF
                if plane >= spec.planes:
                    continue
                route = bases[plane]
                if src // hpt != dst // hpt:
                    route |= fabric.t1_parts[plane][((ev >> 4) & 0xFFF) % t1s]
                assert route == topo.path_address(src, dst, ev), (src, dst, ev)
    bad: list[tuple[object, object]] = [(0, 0), (0, spec.hosts), (0, -1), (-1, 1), (0, 1.0)]
    for a, b in bad:
        with pytest.raises(ValueError):
            fabric.route_bases(a, b)  # type: ignore[arg-type]
