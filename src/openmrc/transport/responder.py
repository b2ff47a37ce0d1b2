"""The receive half of an MRC queue pair (the responder).

Each data packet is checked (PSN window, rkey, access, bounds) and written
straight to its own address in the target memory region, in whatever order
it arrives.  PSNs are tracked as a cumulative point (``base``: every PSN below
it received) plus a bitmap of what arrived above it.  WRITE_IMM completions go
out in message order, once the whole message and every earlier one is placed.
ACKs are coalesced by bytes, and sent at once on ECN, on an ACK request, or on
a duplicate (whose PSN the SACK then covers, wherever it lies: see
:meth:`Responder.on_data`); trims and out-of-window packets are NACKed.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import TYPE_CHECKING, Final

from ..wire.packets import (
    LAST_OPCODES,
    DataPacket,
    NackPacket,
    NackReason,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)
from .state import QPState
from .verbs import RecvWR, WCOpcode, WCStatus, WorkCompletion

if TYPE_CHECKING:
    from .qpbase import ContextBase, QPBase, QPStats
    from .verbs import MemoryRegion, PDBase

_MASK64: Final = (1 << 64) - 1
#: ``Responder._cur_msn`` when no message is being counted (no MSN is this low)
_NO_MSN: Final = -(1 << 60)
# C statics when compiled (a module global is a dict lookup per use)
_bisect_right: Final = bisect.bisect_right
_insort: Final = bisect.insort

#: Receiver window penalty (the SACK's 7-bit field): none while the PSNs held
#: out of order above the cumulative point fill at most this share of the
#: receive window, then rising linearly to 127 when it is full.
PENALTY_START: Final = 0.5


def window_penalty(held: int, window: int) -> int:
    """The 7-bit penalty for ``held`` out-of-order PSNs in a ``window``-PSN window.

    The backlog a receiver can measure is what it holds above its cumulative
    point (placed but not yet in order): when that nears the PSN window, more
    packets will soon be refused as out of window, so the sender is asked to
    slow down (it takes ``penalty / 127`` of each ACK's bytes off its window).
    """
    share = held / window
    if share <= PENALTY_START:
        return 0
    return min(127, int(127 * (share - PENALTY_START) / (1 - PENALTY_START) + 0.5))


class Responder:
    """Receive-side state of one QP."""

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    bits: int
    pending_bytes: int
    base: int
    rcvd_bytes: int
    window: int
    highest: int
    _cur_bytes: int
    qp: QPBase
    stats: QPStats
    _cur_msn: int
    _mr_rkey: int
    ctx: ContextBase
    _mr: MemoryRegion | None
    _mr_epoch: int
    pd: PDBase
    coalesce: int
    unreported: list[int]
    last_of: dict[int, tuple[int, int | None, bool, int]]
    max_wimm: int
    rkeys: dict[int, MemoryRegion]
    next_msn: int
    _msg_bytes: dict[int, int]
    wimm_pending: list[int]
    recv_queue: deque[RecvWR]
    _held: int

    def __init__(self, qp: QPBase) -> None:
        self.qp = qp
        attr = qp.attr
        self.window = attr.recv_window_psns
        self.coalesce = attr.ack_coalesce_bytes
        self.max_wimm = attr.max_wimm_recv
        self.stats = qp.stats
        self.ctx = qp.context
        self.rkeys = qp.context.rkeys_by_key
        self.pd = qp.pd
        # The last rkey looked up, its region (or None) and the context's MR epoch
        # then: a QP's packets name the same rkey, and the cached answer stands
        # while no region was registered or deregistered (no int boxed and no
        # dict probed per packet).
        self._mr_rkey = -1
        self._mr: MemoryRegion | None = None
        self._mr_epoch = -1
        self.base = 0  # every PSN below it has been received
        self.bits = 0  # bit i: PSN base + i received
        self.highest = -1
        self.pending_bytes = 0  # bytes received since the last ACK (for coalescing)
        #: PSNs placed since the last ACK: the next SACK's bitmap windows cover them.
        self.unreported: list[int] = []
        self.rcvd_bytes = 0
        self.next_msn = 0
        #: msn -> (last psn, imm, wimm, the last packet's timestamp)
        self.last_of: dict[int, tuple[int, int | None, bool, int]] = {}
        #: msn -> bytes placed, for the messages not yet completed, except the one
        #: being received (``_cur_msn``): its count is kept in ``_cur_bytes``, not
        #: in the dict once per packet (:attr:`msg_bytes` shows them all).
        self._msg_bytes: dict[int, int] = {}
        self._cur_msn = _NO_MSN
        self._cur_bytes = 0
        #: MSNs of the WRITE_IMM messages seen and not yet completed, sorted.  A
        #: receive is consumed when such a message completes, in message order,
        #: so the k-th of them (counting from the lowest) needs k receives posted.
        self.wimm_pending: list[int] = []
        self.recv_queue: deque[RecvWR] = deque()
        #: PSNs held above the cumulative point: the set bits of ``bits``, counted as
        #: they change (a SACK's ``ooo_count``; ``int.bit_count`` is a generic method
        #: call compiled)
        self._held = 0

    def on_data(self, pkt: DataPacket, now: int) -> None:
        """Place one data packet (or NACK it), then ACK as the coalescing rules say."""
        stats = self.stats
        psn = pkt.psn
        off = psn - self.base
        if off < 0 or (off < self.window and (self.bits >> off) & 1):
            stats.rx_duplicates += 1
            if off > 0:
                # Held above the cumulative point: the SACK that reported it
                # may have been lost, and the sender resent it.  The ACK must
                # cover this PSN, even far below the usual window at the
                # highest PSN, or the sender never learns it arrived.
                self.unreported.append(psn)
            self._ack(pkt, now)
            return
        if off >= self.window:
            stats.rx_out_of_window += 1
            self._nack(pkt, NackReason.PSN_OUT_OF_WINDOW)
            return
        if pkt.trimmed:
            stats.rx_trimmed += 1
            self._nack(
                pkt, NackReason.TRIMMED_LASTHOP if pkt.trimmed_lasthop else NackReason.TRIMMED
            )
            return
        length = pkt.length
        rkey = pkt.rkey
        epoch = self.ctx.mr_epoch
        if rkey == self._mr_rkey and epoch == self._mr_epoch:
            mr = self._mr
        else:
            mr = self.rkeys.get(rkey)
            self._mr_rkey = rkey
            self._mr = mr
            self._mr_epoch = epoch
        if (
            mr is None
            or mr.pd is not self.pd
            or not mr.remote_write
            or not mr.contains(pkt.va, length)
        ):
            stats.rx_access_errors += 1
            self._nack(pkt, NackReason.REMOTE_ACCESS_ERROR)
            return
        msn = pkt.msn
        if pkt.wimm and not self._receivable(pkt, msn):
            return
        payload = pkt.payload
        view = mr.view
        if payload is not None and view is not None:
            start = pkt.va - mr.addr
            view[start : start + length] = payload
        stats.rx_data_packets += 1
        self.rcvd_bytes += length
        if msn == self._cur_msn:
            self._cur_bytes += length
        else:
            self._switch_msg(msn, length)
        if pkt.opcode in LAST_OPCODES:
            self.last_of[msn] = (psn, pkt.imm, pkt.wimm, pkt.ts)
        if psn > self.highest:
            self.highest = psn
        if off:
            self.unreported.append(psn)
        bits = self.bits | (1 << off)
        completed = False
        if off == 0:
            run = (bits ^ (bits + 1)).bit_length() - 1
            bits >>= run
            self.base += run
            self.bits = bits
            self._held -= run - 1  # (the run's PSNs but this one were held)
            completed = self._complete_messages(pkt.ev, now)
            if self.qp.state is QPState.ERROR:
                return  # a message found no receive: the QP failed, nothing more to say
        else:
            self.bits = bits
            self._held += 1
        self.pending_bytes += length if length > 1024 else 1024
        # ACK at once when a message completed here: the sender needs exactly this
        # ACK to complete the work request (the packet that closed the last hole
        # may carry no ACK request).
        if pkt.ecn or pkt.ack_req or completed or self.pending_bytes >= self.coalesce:
            self._ack(pkt, now)

    @property
    def msg_bytes(self) -> dict[int, int]:
        """Bytes placed so far of each message not yet completed, by MSN."""
        if self._cur_msn != _NO_MSN:
            self._msg_bytes[self._cur_msn] = self._cur_bytes
            self._cur_msn = _NO_MSN
            self._cur_bytes = 0
        return self._msg_bytes

    def _switch_msg(self, msn: int, length: int) -> None:
        """A packet of message ``msn``, not the one being counted: count it from now
        on (the one before goes to the dict)."""
        pending = self._msg_bytes
        if self._cur_msn != _NO_MSN:
            pending[self._cur_msn] = self._cur_bytes
        self._cur_msn = msn
        self._cur_bytes = pending.pop(msn, 0) + length

    def _receivable(self, pkt: DataPacket, msn: int) -> bool:
        """Check that WRITE_IMM message ``msn`` can have a receive; NACK ``pkt`` if not.

        Receives go to WRITE_IMM messages in message order, so the check counts
        the WRITE_IMMs known to come at or before ``msn``: when they are more
        than the receives posted, ``msn`` (not an earlier message) is the one
        without a receive, and this packet of it is refused with NO_RESOURCE.
        """
        pending = self.wimm_pending
        n = len(pending)
        if n and pending[n - 1] == msn:
            # the newest WRITE_IMM seen (a message's packets come together): where
            # bisect_right would put it, without the call per packet
            i = n
            known = True
        else:
            i = _bisect_right(pending, msn)
            known = i > 0 and pending[i - 1] == msn
        if not known:
            if msn < self.next_msn:
                self.stats.rx_invalid += 1
                self._nack(pkt, NackReason.INVALID_REQUEST)
                return False
            if len(pending) >= self.max_wimm:
                self.stats.rx_no_resource += 1
                self._nack(pkt, NackReason.NO_RESOURCE)
                return False
            i += 1
        if i > len(self.recv_queue):
            self.stats.rx_no_resource += 1
            self._nack(pkt, NackReason.NO_RESOURCE)
            return False
        if not known:
            _insort(pending, msn)
        return True

    def _complete_messages(self, ev: int, now: int) -> bool:
        """Complete every message now wholly placed, in order; True if any was.

        A WRITE_IMM message takes the oldest posted receive here.  If there is
        none (an earlier WRITE_IMM turned up after this one was wholly placed,
        and took the receive it had counted on), the message cannot be
        completed and its data was already acknowledged selectively: the QP
        goes to ERROR (MRC: too many WRITE_IMMs is a QP error) after NACKing
        NO_RESOURCE on the message's last packet, so the sender fails that
        work request, and it never sees the message cumulatively acknowledged.
        """
        last_of = self.last_of
        if not last_of:
            return False  # no message's last packet is here yet
        base = self.base
        done = False
        done_upto = -1  # one past the last PSN of the messages completed here
        while True:
            info = last_of.get(self.next_msn)
            if info is None or info[0] >= base:
                return done
            done = True
            msn = self.next_msn
            recv = None
            if info[2]:
                if not self.recv_queue:
                    self.stats.rx_no_resource += 1
                    qp = self.qp
                    qp.fail(WCStatus.WR_FLUSH_ERR, None, now, f"no receive for WRITE_IMM MSN {msn}")
                    if done_upto >= 0:  # what did complete here is acknowledged first
                        self.stats.tx_sacks += 1
                        qp.queue_control(
                            SackPacket(qp.remote_qpn, ev, done_upto, done_upto, 0, False,
                                       self.rcvd_bytes, 0, 0, 0)
                        )  # fmt: skip
                    self.stats.tx_nacks += 1
                    qp.queue_control(
                        NackPacket(
                            qp.remote_qpn, ev, NackReason.NO_RESOURCE, info[0], base, info[3]
                        )
                    )
                    return True
                recv = self.recv_queue.popleft()
                self.wimm_pending.remove(msn)
            del last_of[msn]
            done_upto = info[0] + 1
            if msn == self._cur_msn:
                nbytes = self._cur_bytes
                self._cur_msn = _NO_MSN
                self._cur_bytes = 0
            else:
                nbytes = self._msg_bytes.pop(msn, 0)
            self.next_msn = msn + 1
            self.stats.rx_messages += 1
            self.qp.context.rx_placed += 1
            if recv is not None:
                self.qp.recv_cq.push(
                    WorkCompletion(
                        recv.wr_id,
                        WCStatus.SUCCESS,
                        WCOpcode.RECV_RDMA_WITH_IMM,
                        self.qp.qpn,
                        nbytes,
                        info[1],
                    )
                )

    def sack(self, ev: int, ecn: bool, ts_echo: int, sack_base: int | None = None) -> SackPacket:
        """A SACK describing everything received so far.

        The bitmap covers 64 PSNs from ``sack_base`` (default: the UET rule,
        ``max(highest - 63, cumulative point)``).
        """
        return self._sack_at(
            ev, ecn, ts_echo, self.highest - 63 if sack_base is None else sack_base
        )

    def _sack_at(self, ev: int, ecn: bool, ts_echo: int, sack_base: int) -> SackPacket:
        """:meth:`sack` with its bitmap from ``sack_base`` (or the cumulative point if
        that is higher)."""
        base = self.base
        if sack_base < base:
            sack_base = base
        bits = self.bits
        held = self._held
        window = bits >> (sack_base - base)
        if window >> 64:  # (bits >= 0; 2**64 - 1 is a boxed int: masked only when needed)
            window &= _MASK64
        return SackPacket(
            self.qp.remote_qpn,
            ev,
            base,
            sack_base,
            window,
            ecn,
            self.rcvd_bytes,
            held,
            ts_echo,
            window_penalty(held, self.window) if held else 0,
            self.qp.context.ports_down,
        )

    def _ack(self, pkt: DataPacket | ProbePacket, now: int) -> None:
        """Send the SACK(s) that report every PSN placed since the last ACK.

        Spraying can spread arrivals over hundreds of PSNs; a fixed window at
        the highest PSN would never report a packet that arrives late, and the
        sender would retransmit it and blame its path.  So each SACK's 64-bit
        window starts at the lowest PSN not yet reported, and when the newly
        placed PSNs do not fit in one window, more SACKs follow (usually one).
        """
        self.pending_bytes = 0
        qp = self.qp
        stats = self.stats
        base = self.base
        pending = self.unreported
        usual = self.highest - 63
        if pending:
            # Every PSN placed is at most the highest: when none to report is below the
            # usual window, that one SACK reports them all (no list sorted).
            spread = False
            for p in pending:
                if base <= p < usual:
                    spread = True
                    break
            if spread:
                pending = sorted([p for p in pending if p >= base])
                self.unreported = []
            else:
                pending.clear()
        if not pending:
            stats.tx_sacks += 1
            qp.queue_control(self._sack_at(pkt.ev, pkt.ecn, pkt.ts, usual))
            return
        first = True
        i = 0
        n = len(pending)
        while i < n:
            window = pending[i]
            if first and usual <= window:
                window = usual  # all fit under the usual window
            stats.tx_sacks += 1
            qp.queue_control(self._sack_at(pkt.ev, pkt.ecn and first, pkt.ts, window))
            first = False
            end = max(window, base) + 64
            while i < n and pending[i] < end:
                i += 1

    def _nack(self, pkt: DataPacket, reason: NackReason) -> None:
        self.stats.tx_nacks += 1
        self.qp.queue_control(
            NackPacket(self.qp.remote_qpn, pkt.ev, reason, pkt.psn, self.base, pkt.ts)
        )

    def on_probe(self, probe: ProbePacket, now: int) -> None:
        """Answer a probe: a SACK for a reliability probe, a reply on the same EV otherwise."""
        self.stats.rx_probes += 1
        if probe.reliability:
            self._ack(probe, now)
        else:
            self.qp.queue_control(
                ProbeReplyPacket(self.qp.remote_qpn, probe.ev, probe.seq, probe.ts)
            )
