"""The send half of an MRC queue pair (the requester).

It segments posted WRITEs into packets, sprays them over the EV set, keeps the
window, and recovers losses:

* a trim NACK retransmits the packet at once on another EV;
* SACK gaps are judged with a RACK-style rule that tolerates spraying's
  reordering: a packet is lost when a packet sent after it has been delivered
  *and* it is overdue by more than the reordering window;
* a reliability probe (no PSN) asks for a fresh SACK when the sender has heard
  nothing for two smoothed RTTs (tail loss);
* the local ACK timeout (1.024 us x 2^t) retransmits the oldest packet, with
  ``retry_linear`` retries at that timeout and ``retry_exp`` doubling ones;
  when they run out the QP goes to ERROR.

Losses without a trim and timeouts mark the packet's EV ASSUMED_BAD; ECN echoes
and non-last-hop trims make it SKIP.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

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
from .verbs import MemoryRegion, WCStatus

if TYPE_CHECKING:
    from .qp import QueuePair

_MASK64 = (1 << 64) - 1

#: NACK reasons that end the QP, and the status the failed work request gets.
FATAL_NACKS: dict[NackReason, WCStatus] = {
    NackReason.REMOTE_ACCESS_ERROR: WCStatus.REM_ACCESS_ERR,
    NackReason.NO_RESOURCE: WCStatus.RNR_RETRY_EXC_ERR,
    NackReason.INVALID_REQUEST: WCStatus.REM_INV_REQ_ERR,
    NackReason.QP_NOT_READY: WCStatus.REM_OP_ERR,
}


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
        "acked",
        "ev",
        "in_flight",
        "length",
        "offset",
        "op",
        "opcode",
        "psn",
        "resent",
        "retries",
        "sent",
        "urgent",
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
        #: sent more than once (so an early ACK of it may reveal a spurious retransmission).
        self.resent = False
        #: NACKed for a trim: its bytes already left the window, resend at once.
        self.urgent = False


class Requester:
    """Send-side state of one QP."""

    def __init__(self, qp: QueuePair) -> None:
        self.qp = qp
        attr = qp.attr
        self.mtu = attr.mtu
        self.window_psns = attr.window_psns
        self.timeout_ps = attr.timeout_ps
        self.retry_linear = attr.retry_linear
        self.max_retries = None if attr.retries_infinite else attr.retry_linear + attr.retry_exp
        self.reo_floor = attr.reorder_window_ps
        self.paths = qp.paths
        self.cc = qp.cc
        self.stats = qp.stats
        self.next_psn = 0
        self.next_msn = 0
        self.snd_una = 0
        self.ops: deque[SendOp] = deque()  # posted, not yet completed, in order
        self.to_segment: deque[SendOp] = deque()  # posted, not yet fully segmented
        self.unacked: dict[int, Tx] = {}
        self.flight: dict[int, Tx] = {}  # in send order (re-inserted on retransmission)
        self.retx: deque[Tx] = deque()
        self.inflight = 0
        self.wimm_outstanding = 0
        base_rtt = attr.cc_profile.base_rtt_ps
        self.srtt = base_rtt
        self.min_rtt = base_rtt
        self.rack_rtt = base_rtt
        self.rack_xmit = -1
        self.rack_deadline: int | None = None
        #: RACK reordering window multiplier: grows on each spurious
        #: retransmission (the network reorders more than assumed).
        self.reo_steps = 1
        self.spurious_at = -1
        self.last_activity = 0
        self.tlp_at: int | None = None
        self.probe_seq = 0
        #: set when the last next_packet() found only busy planes' EVs usable.
        self.port_blocked = False

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
            if not tx.urgent and self.inflight and self.inflight + tx.length > self.cc.cwnd:
                return None
            ev = self.paths.other_ev(tx.ev, busy)
            if ev < 0:
                self.port_blocked = True
                return None
            tx.urgent = False
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

    def _emit(self, tx: Tx, ev: int, now: int, retransmit: bool) -> DataPacket:
        op = tx.op
        tx.ev = ev
        tx.sent = now
        tx.in_flight = True
        if retransmit:
            tx.resent = True
        self.flight[tx.psn] = tx
        self.inflight += tx.length
        last = tx.opcode in LAST_OPCODES
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
            retransmit or last or not (self.retx or self.to_segment),
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
        return ProbePacket(self.qp.remote_qpn, ev, seq, now, reliability)

    # -- input ----------------------------------------------------------------------
    def on_sack(self, sack: SackPacket, now: int) -> None:
        """Process a cumulative + selective ACK."""
        stats = self.stats
        next_psn = self.next_psn
        cack = sack.cack
        if cack > next_psn or sack.sack_base < cack:
            stats.rx_invalid += 1
            return
        stats.rx_sacks += 1
        newly = 0
        ts = sack.ts_echo
        spurious = 0
        unacked = self.unacked
        if cack > self.snd_una:
            for psn in range(self.snd_una, cack):
                tx = unacked.get(psn)
                if tx is not None:
                    if tx.resent and ts < tx.sent:
                        spurious += 1
                    newly += self._ack(tx)
            self.snd_una = cack
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
                if tx.resent and ts < tx.sent:
                    spurious += 1
                newly += self._ack(tx)
        if spurious:
            # An ACK triggered by a packet sent before the retransmission already
            # covers the PSN: the original arrived, late.  Widen the reordering
            # window (at most once per RTT, up to one smoothed RTT) as RACK does.
            stats.spurious_retransmits += spurious
            if now - self.spurious_at >= self.srtt and self.reo_steps < 16:
                self.reo_steps += 1
                self.spurious_at = now
        if 0 < ts <= now:
            rtt = now - ts
            self.srtt += (rtt - self.srtt) >> 3
            if rtt < self.min_rtt:
                self.min_rtt = rtt
            if ts > self.rack_xmit:
                self.rack_xmit = ts
                self.rack_rtt = rtt
        else:
            rtt = self.srtt
        # The peer's port status.  The plane this SACK came back on is up whatever
        # the bitmap says: a bitmap (forged or stale) can never take every plane.
        down = sack.ports_down & ~(1 << (sack.ev & 15))
        if down != self.paths.remote_down:
            self.paths.set_ports_down(remote=down)
        if sack.ecn_seen:
            self.paths.on_ecn(sack.ev, now)
            stats.ecn_echoes += 1
        else:
            self.paths.on_clean_ack(sack.ev)
        self.cc.on_ack(newly, rtt, sack.ecn_seen, self.inflight, now)
        if sack.penalty:
            self.cc.on_penalty(sack.penalty, now)
        self.last_activity = now
        self._detect_losses(now)
        self.qp._complete_sends()
        if self.retx or self.to_segment:
            self.qp._wake()  # the window may have opened

    def _ack(self, tx: Tx) -> int:
        tx.acked = True
        del self.unacked[tx.psn]
        if tx.in_flight:
            del self.flight[tx.psn]
            self.inflight -= tx.length
            tx.in_flight = False
        tx.op.acked += 1
        return tx.length

    def _detect_losses(self, now: int) -> None:
        self.rack_deadline = None
        rack_xmit = self.rack_xmit
        if rack_xmit < 0 or not self.flight:
            return
        reo = max(self.reo_floor, self.min_rtt >> 2) * self.reo_steps
        if self.reo_steps > 1 and reo > self.srtt:
            reo = max(self.srtt, self.reo_floor)
        horizon = self.rack_rtt + reo
        lost = []
        for tx in self.flight.values():
            if tx.sent >= rack_xmit:
                break
            deadline = tx.sent + horizon
            if deadline <= now:
                lost.append(tx)
            else:
                self.rack_deadline = deadline
                break
        for tx in lost:
            self.stats.losses_detected += 1
            self._mark_lost(tx, now, "loss without trim")

    def _mark_lost(self, tx: Tx, now: int, reason: str | None, front: bool = False) -> None:
        """Take ``tx`` out of flight and queue it for retransmission.

        ``reason`` None means congestion (a trim): the EV is not blamed here.
        """
        if tx.in_flight:
            del self.flight[tx.psn]
            self.inflight -= tx.length
            tx.in_flight = False
        if front:
            self.retx.appendleft(tx)
        else:
            self.retx.append(tx)
        if reason is not None:
            self.paths.on_loss(tx.ev, now, reason)
            self.cc.on_loss(tx.length, now)
        self.qp._wake()

    def on_nack(self, nack: NackPacket, now: int) -> None:
        """Process a NACK: trims retransmit at once; access errors end the QP."""
        stats = self.stats
        stats.rx_nacks += 1
        reason = nack.reason
        tx = self.unacked.get(nack.psn)
        fatal = FATAL_NACKS.get(reason)
        if fatal is not None:
            stats.fatal_nacks += 1
            op = tx.op if tx is not None else None
            self.qp._fail(fatal, op, now, f"NACK {reason.name} for PSN {nack.psn}")
            return
        if tx is None or not tx.in_flight or tx.sent != nack.ts_echo:
            stats.stale_nacks += 1  # already acked, or about an older transmission
            return
        if reason is NackReason.TRIMMED:
            stats.trims += 1
            self.paths.on_trim(tx.ev)
            self.cc.on_nack(tx.length, now)
        elif reason is NackReason.TRIMMED_LASTHOP:
            stats.trims += 1
            stats.trims_lasthop += 1
            self.cc.on_nack(tx.length, now)
        else:  # PSN_OUT_OF_WINDOW: resend later, blame nobody
            stats.oow_nacks += 1
        self.last_activity = now
        tx.urgent = True
        self._mark_lost(tx, now, None, front=True)

    def on_probe_reply(self, reply: ProbeReplyPacket, now: int) -> None:
        """An EV probe came back."""
        self.stats.probe_replies += 1
        self.paths.on_probe_reply(reply.ev, reply.seq, now)

    # -- timers ---------------------------------------------------------------------
    def rto_for(self, tx: Tx) -> int:
        """The timeout for ``tx``'s next attempt: linear, then doubling."""
        extra = tx.retries - self.retry_linear
        if extra < 0:
            return self.timeout_ps
        return self.timeout_ps << min(extra + 1, 30)

    def get_timer(self) -> int | None:
        """The earliest deadline among RTO, RACK, tail probe and EV probes."""
        best = self.paths.next_probe_at
        if self.flight:
            tx = next(iter(self.flight.values()))
            rto = tx.sent + self.rto_for(tx)
            if best is None or rto < best:
                best = rto
            if not self.retx:
                tlp = self.last_activity + 2 * self.srtt + self.reo_floor
                if tlp < best:
                    best = tlp
        rack = self.rack_deadline
        if rack is not None and (best is None or rack < best):
            best = rack
        return best

    def handle_timer(self, now: int) -> None:
        """Run every deadline that has passed."""
        qp = self.qp
        if self.rack_deadline is not None and self.rack_deadline <= now:
            self._detect_losses(now)
        if self.flight:
            tx = next(iter(self.flight.values()))
            if tx.sent + self.rto_for(tx) <= now:
                if self.max_retries is not None and tx.retries >= self.max_retries:
                    qp._fail(
                        WCStatus.RETRY_EXC_ERR, tx.op, now, f"retries exhausted for PSN {tx.psn}"
                    )
                    return
                tx.retries += 1
                self.stats.timeouts += 1
                self._mark_lost(tx, now, "timeout", front=True)
            elif not self.retx and self.last_activity + 2 * self.srtt + self.reo_floor <= now:
                self.stats.tail_probes += 1
                qp._queue_control(self.probe(now, reliability=True))
                self.last_activity = now
        paths = self.paths
        if paths.next_probe_at is not None and paths.next_probe_at <= now:
            for ev, _seq in paths.due_probes(now, self.probe_seq):
                qp._queue_control(self.probe(now, reliability=False, ev=ev))
