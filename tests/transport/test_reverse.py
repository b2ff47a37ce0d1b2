"""The reverse-path EV set: which EV a responder's SACKs and NACKs travel on (paper 2.4)."""

from __future__ import annotations

import random

from openmrc.transport import EVProfile, PathSet
from openmrc.transport.ev import ev_plane
from openmrc.transport.reverse import (
    MAX_OUTSTANDING,
    PROBE_WAIT_RTTS,
    REVERSE_PROBE_SEQ,
    ReversePaths,
)
from openmrc.wire.packets import ProbePacket, ProbeReplyPacket, SackPacket

from .helpers import Transfer, assert_exact, run_transfer, setup_transfer


def _sacks(t: Transfer) -> list[tuple[int, SackPacket, str]]:
    """Every SACK from b to a as (time, packet, fate), recorded as the run goes."""
    out: list[tuple[int, SackPacket, str]] = []

    def trace(now: int, direction: str, pkt: object, fate: str) -> None:
        if direction == "ba" and type(pkt) is SackPacket:
            out.append((now, pkt, fate))

    t.lb.trace = trace
    return out


def test_sacks_travel_on_a_small_reverse_set_not_on_the_forward_evs() -> None:
    t = setup_transfer(count=60, imm_every=0)
    sacks = _sacks(t)
    run_transfer(t)
    assert_exact(t)
    qb = t.qb
    assert qb.paths is not None and qb.reverse is not None
    reflected = {s.ev for _, s, _ in sacks}
    paths = {s.path_ev for _, s, _ in sacks}
    assert len(reflected) > 50  # the sender still learns about each of its paths
    # ...but the SACKs travel on a few EVs of the receiver's own set: one per
    # plane at a time, another one as a probe confirms it (not every reflected EV).
    assert len(paths) <= len(qb.paths.planes()) + qb.reverse.stats_confirmed < len(reflected) // 2
    assert paths <= set(qb.paths.known_evs())
    assert {ev_plane(ev) for ev in paths} == {ev_plane(ev) for ev in reflected}


def test_a_path_dead_one_way_swallows_no_sack() -> None:
    # Plane 1's forward EVs of the sender are dead in the reverse direction (a
    # link that forwards one way only): SACKs reflecting them travelling on
    # them would vanish.
    t = setup_transfer(count=60, imm_every=0)
    assert t.qa.paths is not None
    t.lb.faults_ba.blackhole_evs.update(ev for ev in t.qa.paths.slots if ev_plane(ev) == 1)
    run_transfer(t)
    assert_exact(t)
    assert t.lb.stats("ba").blackholed == 0
    assert t.qa.paths.stats_bad == 0


def test_an_inbound_only_qp_confirms_reverse_evs_with_probes() -> None:
    # The receiver's first EV of every plane (its stand-ins) is dead towards the
    # sender; it sends no data, so EV probes find working ones.
    t = setup_transfer(count=120, imm_every=0)
    qb = t.qb
    assert qb.paths is not None and qb.reverse is not None
    standins = {qb.paths.first_good(p) for p in qb.paths.planes()}
    t.lb.faults_ba.blackhole_evs.update(standins)
    probes: list[ProbePacket] = []
    sack_paths: set[int] = set()

    def trace(now: int, direction: str, pkt: object, fate: str) -> None:
        if direction == "ba" and type(pkt) is ProbePacket:
            probes.append(pkt)
        elif direction == "ba" and type(pkt) is SackPacket and fate == "deliver":
            sack_paths.add(pkt.path_ev)

    t.lb.trace = trace
    run_transfer(t)
    assert_exact(t)
    rev = qb.reverse
    assert rev.stats_probes >= 2 and rev.stats_confirmed >= 1
    assert all(not p.reliability and p.seq & REVERSE_PROBE_SEQ for p in probes)
    confirmed = [rev.evs[p] for p in qb.paths.planes() if rev.confirmed >> p & 1]
    assert confirmed and not set(confirmed) & standins
    assert set(confirmed) <= sack_paths  # the SACKs took them
    # Once a reverse EV is confirmed, SACKs use it: a few at the start were lost.
    assert t.lb.stats("ba").blackholed < t.lb.stats("ba").sent // 4


