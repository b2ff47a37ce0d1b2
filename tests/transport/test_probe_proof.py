"""Proof of probe replies and SACK echoes (ACK proof on, as the network driver runs).

Two directly connected sans-IO contexts; every packet is moved by hand at an
explicit time, so each test decides what is delivered, forged or replayed.
"""

from __future__ import annotations

import random

from openmrc.transport import SGE, Context, QPAttr, QueuePair, RecvWR, SendWR, WROpcode
from openmrc.transport.paths import EVState
from openmrc.wire.packets import (
    DataPacket,
    Packet,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
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


def _write(qa: QueuePair, qb: QueuePair, length: int, imm: int | None = None) -> None:
    src = qa.pd.reg_mr(length, buffer=bytearray(length))
    dst = qb.pd.reg_mr(length, buffer=bytearray(length))
    op = WROpcode.RDMA_WRITE if imm is None else WROpcode.RDMA_WRITE_WITH_IMM
    qa.post_send(SendWR(1, op, [SGE(src.addr, length, src.lkey)], dst.addr, dst.rkey, imm))


def test_an_echo_acknowledges_only_up_to_the_packet_it_stamps_and_only_once() -> None:
    a, _b, qa, qb = _pair()
    req = qa.requester
    assert req is not None
    _write(qa, qb, 64 << 10)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    assert [p.psn for p in sent] == list(range(16))  # none delivered
    # An on-path copy of packet 0's stamp and EV in a SACK claiming all 16.
    forged = SackPacket(qa.qpn, sent[0].ev, 16, 16, 0, ts_echo=sent[0].ts)
    a.receive_packet(forged, 2000)
    assert req.snd_una == 1 and len(req.unacked) == 15
    a.receive_packet(forged, 3000)  # the same echo again: refused
    assert req.replayed_acks == 1 and req.snd_una == 1
    # Packet 5's echo with a full bitmap: nothing past PSN 5 is acknowledged.
    a.receive_packet(SackPacket(qa.qpn, sent[5].ev, 1, 1, (1 << 64) - 1, ts_echo=sent[5].ts), 4000)
    assert req.snd_una == 1
    assert [p for p in range(16) if p in req.unacked] == list(range(6, 16))
    assert not qa.send_cq.poll(10)


def test_a_multi_sack_group_shares_its_echo_and_a_replay_of_it_is_refused() -> None:
    a, _b, qa, qb = _pair()
    req = qa.requester
    assert req is not None
    _write(qa, qb, 64 << 10)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    echo, ev = sent[15].ts, sent[15].ev
    a.receive_packet(SackPacket(qa.qpn, ev, 0, 0, 0b11, ts_echo=echo), 2000)
    a.receive_packet(SackPacket(qa.qpn, ev, 0, 8, 0b11, ts_echo=echo), 2000)  # the group's next
    assert [p for p in range(16) if p not in req.unacked] == [0, 1, 8, 9]
    a.receive_packet(SackPacket(qa.qpn, ev, 0, 8, 0b1111, ts_echo=echo), 3000)  # replayed base
    a.receive_packet(SackPacket(qa.qpn, ev, 0, 4, 0b11, ts_echo=echo), 3000)  # lower base
    assert req.replayed_acks == 2
    assert [p for p in range(16) if p not in req.unacked] == [0, 1, 8, 9]


def test_a_write_imm_whose_last_packet_overtakes_still_completes() -> None:
    """The echoed packet arrives after later ones: the cumulative ACK still covers
    the PSNs proven SACKs acknowledged, so the WRITE_IMM completes."""
    a, b, qa, qb = _pair()
    qb.post_recv(RecvWR(7))
    _write(qa, qb, 16 << 10, imm=5)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    assert len(sent) == 4
    now = 2000
    for d in (sent[3], sent[1], sent[2], sent[0]):  # the last first, the first last
        b.receive_packet(d, now)
        for c in _drain(b, now):
            a.receive_packet(c, now + MS)
        now += 1000
    assert not qa.send_cq.poll(10)  # PSNs 1 and 2 are not proven yet...
    for _ in range(3):  # ...the probe it sent asks for a SACK with a newer echo
        for p in _drain(a, now):
            b.receive_packet(p, now)
        for c in _drain(b, now):
            a.receive_packet(c, now + MS)
        now += 1000
    wcs = qa.send_cq.poll(10)
    assert [w.ok for w in wcs] == [True]
    assert qa.stats.retransmits == 0
    assert qa.requester is not None and qa.requester.forged_acks == 0


def test_rto_backoff_is_capped_at_the_largest_local_ack_timeout() -> None:
    """With infinite retries the doubling stops at 1.024 us x 2^24 (17.2 s), the
    largest local ACK timeout the attribute expresses, not 2^30 x the base."""
    a, b = Context(random.Random(1), "a"), Context(random.Random(2), "b")
    qa = a.alloc_pd().create_qp(a.create_cq())
    qb = b.alloc_pd().create_qp(b.create_cq())
    attr = QPAttr(timeout=16, retry_linear=7, retry_exp=25)  # 67 ms, forever
    assert attr.retries_infinite
    qa.connect(qb.qpn, attr, peer="b")
    req = qa.requester
    assert req is not None
    rtos = [req.rto_for(n) for n in range(60)]
    assert rtos == sorted(rtos)
    assert max(rtos) == 1_024_000 << 24
    assert rtos[8] == attr.timeout_ps << 2  # the doubling itself is unchanged


def test_stamps_go_to_the_qps_own_orders_never_the_shared_empty_ones() -> None:
    # Without ACK proof (the simulator) every requester shares one empty stamp
    # order per kind (a deque is 600 B even empty); proof gives a QP its own.
    from openmrc.transport import requester as rq

    c = Context(random.Random(3), "c")
    plain = c.alloc_pd().create_qp(c.create_cq())
    plain.connect(1, QPAttr(), peer="x")
    assert plain.requester is not None
    assert plain.requester.sent_order is rq._NO_STAMPS
    assert plain.requester.probe_order is rq._NO_STAMPS
    a, _b, qa, _qb = _pair()
    _bad_ev_probe(a, qa)  # an EV probe, stamped
    assert qa.requester is not None and len(qa.requester.probe_order) == 1
    assert not rq._NO_STAMPS
