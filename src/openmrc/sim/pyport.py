"""The pure-Python egress port (:class:`PyEgressPort`), compiled by mypyc in a compiled build.

:mod:`openmrc.sim.port` documents the port and chooses between this class and the
native kernel's port; this module holds the Python one apart so that it can be
compiled (the baseline fabric's port, :class:`~openmrc.baselines.datapath.BaselinePort`,
subclasses it, and a compiled class can only subclass a compiled one).  The same
source runs interpreted with ``OPENMRC_PURE_PYTHON=1``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from openmrc.wire.packets import DataPacket, Packet

#: What a port calls at the far end: ``rx(pkt, sending_port, epoch)``.
Receiver = Callable[[Packet, Any, int], None]

#: Names of the counters every port keeps (see :meth:`PyEgressPort.counters`).
COUNTERS = (
    "tx_pkts",
    "tx_bytes",
    "trims",
    "ecn_marks",
    "drops_full",
    "drops_header",
    "drops_down",
    "lost",
    "lost_silent",
    "max_queue_bytes",
)


def port_counters(port: Any) -> dict[str, int]:
    """``port``'s counters by name (:data:`COUNTERS`), for either kind of port."""
    return {name: getattr(port, name) for name in COUNTERS}


def port_utilisation(tx_bytes: int, rate_bps: int, elapsed_ps: int) -> float:
    """Fraction of ``elapsed_ps`` a port of ``rate_bps`` that sent ``tx_bytes`` spent serializing."""
    if elapsed_ps <= 0:
        return 0.0
    return min(1.0, tx_bytes * 8 * 10**12 / (rate_bps * elapsed_ps))


def port_repr(port: Any) -> str:
    """How either kind of port prints."""
    return f"EgressPort({port.name}, q={port.data_bytes}+{port.prio_bytes}B, up={port.up})"


