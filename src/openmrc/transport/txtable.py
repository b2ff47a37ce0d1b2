"""The requester's per-transmission bookkeeping, in flat arrays.

A sending QP keeps, for every PSN sent and not yet acknowledged, what loss
recovery needs of it (its message, EV, send time, retries and a few flags),
the order of the transmissions in flight (RACK's scan and the timeout's oldest
packet), and, per EV, the transmissions sent on it and not yet resolved (the
order evidence of loss on that path).  At the paper's scale a host has a few
hundred of each at once: as objects (a record per PSN, a dict of the records in
flight, an array per EV in a dict) they were about 95 KB per host; here they are
parallel arrays, about 29 KB (docs/performance.md, the memory budget).  Each read
or write of an array item costs a compiled build more than an attribute of a
record (mypyc boxes the index and the value): the methods read and write as few
as they can, and every array is unsigned (a signed array's item is written through
CPython's argument parser, an unsigned one's by a plain conversion), the links
stored with an offset so that their "none" fits.

* :class:`TxTable`: one slot per PSN of the window, fields in parallel arrays
  indexed by ``psn - base``, and the transmissions in flight as a doubly linked
  list through two of those arrays;
* :class:`EvOrder`: per EV, a singly linked chain of (PSN, send time) pairs in a
  pool of entries, the chains' ends found through an open-addressing table.

Both are keyed by PSN and EV values, never by object identity: the requester's
results do not depend on where anything sits in memory.

The classes here are the readable reference and the pure-Python fallback.  A
compiled build also has them in C (:mod:`openmrc.transport._txtable`, from
``_txtable.c`` beside this file): the same methods and results, each method one
call that reads and writes plain C arrays instead of going through the generic
item protocol per item.  :func:`new_tx_table` and :func:`new_ev_order` give the
native ones when that module was built and ``OPENMRC_PURE_PYTHON`` is not set
(``1`` forces these classes); the requester holds them as :class:`TxTableLike` and
:class:`EvOrderLike`, so either serves.
"""

from __future__ import annotations

import os
from array import array
from types import ModuleType
from typing import Any, Final, Protocol

from .sendop import SendOp

#: An EV's bits (32), and a 64-bit word's.
EV_BITS: Final = 0xFFFFFFFF
MASK64: Final = (1 << 64) - 1

#: Flag bits of a PSN slot (:meth:`TxTable.flags`; at most 8: they sit above the EV
#: in one 64-bit word).
#: The PSN's last transmission is in flight (in the flight list).
IN_FLIGHT: Final = 1
#: That transmission asked for an immediate ACK.
ACK_REQ: Final = 2
#: Refused as beyond the receiver's PSN window: held (out of flight, in
#: ``Requester.held``) until the cumulative ACK moves far enough.
OOW: Final = 4
#: Sent more than once (so an early ACK of it may reveal a spurious retransmission).
RESENT: Final = 8
#: A transmission of this PSN was given up (RACK or a timeout) without a NACK,
#: so it may still arrive: an ACK of the PSN no longer says which transmission
#: arrived, and is no order evidence (see ``Requester._on_order``).
DUP_RISK: Final = 16
#: This transmission's EV was probed as overdue (see ``Requester._detect_losses``).
PROBED: Final = 32
#: An EV probe names this PSN as its overdue packet: its acknowledgement settles
#: the probe's verdict (see ``Requester._suspect``).
NAMED: Final = 64

#: Not a stored flag: set in what :meth:`TxTable.settle` returns when the PSN's
#: transmission was the oldest on its EV and was dropped from the EV's order.
ORDERED: Final = 256

#: Flags that keep an acknowledged PSN out of :meth:`TxTable.ack`'s run (OOW,
#: RESENT, DUP_RISK, NAMED: each asks the requester for more than forgetting it).
QUICK_STOP: Final = OOW | RESENT | DUP_RISK | NAMED

#: What :meth:`TxTable.ack` returns: the run's message (None: no PSN taken), how many
#: PSNs it took, the last of them and its send time, the earliest send time among them,
#: how many of them had ACK_REQ, and the PSN it stopped before (-1: none).
AckRun = tuple[SendOp | None, int, int, int, int, int, int]

