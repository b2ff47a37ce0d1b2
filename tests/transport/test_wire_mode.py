"""The same transfers with every packet encoded to bytes and decoded again, plus fuzzing.

This is the real-network path (``receive_datagram``): PSNs and MSNs travel as
32 bits and are unwrapped against the QP's state; corrupted datagrams must be
dropped and counted, never raise.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmrc.loopback import Faults, Loopback
from openmrc.transport import SGE, RecvWR, SendWR, WROpcode
from openmrc.wire.codec import encode
from openmrc.wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)

from .helpers import assert_exact, run_transfer, setup_transfer


def test_wire_mode_exact_under_all_faults() -> None:
    f = Faults(loss=0.03, reorder=0.3, duplicate=0.05, trim=0.03, trim_lasthop=0.02, ecn=0.1)
    t = run_transfer(setup_transfer(f, wire=True, seed=4, faults_ba=Faults(loss=0.03)))
    assert_exact(t)
    assert t.qa.stats.retransmits > 0


def test_corrupted_datagrams_are_dropped_and_counted() -> None:
    f = Faults(corrupt=0.05)
    t = run_transfer(setup_transfer(f, wire=True, seed=6, faults_ba=Faults(corrupt=0.05)))
    assert_exact(t)
    assert t.lb.stats("ab").corrupted > 0
    assert t.lb.b.stats["rx_malformed"] + t.lb.b.stats["rx_unknown_qp"] > 0


def test_psn_unwrap_across_the_32_bit_boundary() -> None:
    t = setup_transfer(wire=True, count=0)
    near = (1 << 32) - 20
    assert t.qa.requester is not None and t.qb.responder is not None
    # Start both sides' PSN and MSN spaces just below 2^32.
    t.qa.requester.next_psn = t.qa.requester.snd_una = near
    t.qa.requester.next_msn = near
    t.qb.responder.base = near
    t.qb.responder.next_msn = near
    mra, mrb = t.qa.pd.mrs[0], t.qb.pd.mrs[0]
    t.qb.post_recv(RecvWR(1))
    t.qa.post_send(
        SendWR(
            0,
            WROpcode.RDMA_WRITE_WITH_IMM,
            [SGE(mra.addr, 200_000, mra.lkey)],
            mrb.addr,
            mrb.rkey,
            9,
        )
    )
    t.messages = [(0, 200_000, 9)]
    run_transfer(t)
    assert_exact(t)
    assert t.qb.responder.base > 1 << 32


def _valid_datagrams(qpn: int, rkey: int, addr: int) -> list[bytes]:
    pkts = [
        DataPacket(qpn, 0x31, Opcode.WRITE_ONLY, 0, 0, addr, rkey, 16, bytes(range(16)), ts=5),
        DataPacket(qpn, 0x32, Opcode.WRITE_FIRST, 1, 1, addr, rkey, 8, bytes(8), ts=6, wimm=True),
        DataPacket(
            qpn, 0x33, Opcode.WRITE_LAST_IMM, 2, 1, addr + 8, rkey, 8, bytes(8), imm=3, wimm=True
        ),
        SackPacket(qpn, 0x31, 1, 1, 0b101, True, 100, 2, 7),
        NackPacket(qpn, 0x32, NackReason.TRIMMED, 0, 0, 5),
        NackPacket(qpn, 0x32, NackReason.REMOTE_ACCESS_ERROR, 0, 0, 5),
        ProbePacket(qpn, 0x34, 0, 9, reliability=True),
        ProbePacket(qpn, 0x34, 1, 9),
        ProbeReplyPacket(qpn, 0x34, 0, 9),
    ]
    trimmed = DataPacket(qpn, 0x35, Opcode.WRITE_MIDDLE, 3, 1, addr, rkey, 64, bytes(64))
    trimmed.trim(lasthop=False)
    pkts.append(trimmed)
    return [encode(p) for p in pkts]


def _mutate(data: bytes, rnd: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rnd.randrange(1, 4)):
        op = rnd.randrange(4)
        if op == 0 and buf:
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        elif op == 1:
            buf.insert(rnd.randrange(len(buf) + 1), rnd.randrange(256))
        elif op == 2 and buf:
            del buf[rnd.randrange(len(buf))]
        else:
            buf = buf[: rnd.randrange(len(buf) + 1)]
    return bytes(buf)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), raw=st.binary(max_size=200))
def test_receive_datagram_survives_random_and_mutated_bytes(seed: int, raw: bytes) -> None:
    lb = Loopback()
    qa, qb = lb.connect()
    mr = qb.pd.reg_mr(1 << 16, buffer=bytearray(1 << 16))
    qb.post_recv(RecvWR(1))
    rnd = random.Random(seed)
    valid = _valid_datagrams(qb.qpn, mr.rkey, mr.addr) + _valid_datagrams(qa.qpn, mr.rkey, mr.addr)
    inputs = [raw, *valid, *(_mutate(rnd.choice(valid), rnd) for _ in range(20))]
    now = 1_000_000
    for data in inputs:
        for ctx in (lb.a, lb.b):
            ctx.receive_datagram(data, now)  # must never raise
            now += 1000
            ctx.handle_timer(now)
            while ctx.poll_packet(now) is not None:
                pass
    total = sum(sum(ctx.stats.values()) for ctx in (lb.a, lb.b))
    assert total == 2 * len(inputs)
