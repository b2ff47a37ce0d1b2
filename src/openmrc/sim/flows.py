"""The flows of a simulator experiment and MRC's connections: what is tracked of each.

* :class:`Flow` -- what an experiment tracks of every flow, whatever the transport
  (status, dependencies, completions, the sampled series); a transport's
  experiment subclasses it (:class:`MrcFlow` here, the baselines' own);
* :class:`Conn` -- one long-lived MRC connection shared by the flows of a
  ``FlowSpec.conn`` key, and the rule that splits its counters among them;
* :class:`Poster` -- posts the flows' WRITEs on a set of QPs as their send queues
  have room.

:class:`~openmrc.sim.experiment.Experiment` opens the connections and drives the
flows; these are its state.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..transport import SGE, QueuePair, SendWR, WROpcode
from ..transport.verbs import MemoryRegion
from ..workloads import FlowSpec
from .folding import FoldedCollective

#: The per-flow transport counters of :class:`~openmrc.sim.result.FlowResult`.
COUNTERS = ("retransmits", "trims", "nacks", "timeouts", "ecn_echoes", "evs_assumed_bad")


class Flow:
    """What an experiment tracks of every flow, whatever the transport."""

    __slots__ = (
        "cum",
        "dep_gaps",
        "dependents",
        "deps_left",
        "deps_spare",
        "done_at",
        "finished",
        "fold",
        "fold_i",
        "last_bytes",
        "nmsgs",
        "order",
        "pending",
        "ready_at",
        "rx_done",
        "send_dependents",
        "series",
        "spec",
        "src_data",
        "started_at",
        "status",
        "watch_rx",
    )

    def __init__(self, spec: FlowSpec) -> None:
        self.spec = spec
        #: flows waiting for this one's data to arrive / for its sender to complete.
        self.dependents: list[Flow] = []
        self.send_dependents: list[Flow] = []
        self.deps_left = 0
        #: per-dependency waits (FlowSpec.dep_gaps by dependency flow), and when the
        #: flow is ready for the dependencies met so far.
        self.dep_gaps: dict[Flow, int] | None = None
        self.ready_at = 0
        #: dependencies that may still fail without stranding this flow.
        self.deps_spare = 0
        self.nmsgs = 0
        self.rx_done: int | None = None
        self.started_at: int | None = None
        self.watch_rx = False
        #: bytes received at each sample tick (the steady-state window is cut from it).
        self.cum: list[int] = []
        self.pending = 0
        #: when it joined its sender's list (completions are handled in this order).
        self.order = 0
        self.finished: list[int] = []
        self.done_at: int | None = None
        self.status = "not started"
        self.last_bytes = 0
        self.series: list[float] = []
        self.src_data: bytearray | None = None
        #: the folded collective this flow is a transfer of (openmrc.sim.folding), and
        #: its index there; None for a flow of its own.
        self.fold: FoldedCollective | None = None
        self.fold_i = 0


def send_order(flow: Flow) -> int:
    """Sort key: the order ``flow`` joined its sender's list."""
    return flow.order


class Conn:
    """One long-lived MRC connection: the QPs (one per stripe) that the flows of a
    ``FlowSpec.conn`` key share, their protection domains, and the bookkeeping
    that splits the QPs' counters and completions among those flows.

    A flow's messages on stripe ``i`` are the MSNs ``posted[i]`` had reached when
    it posted them (post order is MSN order), so what it has received is exact:
    its completed messages (completions are in MSN order) plus the bytes placed
    of its messages still open.  Transport counters cannot be split by message,
    so each flow takes, when it completes, whatever the connection counted since
    the previous flow on it completed (see :meth:`Experiment._counters`).
    """

    __slots__ = (
        "active",
        "flows",
        "pa",
        "pb",
        "posted",
        "poster",
        "qas",
        "qbs",
        "started",
        "taken",
        "taken_at",
    )

    def __init__(self) -> None:
        self.pa: Any = None
        self.pb: Any = None
        self.qas: list[QueuePair] = []
        self.qbs: list[QueuePair] = []
        #: messages posted so far on each stripe (the next flow's first MSN there).
        self.posted: list[int] = []
        #: the flows started on it, by sequence number (the high bits of their WR ids);
        #: a folded collective's transfers leave once folded.
        self.flows: dict[int, MrcFlow] = {}
        #: how many flows started on it (the next one's sequence number).
        self.started = 0
        #: those of them still waiting for completions (told when the shared CQ has news).
        self.active: dict[Flow, None] = {}
        #: counter totals already attributed to a flow, and when that was.
        self.taken: dict[str, int] = dict.fromkeys(COUNTERS[:-1], 0)
        self.taken_at: int | None = None
        #: posts the flows' WRITEs in start order as the QPs' send queues have room.
        self.poster = Poster()

    def totals(self) -> dict[str, int]:
        """The QPs' counters so far (FlowResult names, without ``evs_assumed_bad``)."""
        qas = self.qas
        return {
            "retransmits": sum(qa.stats.retransmits for qa in qas),
            "trims": sum(qa.stats.trims for qa in qas),
            "nacks": sum(qa.stats.rx_nacks for qa in qas),
            "timeouts": sum(qa.stats.timeouts for qa in qas),
            "ecn_echoes": sum(qa.stats.ecn_echoes for qa in qas),
        }


