"""Hostile and stale input: forged fatal NACKs, packets from strangers, a QP in ERROR.

Everything is sans-IO over two directly connected contexts: packets are moved
by hand, so each test decides exactly what is delivered and when.
"""

from __future__ import annotations

import random

from openmrc.transport import (
    SGE,
    Context,
    QPAttr,
    QPState,
    QueuePair,
    SendWR,
    WCStatus,
    WROpcode,
)
from openmrc.wire.codec import encode
from openmrc.wire.packets import DataPacket, NackPacket, NackReason, Packet

FATAL = [
    NackReason.REMOTE_ACCESS_ERROR,
    NackReason.NO_RESOURCE,
    NackReason.INVALID_REQUEST,
    NackReason.QP_NOT_READY,
]


def _pair() -> tuple[Context, Context, QueuePair, QueuePair]:
    a, b = Context(random.Random(1), "a"), Context(random.Random(2), "b")
    qa = a.alloc_pd().create_qp(a.create_cq())
    qb = b.alloc_pd().create_qp(b.create_cq())
    qa.connect(qb.qpn, QPAttr(), peer="b")
    qb.connect(qa.qpn, QPAttr(), peer="a")
    return a, b, qa, qb


def _post_write(qa: QueuePair, qb: QueuePair, length: int = 64 << 10) -> None:
    src = qa.pd.reg_mr(length, buffer=bytearray(length))
    dst = qb.pd.reg_mr(length, buffer=bytearray(length))
    qa.post_send(SendWR(1, WROpcode.RDMA_WRITE, [SGE(src.addr, length, src.lkey)],
                        dst.addr, dst.rkey))  # fmt: skip


def _drain(ctx: Context, now: int) -> list[Packet]:
    out = []
    while (item := ctx.poll_packet(now)) is not None:
        out.append(item[1])
    return out


def test_forged_fatal_nacks_with_any_psn_leave_a_live_qp_running() -> None:
    a, b, qa, qb = _pair()
    _post_write(qa, qb)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    assert len(sent) == 16  # all outstanding, none delivered yet
    forged = 0
    for reason in FATAL:
        # every outstanding PSN and some that are not, with guessed timestamps
        for psn in [*range(16), 16, 17, 1000, 0xFFFFFFFF]:
            for ts in (0, 1, 999):
                nack = NackPacket(qa.qpn, sent[0].ev, reason, psn, 0, ts)
                a.receive_datagram(encode(nack), 2000)  # bytes, as from a socket
                a.receive_packet(nack, 2000)  # and as an object
                forged += 2
    assert qa.state is QPState.RTS
    assert qa.stats.fatal_nacks == 0
    assert qa.stats.ignored_fatal_nacks == forged
    # The transfer still completes when the real packets are delivered.
    now = 3000
    for data in sent:
        b.receive_packet(data, now)
    for _ in range(50):
        now += 1_000_000
        for p in _drain(b, now):
            a.receive_packet(p, now)
        for p in _drain(a, now):
            b.receive_packet(p, now)
        a.handle_timer(now)
        b.handle_timer(now)
    wcs = qa.send_cq.poll(10)
    assert [wc.status for wc in wcs] == [WCStatus.SUCCESS]


def test_fatal_nack_for_an_outstanding_transmission_still_fails_the_qp() -> None:
    a, _b, qa, qb = _pair()
    _post_write(qa, qb)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    nack = NackPacket(qa.qpn, sent[3].ev, NackReason.REMOTE_ACCESS_ERROR, sent[3].psn, 0, 1000)
    a.receive_datagram(encode(nack), 2000)
    assert qa.state is QPState.ERROR
    assert [wc.status for wc in qa.send_cq.poll(10)] == [WCStatus.REM_ACCESS_ERR]


def test_fatal_nack_for_another_qp_of_the_context_is_ignored() -> None:
    a, b, qa, qb = _pair()
    qc = a.alloc_pd().create_qp(a.create_cq())
    qd = b.alloc_pd().create_qp(b.create_cq())
    qc.connect(qd.qpn, QPAttr(), peer="b")
    _post_write(qa, qb)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    # qa's outstanding PSN and timestamp, addressed to qc (nothing outstanding there)
    nack = NackPacket(qc.qpn, sent[0].ev, NackReason.REMOTE_ACCESS_ERROR, sent[0].psn, 0, 1000)
    a.receive_datagram(encode(nack), 2000)
    assert qc.state is QPState.RTS and qa.state is QPState.RTS
    assert qc.stats.ignored_fatal_nacks == 1


def test_packets_from_a_stranger_or_for_a_qp_not_ready_change_nothing() -> None:
    a, b, qa, qb = _pair()
    _post_write(qa, qb)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    nack = NackPacket(qa.qpn, sent[0].ev, NackReason.REMOTE_ACCESS_ERROR, sent[0].psn, 0, 1000)
    before = qa.stats.as_dict()
    a.receive_datagram(encode(nack), 2000, peer="mallory")
    a.receive_packet(nack, 2000, peer="mallory")
    assert qa.state is QPState.RTS
    assert qa.stats.as_dict() == before
    assert a.stats["rx_wrong_peer"] == 2 and a.stats["rx_packets"] == 0
    # From the real peer it acts.
    a.receive_datagram(encode(nack), 2000, peer="b")
    assert qa.state is QPState.ERROR
    # A QP not yet at RTR counts nothing either.
    qe = b.alloc_pd().create_qp(b.create_cq())
    data = sent[0]
    data.dqpn = qe.qpn
    b.receive_datagram(encode(data), 3000)
    assert qe.stats.as_dict() == type(qe.stats)().as_dict()
    assert b.stats["rx_not_ready"] == 1


def test_packets_for_a_destroyed_qp_or_any_unknown_qpn_are_counted_and_dropped() -> None:
    a, b, qa, qb = _pair()
    _post_write(qa, qb)
    sent = [p for p in _drain(a, 1000) if isinstance(p, DataPacket)]
    data = sent[0]
    b.destroy_qp(qb)
    b.receive_packet(data, 2000)
    assert b.stats["rx_unknown_qp"] == 1 and b.stats["rx_packets"] == 0
    assert qb.stats.rx_data_packets == 0
    for qpn in (-1, 0, 0xFF, qb.qpn + 1, 1 << 40):  # (any integer: not trusted)
        data.dqpn = qpn
        b.receive_packet(data, 2000)
    assert b.stats["rx_unknown_qp"] == 6 and b.stats["rx_packets"] == 0


def test_qp_in_error_answers_its_peer_which_fails_fast() -> None:
    a, b, qa, qb = _pair()
    qb.modify(QPState.ERROR)  # the responder side dies (here: by its user)
    _post_write(qa, qb)
    now = 1000
    for p in _drain(a, now):
        b.receive_packet(p, now)
    answers = _drain(b, now)
    assert answers and all(
        isinstance(p, NackPacket) and p.reason is NackReason.QP_NOT_READY for p in answers
    )
    assert qb.stats.error_nacks == len(answers)
    for p in answers:
        a.receive_packet(p, now + 1_000_000)
    # Failed within one round trip, not after the retry budget (seconds).
    assert qa.state is QPState.ERROR
    assert [wc.status for wc in qa.send_cq.poll(10)] == [WCStatus.REM_OP_ERR]
