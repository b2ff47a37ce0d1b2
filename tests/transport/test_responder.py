"""Responder details: SACK windows under heavy reordering, ACK triggers."""

from __future__ import annotations

from openmrc.loopback import Loopback
from openmrc.transport import Context, QueuePair
from openmrc.transport.verbs import MemoryRegion
from openmrc.wire.packets import DataPacket, Opcode, ProbePacket, SackPacket


def _feed(order: list[int], coalesce: int = 16384) -> list[SackPacket]:
    lb = Loopback()
    qa, qb = lb.connect()
    assert qb.responder is not None
    qb.responder.coalesce = coalesce
    mr = qb.pd.reg_mr(1 << 22)
    sacks: list[SackPacket] = []
    for i, psn in enumerate(order):
        opcode = Opcode.WRITE_MIDDLE
        pkt = DataPacket(
            qa.qpn, 0x10, opcode, psn, 0, mr.addr + psn * 1024, mr.rkey, 1024, ts=i + 1
        )
        qb.receive_packet(pkt, 1000 + i)
        while (out := qb.poll_packet(2000 + i)) is not None:
            if isinstance(out, SackPacket):
                sacks.append(out)
    # A reliability probe asks for the ACK that coalescing is still holding back.
    qb.receive_packet(ProbePacket(qa.qpn, 0x10, 0, 99_999, reliability=True), 99_999)
    while (out := qb.poll_packet(99_999)) is not None:
        if isinstance(out, SackPacket):
            sacks.append(out)
    return sacks


def _reported(sacks: list[SackPacket]) -> set[int]:
    got: set[int] = set()
    for s in sacks:
        got.update(range(s.cack))
        got.update(s.sack_base + i for i in range(64) if s.bitmap >> i & 1)
    return got


def test_late_packets_far_below_the_highest_psn_are_still_sacked() -> None:
    # PSN 0 is missing throughout; 1..300 arrive, but 5..9 arrive after everything else:
    # far more than 64 PSNs below the highest.  Each must appear in some SACK.
    order = [p for p in range(1, 301) if not 5 <= p <= 9] + [5, 6, 7, 8, 9]
    sacks = _feed(order)
    assert set(range(1, 301)) <= _reported(sacks)
    # And with the plain UET rule (window at the highest PSN) they would not be:
    late = [s for s in sacks if s.sack_base <= 9]
    assert late, "no SACK window reached back to the late packets"


def test_a_duplicate_below_the_sack_window_is_acknowledged() -> None:
    # PSN 0 is missing; 1..200 arrive, then 5 again: the sender resent it because
    # the SACKs that reported it were lost.  The duplicate's ACK must report 5
    # (the window at the highest PSN, 137..200, would not), or the sender never
    # learns it arrived and keeps resending it.
    sacks = _feed([*range(1, 201), 5])
    dup = [s for s in sacks if s.ts_echo == 201]  # the duplicate's own ACK
    assert dup, "the duplicate was not acknowledged at once"
    assert 5 in _reported(dup)


def test_each_sack_counts_the_psns_held_above_its_cumulative_ack() -> None:
    """A SACK's ``ooo_count`` (and the window penalty read from it) is the number of
    PSNs placed above its cumulative ACK when it was sent, through reordering,
    duplicates, holes filled several PSNs at a time, a trimmed packet and one out of
    the window (neither placed)."""
    import random

    rng = random.Random(5)
    order = list(range(300))
    for i in range(0, 300, 40):  # reordering within blocks of 40
        block = order[i : i + 40]
        rng.shuffle(block)
        order[i : i + 40] = block
    order[50:50] = [order[10], order[45]]  # duplicates
    lb = Loopback()
    qa, qb = lb.connect()
    rsp = qb.responder
    assert rsp is not None
    rsp.coalesce = 1  # an ACK for every packet
    mr = qb.pd.reg_mr(1 << 22)
    placed: set[int] = set()
    checked = 0
    for i, psn in enumerate([*order, 1 << 20]):
        pkt = DataPacket(qa.qpn, 0x10, Opcode.WRITE_MIDDLE, psn, 0, mr.addr + psn % 4096 * 1024,
                         mr.rkey, 1024, ts=i + 1)  # fmt: skip
        pkt.trimmed = i == 77
        qb.receive_packet(pkt, 1000 + i)
        if i != 77 and psn < 1 << 20:
            placed.add(psn)
        while (out := qb.poll_packet(1000 + i)) is not None:
            if isinstance(out, SackPacket):
                assert out.ooo_count == sum(1 for p in placed if p >= out.cack)
                checked += 1
    assert checked > 250
    assert rsp.bits.bit_count() == sum(1 for p in placed if p >= rsp.base) > 0


def test_one_window_when_everything_fits() -> None:
    sacks = _feed(list(range(1, 17)))
    # 16 packets of 1 KiB = one coalesced ACK, in one window; then the probe's ACK.
    assert len(sacks) == 2
    assert sacks[0].sack_base == 0 and sacks[0].bitmap == 0x1FFFE
    assert all(s.cack == 0 for s in sacks)


# -- receives are consumed in WRITE_IMM message order ----------------------------------


