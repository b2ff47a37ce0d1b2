"""Proof of probe replies and SACK echoes (ACK proof on, as the network driver runs).

Two directly connected sans-IO contexts; every packet is moved by hand at an
explicit time, so each test decides what is delivered, forged or replayed.
"""

from __future__ import annotations

import random

from openmrc.transport import Context, QPAttr, QueuePair
from openmrc.transport.paths import EVState
from openmrc.wire.packets import (
    Packet,
    ProbePacket,
    ProbeReplyPacket,
)

MS = 1_000_000_000  # ps


def _pair() -> tuple[Context, Context, QueuePair, QueuePair]:
    a, b = Context(random.Random(1), "a"), Context(random.Random(2), "b")
    qa = a.alloc_pd().create_qp(a.create_cq())
    qb = b.alloc_pd().create_qp(b.create_cq())
    qa.connect(qb.qpn, QPAttr(), peer="b")
    qb.connect(qa.qpn, QPAttr(), peer="a")
    for q, seed in ((qa, 11), (qb, 12)):
        assert q.requester is not None
        q.requester.require_ack_proof(random.Random(seed))
    return a, b, qa, qb


def _drain(ctx: Context, now: int) -> list[Packet]:
    out = []
    while (item := ctx.poll_packet(now)) is not None:
        out.append(item[1])
    return out


def _bad_ev_probe(a: Context, qa: QueuePair) -> tuple[int, ProbePacket, int]:
    """Make one EV of ``qa`` ASSUMED_BAD and run its probe timer: (ev, probe, now)."""
    paths = qa.paths
    assert paths is not None
    ev = paths.slots[0]
    paths.on_loss(ev, 0, "test")
    assert paths.state_of(ev) is EVState.ASSUMED_BAD
    now = paths.next_probe_at
    assert now is not None
    a.handle_timer(now)
    probes = [p for p in _drain(a, now) if isinstance(p, ProbePacket) and p.ev == ev]
    assert len(probes) == 1
    return ev, probes[0], now


def test_unproven_probe_replies_are_counted_and_change_nothing() -> None:
    a, b, qa, _qb = _pair()
    req = qa.requester
    paths = qa.paths
    assert req is not None and paths is not None
    ev, probe, now = _bad_ev_probe(a, qa)
    forged = [
        ProbeReplyPacket(qa.qpn, ev, probe.seq, probe.ts - 1),  # a near guess of the stamp
        ProbeReplyPacket(qa.qpn, ev, probe.seq, now),  # the probe's nanosecond
        ProbeReplyPacket(qa.qpn, paths.slots[1], probe.seq, probe.ts),  # its stamp, another EV
    ]
    for _round in range(paths.probes_needed(ev) + 2):
        for f in forged:
            a.receive_packet(f, now + MS)
    assert req.forged_probe_replies == len(forged) * (paths.probes_needed(ev) + 2)
    assert qa.stats.probe_replies == 0
    assert paths.state_of(ev) is EVState.ASSUMED_BAD
    assert paths.probing[ev] == 0  # no answered probe counted towards its return

    # The genuine reply (qb's responder echoes the stamp) is taken, once.
    b.receive_packet(probe, now + MS)
    replies = [p for p in _drain(b, now + MS) if isinstance(p, ProbeReplyPacket)]
    assert len(replies) == 1 and replies[0].ts_echo == probe.ts
    a.receive_packet(replies[0], now + 2 * MS)
    assert qa.stats.probe_replies == 1
    assert paths.probing[ev] == 1
    before = req.forged_probe_replies
    a.receive_packet(replies[0], now + 3 * MS)  # the same reply again: a replay
    assert req.forged_probe_replies == before + 1
    assert paths.probing.get(ev) == 1


def test_proven_probe_replies_still_bring_an_ev_back() -> None:
    a, b, qa, _qb = _pair()
    paths = qa.paths
    assert paths is not None
    ev, probe, now = _bad_ev_probe(a, qa)
    for _ in range(20):
        b.receive_packet(probe, now)
        for p in _drain(b, now):
            a.receive_packet(p, now + MS)
        if paths.state_of(ev) is EVState.GOOD:
            break
        now = paths.next_probe_at or now + MS
        a.handle_timer(now)
        out = [p for p in _drain(a, now) if isinstance(p, ProbePacket) and p.ev == ev]
        assert out
        probe = out[0]
    assert paths.state_of(ev) is EVState.GOOD
    assert qa.requester is not None and qa.requester.forged_probe_replies == 0
