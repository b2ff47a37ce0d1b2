"""The RoCE/IB baselines' simulated NIC: :class:`BaselineHost`.

A host schedules its sending QPs (:class:`~openmrc.baselines.roce.RoceSender`) onto
its ports, keeps their ACK timeouts, and hands arriving packets to its QPs.  It runs
for every packet a host sends or receives, so a compiled build compiles this module
with mypyc (``setup.py``); :mod:`openmrc.baselines.experiment` builds the hosts and
re-exports the class.  The same source runs interpreted with ``OPENMRC_PURE_PYTHON=1``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Protocol

from .roce import Cnp, CnpPacer, RoceAck, RoceData, RoceReceiver

if TYPE_CHECKING:
    from ..sim.engine import Simulator
    from ..wire.packets import Packet
    from .fabric import BaselineFabric


class SendingQP(Protocol):
    """What the NIC uses of a sending QP (:class:`~openmrc.baselines.roce.RoceSender`).

    A protocol rather than the class, so that the NIC's bookkeeping can be tested
    with stand-ins (a compiled build checks no class for a protocol).
    """

    @property
    def qp(self) -> int: ...

    @property
    def next_tx(self) -> int: ...

    @property
    def completed(self) -> list[tuple[int, bool, int]]: ...

    def ready(self) -> bool: ...

    def idle(self) -> bool: ...

    def deadline(self) -> int | None: ...

    def next_send_ps(self, now: int | None = None) -> int: ...

    def build(self, now: int) -> Any: ...

    def receive(self, pkt: Packet, now: int) -> None: ...

    def on_timer(self, now: int) -> None: ...


class HostPort(Protocol):
    """What the NIC uses of its ports (:class:`~openmrc.baselines.datapath.BaselinePort`;
    a protocol for the same reason as :class:`SendingQP`)."""

    up: bool
    busy_until: int
    data_bytes: int

    def drain_time(self) -> int: ...

    def accept(self, pkt: Any, via: Any) -> None: ...


class BaselineHost:
    """Host ``index``: the NIC scheduling its RoCE QPs onto its ports, and its responders."""

    def __init__(self, sim: Simulator, fabric: BaselineFabric, index: int) -> None:
        self.sim = sim
        self.fabric = fabric
        self.index = index
        self.ports: list[HostPort] = fabric.host_ports[index]  # type: ignore[assignment]
        #: the experiment's fault injector (the baselines apply no per-EV loss)
        self.faults: Any = None
        #: sending QPs by qp id, and per plane in round-robin order
        self.senders: dict[int, SendingQP] = {}
        self.plane_senders: list[list[SendingQP]] = [[] for _ in self.ports]
        #: The round-robin order is the order QPs were registered in, numbered by
        #: ``_seq_next``: per plane the numbers of :attr:`plane_senders` (ascending),
        #: the number of the last QP passed over (:meth:`pass_over`, -1: none), and
        #: the pointer ``_rr``: the scan starts at the first QP numbered ``_rr`` or
        #: more, else at the first.  A QP with nothing to send keeps its number
        #: without being in the list: the order, and where the pointer stands in it
        #: (before or after QPs registered later), are those of a list that held it.
        self._seq_next = 0
        self._plane_seqs: list[list[int]] = [[] for _ in self.ports]
        self._passed_last = [-1] * len(self.ports)
        self._seqs: dict[SendingQP, int] = {}
        self._rr = [0] * len(self.ports)
        self.receivers: dict[int, RoceReceiver] = {}
        #: per port: the notification point's CNP spacing, shared by its QPs
        self.cnp_pacers = [CnpPacer() for _ in self.ports]
        self._pump_at: int | None = None
        self._timer_at: int | None = None
        #: the senders' local ACK timeouts: a heap of ``(deadline, qp, sender)``
        #: entries, each a lower bound on its sender's deadline, and per sender its
        #: smallest entry.  An ACK moves a deadline later, which needs no entry
        #: (the old one is a lower bound, brought up to date when it reaches the
        #: top); only a deadline set or moved earlier pushes one.  So the NIC finds
        #: the next timeout, and the QPs due, without scanning every QP per event
        #: (1,008 of them per host in a 64-rank all-to-all with 16 QPs).
        self._timeouts: list[tuple[int, int, SendingQP]] = []
        self._timeout_lb: dict[SendingQP, int] = {}
        #: which senders have a packet waiting (:meth:`RoceSender.ready`), and how
        #: many per plane: a busy port asks whether any QP waits for it, and a
        #: free one need not scan its QPs when none does
        self._waiting: set[SendingQP] = set()
        self._planes: dict[SendingQP, int] = {}
        self._nwaiting = [0] * len(self.ports)
        #: the receiving QP the last data packet reached (for ``on_data``)
        self.last_rx: int = -1
        self.on_activity: Callable[[BaselineHost, int], None] | None = None
        #: called after a data packet received (arrival of watched flows): after one
        #: that placed a message (a flow completes only then), and after every one
        #: while :attr:`sampler` sleeps (any arrival wakes it); after every one when
        #: there is no :attr:`sampler`
        self.on_data: Callable[[BaselineHost, int], None] | None = None
        #: the experiment's sampling clock (its ``armed``: awake), set by the
        #: experiment; None: call :attr:`on_data` after every data packet
        self.sampler: Any = None
        #: the flow of each registered sending QP, and what to tell when one of them
        #: has completions to poll: the experiment then looks at that flow only, not
        #: at every flow the host sends (hundreds in a 64-rank all-to-all) per ACK
        self.tx_flows: dict[SendingQP, Any] = {}
        self.note_completions: Callable[[Any], None] | None = None
        fabric.attach_host(index, self._on_receive, self._on_link)

    def add_sender(self, snd: SendingQP, plane: int) -> None:
        """Register a sending QP on ``plane`` (then :meth:`refresh` it once posted to)."""
        self.senders[snd.qp] = snd
        self.plane_senders[plane].append(snd)
        seq = self._seq_next
        self._seq_next = seq + 1
        self._plane_seqs[plane].append(seq)
        self._seqs[snd] = seq
        self._planes[snd] = plane
        self.refresh(snd)

    def pass_over(self, plane: int) -> None:
        """Note a QP on ``plane`` that was given nothing to send and never will be (a
        connection with more QPs than messages): it takes its place in the round-robin
        order, as if registered, but stays out of the list that every packet scans."""
        seq = self._seq_next
        self._seq_next = seq + 1
        self._passed_last[plane] = seq

    def _last_seq(self, plane: int) -> int:
        """The number of the last QP in ``plane``'s round-robin order (-1: none)."""
        seqs = self._plane_seqs[plane]
        last = self._passed_last[plane]
        return seqs[-1] if seqs and seqs[-1] > last else last

    def refresh(self, snd: SendingQP) -> None:
        """Take note of ``snd``'s state after anything that may change it (a message
        posted, a packet sent, an ACK, a timeout): whether it has a packet waiting,
        and its timeout (:meth:`note_timeout`)."""
        plane = self._planes.get(snd)
        if plane is None:
            return  # retired
        d = snd.deadline()  # note_timeout(), inlined: this runs for every packet sent
        if d is not None:
            lb = self._timeout_lb.get(snd)
            if lb is None or d < lb:
                self._timeout_lb[snd] = d
                heappush(self._timeouts, (d, snd.qp, snd))
        waiting = self._waiting
        if snd.ready():
            if snd not in waiting:
                waiting.add(snd)
                self._nwaiting[plane] += 1
        elif snd in waiting:
            waiting.discard(snd)
            self._nwaiting[plane] -= 1

    def retire(self, snd: SendingQP) -> None:
        """Forget a sending QP with nothing left to send or acknowledge.

        A RoCE sender carries one flow's messages and is never posted to again,
        so the NIC stops scanning it (a collective opens new QPs at every step:
        a 64-rank ring with 16 QPs left about 4,000 finished ones per host to
        scan per packet).  The round-robin pointer keeps its place in the order
        (``_rr``), so the order in which ready QPs are served is unchanged.
        """
        if self.senders.pop(snd.qp, None) is None:
            return
        self.tx_flows.pop(snd, None)
        self._timeout_lb.pop(snd, None)  # its heap entries are dropped at the top
        plane = self._planes.pop(snd)
        if snd in self._waiting:
            self._waiting.discard(snd)
            self._nwaiting[plane] -= 1
        seq = self._seqs.pop(snd)
        seqs = self._plane_seqs[plane]
        j = bisect_left(seqs, seq)
        del seqs[j]
        del self.plane_senders[plane][j]
        if self._last_seq(plane) < self._rr[plane]:
            self._rr[plane] = 0  # it was the last in the order, and the scan's start

    def add_receiver(self, rcv: RoceReceiver) -> None:
        """Register a receiving QP."""
        self.receivers[rcv.qp] = rcv

    # -- input ----------------------------------------------------------------------
    def _on_receive(self, pkt: Packet, plane: int, now: int) -> None:
        if type(pkt) is RoceData:
            rcv = self.receivers.get(pkt.dqpn)
            if rcv is None:
                return
            placed = rcv.messages
            replies = rcv.receive(pkt, now)
            if replies:
                port = self.ports[plane]
                for reply in replies:
                    port.accept(reply, None)
            self.last_rx = rcv.qp
            on_data = self.on_data
            if on_data is not None:
                # a packet that placed no message completes no flow: only a sleeping
                # sampler needs to hear of it (most packets of a message of many)
                sampler = self.sampler
                if rcv.messages != placed or sampler is None or not sampler.armed:
                    on_data(self, now)
            return
        if type(pkt) is RoceAck or type(pkt) is Cnp:
            snd = self.senders.get(pkt.dqpn)
            if snd is None:
                return
            snd.receive(pkt, now)
            if snd.completed:
                self._note(snd)
            if snd.idle():
                self.retire(snd)
            else:
                self.refresh(snd)
            self.kick(now)
            if self.on_activity is not None:
                self.on_activity(self, now)

    def _note(self, snd: SendingQP) -> None:
        """``snd`` has completions to poll: tell the experiment which flow."""
        flow = self.tx_flows.get(snd)
        if flow is not None and self.note_completions is not None:
            self.note_completions(flow)

    def _on_link(self, plane: int, up: bool, now: int) -> None:
        self.kick(now)

    def _on_timer(self, at: int) -> None:
        if self._timer_at != at:
            return
        self._timer_at = None
        now = self.sim.now
        for snd in self.due_senders(now):
            snd.on_timer(now)
            if snd.completed:
                self._note(snd)
            self.refresh(snd)
        self.kick(now)
        if self.on_activity is not None:
            self.on_activity(self, now)

    def _on_pump(self, at: int) -> None:
        if self._pump_at != at:
            return
        self._pump_at = None
        self.kick(self.sim.now)

    # -- timeouts -------------------------------------------------------------------
    def note_timeout(self, snd: SendingQP) -> None:
        """Keep an entry at or below ``snd``'s deadline: called after anything that may
        have set it or moved it earlier (a packet sent, an ACK, a timeout)."""
        d = snd.deadline()
        if d is None:
            return
        lb = self._timeout_lb.get(snd)
        if lb is None or d < lb:
            self._timeout_lb[snd] = d
            heappush(self._timeouts, (d, snd.qp, snd))

    def next_timeout(self) -> int | None:
        """The earliest deadline of the registered senders (None: none armed).

        Pops the entries that are stale (a retired sender, or not its smallest)
        and re-files those whose sender's deadline moved later, until the top
        entry is a sender's deadline itself.
        """
        heap = self._timeouts
        lbs = self._timeout_lb
        while heap:
            d, _qp, snd = heap[0]
            if lbs.get(snd) != d:
                heappop(heap)  # superseded by a smaller entry, or its sender retired
                continue
            cur = snd.deadline()
            if cur == d:
                return d
            heappop(heap)
            del lbs[snd]
            if cur is not None:
                lbs[snd] = cur
                heappush(heap, (cur, snd.qp, snd))
        return None

    def due_senders(self, now: int) -> list[SendingQP]:
        """Take the registered senders whose deadline has come, in registration (QP)
        order: the order a scan of :attr:`senders` would call them in.  Their
        entries leave the heap: the caller runs each one's timer and then
        :meth:`refresh`."""
        due: list[SendingQP] = []
        heap = self._timeouts
        while True:
            d = self.next_timeout()
            if d is None or d > now:
                break
            snd = heappop(heap)[2]
            del self._timeout_lb[snd]
            due.append(snd)
        due.sort(key=_qp_of)
        return due

    # -- output ---------------------------------------------------------------------
    def kick(self, now: int) -> None:
        """Give every free port a packet from its next ready QP; re-arm pump and timer."""
        wake: int | None = None
        nwaiting = self._nwaiting
        for plane, port in enumerate(self.ports):
            qps = self.plane_senders[plane]
            if not qps:
                continue
            n = len(qps)
            while True:
                if not port.up:
                    break
                busy = port.busy_until
                if busy > now or port.data_bytes:
                    # busy, paused or out of credit: look again when it should be free
                    if nwaiting[plane]:
                        t = busy if busy > now else now + 100_000
                        if port.data_bytes:
                            t = max(t, port.drain_time())
                        if wake is None or t < wake:
                            wake = t
                    break
                if not nwaiting[plane]:
                    break
                seqs = self._plane_seqs[plane]
                rr = self._rr
                start = bisect_left(seqs, rr[plane])
                chosen = None
                for i in range(n):
                    j = start + i
                    if j >= n:
                        j -= n
                    q = qps[j]
                    if q.ready():
                        t = q.next_send_ps(now)
                        if q.next_tx <= now:
                            chosen = q
                            seq = seqs[j]
                            # the next scan starts after it, or at the first QP if it
                            # is the last in the order (_last_seq, inlined)
                            last = self._passed_last[plane]
                            if seqs[-1] > last:
                                last = seqs[-1]
                            rr[plane] = seq + 1 if seq < last else 0
                            break
                        if wake is None or t < wake:
                            wake = t
                if chosen is None:
                    break
                port.accept(chosen.build(now), None)
                self.refresh(chosen)
        if wake is not None and (self._pump_at is None or wake < self._pump_at):
            at = wake if wake > now else now + 1
            self._pump_at = at
            self.sim.schedule(at, self._on_pump, at)
        deadline = self.next_timeout()
        if deadline is not None and (self._timer_at is None or deadline < self._timer_at):
            at = deadline if deadline > now else now
            self._timer_at = at
            self.sim.schedule(at, self._on_timer, at)


def _qp_of(snd: SendingQP) -> int:
    return snd.qp
