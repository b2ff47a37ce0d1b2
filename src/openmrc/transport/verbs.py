"""Verbs-style objects: memory regions, completion queues, work requests.

These mirror the RDMA verbs model that MRC keeps: a protection domain owns
registered memory regions (with lkey/rkey, bounds and access flags); work
requests are posted to a queue pair and finish as work completions on a
completion queue.  MRC 1.0 supports only RDMA WRITE and RDMA WRITE WITH
IMMEDIATE; anything else is refused with a clear error.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum, IntFlag
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from .errors import InvalidArgument, ResourceExhausted

if TYPE_CHECKING:
    from collections.abc import Callable


class Access(IntFlag):
    """Memory region access flags (as in verbs)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4


class WROpcode(Enum):
    """Work request opcodes.  Only the two writes exist in MRC 1.0."""

    RDMA_WRITE = "RDMA_WRITE"
    RDMA_WRITE_WITH_IMM = "RDMA_WRITE_WITH_IMM"


class WCOpcode(Enum):
    """What a work completion reports."""

    RDMA_WRITE = "RDMA_WRITE"  # send side: a WRITE or WRITE_IMM finished
    RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"  # receive side: a WRITE_IMM arrived


class WCStatus(Enum):
    """Work completion status codes (the verbs names that apply to MRC)."""

    SUCCESS = "SUCCESS"
    WR_FLUSH_ERR = "WR_FLUSH_ERR"  # flushed because the QP went to ERROR
    RETRY_EXC_ERR = "RETRY_EXC_ERR"  # retries exhausted (timeouts)
    REM_ACCESS_ERR = "REM_ACCESS_ERR"  # bad rkey, access flags or bounds at the responder
    REM_INV_REQ_ERR = "REM_INV_REQ_ERR"  # the responder found the request invalid
    REM_OP_ERR = "REM_OP_ERR"  # the responder QP could not take it (not ready)
    RNR_RETRY_EXC_ERR = "RNR_RETRY_EXC_ERR"  # WRITE_IMM with no posted receive (no RNR retry)
    LOC_PROT_ERR = "LOC_PROT_ERR"  # bad lkey or local bounds (checked at post time)


@dataclass(frozen=True, slots=True)
class WorkCompletion:
    """One completion: which work request, how it ended, and what it carried."""

    wr_id: int
    status: WCStatus
    opcode: WCOpcode
    qp_num: int
    byte_len: int = 0
    imm_data: int | None = None

    @property
    def ok(self) -> bool:
        """True when the work request succeeded."""
        return self.status is WCStatus.SUCCESS


# user-built and checked field by field by the QP: a plain Python class even when
# compiled, so a field of the wrong type reaches that check (InvalidArgument naming it)
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class SGE:
    """Scatter/gather element: a piece of a local memory region."""

    addr: int
    length: int
    lkey: int


# user-built and checked field by field by the QP: a plain Python class even when
# compiled, so a field of the wrong type reaches that check (InvalidArgument naming it)
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class SendWR:
    """A send work request: an RDMA WRITE (optionally with immediate)."""

    wr_id: int
    opcode: WROpcode
    sg_list: tuple[SGE, ...] | list[SGE]
    remote_addr: int
    rkey: int
    imm_data: int | None = None
    signaled: bool = True


# user-built and checked field by field by the QP: a plain Python class even when
# compiled, so a field of the wrong type reaches that check (InvalidArgument naming it)
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class RecvWR:
    """A receive work request, consumed by one incoming WRITE WITH IMMEDIATE."""

    wr_id: int


