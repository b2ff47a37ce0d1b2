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
  is acknowledged and an earlier one on it is still not (nor NACKed) a
  reordering allowance later, the earlier one was lost on that path;
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

from array import array
from collections import deque
from typing import TYPE_CHECKING, Final

from ..wire.packets import (
    LAST_OPCODES,
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)
from .paths import EVState
from .verbs import MemoryRegion, WCStatus

if TYPE_CHECKING:
    import random

    from .attrs import QPAttr
    from .cc import CongestionControl
    from .paths import PathSet
    from .qpbase import QPBase

_MASK64: Final = (1 << 64) - 1

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


def _find_pair(q: array[int], psn: int, sent: int) -> int:
    """Where the pair ``psn, sent`` first starts in the flat pairs ``q``, or -1."""
    for i in range(0, len(q), 2):
        if q[i] == psn and q[i + 1] == sent:
            return i
    return -1


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


class Tx:
    """The sender's record of one PSN until it is acknowledged."""

    __slots__ = (
        "ack_req",
        "acked",
        "acked_early",
        "dup_risk",
        "ev",
        "in_flight",
        "length",
        "offset",
        "oow",
        "op",
        "opcode",
        "probed",
        "psn",
        "resent",
        "retries",
        "sent",
    )

    def __init__(self, psn: int, op: SendOp, offset: int, length: int, opcode: Opcode) -> None:
        self.psn = psn
        self.op = op
        self.offset = offset
        self.length = length
        self.opcode = opcode
        self.ev = 0
        self.sent = 0
        self.retries = 0
        self.in_flight = False
        self.acked = False
        #: this transmission asked for an immediate ACK.
        self.ack_req = False
        #: refused as beyond the receiver's PSN window: held (out of flight,
        #: in Requester.held) until the cumulative ACK moves far enough.
        self.oow = False
        #: sent more than once (so an early ACK of it may reveal a spurious retransmission).
        self.resent = False
        #: a transmission of this PSN was given up (RACK or a timeout) without a
        #: NACK, so it may still arrive: an ACK of the PSN no longer says which
        #: transmission arrived, and is no order evidence (see Requester._on_order).
        self.dup_risk = False
        #: acknowledged sooner after its last retransmission than a round trip:
        #: an earlier transmission arrived.
        self.acked_early = False
        #: this transmission's EV was probed as overdue (see Requester._detect_losses).
        self.probed = False


class PsnRecords:
    """The records of the PSNs sent and not yet acknowledged, by PSN: the part of a
    dict ``{psn: Tx}`` the requester uses, kept as a list over the PSN window.

    The PSNs outstanding are a window from the oldest unacknowledged one, and new ones
    are added at its end: a list slot (8 bytes) per PSN of the window instead of a
    dict entry and a boxed PSN (about 60 bytes; docs/performance.md, the memory
    budget).  Slots of PSNs acknowledged out of order hold None; the front is trimmed
    as the oldest are acknowledged.
    """

    __slots__ = ("_base", "_count", "_txs")

    def __init__(self) -> None:
        #: the PSN of ``_txs[0]``.
        self._base = 0
        self._txs: list[Tx | None] = []
        #: records held (slots not None).
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def get(self, psn: int) -> Tx | None:
        """The record of ``psn``, or None when it is not outstanding."""
        i = psn - self._base
        if 0 <= i < len(self._txs):
            return self._txs[i]
        return None

    def __contains__(self, psn: int) -> bool:
        return self.get(psn) is not None

    def __setitem__(self, psn: int, tx: Tx) -> None:
        txs = self._txs
        if not txs:
            self._base = psn
        i = psn - self._base
        if i < 0:
            txs[:0] = [None] * -i
            self._base = psn
            i = 0
        while i > len(txs):
            txs.append(None)
        if i == len(txs):
            txs.append(tx)
            self._count += 1
        else:
            if txs[i] is None:
                self._count += 1
            txs[i] = tx

    def __delitem__(self, psn: int) -> None:
        i = psn - self._base
        txs = self._txs
        if not 0 <= i < len(txs) or txs[i] is None:
            raise KeyError(psn)
        txs[i] = None
        self._count -= 1
        if i == 0:
            k = 1
            n = len(txs)
            while k < n and txs[k] is None:
                k += 1
            del txs[:k]
            self._base += k

    def clear(self) -> None:
        """Forget every record."""
        self._txs.clear()
        self._count = 0


