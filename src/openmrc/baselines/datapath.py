"""The conventional fabric's per-packet path: :class:`BaselinePort` and :class:`DestSwitch`.

:mod:`openmrc.baselines.fabric` documents the fabric (destination routing, ECMP or
adaptive routing, PFC or credits, DCQCN's ECN marking) and builds it from these two
classes.  They live in a module of their own so that a compiled build compiles them
with mypyc (``setup.py``): every packet of a baseline run crosses a port per link
and a switch per hop, and interpreted they were most of a RoCE run's CPU.  The port
subclasses :class:`~openmrc.sim.pyport.PyEgressPort` (compiled with it); the switch
is its own class rather than a :class:`~openmrc.sim.switch.PySwitch`, which stays
interpreted (a compiled class cannot subclass an interpreted one).  The same source
runs interpreted with ``OPENMRC_PURE_PYTHON=1`` and gives the same results.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final

from ..sim.pyport import PyEgressPort, Receiver
from ..topology import BLOCK_PREFIX
from ..wire.packets import DataPacket, Packet
from .roce import Cnp, RoceAck, RoceData

if TYPE_CHECKING:
    from ..topology import SwitchInfo

#: flow control of the link a port drives into a switch (``BaselinePort.fc``)
FC_NONE: Final = 0
FC_PFC: Final = 1
FC_CREDIT: Final = 2

_M64: Final = 0xFFFFFFFFFFFFFFFF


def _mix(x: int) -> int:
    """A 64-bit finalizer (splitmix's): the ECMP hash of a 5-tuple and the switch seeds."""
    x &= 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 33)


