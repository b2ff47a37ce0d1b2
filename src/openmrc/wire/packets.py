"""The packet model shared by the transport core, the simulator and the codec.

The transport core speaks in these objects.  The simulator moves them between
nodes as they are (no encoding, for speed); the real network encodes them to
bytes with :mod:`openmrc.wire.codec`.  They are plain ``__slots__`` classes, not
dataclasses, because a simulation creates hundreds of millions of them.

Fields that the *network* sets (``ecn``, ``trimmed``, ``trimmed_lasthop``) live
here too, because the simulator's switches set them on the same object and the
receiver reads them.  ``route`` and ``meta`` belong to whoever drives the core
(the simulator or the socket driver); the core never reads them.

When compiled by mypyc, every packet class allows interpreted subclasses: the
baselines subclass them (``baselines/roce.py``), and only such a class can be
created bare, as ``copy.copy`` (:func:`copy_packet`) does.  They are also
``acyclic``: the collector does not track them (a simulation makes and frees
one per packet, and a tracked object costs a link into and out of the
collector's list).  A packet's fields hold ints, bytes and the driver's
``route``/``meta``, which must not refer back to the packet (a cycle through a
packet would never be collected).

PSNs and message sequence numbers are unbounded Python integers inside the core;
the wire carries their low 32 bits and the codec's caller unwraps them against
its own state (:func:`unwrap32`).
"""

from __future__ import annotations

import copy
from enum import IntEnum
from typing import Any, ClassVar, Final

from mypy_extensions import mypyc_attr

#: UDP destination port of RoCEv2, which MRC keeps so RoCE tooling sees the packets.
ROCE_UDP_PORT: Final = 4791

#: Bytes on the wire below the MRC payload of a data packet, used for sizing in
#: the simulator: outer IPv6 (40) + inner IPv6 (40) + UDP (8) + BTH (12) +
#: RETH (16) + MRC data header (24) + ICRC (4).  WRITE_IMM adds 4 for ImmDt.
#: Ethernet framing (14 + 4 FCS + 20 preamble/IFG) is added by the simulator's links.
DATA_HEADER_BYTES: Final = 144
IMM_BYTES: Final = 4
#: Wire size of each control packet (IPv6 x2 + UDP + BTH + MRC header + ICRC).
SACK_BYTES: Final = 40 + 40 + 8 + 12 + 44 + 4
NACK_BYTES: Final = 40 + 40 + 8 + 12 + 24 + 4
PROBE_BYTES: Final = 40 + 40 + 8 + 12 + 20 + 4


class Opcode(IntEnum):
    """IBTA BTH opcodes used by MRC (RC transport), plus openmrc's control opcodes.

    Control packets use the manufacturer-specific range 0xC0-0xFF of the BTH
    opcode space, so RoCE dissectors still parse the BTH.
    """

    WRITE_FIRST = 0x06
    WRITE_MIDDLE = 0x07
    WRITE_LAST = 0x08
    WRITE_LAST_IMM = 0x09
    WRITE_ONLY = 0x0A
    WRITE_ONLY_IMM = 0x0B
    SACK = 0xC0
    NACK = 0xC1
    PROBE = 0xC2
    PROBE_REPLY = 0xC3


DATA_OPCODES: Final = frozenset(
    {
        Opcode.WRITE_FIRST,
        Opcode.WRITE_MIDDLE,
        Opcode.WRITE_LAST,
        Opcode.WRITE_LAST_IMM,
        Opcode.WRITE_ONLY,
        Opcode.WRITE_ONLY_IMM,
    }
)
#: Opcodes that start a message (carry its first PSN).
FIRST_OPCODES: Final = frozenset({Opcode.WRITE_FIRST, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM})
#: Opcodes that end a message (carry its last PSN).
LAST_OPCODES: Final = frozenset(
    {Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM}
)
#: Opcodes that carry immediate data.
IMM_OPCODES: Final = frozenset({Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM})