def _imm_pair(
    receives: int, sizes: list[int]
) -> tuple[Context, Context, QueuePair, QueuePair, list[DataPacket]]:
    """Two connected contexts; b has ``receives`` posted; a's WRITE_IMMs sent, held."""
    import random

    from openmrc.transport import SGE, QPAttr, RecvWR, SendWR, WROpcode

    a, b = Context(random.Random(1)), Context(random.Random(2))
    qa = a.alloc_pd().create_qp(a.create_cq())
    qb = b.alloc_pd().create_qp(b.create_cq())
    qa.connect(qb.qpn, QPAttr(), peer="b")
    qb.connect(qa.qpn, QPAttr(), peer="a")
    src = qa.pd.reg_mr(1 << 20, buffer=bytearray(1 << 20))
    dst = qb.pd.reg_mr(1 << 20, buffer=bytearray(1 << 20))
    for i in range(receives):
        qb.post_recv(RecvWR(wr_id=10 + i))
    off = 0
    for i, size in enumerate(sizes):
        qa.post_send(SendWR(i, WROpcode.RDMA_WRITE_WITH_IMM, [SGE(src.addr + off, size, src.lkey)],
                            dst.addr + off, dst.rkey, imm_data=100 + i))  # fmt: skip
        off += size
    held = []
    while (item := a.poll_packet(1000)) is not None:
        assert isinstance(item[1], DataPacket)  # the WRITE_IMMs' packets
        held.append(item[1])
    return a, b, qa, qb, held


def _exchange(a, b, first: list, now: int = 2000) -> None:  # type: ignore[no-untyped-def]
    """Deliver ``first`` to b in that order, then let the pair run to quiet."""
    for p in first:
        b.receive_packet(p, now)
    for _ in range(20):
        now += 1_000_000
        while (item := b.poll_packet(now)) is not None:
            a.receive_packet(item[1], now)
        while (item := a.poll_packet(now)) is not None:
            b.receive_packet(item[1], now)


def test_second_message_arriving_first_does_not_take_the_first_receive() -> None:
    a, b, qa, qb, held = _imm_pair(2, [100, 100])
    _exchange(a, b, [held[1], held[0]])  # message 1 first
    got = [(wc.wr_id, wc.imm_data) for wc in qb.recv_cq.poll(10)]
    assert got == [(10, 100), (11, 101)]  # first receive <-> first message
    assert [wc.status.name for wc in qa.send_cq.poll(10)] == ["SUCCESS", "SUCCESS"]


def test_one_receive_blames_the_later_message_even_when_it_arrives_first() -> None:
    a, b, qa, qb, held = _imm_pair(1, [100, 100])
    _exchange(a, b, [held[1], held[0]])
    # Message 0 has the receive; message 1 is the one without: it is refused.
    assert [(wc.wr_id, wc.imm_data) for wc in qb.recv_cq.poll(10)] == [(10, 100)]
    wcs = {wc.wr_id: wc.status.name for wc in qa.send_cq.poll(10)}
    assert wcs == {0: "SUCCESS", 1: "RNR_RETRY_EXC_ERR"}


def test_one_receive_multi_packet_later_message_refused_on_arrival() -> None:
    a, b, qa, qb, held = _imm_pair(1, [4096, 8192])  # message 1: PSNs 1 and 2
    _exchange(a, b, [held[1], held[0], held[2]])
    assert [(wc.wr_id, wc.imm_data) for wc in qb.recv_cq.poll(10)] == [(10, 100)]
    wcs = {wc.wr_id: wc.status.name for wc in qa.send_cq.poll(10)}
    assert wcs == {0: "SUCCESS", 1: "RNR_RETRY_EXC_ERR"}
    assert qb.state.name == "RTS"  # refused on arrival: the responder stays up


# -- what the responder keeps between packets -------------------------------------------


def test_interleaved_messages_complete_with_their_own_byte_counts() -> None:
    # Two 2-packet WRITE_IMMs arriving interleaved: each receive completes with its
    # own message's bytes, and the bytes placed so far are there to read meanwhile.
    a, b, _qa, qb, held = _imm_pair(2, [8192, 8192])
    assert [p.msn for p in held] == [0, 0, 1, 1]
    for p in (held[2], held[0], held[3]):
        b.receive_packet(p, 2000)
    assert qb.responder is not None
    assert qb.responder.msg_bytes == {0: 4096, 1: 8192}
    _exchange(a, b, [held[1]])
    got = [(wc.wr_id, wc.imm_data, wc.byte_len) for wc in qb.recv_cq.poll(10)]
    assert got == [(10, 100, 8192), (11, 101, 8192)]
    assert qb.responder.msg_bytes == {}


def test_interleaved_messages_counted_without_reading_them_between() -> None:
    a, b, _qa, qb, held = _imm_pair(2, [8192, 12288])
    _exchange(a, b, [held[2], held[0], held[3], held[1], held[4]])
    got = [(wc.wr_id, wc.byte_len) for wc in qb.recv_cq.poll(10)]
    assert got == [(10, 8192), (11, 12288)]


def test_a_deregistered_region_takes_no_more_writes() -> None:
    lb = Loopback()
    qa, qb = lb.connect()
    mr = qb.pd.reg_mr(1 << 16)
    stats = qb.stats

    def write(psn: int, region: MemoryRegion) -> None:
        pkt = DataPacket(qa.qpn, 0x10, Opcode.WRITE_MIDDLE, psn, 0, region.addr + psn * 1024,
                         region.rkey, 1024, ts=psn + 1)  # fmt: skip
        qb.receive_packet(pkt, 1000 + psn)

    write(0, mr)
    assert (stats.rx_data_packets, stats.rx_access_errors) == (1, 0)
    qb.pd.dereg_mr(mr)
    write(1, mr)  # the same rkey as the packet before, now unknown
    assert (stats.rx_data_packets, stats.rx_access_errors) == (1, 1)
    again = qb.pd.reg_mr(1 << 16)
    write(1, again)
    assert (stats.rx_data_packets, stats.rx_access_errors) == (2, 1)
