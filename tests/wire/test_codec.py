"""Tests of openmrc.wire.codec: round trips, frames and error messages."""

from __future__ import annotations

import ipaddress
import struct
import zlib

import pytest

from openmrc.wire import codec
from openmrc.wire.codec import (
    FrameInfo,
    WireError,
    decode,
    decode_frame,
    encode,
    encode_frame,
    udp_sport,
)
from openmrc.wire.packets import (
    DATA_OPCODES,
    IMM_OPCODES,
    AnyPacket,
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
    unwrap32,
)
from openmrc.wire.srv6 import usid, usid_address
from tests.compiled import is_compiled, wrong_type_raises

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1
SRC = 0xFD00_0000_0000_0000_0000_0000_0000_0001
DST = 0xFD00_0000_0000_0000_0000_0000_0000_0002
PATH = usid_address([usid(1, 0, 3), usid(2, 0, 7), usid(1, 0, 9), usid(3, 0, 1)])


def data_pkt(
    opcode: Opcode = Opcode.WRITE_ONLY,
    length: int = 10,
    payload: bytes | None = b"",
    **kw: object,
) -> DataPacket:
    """A data packet; ``payload=b""`` means "some bytes of the given length"."""
    if payload == b"":
        payload = bytes(range(256)) * (length // 256) + bytes(range(length % 256))
    imm = kw.pop("imm", 0xDEADBEEF if opcode in IMM_OPCODES else None)
    args = dict(dqpn=0x123456, ev=0x89ABCDEF, psn=1000, msn=7, va=0x7F00_0000_1000, rkey=0x55)
    args.update(kw)  # type: ignore[arg-type]
    return DataPacket(
        opcode=opcode,
        length=length,
        payload=payload,
        imm=imm,  # type: ignore[arg-type]
        **args,  # type: ignore[arg-type]
    )


def refix_icrc(buf: bytes | bytearray) -> bytes:
    """Recompute the ICRC of a (mutated) UDP payload so deeper checks are reached."""
    b = bytearray(buf)
    b[-4:] = zlib.crc32(b[:-4]).to_bytes(4, "big")
    return bytes(b)


def naive_udp_checksum(src: int, dst: int, udp: bytes) -> int:
    """Textbook RFC 8200 checksum, word by word, to check the codec's fast one."""
    data = src.to_bytes(16, "big") + dst.to_bytes(16, "big")
    data += len(udp).to_bytes(4, "big") + b"\0\0\0\x11" + udp
    if len(data) % 2:
        data += b"\0"
    s = 0
    for i in range(0, len(data), 2):
        s += (data[i] << 8) | data[i + 1]
        s = (s & 0xFFFF) + (s >> 16)
    c = ~s & 0xFFFF
    return c or 0xFFFF


def refix_frame(buf: bytes | bytearray) -> bytes:
    """Recompute ICRC and UDP checksum of a (mutated) frame."""
    b = bytearray(buf)
    b[88:] = refix_icrc(b[88:])
    b[86:88] = b"\0\0"
    src = int.from_bytes(b[48:64], "big")
    dst = int.from_bytes(b[64:80], "big")
    b[86:88] = naive_udp_checksum(src, dst, bytes(b[80:])).to_bytes(2, "big")
    return bytes(b)


def control_packets() -> list[AnyPacket]:
    return [
        SackPacket(1, 2, 100, 100, 0),
        SackPacket(
            M32 >> 8,
            M32,
            M32,
            M32 + 0xFFFF,
            M64,
            ecn_seen=True,
            rcvd_bytes=M64,
            ooo_count=M32,
            ts_echo=M64,
            penalty=127,
        ),
        SackPacket(0, 0, 0, 0, 0),
        NackPacket(3, 4, NackReason.TRIMMED_LASTHOP, 17, 12, ts_echo=999),
        NackPacket(0xFFFFFF, M32, NackReason.QP_NOT_READY, M32, M32, ts_echo=M64),
        *(NackPacket(1, 1, r, 5, 5) for r in NackReason),
        ProbePacket(5, 6, 1, 123456789),
        ProbePacket(0xFFFFFF, M32, M32, M64, reliability=True),
        ProbePacket(0, 0, 0, 0),
        ProbeReplyPacket(5, 6, 1, 123456789),
        ProbeReplyPacket(0xFFFFFF, M32, M32, M64),
    ]


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("opcode", sorted(DATA_OPCODES))
@pytest.mark.parametrize("length", [0, 1, 10, 4096, 9000])
def test_data_round_trip_every_opcode(opcode: Opcode, length: int) -> None:
    p = data_pkt(opcode, length)
    b = encode(p)
    imm = 4 if opcode in IMM_OPCODES else 0
    assert len(b) == 12 + 16 + imm + 24 + length + 4
    q = decode(b)
    assert q == p
    assert q.size == p.size
    assert isinstance(q, DataPacket)
    assert isinstance(q.opcode, Opcode) and q.opcode == opcode
    assert (q.imm is not None) == (opcode in IMM_OPCODES)


@pytest.mark.parametrize("opcode", sorted(DATA_OPCODES))
@pytest.mark.parametrize("lasthop", [False, True])
def test_trimmed_round_trip(opcode: Opcode, lasthop: bool) -> None:
    p = data_pkt(opcode, 4096)
    p.trim(lasthop)
    b = encode(p)
    assert len(b) == 12 + 16 + (4 if opcode in IMM_OPCODES else 0) + 24 + 4
    q = decode(b)
    assert q == p and isinstance(q, DataPacket)
    assert q.trimmed and q.trimmed_lasthop == lasthop and q.payload is None
    assert q.length == 4096 and q.size == p.size


@pytest.mark.parametrize("retransmit", [False, True])
@pytest.mark.parametrize("ack_req", [False, True])
@pytest.mark.parametrize("wimm", [False, True])
def test_data_flags_round_trip(retransmit: bool, ack_req: bool, wimm: bool) -> None:
    p = data_pkt(Opcode.WRITE_MIDDLE, retransmit=retransmit, ack_req=ack_req, wimm=wimm)
    b = encode(p)
    assert bool(b[8] & 0x80) == ack_req
    assert decode(b) == p


def test_virtual_payload_decodes_as_zeros() -> None:
    p = data_pkt(Opcode.WRITE_FIRST, 1024, payload=None)
    q = decode(encode(p))
    assert isinstance(q, DataPacket)
    assert q.payload == bytes(1024)
    q.payload = None
    assert q == p


def test_data_extreme_values() -> None:
    lo = DataPacket(0, 0, Opcode.WRITE_ONLY, 0, 0, 0, 0, 0, b"")
    hi = DataPacket(
        0xFFFFFF, M32, Opcode.WRITE_LAST_IMM, M32, M32, M64, M32, 9000,
        bytes(9000), imm=M32, ts=M64, retransmit=True, ack_req=True, wimm=True,
    )  # fmt: skip
    for p in (lo, hi):
        assert decode(encode(p)) == p


@pytest.mark.parametrize("pkt", control_packets(), ids=repr)
def test_control_round_trip(pkt: AnyPacket) -> None:
    b = encode(pkt)
    assert len(b) == pkt.size - 88
    q = decode(b)
    assert q == pkt
    assert q.size == pkt.size


def test_sequence_numbers_sent_as_low_32_bits() -> None:
    big = 5 * 2**32 + 12345
    p = data_pkt(psn=big, msn=big + 3)
    q = decode(encode(p))
    assert isinstance(q, DataPacket)
    assert (q.psn, q.msn) == (12345, 12348)
    assert unwrap32(q.psn, big - 100) == big
    s = decode(encode(SackPacket(1, 1, big, big + 70, 3)))
    assert isinstance(s, SackPacket)
    assert s.cack == 12345 and s.sack_base - s.cack == 70
    n = decode(encode(NackPacket(1, 1, NackReason.TRIMMED, big, big - 1)))
    assert isinstance(n, NackPacket) and (n.psn, n.cack) == (12345, 12344)
    r = decode(encode(ProbePacket(1, 1, big, 0)))
    assert isinstance(r, ProbePacket) and r.seq == 12345


def test_sack_base_across_wrap_stays_above_cack() -> None:
    s = decode(encode(SackPacket(1, 1, M32 - 1, M32 + 10, 1)))
    assert isinstance(s, SackPacket)
    assert s.sack_base == M32 + 10
    assert s.sack_base - s.cack == 11
    assert unwrap32(s.sack_base, 2**32) == 2**32 + 9


def test_bth_layout() -> None:
    b = encode(data_pkt(Opcode.WRITE_LAST, psn=0x1ABCDEF, ack_req=True, dqpn=0x654321))
    assert b[0] == 0x08 and b[1] == 0 and b[2:4] == b"\xff\xff"
    assert b[4:8] == b"\x00\x65\x43\x21"
    assert b[8:12] == b"\x80\xab\xcd\xef"
    assert struct.unpack_from(">I", b, 12 + 16 + 4)[0] == 0x1ABCDEF  # MDH PSN
    assert b[-4:] == zlib.crc32(b[:-4]).to_bytes(4, "big")
    s = encode(SackPacket(9, 1, 0x1020304, 0x1020310, 0))
    assert s[0] == 0xC0 and s[8:12] == b"\x00\x02\x03\x04"


def test_decode_accepts_bytearray_and_memoryview() -> None:
    b = encode(data_pkt(length=32))
    assert len(b) % 4 == 0
    p = decode(b)
    assert decode(bytearray(b)) == p
    assert decode(memoryview(b)) == p
    assert decode(memoryview(b"xx" + b)[2:]) == p
    assert decode(memoryview(bytes(x for c in b for x in (c, 0)))[::2]) == p
    assert decode(memoryview(b).cast("I")) == p


# ----------------------------------------------------------------------------- encode errors


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dqpn", 1 << 24, "dqpn"),
        ("dqpn", -1, "dqpn"),
        ("ev", 1 << 32, "ev"),
        ("ev", -1, "ev"),
        ("psn", -1, "psn"),
        ("msn", -1, "msn"),
        ("va", 1 << 64, "va"),
        ("rkey", 1 << 32, "rkey"),
        ("ts", -5, "ts"),
        ("ts", 1 << 64, "ts"),
        ("imm", 1 << 32, "imm"),
        ("psn", None, "psn"),
        ("va", 1.5, "va"),
    ],
)
def test_encode_rejects_bad_data_fields(field: str, value: object, message: str) -> None:
    p = data_pkt(Opcode.WRITE_ONLY_IMM)
    if not isinstance(value, int) and is_compiled("openmrc.wire.packets"):
        with pytest.raises(TypeError):  # a compiled packet refuses it at assignment
            setattr(p, field, value)
        return
    setattr(p, field, value)
    with pytest.raises(WireError, match=rf"DataPacket\.{message}\b"):
        encode(p)