def test_a_reverse_ev_that_dies_is_failed_over() -> None:
    # Mid-transfer, the reverse EV the receiver's SACKs of plane 0 travel on
    # dies towards the sender.  The receiver's per-RTT probes move plane 0's
    # reverse EV to one just answered within a few RTTs; the SACKs lost meanwhile
    # are covered by the next ones.  No forward path of the sender is blamed:
    # its paths all work.
    t = setup_transfer(count=200, imm_every=0, max_len=40_000)
    sacks = _sacks(t)
    qa, qb = t.qa, t.qb
    assert qa.paths is not None and qb.reverse is not None
    run_transfer(t, until=40_000_000)
    assert len(t.send_wcs) < len(t.messages)  # still going
    rev = qb.reverse
    dead = rev.route(0)  # what carries plane 0's SACKs now
    assert ev_plane(dead) == 0
    t.lb.faults_ba.blackhole_evs.add(dead)
    died = t.lb.now
    run_transfer(t)
    assert_exact(t)
    assert rev.route(0) != dead
    lost = [s for at, s, fate in sacks if fate == "blackhole"]
    after = [s for at, s, fate in sacks if at > died]
    assert after and lost and all(s.path_ev == dead for s in lost)  # used, then not
    # failed over within a few round trips: the SACKs lost are a small share
    assert len(lost) < len(after) // 10, (len(lost), len(after))
    assert qa.paths.stats_bad == 0
    assert qa.stats.timeouts == 0


def test_with_no_reverse_ev_confirmed_sacks_spread_over_the_plane() -> None:
    # Three of every four reverse paths of each plane are dead, the receiver's
    # stand-ins (each plane's first GOOD EV) among them, as at the end of
    # t0-t1-links-down-20; the receiver only receives, and no probe has found a
    # working EV yet.  Pinned to one dead stand-in per plane, every SACK was
    # lost until probes found working EVs: the sender, hearing nothing, timed
    # out again and again and blamed its forward paths, which all work (over
    # 200 timeouts here).  Spread over the plane's EVs in turn, a quarter of the
    # SACKs arrive, each with the cumulative ACK and bitmap: no timeout.
    t = setup_transfer(count=120, imm_every=0)
    qa, qb = t.qa, t.qb
    assert qa.paths is not None and qb.paths is not None and qb.reverse is not None
    for p in qb.paths.planes():
        good = qb.paths.good_evs(p)
        assert qb.paths.first_good(p) == good[0]
        t.lb.faults_ba.blackhole_evs.update(ev for k, ev in enumerate(good) if k % 4 != 3)
    run_transfer(t)
    assert_exact(t)
    assert qa.stats.timeouts == 0
    assert qa.paths.stats_bad == 0
    ba = t.lb.stats("ba")
    assert ba.delivered >= ba.sent // 5, (ba.delivered, ba.sent)


def test_probe_replies_go_back_on_the_probed_ev() -> None:
    # An EV probe tests one path's round trip: its reply on the reverse set
    # would share the fate of the reverse EV instead, and a dead reverse EV
    # would get every probed EV of its plane blamed.  SACKs and NACKs take the
    # reverse set.
    t = setup_transfer(count=4, imm_every=0)
    qb = t.qb
    assert qb.paths is not None and qb.reverse is not None
    ev = t.qa.paths.slots[1] if t.qa.paths is not None else 0
    qb.queue_control(ProbeReplyPacket(qb.remote_qpn, ev, 5, 0))
    qb.queue_control(SackPacket(qb.remote_qpn, ev, 0, 0, 0, False, 0, 0))
    reply, sack = list(qb.control)[-2:]
    assert reply.path_ev == ev
    assert sack.path_ev != ev and sack.path_ev in qb.paths.known_evs()


def _reverse(planes: int = 2) -> tuple[PathSet, ReversePaths]:
    paths = PathSet(
        EVProfile(planes=planes, paths_per_plane=4, ev_count=4 * planes), random.Random(1), qpn=1
    )
    return paths, ReversePaths(paths, interval_ps=10)


