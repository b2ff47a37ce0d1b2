"""Two MRC endpoints back to back through an in-memory multipath channel.

This is the transport's test bench (and what ``openmrc demo loopback`` runs): two
:class:`~openmrc.transport.Context` objects, each with a NIC that serializes
packets at a given rate, joined by a channel that applies faults per EV:
random loss, blackholed EVs or whole planes (silent drops), trimming (at the
last hop or not), reordering (extra random delay), duplication, ECN marking,
and, in bytes mode, corruption.  Packets travel as objects, or, with
``wire=True``, encoded to bytes and decoded again, exactly as on a network.

It is a tiny discrete-event loop of its own (integer picoseconds, heapq,
deterministic for a seed); the full fabric simulator lives in ``openmrc.sim``.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .transport import Context, QPAttr, QueuePair
from .transport.errors import InvalidArgument
from .transport.ev import ev_plane
from .wire.packets import DataPacket, Packet, copy_packet

_ETH_OVERHEAD = 38  # Ethernet header + FCS + preamble + inter-frame gap


@dataclass
class Faults:
    """What the channel does to packets, per direction.

    Probabilities are per packet.  ``loss_by_ev`` adds loss on chosen EVs;
    ``blackhole_planes``/``blackhole_evs`` drop silently everything on them
    (both data and control).  ``trim``/``trim_lasthop`` cut data packets to
    their header; ``reorder`` delays a packet by up to ``reorder_delay_ps``
    extra; ``duplicate`` sends a copy; ``ecn`` marks CE (``ecn_evs`` always);
    ``corrupt`` flips a byte (only when the channel carries bytes).
    """

    loss: float = 0.0
    loss_by_ev: dict[int, float] = field(default_factory=dict)
    blackhole_planes: set[int] = field(default_factory=set)
    blackhole_evs: set[int] = field(default_factory=set)
    trim: float = 0.0
    trim_lasthop: float = 0.0
    reorder: float = 0.0
    reorder_delay_ps: int = 4_000_000
    duplicate: float = 0.0
    ecn: float = 0.0
    ecn_evs: set[int] = field(default_factory=set)
    corrupt: float = 0.0

    def validate(self) -> None:
        """Raise InvalidArgument naming a probability outside [0, 1]."""
        for name in ("loss", "trim", "trim_lasthop", "reorder", "duplicate", "ecn", "corrupt"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise InvalidArgument(
                    f"Faults.{name}: must be a probability in [0, 1], got {value!r}"
                )
        for ev, p in self.loss_by_ev.items():
            if not 0.0 <= p <= 1.0:
                raise InvalidArgument(f"Faults.loss_by_ev[{ev:#x}]: must be in [0, 1], got {p!r}")
        if not isinstance(self.reorder_delay_ps, int) or self.reorder_delay_ps < 0:
            raise InvalidArgument("Faults.reorder_delay_ps: must be a non-negative int")


@dataclass
class ChannelStats:
    """What the channel did, per direction."""

    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    blackholed: int = 0
    trimmed: int = 0
    reordered: int = 0
    duplicated: int = 0
    ecn_marked: int = 0
    corrupted: int = 0
    evs_used: set[int] = field(default_factory=set)
    #: EV -> time its first data packet was silently dropped by a black hole
    #: (a data packet's loss is what blames an EV; control packets travel on
    #: the reverse EV set's EVs).
    first_blackholed: dict[int, int] = field(default_factory=dict)


class _Endpoint:
    __slots__ = ("busy_until", "ctx", "faults", "index", "peer", "stats", "timer_at", "timer_gen")

    def __init__(self, index: int, ctx: Context, faults: Faults) -> None:
        self.index = index
        self.ctx = ctx
        self.faults = faults
        self.stats = ChannelStats()
        self.busy_until = 0
        self.timer_at: int | None = None
        self.timer_gen = 0
        self.peer: _Endpoint


class Loopback:
    """Two contexts, ``a`` and ``b``, joined by a faulty multipath channel."""

    def __init__(
        self,
        faults_ab: Faults | None = None,
        faults_ba: Faults | None = None,
        rate_bps: float = 100e9,
        delay_ps: int = 2_000_000,
        seed: int = 1,
        wire: bool = False,
    ) -> None:
        if not isinstance(rate_bps, int | float) or rate_bps <= 0:
            raise InvalidArgument(f"rate_bps: must be positive, got {rate_bps!r}")
        if not isinstance(delay_ps, int) or delay_ps < 0:
            raise InvalidArgument(f"delay_ps: must be a non-negative int, got {delay_ps!r}")
        fab = faults_ab or Faults()
        fba = faults_ba or Faults()
        fab.validate()
        fba.validate()
        self.rng = random.Random(seed)
        self.a = Context(random.Random(seed * 2 + 1), name="a")
        self.b = Context(random.Random(seed * 2 + 2), name="b")
        ea, eb = _Endpoint(0, self.a, fab), _Endpoint(1, self.b, fba)
        ea.peer, eb.peer = eb, ea
        self._ends = (ea, eb)
        self.ps_per_byte = 8e12 / rate_bps
        self.delay_ps = delay_ps
        self.wire = wire
        self.now = 0
        self._heap: list[tuple[int, int, int, object, object]] = []
        self._seq = 0
        #: Optional observer, called for every packet the channel carries as
        #: ``trace(time, direction, packet, fate)`` with direction "ab"/"ba" and
        #: fate "blackhole", "drop" or "deliver" (after trimming/marking).
        self.trace: Callable[[int, str, Packet, str], None] | None = None

    # -- set-up --------------------------------------------------------------------
    @property
    def faults_ab(self) -> Faults:
        """Faults applied to packets from ``a`` to ``b`` (mutable mid-run)."""
        return self._ends[0].faults

    @property
    def faults_ba(self) -> Faults:
        """Faults applied to packets from ``b`` to ``a`` (mutable mid-run)."""
        return self._ends[1].faults

    def stats(self, direction: str = "ab") -> ChannelStats:
        """Channel counters for ``"ab"`` or ``"ba"``."""
        return self._ends[0 if direction == "ab" else 1].stats

    def connect(
        self, attr: QPAttr | None = None, attr_b: QPAttr | None = None
    ) -> tuple[QueuePair, QueuePair]:
        """Create one QP on each side and bring both to RTS, connected to each other."""
        cq_a, cq_b = self.a.create_cq(), self.b.create_cq()
        qa = self.a.alloc_pd().create_qp(cq_a)
        qb = self.b.alloc_pd().create_qp(cq_b)
        qa.connect(qb.qpn, attr or QPAttr(), peer="b", now=self.now)
        qb.connect(qa.qpn, attr_b or attr or QPAttr(), peer="a", now=self.now)
        return qa, qb

    # -- the event loop ---------------------------------------------------------------
    def _push(self, at: int, kind: int, a: object, b: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, a, b))

    def kick(self) -> None:
        """Tell the loop that the application posted work (call after post_send)."""
        for end in self._ends:
            self._service(end)

    def _service(self, end: _Endpoint) -> None:
        now = self.now
        if end.busy_until <= now:
            item = end.ctx.poll_packet(now)
            if item is not None:
                pkt = item[1]
                done = now + int((pkt.size + _ETH_OVERHEAD) * self.ps_per_byte)
                end.busy_until = done
                self._push(done, 0, end, None)  # port free again
                self._transmit(end, pkt, done)
        timer = end.ctx.get_timer()
        if timer is not None and timer != end.timer_at:
            end.timer_gen += 1
            end.timer_at = timer
            self._push(max(timer, now), 1, end, end.timer_gen)

    def _transmit(self, end: _Endpoint, pkt: Packet, at: int) -> None:
        f = end.faults
        st = end.stats
        rng = self.rng
        st.sent += 1
        ev = pkt.path_ev  # the path it travels on (a control packet's reverse EV)
        st.evs_used.add(ev)
        trace = self.trace
        direction = "ab" if end.index == 0 else "ba"
        if ev in f.blackhole_evs or (f.blackhole_planes and ev_plane(ev) in f.blackhole_planes):
            st.blackholed += 1
            if type(pkt) is DataPacket:
                st.first_blackholed.setdefault(ev, at)
            if trace is not None:
                trace(at, direction, pkt, "blackhole")
            return
        loss = f.loss + f.loss_by_ev.get(ev, 0.0) if f.loss_by_ev else f.loss
        if loss and rng.random() < loss:
            st.dropped += 1
            if trace is not None:
                trace(at, direction, pkt, "drop")
            return
        if type(pkt) is DataPacket and not pkt.trimmed:
            if f.trim and rng.random() < f.trim:
                pkt.trim(lasthop=False)
                st.trimmed += 1
            elif f.trim_lasthop and rng.random() < f.trim_lasthop:
                pkt.trim(lasthop=True)
                st.trimmed += 1
            if (f.ecn and rng.random() < f.ecn) or ev in f.ecn_evs:
                pkt.ecn = True
                st.ecn_marked += 1
        if trace is not None:
            trace(at, direction, pkt, "deliver")
        copies = 2 if f.duplicate and rng.random() < f.duplicate else 1
        if copies == 2:
            st.duplicated += 1
        for _ in range(copies):
            delay = self.delay_ps
            if f.reorder and rng.random() < f.reorder:
                delay += rng.randrange(f.reorder_delay_ps + 1)
                st.reordered += 1
            payload: object = pkt
            if self.wire:
                from .wire.codec import encode

                data = bytearray(encode(pkt))
                if f.corrupt and rng.random() < f.corrupt:
                    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                    st.corrupted += 1
                payload = bytes(data)
            elif copies == 2:
                payload = copy_packet(pkt)
            self._push(at + delay, 2, end.peer, payload)

    def run(
        self,
        until: int | None = None,
        stop: Callable[[], bool] | None = None,
        max_events: int = 50_000_000,
    ) -> int:
        """Run events until ``until`` ps, until ``stop()`` is true, or until idle.

        Returns the simulated time reached.
        """
        heap = self._heap
        self.kick()
        events = 0
        while heap:
            at, _, kind, a, b = heap[0]
            if until is not None and at > until:
                self.now = until
                break
            heapq.heappop(heap)
            self.now = at
            end: _Endpoint = a  # type: ignore[assignment]
            if kind == 0:
                pass
            elif kind == 1:
                if b != end.timer_gen:
                    continue
                end.timer_at = None
                end.ctx.handle_timer(at)
            else:
                if isinstance(b, bytes | bytearray):
                    end.ctx.receive_datagram(b, at)
                else:
                    end.ctx.receive_packet(b, at)  # type: ignore[arg-type]
                end.peer.stats.delivered += 1
            self._service(end)
            events += 1
            if stop is not None and stop():
                break
            if events >= max_events:
                raise RuntimeError(f"loopback: no progress after {max_events} events")
        return self.now