def test_encode_data_errors() -> None:
    with pytest.raises(WireError, match="needs an immediate"):
        encode(data_pkt(Opcode.WRITE_ONLY_IMM, imm=None))
    with pytest.raises(WireError, match="carries no immediate"):
        encode(data_pkt(Opcode.WRITE_ONLY, imm=5))
    with pytest.raises(WireError, match="not a WRITE opcode"):
        encode(data_pkt(Opcode.SACK))
    with pytest.raises(WireError, match="9 bytes but length says 10"):
        encode(data_pkt(payload=bytes(9)))
    with pytest.raises(WireError, match="length"):
        encode(data_pkt(length=9001))
    p = data_pkt()
    p.trimmed_lasthop = True
    with pytest.raises(WireError, match="not trimmed"):
        encode(p)
    with wrong_type_raises("openmrc.wire.codec", WireError, "not an MRC packet type"):
        encode(object())  # type: ignore[arg-type]


def test_encode_control_errors() -> None:
    with pytest.raises(WireError, match="sack_base - cack = 65536"):
        encode(SackPacket(1, 1, 10, 10 + 65536, 0))
    with pytest.raises(WireError, match="sack_base - cack = -1"):
        encode(SackPacket(1, 1, 10, 9, 0))
    with pytest.raises(WireError, match=r"SackPacket\.penalty"):
        encode(SackPacket(1, 1, 10, 10, 0, penalty=128))
    with pytest.raises(WireError, match=r"SackPacket\.bitmap"):
        encode(SackPacket(1, 1, 10, 10, 1 << 64))
    with pytest.raises(WireError, match=r"SackPacket\.ooo_count"):
        encode(SackPacket(1, 1, 10, 10, 0, ooo_count=1 << 32))
    with pytest.raises(WireError, match=r"SackPacket\.cack"):
        encode(SackPacket(1, 1, -1, 0, 0))
    with pytest.raises(WireError, match=r"SackPacket\.dqpn"):
        encode(SackPacket(1 << 24, 1, 1, 1, 0))
    with wrong_type_raises("openmrc.wire.packets", WireError, r"NackPacket\.reason"):
        encode(NackPacket(1, 1, 9, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(WireError, match=r"NackPacket\.ts_echo"):
        encode(NackPacket(1, 1, NackReason.TRIMMED, 1, 1, ts_echo=-1))
    with pytest.raises(WireError, match=r"ProbePacket\.seq"):
        encode(ProbePacket(1, 1, -1, 0))
    with pytest.raises(WireError, match=r"ProbeReplyPacket\.ts"):
        encode(ProbeReplyPacket(1, 1, 1, 1 << 64))
    with pytest.raises(WireError, match=r"ProbePacket\.ev"):
        encode(ProbePacket(1, 1 << 32, 1, 0))


# ----------------------------------------------------------------------------- decode errors


def test_truncation_messages() -> None:
    b = encode(SackPacket(1, 1, 10, 10, 0))
    with pytest.raises(WireError, match=r"^truncated: SACK needs 60 bytes, got 31$"):
        decode(b[:31])
    with pytest.raises(WireError, match=r"^truncated: NACK needs 40 bytes, got 39$"):
        decode(encode(NackPacket(1, 1, NackReason.TRIMMED, 1, 1))[:-1])
    with pytest.raises(WireError, match=r"^truncated: PROBE needs 36 bytes, got 20$"):
        decode(encode(ProbePacket(1, 1, 1, 1))[:20])
    with pytest.raises(WireError, match=r"^truncated: WRITE_ONLY_IMM needs 60 bytes, got 59$"):
        decode(encode(data_pkt(Opcode.WRITE_ONLY_IMM, 0))[:59])
    with pytest.raises(WireError, match=r"^truncated: an MRC packet needs 16 bytes, got 0$"):
        decode(b"")


def test_extra_bytes_after_control_packet() -> None:
    with pytest.raises(WireError, match="61 bytes, expected exactly 60"):
        decode(refix_icrc(encode(SackPacket(1, 1, 10, 10, 0)) + b"\0"))


def test_bad_opcode_message() -> None:
    b = bytearray(encode(data_pkt()))
    b[0] = 0x04  # SEND_ONLY: real IBTA opcode, not one MRC uses
    with pytest.raises(WireError, match=r"^BTH byte 0: opcode 0x04 is not an MRC opcode$"):
        decode(refix_icrc(b))


def test_bad_icrc_message() -> None:
    b = bytearray(encode(NackPacket(1, 1, NackReason.TRIMMED, 1, 1)))
    b[20] ^= 0x10
    with pytest.raises(WireError, match=r"^NACK ICRC at byte 36: 0x[0-9a-f]{8} does not match"):
        decode(b)
    b = bytearray(encode(data_pkt()))
    b[-1] ^= 1
    with pytest.raises(WireError, match=r"^WRITE_ONLY ICRC at byte"):
        decode(b)


@pytest.mark.parametrize(
    ("pkt", "offset", "what"),
    [
        (data_pkt(), 28, "WRITE_ONLY MDH byte 28"),
        (data_pkt(Opcode.WRITE_LAST_IMM), 32, "WRITE_LAST_IMM MDH byte 32"),
        (SackPacket(1, 1, 1, 1, 0), 12, "SACK header byte 0"),
        (NackPacket(1, 1, NackReason.TRIMMED, 1, 1), 12, "NACK header byte 0"),
        (ProbePacket(1, 1, 1, 1), 12, "PROBE header byte 0"),
        (ProbeReplyPacket(1, 1, 1, 1), 12, "PROBE_REPLY header byte 0"),
    ],
)
def test_bad_version_message(pkt: AnyPacket, offset: int, what: str) -> None:
    b = bytearray(encode(pkt))
    assert b[offset] == 1
    b[offset] = 2
    with pytest.raises(WireError, match=rf"^{what}: version 2 is not 1$"):
        decode(refix_icrc(b))


def test_bad_reason_message() -> None:
    b = bytearray(encode(NackPacket(1, 1, NackReason.TRIMMED, 1, 1)))
    b[14] = 0x09
    with pytest.raises(WireError, match=r"^NACK header byte 2: reason 0x09 is not a NackReason$"):
        decode(refix_icrc(b))


def test_imm_mismatch_messages() -> None:
    # An ImmDt behind a non-IMM opcode.
    b = bytearray(encode(data_pkt(Opcode.WRITE_ONLY_IMM)))
    b[0] = Opcode.WRITE_ONLY
    with pytest.raises(WireError, match="immediate .* seems present but opcode WRITE_ONLY"):
        decode(refix_icrc(b))
    # An IMM opcode without an ImmDt.
    b = bytearray(encode(data_pkt(Opcode.WRITE_LAST)))
    b[0] = Opcode.WRITE_LAST_IMM
    with pytest.raises(WireError, match="WRITE_LAST_IMM needs an immediate"):
        decode(refix_icrc(b))


def test_payload_length_mismatch_messages() -> None:
    b = bytearray(encode(data_pkt(length=10)))
    struct.pack_into(">I", b, 24, 11)
    with pytest.raises(WireError, match=r"^WRITE_ONLY: payload is 10 bytes but RETH DMA length"):
        decode(refix_icrc(b))
    struct.pack_into(">I", b, 24, 9001)
    with pytest.raises(WireError, match="DMA length 9001 exceeds 9000"):
        decode(refix_icrc(b))
    # A trimmed packet must not carry payload bytes.
    b = bytearray(encode(data_pkt(length=10)))
    b[29] |= 0x04
    with pytest.raises(WireError, match="trimmed packet carries 10 payload bytes"):
        decode(refix_icrc(b))


def test_flag_and_reserved_errors() -> None:
    base = encode(data_pkt())
    cases = [
        (29, 0x08, "TRIMMED_LASTHOP set without TRIMMED"),
        (29, 0x20, "reserved bits 5-7"),
        (30, 0x01, "MDH bytes 30-31: reserved"),
        (29, 0x02, "AckReq bit 0 disagrees with MDH ACK_REQ flag 1"),
        (8, 0x80, "AckReq bit 1 disagrees"),
        (8, 0x01, "BTH byte 8: reserved"),
        (1, 0x40, "BTH byte 1"),
        (2, 0x01, "P_Key"),
        (4, 0x01, "BTH byte 4: reserved"),
        (11, 0x01, "BTH bytes 9-11: PSN"),
    ]
    for offset, bit, message in cases:
        b = bytearray(base)
        b[offset] ^= bit
        with pytest.raises(WireError, match=message):
            decode(refix_icrc(b))
    sack = encode(SackPacket(1, 1, 1, 1, 0))
    for offset, bit, message in [
        (13, 0x02, "SACK header byte 1"),
        (14, 0x80, "penalty 0x80 has bit 7 set"),
        (15, 0x01, "SACK header byte 3"),
        (8, 0x80, "SACK BTH byte 8: AckReq"),
    ]:
        b = bytearray(sack)
        b[offset] ^= bit
        with pytest.raises(WireError, match=message):
            decode(refix_icrc(b))
    b = bytearray(encode(ProbeReplyPacket(1, 1, 1, 1)))
    b[13] = 1
    with pytest.raises(WireError, match="PROBE_REPLY header byte 1"):
        decode(refix_icrc(b))


# ----------------------------------------------------------------------------- frames


@pytest.mark.parametrize(
    "pkt", [data_pkt(length=1001), data_pkt(length=1000), *control_packets()], ids=repr
)
def test_frame_round_trip(pkt: AnyPacket) -> None:
    f = encode_frame(pkt, SRC, DST, PATH)
    assert len(f) == pkt.size
    q, info = decode_frame(f)
    assert q == pkt
    assert info == FrameInfo(SRC, PATH, SRC, DST, pkt.ev & 0xFFFFF, udp_sport(pkt.ev), False)
    assert 49152 <= info.sport <= 65535


def test_udp_source_port_spreads_the_whole_ev() -> None:
    # A plain ECMP switch hashes the 5-tuple: the port must change with the EV,
    # low bits included (generated EVs differ mostly there).
    import random

    assert udp_sport(0x12345678) == 0xE7FC  # the documented hash, pinned
    rng = random.Random(3)
    for ev in [rng.getrandbits(32) for _ in range(200)] + list(range(64)):
        assert udp_sport(ev) >> 14 == 0b11  # RoCE's 49152..65535
    assert len({udp_sport(ev) for ev in range(256)}) >= 250  # small EVs spread
    flips = sum(
        udp_sport(ev) == udp_sport(ev ^ 1 << b)
        for ev in (rng.getrandbits(32) for _ in range(500))
        for b in range(32)
    )
    assert flips < 16  # any one EV bit moves the port (almost always)


def test_frame_header_fields() -> None:
    p = data_pkt(ev=0xFEDCBA98)
    f = encode_frame(p, ipaddress.IPv6Address(SRC), ipaddress.IPv6Address(DST))
    assert f[0] >> 4 == 6 and f[40] >> 4 == 6
    word = int.from_bytes(f[0:4], "big")
    assert (word >> 20) & 0xFF == 0b10  # DSCP 0, ECT(0)
    assert word & 0xFFFFF == 0xCBA98
    assert f[4:8] == (len(f) - 40).to_bytes(2, "big") + bytes([41, 64])
    assert f[44:48] == (len(f) - 80).to_bytes(2, "big") + bytes([17, 64])
    assert int.from_bytes(f[24:40], "big") == DST  # path None: outer dst = dst
    assert f[8:24] == f[48:64] == SRC.to_bytes(16, "big")
    sport, dport, ulen, csum = struct.unpack_from(">HHHH", f, 80)
    assert sport == udp_sport(0xFEDCBA98) == 0xE659 and dport == 4791 and ulen == len(f) - 80
    assert csum == naive_udp_checksum(SRC, DST, f[80:86] + b"\0\0" + f[88:])
    assert f[88:] == encode(p)


@pytest.mark.parametrize("length", range(0, 24))
def test_udp_checksum_matches_reference(length: int) -> None:
    p = data_pkt(length=length, payload=bytes([0xFF] * length), ev=length * 77777)
    f = encode_frame(p, SRC + length, DST)
    csum = struct.unpack_from(">H", f, 86)[0]
    assert csum == naive_udp_checksum(SRC + length, DST, f[80:86] + b"\0\0" + f[88:])
    decode_frame(f)


def test_ecn_round_trip() -> None:
    p = data_pkt()
    p.ecn = True
    f = encode_frame(p, SRC, DST, PATH)
    assert (f[1] >> 4) & 3 == 0b11 and (f[41] >> 4) & 3 == 0b11
    q, info = decode_frame(f)
    assert q.ecn and info.ecn and q == p
    assert decode(f[88:]).ecn is False
    # CE set by a switch on the outer header only.
    p.ecn = False
    b = bytearray(encode_frame(p, SRC, DST, PATH))
    b[1] |= 0x30
    q, info = decode_frame(b)
    assert q.ecn and info.ecn


def test_frame_checksum_error() -> None:
    f = bytearray(encode_frame(data_pkt(length=100), SRC, DST, PATH))
    f[150] ^= 0x01  # a payload bit
    with pytest.raises(WireError, match=r"^UDP bytes 86-87: checksum 0x[0-9a-f]{4} is wrong"):
        decode_frame(f)
    f[150] ^= 0x01
    f[60] ^= 0x80  # inner source address is in the pseudo-header
    with pytest.raises(WireError, match="checksum"):
        decode_frame(f)
    f[60] ^= 0x80
    f[20] ^= 0x80  # outer addresses are not
    decode_frame(f)
    f[86:88] = b"\0\0"
    with pytest.raises(WireError, match="checksum is 0"):
        decode_frame(f)


def test_frame_header_errors() -> None:
    base = encode_frame(NackPacket(1, 1, NackReason.TRIMMED, 1, 1), SRC, DST, PATH)
    cases = [
        (0, 0x50, "outer IPv6 byte 0: version 5"),
        (6, 17, "outer IPv6 byte 6: next header 17"),
        (5, 1, "outer IPv6 bytes 4-5"),
        (40, 0x40, "inner IPv6 byte 40: version 4"),
        (46, 6, "inner IPv6 byte 46: next header 6"),
        (45, 1, "inner IPv6 bytes 44-45"),
        (85, 1, "UDP bytes 84-85"),
        (83, 2, "UDP bytes 82-83: destination port"),
    ]
    for offset, value, message in cases:
        b = bytearray(base)
        b[offset] = value if offset in (0, 6, 40, 46) else b[offset] ^ value
        with pytest.raises(WireError, match=message):
            decode_frame(refix_frame(b))
    with pytest.raises(WireError, match="truncated: a frame"):
        decode_frame(base[:87])
    b = bytearray(base)
    b[102] = 0x09  # reason
    with pytest.raises(WireError, match="not a NackReason"):
        decode_frame(refix_frame(b))


def test_encode_frame_rejects_bad_addresses() -> None:
    p = data_pkt()
    with pytest.raises(WireError, match="src"):
        encode_frame(p, -1, DST)
    with pytest.raises(WireError, match="dst"):
        encode_frame(p, SRC, 1 << 128)
    with wrong_type_raises("openmrc.wire.codec", WireError, "path"):
        encode_frame(p, SRC, DST, "fcbb::1")  # type: ignore[arg-type]
    with wrong_type_raises("openmrc.wire.codec", WireError, "src"):
        encode_frame(p, ipaddress.IPv4Address("10.0.0.1"), DST)  # type: ignore[arg-type]


def test_wire_error_is_value_error() -> None:
    assert issubclass(WireError, ValueError)
    assert codec.MAX_DATA_PAYLOAD == 9000


def test_sack_ports_down_bitmap_sits_in_header_bytes_10_11() -> None:
    # bytes 10-11 of the SACK header (were reserved) carry the port/plane-state bitmap
    wire = encode(SackPacket(1, 1, 10, 10, 0, ports_down=0x8005))
    assert wire[12 + 10 : 12 + 12] == bytes([0x80, 0x05])
    pkt = decode(wire)
    assert isinstance(pkt, SackPacket) and pkt.ports_down == 0x8005
    pkt = decode(encode(SackPacket(1, 1, 10, 10, 0)))
    assert isinstance(pkt, SackPacket) and pkt.ports_down == 0
    with pytest.raises(WireError, match="SackPacket.ports_down"):
        encode(SackPacket(1, 1, 10, 10, 0, ports_down=1 << 16))
