"""Property tests: the decoders raise only WireError (or return a packet) on any bytes.

Mutations are applied both raw (mostly caught by the ICRC / UDP checksum) and
with the ICRC and checksum recomputed afterwards, so the field checks behind
them see the damage too.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmrc.wire.codec import Buffer, WireError, decode, decode_frame, encode, encode_frame
from openmrc.wire.packets import (
    IMM_OPCODES,
    AnyPacket,
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)

u24 = st.integers(0, (1 << 24) - 1)
u32 = st.integers(0, (1 << 32) - 1)
u64 = st.integers(0, (1 << 64) - 1)
seqno = st.integers(0, 1 << 40)  # the core's unbounded sequence numbers
SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def data_packets(draw: st.DrawFn) -> DataPacket:
    opcode = draw(st.sampled_from(sorted(o for o in Opcode if o < 0xC0)))
    length = draw(st.integers(0, 300) | st.sampled_from([0, 4096, 9000]))
    payload = draw(st.none() | st.binary(min_size=length, max_size=length))
    p = DataPacket(
        draw(u24), draw(u32), opcode, draw(seqno), draw(seqno), draw(u64), draw(u32), length,
        payload, draw(u32) if opcode in IMM_OPCODES else None, draw(u64),
        draw(st.booleans()), draw(st.booleans()), draw(st.booleans()),
    )  # fmt: skip
    if draw(st.booleans()):
        p.trim(draw(st.booleans()))
    return p


@st.composite
def sack_packets(draw: st.DrawFn) -> SackPacket:
    cack = draw(seqno)
    return SackPacket(
        draw(u24), draw(u32), cack, cack + draw(st.integers(0, 0xFFFF)), draw(u64),
        draw(st.booleans()), draw(u64), draw(u32), draw(u64), draw(st.integers(0, 127)),
    )  # fmt: skip


packets: st.SearchStrategy[AnyPacket] = st.one_of(
    data_packets(),
    sack_packets(),
    st.builds(NackPacket, u24, u32, st.sampled_from(list(NackReason)), seqno, seqno, u64),
    st.builds(ProbePacket, u24, u32, seqno, u64, st.booleans()),
    st.builds(ProbeReplyPacket, u24, u32, seqno, u64),
)


def expected_after_wire(p: AnyPacket) -> AnyPacket:
    """What decode(encode(p)) must give: sequence numbers cut to 32 bits, zeros for virtual."""
    m = 0xFFFFFFFF
    if isinstance(p, DataPacket):
        q = DataPacket(
            p.dqpn, p.ev, p.opcode, p.psn & m, p.msn & m, p.va, p.rkey, p.length,
            p.payload if p.payload is not None else bytes(p.length), p.imm, p.ts,
            p.retransmit, p.ack_req, p.wimm,
        )  # fmt: skip
        if p.trimmed:
            q.trim(p.trimmed_lasthop)
        return q
    if isinstance(p, SackPacket):
        return SackPacket(
            p.dqpn, p.ev, p.cack & m, (p.cack & m) + (p.sack_base - p.cack), p.bitmap,
            p.ecn_seen, p.rcvd_bytes, p.ooo_count, p.ts_echo, p.penalty,
        )  # fmt: skip
    if isinstance(p, NackPacket):
        return NackPacket(p.dqpn, p.ev, p.reason, p.psn & m, p.cack & m, p.ts_echo)
    if isinstance(p, ProbePacket):
        return ProbePacket(p.dqpn, p.ev, p.seq & m, p.ts, p.reliability)
    return ProbeReplyPacket(p.dqpn, p.ev, p.seq & m, p.ts_echo)


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """Flip, overwrite, insert or delete a few bytes, or truncate."""
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        i = draw(st.integers(0, max(len(b) - 1, 0)))
        if op == "flip" and b:
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and b:
            b[i] = draw(st.integers(0, 255))
        elif op == "insert":
            b[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and b:
            del b[i : i + draw(st.integers(1, 8))]
        elif op == "truncate":
            del b[i:]
    return bytes(b)


def refix_icrc(b: bytes) -> bytes:
    if len(b) < 4:
        return b
    return b[:-4] + zlib.crc32(b[:-4]).to_bytes(4, "big")


def refix_frame(b: bytes) -> bytes:
    """Recompute ICRC and UDP checksum where the frame is long enough to have them."""
    if len(b) < 92:
        return b
    f = bytearray(b[:88] + refix_icrc(b[88:]))
    f[86:88] = b"\0\0"
    words = bytes(f[48:80]) + len(f[80:]).to_bytes(4, "big") + b"\0\0\0\x11" + bytes(f[80:])
    s = int.from_bytes(words, "big") << (8 if len(words) % 2 else 0)
    f[86:88] = (0xFFFF - s % 0xFFFF).to_bytes(2, "big")
    return bytes(f)


def decodes_or_wire_error(data: Buffer) -> AnyPacket | None:
    try:
        return decode(data)
    except WireError:
        return None


def frame_decodes_or_wire_error(data: Buffer) -> AnyPacket | None:
    try:
        return decode_frame(data)[0]
    except WireError:
        return None


@SETTINGS
@given(packets)
def test_round_trip_property(p: AnyPacket) -> None:
    q = decode(encode(p))
    assert q == expected_after_wire(p)
    assert q.size == p.size
    f, info = decode_frame(encode_frame(p, 1, 2, 3))
    assert (
        f == q and info.flow_label == p.ev & 0xFFFFF and (info.outer_dst, info.inner_dst) == (3, 2)
    )


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    decodes_or_wire_error(data)
    decodes_or_wire_error(refix_icrc(data))
    frame_decodes_or_wire_error(data)


@SETTINGS
@given(st.sampled_from(list(Opcode)), st.binary(min_size=11, max_size=120))
def test_random_bytes_behind_a_valid_opcode(opcode: Opcode, rest: bytes) -> None:
    data = refix_icrc(bytes([opcode]) + rest)
    decodes_or_wire_error(data)
    decodes_or_wire_error(memoryview(data))


@SETTINGS
@given(st.data(), packets)
def test_mutated_encodings(draw: st.DataObject, p: AnyPacket) -> None:
    good = encode(p)
    bad = draw.draw(mutations(good))
    q = decodes_or_wire_error(bad)
    if bad != good:
        assert q is None  # the ICRC catches every mutation of these sizes
    decodes_or_wire_error(refix_icrc(bad))
    decodes_or_wire_error(bytearray(refix_icrc(bad)))


@SETTINGS
@pytest.mark.worker_group("frames")  # no module fixture: beside the file's others
@given(st.data(), packets, st.booleans())
def test_mutated_frames(draw: st.DataObject, p: AnyPacket, ecn: bool) -> None:
    p.ecn = ecn
    good = encode_frame(p, 0xFD00 << 112 | 1, 0xFD00 << 112 | 2, 0xFCBB << 112 | 0x4001 << 80)
    bad = draw.draw(mutations(good))
    frame_decodes_or_wire_error(bad)
    q = frame_decodes_or_wire_error(refix_frame(bad))
    if bad == good:
        assert q is not None and q.ecn == ecn


# -- a live connected QP pair ----------------------------------------------------------
# Above the codec: any packet (structured, encoded, mutated), addressed to a live
# QP with data outstanding, must neither raise nor put either QP in ERROR.

_SENT_AT = 123_456_789  # the data's send time: a forged NACK would have to echo it


def _live_pair() -> tuple[list[object], list[object]]:
    import random

    from openmrc.transport import SGE, Context, QPAttr, SendWR, WROpcode

    a, b = Context(random.Random(1)), Context(random.Random(2))
    qa = a.alloc_pd().create_qp(a.create_cq())
    qb = b.alloc_pd().create_qp(b.create_cq())
    qa.connect(qb.qpn, QPAttr(), peer="b")
    qb.connect(qa.qpn, QPAttr(), peer="a")
    src = qa.pd.reg_mr(1 << 16, buffer=bytearray(1 << 16))
    dst = qb.pd.reg_mr(1 << 16, buffer=bytearray(1 << 16))
    qa.post_send(SendWR(1, WROpcode.RDMA_WRITE, [SGE(src.addr, 1 << 16, src.lkey)],
                        dst.addr, dst.rkey))  # fmt: skip
    while (item := a.poll_packet(_SENT_AT)) is not None:
        b.receive_packet(item[1], _SENT_AT + 1000)  # b holds state; a has data in flight
    return [a, b], [qa, qb]


@pytest.mark.worker_group("frames")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(packets, min_size=1, max_size=8))
def test_live_qp_pair_survives_any_packet(draw: st.DataObject, pkts: list[AnyPacket]) -> None:
    from openmrc.transport import QPState

    ctxs, qps = _live_pair()
    now = _SENT_AT + 2000
    for p in pkts:
        side = draw.draw(st.integers(0, 1))
        ctx, qp = ctxs[side], qps[side]
        p.dqpn = qp.qpn  # type: ignore[attr-defined]
        how = draw.draw(st.sampled_from(["object", "bytes", "mutated"]))
        if how == "object":
            ctx.receive_packet(p, now)  # type: ignore[attr-defined]
        else:
            data = encode(p)
            if how == "mutated":
                data = refix_icrc(draw.draw(mutations(data)))
            ctx.receive_datagram(data, now)  # type: ignore[attr-defined]
        now += 1000
        for c in ctxs:
            c.handle_timer(now)  # type: ignore[attr-defined]
            while c.poll_packet(now) is not None:  # type: ignore[attr-defined]
                pass
    assert all(qp.state is QPState.RTS for qp in qps)  # type: ignore[attr-defined]
