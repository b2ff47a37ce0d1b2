"""Responder details: SACK windows under heavy reordering, ACK triggers."""

from __future__ import annotations

from openmrc.loopback import Loopback
from openmrc.wire.packets import DataPacket, Opcode, ProbePacket, SackPacket


def _feed(order: list[int], coalesce: int = 16384) -> list[SackPacket]:
    lb = Loopback()
    qa, qb = lb.connect()
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


def test_one_window_when_everything_fits() -> None:
    sacks = _feed(list(range(1, 17)))
    # 16 packets of 1 KiB = one coalesced ACK, in one window; then the probe's ACK.
    assert len(sacks) == 2
    assert sacks[0].sack_base == 0 and sacks[0].bitmap == 0x1FFFE
    assert all(s.cack == 0 for s in sacks)
