"""The device context: one per NIC (host), owning keys, QPs and the event queue.

It is the sans-IO endpoint a driver talks to, aioquic style:

* ``receive_packet(pkt, now)`` / ``receive_datagram(data, now)``: input from
  the network, demultiplexed to QPs by destination QPN; never raises on
  network input (bad datagrams are dropped and counted in :attr:`stats`);
* ``poll_packet(now)`` / ``datagrams_to_send(now)``: output, round-robin over
  the QPs that have something to send, each packet with its EV;
* ``get_timer()`` / ``handle_timer(now)``: the earliest deadline, and running it;
* ``next_event()``: EV state changes and QP state changes, for the controller.

Randomness comes only from the ``random.Random`` passed in.
"""

from __future__ import annotations

import heapq
import random
from typing import Any, Final, NamedTuple

from ..wire.packets import (
    DataPacket,
    NackPacket,
    Packet,
    ProbeReplyPacket,
    SackPacket,
    unwrap32,
)
from .errors import InvalidArgument, InvalidState
from .paths import PortEvent
from .qp import QueuePair
from .qpbase import ContextBase, QPBase
from .state import QPState
from .verbs import (
    Access,
    CompletionQueue,
    MemoryRegion,
    PDBase,
    QPCap,
)

_ADDR_BASE: Final = 0x7F00_0000_0000

# C statics when compiled (a module global is a dict lookup per use)
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop
_heapify: Final = heapq.heapify


class Datagram(NamedTuple):
    """One encoded packet to send: its bytes, the EV it travels on, and where it goes."""

    data: bytes
    ev: int
    peer: Any  # the driver's peer handle (Any, not object: mypyc cannot name object here)
    qpn: int


class ProtectionDomain(PDBase):
    """Groups memory regions and queue pairs: a QP may only touch its own PD's MRs.

    A plain class, not a dataclass: a compiled dataclass needs its field types
    at import time.  Made by :meth:`Context.alloc_pd`.
    """

    def __init__(self, context: Context, handle: int) -> None:
        super().__init__(handle)
        self.context = context

    def __repr__(self) -> str:
        return f"ProtectionDomain(handle={self.handle}, mrs={len(self.mrs)})"

    def reg_mr(
        self,
        length: int,
        access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE,
        buffer: bytearray | memoryview | None = None,
        addr: int | None = None,
    ) -> MemoryRegion:
        """Register a memory region of ``length`` bytes.

        With ``buffer`` the region holds real bytes (its length must match);
        without, it is virtual.  ``addr`` defaults to a fresh address in the
        context's address space.
        """
        return self.context.register_mr(self, length, access, buffer, addr)

    def dereg_mr(self, mr: MemoryRegion) -> None:
        """Deregister a region; packets naming its rkey are refused afterwards."""
        self.context.deregister_mr(self, mr)

    def create_qp(
        self,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue | None = None,
        cap: QPCap | None = None,
    ) -> QueuePair:
        """Create a queue pair in RESET."""
        return self.context.create_qp_for(
            self,
            send_cq,
            recv_cq if recv_cq is not None else send_cq,
            cap if cap is not None else QPCap(),
        )


#: The QPN of a context's first QP; the next ones count up in creation order and
#: are never reused (0 is left for the clustermapper's self-probes).
FIRST_QPN: Final = 0x100
#: QPNs are 24 bits (the wire's field): a timer-heap entry keeps one in its low bits.
QPN_BITS: Final = 24
QPN_MASK: Final = (1 << QPN_BITS) - 1


