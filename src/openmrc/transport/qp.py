"""The MRC queue pair: the sans-IO connection object.

Inputs: verbs calls (``modify``/``connect``, ``post_send``, ``post_recv``),
``receive_packet(pkt, now)`` and ``handle_timer(now)``.  Outputs:
``poll_packet(now)`` (the next packet to put on the wire, with its EV),
``get_timer()``, and completions on the CQs.  No sockets, no clocks: time is an
integer number of picoseconds given by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import Any, Final, cast

from ..wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    Packet,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)
from . import cc as cc_registry
from .attrs import STAGES, QPAttr
from .errors import InvalidArgument, InvalidState, ResourceExhausted
from .paths import PathSet
from .qpbase import ContextBase, QPBase, QPStats
from .requester import Requester
from .responder import Responder
from .reverse import ReversePaths
from .sendop import SendOp
from .state import CAN_POST_RECV, CAN_POST_SEND, QPState, check_transition
from .verbs import (
    SGE,
    CompletionQueue,
    MemoryRegion,
    PDBase,
    QPCap,
    RecvWR,
    SendWR,
    WCOpcode,
    WCStatus,
    WorkCompletion,
    WROpcode,
)

_U32: Final = 0xFFFFFFFF
_U64: Final = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class QPEvent:
    """A QP state change (for example to ERROR when retries run out)."""

    time: int
    qpn: int
    old: QPState
    new: QPState
    reason: str


class QueuePair(QPBase):
    """An MRC reliable connection: a requester and a responder sharing one QPN."""

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    requester: Requester | None
    reverse: ReversePaths | None
    responder: Responder | None
    cap: QPCap
    _early_recvs: list[RecvWR]
    error_reason: str

    def __init__(
        self,
        context: ContextBase,
        pd: PDBase,
        qpn: int,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue,
        cap: QPCap,
    ) -> None:
        cap.validate()
        super().__init__(context, pd, qpn, send_cq, recv_cq)
        self.cap = cap
        #: the reverse EV set its control packets travel on (from RTR).
        self.reverse: ReversePaths | None = None
        self.requester: Requester | None = None
        self.responder: Responder | None = None
        #: receives posted before RTR (then handed to the responder): a list, not a
        #: deque (which holds a 600-byte block even empty, per QP of the fabric)
        self._early_recvs: list[RecvWR] = []
        self.error_reason = ""

    # -- bring-up ---------------------------------------------------------------------
    def modify(
        self,
        state: QPState,
        attr: QPAttr | None = None,
        remote_qpn: int | None = None,
        peer: object = None,
        now: int = 0,
        **fields: Any,
    ) -> None:
        """Move the QP to ``state`` (the verbs ``modify_qp``), setting attributes.

        Attributes are staged as in the OCP MRC API, each given by name as a
        keyword in the state that sets it (:data:`~openmrc.transport.attrs.STAGES`):
        INIT the profiles (``ev_profile``, ``cc_profile``); RTR the receive side
        (``mpr_recv``, ``max_wimm_recv``, ``mtu``, ``ack_coalesce_bytes``, or
        ``mpr`` for both windows) with ``remote_qpn`` and the driver's ``peer``;
        RTS (and RTS -> RTS) the send side (``mpr_send``, ``max_wimm_send``,
        ``timeout``, ``retry_linear``, ``retry_exp``, ``reorder_window_ps``).
        A whole :class:`QPAttr` may be given at INIT (``attr``): it holds the
        values the later stages start from.  RESET forgets everything.
        """
        if not isinstance(state, QPState):
            raise InvalidArgument(f"state: must be a QPState, got {state!r}")
        check_transition(self.state, state)
        base = self.attr
        if attr is not None:
            if state is not QPState.INIT:
                raise InvalidArgument(
                    f"attr: a whole QPAttr is given at INIT; at {state.value} "
                    "pass the fields this state sets by name"
                )
            if not isinstance(attr, QPAttr):
                raise InvalidArgument(f"attr: must be a QPAttr, got {type(attr).__name__}")
            base = attr
        if fields:
            for name in fields:
                stage = STAGES.get(name)
                if stage is None:
                    raise InvalidArgument(f"QPAttr.{name}: no such attribute")
                if stage != state.value:
                    raise InvalidState(
                        f"QPAttr.{name}: set when moving to {stage}, not {state.value}"
                    )
            base = dc_replace(base, **fields)
        if base is not self.attr:
            base.validate()
        if state is QPState.RTR and (
            not isinstance(remote_qpn, int) or not 0 <= remote_qpn < 1 << 24
        ):
            raise InvalidArgument(f"remote_qpn: must be an int in 0..2^24-1, got {remote_qpn!r}")
        self.attr = base
        if state is QPState.INIT:
            pass
        elif state is QPState.RTR:
            assert remote_qpn is not None
            self.remote_qpn = remote_qpn
            self.peer = peer
            self.paths = PathSet(
                self.attr.ev_profile, self.context.rng, self.qpn, self.context.events
            )
            self.paths.set_ports_down(local=self.context.ports_down)
            if self.context.controller is not None:
                self.context.controller.qp_ready(self)  # its profile's deny lists
            self.cc = cc_registry.create(self.attr.cc_profile, self.attr.mtu)
            self.reverse = ReversePaths(self.paths, self.attr.cc_profile.base_rtt_ps)
            self.responder = Responder(self)
            self.responder.recv_queue.extend(self._early_recvs)
            self._early_recvs.clear()
        elif state is QPState.RTS:
            if self.requester is None:
                self.requester = Requester(self)
            else:  # RTS -> RTS: new send-side attributes
                self.requester.apply_attr(self.attr)
        elif state is QPState.ERROR:
            self.fail(WCStatus.WR_FLUSH_ERR, None, now, "moved to ERROR by the user")
            return
        elif state is QPState.RESET:
            self._reset()
        self._set_state(state, now, "modify")

    def connect(
        self, remote_qpn: int, attr: QPAttr | None = None, peer: object = None, now: int = 0
    ) -> None:
        """RESET -> INIT -> RTR -> RTS in one call, the usual bring-up."""
        self.modify(QPState.INIT, attr=attr, now=now)
        self.modify(QPState.RTR, remote_qpn=remote_qpn, peer=peer, now=now)
        self.modify(QPState.RTS, now=now)

    def _set_state(self, state: QPState, now: int, reason: str) -> None:
        self.mark_timer()
        old = self.state
        self.state = state
        if old is not state:
            self.context.events.append(QPEvent(now, self.qpn, old, state, reason))

    def _reset(self) -> None:
        self.paths = None
        self.reverse = None
        self.requester = None
        self.responder = None
        self.control.clear()
        self._early_recvs.clear()
        self.stats = QPStats()
        self.error_reason = ""
        self.context.ready.discard(self)
        self.context.control_ready.discard(self)
        self.mark_timer()

    # -- posting ----------------------------------------------------------------------
    def send_queue_room(self) -> int:
        """How many more work requests :meth:`post_send` takes now (``max_send_wr``
        less those posted and not yet completed)."""
        req = self.requester
        return self.cap.max_send_wr - (len(req.ops) if req is not None else 0)

    def post_send(self, wr: SendWR) -> None:
        """Post an RDMA WRITE or WRITE WITH IMMEDIATE."""
        if not isinstance(wr, SendWR):
            raise InvalidArgument(f"wr: must be a SendWR, got {type(wr).__name__}")
        w: Any = wr  # read untyped: compiled code would refuse a mistyped field at the read
        if self.state not in CAN_POST_SEND:
            raise InvalidState(f"post_send: QP {self.qpn} is in {self.state.value}, needs RTS")
        if not isinstance(w.opcode, WROpcode):
            raise InvalidArgument(
                f"opcode: {w.opcode!r} is not supported; MRC 1.0 has only RDMA_WRITE and "
                "RDMA_WRITE_WITH_IMM (no SEND, READ or atomics)"
            )
        req = self.requester
        assert req is not None
        if len(req.ops) >= self.cap.max_send_wr:
            raise ResourceExhausted(
                f"post_send: send queue full ({self.cap.max_send_wr} work requests)"
            )
        is_imm = w.opcode is WROpcode.RDMA_WRITE_WITH_IMM
        if is_imm:
            if not isinstance(w.imm_data, int) or not 0 <= w.imm_data <= _U32:
                raise InvalidArgument(
                    f"imm_data: must be a 32-bit unsigned int, got {w.imm_data!r}"
                )
            if req.wimm_outstanding >= self.attr.max_wimm_send:
                raise ResourceExhausted(
                    f"post_send: max_wimm_send ({self.attr.max_wimm_send}) WRITE_IMMs already in flight"
                )
        elif w.imm_data is not None:
            raise InvalidArgument("imm_data: only RDMA_WRITE_WITH_IMM carries an immediate")
        if not isinstance(w.remote_addr, int) or not 0 <= w.remote_addr <= _U64:
            raise InvalidArgument(
                f"remote_addr: must be a 64-bit unsigned int, got {w.remote_addr!r}"
            )
        if not isinstance(w.rkey, int) or not 0 <= w.rkey <= _U32:
            raise InvalidArgument(f"rkey: must be a 32-bit unsigned int, got {w.rkey!r}")
        segs = self._resolve_sges(w.sg_list)
        total = sum(length for _, _, length in segs)
        if w.remote_addr + total > _U64 + 1:
            raise InvalidArgument("remote_addr: the write runs past the end of the 64-bit space")
        op = SendOp(
            w.wr_id,
            segs,
            w.remote_addr,
            w.rkey,
            w.imm_data if is_imm else None,
            bool(w.signaled),
            req.next_msn,
            self.attr.mtu,
        )
        req.next_msn += 1
        if is_imm:
            req.wimm_outstanding += 1
        req.ops.append(op)
        req.to_segment.append(op)
        self.wake()

    def _resolve_sges(self, sg_list: Any) -> list[tuple[MemoryRegion, int, int]]:
        if not isinstance(sg_list, list | tuple):
            raise InvalidArgument(f"sg_list: must be a list of SGE, got {type(sg_list).__name__}")
        if len(sg_list) > 32:
            raise InvalidArgument(f"sg_list: at most 32 elements, got {len(sg_list)}")
        segs = []
        for i, item in enumerate(sg_list):
            if not isinstance(item, SGE):
                raise InvalidArgument(f"sg_list[{i}]: must be an SGE, got {type(item).__name__}")
            sge: Any = item  # read untyped, as in post_send
            mr = self.context.lkeys.get(sge.lkey)
            if mr is None or mr.pd is not self.pd:
                raise InvalidArgument(
                    f"sg_list[{i}].lkey: {sge.lkey!r} is not a memory region of this PD"
                )
            if not isinstance(sge.length, int) or sge.length < 0:
                raise InvalidArgument(
                    f"sg_list[{i}].length: must be a non-negative int, got {sge.length!r}"
                )
            if not isinstance(sge.addr, int) or not mr.contains(sge.addr, sge.length):
                raise InvalidArgument(
                    f"sg_list[{i}]: [{sge.addr!r}, +{sge.length}) is outside the region "
                    f"[{mr.addr:#x}, +{mr.length})"
                )
            segs.append((mr, sge.addr, sge.length))
        return segs

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive, to be consumed by one incoming WRITE WITH IMMEDIATE."""
        if not isinstance(wr, RecvWR):
            raise InvalidArgument(f"wr: must be a RecvWR, got {type(wr).__name__}")
        if self.state not in CAN_POST_RECV:
            raise InvalidState(
                f"post_recv: QP {self.qpn} is in {self.state.value}, needs INIT, RTR or RTS"
            )
        queue = self.responder.recv_queue if self.responder is not None else self._early_recvs
        if len(queue) >= self.cap.max_recv_wr:
            raise ResourceExhausted(
                f"post_recv: receive queue full ({self.cap.max_recv_wr} work requests)"
            )
        queue.append(wr)

    # -- sans-IO input ---------------------------------------------------------------
    def receive_packet(self, pkt: Packet, now: int) -> None:
        """Take one packet from the network.  Never raises on network input."""
        if not self.timer_marked:
            self.timer_marked = True
            self.context.timer_dirty.append(self)
        state = self.state
        if state is not QPState.RTS and state is not QPState.RTR:
            if state is QPState.ERROR and type(pkt) is DataPacket:
                self._answer_in_error(pkt)
            else:
                self.stats.dropped_not_ready += 1
            return
        kind = type(pkt)
        if kind is DataPacket:
            stats = self.stats
            dups = stats.rx_duplicates
            self.responder.on_data(pkt, now)  # type: ignore[union-attr,arg-type]
            # (set with the responder: typed here, so the per-packet test below reads
            # a native attribute, not a generic one compared as objects)
            rev = cast(ReversePaths, self.reverse)
            if stats.rx_duplicates != dups:  # the peer resent: it missed our SACKs?
                rev.suspect(pkt.ev & 15, now)
            if now >= rev.next_probe_at:
                self._reverse_inbound(now)
        elif kind is SackPacket:
            if self.requester is not None:
                self.requester.on_sack(pkt, now)  # type: ignore[arg-type]
                self.reverse.on_delivered(pkt.ev)  # type: ignore[union-attr]
        elif kind is NackPacket:
            if self.requester is not None:
                self.requester.on_nack(pkt, now)  # type: ignore[arg-type]
        elif kind is ProbePacket:
            if pkt.reliability:  # type: ignore[attr-defined]  # the peer heard nothing
                self.reverse.suspect(pkt.ev & 15, now)  # type: ignore[union-attr]
            self.responder.on_probe(pkt, now)  # type: ignore[union-attr,arg-type]
        elif kind is ProbeReplyPacket:
            if self.reverse.on_probe_reply(pkt.ev, pkt.seq, pkt.ts_echo, now):  # type: ignore[union-attr,attr-defined]
                pass  # a reverse-EV probe's answer
            elif self.requester is not None:
                self.requester.on_probe_reply(pkt, now)  # type: ignore[arg-type]
        else:
            self.stats.rx_invalid += 1

    def _answer_in_error(self, pkt: DataPacket) -> None:
        """A QP in ERROR answers its peer's data with NACK QP_NOT_READY.

        The peer's requester takes it as fatal (``REM_OP_ERR``) when the PSN is
        outstanding, and so fails at once instead of retrying until its retry
        count runs out.  One NACK per data packet received: never more packets
        out than came in.
        """
        rsp = self.responder
        if rsp is None:  # never reached RTR: nobody to answer
            self.stats.dropped_not_ready += 1
            return
        self.stats.error_nacks += 1
        self.stats.tx_nacks += 1
        self.queue_control(
            NackPacket(self.remote_qpn, pkt.ev, NackReason.QP_NOT_READY, pkt.psn, rsp.base, pkt.ts)
        )

    def _reverse_inbound(self, now: int) -> None:
        """Data arrived: the reverse EV set may probe one more EV (see :mod:`.reverse`)."""
        probe = self.reverse.on_inbound(now, self.remote_qpn)  # type: ignore[union-attr]
        if probe is not None:
            self.queue_control(probe)

    def handle_timer(self, now: int) -> None:
        """Run whatever deadlines have passed (RTO, loss detection, probes)."""
        self.mark_timer()
        if self.state is QPState.RTS and self.requester is not None:
            self.requester.handle_timer(now)

    # -- sans-IO output --------------------------------------------------------------
    def get_timer(self) -> int | None:
        """The next time :meth:`handle_timer` must be called, or None."""
        if self.state is QPState.RTS and self.requester is not None:
            return self.requester.get_timer()
        return None

    def poll_packet(self, now: int, busy: int = 0, now_o: object = None) -> Packet | None:
        """The next packet to transmit (control packets first), or None.

        ``busy`` is a bitmask of planes whose port is busy: new data and
        retransmissions avoid their EVs (control packets keep their reflected EV).
        ``now_o``: ``now`` as an object, or None (see :meth:`Context.poll`).
        """
        if not self.timer_marked:
            self.timer_marked = True
            self.context.timer_dirty.append(self)
        control = self.control
        if control.count:  # (Fifo.count: len() compiled is a call)
            return control.popleft()
        if self.state is QPState.RTS:
            pkt = self.requester.next_packet(now, busy, now_o)  # type: ignore[union-attr]
            if pkt is None:
                if control.count:  # the window closed: a probe was queued
                    return control.popleft()
                return None
            # its SACKs keep the set fresh (narrowed first: compiled, a write through
            # the Optional is CPython's generic setattr with ``now`` boxed)
            rev = self.reverse
            assert rev is not None
            rev.last_out = now
            return pkt
        return None

    def port_blocked(self) -> bool:
        """True when the last poll found data to send but only on busy planes."""
        return self.requester is not None and self.requester.port_blocked

    def has_output(self) -> bool:
        """True when :meth:`poll_packet` may return a packet."""
        return self.control.count > 0 or (
            self.state is QPState.RTS and self.requester is not None and self.requester.has_work()
        )

    # -- used by the requester and responder halves ----------------------------------
    def wake(self) -> None:
        """The QP may have output now and its deadline may have moved: tell the context."""
        self.context.ready.add(self)
        if not self.timer_marked:
            self.timer_marked = True
            self.context.timer_dirty.append(self)

    def queue_control(self, pkt: Packet) -> None:
        """Queue a control packet (SACK, NACK, probe) to go out before data.

        A SACK or NACK travels on the reverse EV set's choice, keeping the EV
        it reflects; a probe reply goes back on the probed EV unless this QP
        holds that EV or its plane out of use (see :mod:`.reverse`)."""
        rev = self.reverse
        if rev is not None:
            kind = type(pkt)
            if kind is SackPacket or kind is NackPacket:
                pkt.path_ev = rev.route(pkt.ev)
            elif kind is ProbeReplyPacket and not rev.may_use(pkt.ev):
                pkt.path_ev = rev.route(pkt.ev)  # not on a path this end denies or blames
        self.control.append(pkt)
        ctx = self.context
        ctx.ready.add(self)
        ctx.control_ready.add(self)

    def complete_sends(self) -> None:
        """Push the send completions of the WRs now fully acknowledged, in order."""
        # (typed, so that compiled the op's fields are native reads, not generic ones)
        req = cast(Requester, self.requester)
        ops = req.ops
        while ops.count:
            op = ops.first()
            if op.acked < op.npkts or op.segmented < op.npkts:
                break
            if op.is_imm and req.snd_una < op.first_psn + op.npkts:
                # A WRITE_IMM completes on the cumulative ACK only: the responder
                # consumes its receive in message order and may still refuse it.
                break
            ops.popleft()
            if op.is_imm:
                req.wimm_outstanding -= 1
            if op.signaled:
                self.send_cq.push(
                    WorkCompletion(
                        op.wr_id, WCStatus.SUCCESS, WCOpcode.RDMA_WRITE, self.qpn, op.total
                    )
                )

    def fail(self, status: WCStatus, failed_op: object, now: int, reason: str) -> None:
        """Go to ERROR: complete what finished, fail ``failed_op``, flush the rest."""
        if self.state is QPState.ERROR:
            return
        self.error_reason = reason
        req = self.requester
        if req is not None:
            self.complete_sends()
            if failed_op is None and status is not WCStatus.WR_FLUSH_ERR and len(req.ops):
                failed_op = req.ops.first()  # no specific WR: the oldest takes the error
            for op in req.ops:
                st = status if op is failed_op else WCStatus.WR_FLUSH_ERR
                self.send_cq.push(WorkCompletion(op.wr_id, st, WCOpcode.RDMA_WRITE, self.qpn, 0))
            req.ops.clear()
            req.to_segment.clear()
            req.retx.clear()
            req.unacked.clear()
            req.sacked_imm_last.clear()
            req.inflight = 0
            req.flight_ack_reqs = 0
            req.held.clear()
            req.rack_deadline = None
            if self.paths is not None:
                self.paths.next_probe_at = None
        recvs: list[RecvWR] = list(self._early_recvs)
        if self.responder is not None:
            recvs += list(self.responder.recv_queue)
            self.responder.wimm_pending.clear()
            self.responder.recv_queue.clear()
        for recv in recvs:
            self.recv_cq.push(
                WorkCompletion(
                    recv.wr_id, WCStatus.WR_FLUSH_ERR, WCOpcode.RECV_RDMA_WITH_IMM, self.qpn
                )
            )
        self.control.clear()
        self._set_state(QPState.ERROR, now, reason)

    def __repr__(self) -> str:
        return f"QueuePair(qpn={self.qpn}, state={self.state.value}, remote_qpn={self.remote_qpn})"