#: Slots acknowledged at the front of a :class:`TxTable` before they are cut off
#: (cutting the arrays' front moves them: done in batches, not per PSN).
TRIM_BATCH: Final = 32
#: Empty slots a :class:`TxTable` grows by when a new PSN needs one.
GROW_BATCH: Final = 16


class TxTable:
    """The sender's records of the PSNs sent and not yet acknowledged.

    The PSNs outstanding are a window from the oldest unacknowledged one, and new
    ones are added at its end, so each field is an array with one slot per PSN of
    the window (slot ``psn - base``), not a record object per PSN and a dict of
    them.  A slot acknowledged out of order is emptied (its message None); the
    front is cut as the oldest are acknowledged.  Besides the fields of the PSN's
    last transmission (its EV, send time, the timeouts it has had, flag bits), the
    slots of the PSNs in flight are linked in send order (a retransmission goes to
    the end): what RACK scans from the oldest, and the oldest's timeout.
    """

    __slots__ = (
        "_base",
        "_count",
        "_end",
        "_head",
        "_lo",
        "_meta",
        "_next",
        "_ops",
        "_prev",
        "_retries",
        "_sent",
        "_tail",
    )

    def __init__(self) -> None:
        #: the PSN of slot 0.
        self._base = 0
        #: the first slot that may be occupied (those before it are emptied, not cut yet).
        self._lo = 0
        #: one past the newest PSN's slot (the slots from there on are spare, empty
        #: and zero: the arrays grow by batches).
        self._end = 0
        #: records held (slots whose message is not None).
        self._count = 0
        #: per slot: the message (SendOp) the PSN belongs to, None when empty.
        self._ops: list[SendOp | None] = []
        #: per slot: the EV of the PSN's last transmission (an EV is 32 bits) and the
        #: flag bits (IN_FLIGHT, ACK_REQ, OOW, RESENT, DUP_RISK, PROBED, NAMED) above
        #: it, ``ev | flags << 32``: one word, read and written together.
        self._meta: array[int] = array("Q")
        #: per slot: its send time, ps (a 64-bit field on the wire).
        self._sent: array[int] = array("Q")
        #: per slot: local ACK timeouts the PSN has had.
        self._retries: array[int] = array("I")
        #: per slot in flight: the PSN sent before and after it in flight, plus one
        #: (0 at an end): unsigned, as an unsigned array's item is written without the
        #: argument parsing a signed one's costs (see the module docstring).
        self._prev: array[int] = array("Q")
        self._next: array[int] = array("Q")
        #: the oldest and newest PSN in flight, -1 when none is.
        self._head = -1
        self._tail = -1

    def __len__(self) -> int:
        return self._count

    def op(self, psn: int) -> SendOp | None:
        """The message ``psn`` belongs to, or None when it is not outstanding."""
        i = psn - self._base
        ops = self._ops
        if 0 <= i < len(ops):
            return ops[i]
        return None

    def __contains__(self, psn: int) -> bool:
        return self.op(psn) is not None

    def lowest(self) -> int:
        """A PSN no outstanding PSN is below (-1 when none is outstanding): every
        PSN under it is acknowledged, so a SACK's bits there need no look-up."""
        return self._base + self._lo if self._count else -1

    # Fields of an outstanding PSN (the caller knows it is outstanding).
    def ev(self, psn: int) -> int:
        """The EV of ``psn``'s last transmission."""
        return self._meta[psn - self._base] & EV_BITS

    def sent(self, psn: int) -> int:
        """The send time of ``psn``'s last transmission."""
        return self._sent[psn - self._base]

    def flags(self, psn: int) -> int:
        """``psn``'s flag bits."""
        return self._meta[psn - self._base] >> 32

    def ev_flags(self, psn: int) -> int:
        """``psn``'s EV and flag bits in one read: ``ev | flags << 32``."""
        return self._meta[psn - self._base]

    def settle(self, psn: int, order: EvOrderLike) -> tuple[int, int]:
        """``psn``'s EV and flags (``ev | flags << 32``) and send time, read as it is
        acknowledged; when its transmission is in flight without DUP_RISK and is the
        oldest pair on its EV in ``order`` (the usual case: the path delivered in
        order), that pair is dropped there and ORDERED is set in the flags returned.
        One call for the reads and the order check every acknowledged PSN needs."""
        i = psn - self._base
        word = self._meta[i]
        sent = self._sent[i]
        if (word >> 32) & (IN_FLIGHT | DUP_RISK) == IN_FLIGHT and order.pop_first(
            word & EV_BITS, psn, sent
        ):
            word |= ORDERED << 32
        return word, sent

    def take(self, psn: int, order: EvOrderLike) -> tuple[SendOp, int, int] | None:
        """:meth:`op` and :meth:`settle` in one call, as the requester takes each PSN
        an ACK reports: None when ``psn`` is not outstanding, else its message and
        what ``settle(psn, order)`` returns (``ev | flags << 32`` and send time)."""
        op = self.op(psn)
        if op is None:
            return None
        word, sent = self.settle(psn, order)
        return op, word, sent

    def ack(self, stop: int, base: int, bits: int, limit: int, order: EvOrderLike) -> AckRun:
        """Acknowledge, in one call, the outstanding PSNs an ACK reports that need
        nothing but forgetting: those below ``stop`` (its cumulative ACK), then those
        ``base + k`` for the set bits ``k`` of ``bits`` (its bitmap: the low 64 bits of
        the int) that are below ``limit``; in order, while each is of the same message, in
        flight, without a :data:`QUICK_STOP` flag and the oldest pair on its EV in
        ``order`` (dropped there, as :meth:`settle` does).  Each is removed as
        :meth:`remove` does.  It stops before the first outstanding PSN that is not
        such (another message's, or one the requester must take itself with
        :meth:`take`) and says where (see :data:`AckRun`); the requester adds up
        the run's bytes from the message, as an ACK's PSNs are mostly one message's.
        Called again with the same arguments after that PSN is dealt with, it goes on
        from there (the PSNs acknowledged are no longer outstanding)."""
        psns: list[int] = []
        if self._count:
            psns.extend(range(self.lowest(), stop))  # (every PSN below is acknowledged)
        bits &= MASK64
        while bits:
            low = bits & -bits
            psn = base + low.bit_length() - 1
            if psn >= limit:
                break
            psns.append(psn)
            bits ^= low
        run: SendOp | None = None
        n = last = last_sent = min_sent = reqs = 0
        for psn in psns:
            op = self.op(psn)
            if op is None:
                continue  # acknowledged already
            i = psn - self._base
            word = self._meta[i]
            flags = word >> 32
            sent = self._sent[i]
            if (
                (run is not None and op is not run)
                or flags & (IN_FLIGHT | QUICK_STOP) != IN_FLIGHT
                or not order.pop_first(word & EV_BITS, psn, sent)
            ):
                return run, n, last, last_sent, min_sent, reqs, psn
            self.remove(psn, True)
            if run is None or sent < min_sent:
                min_sent = sent
            run = op
            n += 1
            last = psn
            last_sent = sent
            if flags & ACK_REQ:
                reqs += 1
        return run, n, last, last_sent, min_sent, reqs, -1

    def set_bits(self, psn: int, bits: int) -> None:
        """Set flag ``bits`` of ``psn``."""
        i = psn - self._base
        self._meta[i] |= bits << 32

    def clear_bits(self, psn: int, bits: int) -> None:
        """Clear flag ``bits`` of ``psn``."""
        i = psn - self._base
        self._meta[i] &= ~(bits << 32) & MASK64

    def retries(self, psn: int) -> int:
        """The local ACK timeouts ``psn`` has had."""
        return self._retries[psn - self._base]

    def count_retry(self, psn: int) -> None:
        """``psn`` timed out once more."""
        self._retries[psn - self._base] += 1

    def add(self, psn: int, op: SendOp) -> None:
        """Record ``psn`` (of message ``op``), sent for the first time; PSNs come in order."""
        ops = self._ops
        if not self._count:
            self._base = psn
            self._lo = 0
            self._end = 0
        i = psn - self._base
        if i < self._end:
            raise ValueError(f"TxTable: PSN {psn} is not past the newest")
        if i >= len(ops):
            # Grow every array by a batch of empty slots (one call per array per
            # GROW_BATCH PSNs, not one per PSN: the arrays' calls are the cost).
            more = i + GROW_BATCH - len(ops)
            ops.extend([None] * more)
            for a in (self._meta, self._sent, self._retries, self._prev, self._next):
                a.frombytes(bytes(more * a.itemsize))
        ops[i] = op
        self._end = i + 1
        self._count += 1

    def remove(self, psn: int, in_flight: bool) -> None:
        """Forget outstanding ``psn`` (acknowledged); ``in_flight``: it is in flight
        (its IN_FLIGHT flag), and is taken out first."""
        i = psn - self._base
        if in_flight:
            self._unlink(psn, i)
        ops = self._ops
        ops[i] = None
        self._count -= 1
        if not self._count:
            self.clear()
            return
        if i == self._lo:
            lo = i + 1
            while ops[lo] is None:  # a slot past the front is occupied (count > 0)
                lo += 1
            if lo >= TRIM_BATCH:
                for a in (self._meta, self._sent, self._retries, self._prev, self._next):
                    del a[:lo]
                del ops[:lo]
                self._base += lo
                self._end -= lo
                lo = 0
            self._lo = lo

    def clear(self) -> None:
        """Forget every record."""
        self._ops.clear()
        for a in (self._meta, self._sent, self._retries, self._prev, self._next):
            del a[:]
        self._count = 0
        self._lo = 0
        self._end = 0
        self._head = -1
        self._tail = -1

    # -- in flight ------------------------------------------------------------------
    def launch(self, psn: int, ev: int, sent: int, flags: int) -> None:
        """``psn`` (not in flight) is sent now on ``ev`` at ``sent``: set its EV,
        send time and flags (IN_FLIGHT added) and put it last in flight."""
        i = psn - self._base
        self._meta[i] = ev | (flags | IN_FLIGHT) << 32
        self._sent[i] = sent
        tail = self._tail
        self._prev[i] = tail + 1
        self._next[i] = 0
        if tail < 0:
            self._head = psn
        else:
            self._next[tail - self._base] = psn + 1
        self._tail = psn

    def send(self, psn: int, ev: int, sent: int, flags: int, order: EvOrderLike) -> None:
        """The records one transmission makes, in one call: :meth:`launch` (``psn``
        sent now on ``ev`` at ``sent`` with ``flags``) and the pair appended last on
        its EV in ``order`` (:meth:`EvOrder.append`).  (The native table takes a
        native EvOrder: one call where the requester made two, each boxing its
        arguments.)"""
        order.append(ev, psn, sent)
        self.launch(psn, ev, sent, flags)

    def add_send(
        self, psn: int, op: SendOp, ev: int, sent: int, flags: int, order: EvOrderLike
    ) -> None:
        """A new PSN's first transmission in one call: :meth:`add` (``psn`` of ``op``)
        then :meth:`send` (on ``ev`` at ``sent`` with ``flags``, appended to
        ``order``).  (The native table checks every argument before either record;
        one call where the requester made two, each boxing its arguments.)"""
        self.add(psn, op)
        self.send(psn, ev, sent, flags, order)

    def land(self, psn: int) -> int:
        """Take ``psn`` (in flight) out of flight; return its flags from before."""
        i = psn - self._base
        m = self._meta[i]
        self._unlink(psn, i)
        self._meta[i] = m & ~(IN_FLIGHT << 32)
        return m >> 32

    def _unlink(self, psn: int, i: int) -> None:
        base = self._base
        prev = self._prev[i] - 1
        nxt = self._next[i] - 1
        if prev < 0:
            self._head = nxt
        else:
            self._next[prev - base] = nxt + 1
        if nxt < 0:
            self._tail = prev
        else:
            self._prev[nxt - base] = prev + 1

    def flying(self) -> bool:
        """True when some PSN is in flight."""
        return self._head >= 0

    def oldest(self) -> int:
        """The PSN sent longest ago of those in flight, -1 when none is."""
        return self._head

    def after(self, psn: int) -> int:
        """The PSN sent after ``psn`` (in flight) among those in flight, -1 after the newest."""
        return self._next[psn - self._base] - 1

    def rto_at(self, timeout: int, linear: int, cap: int) -> int:
        """When the oldest transmission in flight times out, -1 when none is in flight.

        Its send time plus its timeout after the timeouts it has had (``retries``):
        ``timeout`` for the first ``linear`` of them, then doubling (``timeout << 1``
        after the ``linear``-th, at most ``<< 30``), at most ``cap``.  The requester
        asks it whenever it re-reads its deadline (after every packet in or out):
        one call instead of three.  ``timeout`` and ``cap`` are 0 or more and below
        ``2**63``, else ValueError.
        """
        if not (0 <= timeout < 1 << 63 and 0 <= cap < 1 << 63):
            raise ValueError("TxTable.rto_at: timeout and cap are in [0, 2**63)")
        head = self._head
        if head < 0:
            return -1
        i = head - self._base
        extra = self._retries[i] - linear
        if extra < 0:
            rto = timeout
        else:
            rto = timeout << min(extra + 1, 30)
            if rto > cap:
                rto = cap
        return self._sent[i] + rto