class CompletionQueue:
    """A bounded queue of work completions, read with :meth:`poll`."""

    def __init__(self, depth: int = 4096) -> None:
        if not isinstance(depth, int) or depth <= 0:
            raise InvalidArgument(f"CompletionQueue depth: must be a positive int, got {depth!r}")
        self.depth = depth
        self._entries: deque[WorkCompletion] = deque()
        #: set when more completions arrived than the queue holds (a CQ overrun).
        self.overrun = False
        #: called (no arguments) after each completion is added: a completion
        #: channel, so a driver with many CQs learns which ones to poll.
        self.on_push: Callable[[], object] | None = None

    def push(self, wc: WorkCompletion) -> None:
        """Add a completion (called by the transport)."""
        if len(self._entries) >= self.depth:
            self.overrun = True
            return
        self._entries.append(wc)
        if self.on_push is not None:
            self.on_push()

    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        """Take up to ``max_entries`` completions, oldest first."""
        if not isinstance(max_entries, int) or max_entries <= 0:
            raise InvalidArgument(f"poll max_entries: must be a positive int, got {max_entries!r}")
        out: list[WorkCompletion] = []
        entries = self._entries
        while entries and len(out) < max_entries:
            out.append(entries.popleft())
        return out

    def __len__(self) -> int:
        return len(self._entries)


class MemoryRegion:
    """A registered memory region.

    ``buffer`` holds the bytes; ``None`` makes a *virtual* region (sizes only,
    for fast simulation).  ``addr`` is the region's virtual address as the
    remote side sees it, ``lkey`` the key for local use in SGEs, ``rkey`` the
    key a remote peer puts in each packet.
    """

    __slots__ = ("access", "addr", "buffer", "length", "lkey", "pd", "remote_write", "rkey", "view")

    def __init__(
        self,
        pd: PDBase,
        addr: int,
        length: int,
        access: Access,
        lkey: int,
        rkey: int,
        buffer: bytearray | memoryview | None,
    ) -> None:
        self.pd = pd
        self.addr = addr
        self.length = length
        self.access = access
        #: precomputed ``access & REMOTE_WRITE`` (checked for every arriving packet).
        self.remote_write = bool(access & Access.REMOTE_WRITE)
        self.lkey = lkey
        self.rkey = rkey
        self.buffer = buffer
        self.view = memoryview(buffer).cast("B") if buffer is not None else None

    def contains(self, addr: int, length: int) -> bool:
        """True when ``[addr, addr + length)`` lies inside the region."""
        return self.addr <= addr and addr + length <= self.addr + self.length

    def read(self, addr: int, length: int) -> bytes | None:
        """Bytes at ``addr`` (None for a virtual region)."""
        view = self.view
        if view is None:
            return None
        start = addr - self.addr
        return bytes(view[start : start + length])

    def __repr__(self) -> str:
        kind = "virtual" if self.buffer is None else "real"
        return (
            f"MemoryRegion(addr={self.addr:#x}, length={self.length}, lkey={self.lkey:#x}, "
            f"rkey={self.rkey:#x}, access={self.access!r}, {kind})"
        )


@dataclass
class QPCap:
    """Queue pair capacities."""

    max_send_wr: int = 1024
    max_recv_wr: int = 1024

    def validate(self) -> None:
        """Raise :class:`InvalidArgument` naming the bad field."""
        for name in ("max_send_wr", "max_recv_wr"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 1 << 20:
                raise InvalidArgument(
                    f"QPCap.{name}: must be an int in 1..{1 << 20}, got {value!r}"
                )


class PDBase:
    """A protection domain as the objects below the context see it: its handle, its
    regions, and their (de)registration.  The one class is
    :class:`openmrc.transport.context.ProtectionDomain` (the context creates it);
    memory regions and queue pairs hold it by this type, so this module need not
    import the context."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.mrs: list[MemoryRegion] = []

    def reg_mr(
        self,
        length: int,
        access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE,
        buffer: bytearray | memoryview | None = None,
        addr: int | None = None,
    ) -> MemoryRegion:
        """Register a memory region of ``length`` bytes (see ``ProtectionDomain``)."""
        raise NotImplementedError

    def dereg_mr(self, mr: MemoryRegion) -> None:
        """Deregister a region (see ``ProtectionDomain``)."""
        raise NotImplementedError


def check_queue_room(name: str, used: int, limit: int) -> None:
    """Raise :class:`ResourceExhausted` when a work queue is full."""
    if used >= limit:
        raise ResourceExhausted(f"{name}: queue full ({limit} work requests outstanding)")