class Context(ContextBase):
    """A device context (an MRC NIC's verbs context)."""

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    polled_qp: QPBase | None
    qps: dict[int, QueuePair]
    _rx_packets: int
    _by_qpn: list[QueuePair | None]
    _drops: dict[str, int]
    _timer_heap: list[int]
    _deadlines: int
    _next_addr: int
    name: str
    _next_qpn: int
    _next_pd: int

    def __init__(self, rng: random.Random | None = None, name: str = "") -> None:
        if rng is not None and not isinstance(rng, random.Random):
            raise InvalidArgument(f"rng: must be a random.Random, got {type(rng).__name__}")
        # rng, the key tables, the ready and timer-dirty sets, events, ports_down and
        # controller: ContextBase's (what the QPs use). Only the QPs in timer_dirty
        # are re-read by get_timer, so a wake-up costs O(log QPs).
        super().__init__(rng if rng is not None else random.Random(0))
        self.name = name
        self.qps: dict[int, QueuePair] = {}
        #: the same QPs by ``qpn - FIRST_QPN`` (None once destroyed): QPNs are given
        #: out in order, so a list finds a packet's QP without boxing its QPN for a
        #: dict look-up (kept in step with ``qps`` by create_qp_for and destroy_qp).
        self._by_qpn: list[QueuePair | None] = []
        self._next_qpn = FIRST_QPN
        self._next_pd = 1
        self._next_addr = _ADDR_BASE
        #: a heap of the QPs' deadlines as last read, each entry one int:
        #: ``deadline << QPN_BITS | qpn`` (the QPN breaks ties; an int, not a tuple:
        #: nothing allocated for the garbage collector and no tuple comparison per
        #: push).  An entry whose deadline is no longer its QP's
        #: :attr:`~.qpbase.QPBase.ctx_deadline` is stale (lazy deletion) and is
        #: dropped when it reaches the top; ``_deadlines`` counts the QPs with one.
        self._timer_heap: list[int] = []
        self._deadlines = 0
        #: the drop counters (see :attr:`stats`); packets delivered are counted
        #: in an int (once per packet: no dict update on the hot path).
        self._drops = {
            "rx_malformed": 0,
            "rx_unknown_qp": 0,
            "rx_not_ready": 0,
            "rx_wrong_peer": 0,
        }
        self._rx_packets = 0
        #: the QP of the packet :meth:`poll` returned last (None before the first).
        self.polled_qp: QPBase | None = None

    @property
    def stats(self) -> dict[str, int]:
        """Input counters (a snapshot): packets delivered to a QP (``rx_packets``) and
        those dropped, by reason (``rx_malformed``, ``rx_unknown_qp``,
        ``rx_not_ready``, ``rx_wrong_peer``)."""
        return {**self._drops, "rx_packets": self._rx_packets}

    # -- verbs ----------------------------------------------------------------------
    def alloc_pd(self) -> ProtectionDomain:
        """Allocate a protection domain."""
        pd = ProtectionDomain(self, self._next_pd)
        self._next_pd += 1
        return pd

    def create_cq(self, depth: int = 4096) -> CompletionQueue:
        """Create a completion queue."""
        return CompletionQueue(depth)

    def _new_key(self, avoid: int = 0) -> int:
        """A fresh non-zero 32-bit key, used by no region (as lkey or rkey) and not ``avoid``."""
        while True:
            key = self.rng.getrandbits(32)
            if key and key != avoid and key not in self.lkeys and key not in self.rkeys_by_key:
                return key

    def register_mr(
        self,
        pd: ProtectionDomain,
        length: int,
        access: Access,
        buffer: bytearray | memoryview | None,
        addr: int | None,
    ) -> MemoryRegion:
        """Register a region in ``pd`` with fresh keys (``ProtectionDomain.reg_mr`` calls this)."""
        if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= 1 << 48:
            raise InvalidArgument(f"length: must be an int in 1..2^48, got {length!r}")
        if not isinstance(access, Access):
            raise InvalidArgument(f"access: must be Access flags, got {access!r}")
        if buffer is not None:
            if not isinstance(buffer, bytearray | memoryview):
                raise InvalidArgument(
                    f"buffer: must be a bytearray or writable memoryview, got {type(buffer).__name__}"
                )
            if isinstance(buffer, memoryview) and buffer.readonly:
                raise InvalidArgument("buffer: the memoryview is read-only")
            if memoryview(buffer).nbytes != length:
                raise InvalidArgument(
                    f"buffer: holds {memoryview(buffer).nbytes} bytes, length says {length}"
                )
        if addr is None:
            addr = self._next_addr
            self._next_addr += (length + 0xFFFF) & ~0xFFF
        elif not isinstance(addr, int) or not 0 <= addr <= (1 << 64) - length:
            raise InvalidArgument(f"addr: must be an int with addr + length <= 2^64, got {addr!r}")
        lkey = self._new_key()
        rkey = self._new_key(avoid=lkey)
        mr = MemoryRegion(pd, addr, length, access, lkey, rkey, buffer)
        self.lkeys[lkey] = mr
        self.rkeys_by_key[rkey] = mr
        self.mr_epoch += 1
        pd.mrs.append(mr)
        return mr

    def deregister_mr(self, pd: ProtectionDomain, mr: MemoryRegion) -> None:
        """Forget ``mr`` (``ProtectionDomain.dereg_mr`` calls this)."""
        if mr.pd is not pd or self.lkeys.get(mr.lkey) is not mr:
            raise InvalidArgument("mr: not a registered memory region of this PD")
        del self.lkeys[mr.lkey]
        del self.rkeys_by_key[mr.rkey]
        self.mr_epoch += 1
        pd.mrs.remove(mr)

    def create_qp_for(
        self, pd: ProtectionDomain, send_cq: CompletionQueue, recv_cq: CompletionQueue, cap: QPCap
    ) -> QueuePair:
        """A new QP in ``pd`` with a fresh QPN (``ProtectionDomain.create_qp`` calls this)."""
        if pd.context is not self:
            raise InvalidArgument("pd: belongs to another context")
        if not isinstance(send_cq, CompletionQueue) or not isinstance(recv_cq, CompletionQueue):
            raise InvalidArgument("send_cq/recv_cq: must be CompletionQueues")
        qpn = self._next_qpn
        if qpn > QPN_MASK:
            raise InvalidState("create_qp: QP numbers exhausted")
        self._next_qpn += 1
        qp = QueuePair(self, pd, qpn, send_cq, recv_cq, cap)
        self.qps[qpn] = qp
        self._by_qpn.append(qp)
        return qp

    def destroy_qp(self, qp: QueuePair) -> None:
        """Remove a QP; packets for its number are dropped afterwards."""
        if self.qps.get(qp.qpn) is not qp:
            raise InvalidArgument("qp: not a QP of this context")
        del self.qps[qp.qpn]
        self._by_qpn[qp.qpn - FIRST_QPN] = None
        self.ready.discard(qp)
        self.control_ready.discard(qp)
        qp.mark_timer()

    # -- controller -------------------------------------------------------------------
    def deny_ev(self, qp: QueuePair, ev: int, now: int = 0) -> None:
        """Administratively take ``ev`` out of ``qp``'s rotation (DENIED)."""
        if qp.paths is None:
            raise InvalidState("deny_ev: the QP has no EV set before RTR")
        qp.paths.deny(ev, now)

    def allow_ev(self, qp: QueuePair, ev: int, now: int = 0) -> None:
        """Return a denied ``ev`` to ``qp``'s rotation."""
        if qp.paths is None:
            raise InvalidState("allow_ev: the QP has no EV set before RTR")
        qp.paths.allow(ev, now)

    def set_port_state(self, plane: int, up: bool, now: int = 0) -> None:
        """Port status: this NIC's plane-``plane`` port went down or came up.

        Every QP maps that plane's EVs out (or back) at once, and every SACK
        sent from now on carries the ports-down bitmap so peers do the same.
        """
        if not isinstance(plane, int) or not 0 <= plane < 16:
            raise InvalidArgument(f"plane: must be 0..15, got {plane!r}")
        mask = self.ports_down & ~(1 << plane) if up else self.ports_down | (1 << plane)
        if mask == self.ports_down:
            return
        self.ports_down = mask
        self.events.append(PortEvent(now, plane, up))
        for qp in self.qps.values():
            if qp.paths is not None:
                qp.paths.set_ports_down(local=mask)
            if qp.has_output():
                self.ready.add(qp)  # it may have been blocked on that plane

    def next_event(self) -> object | None:
        """The oldest EV or QP event not yet read, or None."""
        return self.events.popleft() if self.events else None

    # -- sans-IO ----------------------------------------------------------------------
    def cache_objects(self) -> list[object]:
        """The lists every packet in or out reads besides the context: the QP table
        an arrival is looked up in (by QPN), the QPs whose deadlines changed and
        the deadline heap (for the simulator's cache hints, ``SimHost._set_hints``)."""
        return [self._by_qpn, self.timer_dirty, self._timer_heap]

    def receive_packet(self, pkt: Packet, now: int, peer: object = None) -> None:
        """Deliver a packet object to its QP (simulator path).

        ``peer`` (optional) is the driver's name for the sender; when given and
        the QP is connected, a packet from anyone else is dropped.
        """
        qp = self._match(pkt, peer)
        if qp is None:
            return
        self._rx_packets += 1
        qp.receive_packet(pkt, now)

    def receive_datagram(
        self,
        data: bytes | bytearray | memoryview,
        now: int,
        *,
        peer: object = None,
        ecn: bool = False,
    ) -> Packet | None:
        """Decode a UDP payload and deliver it; malformed input is dropped and counted.

        Nothing is counted against a QP, and no state changes, before the
        datagram decodes, names a live QP and (when ``peer`` is given) comes
        from that QP's peer.  ``ecn``: the IP header arrived marked CE (a socket
        driver reads the traffic class; the UDP payload cannot say).  Returns the
        packet delivered to a QP, or None if it was dropped.
        """
        from ..wire.codec import WireError, decode

        try:
            pkt = decode(data)
        except WireError:
            self._drops["rx_malformed"] += 1
            return None
        qp = self._match(pkt, peer)
        if qp is None:
            return None
        if ecn:
            pkt.ecn = True
        _unwrap(pkt, qp)
        self._rx_packets += 1
        qp.receive_packet(pkt, now)
        return pkt

    def _match(self, pkt: Packet, peer: object) -> QueuePair | None:
        """The live QP ``pkt`` is for, or None (the drop counted here, by reason)."""
        # (the drop counters read only on a drop: compiled, a local holds a reference,
        # a write to the object's first line, which no accepted packet reads)
        i = pkt.dqpn - FIRST_QPN
        by_qpn = self._by_qpn
        qp = by_qpn[i] if 0 <= i < len(by_qpn) else None
        if qp is None:
            self._drops["rx_unknown_qp"] += 1
            return None
        state = qp.state
        # A QP in ERROR still hears data from its peer, to answer it (so the peer
        # fails fast instead of retrying); everything else not ready is dropped.
        if (
            state is not QPState.RTS
            and state is not QPState.RTR
            and (state is not QPState.ERROR or type(pkt) is not DataPacket)
        ):
            self._drops["rx_not_ready"] += 1
            return None
        if peer is not None and qp.peer is not None and peer != qp.peer:
            self._drops["rx_wrong_peer"] += 1
            return None
        return qp

    def poll_packet(self, now: int, busy: int = 0) -> tuple[QPBase, Packet] | None:
        """The next packet to send from any QP (as :meth:`poll`), with its QP."""
        pkt = self.poll(now, busy)
        if pkt is None:
            return None
        qp = self.polled_qp
        assert qp is not None
        return (qp, pkt)

    def poll(self, now: int, busy: int = 0, now_o: object = None) -> Packet | None:
        """The next packet to send from any QP (round robin); its QP is then
        :attr:`polled_qp` (the simulator's NIC calls this once per packet sent: no
        pair is made for it).

        Control packets (SACKs, NACKs, probes, probe replies) of every QP go
        first, in the order they were queued: a NIC sends its acknowledgements
        ahead of data, as the switches forward them at header priority.  Were
        they served in the QPs' data round robin, a NIC sending to dozens of
        peers would hold each ACK and probe reply behind a packet of every
        other QP (about 5 us at 400 Gb/s with 63 QPs), inflating every RTT
        sample, RACK's horizon and the EV probes' round trips
        (docs/loss-recovery.md).

        ``busy`` is a bitmask of planes whose NIC port cannot take a packet now
        (a multi-port driver passes it so data goes to free ports).  A QP that
        has data only for busy planes stays ready.  ``now_o``: ``now`` as the object
        the driver already holds (the simulator's time), or None: a data packet's send
        time is recorded from it without boxing ``now`` again (compiled).
        """
        control = self.control_ready
        while len(control):
            qp = control.first()  # the oldest
            queue = qp.control
            if len(queue):
                first = queue.popleft()
                if not len(queue):
                    control.pop_first()
                if not qp.timer_marked:
                    qp.timer_marked = True
                    self.timer_dirty.append(qp)
                self.polled_qp = qp
                return first
            control.pop_first()
        ready = self.ready
        blocked: list[QPBase] | None = None
        found: Packet | None = None
        while len(ready):
            qp = ready.pop_first()  # the oldest
            pkt = qp.poll_packet(now, busy, now_o)
            if pkt is not None:
                if qp.has_output():
                    ready.add(qp)  # to the back: round robin
                self.polled_qp = qp
                found = pkt
                break
            if busy and qp.port_blocked():
                if blocked is None:
                    blocked = []
                blocked.append(qp)
        if blocked:
            for qp in blocked:
                ready.add(qp)
        return found

    def datagrams_to_send(self, now: int) -> list[Datagram]:
        """Everything sendable now, encoded (real-network path)."""
        from ..wire.codec import encode

        out: list[Datagram] = []
        while True:
            item = self.poll_packet(now)
            if item is None:
                return out
            qp, pkt = item
            out.append(Datagram(encode(pkt), pkt.path_ev, qp.peer, qp.qpn))

    def _refresh_timers(self) -> None:
        """Re-read the deadlines of the QPs that changed; push the new ones."""
        dirty = self.timer_dirty
        heap = self._timer_heap
        by_qpn = self._by_qpn  # (a live QP is there; a list read boxes no QPN)
        n = len(by_qpn)
        for qp in dirty:
            qp.timer_marked = False
            qpn = qp.qpn
            i = qpn - FIRST_QPN
            t = qp.get_timer() if 0 <= i < n and by_qpn[i] is qp else None
            old = qp.ctx_deadline
            if t is None:
                if old >= 0:
                    qp.ctx_deadline = -1
                    self._deadlines -= 1
            elif old != t:  # (deadlines are >= 0)
                if old < 0:
                    self._deadlines += 1
                qp.ctx_deadline = t
                _heappush(heap, t << QPN_BITS | qpn)
        dirty.clear()
        if len(heap) > 2 * self._deadlines + 64:
            # mostly stale entries: keep the live ones, once each (a sorted list
            # is a heap)
            heap[:] = sorted({k for k in heap if self._live_entry(k)})

    def _live_entry(self, key: int) -> bool:
        """Whether timer-heap entry ``key`` is its QP's current deadline."""
        i = (key & QPN_MASK) - FIRST_QPN
        qp = self._by_qpn[i]
        return qp is not None and qp.ctx_deadline == key >> QPN_BITS

    def get_timer(self) -> int | None:
        """The earliest deadline over all QPs, or None."""
        if self.timer_dirty:
            self._refresh_timers()
        heap = self._timer_heap
        while heap:
            key = heap[0]
            if self._live_entry(key):
                return key >> QPN_BITS
            _heappop(heap)
        return None

    def handle_timer(self, now: int) -> None:
        """Run every QP deadline that has passed, in QPN order."""
        if self.timer_dirty:
            self._refresh_timers()
        heap = self._timer_heap
        due: list[int] = []
        while heap and heap[0] >> QPN_BITS <= now:
            key = _heappop(heap)
            if self._live_entry(key):
                qp = self._by_qpn[(key & QPN_MASK) - FIRST_QPN]
                assert qp is not None
                qp.ctx_deadline = -1  # re-read after it ran (handle_timer marks it dirty)
                self._deadlines -= 1
                due.append(key & QPN_MASK)
        if len(due) > 1:
            due.sort()  # QPN order = creation order: the order the QPs were always run in
        by_qpn = self._by_qpn
        for qpn in due:
            qp = by_qpn[qpn - FIRST_QPN]
            if qp is None:
                continue  # destroyed since
            qt = qp.get_timer()
            if qt is not None and qt <= now:
                qp.handle_timer(now)
            else:
                qp.mark_timer()


