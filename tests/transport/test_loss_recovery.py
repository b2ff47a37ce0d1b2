"""Loss recovery under spraying's reordering: RACK's window and whom a loss blames."""

from __future__ import annotations

from openmrc.loopback import Faults
from openmrc.transport import SGE, EVEvent, EVProfile, EVState, QPAttr, SendWR, WROpcode
from openmrc.wire.packets import SackPacket

from .helpers import assert_exact, run_transfer, setup_transfer


def _bad_events(t) -> list[EVEvent]:  # type: ignore[no-untyped-def]
    out = []
    while (ev := t.lb.a.next_event()) is not None:
        if isinstance(ev, EVEvent) and ev.new is EVState.ASSUMED_BAD:
            out.append(ev)
    return out


def test_reordering_just_beyond_the_window_resends_but_blames_no_ev() -> None:
    # First light reordering (up to 1 us) against a 2 us window, long enough
    # for the QP to measure it; then packets delayed by up to 4 us: RACK
    # declares some lost and resends them, but every original arrives, well
    # within one more window.  The resends are spurious; no healthy EV may go
    # ASSUMED_BAD.
    f = Faults(reorder=0.3, reorder_delay_ps=1_000_000)
    t = setup_transfer(f, attr=QPAttr(reorder_window_ps=2_000_000), count=120, seed=5)
    run_transfer(t, until=100_000_000)
    assert t.qa.requester is not None
    assert t.qa.requester.reo_samples >= 8 and t.qa.stats.spurious_retransmits == 0
    f.reorder_delay_ps = 4_000_000
    run_transfer(t)
    assert_exact(t)
    assert t.qa.stats.spurious_retransmits > 0  # the case is exercised
    assert _bad_events(t) == []


def test_a_real_loss_still_marks_its_ev_assumed_bad() -> None:
    # 16 EVs (the paper's 20 %-drop experiment uses 2 per plane x 8): each EV
    # carries many packets, so a loss is followed by later packets on the same
    # EV that arrive: order evidence that the EV lost it.
    attr = QPAttr(ev_profile=EVProfile(ev_count=16, floor=1))
    t = run_transfer(setup_transfer(Faults(loss=0.02), count=40, seed=3, attr=attr))
    assert_exact(t)
    assert t.qa.stats.losses_detected > 0
    bad = _bad_events(t)
    assert bad and all(e.reason == "loss without trim" for e in bad)
    assert t.qa.requester is not None and t.qa.requester.gap_blames > 0


def test_the_window_follows_the_reordering_measured() -> None:
    # A 0.2 us floor, reordering of up to 3 us: the window grows to cover the
    # lateness measured on reordered packets (mean + 4 deviations), not only
    # after spurious retransmissions.
    f = Faults(reorder=0.3, reorder_delay_ps=3_000_000)
    t = run_transfer(setup_transfer(f, attr=QPAttr(reorder_window_ps=200_000), count=40, seed=5))
    assert_exact(t)
    req = t.qa.requester
    assert req is not None
    assert req.reo_mean > 0
    assert req.reo_window() >= req.reo_mean + 4 * req.reo_dev > 1_000_000


def _probe_blames_after_overdue_first_packet(ack: str) -> int:
    """Drive a requester by hand: three packets, the later two acknowledged, so the
    first is overdue: its EV gets a probe (never answered here) and RACK resends
    the packet on another EV.  Then the first PSN is acknowledged (``ack``:
    ``"original"`` before the resend, ``"early"`` sooner after the resend than a
    round trip, ``"late"`` a round trip after it) and the probe falls due; returns
    the EV blames of unanswered probes."""
    t = setup_transfer(count=0)
    qa = t.qa
    req = qa.requester
    assert req is not None
    mra, mrb = qa.pd.mrs[0], t.qb.pd.mrs[0]
    qa.post_send(
        SendWR(0, WROpcode.RDMA_WRITE, [SGE(mra.addr, 3 * req.mtu, mra.lkey)], mrb.addr, mrb.rkey)
    )
    first = req.next_packet(0)
    later = [req.next_packet(1000), req.next_packet(1000)]
    assert first is not None and all(p is not None and p.ev != first.ev for p in later)
    now = req.min_rtt
    req.on_sack(SackPacket(qa.qpn, later[0].ev, 0, 0, 0b110, ts_echo=1000), now)  # type: ignore[union-attr]
    # the probe goes out first (overdue by the gap allowance), then RACK's window passes
    while first.ev not in req.ev_probes:
        at = req.get_timer()
        assert at is not None  # the overdue packet keeps a timer armed
        now = at
        req.handle_timer(now)
    probe_due = req.ev_probes[first.ev][1]
    if ack == "original":
        req.on_sack(SackPacket(qa.qpn, first.ev, 3, 3, 0, ts_echo=0), now)
    else:
        while not req.retx:
            at = req.get_timer()
            assert at is not None  # RACK's timer for the overdue packet
            now = at
            req.handle_timer(now)
        resend = req.next_packet(now)
        assert resend is not None and resend.psn == 0 and resend.ev != first.ev
        now += 1 if ack == "early" else req.min_rtt
        req.on_sack(SackPacket(qa.qpn, first.ev, 3, 3, 0, ts_echo=0), now)
    assert req.stats.timeouts == 0 and now < probe_due
    req.handle_timer(probe_due)
    assert first.ev not in req.ev_probes
    return req.probe_blames


def test_an_unanswered_ev_probe_blames_only_when_its_packet_may_be_lost() -> None:
    # The transmission the probe was sent for arrived (acknowledged before any
    # resend, or so soon after the resend that the original must have arrived):
    # the path delivers, whatever became of the probe.  Acknowledged only a round
    # trip after the resend, the ACK may be the resend's: the probe's silence blames.
    assert _probe_blames_after_overdue_first_packet("original") == 0
    assert _probe_blames_after_overdue_first_packet("early") == 0
    assert _probe_blames_after_overdue_first_packet("late") == 1