def test_probes_go_each_rtt_answered_or_not_and_not_while_sending() -> None:
    _, rev = _reverse()
    assert rev.on_inbound(0, 7) is None  # an RTT of inbound activity first
    sent = []
    for now in range(10, 200, 10):
        probe = rev.on_inbound(now, 7)
        if probe is not None:
            sent.append(probe)
            assert probe.seq & REVERSE_PROBE_SEQ and not probe.reliability
            assert rev.on_probe_reply(probe.ev, probe.seq, probe.ts, now + 5)
    # every RTT, the planes in turn, each probe's EV becoming its plane's reverse EV
    assert len(sent) >= 15
    assert {ev_plane(p.ev) for p in sent[:2]} == {0, 1}
    assert len({p.ev for p in sent}) > 2
    assert rev.route(sent[-1].ev ^ 0x10) == sent[-1].ev
    # unanswered probes do not hold the next: one per RTT still (paper 2.4)
    lost = [rev.on_inbound(now, 7) for now in range(200, 240, 10)]
    assert all(p is not None for p in lost)
    assert rev.on_inbound(235, 7) is None  # but not more than one per RTT
    assert rev.outstanding() == 4
    # any outstanding probe's answer confirms its EV, in any order
    late = lost[1]
    assert late is not None
    before = rev.stats_confirmed
    assert rev.on_probe_reply(late.ev, late.seq, late.ts, 245)
    assert rev.stats_confirmed == before + 1 and rev.evs[ev_plane(late.ev)] == late.ev
    assert rev.outstanding() == 3
    # the QP sending data: its SACKs keep the set fresh, no probe
    _, rev2 = _reverse()
    rev2.on_inbound(0, 7)
    rev2.last_out = 5
    assert rev2.on_inbound(10, 7) is None
    assert not rev.on_probe_reply(sent[0].ev, 3, 0, 300)  # a requester's probe: not ours
    # a reply that does not echo an outstanding probe's own seq, EV and
    # timestamp is consumed and confirms nothing (forged, or answered already)
    last = lost[3]
    assert last is not None
    before_state = (rev.confirmed, list(rev.evs), rev.stats_confirmed)
    for ev, seq, ts in (
        (last.ev, last.seq, last.ts + 1),
        (last.ev ^ 0x10, last.seq, last.ts),
        (last.ev, last.seq ^ 1, last.ts),
        (late.ev, late.seq, late.ts),  # its probe was answered already
    ):
        assert rev.on_probe_reply(ev, seq, ts, 246)
        assert (rev.confirmed, list(rev.evs), rev.stats_confirmed) == before_state
    assert rev.on_probe_reply(last.ev, last.seq, last.ts, 246)  # the true answer counts
    assert rev.stats_confirmed == before_state[2] + 1


def test_outstanding_probes_are_bounded_and_expire() -> None:
    _, rev = _reverse()
    rev.on_inbound(0, 7)
    # suspicions ask for a probe at once, again and again: the table bounds them
    probes = []
    for now in range(10, 20):
        rev.suspect(now % 2, now)
        probe = rev.on_inbound(now, 7)
        if probe is not None:
            probes.append(probe)
    assert len(probes) == MAX_OUTSTANDING == rev.outstanding()
    # none answered: each is given up after PROBE_WAIT_RTTS RTTs, one per RTT goes on
    start = 10 + PROBE_WAIT_RTTS * 10
    assert rev.on_inbound(start, 7) is not None
    for now in range(start + 10, start + 400, 10):
        assert rev.on_inbound(now, 7) is not None  # never blocked: one per RTT
        assert rev.outstanding() <= MAX_OUTSTANDING
    # a probe given up on confirms nothing when its answer comes at last
    stale = probes[0]
    before = (rev.confirmed, list(rev.evs), rev.stats_confirmed)
    assert rev.on_probe_reply(stale.ev, stale.seq, stale.ts, now)
    assert (rev.confirmed, list(rev.evs), rev.stats_confirmed) == before
    # nor an answer arriving after PROBE_WAIT_RTTS RTTs, before the table dropped it
    fresh = rev.on_inbound(now + 10, 7)
    assert fresh is not None
    late = now + 10 + PROBE_WAIT_RTTS * 10
    assert rev.on_probe_reply(fresh.ev, fresh.seq, fresh.ts, late)
    assert (rev.confirmed, rev.stats_confirmed) == (before[0], before[2])


def test_a_suspect_plane_fails_over_to_another_plane_and_a_new_ev() -> None:
    _, rev = _reverse(planes=4)
    rev.on_inbound(0, 7)
    for now in range(10, 100, 10):
        probe = rev.on_inbound(now, 7)
        if probe is not None:
            rev.on_probe_reply(probe.ev, probe.seq, probe.ts, now + 1)
    assert rev.confirmed == 0b1111
    old = rev.evs[1]
    assert rev.route(old) == old
    rev.suspect(1, 100)  # a duplicate came in on plane 1
    assert not rev.confirmed >> 1 & 1 and rev.evs[1] != old
    assert ev_plane(rev.route(old)) == 2  # the next confirmed plane carries them
    again = rev.on_inbound(100, 7)  # at once, for the suspect plane
    assert again is not None and ev_plane(again.ev) == 1 and again.ev != old
    # a failed-over plane's carrier is what a further suspicion unconfirms
    rev.suspect(1, 101)
    assert not rev.confirmed >> 2 & 1
