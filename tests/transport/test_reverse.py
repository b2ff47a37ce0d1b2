"""The reverse-path EV set: which EV a responder's control packets travel on (paper 2.4)."""

from __future__ import annotations

from openmrc.transport.ev import ev_plane
from openmrc.wire.packets import ProbePacket, SackPacket

from .helpers import assert_exact, run_transfer, setup_transfer


def _sacks(t: object) -> list[SackPacket]:
    out: list[SackPacket] = []

    def trace(now: int, direction: str, pkt: object, fate: str) -> None:
        if direction == "ba" and type(pkt) is SackPacket:
            out.append(pkt)

    t.lb.trace = trace  # type: ignore[attr-defined]
    return out


def test_sacks_travel_on_a_small_reverse_set_not_on_the_forward_evs() -> None:
    t = setup_transfer(count=60, imm_every=0)
    sacks = _sacks(t)
    run_transfer(t)
    assert_exact(t)
    qb = t.qb
    assert qb.paths is not None and t.qa.paths is not None
    reflected = {s.ev for s in sacks}
    paths = {s.path_ev for s in sacks}
    assert len(reflected) > 50  # the sender still learns about each of its paths
    # ...but the SACKs travel on a few EVs of the receiver's own set: one per
    # plane at a time, another one per RTT as a probe confirms it (before: on
    # every reflected EV).
    assert qb.reverse is not None
    assert len(paths) <= len(qb.paths.planes()) + qb.reverse.stats_confirmed < len(reflected) // 2
    assert paths <= set(qb.paths.known_evs())
    assert {ev_plane(ev) for ev in paths} == {ev_plane(ev) for ev in reflected}


def test_a_path_dead_one_way_swallows_no_sack() -> None:
    # Plane 1's forward EVs of the sender are dead in the reverse direction (a
    # link that forwards one way only): SACKs reflecting them used to travel on
    # them and vanish.
    t = setup_transfer(count=60, imm_every=0)
    assert t.qa.paths is not None
    t.lb.faults_ba.blackhole_evs.update(ev for ev in t.qa.paths.slots if ev_plane(ev) == 1)
    run_transfer(t)
    assert_exact(t)
    assert t.lb.stats("ba").blackholed == 0
    assert t.qa.paths.stats_bad == 0


def test_an_inbound_only_qp_confirms_reverse_evs_with_probes() -> None:
    # The receiver's first EV of every plane (its stand-ins) is dead towards the
    # sender; it sends no data, so EV probes (one per RTT) find working ones.
    t = setup_transfer(count=120, imm_every=0)
    qb = t.qb
    assert qb.paths is not None and qb.reverse is not None
    standins = {qb.paths.first_good(p) for p in qb.paths.planes()}
    t.lb.faults_ba.blackhole_evs.update(standins)
    probes: list[ProbePacket] = []

    def trace(now: int, direction: str, pkt: object, fate: str) -> None:
        if direction == "ba" and type(pkt) is ProbePacket:
            probes.append(pkt)

    t.lb.trace = trace
    run_transfer(t)
    assert_exact(t)
    rev = qb.reverse
    assert rev.stats_probes >= 2 and rev.stats_confirmed >= 1
    assert all(not p.reliability for p in probes)
    confirmed = [rev.evs[p] for p in qb.paths.planes() if rev.confirmed >> p & 1]
    assert confirmed and not set(confirmed) & standins
    # Once a reverse EV is confirmed, control packets use it: a few SACKs at
    # the start were lost, not the transfer's.
    assert t.lb.stats("ba").blackholed < t.lb.stats("ba").sent // 4


def test_probes_stop_once_every_plane_is_confirmed_and_resume_on_a_duplicate() -> None:
    import random

    from openmrc.transport import EVProfile, PathSet
    from openmrc.transport.reverse import REVERSE_PROBE_SEQ, ReversePaths

    paths = PathSet(EVProfile(planes=2, paths_per_plane=4, ev_count=8), random.Random(1), qpn=1)
    rev = ReversePaths(paths, interval_ps=10)
    assert rev.on_inbound(0, 7) is None  # an RTT of inbound activity first
    sent = []
    for now in range(10, 400, 10):
        probe = rev.on_inbound(now, 7)
        if probe is not None:
            sent.append(probe)
            assert probe.seq & REVERSE_PROBE_SEQ and not probe.reliability
            assert rev.on_probe_reply(probe.ev, probe.seq, now + 5)
    assert len(sent) == 2 and {ev_plane(p.ev) for p in sent} == {0, 1}  # one per plane
    assert rev.route(sent[0].ev ^ 0x10) == sent[0].ev  # a confirmed EV carries the SACKs
    rev.suspect(1, 400)  # a duplicate came in on plane 1
    again = rev.on_inbound(400, 7)
    assert again is not None and ev_plane(again.ev) == 1 and again.ev != sent[1].ev
    assert not rev.on_probe_reply(again.ev, 3, 401)  # a requester's probe: not ours