class BaselinePort(PyEgressPort):
    """An :class:`EgressPort` with PFC pause, credits and DCQCN's ECN ramp (see module doc)."""

    __slots__ = (
        "_paused_at",
        "credit_cap",
        "credit_stalls",
        "credits",
        "fc",
        "headroom",
        "ing_bytes",
        "ingress",
        "max_ing_bytes",
        "on_state",
        "pause_frames",
        "pause_sent",
        "paused",
        "paused_ps",
        "pfc_drops",
        "pmax",
        "xoff",
        "xon",
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
        super().__init__(
            sim,
            name,
            rate_bps,
            delay_ps,
            rx,
            data_limit=data_limit,
            prio_limit=prio_limit,
            trim=trim,
            lasthop=lasthop,
            ecn=ecn,
            kmin=kmin,
            kmax=kmax,
            framing=framing,
            peer=peer,
        )
        #: per queued data packet, the upstream port it came through (None: local)
        self.ingress: deque[BaselinePort | None] = deque()
        self.fc = FC_NONE
        self.paused = False
        self.pause_sent = False
        self.ing_bytes = 0
        self.max_ing_bytes = 0
        self.xoff = 0
        self.xon = 0
        self.headroom = 0
        self.credits = 0
        self.credit_cap = 0
        self.pmax = 1.0
        self.pause_frames = 0
        self.paused_ps = 0
        self._paused_at = 0
        self.pfc_drops = 0
        self.credit_stalls = 0
        #: what the fabric's routing model is told when the wire's state changes
        self.on_state: Any = None

    # ----- downstream side: this port's own queue ---------------------------------
    def enqueue(self, pkt: Packet) -> None:
        """Queue ``pkt`` sent by the node that owns this port (no upstream ingress)."""
        self.accept(pkt, None)

    def accept(self, pkt: Packet, via: BaselinePort | None) -> None:
        """Queue ``pkt``, which arrived through the upstream port ``via`` (None: local).

        The per-packet path: the upstream port's flow-control accounting is
        :meth:`charge` here and :meth:`discharge` in :meth:`_tx_free` (native calls:
        this module is compiled), the wire inlined in :meth:`_tx_free`.
        """
        wb = pkt.size + self.framing
        is_data = isinstance(pkt, DataPacket)
        if not self.up:
            self.drops_down += 1
            if via is not None and is_data:
                via.refund(wb)
            return
        if not is_data:
            p = self.prio_bytes + wb
            if p > self.prio_limit:
                self.drops_header += 1
                return
            self.prio.append(pkt)
            self.prio_bytes = p
            q = p + self.data_bytes
        else:
            if via is not None and via.fc and not via.charge(wb):
                self.pfc_drops += 1
                return
            q = self.data_bytes
            if q + wb > self.data_limit:
                self.drops_full += 1
                if via is not None:
                    via.discharge(wb)
                return
            self.data.append(pkt)
            self.ingress.append(via)
            self.data_bytes = q = q + wb
            q += self.prio_bytes
        if q > self.max_queue_bytes:
            self.max_queue_bytes = q
        if self.txev is None:
            if self.busy_until <= self.sim.now:
                self._tx_free()
            else:
                self._arm()

    def _can_send_data(self) -> bool:
        if not self.data or self.paused:
            return False
        if self.fc == FC_CREDIT:
            return self.credits >= self.data[0].size + self.framing
        return True

    def _tx_free(self) -> None:
        """Start the next packet: control first, then data unless paused or out of credit.

        The wire (:meth:`~openmrc.sim.port.PyEgressPort._put_on_wire`: serialize,
        count, impair, schedule the arrival) is inlined: this runs for every packet
        on every link of the fabric.
        """
        data = self.data
        paused = self.paused
        if self.prio:
            pkt = self.prio.popleft()
            wb = pkt.size + self.framing
            self.prio_bytes -= wb
            is_data = False
        elif data and not paused:
            pkt = data[0]
            wb = pkt.size + self.framing
            if self.fc == FC_CREDIT:
                if self.credits < wb:
                    self.credit_stalls += 1
                    self.txev = None
                    return
                self.credits -= wb
            data.popleft()
            via = self.ingress.popleft()
            q = self.data_bytes
            self.data_bytes = q - wb
            if self.ecn and q > self.kmin:
                # marked at dequeue on the queue it leaves behind it (no queueing delay
                # in the feedback loop, as on shared-buffer switch ASICs)
                kmin, kmax = self.kmin, self.kmax
                if q >= kmax or self._draw() * (kmax - kmin) < self.pmax * (q - kmin):
                    pkt.ecn = True
                    self.ecn_marks += 1
            if via is not None and via.fc:
                via.discharge(wb)
            is_data = True
        else:
            self.txev = None
            return
        # the wire: PyEgressPort._put_on_wire, inlined
        end = self.sim.now - (-wb * self._num // self._den)
        self.busy_until = end
        self.tx_pkts += 1
        self.tx_bytes += wb
        if self.impaired and self._impair():
            if is_data:
                self.refund(wb)
        else:
            self._push(end + self.delay, self.rx, (pkt, self, self.epoch))
        if self.prio or (
            data
            and not paused
            and (self.fc != FC_CREDIT or self.credits >= data[0].size + self.framing)
        ):
            self.txev = self._push(end, self._tx_free, ())
        else:
            self.txev = None

    def _kick(self) -> None:
        if self.txev is None and self.up and (self.prio or self._can_send_data()):
            if self.busy_until <= self.sim.now:
                self._tx_free()
            else:
                self._arm()

    # ----- upstream side: the far end's buffer for what this port sent ------------
    def charge(self, wb: int) -> bool:
        """``wb`` bytes from this port entered the far switch's buffer; False = drop (PFC).

        Under credits this is only accounting (``max_ing_bytes``): credits bound it.
        """
        ing = self.ing_bytes + wb
        if self.fc == FC_CREDIT:
            self.ing_bytes = ing
            if ing > self.max_ing_bytes:
                self.max_ing_bytes = ing
            return True
        if ing > self.xoff + self.headroom:
            return False
        self.ing_bytes = ing
        if ing > self.max_ing_bytes:
            self.max_ing_bytes = ing
        if not self.pause_sent and ing >= self.xoff:
            self.pause_sent = True
            self.pause_frames += 1
            self.sim.after(self.delay, self.set_paused, True)
        return True

    def discharge(self, wb: int) -> None:
        """``wb`` bytes that came through this port left the far switch's buffer."""
        fc = self.fc
        if fc == FC_PFC:
            ing = self.ing_bytes - wb
            self.ing_bytes = ing
            if self.pause_sent and ing <= self.xon:
                self.pause_sent = False
                self.sim.after(self.delay, self.set_paused, False)
        elif fc == FC_CREDIT:
            self.ing_bytes -= wb
            self.sim.after(self.delay, self.add_credit, wb)

    def refund(self, wb: int) -> None:
        """A data packet this port sent was lost before buffering: give its credit back."""
        if self.fc == FC_CREDIT:
            self.sim.after(self.delay, self.add_credit, wb)

    def set_paused(self, paused: bool) -> None:
        """A PAUSE (True) or RESUME (False) frame arrives from the far end."""
        if paused == self.paused:
            return
        now = self.sim.now
        self.paused = paused
        if paused:
            self._paused_at = now
        else:
            self.paused_ps += now - self._paused_at
            self._kick()

    def add_credit(self, wb: int) -> None:
        """Credits for ``wb`` bytes come back from the far end."""
        self.credits += wb
        self._kick()

    def lost_in_flight(self, pkt: Packet) -> None:
        """A packet sent before the link went down was lost on the wire."""
        self.drops_down += 1
        if isinstance(pkt, DataPacket):
            self.refund(pkt.size + self.framing)

    # ----- wire state --------------------------------------------------------------
    def set_up(self, up: bool) -> None:
        """As :meth:`EgressPort.set_up`, also releasing the flushed packets' ingress bytes."""
        if not up and self.up:
            for pkt, via in zip(self.data, self.ingress, strict=True):
                if via is not None:
                    via.discharge(pkt.size + self.framing)
            self.ingress.clear()
        super().set_up(up)
        if up:
            self._kick()

    def set_impairment(self, silent: bool | None = None, loss: float | None = None) -> None:
        """As :meth:`EgressPort.set_impairment`, and tell the routing model."""
        super().set_impairment(silent, loss)
        if self.on_state is not None:
            self.on_state(self)

    def counters(self) -> dict[str, int]:
        """The base counters plus pause_frames, paused_ps, pfc_drops, credit_stalls."""
        out = super().counters()
        out.update(
            pause_frames=self.pause_frames,
            paused_ps=self.paused_ps,
            pfc_drops=self.pfc_drops,
            credit_stalls=self.credit_stalls,
            max_ing_bytes=self.max_ing_bytes,
        )
        return out


class DestSwitch:
    """A T0/T1 switch routing on ``pkt.dst`` with ECMP or adaptive routing (module doc).

    The attributes and counters of :class:`~openmrc.sim.switch.PySwitch` (``info``,
    ``name``, ``tier``, ``plane``, ``index``, ``usid``, ``ports``, ``forwarding``,
    ``state``, ``forwarded``, ``bad_route``, ``discarded``), not its uSID routing:
    its own class, so that a compiled build compiles it.
    """

    __slots__ = (
        "_forwarding",
        "_rr",
        "adaptive",
        "bad_route",
        "discarded",
        "forwarded",
        "hpt",
        "index",
        "info",
        "match",
        "name",
        "nh",
        "no_route",
        "on_state",
        "plane",
        "ports",
        "seed",
        "state",
        "table",
        "tier",
        "usid",
    )

    def __init__(self, info: SwitchInfo, nports: int) -> None:
        self.info = info
        self.name = info.name
        self.tier = info.tier
        self.plane = info.plane
        self.index = info.index
        self.usid = info.usid
        #: block + own uSID, as a uSID switch has (this one routes on ``pkt.dst``)
        self.match = (BLOCK_PREFIX << 16) | info.usid
        self.ports: list[BaselinePort | None] = [None] * nports
        #: the uSID table the fabric installs (kept, not used to route)
        self.table: dict[int, BaselinePort] = {}
        #: what the fabric's routing model is told when ``forwarding`` changes
        self.on_state: Any = None
        self._forwarding = True
        #: "up", "down" (all links down too) or "blackhole" (links up, discards silently).
        self.state = "up"
        self.forwarded = 0
        self.bad_route = 0
        self.discarded = 0
        self.hpt = 1
        #: per destination T0: the uplinks routing currently believes usable.
        self.nh: list[list[BaselinePort]] = []
        self.adaptive = False
        self.seed = 0
        self.no_route = 0
        self._rr = 0

    @property
    def forwarding(self) -> bool:
        """Whether the switch forwards (cleared by switch down / blackhole faults)."""
        return self._forwarding

    @forwarding.setter
    def forwarding(self, value: bool) -> None:
        self._forwarding = value
        cb = self.on_state
        if cb is not None:
            cb(self)

    def install(self, table: dict[int, int]) -> None:
        """Install the static uSID table (uSID -> port number) once all ports exist."""
        self.table = {}
        for u, port_no in table.items():
            port = self.ports[port_no]
            if port is None:
                raise ValueError(f"{self.name}: table points at port {port_no}, which is not wired")
            self.table[u] = port

    def ecmp_index(self, src: int, dst: int, sport: int, n: int) -> int:
        """Which of ``n`` equal-cost next hops the 5-tuple hashes to (stable per tuple)."""
        return _mix(self.seed ^ (src << 40) ^ (dst << 20) ^ (sport << 1) ^ 4791) % n

    def receive(self, pkt: Packet, via: BaselinePort, epoch: int) -> None:
        """Route ``pkt`` on its destination host and queue it on the chosen egress."""
        if epoch != via.epoch:
            via.lost_in_flight(pkt)
            return
        if not self._forwarding:
            self.discarded += 1
            if isinstance(pkt, DataPacket):
                via.refund(pkt.size + via.framing)
            return
        # the RoCE packets' addresses (each class has its own slots)
        if isinstance(pkt, (RoceData, RoceAck, Cnp)):
            dst = pkt.dst
        else:
            self.bad_route += 1
            return
        hpt = self.hpt
        b = dst // hpt
        out: BaselinePort | None
        if self.tier:
            out = self.ports[b]
        elif b == self.index:
            out = self.ports[dst % hpt]
        else:
            cand = self.nh[b]
            n = len(cand)
            if self.adaptive:
                out = None
                best = -1
                rr = self._rr
                self._rr = rr + 1
                for i in range(n):
                    port = cand[(rr + i) % n]
                    if port.up:
                        load = port.data_bytes
                        if out is None or load < best:
                            out, best = port, load
            elif n:
                # ecmp_index(), inlined (the _mix of the 5-tuple hash)
                x = (self.seed ^ (pkt.src << 40) ^ (dst << 20) ^ (pkt.sport << 1) ^ 4791) & _M64
                x ^= x >> 33
                x = (x * 0xFF51AFD7ED558CCD) & _M64
                x ^= x >> 33
                x = (x * 0xC4CEB9FE1A85EC53) & _M64
                out = cand[(x ^ (x >> 33)) % n]
            else:
                out = None
            if out is None:
                self.no_route += 1
                if isinstance(pkt, DataPacket):
                    via.refund(pkt.size + via.framing)
                return
        if out is None:
            raise ValueError(f"{self.name}: no port wired toward host {dst}")
        self.forwarded += 1
        out.accept(pkt, via)

    def counters(self) -> dict[str, int]:
        """Switch counters (forwarded, bad_route, discarded) plus no_route."""
        return {
            "forwarded": self.forwarded,
            "bad_route": self.bad_route,
            "discarded": self.discarded,
            "no_route": self.no_route,
        }

    def __repr__(self) -> str:
        return f"Switch({self.name}, usid=0x{self.usid:04x}, state={self.state})"