class NackReason(IntEnum):
    """Why a receiver refused a packet (codes in the spirit of UET's NACK codes)."""

    TRIMMED = 0x01  # trimmed somewhere in the fabric (congestion, not at the last hop)
    TRIMMED_LASTHOP = 0x02  # trimmed at the last hop (receiver incast, path is fine)
    PSN_OUT_OF_WINDOW = 0x03  # PSN outside [cack, cack + MPR*128)
    NO_RESOURCE = 0x04  # WRITE_IMM with no posted receive to consume
    REMOTE_ACCESS_ERROR = 0x05  # bad rkey, missing REMOTE_WRITE, or out of bounds
    INVALID_REQUEST = 0x06  # malformed for this QP (bad opcode sequence, length)
    QP_NOT_READY = 0x07  # destination QP unknown or not in RTR/RTS


class _SizeMemo:
    """The wire size of the data packet made last, as an object, for the next one.

    Compiled, a packet keeps ``size`` as an object (see :class:`Packet`): each data
    packet boxed its own int, an allocation per packet, and every hop then reads that
    int, one more cache line per hop, and a cold one at thousands of hosts.  Packets
    of one size (a QP's full-MTU packets) share the memo's object instead, while the
    sizes repeat.
    """

    __slots__ = ("obj", "value")

    def __init__(self) -> None:
        self.value = -1
        self.obj: object = -1