class EvOrder:
    """Per EV, the transmissions sent on it and not yet resolved, in send order: the
    order evidence of loss on that path (see ``Requester._on_order``).

    A transmission is a (PSN, send time) pair, resolved when a later one on its EV
    is acknowledged (the requester then judges the earlier ones: gaps) or when it
    is NACKed.  A PSN resent on another EV has a pair on each.  Pairs live in a
    pool of entries (PSN, send time, next entry) chained per EV, oldest first; an
    open-addressing table over the EVs (32 bits each) gives each EV's chain ends.
    A QP sprays over hundreds of EVs with a pair or two on each: a dict of arrays
    cost about 180 bytes per EV, the native table about 16 bytes per EV and 32 per pair (each a
    cache-line-aligned record).
    """

    __slots__ = ("_free", "_heads", "_keys", "_mask", "_next", "_psn", "_sent", "_tails", "_used")

    def __init__(self) -> None:
        #: the table: per slot, its EV, and its chain's first and last entry; a
        #: slot's first entry is -2 when the slot is free, -1 when its chain is empty
        #: (an EV once used keeps its slot).  At most three quarters are used.
        #: Entries are stored plus 2 (-2 as 0, -1 as 1) in unsigned arrays, as are
        #: the pool's next entries: an unsigned array's item is written without the
        #: argument parsing a signed one's costs.
        self._keys: array[int] = array("I", bytes(4 * 16))
        self._heads: array[int] = array("I", bytes(4 * 16))
        self._tails: array[int] = array("I", [1]) * 16
        self._mask = 15
        self._used = 0
        #: the pool: per entry, its PSN, send time and the next entry of its chain
        #: (-1 at the end; the free entries are chained from ``_free`` the same way;
        #: stored plus 2, as the table's).
        self._psn: array[int] = array("Q")
        self._sent: array[int] = array("Q")
        self._next: array[int] = array("I")
        self._free = -1

    def _find(self, ev: int) -> int:
        """The table slot of ``ev``, or the free slot where it would go."""
        mask = self._mask
        h = (ev ^ (ev >> 16) ^ (ev >> 7)) & mask
        heads = self._heads
        keys = self._keys
        while True:
            # (the key first: a free slot's key is 0, and a free slot comes after
            # no EV's own slot in its probe sequence, as slots are never freed)
            if keys[h] == ev or heads[h] == 0:
                return h
            h = (h + 1) & mask

    def _first(self, ev: int) -> int:
        """The table slot of ``ev`` and its chain's first entry, packed as
        ``slot << 32 | entry``, or -1 when ``ev`` has no pair."""
        if not 0 <= ev < 1 << 32:
            return -1  # (an EV from the network is any integer)
        h = self._find(ev)
        e = self._heads[h] - 2
        return -1 if e < 0 else h << 32 | e

    def append(self, ev: int, psn: int, sent: int) -> None:
        """A transmission of ``psn`` went out on ``ev`` at ``sent``: last in its chain."""
        h = self._find(ev)
        heads = self._heads
        first = heads[h] - 2
        if first == -2:
            self._keys[h] = ev
            first = -1
            heads[h] = 1
            self._used += 1
            if 4 * self._used > 3 * (self._mask + 1):
                self._grow()
                h = self._find(ev)
                heads = self._heads
        nxt = self._next
        e = self._free
        if e >= 0:
            self._free = nxt[e] - 2
            self._psn[e] = psn
            self._sent[e] = sent
            nxt[e] = 1
        else:
            e = len(self._psn)
            self._psn.append(psn)
            self._sent.append(sent)
            nxt.append(1)
        if first < 0:
            heads[h] = e + 2
        else:
            nxt[self._tails[h] - 2] = e + 2
        self._tails[h] = e + 2

    def _grow(self) -> None:
        """Double the table and put every EV's slot back."""
        keys = self._keys
        heads = self._heads
        tails = self._tails
        size = 2 * (self._mask + 1)
        self._mask = size - 1
        self._keys = array("I", bytes(4 * size))
        self._heads = array("I", bytes(4 * size))
        self._tails = array("I", [1]) * size
        for j in range(len(keys)):
            if heads[j] != 0:
                h = self._find(keys[j])
                self._keys[h] = keys[j]
                self._heads[h] = heads[j]
                self._tails[h] = tails[j]

    def _release(self, e: int) -> None:
        """Put pool entry ``e`` on the free chain."""
        self._next[e] = self._free + 2
        self._free = e

    def pop_first(self, ev: int, psn: int, sent: int) -> bool:
        """When ``psn, sent`` is the oldest pair on ``ev``, drop it and return True."""
        found = self._first(ev)
        if found < 0:
            return False
        e = found & 0xFFFFFFFF
        if self._psn[e] != psn or self._sent[e] != sent:
            return False
        nxt = self._next
        self._heads[found >> 32] = nxt[e]
        nxt[e] = self._free + 2
        self._free = e
        return True

    def take_through(self, ev: int, psn: int, sent: int) -> list[int] | None:
        """Drop the pairs of ``ev`` up to the first ``psn, sent`` and return those
        before it, as flat pairs ``PSN, send time`` in send order; None (nothing
        dropped) when ``ev`` has no such pair."""
        found = self._first(ev)
        if found < 0:
            return None
        h = found >> 32
        psns = self._psn
        sents = self._sent
        nxt = self._next
        e = found & 0xFFFFFFFF
        while e >= 0 and (psns[e] != psn or sents[e] != sent):
            e = nxt[e] - 2
        if e < 0:
            return None
        before: list[int] = []
        e = found & 0xFFFFFFFF
        while psns[e] != psn or sents[e] != sent:
            before.append(psns[e])
            before.append(sents[e])
            following = nxt[e] - 2
            self._release(e)
            e = following
        self._heads[h] = nxt[e]
        self._release(e)
        return before

    def remove(self, ev: int, psn: int, sent: int) -> None:
        """Drop the first pair ``psn, sent`` of ``ev``, if it has one."""
        found = self._first(ev)
        if found < 0:
            return
        h = found >> 32
        psns = self._psn
        sents = self._sent
        nxt = self._next
        prev = -1
        e = found & 0xFFFFFFFF
        while e >= 0 and (psns[e] != psn or sents[e] != sent):
            prev = e
            e = nxt[e] - 2
        if e < 0:
            return
        if prev < 0:
            self._heads[h] = nxt[e]
        else:
            nxt[prev] = nxt[e]
            if nxt[e] == 1:
                self._tails[h] = prev + 2
        self._release(e)

    def pairs(self, ev: int) -> list[tuple[int, int]]:
        """The pairs of ``ev`` in send order (for tests and inspection)."""
        found = self._first(ev)
        out: list[tuple[int, int]] = []
        if found < 0:
            return out
        e = found & 0xFFFFFFFF
        while e >= 0:
            out.append((self._psn[e], self._sent[e]))
            e = self._next[e] - 2
        return out


