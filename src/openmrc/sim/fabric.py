"""The simulated fabric: switches, links and ports of a :class:`~openmrc.topology.Topology`.

Interface for the NIC (the host side of every host-T0 link)
----------------------------------------------------------

``fabric = Fabric(sim, topology, config)`` builds everything (with ``part``, a
:class:`FabricPart`, only what one rank of a partitioned run needs); then, for host
``h`` (``0 <= h < topology.spec.hosts``) and plane ``p``:

``fabric.path_for(src, dst, ev) -> int``
    The outer SRv6 destination for a packet from host ``src`` to host ``dst``
    on entropy value ``ev`` (plane ``ev_plane(ev)``, T1 ``ev_path(ev) % t1s``),
    cached.  Put it in ``pkt.route`` before sending.  (A NIC sending many packets
    builds the same address from ``fabric.route_bases(src, dst)`` and
    ``fabric.t1_parts``, one list per destination, without a call per packet.)

``fabric.host_port(h, p) -> EgressPort``
    Host ``h``'s NIC egress port into plane ``p``.  ``port.send(pkt, now)``
    (``now`` must be ``sim.now``) queues the packet behind whatever the port is
    already sending and serializes it at the host link rate (``pkt.size`` plus
    Ethernet framing); it returns the time the port's last queued byte will
    have left, so the NIC can schedule its next transmission for then.
    ``port.busy_until`` is when the packet now on the wire finishes;
    ``port.drain_time()`` recomputes the return value; ``port.up`` is the
    carrier.  The port does not trim or mark; its queue is
    ``config.host_queue_bytes`` (control packets go ahead of data).  The packet
    must be sent on the port of its route's plane or the T0 drops it as a bad
    route.  A packet is owned by the fabric once sent: do not reuse it.

``fabric.attach_host(h, on_receive, on_link=None)``
    ``on_receive(pkt, plane, now)`` is called when a packet's last byte
    arrives at host ``h``'s plane-``plane`` port (``pkt.ecn`` is the CE mark,
    ``pkt.trimmed`` / ``pkt.trimmed_lasthop`` the trim flags, ``pkt.route`` the
    spent outer address).  ``on_link(plane, up, now)``, if given, is called when
    one of the host's links goes down or up (silent failures are not told).

``fabric.send(h, pkt, dst=None)``
    Convenience (tests, simple drivers): if ``dst`` is given set ``pkt.route =
    path_for(h, dst, pkt.ev)``; send on the port of the EV's plane.

Timing of a hop: a packet's arrival at the next node is ``start of
serialization + serialization + link delay (+ switch latency if the next node
is a switch)``; switches forward at arrival time (store and forward).  A
host's NIC adds ``nic_tx_latency_ps`` to what it sends and
``nic_rx_latency_ps`` to what it receives (folded into its link's delay, so a
link going down also loses what is in the NIC's pipeline).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from openmrc.sim.config import FabricConfig
from openmrc.sim.link import Link
from openmrc.sim.metrics import Metrics
from openmrc.sim.port import EgressPort
from openmrc.sim.switch import HostEnd, HostReceiver, Switch
from openmrc.topology import BLOCK, ClosSpec, LinkInfo, Topology
from openmrc.transport.ev import ev_plane

if TYPE_CHECKING:
    from openmrc.sim.engine import Simulator
    from openmrc.wire.packets import Packet

#: ``on_link(plane, up, now)``.
HostLinkListener = Callable[[int, bool, int], None]


class _PlaneWatcher:
    """A host's link listener for one plane: ``on_link(plane, up, now)``.

    (A slotted object: a lambda per host link was a function object each.)
    """

    __slots__ = ("on_link", "plane")

    def __init__(self, on_link: HostLinkListener, plane: int) -> None:
        self.on_link = on_link
        self.plane = plane

    def __call__(self, _link: Link, up: bool, now: int) -> None:
        self.on_link(self.plane, up, now)


def route_key(src: int, dst: int, ev: int, hosts_per_t0: int, t1s: int) -> int:
    """The route cache's key for ``src`` to ``dst`` on ``ev``: only what the route
    depends on.  Under one T0 that is ``dst`` and the EV's plane; between T0s also the
    T1 the EV's path picks (its path number modulo ``t1s``).  Every EV with the same
    key has the same route, so a host keeps a handful of routes per peer and plane,
    not one per EV (256 per QP): the key is ``dst << 16`` and the canonical EV's low
    16 bits.
    """
    plane = ev & 0xF
    if src // hosts_per_t0 == dst // hosts_per_t0:
        return dst << 16 | plane
    return dst << 16 | ((ev >> 4) & 0xFFF) % t1s << 4 | plane


class FabricPart(NamedTuple):
    """The part of a fabric one process of a partitioned run builds
    (:mod:`openmrc.sim.partition`): the nodes it holds and every link with an end
    among them (so every port it sends on or receives from).

    ``t0s[i]``: whether it holds T0 ``i`` of every plane, with that T0's hosts;
    ``t1s[plane][k]``: whether it holds T1 ``k`` of ``plane``.  Every switch is made
    either way (a few thousand, with shared forwarding tables): the entities are
    numbered over all of them, and a port to a switch of another rank names it as
    its receiver.
    """

    t0s: Sequence[bool]
    t1s: Sequence[Sequence[bool]]


class _Kinds:
    """The constructor arguments of the fabric's three kinds of port (NIC uplink, last
    hop down to a NIC, switch to switch), worked out once per fabric."""

    __slots__ = (
        "fabric_delay",
        "fabric_kw",
        "fabric_rate",
        "host_rate",
        "lasthop_delay",
        "lasthop_kw",
        "nic_delay",
        "nic_kw",
    )

    def __init__(self, spec: ClosSpec, config: FabricConfig) -> None:
        lat = config.switch_latency_ps
        fr = config.framing_bytes
        delay = spec.link_delay_ps
        self.host_rate = round(spec.host_gbps * 1e9)
        self.fabric_rate = round(spec.fabric_gbps * 1e9)
        hq = config.host_queue_bytes
        self.nic_kw: dict[str, Any] = {
            "data_limit": hq,
            "prio_limit": hq,
            "trim": False,
            "framing": fr,
        }
        self.nic_delay = delay + lat + config.nic_tx_latency_ps
        self.lasthop_kw = _switch_port_kw(
            config, self.host_rate, True, config.ecn and config.ecn_lasthop
        )
        self.lasthop_delay = delay + config.nic_rx_latency_ps
        self.fabric_kw = _switch_port_kw(config, self.fabric_rate, False, config.ecn)
        self.fabric_delay = delay + lat


def _switch_port_kw(config: FabricConfig, rate: int, lasthop: bool, ecn: bool) -> dict[str, Any]:
    """A switch port's constructor arguments at ``rate``: its queue and header limits
    and ECN thresholds from the config, trimming, and whether it is a last hop."""
    queue, header, kmin, kmax = config.port_params(rate)
    return {
        "data_limit": queue,
        "prio_limit": header,
        "trim": config.trimming,
        "lasthop": lasthop,
        "ecn": ecn,
        "kmin": kmin,
        "kmax": kmax,
        "framing": config.framing_bytes,
    }


class Fabric:
    """Switches, links and ports of one topology, driven by one simulator.

    With a ``part`` (a rank of a partitioned run) only that part's hosts, links and
    ports are made (:class:`FabricPart`); :attr:`port_numbers` then gives each port's
    place in the whole fabric's :attr:`ports`, and :meth:`complete` makes the rest.
    """

    #: Classes used to build switches and ports (subclasses, e.g. the baseline
    #: fabric of :mod:`openmrc.baselines.fabric`, substitute their own).
    switch_class: type[Switch] = Switch
    port_class: type[EgressPort] = EgressPort

    def __init__(
        self,
        sim: Simulator,
        topology: Topology,
        config: FabricConfig | None = None,
        part: FabricPart | None = None,
    ) -> None:
        config = config if config is not None else FabricConfig()
        config.validate()
        self.sim = sim
        self.topology = topology
        self.config = config
        spec = topology.spec
        if part is not None and (
            len(part.t0s) != spec.t0s
            or len(part.t1s) != spec.planes
            or any(len(row) != spec.t1s for row in part.t1s)
        ):
            raise ValueError("part: needs a flag per T0 and, per plane, a flag per T1")
        #: what this process builds (None: everything)
        self.part = part
        self.switches: dict[str, Switch] = {}
        self.links: dict[str, Link] = {}
        #: every egress port made, in the whole fabric's order: per plane, each host
        #: link's two ports (NIC up, then T0 down), then each T0-T1 link's (T0 major)
        self.ports: list[EgressPort] = []
        #: None when every port is made; else each made port's place in the whole
        #: fabric's port list (the same number on every rank of a partitioned run)
        self.port_numbers: array[int] | None = None if part is None else array("q")
        self.host_ports: list[list[EgressPort]] = [[] for _ in range(spec.hosts)]
        self.host_ends: list[list[HostEnd]] = [
            [HostEnd(sim, h, p) for p in range(spec.planes)] if self.holds_host(h) else []
            for h in range(spec.hosts)
        ]
        self._host_links: list[list[Link]] = [[] for _ in range(spec.hosts)]
        #: per source host, the routes :meth:`path_for` computed so far, by
        #: :func:`route_key` (what a route depends on); None until the first
        self._routes: list[dict[int, int] | None] = [None] * spec.hosts
        #: per source T0, the routes to each destination host without their T1 part, one
        #: per plane (:meth:`route_bases`): shared by the T0's hosts, filled as they
        #: first send to a destination, at most one entry per host of the fabric
        self._bases: list[dict[object, list[int]]] = [{} for _ in range(spec.t0s)]
        #: per plane, each T1's uSID in its place in a route between T0s (``<< 64``):
        #: a route is its base (:meth:`route_bases`) ORed with the T1 part its EV picks
        self.t1_parts: list[list[int]] = [[u << 64 for u in row] for row in topology._t1_usids]
        #: what :meth:`path_for` computes a route from (the topology's, read once)
        self._route_parts = (
            spec.hosts_per_t0,
            spec.t1s,
            spec.planes,
            topology._t0_usids,
            topology._t1_usids,
            topology._down_usids,
        )
        self.metrics = Metrics(self)
        self._t0_of: list[list[Switch]] = [[] for _ in range(spec.planes)]
        self._t1_of: list[list[Switch]] = [[] for _ in range(spec.planes)]
        self._kinds = _Kinds(spec, config)
        self._build()

    def holds_host(self, h: int) -> bool:
        """Whether host ``h`` (its NIC ports, links and host ends) is made here."""
        part = self.part
        return part is None or part.t0s[h // self.topology.spec.hosts_per_t0]

    def _build(self) -> None:
        """Make every switch, and the ports and links of :attr:`part`, in
        :attr:`Topology.links` order.

        Written for size (131,072 hosts on 8 planes are 2 million links): the port
        parameters are worked out once per kind of port, each switch's and host
        end's receive method is bound once, names are made once per node, and the
        forwarding tables are one per (tier, plane).
        """
        topology = self.topology
        spec = topology.spec
        hpt, t1s = spec.hosts_per_t0, spec.t1s
        switch_class = self.switch_class
        for sw in topology.switches:
            obj = switch_class(sw, hpt + t1s if sw.tier == 0 else spec.t0s)
            self.switches[sw.name] = obj
            (self._t0_of if sw.tier == 0 else self._t1_of)[sw.plane].append(obj)
        self._make_links(False)
        self._install(False)

    def _install(self, rest: bool) -> None:
        """Install the forwarding tables of the switches of :attr:`part` (``rest``: of
        the others), whose ports are all made by then."""
        topology = self.topology
        part = self.part
        for p in range(topology.spec.planes):
            for tier, group in ((0, self._t0_of[p]), (1, self._t1_of[p])):
                table = topology.table(tier, p)
                for switch in group:
                    i = switch.index
                    held = part is None or (part.t0s[i] if tier == 0 else part.t1s[p][i])
                    if held != rest:
                        switch.install(table)

    def numbered_ports(self) -> list[EgressPort | None]:
        """The ports at their places in the whole fabric's :attr:`ports` (None where a
        port is not made here)."""
        numbers = self.port_numbers
        if numbers is None:
            return list(self.ports)
        whole: list[EgressPort | None] = [None] * (2 * len(self.topology.links))
        for n, port in zip(numbers, self.ports, strict=True):
            whole[n] = port
        return whole

    def complete(self) -> array[int]:
        """Make the hosts' ends, links and ports a :attr:`part` left out, so that this
        fabric is whole (rank 0 of a partitioned run, to merge every rank's counters
        into, once the run is over: the new ports have no entity and see no events);
        the numbers of the ports it made."""
        numbers = self.port_numbers
        if numbers is None:
            return array("q")
        spec = self.topology.spec
        for h in range(spec.hosts):
            if not self.holds_host(h):
                self.host_ends[h] = [HostEnd(self.sim, h, p) for p in range(spec.planes)]
        before = len(numbers)
        self._make_links(True)
        self._install(True)
        made = numbers[before:]
        whole = self.numbered_ports()
        self.ports = [port for port in whole if port is not None]
        assert len(self.ports) == len(whole)
        # (by name in the whole fabric's order, as a whole fabric makes them)
        self.links = {port.link.name: port.link for port in self.ports[::2]}
        self.part = None
        self.port_numbers = None
        return made

    def _make_links(self, rest: bool) -> None:
        """Make the links (and their two ports) of :attr:`part` (``rest``: the others)."""
        sim, topology = self.sim, self.topology
        spec = topology.spec
        hpt, t0s, t1s, hosts = spec.hosts_per_t0, spec.t0s, spec.t1s, spec.hosts
        part = self.part
        port_class = self.port_class
        kinds = self._kinds
        host_rate, fabric_rate = kinds.host_rate, kinds.fabric_rate
        nic_delay, nic_kw = kinds.nic_delay, kinds.nic_kw
        lasthop_delay, lasthop_kw = kinds.lasthop_delay, kinds.lasthop_kw
        fabric_delay, fabric_kw = kinds.fabric_delay, kinds.fabric_kw
        delay = spec.link_delay_ps
        links, ports, numbers = self.links, self.ports, self.port_numbers
        host_names = topology.hosts
        held_t0 = [True] * t0s if part is None else list(part.t0s)
        for p in range(spec.planes):
            base = 2 * p * (hosts + t0s * t1s)
            held_t1 = [True] * t1s if part is None else list(part.t1s[p])
            t0 = self._t0_of[p]
            t0_names = [sw.name for sw in t0]
            t0_rx = [sw.receive for sw in t0]
            for h in range(hosts):
                i, d = divmod(h, hpt)
                if held_t0[i] == rest:
                    continue
                a, b = host_names[h], t0_names[i]
                up_port = port_class(
                    sim, f"{a}:{p}->{b}", host_rate, nic_delay, t0_rx[i], peer=b, **nic_kw
                )
                down_port = port_class(
                    sim,
                    f"{b}:{d}->{a}",
                    host_rate,
                    lasthop_delay,
                    self.host_ends[h][p].receive,
                    peer=a,
                    **lasthop_kw,
                )
                t0[i].ports[d] = down_port
                name = f"{a}-{b}"
                link = Link(
                    sim, LinkInfo(name, a, p, b, d, spec.host_gbps, delay), up_port, down_port
                )
                links[name] = link
                ports.append(up_port)
                ports.append(down_port)
                if numbers is not None:
                    numbers.append(base + 2 * h)
                    numbers.append(base + 2 * h + 1)
                self.host_ports[h].append(up_port)
                self._host_links[h].append(link)
            base += 2 * hosts
            t1 = self._t1_of[p]
            t1_names = [sw.name for sw in t1]
            t1_rx = [sw.receive for sw in t1]
            for i in range(t0s):
                a = t0_names[i]
                lower_ports = t0[i].ports
                rx_a = t0_rx[i]
                for k in range(t1s):
                    if (held_t0[i] or held_t1[k]) == rest:
                        continue
                    b = t1_names[k]
                    up_port = port_class(
                        sim,
                        f"{a}:{hpt + k}->{b}",
                        fabric_rate,
                        fabric_delay,
                        t1_rx[k],
                        peer=b,
                        **fabric_kw,
                    )
                    down_port = port_class(
                        sim, f"{b}:{i}->{a}", fabric_rate, fabric_delay, rx_a, peer=a, **fabric_kw
                    )
                    lower_ports[hpt + k] = up_port
                    t1[k].ports[i] = down_port
                    name = f"{a}-{b}"
                    link = Link(
                        sim,
                        LinkInfo(name, a, hpt + k, b, i, spec.fabric_gbps, delay),
                        up_port,
                        down_port,
                    )
                    links[name] = link
                    ports.append(up_port)
                    ports.append(down_port)
                    if numbers is not None:
                        n = base + 2 * (i * t1s + k)
                        numbers.append(n)
                        numbers.append(n + 1)

    # ----- NIC-facing interface --------------------------------------------------
    def host_port(self, h: int, plane: int) -> EgressPort:
        """Host ``h``'s NIC egress port into ``plane`` (see the module docstring)."""
        return self.host_ports[h][plane]

    def host_link(self, h: int, plane: int) -> Link:
        """The link from host ``h``'s plane-``plane`` port to its T0."""
        return self._host_links[h][plane]

    def attach_host(
        self, h: int, on_receive: HostReceiver, on_link: HostLinkListener | None = None
    ) -> None:
        """Register host ``h``'s receive callback (and optional link-state callback)."""
        for end in self.host_ends[h]:
            end.on_receive = on_receive
        if on_link is not None:
            for plane, link in enumerate(self._host_links[h]):
                link.watch(_PlaneWatcher(on_link, plane))

    def path_for(self, src: int, dst: int, ev: int) -> int:
        """Outer SRv6 destination from ``src`` to ``dst`` on ``ev`` (cached).

        For probes and :meth:`send` (a NIC builds its packets' routes from
        :meth:`route_bases`): the key (:func:`route_key`) and, on a miss, the route
        (:meth:`_compute_route`) are computed inline here, without two calls.
        """
        routes = self._routes
        if type(src) is not int or type(dst) is not int or not 0 <= src < len(routes):
            return self._compute_route(src, dst, ev)  # raises the right ValueError
        hpt, t1s, planes, t0_usids, t1_usids, down_usids = self._route_parts
        plane = ev & 0xF
        a = src // hpt
        b = dst // hpt
        path = ((ev >> 4) & 0xFFF) % t1s
        key = dst << 16 | plane if a == b else dst << 16 | path << 4 | plane
        cache = routes[src]
        if cache is None:
            cache = routes[src] = {}
        route = cache.get(key)
        if route is None:
            if src == dst or plane >= planes or not 0 <= dst < len(routes):
                route = self._compute_route(src, dst, ev)  # raises the right ValueError
            else:
                t0 = t0_usids[plane]
                down = down_usids[plane][dst % hpt]
                if a == b:
                    route = BLOCK | t0[a] << 80 | down << 64
                else:
                    t1 = t1_usids[plane][path]
                    route = BLOCK | t0[a] << 80 | t1 << 64 | t0[b] << 48 | down << 32
            cache[key] = route
        return route

    def bases_from(self, src: int) -> dict[object, list[int]]:
        """The table of :meth:`route_bases` that source host ``src`` reads (its T0's).

        The NIC looks a destination up in it directly on its per-packet path and calls
        :meth:`route_bases` (which fills it) only when the destination is not there.
        """
        return self._bases[src // self.topology.spec.hosts_per_t0]

    def route_bases(self, src: int, dst: int) -> list[int]:
        """What every route from ``src`` to ``dst`` starts from, one per plane (cached
        per source T0, as :meth:`bases_from`).

        Under one T0 that is the whole route (``path_for`` of any EV of the plane).
        Between T0s it is the route without the T1's uSID: ``path_for(src, dst, ev)``
        is ``route_bases(src, dst)[plane] | t1_parts[plane][ev_path(ev) % t1s]``.  A
        NIC that builds its routes this way computes one list per destination rather
        than a route per destination, plane and T1 (there are 128 T1s at 8192 hosts,
        so most of a big fabric's first packets would miss a cache of whole routes),
        and touches one small table per packet.  A bad ``src`` or ``dst`` (the same
        host, out of range, not an int) raises as :meth:`path_for` does.
        """
        hpt, _t1s, planes, t0_usids, _t1_usids, down_usids = self._route_parts
        hosts = len(self._routes)
        if (
            type(src) is not int
            or type(dst) is not int
            or src == dst
            or not 0 <= src < hosts
            or not 0 <= dst < hosts
        ):
            self._compute_route(src, dst, 0)  # raises the right ValueError
            raise ValueError(f"route_bases: no route from {src!r} to {dst!r}")
        a = src // hpt
        b = dst // hpt
        d = dst % hpt
        if a == b:
            bases = [BLOCK | t0_usids[p][a] << 80 | down_usids[p][d] << 64 for p in range(planes)]
        else:
            bases = [
                BLOCK | t0_usids[p][a] << 80 | t0_usids[p][b] << 48 | down_usids[p][d] << 32
                for p in range(planes)
            ]
        self._bases[a][dst] = bases
        return bases

    def routes_from(self, src: int) -> dict[int, int]:
        """The route cache of source host ``src``, by :func:`route_key`.

        :meth:`path_for` fills it (the NIC builds its data's routes from
        :meth:`route_bases` instead; its controller probes go through ``path_for``).
        """
        cache = self._routes[src]
        if cache is None:
            cache = self._routes[src] = {}
        return cache

    def _compute_route(self, src: int, dst: int, ev: int) -> int:
        """Same as ``topology.path_address`` without its per-call checks (done once here)."""
        topo = self.topology
        spec = topo.spec
        plane = ev & 0xF
        if (
            src == dst
            or plane >= spec.planes
            or type(src) is not int
            or type(dst) is not int
            or not 0 <= src < spec.hosts
            or not 0 <= dst < spec.hosts
        ):
            return topo.path_address(src, dst, ev)  # raises the right ValueError
        hpt = spec.hosts_per_t0
        a, b = src // hpt, dst // hpt
        t0 = topo._t0_usids[plane]
        down = topo._down_usids[plane][dst % hpt]
        if a == b:
            return BLOCK | t0[a] << 80 | down << 64
        t1 = topo._t1_usids[plane][((ev >> 4) & 0xFFF) % spec.t1s]
        return BLOCK | t0[a] << 80 | t1 << 64 | t0[b] << 48 | down << 32

    def send(self, h: int, pkt: Packet, dst: int | None = None) -> int:
        """Send ``pkt`` from host ``h`` on its EV's plane, routing it to ``dst`` if given."""
        if dst is not None:
            pkt.route = self.path_for(h, dst, pkt.ev)
        return self.host_ports[h][ev_plane(pkt.ev)].send(pkt)

    # ----- lookup helpers --------------------------------------------------------
    def switch(self, name: str) -> Switch:
        """The switch called ``name``."""
        return self.switches[name]

    def link(self, name: str) -> Link:
        """The link called ``name``."""
        return self.links[name]

    def link_between(self, a: str, b: str) -> Link:
        """The link joining nodes ``a`` and ``b`` (either order)."""
        return self.links[self.topology.link_between(a, b).name]

    def port(self, node: str, port_no: int) -> EgressPort:
        """The egress port ``port_no`` of a switch, or of a host (port = plane)."""
        if node in self.switches:
            port = self.switches[node].ports[port_no]
            assert port is not None
            return port
        return self.host_ports[int(node.lstrip("h"))][port_no]