def _unwrap(pkt: Packet, qp: QueuePair) -> None:
    """Recover full PSN/MSN values from the wire's 32 bits, against the QP's state."""
    if qp.state is QPState.RESET or qp.state is QPState.INIT:
        return
    kind = type(pkt)
    if kind is DataPacket:
        rsp = qp.responder
        if rsp is None:
            return
        pkt.psn = unwrap32(pkt.psn, rsp.base)  # type: ignore[attr-defined]
        pkt.msn = unwrap32(pkt.msn, rsp.next_msn)  # type: ignore[attr-defined]
    elif kind is SackPacket or kind is NackPacket:
        req = qp.requester
        ref = req.snd_una if req is not None else 0
        cack = unwrap32(pkt.cack, ref)  # type: ignore[attr-defined]
        if kind is SackPacket:
            pkt.sack_base = cack + (pkt.sack_base - pkt.cack)  # type: ignore[attr-defined]
        else:
            pkt.psn = unwrap32(pkt.psn, ref)  # type: ignore[attr-defined]
        pkt.cack = cack  # type: ignore[attr-defined]
    elif kind is ProbeReplyPacket:
        req = qp.requester
        if req is not None:
            pkt.seq = unwrap32(pkt.seq, req.probe_seq)  # type: ignore[attr-defined]
