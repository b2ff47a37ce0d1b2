"""Port status in the simulator: a NIC port down maps its plane out at both ends."""

from __future__ import annotations

from dataclasses import replace

from openmrc.sim.config import FabricConfig
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.transport.ev import ev_plane
from openmrc.wire.packets import DataPacket, SackPacket
from openmrc.workloads import single

US = 1_000_000
DOWN_AT, UP_AT, DELAY = 40 * US, 140 * US, 5 * US
PLANE = 2


def _run(delay: int = DELAY) -> tuple[Experiment, list[tuple[int, str, int]]]:
    spec = ClosSpec(planes=4, t0s=2, hosts_per_t0=1, t1s=2)
    exp = Experiment(
        spec, fabric_config=replace(FabricConfig(), nic_port_status_delay_ps=delay), seed=3
    )
    exp.add_flows(single(0, 1, 24 << 20))
    # The receiver's plane-2 NIC port goes down, then comes back.
    exp.faults.nic_port_down(1, PLANE, at_ps=DOWN_AT)
    exp.faults.nic_port_up(1, PLANE, at_ps=UP_AT)
    log: list[tuple[int, str, int]] = []

    def tap(host: int, peer: int, pkt: object, sent: bool, now: int) -> None:
        if sent and type(pkt) is DataPacket:
            log.append((now, "data", ev_plane(pkt.ev)))
        elif not sent and type(pkt) is SackPacket:
            log.append((now, "sack", pkt.ports_down))

    exp.hosts[0].taps.append(tap)
    return exp, log


def test_nic_port_down_remote_end_stops_within_one_rtt_of_the_bitmap_and_returns() -> None:
    exp, log = _run()
    r = exp.run()
    assert r.all_ok
    assert sum(f.timeouts for f in r.flows) == 0
    rtt = exp.base_rtt_ps  # the run's own (NIC and switch latencies included)
    first_bit = min(t for t, kind, v in log if kind == "sack" and v >> PLANE & 1)
    assert DOWN_AT + DELAY <= first_bit <= DOWN_AT + DELAY + 2 * rtt
    last_bit = max(t for t, kind, v in log if kind == "sack" and v >> PLANE & 1)
    assert last_bit >= UP_AT + DELAY - rtt
    # Between one RTT after the first SACK with the bit and the bit clearing: no data
    # on that plane from the remote end (host 0); the other planes carry on.
    during = [(t, p) for t, kind, p in log if kind == "data" and first_bit + rtt <= t <= last_bit]
    assert during and all(p != PLANE for _, p in during)
    # Port up: the plane returns.
    after = [p for t, kind, p in log if kind == "data" and t > last_bit + rtt]
    assert PLANE in after
    # The EVs of the down plane were not blamed after the port status arrived.
    bad_late = [
        e
        for e in r.ev_events
        if e["new"] == "ASSUMED_BAD" and e["host"] == 0 and e["time_us"] * US > first_bit
    ]
    assert not bad_late


def test_without_port_status_the_remote_end_keeps_losing_on_that_plane() -> None:
    exp, log = _run(delay=10**12)  # the NIC never acts within the run
    r = exp.run()
    assert r.all_ok
    assert not [t for t, kind, v in log if kind == "sack" and v]
    data_on_plane = [
        t for t, kind, p in log if kind == "data" and p == PLANE and DOWN_AT + 20 * US < t < UP_AT
    ]
    assert data_on_plane  # only losses (and probes) tell it; it keeps sending some there