class TxTableLike(Protocol):
    """What the requester uses of a :class:`TxTable` (the Python class or the native
    one): see :class:`TxTable` for each method."""

    def __len__(self) -> int: ...
    def __contains__(self, psn: int) -> bool: ...
    def op(self, psn: int) -> SendOp | None: ...
    def lowest(self) -> int: ...
    def ev(self, psn: int) -> int: ...
    def sent(self, psn: int) -> int: ...
    def flags(self, psn: int) -> int: ...
    def ev_flags(self, psn: int) -> int: ...
    def settle(self, psn: int, order: EvOrderLike) -> tuple[int, int]: ...
    def take(self, psn: int, order: EvOrderLike) -> tuple[SendOp, int, int] | None: ...
    def ack(self, stop: int, base: int, bits: int, limit: int, order: EvOrderLike) -> AckRun: ...
    def set_bits(self, psn: int, bits: int) -> None: ...
    def clear_bits(self, psn: int, bits: int) -> None: ...
    def retries(self, psn: int) -> int: ...
    def count_retry(self, psn: int) -> None: ...
    def add(self, psn: int, op: SendOp) -> None: ...
    def remove(self, psn: int, in_flight: bool) -> None: ...
    def clear(self) -> None: ...
    def launch(self, psn: int, ev: int, sent: int, flags: int) -> None: ...
    def send(self, psn: int, ev: int, sent: int, flags: int, order: EvOrderLike) -> None: ...
    def add_send(
        self, psn: int, op: SendOp, ev: int, sent: int, flags: int, order: EvOrderLike
    ) -> None: ...
    def land(self, psn: int) -> int: ...
    def flying(self) -> bool: ...
    def oldest(self) -> int: ...
    def after(self, psn: int) -> int: ...
    def rto_at(self, timeout: int, linear: int, cap: int) -> int: ...


