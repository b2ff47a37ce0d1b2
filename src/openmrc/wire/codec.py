"""Encode and decode MRC packets to and from bytes.

Two levels:

* :func:`encode` / :func:`decode` deal with the *UDP payload* (what a UDP
  socket sends): ``BTH | header(s) | [payload] | ICRC``.
* :func:`encode_frame` / :func:`decode_frame` deal with the full IP frame a
  raw socket, a pcap file or a packet-level tool sees:
  ``outer IPv6 | inner IPv6 | UDP | UDP payload``.

The byte-by-byte layout is documented in ``docs/wire-format.md``; the
constants and structs below follow it exactly.  All multi-byte fields are
big-endian.

Every malformed input to a decoder, and every value that does not fit its
field when encoding, raises :class:`WireError` (a :class:`ValueError`) whose
message says what is wrong and where.  Decoders never raise anything else on
any bytes.

The codec runs once per packet in the real-network driver, so it uses
precompiled :class:`struct.Struct` objects and does range checking by letting
``struct`` reject out-of-range values first; only on failure does it walk the
fields to name the culprit.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from openmrc.wire.packets import (
    DATA_OPCODES,
    IMM_OPCODES,
    ROCE_UDP_PORT,
    AnyPacket,
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    Packet,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)

__all__ = [
    "BTH_BYTES",
    "ICRC_BYTES",
    "IPV6_BYTES",
    "MAX_DATA_PAYLOAD",
    "MDH_BYTES",
    "MRC_VERSION",
    "NACK_HEADER_BYTES",
    "PROBE_HEADER_BYTES",
    "RETH_BYTES",
    "SACK_HEADER_BYTES",
    "UDP_BYTES",
    "FrameInfo",
    "WireError",
    "decode",
    "decode_frame",
    "encode",
    "encode_frame",
    "udp_sport",
]


class WireError(ValueError):
    """Bytes that are not a valid MRC packet, or a packet that cannot be encoded.

    The one error type of the codec: the message says what is wrong and where.
    """


# --------------------------------------------------------------------------- sizes

#: Version carried in every MRC header.
MRC_VERSION: Final = 1
#: Largest data payload a packet may carry (a jumbo frame's worth).
MAX_DATA_PAYLOAD: Final = 9000

BTH_BYTES: Final = 12
RETH_BYTES: Final = 16
IMMDT_BYTES: Final = 4
MDH_BYTES = 24
SACK_HEADER_BYTES = 44
NACK_HEADER_BYTES = 24
PROBE_HEADER_BYTES = 20
ICRC_BYTES: Final = 4
IPV6_BYTES: Final = 40
UDP_BYTES: Final = 8
#: Bytes of the frame in front of the UDP payload: outer IPv6 + inner IPv6 + UDP.
FRAME_HEADER_BYTES: Final = 2 * IPV6_BYTES + UDP_BYTES

#: BTH partition key (the default, full-membership key).
P_KEY: Final = 0xFFFF
#: IPv6 next-header values.
NH_IPV6: Final = 41
NH_UDP: Final = 17
HOP_LIMIT: Final = 64
#: ECN codepoints in the low two bits of the IPv6 traffic class.
ECN_ECT0: Final = 0b10
ECN_CE: Final = 0b11
#: High bits of the UDP source port; the low 14 bits carry a hash of the EV (udp_sport).
SPORT_BASE: Final = 0xC000

# MDH flag bits.
MDH_RETRANSMIT: Final = 0x01
MDH_ACK_REQ: Final = 0x02
MDH_TRIMMED: Final = 0x04
MDH_TRIMMED_LASTHOP: Final = 0x08
MDH_WIMM: Final = 0x10
_MDH_KNOWN: Final = 0x1F
# SACK / probe flag bits.
SACK_ECN_SEEN: Final = 0x01
PROBE_RELIABILITY: Final = 0x01

_M24: Final = 0xFFFFFF
_M32: Final = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_M128: Final = (1 << 128) - 1

# --------------------------------------------------------------------------- structs
# BTH: opcode, SE/M/Pad/TVer, P_Key, (reserved byte + 24-bit dqpn), (AckReq + 24-bit PSN)
_BTH = "BBHII"
# RETH: VA, rkey, DMA length
_RETH = "QII"
# MDH: version, flags, reserved, PSN, EV, MSN, timestamp
_MDH = "BBHIIIQ"

_DATA: Final = struct.Struct(">" + _BTH + _RETH + _MDH)
_DATA_IMM: Final = struct.Struct(">" + _BTH + _RETH + "I" + _MDH)
# SACK: version, flags, penalty, reserved, cack, base offset, ports down, bitmap, EV,
# rcvd_bytes, ooo_count, ts_echo
_SACK: Final = struct.Struct(">" + _BTH + "BBBBIHHQIQIQ")
# NACK: version, flags, reason, reserved, psn, EV, cack, ts_echo
_NACK: Final = struct.Struct(">" + _BTH + "BBBBIIIQ")
# PROBE / PROBE_REPLY: version, flags, reserved, seq, EV, ts
_PROBE: Final = struct.Struct(">" + _BTH + "BBHIIQ")
_ICRC: Final = struct.Struct(">I")
_BTH_S = struct.Struct(">" + _BTH)
# Outer IPv6 + inner IPv6 + UDP, all at once.
_FRAME: Final = struct.Struct(">IHBB16s16sIHBB16s16sHHHH")

assert _BTH_S.size == BTH_BYTES
assert _DATA.size == BTH_BYTES + RETH_BYTES + MDH_BYTES
assert _DATA_IMM.size == _DATA.size + IMMDT_BYTES
assert _SACK.size == BTH_BYTES + SACK_HEADER_BYTES
assert _NACK.size == BTH_BYTES + NACK_HEADER_BYTES
assert _PROBE.size == BTH_BYTES + PROBE_HEADER_BYTES
assert _FRAME.size == FRAME_HEADER_BYTES

_DATA_MIN: Final = _DATA.size + ICRC_BYTES
_DATA_IMM_MIN: Final = _DATA_IMM.size + ICRC_BYTES
_SACK_LEN: Final = _SACK.size + ICRC_BYTES
_NACK_LEN: Final = _NACK.size + ICRC_BYTES
_PROBE_LEN: Final = _PROBE.size + ICRC_BYTES

_NACK_REASONS: Final = {int(r): r for r in NackReason}
_OPCODES: Final = {int(o): o for o in Opcode}
_ZERO_CACHE: dict[int, bytes] = {}


def _zeros(n: int) -> bytes:
    """``n`` zero bytes, cached (virtual payloads come in few sizes)."""
    z = _ZERO_CACHE.get(n)
    if z is None:
        z = bytes(n)
        if len(_ZERO_CACHE) < 64:
            _ZERO_CACHE[n] = z
    return z


# --------------------------------------------------------------------------- encode


def _check(name: str, value: object, bits: int) -> None:
    """Raise WireError unless ``value`` is an int in 0 .. 2**bits - 1."""
    if not isinstance(value, int):
        raise WireError(f"{name}: {value!r} is not an integer")
    if not 0 <= value < 1 << bits:
        raise WireError(f"{name}: {value} does not fit an unsigned {bits}-bit field")


def _check_seq(name: str, value: object) -> None:
    """Sequence numbers (PSN, MSN, cack, seq) are sent as their low 32 bits."""
    if not isinstance(value, int):
        raise WireError(f"{name}: {value!r} is not an integer")
    if value < 0:
        raise WireError(f"{name}: {value} is negative")


def _explain(pkt: Packet) -> NoReturn:
    """Find the field of ``pkt`` that does not fit and raise WireError naming it.

    Called only after ``struct`` has refused to pack, so the fast path stays fast.
    """
    kind = type(pkt).__name__
    _check(f"{kind}.dqpn", pkt.dqpn, 24)
    _check(f"{kind}.ev", pkt.ev, 32)
    if isinstance(pkt, DataPacket):
        _check_seq("DataPacket.psn", pkt.psn)
        _check_seq("DataPacket.msn", pkt.msn)
        _check("DataPacket.va", pkt.va, 64)
        _check("DataPacket.rkey", pkt.rkey, 32)
        _check("DataPacket.length", pkt.length, 32)
        _check("DataPacket.ts", pkt.ts, 64)
        if pkt.imm is not None:
            _check("DataPacket.imm", pkt.imm, 32)
        if pkt.payload is not None and not isinstance(pkt.payload, bytes | bytearray | memoryview):
            raise WireError(f"DataPacket.payload: {type(pkt.payload).__name__} is not bytes")
    elif isinstance(pkt, SackPacket):
        _check_seq("SackPacket.cack", pkt.cack)
        _check("SackPacket.bitmap", pkt.bitmap, 64)
        _check("SackPacket.penalty", pkt.penalty, 7)
        _check("SackPacket.rcvd_bytes", pkt.rcvd_bytes, 64)
        _check("SackPacket.ooo_count", pkt.ooo_count, 32)
        _check("SackPacket.ts_echo", pkt.ts_echo, 64)
        _check("SackPacket.ports_down", pkt.ports_down, 16)
    elif isinstance(pkt, NackPacket):
        _check_seq("NackPacket.psn", pkt.psn)
        _check_seq("NackPacket.cack", pkt.cack)
        _check("NackPacket.ts_echo", pkt.ts_echo, 64)
    elif isinstance(pkt, ProbePacket | ProbeReplyPacket):
        _check_seq(f"{kind}.seq", pkt.seq)
        _check(f"{kind}.ts", pkt.ts if isinstance(pkt, ProbePacket) else pkt.ts_echo, 64)
    raise WireError(f"{kind}: a field does not fit its wire format: {pkt!r}")


def _encode_data(pkt: DataPacket) -> bytes:
    opcode = pkt.opcode
    if opcode not in DATA_OPCODES:
        raise WireError(f"DataPacket.opcode: {opcode!r} is not a WRITE opcode")
    imm = pkt.imm
    has_imm = opcode in IMM_OPCODES
    if (imm is not None) != has_imm:
        raise WireError(
            f"DataPacket.imm: opcode {Opcode(opcode).name} "
            + ("needs an immediate" if has_imm else f"carries no immediate, got imm={imm!r}")
        )
    length = pkt.length
    if not isinstance(length, int) or not 0 <= length <= MAX_DATA_PAYLOAD:
        raise WireError(f"DataPacket.length: {length!r} is outside 0..{MAX_DATA_PAYLOAD}")
    psn = pkt.psn
    msn = pkt.msn
    if psn < 0 or msn < 0:
        _explain(pkt)
    flags = 0
    if pkt.retransmit:
        flags |= MDH_RETRANSMIT
    ack_req = pkt.ack_req
    if ack_req:
        flags |= MDH_ACK_REQ
    if pkt.wimm:
        flags |= MDH_WIMM
    trimmed = pkt.trimmed
    if trimmed:
        flags |= MDH_TRIMMED
        if pkt.trimmed_lasthop:
            flags |= MDH_TRIMMED_LASTHOP
        payload: bytes | bytearray | memoryview = b""
    else:
        if pkt.trimmed_lasthop:
            raise WireError("DataPacket.trimmed_lasthop is set on a packet that is not trimmed")
        payload = pkt.payload if pkt.payload is not None else _zeros(length)
        if len(payload) != length:
            raise WireError(f"DataPacket.payload: {len(payload)} bytes but length says {length}")
    bth_psn = (0x80000000 if ack_req else 0) | (psn & _M24)
    try:
        if has_imm:
            header = _DATA_IMM.pack(
                opcode, 0, P_KEY, pkt.dqpn, bth_psn,
                pkt.va, pkt.rkey, length, imm,
                MRC_VERSION, flags, 0, psn & _M32, pkt.ev, msn & _M32, pkt.ts,
            )  # fmt: skip
        else:
            header = _DATA.pack(
                opcode, 0, P_KEY, pkt.dqpn, bth_psn,
                pkt.va, pkt.rkey, length,
                MRC_VERSION, flags, 0, psn & _M32, pkt.ev, msn & _M32, pkt.ts,
            )  # fmt: skip
    except (struct.error, TypeError):
        _explain(pkt)
    if pkt.dqpn > _M24:
        _explain(pkt)
    crc = zlib.crc32(payload, zlib.crc32(header))
    return b"".join((header, payload, _ICRC.pack(crc)))


def _pack_control(pkt: AnyPacket, layout: struct.Struct, *fields: Any) -> bytes:
    """Pack a control packet's BTH and header with ``layout``, then append the ICRC.

    A field that does not fit raises :class:`WireError` naming it.
    """
    try:
        body = layout.pack(*fields)
    except (struct.error, TypeError):
        _explain(pkt)
    if pkt.dqpn > _M24:
        _explain(pkt)
    return body + _ICRC.pack(zlib.crc32(body))


def _encode_sack(pkt: SackPacket) -> bytes:
    cack = pkt.cack
    try:
        offset = pkt.sack_base - cack
    except TypeError:
        raise WireError(f"SackPacket.sack_base: {pkt.sack_base!r} is not an integer") from None
    if not 0 <= offset <= 0xFFFF:
        raise WireError(
            f"SackPacket.sack_base: sack_base - cack = {offset} does not fit the u16 offset"
        )
    if cack < 0 or not 0 <= pkt.penalty <= 0x7F:
        _explain(pkt)
    return _pack_control(
        pkt, _SACK,
        Opcode.SACK, 0, P_KEY, pkt.dqpn, cack & _M24,
        MRC_VERSION, SACK_ECN_SEEN if pkt.ecn_seen else 0, pkt.penalty, 0,
        cack & _M32, offset, pkt.ports_down, pkt.bitmap, pkt.ev,
        pkt.rcvd_bytes, pkt.ooo_count, pkt.ts_echo,
    )  # fmt: skip


def _encode_nack(pkt: NackPacket) -> bytes:
    reason = pkt.reason
    if reason not in _NACK_REASONS:
        raise WireError(f"NackPacket.reason: {reason!r} is not a NackReason")
    psn = pkt.psn
    cack = pkt.cack
    if psn < 0 or cack < 0:
        _explain(pkt)
    return _pack_control(
        pkt, _NACK,
        Opcode.NACK, 0, P_KEY, pkt.dqpn, psn & _M24,
        MRC_VERSION, 0, reason, 0, psn & _M32, pkt.ev, cack & _M32, pkt.ts_echo,
    )  # fmt: skip


def _encode_probe(
    pkt: ProbePacket | ProbeReplyPacket, opcode: Opcode, flags: int, ts: int
) -> bytes:
    seq = pkt.seq
    if seq < 0:
        _explain(pkt)
    return _pack_control(
        pkt, _PROBE,
        opcode, 0, P_KEY, pkt.dqpn, seq & _M24, MRC_VERSION, flags, 0, seq & _M32, pkt.ev, ts,
    )  # fmt: skip


def encode(pkt: Packet) -> bytes:
    """Encode ``pkt`` as the UDP payload ``BTH | header(s) | [payload] | ICRC``.

    PSN, MSN, cack and probe seq are sent as their low 32 bits (the core uses
    unbounded integers); every other field must fit its wire field.  A
    ``DataPacket`` with ``payload=None`` (virtual payload) is sent with
    ``length`` zero bytes; a trimmed one without payload bytes.  Raises
    :class:`WireError` for anything that cannot be encoded.
    """
    try:
        if type(pkt) is DataPacket:
            return _encode_data(pkt)
        if type(pkt) is SackPacket:
            return _encode_sack(pkt)
        if type(pkt) is NackPacket:
            return _encode_nack(pkt)
        if type(pkt) is ProbePacket:
            return _encode_probe(
                pkt, Opcode.PROBE, PROBE_RELIABILITY if pkt.reliability else 0, pkt.ts
            )
        if type(pkt) is ProbeReplyPacket:
            return _encode_probe(pkt, Opcode.PROBE_REPLY, 0, pkt.ts_echo)
    except TypeError:
        # A comparison such as ``psn < 0`` on a non-integer field.
        _explain(pkt)
    raise WireError(f"cannot encode {type(pkt).__name__}: not an MRC packet type")


# --------------------------------------------------------------------------- decode

Buffer = bytes | bytearray | memoryview


def _as_bytes_view(data: Buffer) -> Buffer:
    """Make sure indexing ``data`` yields unsigned bytes."""
    if isinstance(data, memoryview) and (
        data.format != "B" or data.ndim != 1 or not data.c_contiguous
    ):
        return data.tobytes()
    return data


def _truncated(what: str, need: int, got: int) -> WireError:
    return WireError(f"truncated: {what} needs {need} bytes, got {got}")


def _check_icrc(data: Buffer, n: int, what: str) -> None:
    end = n - ICRC_BYTES
    (icrc,) = _ICRC.unpack_from(data, end)
    crc = zlib.crc32(memoryview(data)[:end])
    if icrc != crc:
        raise WireError(
            f"{what} ICRC at byte {end}: 0x{icrc:08x} does not match computed 0x{crc:08x}"
        )


def _check_bth(what: str, b1: int, pkey: int, qpn_word: int, psn_word: int, psn_low: int) -> None:
    """Validate the fixed BTH fields of a packet (AckReq checked by the caller)."""
    if b1:
        raise WireError(f"{what} BTH byte 1: 0x{b1:02x} must be 0 (SE, M, PadCnt, TVer)")
    if pkey != P_KEY:
        raise WireError(f"{what} BTH bytes 2-3: P_Key 0x{pkey:04x} must be 0xffff")
    if qpn_word > _M24:
        raise WireError(f"{what} BTH byte 4: reserved 0x{qpn_word >> 24:02x} must be 0")
    if psn_word & 0x7F000000:
        raise WireError(
            f"{what} BTH byte 8: reserved bits 0x{(psn_word >> 24) & 0x7F:02x} must be 0"
        )
    if psn_word & _M24 != psn_low & _M24:
        raise WireError(
            f"{what} BTH bytes 9-11: PSN 0x{psn_word & _M24:06x} does not match the "
            f"MRC header's 0x{psn_low:08x}"
        )


def _decode_data(data: Buffer, n: int, opcode: Opcode) -> DataPacket:
    has_imm = opcode in IMM_OPCODES
    what = opcode.name
    if has_imm:
        if n < _DATA_IMM_MIN:
            raise _truncated(what, _DATA_IMM_MIN, n)
        _check_icrc(data, n, what)
        (
            _, b1, pkey, dqpn, bth_psn, va, rkey, length, imm,
            version, flags, rsvd, psn, ev, msn, ts,
        ) = _DATA_IMM.unpack_from(data)  # fmt: skip
        off = _DATA_IMM.size
        mdh = BTH_BYTES + RETH_BYTES + IMMDT_BYTES
    else:
        if n < _DATA_MIN:
            raise _truncated(what, _DATA_MIN, n)
        _check_icrc(data, n, what)
        (
            _, b1, pkey, dqpn, bth_psn, va, rkey, length,
            version, flags, rsvd, psn, ev, msn, ts,
        ) = _DATA.unpack_from(data)  # fmt: skip
        imm = None
        off = _DATA.size
        mdh = BTH_BYTES + RETH_BYTES
    if version != MRC_VERSION:
        # Say so when the likely cause is an ImmDt that the opcode does not match.
        hint = ""
        if has_imm and data[mdh - IMMDT_BYTES] == MRC_VERSION:
            hint = f"; opcode {what} needs an immediate (ImmDt) but none seems present"
        elif not has_imm and n >= _DATA_IMM_MIN and data[mdh + IMMDT_BYTES] == MRC_VERSION:
            hint = f"; an immediate (ImmDt) seems present but opcode {what} carries none"
        raise WireError(f"{what} MDH byte {mdh}: version {version} is not {MRC_VERSION}{hint}")
    _check_bth(what, b1, pkey, dqpn, bth_psn, psn)
    if flags & ~_MDH_KNOWN:
        raise WireError(f"{what} MDH byte {mdh + 1}: flags 0x{flags:02x} has reserved bits 5-7 set")
    if rsvd:
        raise WireError(f"{what} MDH bytes {mdh + 2}-{mdh + 3}: reserved 0x{rsvd:04x} must be 0")
    ack_req = bool(flags & MDH_ACK_REQ)
    if bool(bth_psn & 0x80000000) != ack_req:
        raise WireError(
            f"{what} BTH byte 8: AckReq bit {bth_psn >> 31} disagrees with MDH ACK_REQ "
            f"flag {int(ack_req)}"
        )
    trimmed = bool(flags & MDH_TRIMMED)
    lasthop = bool(flags & MDH_TRIMMED_LASTHOP)
    if lasthop and not trimmed:
        raise WireError(f"{what} MDH byte {mdh + 1}: TRIMMED_LASTHOP set without TRIMMED")
    if length > MAX_DATA_PAYLOAD:
        raise WireError(f"{what} RETH bytes 24-27: DMA length {length} exceeds {MAX_DATA_PAYLOAD}")
    got = n - off - ICRC_BYTES
    if trimmed:
        if got:
            raise WireError(f"{what}: trimmed packet carries {got} payload bytes, expected 0")
        payload = None
    else:
        if got != length:
            raise WireError(f"{what}: payload is {got} bytes but RETH DMA length says {length}")
        payload = bytes(data[off : off + length])
    pkt = DataPacket(
        dqpn, ev, opcode, psn, msn, va, rkey, length, payload, imm, ts,
        bool(flags & MDH_RETRANSMIT), ack_req, bool(flags & MDH_WIMM),
    )  # fmt: skip
    if trimmed:
        pkt.trim(lasthop)
    return pkt


def _decode_sack(data: Buffer, n: int) -> SackPacket:
    if n != _SACK_LEN:
        if n < _SACK_LEN:
            raise _truncated("SACK", _SACK_LEN, n)
        raise WireError(f"SACK: {n} bytes, expected exactly {_SACK_LEN}")
    _check_icrc(data, n, "SACK")
    (
        _, b1, pkey, dqpn, bth_psn,
        version, flags, penalty, rsvd, cack, offset, ports_down, bitmap, ev,
        rcvd_bytes, ooo_count, ts_echo,
    ) = _SACK.unpack_from(data)  # fmt: skip
    if bth_psn & 0x80000000:
        raise WireError("SACK BTH byte 8: AckReq must be 0")
    if version != MRC_VERSION:
        raise WireError(f"SACK header byte 0: version {version} is not {MRC_VERSION}")
    _check_bth("SACK", b1, pkey, dqpn, bth_psn, cack)
    if flags & ~SACK_ECN_SEEN:
        raise WireError(f"SACK header byte 1: flags 0x{flags:02x} has reserved bits set")
    if penalty & 0x80:
        raise WireError(f"SACK header byte 2: penalty 0x{penalty:02x} has bit 7 set")
    if rsvd:
        raise WireError(f"SACK header byte 3: reserved 0x{rsvd:02x} must be 0")
    return SackPacket(
        dqpn, ev, cack, cack + offset, bitmap, bool(flags & SACK_ECN_SEEN),
        rcvd_bytes, ooo_count, ts_echo, penalty, ports_down,
    )  # fmt: skip


def _decode_nack(data: Buffer, n: int) -> NackPacket:
    if n != _NACK_LEN:
        if n < _NACK_LEN:
            raise _truncated("NACK", _NACK_LEN, n)
        raise WireError(f"NACK: {n} bytes, expected exactly {_NACK_LEN}")
    _check_icrc(data, n, "NACK")
    (
        _, b1, pkey, dqpn, bth_psn, version, flags, reason, rsvd, psn, ev, cack, ts_echo,
    ) = _NACK.unpack_from(data)  # fmt: skip
    if bth_psn & 0x80000000:
        raise WireError("NACK BTH byte 8: AckReq must be 0")
    if version != MRC_VERSION:
        raise WireError(f"NACK header byte 0: version {version} is not {MRC_VERSION}")
    _check_bth("NACK", b1, pkey, dqpn, bth_psn, psn)
    if flags:
        raise WireError(f"NACK header byte 1: flags 0x{flags:02x} must be 0")
    nack_reason = _NACK_REASONS.get(reason)
    if nack_reason is None:
        raise WireError(f"NACK header byte 2: reason 0x{reason:02x} is not a NackReason")
    if rsvd:
        raise WireError(f"NACK header byte 3: reserved 0x{rsvd:02x} must be 0")
    return NackPacket(dqpn, ev, nack_reason, psn, cack, ts_echo)


def _decode_probe(data: Buffer, n: int, opcode: Opcode) -> ProbePacket | ProbeReplyPacket:
    what = opcode.name
    if n != _PROBE_LEN:
        if n < _PROBE_LEN:
            raise _truncated(what, _PROBE_LEN, n)
        raise WireError(f"{what}: {n} bytes, expected exactly {_PROBE_LEN}")
    _check_icrc(data, n, what)
    (_, b1, pkey, dqpn, bth_psn, version, flags, rsvd, seq, ev, ts) = _PROBE.unpack_from(data)
    if bth_psn & 0x80000000:
        raise WireError(f"{what} BTH byte 8: AckReq must be 0")
    if version != MRC_VERSION:
        raise WireError(f"{what} header byte 0: version {version} is not {MRC_VERSION}")
    _check_bth(what, b1, pkey, dqpn, bth_psn, seq)
    if rsvd:
        raise WireError(f"{what} header bytes 2-3: reserved 0x{rsvd:04x} must be 0")
    if opcode == Opcode.PROBE:
        if flags & ~PROBE_RELIABILITY:
            raise WireError(f"PROBE header byte 1: flags 0x{flags:02x} has reserved bits set")
        return ProbePacket(dqpn, ev, seq, ts, bool(flags & PROBE_RELIABILITY))
    if flags:
        raise WireError(f"PROBE_REPLY header byte 1: flags 0x{flags:02x} must be 0")
    return ProbeReplyPacket(dqpn, ev, seq, ts)


def decode(data: Buffer) -> AnyPacket:
    """Decode a UDP payload produced by :func:`encode` into a packet object.

    PSN, MSN, cack and seq come back as the raw 32-bit wire values (unwrap them
    with :func:`openmrc.wire.packets.unwrap32`); ``SackPacket.sack_base`` is
    ``cack + offset`` and so may exceed 2**32 - 1 (``unwrap32`` handles that).
    A virtual payload comes back as zero bytes; a trimmed packet with
    ``payload=None``.  ``ecn`` is left False (the IP header carries it; see
    :func:`decode_frame`).  Raises :class:`WireError`, and nothing else, on
    malformed bytes.
    """
    data = _as_bytes_view(data)
    n = len(data)
    if n < BTH_BYTES + ICRC_BYTES:
        raise _truncated("an MRC packet", BTH_BYTES + ICRC_BYTES, n)
    opcode = _OPCODES.get(data[0])
    if opcode is None:
        raise WireError(f"BTH byte 0: opcode 0x{data[0]:02x} is not an MRC opcode")
    if opcode in DATA_OPCODES:
        return _decode_data(data, n, opcode)
    if opcode is Opcode.SACK:
        return _decode_sack(data, n)
    if opcode is Opcode.NACK:
        return _decode_nack(data, n)
    return _decode_probe(data, n, opcode)


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """What :func:`decode_frame` found in the IP and UDP headers around a packet.

    Addresses are 128-bit integers (:func:`openmrc.wire.srv6.to_ipv6` turns
    them into :class:`ipaddress.IPv6Address`).  ``outer_dst`` is the SRv6 uSID
    path address as it arrived (switches shift it on the way).  ``ecn`` is
    True if either IPv6 header carries CE.
    """

    outer_src: int
    outer_dst: int
    inner_src: int
    inner_dst: int
    flow_label: int
    sport: int
    ecn: bool


def udp_sport(ev: int) -> int:
    """UDP source port for ``ev``: 0xC000 | a 14-bit hash of the whole 32-bit EV.

    Every EV bit moves the port, so a switch hashing the plain 5-tuple sprays
    a QP's packets as its EVs change (generated EVs differ mostly in their low
    bits).  The hash (a 32-bit multiply-xorshift mix, documented in
    docs/wire-format.md) is fixed so that any implementation computes the same
    port; the port stays in RoCE's 49152..65535 range.
    """
    h = (ev * 0x9E3779B1) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x85EBCA77) & 0xFFFFFFFF
    h ^= h >> 13
    return SPORT_BASE | (h & 0x3FFF)


def _addr16(name: str, addr: ipaddress.IPv6Address | int) -> tuple[bytes, int]:
    """An address as 16 bytes and as an int; WireError if it is not an IPv6 address."""
    if isinstance(addr, ipaddress.IPv6Address):
        return addr.packed, int(addr)
    if isinstance(addr, int) and not isinstance(addr, bool) and 0 <= addr <= _M128:
        return addr.to_bytes(16, "big"), addr
    raise WireError(f"{name}: {addr!r} is not an IPv6 address or a 128-bit integer")


def _udp_checksum(src: int, dst: int, sport: int, udp_len: int, payload: Buffer) -> int:
    """RFC 8200 UDP checksum (never 0) over the pseudo-header, UDP header and payload.

    Uses the fact that 2**16 == 1 (mod 0xFFFF): the ones'-complement sum of a
    run of 16-bit words is the big-endian integer they spell, mod 0xFFFF.
    """
    body = int.from_bytes(payload, "big")
    if len(payload) & 1:
        body <<= 8
    total = src % 0xFFFF + dst % 0xFFFF + 2 * udp_len + NH_UDP + sport + ROCE_UDP_PORT + body
    return 0xFFFF - total % 0xFFFF


def encode_frame(
    pkt: Packet,
    src: ipaddress.IPv6Address | int,
    dst: ipaddress.IPv6Address | int,
    path: ipaddress.IPv6Address | int | None = None,
) -> bytes:
    """Encode ``pkt`` as a full IPv6-in-IPv6 / UDP frame (no link-layer header).

    ``src`` and ``dst`` are the sender's and receiver's NIC addresses (the
    inner header); ``path`` is the SRv6 uSID address the outer header is sent
    to (``None``: ``dst``, still encapsulated).  The EV goes in the flow label
    (low 20 bits) and the UDP source port (high 12 bits); ``pkt.ecn`` selects CE
    over ECT(0).
    """
    src_b, src_i = _addr16("src", src)
    dst_b, dst_i = _addr16("dst", dst)
    path_b = dst_b if path is None else _addr16("path", path)[0]
    body = encode(pkt)
    ev = pkt.path_ev  # the path it travels on (a control packet's reverse EV)
    udp_len = UDP_BYTES + len(body)
    if udp_len + IPV6_BYTES > 0xFFFF:
        raise WireError(f"frame: {udp_len + IPV6_BYTES} bytes do not fit an IPv6 payload length")
    word0 = 0x60000000 | ((ECN_CE if pkt.ecn else ECN_ECT0) << 20) | (ev & 0xFFFFF)
    sport = udp_sport(ev)
    csum = _udp_checksum(src_i, dst_i, sport, udp_len, body)
    header = _FRAME.pack(
        word0, udp_len + IPV6_BYTES, NH_IPV6, HOP_LIMIT, src_b, path_b,
        word0, udp_len, NH_UDP, HOP_LIMIT, src_b, dst_b,
        sport, ROCE_UDP_PORT, udp_len, csum,
    )  # fmt: skip
    return header + body


def decode_frame(data: Buffer) -> tuple[AnyPacket, FrameInfo]:
    """Decode a frame from :func:`encode_frame`; return the packet and its :class:`FrameInfo`.

    Checks both IPv6 versions, next headers and payload lengths, the UDP
    length, destination port 4791 and checksum, then :func:`decode` s the UDP
    payload.  Sets ``pkt.ecn`` if either IPv6 header is marked CE.  Raises
    :class:`WireError`, and nothing else, on malformed bytes.
    """
    data = _as_bytes_view(data)
    n = len(data)
    if n < FRAME_HEADER_BYTES:
        raise _truncated("a frame (IPv6 + IPv6 + UDP)", FRAME_HEADER_BYTES, n)
    (
        w0, plen0, nh0, _hl0, osrc, odst,
        w1, plen1, nh1, _hl1, isrc, idst,
        sport, dport, ulen, csum,
    ) = _FRAME.unpack_from(data)  # fmt: skip
    if w0 >> 28 != 6:
        raise WireError(f"outer IPv6 byte 0: version {w0 >> 28} is not 6")
    if plen0 != n - IPV6_BYTES:
        raise WireError(
            f"outer IPv6 bytes 4-5: payload length {plen0}, but {n - IPV6_BYTES} bytes follow"
        )
    if nh0 != NH_IPV6:
        raise WireError(f"outer IPv6 byte 6: next header {nh0} is not {NH_IPV6} (IPv6)")
    if w1 >> 28 != 6:
        raise WireError(f"inner IPv6 byte 40: version {w1 >> 28} is not 6")
    if plen1 != n - 2 * IPV6_BYTES:
        raise WireError(
            f"inner IPv6 bytes 44-45: payload length {plen1}, but {n - 2 * IPV6_BYTES} bytes follow"
        )
    if nh1 != NH_UDP:
        raise WireError(f"inner IPv6 byte 46: next header {nh1} is not {NH_UDP} (UDP)")
    if ulen != n - 2 * IPV6_BYTES:
        raise WireError(
            f"UDP bytes 84-85: length {ulen}, but the UDP datagram is {n - 2 * IPV6_BYTES} bytes"
        )
    if dport != ROCE_UDP_PORT:
        raise WireError(f"UDP bytes 82-83: destination port {dport} is not {ROCE_UDP_PORT}")
    if csum == 0:
        raise WireError("UDP bytes 86-87: checksum is 0, which IPv6 forbids")
    body = memoryview(data)[FRAME_HEADER_BYTES:]
    isrc_i = int.from_bytes(isrc, "big")
    idst_i = int.from_bytes(idst, "big")
    total = (
        isrc_i % 0xFFFF + idst_i % 0xFFFF + 2 * ulen + NH_UDP + sport + dport + csum
        + (int.from_bytes(body, "big") << (8 if len(body) & 1 else 0))
    )  # fmt: skip
    if total % 0xFFFF:
        raise WireError(
            f"UDP bytes 86-87: checksum 0x{csum:04x} is wrong (expected "
            f"0x{_udp_checksum(isrc_i, idst_i, sport, ulen, body):04x})"
        )
    pkt = decode(body)
    ecn = (w0 >> 20) & 3 == ECN_CE or (w1 >> 20) & 3 == ECN_CE
    pkt.ecn = ecn
    info = FrameInfo(
        int.from_bytes(osrc, "big"), int.from_bytes(odst, "big"), isrc_i, idst_i,
        w1 & 0xFFFFF, sport, ecn,
    )  # fmt: skip
    return pkt, info