#: WR ids of a flow on a shared connection: its sequence number there, shifted.
SEQ_SHIFT = 32


class Poster:
    """Posts the WRITEs of the flows on one set of QPs as their send queues have room.

    A flow's messages go round-robin over its QPs (message ``i`` on stripe
    ``i % n``); they are posted in flow start order and message order, so each
    stripe's MSN order is what :meth:`Experiment._start` computed, and a flow of
    any size runs within the QPs' ``max_send_wr`` (a flow is not posted whole up
    front).  What is posted is the same as posting everything at once whenever it
    fits: small flows see no difference.
    """

    __slots__ = ("next_msg", "queue")

    def __init__(self) -> None:
        #: flows with messages still to post, in start order.
        self.queue: deque[MrcFlow] = deque()
        #: the next message index of the flow at the head of the queue.
        self.next_msg = 0

    def add(self, flow: MrcFlow) -> None:
        """Queue ``flow``'s messages behind those of the flows before it."""
        if not self.queue:
            self.next_msg = 0
        self.queue.append(flow)

    def fill(self) -> None:
        """Post queued messages in order until the next one's send queue is full."""
        queue = self.queue
        while queue:
            flow = queue[0]
            spec = flow.spec
            nmsgs = flow.nmsgs
            nq = len(flow.qas)
            i = self.next_msg
            mr_a, mr_b = flow.mr_src, flow.mr_dst
            assert mr_a is not None and mr_b is not None  # registered before it is queued
            wr_base = flow.wr_base
            while i < nmsgs:
                qa = flow.qas[i % nq]
                if qa.send_queue_room() <= 0:
                    self.next_msg = i
                    return
                off = i * spec.message
                # the last message on each QP carries the immediate
                last = i >= nmsgs - nq
                qa.post_send(
                    SendWR(
                        wr_base | i,
                        WROpcode.RDMA_WRITE_WITH_IMM if last else WROpcode.RDMA_WRITE,
                        [SGE(mr_a.addr + off, min(spec.message, spec.size - off), mr_a.lkey)],
                        mr_b.addr + off,
                        mr_b.rkey,
                        imm_data=i if last else None,
                    )
                )
                i += 1
            queue.popleft()
            self.next_msg = 0


class MrcFlow(Flow):
    """An MRC flow: its QPs at each end (one per ``qps``) and the two memory regions.

    A flow with a ``conn`` key shares its QPs with the other flows of that
    connection (``conn``); ``rx_lo``/``rx_hi``/``rx_cum`` locate its messages
    on each stripe, ``inbox`` holds its completions drained from the shared CQ.
    """

    __slots__ = (
        "conn",
        "counts",
        "ev_window",
        "inbox",
        "mr_dst",
        "mr_src",
        "poster",
        "qas",
        "qbs",
        "rx_cum",
        "rx_hi",
        "rx_lo",
        "wr_base",
    )

    def __init__(self, spec: FlowSpec) -> None:
        super().__init__(spec)
        self.qas: list[QueuePair] = []
        self.qbs: list[QueuePair] = []
        self.mr_src: MemoryRegion | None = None
        self.mr_dst: MemoryRegion | None = None
        self.conn: Conn | None = None
        #: what posts its WRITEs (its connection's, or its own), and its WR ids' high bits.
        self.poster: Poster | None = None
        self.wr_base = 0
        self.inbox: list[str | None] = []
        self.rx_lo: list[int] = []
        self.rx_hi: list[int] = []
        #: per stripe, the bytes of the flow's first k messages there, k = 0, 1, ...
        self.rx_cum: list[list[int]] = []
        #: the connection's counters this flow took when it completed, and the
        #: (exclusive, inclusive) time window of the EV events it took.
        self.counts: dict[str, int] | None = None
        self.ev_window: tuple[int | None, int | None] = (None, None)

    @property
    def qa(self) -> QueuePair | None:
        """The (first) sending QP."""
        return self.qas[0] if self.qas else None

    @property
    def qb(self) -> QueuePair | None:
        """The (first) receiving QP."""
        return self.qbs[0] if self.qbs else None