class EvOrderLike(Protocol):
    """What the requester uses of an :class:`EvOrder` (the Python class or the native
    one): see :class:`EvOrder` for each method."""

    def append(self, ev: int, psn: int, sent: int) -> None: ...
    def pop_first(self, ev: int, psn: int, sent: int) -> bool: ...
    def take_through(self, ev: int, psn: int, sent: int) -> list[int] | None: ...
    def remove(self, ev: int, psn: int, sent: int) -> None: ...
    def pairs(self, ev: int) -> list[tuple[int, int]]: ...


#: What the Python side takes from the native module: all of it, or none (an older
#: build left beside newer sources, when the optional build of ``_txtable.c`` failed,
#: lacks the newer names; the pure-Python classes are used then).
NATIVE_NAMES: Final = (
    "TxTable", "EvOrder", "EvIds", "good_evs", "good_after", "good_pick", "rotate",
    "ecn_clean",
)  # fmt: skip
#: The newest methods of those classes, checked the same way: (class, method).
NATIVE_METHODS: Final = (
    ("TxTable", "rto_at"),
    ("TxTable", "send"),
    ("TxTable", "take"),
    ("TxTable", "add_send"),
    ("TxTable", "ack"),
)


def _load_native() -> ModuleType | None:
    """The native module, or None when it is not built, lacks one of
    :data:`NATIVE_NAMES` or :data:`NATIVE_METHODS`, or ``OPENMRC_PURE_PYTHON`` is set."""
    if os.environ.get("OPENMRC_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from . import _txtable
    except ImportError:
        return None
    if not all(hasattr(_txtable, name) for name in NATIVE_NAMES):
        return None
    if not all(hasattr(getattr(_txtable, cls), name) for cls, name in NATIVE_METHODS):
        return None
    return _txtable


#: The native TxTable and EvOrder (:mod:`openmrc.transport._txtable`; also the EV ids
#: of :func:`openmrc.transport.paths.new_ev_ids`), or None when the Python classes are
#: in use.
_NATIVE: Final = _load_native()
#: Whether the requester's records are the native ones.
NATIVE: Final = _NATIVE is not None
#: The classes :func:`new_tx_table` and :func:`new_ev_order` make: the requester
#: calls their per-packet methods unbound through these (``TX_CLASS.add(table,
#: psn, op)``, kept in module constants), which skips the look-up of the method
#: by name on the object that ``table.add(psn, op)`` costs on every call when
#: compiled (a method of a protocol-typed object is called by name).
TX_CLASS: Final[Any] = _NATIVE.TxTable if _NATIVE is not None else TxTable
EV_ORDER_CLASS: Final[Any] = _NATIVE.EvOrder if _NATIVE is not None else EvOrder


def new_tx_table() -> TxTableLike:
    """An empty TxTable: the native one when built, else :class:`TxTable`."""
    if _NATIVE is not None:
        table: TxTableLike = _NATIVE.TxTable()
        return table
    return TxTable()


def new_ev_order() -> EvOrderLike:
    """An empty EvOrder: the native one when built, else :class:`EvOrder`."""
    if _NATIVE is not None:
        order: EvOrderLike = _NATIVE.EvOrder()
        return order
    return EvOrder()
