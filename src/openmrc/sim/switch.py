"""A static SRv6 uSID switch and the host end of a host link.

Forwarding, per packet, on the integer outer destination ``pkt.route``:

1. match: the top 48 bits (block + active uSID) must be block + this switch's
   uSID, otherwise the packet is dropped as a bad route;
2. shift: the 96-bit uSID carrier moves left by 16 bits (zero fill);
3. lookup: the new active uSID is looked up in the static table (uSID ->
   egress port); a miss is a bad route.

``forwarding`` is cleared when the switch is down or blackholed; it then
discards whatever reaches it (``discarded``).

:class:`Switch` and :class:`HostEnd` are the native classes of
:mod:`openmrc.sim._kernel` when it is built (see :mod:`openmrc.sim._native`),
:class:`PySwitch` and :class:`PyHostEnd` otherwise; the same behaviour and
attributes, with these differences in what can be assigned: the native
switch's ``table`` reads as a copy (``sw.table[k] = port`` changes only that
copy: change routes with :meth:`PySwitch.install`), its ``forwarding`` takes
only a bool, and ``info``/``name``/``usid``/``ports``/``match`` are read-only
(``ports`` is the list itself, so its items can be set before ``install``).
A native port delivers to a native switch or host end without a Python call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from openmrc.sim._native import kernel
from openmrc.topology import ACTIVE_SHIFT, BLOCK, BLOCK_PREFIX, CARRIER_MASK

if TYPE_CHECKING:
    from openmrc.sim.engine import Simulator
    from openmrc.sim.port import EgressPort
    from openmrc.topology import SwitchInfo
    from openmrc.wire.packets import Packet

#: ``on_receive(pkt, plane, now)``: what a host registers to get its packets.
HostReceiver = Callable[["Packet", int, int], None]


class SwitchReport:
    """The reporting half of a switch, shared by the pure-Python and the native switch."""

    __slots__ = ()

    name: str
    usid: int
    state: str
    forwarded: int
    bad_route: int
    discarded: int

    def counters(self) -> dict[str, int]:
        """Switch-level counters: forwarded, bad_route, discarded."""
        return {
            "forwarded": self.forwarded,
            "bad_route": self.bad_route,
            "discarded": self.discarded,
        }

    def __repr__(self) -> str:
        return f"Switch({self.name}, usid=0x{self.usid:04x}, state={self.state})"


class PySwitch(SwitchReport):
    """A T0 or T1 switch: ports by number, its uSID table, counters."""

    __slots__ = (
        "bad_route",
        "discarded",
        "forwarded",
        "forwarding",
        "index",
        "info",
        "match",
        "name",
        "plane",
        "ports",
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
        #: block + own uSID: what ``route >> 80`` must equal.
        self.match = (BLOCK_PREFIX << 16) | info.usid
        self.ports: list[EgressPort | None] = [None] * nports
        self.table: dict[int, EgressPort] = {}
        self.forwarding = True
        #: "up", "down" (all links down too) or "blackhole" (links up, discards silently).
        self.state = "up"
        self.forwarded = 0
        self.bad_route = 0
        self.discarded = 0

    def install(self, table: dict[int, int]) -> None:
        """Install the static table (uSID -> port number) once all ports exist."""
        self.table = {}
        for u, port_no in table.items():
            port = self.ports[port_no]
            if port is None:
                raise ValueError(f"{self.name}: table points at port {port_no}, which is not wired")
            self.table[u] = port

    def receive(self, pkt: Packet, via: EgressPort, epoch: int) -> None:
        """A packet arrives from the link driven by ``via``: match, shift, look up, enqueue."""
        if epoch != via.epoch:
            via.lost_in_flight(pkt)
            return
        if not self.forwarding:
            self.discarded += 1
            return
        addr = pkt.route
        try:
            if addr >> ACTIVE_SHIFT != self.match:  # type: ignore[operator]
                self.bad_route += 1
                return
        except TypeError:
            self.bad_route += 1
            return
        addr = BLOCK | ((addr << 16) & CARRIER_MASK)  # type: ignore[operator]
        pkt.route = addr
        out = self.table.get((addr >> ACTIVE_SHIFT) & 0xFFFF)
        if out is None:
            self.bad_route += 1
            return
        self.forwarded += 1
        if out.txev is None and not out.impaired and out.up:
            # EgressPort.enqueue's idle fast path, inlined (one call less per hop)
            now = out.sim.now
            if out.busy_until <= now:
                wb = pkt.size + out.framing
                end = now - (-wb * out._num // out._den)
                out.busy_until = end
                out.tx_pkts += 1
                out.tx_bytes += wb
                out._push(end + out.delay, out.rx, (pkt, out, out.epoch))
                return
        out.enqueue(pkt)


class PyHostEnd:
    """The receiving side of one host NIC port (host ``host``, plane ``plane``).

    Delivers arriving packets to the callback registered with
    :meth:`openmrc.sim.fabric.Fabric.attach_host`; without one, packets are
    counted in ``undelivered`` and dropped.
    """

    __slots__ = ("host", "on_receive", "plane", "received", "sim", "undelivered")

    def __init__(self, sim: Simulator, host: int, plane: int) -> None:
        self.sim = sim
        self.host = host
        self.plane = plane
        self.on_receive: HostReceiver | None = None
        self.received = 0
        self.undelivered = 0

    def receive(self, pkt: Packet, via: EgressPort, epoch: int) -> None:
        """A packet arrives at the NIC port: hand it to the host."""
        if epoch != via.epoch:
            via.lost_in_flight(pkt)
            return
        cb = self.on_receive
        if cb is None:
            self.undelivered += 1
            return
        self.received += 1
        cb(pkt, self.plane, self.sim.now)


if TYPE_CHECKING:  # type-checked against the pure-Python API, which the native one mirrors
    Switch = PySwitch
    HostEnd = PyHostEnd
elif kernel is not None:

    class Switch(kernel.Switch, SwitchReport):
        """The native switch (:mod:`openmrc.sim._kernel`); the API of :class:`PySwitch`."""

        __slots__ = ()

    class HostEnd(kernel.HostEnd):
        """The native host end (:mod:`openmrc.sim._kernel`); the API of :class:`PyHostEnd`."""

        __slots__ = ()

else:
    Switch = PySwitch
    HostEnd = PyHostEnd
