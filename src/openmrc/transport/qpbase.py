"""The queue pair and the context as the transport's own parts see each other.

:class:`QPBase` is what the two halves of a queue pair (:mod:`.requester`,
:mod:`.responder`) and its context use of it; :class:`ContextBase` is what a
queue pair uses of its context.  :class:`~openmrc.transport.qp.QueuePair` and
:class:`~openmrc.transport.context.Context` are the one implementation of each.
They sit below :mod:`.qp` and :mod:`.context`, so those modules and the halves
import each other in no circle.  Native base classes, not protocols: compiled
with mypyc, the halves still read a QP's attributes at fixed offsets and call its
methods through its vtable, as when they named ``QueuePair`` itself.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, Final, Generic, TypeVar

from ..wire.packets import Packet
from .attrs import QPAttr
from .cc.base import CongestionControl
from .paths import PathSet
from .state import QPState
from .verbs import CompletionQueue, MemoryRegion, PDBase, WCStatus

T = TypeVar("T")


@dataclass(slots=True)
class QPStats:
    """Counters of one QP (both halves)."""

    tx_data_packets: int = 0
    tx_data_bytes: int = 0
    retransmits: int = 0
    spurious_retransmits: int = 0
    timeouts: int = 0
    losses_detected: int = 0
    tail_probes: int = 0
    #: reliability probes sent because the window closed with no ACK requested.
    window_probes: int = 0
    probes_sent: int = 0
    probe_replies: int = 0
    window_stalls: int = 0
    rx_sacks: int = 0
    rx_nacks: int = 0
    fatal_nacks: int = 0
    #: fatal NACKs dropped: not about an outstanding transmission (stale or forged).
    ignored_fatal_nacks: int = 0
    stale_nacks: int = 0
    oow_nacks: int = 0
    #: times a PSN_OUT_OF_WINDOW NACK showed the receiver's window smaller than ours.
    peer_window_shrinks: int = 0
    trims: int = 0
    trims_lasthop: int = 0
    ecn_echoes: int = 0
    rx_data_packets: int = 0
    rx_duplicates: int = 0
    rx_out_of_window: int = 0
    rx_trimmed: int = 0
    rx_access_errors: int = 0
    rx_no_resource: int = 0
    rx_invalid: int = 0
    rx_messages: int = 0
    rx_probes: int = 0
    tx_sacks: int = 0
    tx_nacks: int = 0
    dropped_not_ready: int = 0
    #: NACKs (QP_NOT_READY) sent while in ERROR, answering the peer's data.
    error_nacks: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Fifo(Generic[T]):
    """Items taken oldest first: what a QP queues in order and takes from the front
    (its control packets, the messages still to segment or to complete, the PSNs
    to resend).

    A list and a head index rather than a ``collections.deque``: compiled, a deque's
    ``append``, ``popleft`` and ``[0]`` are methods looked up by name or CPython's
    generic item protocol, and an empty deque holds a block of about 600 bytes;
    here they are native list operations, in the same order, and an empty one is
    an empty list.  The items taken stay in the list until it empties or the taken
    prefix is half of it, so the list holds at most about twice the items waiting.
    The oldest item is also kept in a field of its own, so that :meth:`first` (the
    send path reads a requester's next message once per packet) reads this object
    and not the list and its item array: at thousands of hosts those are two more
    lines out of the cache per packet.
    """

    def __init__(self) -> None:
        #: how many items wait (``len(self)``): compiled, reading it is a native field
        #: read where ``len()`` is a call (the send path asks several times a packet).
        self.count = 0
        #: the oldest item (``_items[_head]``), None when none waits
        self._front: T | None = None
        self._items: list[T] = []
        self._head = 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[T]:
        """The items waiting, oldest first (a snapshot)."""
        return iter(self._items[self._head :])

    def append(self, item: T) -> None:
        """Queue ``item`` last."""
        self._items.append(item)
        if not self.count:
            self._front = item
        self.count += 1

    def appendleft(self, item: T) -> None:
        """Queue ``item`` first."""
        head = self._head
        if head:
            head -= 1
            self._items[head] = item
            self._head = head
        else:
            self._items.insert(0, item)
        self._front = item
        self.count += 1

    def cache_objects(self) -> list[object]:
        """This queue and its item list: what a look at its oldest item reads (for the
        simulator's cache hints, ``SimHost._set_hints``)."""
        return [self, self._items]

    def first(self) -> T:
        """The oldest item, left in place (IndexError when there is none)."""
        item = self._front
        if item is None:
            raise IndexError("first() of an empty Fifo")
        return item

    def popleft(self) -> T:
        """Take the oldest item (IndexError when there is none)."""
        items = self._items
        head = self._head
        item = items[head]
        self.count -= 1
        head += 1
        if head == len(items):
            items.clear()  # empty: start again at the front
            head = 0
            self._front = None
        else:
            self._front = items[head]
            if head >= 16 and 2 * head >= len(items):
                del items[:head]  # the taken prefix is half the list: drop it
                head = 0
        self._head = head
        return item

    def clear(self) -> None:
        """Drop every item."""
        self._items.clear()
        self._head = 0
        self.count = 0
        self._front = None


class QPQueue:
    """An ordered set of QPs, oldest first: the context's ready and control sets.

    What a dict used as an ordered set did (adding a member keeps its place, the
    first is taken from the front, a QP taken and added again goes to the back),
    without hashing a QP or walking a dict's entries per packet: membership is a
    bit in the QP's :attr:`QPBase.queued` (``bit``, one per set), and the members
    sit in a list from ``head`` on (a list, not a deque: compiled, its append and
    item read are native).  The list holds each member once, plus the prefix
    already taken, dropped once it is half the list and 16 long: its length stays
    within twice the number of QPs, or 16.  An emptied list is kept, and the next
    QP added takes the slot before the head.
    """

    def __init__(self, bit: int) -> None:
        #: the bit of :attr:`QPBase.queued` that says a QP is in this set.
        self.bit = bit
        self._items: list[QPBase] = []
        self._head = 0

    def __len__(self) -> int:
        return len(self._items) - self._head

    def __contains__(self, qp: object) -> bool:
        return isinstance(qp, QPBase) and bool(qp.queued & self.bit)

    def __iter__(self) -> Iterator[QPBase]:
        """The members, oldest first (a snapshot)."""
        return iter(self._items[self._head :])

    def add(self, qp: QPBase) -> None:
        """Add ``qp`` at the back, unless it is a member (then it keeps its place)."""
        bit = self.bit
        if not qp.queued & bit:
            qp.queued |= bit
            items = self._items
            head = self._head
            if head and head == len(items):
                # empty, its taken prefix still held: the slot before the head takes
                # it (the usual turn of a context with one QP sending, taken and
                # added back per packet: no list emptied and grown again)
                head -= 1
                items[head] = qp
                self._head = head
            else:
                items.append(qp)

    def cache_objects(self) -> list[object]:
        """This queue and its item list: what a look at its oldest QP reads (for the
        simulator's cache hints, ``SimHost._set_hints``)."""
        return [self, self._items]

    def first(self) -> QPBase:
        """The oldest member (the set must not be empty)."""
        return self._items[self._head]

    def pop_first(self) -> QPBase:
        """Remove and return the oldest member (the set must not be empty)."""
        items = self._items
        head = self._head
        qp = items[head]
        qp.queued &= ~self.bit
        head += 1
        if head >= 16 and 2 * head >= len(items):
            del items[:head]  # the taken prefix is half the list: drop it
            head = 0
        # (emptied with a shorter prefix, the list is kept: :meth:`add` refills it)
        self._head = head
        return qp

    def discard(self, qp: QPBase) -> None:
        """Remove ``qp`` wherever it is (nothing if it is not a member); O(members),
        for the rare removal from the middle (a QP destroyed or reset)."""
        bit = self.bit
        if qp.queued & bit:
            qp.queued &= ~bit
            items = self._items
            del items[items.index(qp, self._head)]
            if self._head == len(items):
                items.clear()
                self._head = 0


#: :attr:`QPBase.queued` bits: the QP is in its context's ready set, control set.
IN_READY: Final = 1
IN_CONTROL: Final = 2


class ContextBase:
    """What a queue pair uses of its context: keys, the ready and timer sets, events."""

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    ready: QPQueue
    controller: Any
    control_ready: QPQueue
    mr_epoch: int
    rx_placed: int
    timer_dirty: list[QPBase]
    ports_down: int
    rng: random.Random
    lkeys: dict[int, MemoryRegion]
    rkeys_by_key: dict[int, MemoryRegion]
    events: deque[object]

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        #: registered memory regions by lkey (local access) and by rkey (remote access).
        self.lkeys: dict[int, MemoryRegion] = {}
        self.rkeys_by_key: dict[int, MemoryRegion] = {}
        #: counts registrations and deregistrations: a responder's last rkey look-up
        #: holds while it is unchanged (see ``Responder.on_data``).
        self.mr_epoch = 0
        #: QPs that may have a packet to send, in round-robin order (a QP adds itself).
        self.ready = QPQueue(IN_READY)
        #: QPs whose deadline may have changed since the context last looked (a QP
        #: adds itself whenever it takes input, sends, runs a timer or changes state),
        #: each once: a QP appends itself only while its ``timer_marked`` is clear.
        self.timer_dirty: list[QPBase] = []
        #: QPs with a control packet (SACK, NACK, probe, probe reply) queued, in the
        #: order they queued one: control goes out before any QP's data (see
        #: :meth:`openmrc.transport.context.Context.poll_packet`).  A QP whose control
        #: queue has emptied meanwhile (its own poll sent it) is dropped when reached.
        self.control_ready = QPQueue(IN_CONTROL)
        self.events: deque[object] = deque()
        #: port status: bit p set = this NIC's port in plane p is down (sent in SACKs).
        self.ports_down = 0
        #: the node's controller (:class:`openmrc.transport.controller.Controller`), if any.
        self.controller: Any = None
        #: messages placed by all of this context's QPs (the sum of their
        #: ``stats.rx_messages``): a driver that acts only after a packet that placed
        #: a message compares it around the delivery instead of finding the QP again.
        self.rx_placed = 0


class QPBase:
    """What a queue pair's halves and its context use of it (see the module's docstring).

    The methods are :class:`~openmrc.transport.qp.QueuePair`'s; here they only
    name the interface.
    """

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    queued: int
    state: QPState
    control: Fifo[Packet]
    remote_qpn: int
    peer: object
    stats: QPStats
    context: ContextBase
    ctx_deadline: int
    timer_marked: bool
    pd: PDBase
    qpn: int
    send_cq: CompletionQueue
    recv_cq: CompletionQueue
    attr: QPAttr
    paths: PathSet | None
    cc: CongestionControl | None

    def __init__(
        self,
        context: ContextBase,
        pd: PDBase,
        qpn: int,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue,
    ) -> None:
        self.context = context
        self.pd = pd
        self.qpn = qpn
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self.state = QPState.RESET
        self.attr = QPAttr()
        self.remote_qpn = 0
        #: the driver's name for the remote host (the simulator's host index,
        #: the socket driver's address); the core never looks inside it.
        self.peer: object = None
        self.stats = QPStats()
        self.paths: PathSet | None = None
        self.cc: CongestionControl | None = None
        #: control packets (SACK, NACK, probe, probe reply) waiting to go out before data.
        self.control: Fifo[Packet] = Fifo()
        #: True while this QP is in its context's ``timer_dirty``: the QP appends
        #: itself only when it is clear, so the list holds it once however many
        #: times per packet it is marked (the context clears it when it empties
        #: the list).
        self.timer_marked = False
        #: which of its context's QP sets (:class:`QPQueue`) this QP is in: bit
        #: IN_READY, bit IN_CONTROL (kept by the sets themselves).
        self.queued = 0
        #: this QP's deadline as its context last read it (ps; -1: none): the
        #: context's timer heap entry for the QP is live while it matches.
        self.ctx_deadline = -1

    def mark_timer(self) -> None:
        """Put this QP in its context's ``timer_dirty`` (its deadline may have moved)."""
        if not self.timer_marked:
            self.timer_marked = True
            self.context.timer_dirty.append(self)

    # -- used by the requester and responder halves ----------------------------------
    def wake(self) -> None:
        """The QP may have output now and its deadline may have moved."""
        raise NotImplementedError

    def queue_control(self, pkt: Packet) -> None:
        """Queue a control packet (SACK, NACK, probe) to go out before data."""
        raise NotImplementedError

    def complete_sends(self) -> None:
        """Push the send completions of the WRs now fully acknowledged, in order."""
        raise NotImplementedError

    def fail(self, status: WCStatus, failed_op: object, now: int, reason: str) -> None:
        """Go to ERROR: complete what finished, fail ``failed_op`` (a send op or None)."""
        raise NotImplementedError

    # -- used by the context ----------------------------------------------------------
    def poll_packet(self, now: int, busy: int = 0, now_o: object = None) -> Packet | None:
        """The next packet to send, or None (``now_o``: see :meth:`Context.poll`)."""
        raise NotImplementedError

    def has_output(self) -> bool:
        """Whether the QP may have a packet to send."""
        raise NotImplementedError

    def port_blocked(self) -> bool:
        """Whether its output waits only for busy ports."""
        raise NotImplementedError

    def get_timer(self) -> int | None:
        """The QP's earliest deadline, or None."""
        raise NotImplementedError

    def handle_timer(self, now: int) -> None:
        """Run the deadlines that have passed."""
        raise NotImplementedError