class Requester:
    """Send-side state of one QP."""

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
        self.ops: deque[SendOp] = deque()  # posted, not yet completed, in order
        self.to_segment: deque[SendOp] = deque()  # posted, not yet fully segmented
        self.unacked = PsnRecords()
        #: the transmissions in flight, in send order (re-inserted on retransmission):
        #: a dict of the records themselves (no value), which costs no PSN object
        #: per entry (docs/performance.md, the memory budget).
        self.flight: dict[Tx, None] = {}
        self.retx: deque[Tx] = deque()
        #: last packets of WRITE_IMM messages acknowledged selectively but not yet
        #: cumulatively: the responder may still refuse such a message (no
        #: receive, found when it completes in order) with a NACK naming one.
        self.sacked_imm_last: dict[int, Tx] = {}
        self.inflight = 0
        #: packets in flight that asked for an immediate ACK.
        self.flight_ack_reqs = 0
        #: a reliability probe went out because the window closed with no ACK
        #: requested in flight; cleared by the next SACK or NACK.
        self.window_probe_out = False
        #: transmissions held after a PSN_OUT_OF_WINDOW NACK, by PSN (see Tx.oow).
        self.held: dict[int, Tx] = {}
        self.wimm_outstanding = 0
        base_rtt = attr.cc_profile.base_rtt_ps
        self.srtt = base_rtt
        self.min_rtt = base_rtt
        self.rack_rtt = base_rtt
        self.rack_xmit = -1
        #: the timestamp echo of the last RTT sample taken (one per ACK event)
        self.last_sample_ts = -1
        self.rack_deadline: int | None = None
        #: per EV, its transmissions not yet resolved, in send order, as flat
        #: pairs ``PSN, send time`` in an unsigned 64-bit array (a send time is a
        #: 64-bit field on the wire): the order evidence of loss on that EV (see
        #: :meth:`_on_order`).  Only EVs with some are keys.  A
        #: QP sprays over hundreds of EVs with a few packets each in flight: a
        #: pair costs 16 bytes here against 136 as a tuple in a list, and an
        #: empty deque was 600 bytes (docs/performance.md, the memory budget).
        self.ev_sent: dict[int, array[int]] = {}
        #: transmissions overtaken on their own EV, (PSN, send time) -> (EV, when
        #: the EV is blamed if the PSN is still unacknowledged and not NACKed).
        self.gaps: dict[tuple[int, int], tuple[int, int]] = {}
        #: EV probes out on EVs RACK suspects: EV -> (probe seq, answer deadline,
        #: the overdue PSN's record, the send time of its transmission on the EV,
        #: the probe's send time).
        self.ev_probes: dict[int, tuple[int, int, Tx, int, int]] = {}
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
        # -> the EV it went on, for the newest ACK_PROOF_KEEP packets sent.
        self.sent_ts: dict[int, int] | None = None
        self.sent_order: deque[int] = deque()
        self.ts_rng: random.Random | None = None
        self.last_stamp = 0
        #: SACKs refused for lack of proof (no echo of a packet sent on their EV).
        self.forged_acks = 0
        #: bitmask of the planes this QP's EVs use (0: not computed yet).
        self.plane_mask = 0

    def apply_attr(self, attr: QPAttr) -> None:
        """Take the send-side attributes (at RTS, and again on RTS -> RTS)."""
        self.window_psns = attr.send_window_psns
        self.timeout_ps = attr.timeout_ps
        self.retry_linear = attr.retry_linear
        self.max_retries = None if attr.retries_infinite else attr.retry_linear + attr.retry_exp
        self.reo_floor = attr.reorder_window_ps

    # -- output ---------------------------------------------------------------------
    def has_work(self) -> bool:
        """True when a retransmission or new data is waiting (window permitting)."""
        return bool(self.retx or self.to_segment)

    def next_packet(self, now: int, busy: int = 0) -> DataPacket | None:
        """The next data packet to transmit, or None (nothing to send, or window full).

        ``busy``: bitmask of planes whose port cannot take a packet now (see
        :meth:`PathSet.next_ev`); when only busy planes are usable, returns None
        and sets :attr:`port_blocked`.
        """
        self.port_blocked = False
        retx = self.retx
        while retx:
            tx = retx[0]
            if tx.acked:
                retx.popleft()
                continue
            if self.inflight and self.inflight + tx.length > self.cc.cwnd:
                self._window_blocked(now)
                return None
            ev = self.paths.other_ev(tx.ev, busy)
            if ev < 0:
                self.port_blocked = True
                return None
            retx.popleft()
            return self._emit(tx, ev, now, retransmit=True)
        if not self.to_segment:
            return None
        op = self.to_segment[0]
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
        last = idx == op.npkts - 1
        if op.npkts == 1:
            opcode = Opcode.WRITE_ONLY_IMM if op.is_imm else Opcode.WRITE_ONLY
        elif idx == 0:
            opcode = Opcode.WRITE_FIRST
        elif last:
            opcode = Opcode.WRITE_LAST_IMM if op.is_imm else Opcode.WRITE_LAST
        else:
            opcode = Opcode.WRITE_MIDDLE
        if idx == 0:
            op.first_psn = psn
        op.segmented = idx + 1
        if last:
            self.to_segment.popleft()
        tx = Tx(psn, op, offset, length, opcode)
        self.unacked[psn] = tx
        self.next_psn = psn + 1
        return self._emit(tx, ev, now, retransmit=False)

    def _window_blocked(self, now: int) -> None:
        """The window is full: make sure an ACK is coming to open it.

        Packets sent while the window was wide did not ask for an ACK, and the
        receiver coalesces ACKs (16 KiB): when trims then shrink the window to
        a few packets, what is in flight may never trigger an ACK and nothing
        else would move until the retransmission timeout.  So when no packet in
        flight asked for an ACK, one reliability probe (no PSN) asks for a SACK.
        """
        if self.flight_ack_reqs or self.window_probe_out or not self.flight:
            return
        self.window_probe_out = True
        self.stats.window_probes += 1
        self.qp.queue_control(self.probe(now, reliability=True))

    def _emit(self, tx: Tx, ev: int, now: int, retransmit: bool) -> DataPacket:
        if self.sent_ts is not None:
            now = self._stamp(now, ev)
        op = tx.op
        tx.ev = ev
        tx.sent = now
        tx.in_flight = True
        tx.probed = False
        if retransmit:
            tx.resent = True
        self.flight[tx] = None
        self.inflight += tx.length
        q = self.ev_sent.get(ev)
        if q is None:
            q = self.ev_sent[ev] = array("Q")
        q.append(tx.psn)
        q.append(now)
        last = tx.opcode in LAST_OPCODES
        # Ask for an ACK at once when this packet fills the window (or is the
        # last thing to send): coalescing at the receiver would otherwise hold
        # the only ACK that can open the window, and the sender would stall
        # until its timeout.
        ack_req = (
            retransmit
            or last
            or not (self.retx or self.to_segment)
            or self.inflight + self.mtu > self.cc.cwnd
        )
        tx.ack_req = ack_req
        if ack_req:
            self.flight_ack_reqs += 1
        pkt = DataPacket(
            self.qp.remote_qpn,
            ev,
            tx.opcode,
            tx.psn,
            op.msn,
            op.remote_addr + tx.offset,
            op.rkey,
            tx.length,
            None if op.virtual else op.gather(tx.offset, tx.length),
            op.imm if last else None,
            now,
            retransmit,
            ack_req,
            op.is_imm,
        )
        stats = self.stats
        stats.tx_data_packets += 1
        stats.tx_data_bytes += tx.length
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
        ts = now if self.sent_ts is None else self._stamp(now, ev)
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
        sent[ts] = ev
        order = self.sent_order
        order.append(ts)
        if len(order) > ACK_PROOF_KEEP:
            del sent[order.popleft()]
        return ts

    def ack_proven(self, sack: SackPacket) -> bool:
        """True when ``sack`` may change state: with ACK proof on, it must echo the
        timestamp of a packet this QP sent, and carry that packet's EV (so its
        port-status bits and EV feedback are about a path really used).  A
        refused SACK is counted in :attr:`forged_acks`."""
        sent = self.sent_ts
        if sent is None:
            return True
        if sent.get(sack.ts_echo, -1) != sack.ev:
            self.forged_acks += 1
            return False
        return True

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
        if cack > next_psn or sack.sack_base < cack or not self.ack_proven(sack):
            stats.rx_invalid += 1
            return
        stats.rx_sacks += 1
        self.window_probe_out = False
        newly = 0
        ts = sack.ts_echo
        self.sack_spurious = 0
        unacked = self.unacked
        # RACK's lateness of packets delivered after later-sent ones (originals
        # still in flight only: a retransmission's send time says nothing).
        late_base = now - self.rack_rtt
        rack_xmit = self.rack_xmit
        self.sack_late = 0
        if cack > self.snd_una:
            sacked = self.sacked_imm_last
            for psn in range(self.snd_una, cack):
                if sacked:
                    sacked.pop(psn, None)
                tx = unacked.get(psn)
                if tx is not None:
                    newly += self._ack_sacked(tx, now, late_base, rack_xmit)
            self.snd_una = cack
            if self.held:
                self._release_oow(now)
        bitmap = sack.bitmap & _MASK64
        base = sack.sack_base
        while bitmap:
            low = bitmap & -bitmap
            psn = base + low.bit_length() - 1
            bitmap ^= low
            if psn >= next_psn:
                break
            tx = unacked.get(psn)
            if tx is not None:
                newly += self._ack_sacked(tx, now, late_base, rack_xmit)
                if tx.op.is_imm and tx.opcode in LAST_OPCODES:
                    self.sacked_imm_last[psn] = tx
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
        if self.retx or self.to_segment:
            self.qp.wake()  # the window may have opened

    def _ack_sacked(self, tx: Tx, now: int, late_base: int, rack_xmit: int) -> int:
        """Acknowledge ``tx`` (cumulatively or selectively) and return its newly acked
        bytes; take the order evidence it gives on its EV, count a spurious
        retransmission, and note how late an original arrived behind a later-sent
        packet (RACK's reordering)."""
        if tx.in_flight and not tx.dup_risk:
            self._on_order(tx, now)
        if tx.resent:
            if now - tx.sent < self.min_rtt:
                self.sack_spurious += 1
                tx.acked_early = True
        elif tx.in_flight and tx.sent < rack_xmit and late_base - tx.sent > self.sack_late:
            self.sack_late = late_base - tx.sent
        return self._ack(tx)

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

    def _on_order(self, tx: Tx, now: int) -> None:
        """``tx``'s one transmission (on ``tx.ev``, at ``tx.sent``) was acknowledged.

        Paths are FIFO: every transmission sent before it on the same EV
        arrived first, or was trimmed (and NACKed), or was lost.  Those still
        unacknowledged become *gaps*: unless their ACK or NACK comes within
        :meth:`gap_allowance`, the EV lost them (see :meth:`_check_evidence`).
        """
        q = self.ev_sent.get(tx.ev)
        if not q:
            return
        psn = tx.psn
        sent = tx.sent
        if q[0] == psn and q[1] == sent:
            if len(q) == 2:
                del self.ev_sent[tx.ev]
            else:
                del q[:2]
            return
        k = _find_pair(q, psn, sent)
        if k < 0:
            return
        unacked = self.unacked
        gaps = self.gaps
        due = -1
        before = q[:k]
        if k + 2 == len(q):
            del self.ev_sent[tx.ev]
        else:
            del q[: k + 2]
        for i in range(0, k, 2):
            if before[i] in unacked:
                if due < 0:
                    due = now + self.gap_allowance()
                    if self.rack_deadline is None or due < self.rack_deadline:
                        self.rack_deadline = due
                gaps[(before[i], before[i + 1])] = (tx.ev, due)
        self.ev_probes.pop(tx.ev, None)  # the EV delivers: no probe needed

    def _ack(self, tx: Tx) -> int:
        if tx.oow:
            tx.oow = False
            del self.held[tx.psn]
        tx.acked = True
        del self.unacked[tx.psn]
        if tx.in_flight:
            del self.flight[tx]
            self.inflight -= tx.length
            tx.in_flight = False
            if tx.ack_req:
                self.flight_ack_reqs -= 1
        tx.op.acked += 1
        return tx.length

    def _note_reordering(self, late: int) -> None:
        """Fold one ACK event's largest lateness into the reordering estimate."""
        if late <= 0:
            return
        self.reo_samples += 1
        err = late - self.reo_mean
        self.reo_mean += err >> 3
        self.reo_dev += (abs(err) - self.reo_dev) >> 2

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
        if rack_xmit < 0 or not self.flight:
            return
        reo = self.reo_window()
        horizon = self.rack_rtt + reo
        # A packet overdue by more than the gap allowance gets its EV probed
        # (cheap, and blames nothing while the path delivers) before RACK,
        # which waits for the whole reordering window, resends it: a dead path
        # is found about one probe round trip after its first loss is overdue.
        probe_h = self.rack_rtt + self.gap_allowance()
        lost = []
        band = 0
        for tx in self.flight:
            if tx.sent >= rack_xmit:
                break
            deadline = tx.sent + horizon
            if deadline <= now:
                lost.append(tx)
                continue
            if self.rack_deadline is None or deadline < self.rack_deadline:
                self.rack_deadline = deadline
            due = tx.sent + probe_h
            if due > now:
                if due < self.rack_deadline:
                    self.rack_deadline = due
                break
            if not tx.probed:
                tx.probed = True
                self._suspect(tx, now)
            band += 1
            if band == PROBE_SCAN:
                break
        for tx in lost:
            self.stats.losses_detected += 1
            self._mark_lost(tx, now, "rack")

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
            for ev, (_seq, due, tx, sent, _at) in list(probes.items()):
                if due <= now:
                    del probes[ev]
                    if tx.acked and (tx.sent == sent or tx.acked_early):
                        continue  # the overdue transmission arrived: the path delivers
                    self.probe_blames += 1
                    paths.on_loss(ev, now, "probe unanswered")
                elif best < 0 or due < best:
                    best = due
        return None if best < 0 else best

    def _suspect(self, tx: Tx, now: int) -> None:
        """``tx``'s transmission on its EV is overdue: probe the EV (once at a
        time), unless it is already out of use."""
        ev = tx.ev
        if ev in self.ev_probes:
            return
        state = self.paths.state_of(ev)
        if state is None or state is EVState.ASSUMED_BAD or state is EVState.DENIED:
            return  # out of use already: nothing to learn
        seq = self.probe_seq
        due = now + self.probe_wait()
        self.ev_probes[ev] = (seq, due, tx, tx.sent, now)
        if self.rack_deadline is None or due < self.rack_deadline:
            self.rack_deadline = due
        self.suspect_probes += 1
        self.qp.queue_control(self.probe(now, reliability=False, ev=ev))

    def _mark_lost(self, tx: Tx, now: int, reason: str | None, front: bool = False) -> None:
        """Take ``tx`` out of flight and queue it for retransmission.

        ``reason`` None means congestion (a trim NACK): nobody is blamed.
        ``"rack"``: RACK inferred the loss, which may be a packet still in a
        queue: the transmission may yet arrive (``Tx.dup_risk``), and its EV is
        only probed (:meth:`_suspect`).  ``"timeout"`` blames the EV at once.
        """
        if tx.in_flight:
            del self.flight[tx]
            self.inflight -= tx.length
            tx.in_flight = False
            if tx.ack_req:
                self.flight_ack_reqs -= 1
        if front:
            self.retx.appendleft(tx)
        else:
            self.retx.append(tx)
        if reason is not None:
            tx.dup_risk = True
            if reason == "timeout":
                self.paths.on_loss(tx.ev, now, reason)
                self.cc.on_timeout(tx.length, now)
            else:
                self._suspect(tx, now)
                self.cc.on_loss(tx.length, now)
        self.qp.wake()

    def on_nack(self, nack: NackPacket, now: int) -> None:
        """Process a NACK: trims retransmit at once; access errors end the QP."""
        stats = self.stats
        stats.rx_nacks += 1
        self.window_probe_out = False
        reason = nack.reason
        tx = self.unacked.get(nack.psn)
        fatal = FATAL_NACKS.get(reason)
        if fatal is not None:
            # Only a NACK about a transmission still outstanding (sent, unacked,
            # and echoing that transmission's timestamp) may end the QP: a stale
            # or forged one with any PSN is counted and dropped.
            if tx is None or not tx.in_flight:
                tx = (
                    self.sacked_imm_last.get(nack.psn) if reason is NackReason.NO_RESOURCE else None
                )
            if tx is None or tx.sent != nack.ts_echo:
                stats.ignored_fatal_nacks += 1
                return
            stats.fatal_nacks += 1
            self.qp.fail(fatal, tx.op, now, f"NACK {reason.name} for PSN {nack.psn}")
            return
        self._nacked(nack)
        if tx is None or not tx.in_flight or tx.sent != nack.ts_echo:
            stats.stale_nacks += 1  # already acked, or about an older transmission
            return
        if reason is NackReason.TRIMMED:
            stats.trims += 1
            self.paths.on_trim(tx.ev)
            self.cc.on_nack(tx.length, now, now - tx.sent, self.inflight - tx.length)
        elif reason is NackReason.TRIMMED_LASTHOP:
            stats.trims += 1
            stats.trims_lasthop += 1
            self.cc.on_nack(tx.length, now, now - tx.sent, self.inflight - tx.length)
        else:  # PSN_OUT_OF_WINDOW: not receivable yet; hold it, blame nobody
            stats.oow_nacks += 1
            self.last_activity = now
            self._learn_peer_window(nack)
            # Out of flight (it is not in the network) and held: the window
            # moving releases it; until then the packets below it, in flight,
            # carry the timers.  Never resent at once only to be refused again.
            del self.flight[tx]
            self.inflight -= tx.length
            tx.in_flight = False
            if tx.ack_req:
                self.flight_ack_reqs -= 1
            tx.oow = True
            self.held[tx.psn] = tx
            return
        self.last_activity = now
        self._mark_lost(tx, now, None, front=True)

    def _nacked(self, nack: NackPacket) -> None:
        """The transmission a NACK names (PSN, echoed send time, EV) reached the
        receiver, trimmed or refused: it was not lost, so it is no gap."""
        rec = (nack.psn, nack.ts_echo)
        if self.gaps.pop(rec, None) is not None:
            return
        q = self.ev_sent.get(nack.ev)
        if q:
            k = _find_pair(q, nack.psn, nack.ts_echo)
            if k < 0:
                return
            if len(q) == 2:
                del self.ev_sent[nack.ev]
            else:
                del q[k : k + 2]

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
            tx = self.held.pop(psn)
            tx.oow = False
            self.retx.append(tx)
        self.qp.wake()

    def on_probe_reply(self, reply: ProbeReplyPacket, now: int) -> None:
        """An EV probe came back."""
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
    def rto_for(self, tx: Tx) -> int:
        """The timeout for ``tx``'s next attempt: linear, then doubling."""
        extra = tx.retries - self.retry_linear
        if extra < 0:
            return self.timeout_ps
        return self.timeout_ps << min(extra + 1, 30)

    def _tail_probe(self, now: int) -> None:
        self.stats.tail_probes += 1
        self.qp.queue_control(self.probe(now, reliability=True))
        self.last_activity = now

    def get_timer(self) -> int | None:
        """The earliest deadline among RTO, RACK, tail probe and EV probes."""
        # (an int with -1 for none, not Optional: compiled, no boxing per call)
        probe = self.paths.next_probe_at
        best = -1 if probe is None else probe
        flight = self.flight
        if flight:
            for tx in flight:  # noqa: B007 -- the oldest in flight
                break
            rto = tx.sent + self.rto_for(tx)
            if best < 0 or rto < best:
                best = rto
        if (flight or self.held) and not self.retx:
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
        if self.flight:
            for tx in self.flight:  # noqa: B007 -- the oldest in flight
                break
            if tx.sent + self.rto_for(tx) <= now:
                if self.max_retries is not None and tx.retries >= self.max_retries:
                    # the oldest outstanding WR takes the error (verbs order)
                    qp.fail(
                        WCStatus.RETRY_EXC_ERR, None, now, f"retries exhausted for PSN {tx.psn}"
                    )
                    return
                tx.retries += 1
                self.stats.timeouts += 1
                self._mark_lost(tx, now, "timeout", front=True)
            elif not self.retx and self.last_activity + 2 * self.srtt + self.reo_floor <= now:
                self._tail_probe(now)
        elif (
            self.held
            and not self.retx
            and self.last_activity + 2 * self.srtt + self.reo_floor <= now
        ):
            self._tail_probe(now)  # only held PSNs left: ask where the window is
        paths = self.paths
        if paths.next_probe_at is not None and paths.next_probe_at <= now:
            for ev, _seq in paths.due_probes(now, self.probe_seq):
                qp.queue_control(self.probe(now, reliability=False, ev=ev))
