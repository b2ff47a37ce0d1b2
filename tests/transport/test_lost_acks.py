"""A lost ACK is not a lost path: SACKs lost on the way back blame no EV, while a
data packet really lost still blames the EV it was sent on (docs/loss-recovery.md).

Two endpoints over the loopback, with a scripted channel: PSN 10's first two
transmissions are trimmed (a hole the receiver reports as its cumulative point
for about two round trips, congestion that blames nobody) or its first one is
lost; then the next one or three SACKs are lost.  The receiver coalesces ACKs
over 64 packets (256 KiB), so a SACK's 64-bit bitmap reaches no further back
than its own packets: what a lost SACK reported is not reported again until the
hole fills.  Meanwhile later packets on the same EVs (16 EVs: every 16th PSN)
are acknowledged, and an earlier packet that no SACK reported looks overtaken.
"""

from __future__ import annotations

from typing import Any

import pytest

from openmrc.transport import (
    SGE,
    CCProfile,
    EVEvent,
    EVProfile,
    EVState,
    QPAttr,
    SendWR,
    WROpcode,
)
from openmrc.wire.packets import DataPacket, Packet, SackPacket

from .helpers import assert_exact, run_transfer, setup_transfer

HOLE = 10
DELAY_PS = 45_000_000  # one way: a round trip covers about 270 packets at 100 Gb/s


def _run(lost_sacks: int, data_lost: bool) -> tuple[int, list[tuple[int, str]], int]:
    """One transfer (about 2.9 MB in one WRITE) with PSN 10 trimmed twice (or lost
    once), then ``lost_sacks`` SACKs lost in a row.  Returns the EV of PSN 10's
    first transmission, the ASSUMED_BAD events (EV, reason) and the requester's
    retransmissions."""
    attr = QPAttr(
        ev_profile=EVProfile(ev_count=16, floor=1),
        cc_profile=CCProfile(link_bps=100e9, base_rtt_ps=2 * DELAY_PS + 2_000_000),
        ack_coalesce_bytes=256 << 10,
        timeout=10,  # 1.05 ms: the round trip is 92 us
    )
    t = setup_transfer(count=1, max_len=4 << 20, seed=2, attr=attr, delay_ps=DELAY_PS, imm_every=0)
    lb = t.lb
    transmit = lb._transmit
    state: dict[str, Any] = {"ev": None, "trims": 0, "sacks": 0}

    def channel(end: Any, pkt: Packet, at: int) -> None:
        if end.index == 0 and type(pkt) is DataPacket and pkt.psn == HOLE:
            if state["ev"] is None:
                state["ev"] = pkt.ev
                state["sacks"] = lost_sacks
                if data_lost:
                    state["trims"] = 2
                    return  # lost, not trimmed: the path's fault
            if state["trims"] < 2:
                state["trims"] += 1
                pkt.trim(lasthop=False)
        elif end.index == 1 and type(pkt) is SackPacket and state["sacks"] > 0:
            state["sacks"] -= 1
            return
        transmit(end, pkt, at)

    lb._transmit = channel  # type: ignore[method-assign]
    run_transfer(t)
    assert_exact(t)
    assert state["sacks"] == 0  # every SACK meant to be lost was
    bad = []
    while (event := lb.a.next_event()) is not None:
        if isinstance(event, EVEvent) and event.new is EVState.ASSUMED_BAD:
            bad.append((event.ev, event.reason))
    return state["ev"], bad, t.qa.stats.retransmits


@pytest.mark.parametrize("lost_sacks", [1, 3])
def test_lost_sacks_blame_no_ev(lost_sacks: int) -> None:
    _, bad, retransmits = _run(lost_sacks, data_lost=False)
    assert bad == []
    # The packets whose SACKs were lost looked overdue and were resent (recovery):
    # the case is exercised; the trimmed PSN alone is resent twice.
    assert retransmits > 2


@pytest.mark.parametrize("lost_sacks", [0, 1, 3])
def test_a_lost_data_packet_still_blames_its_ev_when_sacks_are_lost_too(
    lost_sacks: int,
) -> None:
    ev, bad, _ = _run(lost_sacks, data_lost=True)
    assert bad == [(ev, "loss without trim")]