_SIZE_MEMO: Final = _SizeMemo()


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # see the module doc
class Packet:
    """Fields common to every MRC packet.

    ``ev`` is the entropy value (the path) the packet travels on; for SACK, NACK
    and probe replies it is the *reflected* EV of the packet that caused them,
    and ``path_ev`` the EV they travel on (for a SACK or NACK the sender's
    reverse EV set, see :mod:`openmrc.transport.reverse`; a probe reply goes
    back on the probed EV; the flow label, UDP source port and route follow
    it).  ``path_ev`` is ``ev`` unless set otherwise; a decoded
    packet has ``path_ev == ev`` (the receiver has no use for it).
    ``dqpn`` is the destination queue pair number.  ``ecn`` is the IP ECN
    Congestion Experienced mark, set by the fabric.  ``size`` is the packet's
    size on the wire in bytes.  ``route`` (the outer SRv6 destination, or any
    driver-specific route object) and ``meta`` are for the driver only.
    """

    __slots__ = ("dqpn", "ecn", "ev", "meta", "path_ev", "route", "size")

    def __init__(self, dqpn: int, ev: int, size: Any) -> None:
        self.dqpn = dqpn
        self.ev = ev
        self.path_ev = ev
        # (Any, so that compiled it is kept as an object: the simulator's ports read
        # it on every link the packet crosses, and an int field is boxed per read)
        self.size: Any = size
        self.ecn = False
        self.route: object = None
        self.meta: object = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._repr_fields())
        return f"{type(self).__name__}({fields})"

    def _repr_fields(self) -> tuple[str, ...]:
        return ("dqpn", "ev")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(
            getattr(self, name) == getattr(other, name)
            for name in packet_fields(type(self))
            if name not in ("route", "meta", "size", "path_ev")
        )


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # see the module doc
class DataPacket(Packet):
    """One packet of an RDMA WRITE (or WRITE WITH IMMEDIATE) message.

    Every data packet carries its own final placement: ``va`` (remote virtual
    address of this packet's first byte), ``rkey`` and ``length`` (this packet's
    payload length), so it can be written to memory on arrival in any order.
    ``payload`` is the bytes, or ``None`` for a virtual payload (simulation).
    ``msn`` is the message sequence number; ``imm`` the immediate (on the
    message's last packet only).  ``wimm`` marks every packet of a WRITE_IMM
    message, so the receiver can reserve a posted receive on the first arrival.
    ``ts`` is the sender's transmit timestamp in picoseconds (echoed in ACKs).
    A trimmed packet has ``trimmed`` set and no payload; ``trimmed_lasthop``
    says the trim happened at the last hop.
    """

    __slots__ = (
        "ack_req",
        "imm",
        "length",
        "msn",
        "opcode",
        "payload",
        "psn",
        "retransmit",
        "rkey",
        "trimmed",
        "trimmed_lasthop",
        "ts",
        "va",
        "wimm",
    )

    def __init__(
        self,
        dqpn: int,
        ev: int,
        opcode: Opcode,
        psn: int,
        msn: int,
        va: int,
        rkey: int,
        length: int,
        payload: bytes | None = None,
        imm: int | None = None,
        ts: int = 0,
        retransmit: bool = False,
        ack_req: bool = False,
        wimm: bool = False,
    ) -> None:
        size = DATA_HEADER_BYTES + length + (IMM_BYTES if imm is not None else 0)
        memo = _SIZE_MEMO
        if memo.value != size:
            memo.value = size
            memo.obj = size
        Packet.__init__(self, dqpn, ev, memo.obj)
        self.opcode = opcode
        self.psn = psn
        self.msn = msn
        self.va = va
        self.rkey = rkey
        self.length = length
        self.payload = payload
        self.imm = imm
        self.ts = ts
        self.retransmit = retransmit
        self.ack_req = ack_req
        self.wimm = wimm
        self.trimmed = False
        self.trimmed_lasthop = False

    def trim(self, lasthop: bool) -> None:
        """Cut the payload off, as a trimming switch does; the header goes on."""
        self.trimmed = True
        self.trimmed_lasthop = lasthop
        self.payload = None
        self.size = DATA_HEADER_BYTES + (IMM_BYTES if self.imm is not None else 0)

    def _repr_fields(self) -> tuple[str, ...]:
        return ("dqpn", "ev", "opcode", "psn", "msn", "va", "rkey", "length", "trimmed")


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # see the module doc
class SackPacket(Packet):
    """Cumulative ACK plus selective ACK, with the receiver's congestion state.

    ``cack``: every PSN below it has been received (the next expected PSN).
    ``sack_base``: PSN of bit 0 of ``bitmap`` (bit i set = PSN sack_base+i
    received); ``sack_base >= cack``.  ``ev`` reflects the EV of the packet that
    triggered this ACK and ``ecn_seen`` says whether that packet was CE-marked.
    ``rcvd_bytes`` counts payload bytes received on the QP (for rate
    estimation), ``ooo_count`` the packets held above ``cack``, ``ts_echo`` the
    transmit timestamp of the triggering packet, ``penalty`` a 7-bit receiver
    window penalty for NSCC.  ``ports_down`` is the sender's port/plane-state
    bitmap: bit p set = its NIC port in plane p is down (MRC's link-state
    bitmap in SACKs; the peer then stops using that plane's EVs).
    """

    __slots__ = (
        "bitmap",
        "cack",
        "ecn_seen",
        "ooo_count",
        "penalty",
        "ports_down",
        "rcvd_bytes",
        "sack_base",
        "ts_echo",
    )

    opcode: ClassVar[Opcode] = Opcode.SACK

    def __init__(
        self,
        dqpn: int,
        ev: int,
        cack: int,
        sack_base: int,
        bitmap: int,
        ecn_seen: bool = False,
        rcvd_bytes: int = 0,
        ooo_count: int = 0,
        ts_echo: int = 0,
        penalty: int = 0,
        ports_down: int = 0,
    ) -> None:
        Packet.__init__(self, dqpn, ev, SACK_BYTES)
        self.cack = cack
        self.sack_base = sack_base
        self.bitmap = bitmap
        self.ecn_seen = ecn_seen
        self.rcvd_bytes = rcvd_bytes
        self.ooo_count = ooo_count
        self.ts_echo = ts_echo
        self.penalty = penalty
        self.ports_down = ports_down

    def _repr_fields(self) -> tuple[str, ...]:
        return ("dqpn", "ev", "cack", "sack_base", "bitmap", "ecn_seen", "ports_down")


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # see the module doc
class NackPacket(Packet):
    """Negative acknowledgement of one PSN, with the reason and the reflected EV."""

    __slots__ = ("cack", "psn", "reason", "ts_echo")

    opcode: ClassVar[Opcode] = Opcode.NACK

    def __init__(
        self, dqpn: int, ev: int, reason: NackReason, psn: int, cack: int, ts_echo: int = 0
    ) -> None:
        Packet.__init__(self, dqpn, ev, NACK_BYTES)
        self.reason = reason
        self.psn = psn
        self.cack = cack
        self.ts_echo = ts_echo

    def _repr_fields(self) -> tuple[str, ...]:
        return ("dqpn", "ev", "reason", "psn", "cack")


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # see the module doc
class ProbePacket(Packet):
    """A probe: consumes no PSN.

    An *EV probe* (``reliability=False``) tests one path and is answered by a
    :class:`ProbeReplyPacket` on the same EV.  A *reliability probe*
    (``reliability=True``) asks the receiver for a fresh SACK, so a sender that
    has heard nothing for a while learns what arrived (tail-loss detection).
    """

    __slots__ = ("reliability", "seq", "ts")

    opcode: ClassVar[Opcode] = Opcode.PROBE

    def __init__(self, dqpn: int, ev: int, seq: int, ts: int, reliability: bool = False) -> None:
        Packet.__init__(self, dqpn, ev, PROBE_BYTES)
        self.seq = seq
        self.ts = ts
        self.reliability = reliability

    def _repr_fields(self) -> tuple[str, ...]:
        return ("dqpn", "ev", "seq", "reliability")


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # see the module doc
class ProbeReplyPacket(Packet):
    """The answer to an EV probe, on the probe's EV, echoing its seq and timestamp."""

    __slots__ = ("seq", "ts_echo")

    opcode: ClassVar[Opcode] = Opcode.PROBE_REPLY

    def __init__(self, dqpn: int, ev: int, seq: int, ts_echo: int) -> None:
        Packet.__init__(self, dqpn, ev, PROBE_BYTES)
        self.seq = seq
        self.ts_echo = ts_echo

    def _repr_fields(self) -> tuple[str, ...]:
        return ("dqpn", "ev", "seq")


