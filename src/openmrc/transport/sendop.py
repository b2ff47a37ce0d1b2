"""One posted WRITE on its way through the requester (:class:`SendOp`): its pieces,
its PSN range and its progress, and what each of its packets is (length, opcode).

Its own module so that the requester's per-transmission tables
(:mod:`openmrc.transport.txtable`) can name it without importing the requester.
"""

from __future__ import annotations

from ..wire.packets import Opcode
from .verbs import MemoryRegion


class SendOp:
    """One posted WRITE on its way: its pieces, its PSN range, its progress."""

    __slots__ = (
        "acked",
        "first_psn",
        "imm",
        "is_imm",
        "msn",
        "npkts",
        "remote_addr",
        "rkey",
        "segmented",
        "segs",
        "signaled",
        "total",
        "virtual",
        "wr_id",
    )

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    npkts: int
    first_psn: int
    segmented: int
    total: int
    remote_addr: int
    rkey: int
    msn: int
    acked: int
    is_imm: bool
    virtual: bool
    signaled: bool
    wr_id: int
    segs: list[tuple[MemoryRegion, int, int]]
    imm: int | None

    def __init__(
        self,
        wr_id: int,
        segs: list[tuple[MemoryRegion, int, int]],
        remote_addr: int,
        rkey: int,
        imm: int | None,
        signaled: bool,
        msn: int,
        mtu: int,
    ) -> None:
        self.wr_id = wr_id
        self.segs = segs
        self.total = sum(length for _, _, length in segs)
        self.remote_addr = remote_addr
        self.rkey = rkey
        self.imm = imm
        self.is_imm = imm is not None
        self.signaled = signaled
        self.msn = msn
        self.npkts = max(1, -(-self.total // mtu))
        self.acked = 0
        self.segmented = 0  # packets created so far
        self.first_psn = -1
        self.virtual = all(mr.view is None for mr, _, _ in segs)

    def gather(self, offset: int, length: int) -> bytes | None:
        """The message bytes ``[offset, offset + length)``, read from the local MRs."""
        if self.virtual:
            return None
        out = bytearray()
        pos = 0
        for mr, addr, seg_len in self.segs:
            if length <= 0:
                break
            if offset < pos + seg_len:
                start = max(offset - pos, 0)
                take = min(seg_len - start, length)
                chunk = mr.read(addr + start, take)
                out += chunk if chunk is not None else bytes(take)
                offset += take
                length -= take
            pos += seg_len
        return bytes(out)

    def length_of(self, psn: int, mtu: int) -> int:
        """The payload length of this message's packet ``psn`` (segmented by ``mtu``)."""
        rest = self.total - (psn - self.first_psn) * mtu
        return rest if rest < mtu else mtu

    def is_last(self, psn: int) -> bool:
        """True when ``psn`` is this message's last packet."""
        return psn - self.first_psn == self.npkts - 1

    def opcode_of(self, psn: int) -> Opcode:
        """The opcode of this message's packet ``psn``."""
        idx = psn - self.first_psn
        if self.npkts == 1:
            return Opcode.WRITE_ONLY_IMM if self.is_imm else Opcode.WRITE_ONLY
        if idx == 0:
            return Opcode.WRITE_FIRST
        if idx == self.npkts - 1:
            return Opcode.WRITE_LAST_IMM if self.is_imm else Opcode.WRITE_LAST
        return Opcode.WRITE_MIDDLE