def _group_blames(keep_group: bool) -> int:
    """Drive a requester by hand: 300 packets on 256 EVs, so PSN 5 and the next
    packet on its EV are about 256 PSNs apart.  One ACK event of two SACKs (one
    timestamp echoed, as a receiver sends when the PSNs it newly placed span more
    than 64): the first window reports PSN 5 missing, the second acknowledges
    the later packet on PSN 5's EV.  ``keep_group`` False sends the second with
    another timestamp, as if from a later ACK event.  Returns the order blames."""
    t = setup_transfer(count=0)
    qa = t.qa
    req = qa.requester
    assert req is not None
    mra, mrb = qa.pd.mrs[0], t.qb.pd.mrs[0]
    n = 300
    qa.post_send(
        SendWR(0, WROpcode.RDMA_WRITE, [SGE(mra.addr, n * req.mtu, mra.lkey)], mrb.addr, mrb.rkey)
    )
    sent = [req.next_packet(10 * i) for i in range(n)]
    assert all(p is not None for p in sent)
    evs = [p.ev for p in sent]  # type: ignore[union-attr]
    a = 5
    b = evs.index(evs[a], a + 1)
    assert b > a + 64  # no window holds both
    now = req.min_rtt
    ts = 10 * b
    # PSN 0 missing (the cumulative point), 6..68 received, 5 not
    req.on_sack(SackPacket(qa.qpn, evs[b], 0, a, ~1 & ((1 << 64) - 1), ts_echo=ts), now)
    req.on_sack(SackPacket(qa.qpn, evs[b], 0, b, 1, ts_echo=ts if keep_group else ts - 1), now)
    end = now + 10 * req.gap_allowance()
    while (deadline := req.get_timer()) is not None and deadline <= end:
        req.handle_timer(deadline)
    assert req.stats.timeouts == 0
    return req.gap_blames


def test_the_evidence_may_come_from_another_sack_of_the_same_ack_event() -> None:
    assert _group_blames(keep_group=True) == 1
    assert _group_blames(keep_group=False) == 0


def _count_blames(extra_rcvd: int, newer_first: bool = False) -> tuple[int, int]:
    """Drive a requester by hand: 300 packets on 256 EVs; one SACK acknowledges the
    64 PSNs up to the later packet on PSN 5's EV, with the cumulative point at 0,
    so PSNs 1-5 lie between the cumulative point and the window.  It says the
    receiver placed those 64 packets' bytes plus ``extra_rcvd``; with
    ``newer_first`` a SACK generated later (it says more bytes placed) came
    first, acknowledging 4 more PSNs above the window.  Returns the
    order blames and the PSNs below the window whose EV carried a later packet
    in it (each such PSN is overtaken)."""
    t = setup_transfer(count=0)
    qa = t.qa
    req = qa.requester
    assert req is not None
    mra, mrb = qa.pd.mrs[0], t.qb.pd.mrs[0]
    n = 300
    qa.post_send(
        SendWR(0, WROpcode.RDMA_WRITE, [SGE(mra.addr, n * req.mtu, mra.lkey)], mrb.addr, mrb.rkey)
    )
    sent = [req.next_packet(10 * i) for i in range(n)]
    assert all(p is not None for p in sent)
    evs = [p.ev for p in sent]  # type: ignore[union-attr]
    b = evs.index(evs[5], 6)
    lo = b - 63
    overtaken = sum(1 for p in range(lo) if evs[p] in evs[lo : b + 1])
    now = req.min_rtt
    if newer_first:
        newer = SackPacket(qa.qpn, evs[b + 1], 0, b + 1, 0b1111, rcvd_bytes=1 << 30, ts_echo=10)
        req.on_sack(newer, now)
        extra_rcvd += 4 * req.mtu
    sack = SackPacket(
        qa.qpn, evs[b], 0, lo, (1 << 64) - 1, rcvd_bytes=64 * req.mtu + extra_rcvd, ts_echo=10 * b
    )
    req.on_sack(sack, now)
    end = now + 10 * req.gap_allowance()
    while (deadline := req.get_timer()) is not None and deadline <= end:
        req.handle_timer(deadline)
    return req.gap_blames, overtaken


def test_a_sack_that_left_nothing_unreported_proves_the_overtaken_packets_missing() -> None:
    # The receiver placed exactly what the sender now knows acknowledged: no SACK
    # was lost, so PSNs 0-5 (overtaken on their EVs) are missing and blamed.
    blames, overtaken = _count_blames(0)
    assert overtaken >= 2 and blames == overtaken
    # It placed more than the sender knows of (a SACK lost on the way, say): only
    # the cumulative point, reported missing by this SACK itself, is evidence.
    assert _count_blames(4096) == (1, overtaken)
    # A SACK generated before one already taken (it says fewer bytes placed)
    # proves nothing about what is unreported now, even when the sums agree.
    assert _count_blames(0, newer_first=True) == (1, overtaken)