def _own_fields(klass: type) -> tuple[str, ...]:
    """The fields ``klass`` itself adds: its ``__slots__``, or for a class compiled by
    mypyc (which keeps no ``__slots__``) the attributes it lists in
    ``__mypyc_attrs__`` beyond its bases' (sorted, as the slots are written)."""
    own = klass.__dict__.get("__slots__")
    if own is not None:
        return (own,) if isinstance(own, str) else tuple(own)
    attrs = klass.__dict__.get("__mypyc_attrs__", ())
    inherited = {a for base in klass.__mro__[1:] for a in getattr(base, "__mypyc_attrs__", ())}
    return tuple(sorted(a for a in attrs if a not in inherited))


def packet_fields(cls: type) -> list[str]:
    """Every field of packet class ``cls``, its bases' first (compiled or not).

    An interpreted subclass (the baselines' packets) adds its own ``__slots__``.
    """
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        names.extend(_own_fields(klass))
    return names


def copy_packet(pkt: Packet) -> Packet:
    """A field-by-field copy of ``pkt`` (a duplicate on the wire)."""
    clone = copy.copy(pkt)
    for name in packet_fields(type(pkt)):  # compiled, copy.copy misses a subclass's slots
        setattr(clone, name, getattr(pkt, name))
    return clone


AnyPacket = DataPacket | SackPacket | NackPacket | ProbePacket | ProbeReplyPacket

_MASK32: Final = 0xFFFFFFFF


def unwrap32(value: int, reference: int) -> int:
    """Return the integer congruent to ``value`` mod 2**32 that is nearest ``reference``.

    The wire carries the low 32 bits of PSNs and MSNs; the receiver of a packet
    recovers the full number against its own state (serial-number arithmetic).
    """
    diff = (value - reference) & _MASK32
    if diff >= 0x80000000:
        diff -= 0x100000000
    return reference + diff