class PyEgressPort:
    """One direction of a link: queues, serializer, wire state, counters.

    ``name`` is ``"<node>:<port>-><peer>"``.  ``rx`` is called at the far end
    ``delay`` ps after the last byte leaves.  Call :meth:`enqueue` (hot path,
    at ``sim.now``) or :meth:`send` (same, returns when the port drains).
    """

    __slots__ = (
        "_data_wb",
        "_den",
        "_num",
        "_prio_wb",
        "_push",
        "_rng",
        "busy_until",
        "data",
        "data_bytes",
        "data_limit",
        "delay",
        "drops_down",
        "drops_full",
        "drops_header",
        "ecn",
        "ecn_marks",
        "epoch",
        "framing",
        "impaired",
        "kmax",
        "kmin",
        "lasthop",
        "link",
        "loss",
        "lost",
        "lost_silent",
        "max_queue_bytes",
        "name",
        "peer",
        "prio",
        "prio_bytes",
        "prio_limit",
        "rate_bps",
        "rx",
        "silent",
        "sim",
        "trim",
        "trims",
        "tx_bytes",
        "tx_pkts",
        "txev",
        "up",
    )

    def __init__(
        self,
        sim: Any,
        name: str,
        rate_bps: int,
        delay_ps: int,
        rx: Receiver,
        *,
        data_limit: int,
        prio_limit: int,
        trim: bool = True,
        lasthop: bool = False,
        ecn: bool = False,
        kmin: int = 0,
        kmax: int = 0,
        framing: int = 38,
        peer: str = "",
    ) -> None:
        if rate_bps <= 0:
            raise ValueError(f"EgressPort {name}: rate must be positive, got {rate_bps}")
        if delay_ps < 0:
            raise ValueError(f"EgressPort {name}: delay must not be negative, got {delay_ps}")
        #: the simulator: the native one or :class:`~openmrc.sim.engine.PySimulator`
        #: (``Any``: a compiled build checks no class at this boundary)
        self.sim: Any = sim
        self._push: Any = sim.push
        # the port's own generator (sim.rng_for(name)), made on its first draw: most
        # ports never draw (no loss, no ECN ramp), and a generator is 2.5 KB
        self._rng: Any = None
        self.name = name
        self.peer = peer
        self.link: Any = None
        self.rate_bps = rate_bps
        ps_per_byte = Fraction(8 * 10**12, rate_bps)
        self._num = ps_per_byte.numerator
        self._den = ps_per_byte.denominator
        self.delay = delay_ps
        self.rx = rx
        self.framing = framing
        self.data_limit = data_limit
        self.prio_limit = prio_limit
        self.trim = trim
        self.lasthop = lasthop
        self.ecn = ecn
        self.kmin = kmin
        self.kmax = max(kmin, kmax)
        self.data: deque[Packet] = deque()
        self.prio: deque[Packet] = deque()
        # the wire bytes each queued packet was counted with at enqueue, beside it
        # (what the transmitter takes off the queue's count when it sends it)
        self._data_wb: deque[int] = deque()
        self._prio_wb: deque[int] = deque()
        self.data_bytes = 0
        self.prio_bytes = 0
        self.busy_until = 0
        #: the pending 'transmitter free' event (what the simulator's push returned)
        self.txev: Any = None
        self.up = True
        self.epoch = 0
        self.silent = False
        self.loss = 0.0
        self.impaired = False
        self.tx_pkts = 0
        self.tx_bytes = 0
        self.trims = 0
        self.ecn_marks = 0
        self.drops_full = 0
        self.drops_header = 0
        self.drops_down = 0
        self.lost = 0
        self.lost_silent = 0
        self.max_queue_bytes = 0

    # ----- timing ----------------------------------------------------------------
    def serialization_ps(self, nbytes: int) -> int:
        """Time to put ``nbytes`` wire bytes (framing included) on this link, rounded up."""
        return -(-nbytes * self._num // self._den)

    def wire_bytes(self, pkt: Packet) -> int:
        """Bytes ``pkt`` occupies on this link (IP size + framing)."""
        p: Any = pkt  # read as Python reads it (see :meth:`enqueue`)
        return p.size + self.framing  # type: ignore[no-any-return]

    def queued_bytes(self) -> int:
        """Bytes waiting (both queues), not counting the packet being serialized."""
        return self.data_bytes + self.prio_bytes

    def drain_time(self) -> int:
        """When the last byte of everything queued now will have left (if nothing jumps in)."""
        now = self.sim.now
        start = self.busy_until if self.busy_until > now else now
        q = self.data_bytes + self.prio_bytes
        return start + (-(-q * self._num // self._den) if q else 0)

    # ----- the hot path ----------------------------------------------------------
    def send(self, pkt: Packet, now: int | None = None) -> int:
        """Queue ``pkt`` now (``now``, if given, must be ``sim.now``); return :meth:`drain_time`.

        This is the NIC-facing form of :meth:`enqueue`: the NIC learns when the
        port will be free again and can schedule its next packet for then.
        """
        if now is not None and now != self.sim.now:
            raise ValueError(f"{self.name}.send: now={now} but the simulator is at {self.sim.now}")
        self.enqueue(pkt)
        return self.drain_time()

    def enqueue(self, pkt: Packet) -> None:
        """Accept ``pkt`` at ``sim.now``: transmit, queue, mark, trim or drop it.

        The packet's fields are read as Python reads them, compiled too (``p`` is
        ``Any``): a packet class may redefine them (a property), as the native
        kernel allows.
        """
        if not self.up:
            self.drops_down += 1
            return
        p: Any = pkt
        now = self.sim.now
        wb = p.size + self.framing
        if self.txev is None and self.busy_until <= now:
            # Idle: start serializing at once; only the arrival is an event.
            self._put_on_wire(pkt, wb, now)
            return
        if isinstance(pkt, DataPacket) and not p.trimmed:
            q = self.data_bytes
            if q + wb <= self.data_limit:
                if self.ecn and q > self.kmin:
                    kmax = self.kmax
                    if q >= kmax or self._draw() * (kmax - self.kmin) < q - self.kmin:
                        p.ecn = True
                        self.ecn_marks += 1
                self.data.append(pkt)
                self._data_wb.append(wb)
                q += wb
                self.data_bytes = q
                q += self.prio_bytes
                if q > self.max_queue_bytes:
                    self.max_queue_bytes = q
                if self.txev is None:
                    self._arm()
                return
            if not self.trim:
                self.drops_full += 1
                return
            p.trim(self.lasthop)
            self.trims += 1
            wb = p.size + self.framing
        q = self.prio_bytes + wb
        if q > self.prio_limit:
            self.drops_header += 1
            return
        self.prio.append(pkt)
        self._prio_wb.append(wb)
        self.prio_bytes = q
        q += self.data_bytes
        if q > self.max_queue_bytes:
            self.max_queue_bytes = q
        if self.txev is None:
            self._arm()

    # ----- reporting ---------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """The port's counters by name (see :data:`COUNTERS`)."""
        return port_counters(self)

    def utilisation(self, elapsed_ps: int) -> float:
        """Fraction of ``elapsed_ps`` this port spent serializing (from bytes sent)."""
        return port_utilisation(self.tx_bytes, self.rate_bps, elapsed_ps)

    def __repr__(self) -> str:
        return port_repr(self)

    def _put_on_wire(self, pkt: Packet, wb: int, now: int) -> bool:
        """Serialize ``pkt`` (``wb`` wire bytes) from ``now``; schedule its arrival.

        Returns False when the wire loses it (a silent link or random loss).
        """
        end = now - (-wb * self._num // self._den)
        self.busy_until = end
        self.tx_pkts += 1
        self.tx_bytes += wb
        if self.impaired and self._impair():
            return False
        self._push(end + self.delay, self.rx, (pkt, self, self.epoch))
        return True

    def _arm(self) -> None:
        """Schedule the 'transmitter free' event at the end of the current serialization."""
        now = self.sim.now
        at = self.busy_until if self.busy_until > now else now
        self.txev = self._push(at, self._tx_free, ())

    def _tx_free(self) -> None:
        """The transmitter is free: start the next packet, header queue first.

        A packet leaves with the wire bytes it was queued with (the queue's count
        stays exact even if something changed ``pkt.size`` while it waited).
        """
        if self.prio:
            pkt = self.prio.popleft()
            wb = self._prio_wb.popleft()
            self.prio_bytes -= wb
        elif self.data:
            pkt = self.data.popleft()
            wb = self._data_wb.popleft()
            self.data_bytes -= wb
        else:
            self.txev = None
            return
        self._put_on_wire(pkt, wb, self.sim.now)
        end = self.busy_until
        if self.prio or self.data:
            self.txev = self._push(end, self._tx_free, ())
        else:
            self.txev = None

    def _impair(self) -> bool:
        """Whether the wire loses the packet just sent (silent link or random loss)."""
        if self.silent:
            self.lost_silent += 1
            return True
        if self.loss and self._draw() < self.loss:
            self.lost += 1
            return True
        return False

    def _draw(self) -> float:
        """The next draw of the port's own generator (made on the first)."""
        rng = self._rng
        if rng is None:
            rng = self._rng = self.sim.rng_for(self.name)
        return rng.random()  # type: ignore[no-any-return]

    def lost_in_flight(self, pkt: Packet) -> None:
        """The far end calls this for a packet sent before the link went down."""
        self.drops_down += 1

    # ----- wire state ------------------------------------------------------------
    def set_up(self, up: bool) -> None:
        """Bring this direction up or down at ``sim.now``.

        Going down flushes both queues, loses the packets on the wire and frees
        the transmitter; all those packets count in ``drops_down``.
        """
        if up == self.up:
            return
        self.up = up
        if up:
            return
        self.epoch += 1
        self.drops_down += len(self.data) + len(self.prio)
        self.data.clear()
        self.prio.clear()
        self._data_wb.clear()
        self._prio_wb.clear()
        self.data_bytes = 0
        self.prio_bytes = 0
        if self.txev is not None:
            self.sim.cancel(self.txev)
            self.txev = None
        self.busy_until = self.sim.now

    def report_queued(self, data_bytes: int, prio_bytes: int) -> None:
        """After a partitioned run: the bytes another rank reported queued at this port
        (rank 0 merges them; its own queues are empty, the port's events ran there)."""
        if self.data or self.prio:
            raise ValueError("report_queued: the port has packets queued")
        self.data_bytes = data_bytes
        self.prio_bytes = prio_bytes

    def set_impairment(self, silent: bool | None = None, loss: float | None = None) -> None:
        """Set the silent flag and/or the random loss probability of this direction."""
        if silent is not None:
            self.silent = bool(silent)
        if loss is not None:
            if not 0.0 <= loss <= 1.0:
                raise ValueError(f"{self.name}: loss probability must be in [0, 1], got {loss}")
            self.loss = float(loss)
        self.impaired = self.silent or self.loss > 0.0


def py_busy_mask(ports: Sequence[Any], now: int) -> int:
    """Bit ``p`` set when port ``p`` is down, serializing or has a queue (a NIC's busy ports)."""
    busy = 0
    for p, port in enumerate(ports):
        if not port.up or port.busy_until > now or port.data_bytes or port.prio_bytes:
            busy |= 1 << p
    return busy


def py_soonest_drain(ports: Sequence[Any], now: int) -> int | None:
    """The earliest :meth:`~PyEgressPort.drain_time` after ``now`` of a port that is up, or None."""
    soonest = None
    for port in ports:
        if port.up:
            t = port.drain_time()
            if t > now and (soonest is None or t < soonest):
                soonest = t
    return soonest


def py_post_drain(
    sim: Any, ports: Sequence[Any], now: int, armed: int, callback: Callable[[Any], Any]
) -> int | None:
    """Arm a NIC's pump in one call: ``t``, the soonest drain after ``now``
    (:func:`py_soonest_drain`), posted as ``sim.post(t, callback, t)`` when no pump is
    armed (``armed`` < 0) or ``t`` is before ``armed``; returns ``t`` when posted, else None.
    """
    t = py_soonest_drain(ports, now)
    if t is None or (armed >= 0 and t >= armed):
        return None
    sim.post(t, callback, t)
    return t


def py_send_post(
    port: Any,
    pkt: Packet,
    sim: Any,
    ports: Sequence[Any],
    now: int,
    armed: int,
    callback: Callable[[Any], Any],
) -> int | None:
    """``port.enqueue(pkt)``, then :func:`py_post_drain` (its result returned): a NIC's
    last free port given a packet and its pump armed in one call."""
    port.enqueue(pkt)
    return py_post_drain(sim, ports, now, armed, callback)
