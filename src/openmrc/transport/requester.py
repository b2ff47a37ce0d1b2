"""The send half of an MRC queue pair (the requester).

It segments posted WRITEs into packets, sprays them over the EV set, keeps the
window, and recovers losses:

* a trim NACK queues the packet for retransmission first in line, on another
  EV, within the congestion window (as uet-htsim does);
* SACK gaps are judged with a RACK-style rule that tolerates spraying's
  reordering: a packet is lost when a packet sent after it has been delivered
  *and* it is overdue by more than the reordering window, which follows the
  reordering measured (see :meth:`Requester.reo_window`);
* a reliability probe (no PSN) asks for a fresh SACK when the sender has heard
  nothing for two smoothed RTTs (tail loss);
* the local ACK timeout (1.024 us x 2^t) retransmits the oldest packet, with
  ``retry_linear`` retries at that timeout and ``retry_exp`` doubling ones;
  when they run out the QP goes to ERROR.

Retransmission is recovery; blame is separate, and needs evidence that a
packet sent *on that EV* was lost without a trim (docs/loss-recovery.md):

* order on the EV: a path is FIFO, so when a packet sent later on the same EV
  is acknowledged by a SACK that reports the earlier one missing (its
  cumulative point, or a clear bit of its bitmap), and the earlier one is
  still neither acknowledged nor NACKed a reordering allowance later, it was
  lost on that path.  A SACK that says nothing about the earlier packet (it
  lies between the cumulative point and the bitmap) is no evidence by itself:
  the SACK that reported it may have been lost.  It becomes evidence once the
  newest SACK says the receiver placed exactly the bytes this QP knows
  acknowledged (``SackPacket.rcvd_bytes``): then no arrival went unreported;
* a failed probe: when RACK declares a packet lost and its EV has shown no
  such order evidence, one EV probe (a control packet, at the switches'
  header priority, so no data queue delays it) goes out on the EV; no answer
  within a probe wait blames it;
* a timeout (the local ACK timeout) blames the EV of the timed-out packet.

A packet declared lost by RACK while it still sits in a queue, or whose
resend waits for the window, therefore blames nobody: the queued original is
acknowledged (or trimmed and NACKed), and the probe comes back.  ECN echoes
and non-last-hop trims make the EV SKIP.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final, cast

from ..wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)
from .paths import EVState
from .qpbase import Fifo
from .sendop import SendOp
from .txtable import (
    ACK_REQ,
    DUP_RISK,
    EV_BITS,
    IN_FLIGHT,
    NAMED,
    OOW,
    ORDERED,
    PROBED,
    RESENT,
    TX_CLASS,
    AckRun,
    EvOrderLike,
    TxTableLike,
    new_ev_order,
    new_tx_table,
)
from .verbs import WCStatus

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

    from .attrs import QPAttr
    from .cc import CongestionControl
    from .paths import PathSet
    from .qpbase import QPBase, QPStats

_MASK64: Final = (1 << 64) - 1

# The TxTable and EvOrder methods of the per-packet path, unbound (C statics when
# compiled): ``_tx_op(table, psn)`` is ``table.op(psn)`` without looking ``op`` up
# by name on every call (see txtable.TX_CLASS).
_tx_op: Final = cast("Callable[[TxTableLike, int], SendOp | None]", TX_CLASS.op)
_tx_ev: Final = cast("Callable[[TxTableLike, int], int]", TX_CLASS.ev)
_tx_sent: Final = cast("Callable[[TxTableLike, int], int]", TX_CLASS.sent)
_tx_flags: Final = cast("Callable[[TxTableLike, int], int]", TX_CLASS.flags)
# (the send time taken as an object: _emit passes the driver's when it has one)
_tx_send: Final = cast(
    "Callable[[TxTableLike, int, int, object, int, EvOrderLike], None]", TX_CLASS.send
)
_tx_add_send: Final = cast(
    "Callable[[TxTableLike, int, SendOp, int, object, int, EvOrderLike], None]", TX_CLASS.add_send
)
_tx_take: Final = cast(
    "Callable[[TxTableLike, int, EvOrderLike], tuple[SendOp, int, int] | None]", TX_CLASS.take
)
_tx_ack: Final = cast(
    "Callable[[TxTableLike, int, int, int, int, EvOrderLike], AckRun]", TX_CLASS.ack
)
_tx_remove: Final = cast("Callable[[TxTableLike, int, bool], None]", TX_CLASS.remove)
_tx_land: Final = cast("Callable[[TxTableLike, int], int]", TX_CLASS.land)
_tx_oldest: Final = cast("Callable[[TxTableLike], int]", TX_CLASS.oldest)
_tx_after: Final = cast("Callable[[TxTableLike, int], int]", TX_CLASS.after)
# (the timeout and cap it takes as objects: boxed once, see Requester.timeout_o)
_tx_rto_at: Final = cast("Callable[[TxTableLike, object, int, object], int]", TX_CLASS.rto_at)

#: ACK events with measured reordering before the reordering estimate sets
#: RACK's window: a QP's first window meets the start-up queues (every QP of
#: a collective starting at once) before it has measured anything, so until
#: then the window is one smoothed RTT (RACK's cap).
REO_SAMPLES: Final = 8

#: With ACK proof on (:meth:`Requester.require_ack_proof`, the real network):
#: how many of the newest send timestamps a SACK may echo.  An echo of an older
#: packet is refused like a forged one (a later SACK carries the same cumulative
#: news), so memory stays bounded.
ACK_PROOF_KEEP: Final = 65536

#: With ACK proof on: how many of the newest EV-probe timestamps a probe reply
#: may echo (each at most once).  The probes of a QP are bounded (a budget per
#: probe interval), so 4096 cover seconds of them; a reply to an older probe is
#: refused like a forged one (the EV is probed again).
PROBE_PROOF_KEEP: Final = 4096
#: The stamp orders of every requester without ACK proof (stamps are made only
#: with it on): empty, never appended to.
_NO_STAMPS: Final[deque[int]] = deque()

#: The longest retransmission timeout, however many times it doubled: the
#: largest local ACK timeout the QP attribute can express (t = 24: 1.024 us x
#: 2^24 = 17.2 s), as a NIC's timer is bounded by that attribute.  Past it, a QP
#: retrying forever would wait days between attempts (2^30 x its base).
RTO_CAP_PS: Final = 1_024_000 << 24
#: RTO_CAP_PS as an object (boxed once: get_timer passes it to TxTable.rto_at).
_RTO_CAP_O: Final[object] = RTO_CAP_PS

#: Bitmap windows of one ACK event (the SACKs echoing one timestamp) kept for
#: the order evidence (see :meth:`Requester._reported_missing`); a receiver sends
#: one or two, and a SACK beyond these is no evidence about the PSNs it covers.
ACK_WINDOWS: Final = 4

#: Overdue packets (past the gap allowance, not yet past RACK's window) looked
#: at per loss-detection pass for EV probing: bounds the pass's cost while
#: many packets sit in queues.
PROBE_SCAN: Final = 8

#: NACK reasons that end the QP, and the status the failed work request gets.
FATAL_NACKS: dict[NackReason, WCStatus] = {
    NackReason.REMOTE_ACCESS_ERROR: WCStatus.REM_ACCESS_ERR,
    NackReason.NO_RESOURCE: WCStatus.RNR_RETRY_EXC_ERR,
    NackReason.INVALID_REQUEST: WCStatus.REM_INV_REQ_ERR,
    NackReason.QP_NOT_READY: WCStatus.REM_OP_ERR,
}


class Requester:
    """Send-side state of one QP."""

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    inflight: int
    mtu: int
    retx: Fifo[int]
    to_segment: Fifo[SendOp]
    unacked: TxTableLike
    cc: CongestionControl
    next_psn: int
    paths: PathSet
    snd_una: int
    last_activity: int
    qp: QPBase
    sent_ts: dict[int, int] | None
    ev_sent: EvOrderLike
    stats: QPStats
    window_psns: int
    port_blocked: bool
    window_probe_out: bool
    acked_bytes: int
    srtt: int
    unreported: dict[int, tuple[int, int]]
    rack_deadline: int | None
    reo_floor: int
    rack_rtt: int
    rack_xmit: int
    min_rtt: int
    ops: Fifo[SendOp]
    sack_late: int
    timeout_o: object
    retry_linear: int
    held: set[int]
    ack_ts: int
    sack_spurious: int
    last_sample_ts: int
    newest_rcvd: int
    reo_mean: int
    reo_dev: int
    reo_samples: int
    next_msn: int
    ack_windows: list[int]
    ack_cack: int
    gaps: dict[tuple[int, int], tuple[int, int]]
    ev_probes: dict[int, tuple[int, int, int, int, int, bool]]
    reo_steps: int
    sacked_imm_last: dict[int, tuple[int, SendOp]]
    wimm_outstanding: int
    flight_ack_reqs: int
    unreported_gaps: int
    probe_rtt: int
    probe_dev: int
    probe_samples: int
    gap_blames: int
    probe_blames: int
    suspect_probes: int
    spurious_at: int
    tlp_at: int | None
    probe_seq: int
    group_ts: int
    group_cack: int
    group_base: int
    replayed_acks: int
    catchup_at: int
    sent_order: deque[int]
    ts_rng: random.Random | None
    last_stamp: int
    forged_acks: int
    probe_ts: dict[int, int]
    probe_order: deque[int]
    forged_probe_replies: int
    plane_mask: int
    timeout_ps: int
    max_retries: int | None

    def __init__(self, qp: QPBase) -> None:
        self.qp = qp
        attr = qp.attr
        self.mtu = attr.mtu
        self.apply_attr(attr)
        assert qp.paths is not None and qp.cc is not None, "the requester starts after RTR"
        self.paths: PathSet = qp.paths
        self.cc: CongestionControl = qp.cc
        self.stats = qp.stats
        self.next_psn = 0
        self.next_msn = 0
        self.snd_una = 0
        self.ops: Fifo[SendOp] = Fifo()  # posted, not yet completed, in order
        self.to_segment: Fifo[SendOp] = Fifo()  # posted, not yet fully segmented
        #: the PSNs sent and not yet acknowledged: their message, last transmission
        #: (EV, send time), timeouts and flags, and which are in flight, in send
        #: order (a retransmission goes last).
        self.unacked: TxTableLike = new_tx_table()
        #: PSNs to resend, in order (one may be acknowledged before its turn).
        self.retx: Fifo[int] = Fifo()
        #: last packets of WRITE_IMM messages acknowledged selectively but not yet
        #: cumulatively, PSN -> (send time of the transmission acknowledged, its
        #: message): the responder may still refuse such a message (no receive,
        #: found when it completes in order) with a NACK naming one.
        self.sacked_imm_last: dict[int, tuple[int, SendOp]] = {}
        self.inflight = 0
        #: packets in flight that asked for an immediate ACK.
        self.flight_ack_reqs = 0
        #: a reliability probe went out because the window closed with no ACK
        #: requested in flight; cleared by the next SACK or NACK.
        self.window_probe_out = False
        #: PSNs held after a PSN_OUT_OF_WINDOW NACK (see txtable.OOW).
        self.held: set[int] = set()
        self.wimm_outstanding = 0
        base_rtt = attr.cc_profile.base_rtt_ps
        self.srtt = base_rtt
        self.min_rtt = base_rtt
        self.rack_rtt = base_rtt
        self.rack_xmit = -1
        #: the timestamp echo of the last RTT sample taken (one per ACK event)
        self.last_sample_ts = -1
        self.rack_deadline: int | None = None
        #: per EV, its transmissions (PSN, send time) not yet resolved, in send
        #: order: the order evidence of loss on that EV (see :meth:`_on_order`).
        self.ev_sent: EvOrderLike = new_ev_order()
        #: transmissions overtaken on their own EV, (PSN, send time) -> (EV, when
        #: the EV is blamed if the PSN is still unacknowledged and not NACKed).
        self.gaps: dict[tuple[int, int], tuple[int, int]] = {}
        #: what the ACK event being processed (the SACKs echoing timestamp
        #: ``ack_ts``) reports as received: every PSN below ``ack_cack``, and per
        #: bitmap window its first PSN and its bits (flat pairs, at most
        #: ACK_WINDOWS): a gap needs that event to report the earlier packet missing.
        self.ack_ts = -1
        self.ack_cack = -1
        self.ack_windows: list[int] = []
        #: transmissions overtaken on their EV that the acknowledging SACKs did
        #: not report missing (their own SACK may have been lost), PSN -> (send
        #: time, EV): gaps once a SACK shows that nothing placed went unreported
        #: (see :meth:`_confirm_unreported`); dropped when acknowledged or NACKed.
        self.unreported: dict[int, tuple[int, int]] = {}
        self.unreported_gaps = 0
        #: payload bytes of the PSNs acknowledged so far, and the most the receiver
        #: has said it placed (``SackPacket.rcvd_bytes``, which grows with time).
        self.acked_bytes = 0
        self.newest_rcvd = -1
        #: EV probes out on EVs RACK suspects: EV -> (probe seq, answer deadline,
        #: the overdue PSN, the send time of its transmission on the EV, the
        #: probe's send time, and whether that transmission is known to have
        #: arrived: set when the PSN is acknowledged, see :meth:`_settle_probes`).
        self.ev_probes: dict[int, tuple[int, int, int, int, int, bool]] = {}
        #: round trips of answered EV probes: mean and mean deviation (EWMA,
        #: gains 1/8 and 1/4), and how many were measured (see probe_wait).
        self.probe_rtt = 0
        self.probe_dev = 0
        self.probe_samples = 0
        #: EVs blamed on order evidence, on unanswered probes; probes sent.
        self.gap_blames = 0
        self.probe_blames = 0
        self.suspect_probes = 0
        #: RACK reordering window multiplier: grows on each spurious
        #: retransmission (the network reorders more than assumed).
        self.reo_steps = 1
        self.spurious_at = -1
        #: within one SACK: retransmissions found spurious, and the largest lateness
        #: of an original delivered after a later-sent packet (see :meth:`_ack_sacked`).
        self.sack_spurious = 0
        self.sack_late = 0
        #: the reordering this QP has seen, in ps: mean and mean deviation
        #: (EWMA, gains 1/8 and 1/4) of how far past ``sent + rack_rtt`` a
        #: packet was acknowledged after a packet sent later (RACK's own rule,
        #: measured on packets that were late but not lost).  The window
        #: follows it (see reo_window).
        self.reo_mean = 0
        self.reo_dev = 0
        #: ACK events that measured reordering so far (the estimate is trusted
        #: from REO_SAMPLES on; until then the window is one smoothed RTT).
        self.reo_samples = 0
        self.last_activity = 0
        self.tlp_at: int | None = None
        self.probe_seq = 0
        #: set when the last next_packet() found only busy planes' EVs usable.
        self.port_blocked = False
        # ACK proof (off in the simulator; see require_ack_proof): send timestamp
        # -> what it proves, for the newest ACK_PROOF_KEEP packets sent: the EV it
        # went on (bits 0-31), whether a SACK already used it (bit 32), and the
        # next PSN when it was sent (bits 33 up: a SACK echoing it acknowledges
        # nothing from there on).
        self.sent_ts: dict[int, int] | None = None
        #: the multi-SACK group being taken: its echo, cumulative ACK and the
        #: highest bitmap base so far (its later SACKs may reuse the echo).
        self.group_ts = -1
        self.group_cack = -1
        self.group_base = -1
        #: SACKs refused for echoing a stamp another SACK already used.
        self.replayed_acks = 0
        #: when a SACK bound to an older packet last asked for a newer one.
        self.catchup_at = -(1 << 62)
        #: (with ACK proof on, this QP's own; until then one shared, never appended
        #: to: a deque holds a 600-byte block even empty, per QP of the fabric)
        self.sent_order: deque[int] = _NO_STAMPS
        self.ts_rng: random.Random | None = None
        self.last_stamp = 0
        #: SACKs refused for lack of proof (no echo of a packet sent on their EV).
        self.forged_acks = 0
        # Probe-reply proof (with ACK proof on): EV-probe timestamp -> its EV,
        # for the newest PROBE_PROOF_KEEP EV probes not yet answered.
        self.probe_ts: dict[int, int] = {}
        self.probe_order: deque[int] = _NO_STAMPS  # (as sent_order)
        #: Probe replies refused for lack of proof (no echo of an EV probe this
        #: QP sent on their EV, or one already answered).
        self.forged_probe_replies = 0
        #: bitmask of the planes this QP's EVs use (0: not computed yet).
        self.plane_mask = 0

    def apply_attr(self, attr: QPAttr) -> None:
        """Take the send-side attributes (at RTS, and again on RTS -> RTS)."""
        self.window_psns = attr.send_window_psns
        self.timeout_ps = attr.timeout_ps
        #: timeout_ps as an object, boxed once here: get_timer passes it to
        #: TxTable.rto_at (compiled, an int re-boxed per call is an allocation)
        self.timeout_o: object = attr.timeout_ps
        self.retry_linear = attr.retry_linear
        self.max_retries = None if attr.retries_infinite else attr.retry_linear + attr.retry_exp
        self.reo_floor = attr.reorder_window_ps

    # -- output ---------------------------------------------------------------------
    def has_work(self) -> bool:
        """True when a retransmission or new data is waiting (window permitting)."""
        return self.retx.count > 0 or self.to_segment.count > 0

    def next_packet(self, now: int, busy: int = 0, now_o: object = None) -> DataPacket | None:
        """The next data packet to transmit, or None (nothing to send, or window full).

        ``busy``: bitmask of planes whose port cannot take a packet now (see
        :meth:`PathSet.next_ev`); when only busy planes are usable, returns None
        and sets :attr:`port_blocked`.  ``now_o``: ``now`` as an object, or None
        (see :meth:`Context.poll`).
        """
        self.port_blocked = False
        retx = self.retx
        unacked = self.unacked
        while retx.count:  # (Fifo.count: len() compiled is a call)
            psn = retx.first()
            sop = _tx_op(unacked, psn)
            if sop is None:  # acknowledged meanwhile
                retx.popleft()
                continue
            length = sop.length_of(psn, self.mtu)
            if self.inflight and self.inflight + length > self.cc.cwnd:
                self._window_blocked(now)
                return None
            ev = self.paths.other_ev(_tx_ev(unacked, psn), busy)
            if ev < 0:
                self.port_blocked = True
                return None
            retx.popleft()
            return self._emit(psn, sop, length, ev, now, True, now_o)
        to_segment = self.to_segment
        if not to_segment.count:
            return None
        op = to_segment.first()
        psn = self.next_psn
        if psn - self.snd_una >= self.window_psns:
            self.stats.window_stalls += 1
            return None
        offset = op.segmented * self.mtu
        length = min(self.mtu, op.total - offset)
        if self.inflight and self.inflight + length > self.cc.cwnd:
            self._window_blocked(now)
            return None
        ev = self.paths.next_ev(busy)
        if ev < 0:
            self.port_blocked = True
            return None
        idx = op.segmented
        if idx == 0:
            op.first_psn = psn
        op.segmented = idx + 1
        if idx == op.npkts - 1:
            to_segment.popleft()
        # (its record is made by _emit with its transmission's: one table call)
        self.next_psn = psn + 1
        return self._emit(psn, op, length, ev, now, False, now_o)

    def _window_blocked(self, now: int) -> None:
        """The window is full: make sure an ACK is coming to open it.

        Packets sent while the window was wide did not ask for an ACK, and the
        receiver coalesces ACKs (16 KiB): when trims then shrink the window to
        a few packets, what is in flight may never trigger an ACK and nothing
        else would move until the retransmission timeout.  So when no packet in
        flight asked for an ACK, one reliability probe (no PSN) asks for a SACK.
        """
        if self.flight_ack_reqs or self.window_probe_out or not self.unacked.flying():
            return
        self.window_probe_out = True
        self.stats.window_probes += 1
        self.qp.queue_control(self.probe(now, reliability=True))

    def _emit(
        self,
        psn: int,
        op: SendOp,
        length: int,
        ev: int,
        now: int,
        retransmit: bool,
        now_o: object = None,
    ) -> DataPacket:
        """Send (or resend) ``psn`` of ``op`` (``length`` bytes) on ``ev`` now; a new
        ``psn`` (not ``retransmit``) gets its record in :attr:`unacked` here.
        ``now_o``: ``now`` as an object, or None."""
        if self.sent_ts is not None:
            now = self._stamp(now, ev)
            now_o = None  # (the stamp, not the driver's time)
        self.inflight += length
        opcode = op.opcode_of(psn)
        last = psn - op.first_psn == op.npkts - 1  # (opcode in LAST_OPCODES, no set look-up)
        # Ask for an ACK at once when this packet fills the window (or is the
        # last thing to send): coalescing at the receiver would otherwise hold
        # the only ACK that can open the window, and the sender would stall
        # until its timeout.
        ack_req = (
            retransmit
            or last
            or not (self.retx.count or self.to_segment.count)
            or self.inflight + self.mtu > self.cc.cwnd
        )
        # (its flags: PROBED and ACK_REQ are this transmission's, the rest carried on)
        flags = 0  # (a new PSN has none)
        if retransmit:
            flags = _tx_flags(self.unacked, psn) & ~(PROBED | ACK_REQ) | RESENT
        if ack_req:
            flags |= ACK_REQ
            self.flight_ack_reqs += 1
        # the transmission's record and its place on its EV's order, in one call (a
        # new PSN's record made in the same call)
        # (the send time as the driver's object when given: compiled, ``now`` boxed
        # for the call is an allocation)
        sent_o: object = now if now_o is None else now_o
        if retransmit:
            _tx_send(self.unacked, psn, ev, sent_o, flags, self.ev_sent)
        else:
            _tx_add_send(self.unacked, psn, op, ev, sent_o, flags, self.ev_sent)
        offset = (psn - op.first_psn) * self.mtu
        pkt = DataPacket(
            self.qp.remote_qpn,
            ev,
            opcode,
            psn,
            op.msn,
            op.remote_addr + offset,
            op.rkey,
            length,
            None if op.virtual else op.gather(offset, length),
            op.imm if last else None,
            now,
            retransmit,
            ack_req,
            op.is_imm,
        )
        stats = self.stats
        stats.tx_data_packets += 1
        stats.tx_data_bytes += length
        if retransmit:
            stats.retransmits += 1
        self.last_activity = now
        return pkt

    def probe(self, now: int, reliability: bool, ev: int | None = None) -> ProbePacket:
        """A probe (no PSN): on ``ev`` for an EV probe, on the rotation for a reliability one."""
        seq = self.probe_seq
        self.probe_seq = seq + 1
        if ev is None:
            ev = self.paths.next_ev()
        self.stats.probes_sent += 1
        if self.sent_ts is None:
            ts = now
        elif reliability:
            ts = self._stamp(now, ev)  # answered by a SACK: proven as SACKs are
        else:
            ts = self._stamp_probe(now, ev)
        return ProbePacket(self.qp.remote_qpn, ev, seq, ts, reliability)

    # -- ACK proof (the real network) -------------------------------------------------
    def require_ack_proof(self, rng: random.Random) -> None:
        """Accept a SACK only when it echoes the timestamp of a packet this QP sent
        on the SACK's EV (a real NIC's check; the network driver turns it on).

        Every packet sent from now on carries ``now`` plus a random sub-nanosecond
        part from ``rng`` (10 bits, < 1.024 ns: no RTT changes measurably), unique
        and increasing per QP; the newest :data:`ACK_PROOF_KEEP` are remembered
        with their EV.  An off-path sender must guess a timestamp to the
        picosecond *and* its EV.  Off in the simulator, whose results stay as
        they were (every SACK there is genuine).
        """
        self.sent_ts = {}
        self.sent_order = deque()
        self.probe_order = deque()
        self.ts_rng = rng

    def _stamp(self, now: int, ev: int) -> int:
        """The timestamp of a packet sent now on ``ev``, remembered for the proof."""
        rng = self.ts_rng
        sent = self.sent_ts
        assert rng is not None and sent is not None
        ts = now + rng.getrandbits(10)
        if ts <= self.last_stamp:
            ts = self.last_stamp + 1
        self.last_stamp = ts
        sent[ts] = self.next_psn << 33 | ev
        order = self.sent_order
        order.append(ts)
        if len(order) > ACK_PROOF_KEEP:
            del sent[order.popleft()]
        return ts

    def _stamp_probe(self, now: int, ev: int) -> int:
        """The timestamp of an EV probe sent now on ``ev``: unique and increasing
        like every stamp, remembered (not with the data stamps: only a probe
        reply may echo it, once) for :meth:`probe_proven`."""
        rng = self.ts_rng
        assert rng is not None
        ts = now + rng.getrandbits(10)
        if ts <= self.last_stamp:
            ts = self.last_stamp + 1
        self.last_stamp = ts
        self.probe_ts[ts] = ev
        order = self.probe_order
        order.append(ts)
        if len(order) > PROBE_PROOF_KEEP:
            self.probe_ts.pop(order.popleft(), None)
        return ts

    def probe_proven(self, reply: ProbeReplyPacket) -> bool:
        """True when ``reply`` may change state: with ACK proof on, it must echo the
        timestamp of an EV probe this QP sent on the reply's EV and not yet
        answered (the stamp is then used up).  A refused reply is counted in
        :attr:`forged_probe_replies` and the QP's ``rx_invalid``."""
        if self.sent_ts is None:
            return True
        stamps = self.probe_ts
        if stamps.get(reply.ts_echo, -1) != reply.ev:
            self.forged_probe_replies += 1
            self.stats.rx_invalid += 1
            return False
        del stamps[reply.ts_echo]  # once: a replay of this reply is refused
        return True

    def ack_limit(self, sack: SackPacket) -> int:
        """How far ``sack`` may acknowledge: the PSN it may not reach (-1: refused).

        With ACK proof off, :attr:`next_psn`.  With it on, the SACK must echo
        the timestamp of a packet this QP sent and carry that packet's EV (so
        its port-status bits and EV feedback are about a path really used), and
        it acknowledges nothing sent after that packet: the limit is the next
        PSN when it was stamped (a new data packet's own PSN + 1).  Each echo
        is taken once; only the later SACKs of the same multi-SACK group (the
        same echo and cumulative ACK, a higher bitmap base) may reuse it.  A
        refused SACK is counted in :attr:`forged_acks` (a reused echo also in
        :attr:`replayed_acks`).
        """
        sent = self.sent_ts
        if sent is None:
            return self.next_psn
        ts = sack.ts_echo
        v = sent.get(ts, -1)
        if v < 0 or v & 0xFFFFFFFF != sack.ev:
            self.forged_acks += 1
            return -1
        if v >> 32 & 1:
            if (
                ts != self.group_ts
                or sack.cack != self.group_cack
                or sack.sack_base <= self.group_base
            ):
                self.forged_acks += 1
                self.replayed_acks += 1
                return -1
        else:
            sent[ts] = v | 1 << 32
            self.group_ts = ts
            self.group_cack = sack.cack
        self.group_base = sack.sack_base
        return v >> 33

    def _take_port_status(self, sack: SackPacket) -> None:
        """Take the peer's ports-down bitmap from a (proven) SACK.

        The plane this SACK came back on is up whatever the bitmap says, and no
        bitmap, forged or stale, may leave no usable plane: if the planes down
        here, denied, and down at the peer would cover every plane this QP
        uses, the bitmap is ignored.
        """
        paths = self.paths
        down = sack.ports_down & ~(1 << (sack.ev & 15))
        if down == paths.remote_down:
            return
        if down:
            planes = self.plane_mask
            if not planes:
                for ev in paths.known_evs():
                    planes |= 1 << (ev & 15)
                self.plane_mask = planes
            if not planes & ~(down | paths.local_down | paths.denied_planes):
                self.stats.rx_invalid += 1
                return
        paths.set_ports_down(remote=down)

    # -- input ----------------------------------------------------------------------
    def on_sack(self, sack: SackPacket, now: int) -> None:
        """Process a cumulative + selective ACK."""
        stats = self.stats
        next_psn = self.next_psn
        cack = sack.cack
        if cack > next_psn or sack.sack_base < cack:
            stats.rx_invalid += 1
            return
        if self.sent_ts is not None:
            # Proven, and bound to what it answers: nothing sent after the
            # packet whose stamp it echoes is acknowledged by it.
            next_psn = self.ack_limit(sack)
            if next_psn < 0:
                stats.rx_invalid += 1
                return
            if cack > next_psn:
                # The receiver's cumulative point passed the echoed packet: the
                # later packets arrived first.  Take it only over PSNs a proven
                # SACK already acknowledged selectively (so a WRITE_IMM whose
                # last packet overtook the echoed one still completes).
                unacked = self.unacked
                limit = next_psn
                while limit < cack and limit not in unacked:
                    limit += 1
                if limit < cack and now - self.catchup_at >= self.min_rtt:
                    # Some of what the receiver holds is not proven yet: a
                    # reliability probe asks for a SACK that echoes a newer stamp
                    # (at most one per minimum RTT).
                    self.catchup_at = now
                    self.stats.window_probes += 1
                    self.qp.queue_control(self.probe(now, reliability=True))
                cack = limit
        stats.rx_sacks += 1
        self.window_probe_out = False
        newly = 0
        ts = sack.ts_echo
        windows = self.ack_windows
        if ts != self.ack_ts or cack != self.ack_cack:
            self.ack_ts = ts
            self.ack_cack = cack
            windows.clear()
        # (its low 64 bits are the bitmap: TxTable.ack and _reported_missing read no
        # other, so no mask here, a boxed-int operation per SACK)
        bitmap = sack.bitmap
        if len(windows) < 2 * ACK_WINDOWS:
            windows.append(sack.sack_base)
            windows.append(bitmap)
        self.sack_spurious = 0
        # RACK's lateness of packets delivered after later-sent ones (originals
        # still in flight only: a retransmission's send time says nothing).
        late_base = now - self.rack_rtt
        rack_xmit = self.rack_xmit
        self.sack_late = 0
        # (runs of plain PSNs of one message in one call each, the others one by one:
        # see TxTable.ack, TxTable.take and _on_order)
        base = sack.sack_base
        if cack > self.snd_una:
            if self.held:
                # held PSNs the new cumulative point lets in go before the bitmap's
                newly = self._ack_psns(cack, 0, 0, 0, now, late_base, rack_xmit)
                self.snd_una = cack
                if self.held:  # (unless the acknowledged PSNs were all it held)
                    self._release_oow(now)
                newly += self._ack_psns(0, base, bitmap, next_psn, now, late_base, rack_xmit)
            else:
                newly = self._ack_psns(cack, base, bitmap, next_psn, now, late_base, rack_xmit)
                self.snd_una = cack
        elif bitmap:
            newly = self._ack_psns(0, base, bitmap, next_psn, now, late_base, rack_xmit)
        self._note_reordering(self.sack_late)
        spurious = self.sack_spurious
        if spurious:
            # The PSN was acknowledged sooner after its retransmission than any
            # round trip takes: the original arrived, late.  Widen the reordering
            # window (at most once per RTT, up to one smoothed RTT) as RACK does.
            stats.spurious_retransmits += spurious
            if now - self.spurious_at >= self.srtt and self.reo_steps < 16:
                self.reo_steps += 1
                self.spurious_at = now
        sample: int | None = None
        if 0 < ts <= now and ts != self.last_sample_ts:
            # One RTT sample per ACK event: the other SACKs of a multi-SACK group
            # echo the same timestamp and carry no new sample.
            self.last_sample_ts = ts
            rtt = sample = now - ts
            self.srtt += (rtt - self.srtt) >> 3
            if rtt < self.min_rtt:
                self.min_rtt = rtt
            if ts > self.rack_xmit:
                self.rack_xmit = ts
                self.rack_rtt = rtt
        if sack.rcvd_bytes >= self.newest_rcvd:
            self.newest_rcvd = sack.rcvd_bytes
            if self.unreported and sack.rcvd_bytes == self.acked_bytes:
                self._confirm_unreported(now)
        self._take_port_status(sack)
        if sack.ecn_seen:
            self.paths.on_ecn(sack.ev, now)
            stats.ecn_echoes += 1
        else:
            self.paths.on_clean_ack(sack.ev)
        self.cc.on_ack(newly, sample, sack.ecn_seen, self.inflight, now)
        if sack.penalty:
            self.cc.on_penalty(sack.penalty, newly, now)
        self.last_activity = now
        self._detect_losses(now)
        self.qp.complete_sends()
        if len(self.retx) or len(self.to_segment):
            self.qp.wake()  # the window may have opened

    def _ack_psns(
        self,
        stop: int,
        base: int,
        bitmap: int,
        limit: int,
        now: int,
        late_base: int,
        rack_xmit: int,
    ) -> int:
        """Acknowledge what a SACK reports, in order: the outstanding PSNs from
        ``snd_una`` up to ``stop`` (its cumulative ACK, when it moved), then those
        ``base + k`` for the set bits ``k`` of its ``bitmap`` (below ``2**64``) below
        ``limit``; return their bytes.  Runs of plain PSNs of one message go in one
        :meth:`TxTable.ack` call each (:meth:`_ack_run`), the others one by one
        (:meth:`_ack_sacked`); every PSN one by one while transmissions wait in
        ``unreported``, or from ``snd_una`` while WRITE_IMM last packets wait in
        ``sacked_imm_last`` (each PSN acknowledged must leave those)."""
        unacked = self.unacked
        order = self.ev_sent
        sacked = self.sacked_imm_last
        newly = 0
        if sacked and stop > self.snd_una:
            newly = self._ack_one_by_one(stop, 0, 0, 0, now, late_base, rack_xmit)
            stop = 0
        while not self.unreported:
            run = _tx_ack(unacked, stop, base, bitmap, limit, order)
            op = run[0]
            if op is not None:
                newly += self._ack_run(op, run, stop, late_base, rack_xmit)
            psn = run[6]
            if psn < 0:
                return newly
            if op is None:
                # (outstanding, and the run stopped for it: not a plain PSN)
                got = _tx_take(unacked, psn, order)
                assert got is not None
                op, word, sent = got
                if psn >= stop and op.is_imm and op.is_last(psn):
                    sacked[psn] = (sent, op)
                newly += self._ack_sacked(psn, op, word, sent, now, late_base, rack_xmit)
        return newly + self._ack_one_by_one(stop, base, bitmap, limit, now, late_base, rack_xmit)

    def _ack_one_by_one(
        self,
        stop: int,
        base: int,
        bitmap: int,
        limit: int,
        now: int,
        late_base: int,
        rack_xmit: int,
    ) -> int:
        """:meth:`_ack_psns` one PSN at a time (the PSNs acknowledged already are
        skipped)."""
        bitmap &= _MASK64
        unacked = self.unacked
        order = self.ev_sent
        newly = 0
        if stop > self.snd_una:
            sacked = self.sacked_imm_last
            for psn in range(self.snd_una, stop):
                if sacked:
                    sacked.pop(psn, None)
                got = _tx_take(unacked, psn, order)
                if got is not None:
                    op, word, sent = got
                    newly += self._ack_sacked(psn, op, word, sent, now, late_base, rack_xmit)
        while bitmap:
            low = bitmap & -bitmap
            psn = base + low.bit_length() - 1
            bitmap ^= low
            if psn >= limit:
                break
            got = _tx_take(unacked, psn, order)
            if got is not None:
                op, word, sent = got
                if op.is_imm and op.is_last(psn):
                    self.sacked_imm_last[psn] = (sent, op)
                newly += self._ack_sacked(psn, op, word, sent, now, late_base, rack_xmit)
        return newly

    def _ack_run(self, op: SendOp, run: AckRun, stop: int, late_base: int, rack_xmit: int) -> int:
        """Account a run :meth:`TxTable.ack` acknowledged (``run``, of message ``op``,
        whose PSNs below ``stop`` were acknowledged cumulatively) as
        :meth:`_ack_sacked` would each of its PSNs; return its bytes.  Every packet of
        a message is ``mtu`` long but its last (next_packet segments so), and a
        run's PSNs ascend: only the run's last may be shorter.  RACK's lateness is
        the largest for the earliest send time."""
        n = run[1]
        last = run[2]
        mtu = self.mtu
        length = op.length_of(last, mtu) + (n - 1) * mtu
        self.acked_bytes += length
        self.inflight -= length
        self.flight_ack_reqs -= run[5]
        op.acked += n
        first_sent = run[4]
        if first_sent < rack_xmit and late_base - first_sent > self.sack_late:
            self.sack_late = late_base - first_sent
        if last >= stop and op.is_imm and op.is_last(last):
            self.sacked_imm_last[last] = (run[3], op)
        return length

    def _ack_sacked(
        self, psn: int, op: SendOp, word: int, sent: int, now: int, late_base: int, rack_xmit: int
    ) -> int:
        """Acknowledge outstanding ``psn`` of ``op`` (cumulatively or selectively;
        ``word`` and ``sent``: its EV and flags, ``ev | flags << 32``, and send time
        as :meth:`TxTable.settle` gives them, ORDERED set when the transmission was
        the oldest on its EV, which settled it, see _on_order) and return its newly
        acked bytes; take the order evidence it gives on its EV, count a spurious
        retransmission, and note how late an original arrived behind a later-sent
        packet (RACK's reordering)."""
        flags = word >> 32
        if flags & IN_FLIGHT and not flags & (DUP_RISK | ORDERED):
            self._on_order(psn, word & EV_BITS, sent, now)
        early = False
        if flags & RESENT:
            if now - sent < self.min_rtt:
                self.sack_spurious += 1
                early = True
        elif flags & IN_FLIGHT and sent < rack_xmit and late_base - sent > self.sack_late:
            self.sack_late = late_base - sent
        if flags & NAMED:
            self._settle_probes(psn, sent, early)
        return self._ack(psn, op, flags)

    def gap_allowance(self) -> int:
        """How long an EV's overtaken packet may still be acknowledged or NACKed.

        Its SACK or NACK may come back on another reverse path than the ACK of
        the later packet: control packets travel at the switches' header
        priority, so the skew is small.  At least ``QPAttr.reorder_window_ps``
        and a quarter of the minimum RTT (RACK's least window).
        """
        quarter = self.min_rtt >> 2
        return quarter if quarter > self.reo_floor else self.reo_floor

    def probe_wait(self) -> int:
        """How long an EV probe sent on a suspect EV may take to be answered.

        A probe and its reply are control packets (header priority): they wait
        in no data queue, so their round trip is about the minimum RTT of a
        full-size packet plus a data packet's serialisation per hop, and the
        least wait is that plus half a minimum RTT (at least
        ``QPAttr.reorder_window_ps``).  But the hosts at either end may hold a
        control packet behind other QPs' packets (a NIC serving dozens of QPs),
        so the wait also covers the probe round trips this QP has measured,
        mean + 4 deviations (the first sample sets the deviation to an eighth
        of it); before any was measured, one smoothed RTT plus one minimum RTT.  A probe that is late on a working
        path blames nothing if the overdue packet it was sent for turns out to
        have arrived (see :meth:`_check_evidence`).
        """
        half = self.min_rtt >> 1
        margin = half if half > self.reo_floor else self.reo_floor
        least = self.min_rtt + margin
        if not self.probe_samples:
            early = self.srtt + (self.min_rtt if self.min_rtt > margin else margin)
            return early if early > least else least
        measured = self.probe_rtt + 4 * self.probe_dev
        return measured if measured > least else least

    def _on_order(self, psn: int, ev: int, sent: int, now: int) -> None:
        """``psn``'s one transmission (on ``ev``, at ``sent``) was acknowledged.

        Paths are FIFO: every transmission sent before it on the same EV
        arrived first, or was trimmed (and NACKed), or was lost.  Those still
        unacknowledged that the acknowledging ACK event reports missing
        (:meth:`_reported_missing`) become *gaps*: unless their ACK or NACK
        comes within :meth:`gap_allowance`, the EV lost them (see
        :meth:`_check_evidence`).  One the event says nothing about arrived
        for all the sender knows, its SACK lost: it blames nobody (RACK and an
        EV probe still deal with it).  (When it was the oldest on its EV there is
        nothing before it: :meth:`TxTable.settle` found that and dropped it, and
        this is not called.)
        """
        order = self.ev_sent
        before = order.take_through(ev, psn, sent)
        if before is None:
            return
        unacked = self.unacked
        gaps = self.gaps
        due = -1
        for i in range(0, len(before), 2):
            if before[i] in unacked:
                if not self._reported_missing(before[i]):
                    self.unreported_gaps += 1
                    self.unreported[before[i]] = (before[i + 1], ev)
                    continue
                if due < 0:
                    due = now + self.gap_allowance()
                    if self.rack_deadline is None or due < self.rack_deadline:
                        self.rack_deadline = due
                gaps[(before[i], before[i + 1])] = (ev, due)
        self.ev_probes.pop(ev, None)  # the EV delivers: no probe needed

    def _reported_missing(self, psn: int) -> bool:
        """True when the ACK event being processed reports ``psn`` not received:
        it is the cumulative point (the first PSN missing) or a clear bit of one
        of the event's bitmap windows.  A PSN above the cumulative point and
        outside every window may have been reported by a SACK that was lost."""
        cack = self.ack_cack
        if psn <= cack:
            return psn == cack
        windows = self.ack_windows
        for i in range(0, len(windows), 2):
            off = psn - windows[i]
            if 0 <= off < 64:
                return not (windows[i + 1] >> off) & 1
        return False

    def _confirm_unreported(self, now: int) -> None:
        """The newest SACK yet says the receiver placed exactly the bytes this QP
        knows acknowledged: every PSN it placed was reported, so the overtaken
        transmissions still unacknowledged are missing (a lost SACK cannot hide
        one now); they become gaps.  Zero-length PSNs prove nothing this way."""
        unacked = self.unacked
        due = now + self.gap_allowance()
        for psn, (sent, ev) in self.unreported.items():
            op = unacked.op(psn)
            if op is not None and op.length_of(psn, self.mtu) > 0:
                self.gaps[(psn, sent)] = (ev, due)
                if self.rack_deadline is None or due < self.rack_deadline:
                    self.rack_deadline = due
        self.unreported.clear()

    def _settle_probes(self, psn: int, sent: int, early: bool) -> None:
        """``psn``, named by an EV probe, is acknowledged (last sent at ``sent``;
        ``early``: sooner after its retransmission than a round trip, so an earlier
        transmission arrived): a probe whose overdue transmission is that one, or
        an earlier one when ``early``, is settled as arrived (no blame when it is
        due, see :meth:`_check_evidence`)."""
        probes = self.ev_probes
        for ev, (seq, due, named, named_sent, at, arrived) in list(probes.items()):
            if named == psn and not arrived and (sent == named_sent or early):
                probes[ev] = (seq, due, named, named_sent, at, True)

    def _ack(self, psn: int, op: SendOp, flags: int) -> int:
        """Forget outstanding ``psn`` of ``op`` (``flags``: its flags), acknowledged;
        return its length."""
        if flags & OOW:
            self.held.discard(psn)
        if self.unreported:
            self.unreported.pop(psn, None)
        length = op.length_of(psn, self.mtu)
        self.acked_bytes += length
        in_flight = flags & IN_FLIGHT != 0
        if in_flight:
            self.inflight -= length
            if flags & ACK_REQ:
                self.flight_ack_reqs -= 1
        _tx_remove(self.unacked, psn, in_flight)
        op.acked += 1
        return length

    def _note_reordering(self, late: int) -> None:
        """Fold one ACK event's largest lateness into the reordering estimate."""
        if late <= 0:
            return
        self.reo_samples += 1
        err = late - self.reo_mean
        self.reo_mean += err >> 3
        # (abs() of an int is a generic call compiled)
        self.reo_dev += ((err if err >= 0 else -err) - self.reo_dev) >> 2

    def _reo_measured(self) -> int:
        """The floor and the measured reordering, without start-up or spurious widening."""
        reo = self.reo_floor
        quarter = self.min_rtt >> 2
        if quarter > reo:
            reo = quarter
        measured = self.reo_mean + 4 * self.reo_dev
        return measured if measured > reo else reo  # max() of three: not compiled inline

    def reo_window(self) -> int:
        """RACK's reordering window now, in ps.

        At least ``QPAttr.reorder_window_ps`` and min RTT / 4 (RACK's default),
        and at least the reordering this QP has measured, mean + 4 deviations
        (spraying's reordering is the queueing-delay spread between paths: it
        is measured, not guessed, so a short transfer's loss is resent a
        fraction of an RTT after it could be, not several RTTs).  Each spurious retransmission
        widens it one step more, up to one smoothed RTT above the floor.
        """
        reo = self._reo_measured()
        if self.reo_samples < REO_SAMPLES and reo < self.srtt:
            reo = self.srtt
        if self.reo_steps > 1:
            reo = min(reo * self.reo_steps, max(self.srtt, reo))
        return reo

    def _detect_losses(self, now: int) -> None:
        # (one assignment: mypyc trusts the type an attribute was narrowed to, and a
        # None stored before a call that stores an int would be read back as None)
        self.rack_deadline = self._check_evidence(now) if (self.gaps or self.ev_probes) else None
        rack_xmit = self.rack_xmit
        if rack_xmit < 0:
            return
        unacked = self.unacked
        psn = _tx_oldest(unacked)
        if psn < 0:
            return
        sent = _tx_sent(unacked, psn)
        if sent >= rack_xmit:
            return  # nothing in flight was sent before a delivered packet (most ACKs)
        reo = self.reo_window()
        horizon = self.rack_rtt + reo
        # A packet overdue by more than the gap allowance gets its EV probed
        # (cheap, and blames nothing while the path delivers) before RACK,
        # which waits for the whole reordering window, resends it: a dead path
        # is found about one probe round trip after its first loss is overdue.
        probe_h = self.rack_rtt + self.gap_allowance()
        lost: list[int] | None = None  # (made when the first is found: most ACKs find none)
        band = 0
        while True:  # psn in flight, sent before rack_xmit
            deadline = sent + horizon
            if deadline <= now:
                if lost is None:
                    lost = []
                lost.append(psn)
            else:
                if self.rack_deadline is None or deadline < self.rack_deadline:
                    self.rack_deadline = deadline
                due = sent + probe_h
                if due > now:
                    if due < self.rack_deadline:
                        self.rack_deadline = due
                    break
                if not unacked.flags(psn) & PROBED:
                    unacked.set_bits(psn, PROBED)
                    self._suspect(psn, now)
                band += 1
                if band == PROBE_SCAN:
                    break
            psn = _tx_after(unacked, psn)
            if psn < 0:
                break
            sent = _tx_sent(unacked, psn)
            if sent >= rack_xmit:
                break
        if lost is not None:
            for psn in lost:
                self.stats.losses_detected += 1
                self._mark_lost(psn, now, "rack")

    def _check_evidence(self, now: int) -> int | None:
        """Blame the EVs whose loss evidence is due: a gap still unacknowledged
        (and not NACKed) after its allowance, an EV probe unanswered in time.

        Returns the earliest deadline left (None: none left).
        """
        unacked = self.unacked
        paths = self.paths
        best = -1
        gaps = self.gaps
        if gaps:
            for rec, (ev, due) in list(gaps.items()):
                if due <= now:
                    del gaps[rec]
                    if rec[0] in unacked:
                        self.gap_blames += 1
                        self.ev_probes.pop(ev, None)
                        paths.on_loss(ev, now, "loss without trim")
                elif best < 0 or due < best:
                    best = due
        probes = self.ev_probes
        if probes:
            for ev, (_seq, due, _psn, _sent, _at, arrived) in list(probes.items()):
                if due <= now:
                    del probes[ev]
                    if arrived:
                        continue  # the overdue transmission arrived: the path delivers
                    self.probe_blames += 1
                    paths.on_loss(ev, now, "probe unanswered")
                elif best < 0 or due < best:
                    best = due
        return None if best < 0 else best

    def _suspect(self, psn: int, now: int) -> None:
        """``psn``'s last transmission, on its EV, is overdue: probe the EV (once at
        a time), unless it is already out of use."""
        unacked = self.unacked
        ev = unacked.ev(psn)
        if ev in self.ev_probes:
            return
        state = self.paths.state_of(ev)
        if state is None or state is EVState.ASSUMED_BAD or state is EVState.DENIED:
            return  # out of use already: nothing to learn
        seq = self.probe_seq
        due = now + self.probe_wait()
        self.ev_probes[ev] = (seq, due, psn, unacked.sent(psn), now, False)
        unacked.set_bits(psn, NAMED)
        if self.rack_deadline is None or due < self.rack_deadline:
            self.rack_deadline = due
        self.suspect_probes += 1
        self.qp.queue_control(self.probe(now, reliability=False, ev=ev))

    def _mark_lost(self, psn: int, now: int, reason: str | None, front: bool = False) -> None:
        """Take outstanding ``psn`` out of flight and queue it for retransmission.

        ``reason`` None means congestion (a trim NACK): nobody is blamed.
        ``"rack"``: RACK inferred the loss, which may be a packet still in a
        queue: the transmission may yet arrive (``txtable.DUP_RISK``), and its EV
        is only probed (:meth:`_suspect`).  ``"timeout"`` blames the EV at once.
        """
        unacked = self.unacked
        op = unacked.op(psn)
        assert op is not None
        length = op.length_of(psn, self.mtu)
        if unacked.flags(psn) & IN_FLIGHT:
            self._land(psn, length)
        if front:
            self.retx.appendleft(psn)
        else:
            self.retx.append(psn)
        if reason is not None:
            unacked.set_bits(psn, DUP_RISK)
            if reason == "timeout":
                self.paths.on_loss(unacked.ev(psn), now, reason)
                self.cc.on_timeout(length, now)
            else:
                self._suspect(psn, now)
                self.cc.on_loss(length, now)
        self.qp.wake()

    def _land(self, psn: int, length: int) -> None:
        """Take ``psn`` (``length`` bytes, in flight) out of flight, not acknowledged."""
        if _tx_land(self.unacked, psn) & ACK_REQ:
            self.flight_ack_reqs -= 1
        self.inflight -= length

    def on_nack(self, nack: NackPacket, now: int) -> None:
        """Process a NACK: trims retransmit at once; access errors end the QP."""
        stats = self.stats
        stats.rx_nacks += 1
        self.window_probe_out = False
        reason = nack.reason
        psn = nack.psn
        unacked = self.unacked
        op = unacked.op(psn)
        # (the transmission the NACK is about: outstanding and in flight, else none)
        flying = op is not None and unacked.flags(psn) & IN_FLIGHT != 0
        sent = unacked.sent(psn) if flying else -1
        fatal = FATAL_NACKS.get(reason)
        if fatal is not None:
            # Only a NACK about a transmission still outstanding (sent, unacked,
            # and echoing that transmission's timestamp) may end the QP: a stale
            # or forged one with any PSN is counted and dropped.
            if not flying:
                op = None
                if reason is NackReason.NO_RESOURCE:
                    last = self.sacked_imm_last.get(psn)
                    if last is not None:
                        sent, op = last
            if op is None or sent != nack.ts_echo:
                stats.ignored_fatal_nacks += 1
                return
            stats.fatal_nacks += 1
            self.qp.fail(fatal, op, now, f"NACK {reason.name} for PSN {psn}")
            return
        self._nacked(nack)
        if op is None or not flying or sent != nack.ts_echo:
            stats.stale_nacks += 1  # already acked, or about an older transmission
            return
        length = op.length_of(psn, self.mtu)
        if reason is NackReason.TRIMMED:
            stats.trims += 1
            self.paths.on_trim(unacked.ev(psn))
            self.cc.on_nack(length, now, now - sent, self.inflight - length)
        elif reason is NackReason.TRIMMED_LASTHOP:
            stats.trims += 1
            stats.trims_lasthop += 1
            self.cc.on_nack(length, now, now - sent, self.inflight - length)
        else:  # PSN_OUT_OF_WINDOW: not receivable yet; hold it, blame nobody
            stats.oow_nacks += 1
            self.last_activity = now
            self._learn_peer_window(nack)
            # Out of flight (it is not in the network) and held: the window
            # moving releases it; until then the packets below it, in flight,
            # carry the timers.  Never resent at once only to be refused again.
            self._land(psn, length)
            unacked.set_bits(psn, OOW)
            self.held.add(psn)
            return
        self.last_activity = now
        self._mark_lost(psn, now, None, front=True)

    def _nacked(self, nack: NackPacket) -> None:
        """The transmission a NACK names (PSN, echoed send time, EV) reached the
        receiver, trimmed or refused: it was not lost, so it is no gap."""
        rec = (nack.psn, nack.ts_echo)
        if self.gaps.pop(rec, None) is not None:
            return
        quiet = self.unreported.get(nack.psn)
        if quiet is not None and quiet[0] == nack.ts_echo:
            del self.unreported[nack.psn]
            return
        self.ev_sent.remove(nack.ev, nack.psn, nack.ts_echo)

    def _learn_peer_window(self, nack: NackPacket) -> None:
        """Shrink the send PSN window to what a PSN_OUT_OF_WINDOW NACK proves.

        The receiver refused ``nack.psn`` with its cumulative point at
        ``nack.cack``, so its window (a multiple of 128 PSNs) is at most
        ``psn - cack``: new data then stays within it, and no further packet
        is sent only to be refused.
        """
        span = nack.psn - nack.cack
        if nack.cack < self.snd_una or span < 128:
            return
        learned = span // 128 * 128
        if learned < self.window_psns:
            self.window_psns = learned
            self.stats.peer_window_shrinks += 1

    def _release_oow(self, now: int) -> None:
        """Queue for retransmission the held PSNs the window now covers."""
        limit = self.snd_una + self.window_psns
        for psn in sorted(p for p in self.held if p < limit):
            self.held.remove(psn)
            self.unacked.clear_bits(psn, OOW)
            self.retx.append(psn)
        self.qp.wake()

    def on_probe_reply(self, reply: ProbeReplyPacket, now: int) -> None:
        """An EV probe came back (with ACK proof on: proven, else refused and counted)."""
        if not self.probe_proven(reply):
            return
        self.stats.probe_replies += 1
        ev = reply.ev
        out = self.ev_probes.get(ev)
        if out is not None and out[0] == reply.seq:
            del self.ev_probes[ev]  # the path delivers: what RACK declared lost was queued
            rtt = now - out[4]
            if self.probe_samples == 0:
                self.probe_rtt = rtt
                self.probe_dev = rtt >> 3
            else:
                err = rtt - self.probe_rtt
                self.probe_rtt += err >> 3
                self.probe_dev += (abs(err) - self.probe_dev) >> 2
            self.probe_samples += 1
            return
        self.paths.on_probe_reply(ev, reply.seq, now)

    # -- timers ---------------------------------------------------------------------
    def rto_for(self, retries: int) -> int:
        """The timeout of a PSN's next attempt after ``retries`` timeouts: linear,
        then doubling, at most :data:`RTO_CAP_PS`.  ``TxTable.rto_at`` (Python and
        C) computes the same for the oldest transmission in :meth:`get_timer`: a
        change here is a change there."""
        extra = retries - self.retry_linear
        if extra < 0:
            return self.timeout_ps
        rto = self.timeout_ps << min(extra + 1, 30)
        return rto if rto < RTO_CAP_PS else RTO_CAP_PS

    def _tail_probe(self, now: int) -> None:
        self.stats.tail_probes += 1
        self.qp.queue_control(self.probe(now, reliability=True))
        self.last_activity = now

    def get_timer(self) -> int | None:
        """The earliest deadline among RTO, RACK, tail probe and EV probes."""
        # (an int with -1 for none, not Optional: compiled, no boxing per call)
        probe = self.paths.next_probe_at
        best = -1 if probe is None else probe
        # (the oldest in flight's timeout: rto_for after its retries, in one call)
        rto = _tx_rto_at(self.unacked, self.timeout_o, self.retry_linear, _RTO_CAP_O)
        if rto >= 0 and (best < 0 or rto < best):
            best = rto
        if (rto >= 0 or self.held) and not len(self.retx):
            tlp = self.last_activity + 2 * self.srtt + self.reo_floor
            if best < 0 or tlp < best:
                best = tlp
        rack = self.rack_deadline
        if rack is not None and (best < 0 or rack < best):
            best = rack
        return None if best < 0 else best

    def handle_timer(self, now: int) -> None:
        """Run every deadline that has passed."""
        qp = self.qp
        if self.rack_deadline is not None and self.rack_deadline <= now:
            self._detect_losses(now)
        unacked = self.unacked
        oldest = unacked.oldest()
        if oldest >= 0:
            retries = unacked.retries(oldest)
            if unacked.sent(oldest) + self.rto_for(retries) <= now:
                if self.max_retries is not None and retries >= self.max_retries:
                    # the oldest outstanding WR takes the error (verbs order)
                    qp.fail(
                        WCStatus.RETRY_EXC_ERR, None, now, f"retries exhausted for PSN {oldest}"
                    )
                    return
                unacked.count_retry(oldest)
                self.stats.timeouts += 1
                self._mark_lost(oldest, now, "timeout", front=True)
            elif not len(self.retx) and self.last_activity + 2 * self.srtt + self.reo_floor <= now:
                self._tail_probe(now)
        elif (
            self.held
            and not len(self.retx)
            and self.last_activity + 2 * self.srtt + self.reo_floor <= now
        ):
            self._tail_probe(now)  # only held PSNs left: ask where the window is
        paths = self.paths
        if paths.next_probe_at is not None and paths.next_probe_at <= now:
            for ev, _seq in paths.due_probes(now, self.probe_seq):
                qp.queue_control(self.probe(now, reliability=False, ev=ev))
