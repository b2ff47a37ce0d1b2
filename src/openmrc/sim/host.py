"""A simulated host: an MRC NIC with one port per plane, driving the transport core.

The NIC owns one :class:`~openmrc.transport.Context`.  It hands every packet
that arrives on any port to the core, runs the core's timers on the
simulator's clock, and pulls packets from the core whenever a port can take
one: it tells the core which planes' ports are busy, so the core's spraying
picks an EV (a path) whose port is free, as a real multi-port NIC's scheduler
does.  Each packet leaves on the port of its EV's plane, with its route (the
SRv6 uSID outer destination) computed algorithmically from the EV.

Port status: when one of the host's links (NIC ports) goes down or up, the
NIC tells the core (``Context.set_port_state``) after
``FabricConfig.nic_port_status_delay_ps``; the core then maps the plane's EVs
out (or back) and its SACKs carry the ports-down bitmap to the peers.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Final, cast

from ..transport import Context
from ..transport.ev import ev_plane
from ..wire.packets import DataPacket, ProbePacket
from .port import busy_mask, post_drain, send_post

# Held in C statics when compiled (a module global is a dict lookup per call), and
# typed to take the time as an object: kick boxes it once for both calls.
_busy_mask: Final = cast("Callable[[object, object], int]", busy_mask)
_post_drain: Final = cast(
    "Callable[[object, object, object, object, Callable[[object], None]], object]", post_drain
)
_send_post: Final = cast(
    "Callable[[object, Packet, object, object, object, object, Callable[[object], None]], object]",
    send_post,
)

#: kick's "no peer routed yet" (never a peer) and "no bases" (a route made otherwise)
_NO_PEER: Final[object] = object()
_NO_BASES: Final[list[int]] = []


def _no_enqueue(port: Any, pkt: Packet) -> None:
    """The enqueue of a host without ports (never called: kick sends nothing)."""
    raise RuntimeError("no port")


if TYPE_CHECKING:
    from collections.abc import Callable

    from ..wire.packets import Packet
    from .engine import Simulator
    from .fabric import Fabric
    from .faults import FaultInjector


class ControllerProbe(ProbePacket):
    """A controller probe on the simulated wire (QPN 0): to ``dst``, answered back to ``src``.

    A real NIC answers from the IPv6 source address; the simulator's packets
    carry no addresses, so the probe names its source host.
    """

    __slots__ = ("reply", "src")

    def __init__(self, ev: int, seq: int, ts: int, src: int, reply: bool = False) -> None:
        ProbePacket.__init__(self, 0, ev, seq, ts)
        self.src = src
        self.reply = reply


class SimHost:
    """Host ``index`` of a fabric: its NIC ports and its transport context."""

    __slots__ = (
        "_all_busy",
        "_bases",
        "_drop_of",
        "_enqueue",
        "_ev_drop",
        "_hint_qps",
        "_hpt",
        "_last_bases",
        "_last_local",
        "_last_peer",
        "_port_type",
        "_post",
        "_pump_armed",
        "_pump_at",
        "_pump_cb",
        "_t0",
        "_t1_parts",
        "_t1s",
        "_timer_at",
        "_timer_cb",
        "ctx",
        "data_every",
        "fabric",
        "faults",
        "index",
        "last_rx",
        "on_activity",
        "on_data",
        "ports",
        "probe_sink",
        "sim",
        "taps",
    )

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    _pump_at: int
    ctx: Context
    _timer_at: int
    index: int
    ports: list[Any]
    _hint_qps: int
    _all_busy: int
    _last_peer: object
    _last_bases: list[int]
    _last_local: bool
    taps: list[Callable[[int, Any, Packet, bool, int], None]]
    faults: FaultInjector | None
    _port_type: type
    _enqueue: Callable[[Any, Packet], None]
    _t1_parts: list[list[int]]
    _t1s: int
    _post: Callable[[object, Callable[[object], None], object], None]
    _pump_cb: Callable[[object], None]
    fabric: Fabric
    _bases: dict[object, list[int]]
    _hpt: int
    _t0: int
    _drop_of: object
    _ev_drop: dict[int, float] | None
    on_data: Callable[[SimHost, int], None] | None
    on_activity: Callable[[SimHost, int], None] | None
    last_rx: int
    data_every: bool
    sim: Simulator
    _timer_cb: Callable[[object], None]
    probe_sink: Callable[[int, Packet, int], None] | None
    _pump_armed: object

    def __init__(self, sim: Simulator, fabric: Fabric, index: int, rng: random.Random) -> None:
        self.sim = sim
        self.fabric = fabric
        self.index = index
        self.ctx = Context(rng, name=f"h{index}")
        # the native kernel's ports, or PyEgressPort (pure Python): Any, so that a
        # compiled build checks no class here (PyEgressPort is compiled too)
        self.ports: list[Any] = fabric.host_ports[index]
        self._all_busy = (1 << len(self.ports)) - 1
        # when the armed pump / timer event fires, -1 if none (an int, not
        # Optional: compiled, no boxing or object comparison per packet)
        self._pump_at = -1
        self._timer_at = -1
        #: how many QPs the context had when the kernel's hints were last set
        #: (:meth:`_set_hints`), -1: not set yet
        self._hint_qps = -1
        #: the routes from this host's T0 without their T1 part, per destination and
        #: plane (``Fabric.route_bases``, which fills it): kick builds a packet's route
        #: from them and ``_t1_parts`` without a Python call
        self._bases: dict[object, list[int]] = fabric.bases_from(index)
        self._t1_parts: list[list[int]] = fabric.t1_parts
        spec = fabric.topology.spec
        self._hpt = spec.hosts_per_t0
        self._t0 = index // spec.hosts_per_t0
        self._t1s = spec.t1s
        # the bound methods kick schedules, made once instead of per schedule
        self._pump_cb: Callable[[object], None] = self._on_pump
        self._timer_cb: Callable[[object], None] = self._on_timer
        #: sim.post (a one-argument call: no handle, no args tuple), bound once
        #: (times typed object: kick passes on the boxed ints it has)
        self._post = cast("Callable[[object, Callable[[object], None], object], None]", sim.post)
        #: called after every input the host processed (the experiment polls CQs).
        self.on_activity: Callable[[SimHost, int], None] | None = None
        #: called after a data packet the host received (the experiment checks
        #: whether a flow something waits for has arrived): after every one while
        #: ``data_every`` holds, otherwise only after one that placed a message on
        #: its QP (the context's ``rx_placed`` moved), the only packets after which
        #: a flow can have arrived.
        self.on_data: Callable[[SimHost, int], None] | None = None
        #: ``on_data`` after every data packet (True), or only after the packets that
        #: placed a message (False: the experiment's sampler is awake, and a call
        #: after any other packet would find nothing).
        self.data_every = True
        #: the QPN the last data packet reached, set for ``on_data`` (which flows it can
        #: have completed: only those on that QP).
        self.last_rx = -1
        #: packet observers (captures): ``tap(host, peer, pkt, sent, now)``.
        self.taps: list[Callable[[int, Any, Packet, bool, int], None]] = []
        #: the experiment's fault injector, for per-EV loss (None: no such faults).
        self.faults: FaultInjector | None = None
        #: receives probes addressed to QPN 0 (self-probes of the Clustermapper agent).
        self.probe_sink: Callable[[int, Packet, int], None] | None = None
        #: kick's per-packet state: the peer object of the last packet routed, its
        #: route bases and whether it is under this host's T0; the fault injector
        #: whose per-EV loss table ``_ev_drop`` is (that dict, which the injector
        #: changes in place); the class of this host's ports and its ``enqueue``
        #: (a port of another class is called by name)
        self._last_peer: object = _NO_PEER
        self._last_bases: list[int] = _NO_BASES
        self._last_local = False
        self._drop_of: object = None
        self._ev_drop: dict[int, float] | None = None
        ports: list[Any] = cast("list[Any]", self.ports)  # (the native kernel's or Python's)
        port_type: type = type(ports[0]) if ports else type(None)
        self._port_type = port_type
        self._enqueue: Callable[[Any, Packet], None] = getattr(port_type, "enqueue", _no_enqueue)
        #: ``_pump_at`` as the object posted (-1 when none): kick passes it to
        #: ``post_drain`` (compiled, an int boxed for the call is an allocation)
        self._pump_armed: object = -1
        fabric.attach_host(index, self._on_receive, self._on_link)

    # -- input ----------------------------------------------------------------------
    def _on_receive(self, pkt: Packet, plane: int, now_o: object) -> None:
        # (the time taken as the object the simulator passes, and handed on to kick
        # as it is: compiled, an int re-boxed for kick's native calls is an allocation)
        now = cast(int, now_o)
        if pkt.dqpn == 0:
            if type(pkt) is ControllerProbe:
                self._on_controller_probe(pkt, now)
            elif self.probe_sink is not None:
                self.probe_sink(self.index, pkt, now)  # a self-probe, not for the core
            return
        if self.taps:
            qp = self.ctx.qps.get(pkt.dqpn)
            peer = qp.peer if qp is not None else -1
            for tap in self.taps:
                tap(self.index, peer, pkt, False, now)
        ctx = self.ctx
        if type(pkt) is DataPacket:
            # Data reaches the responder half, which has no timers and completes
            # no sends: only its ACKs need sending.
            placed = ctx.rx_placed  # messages placed so far (by any of the QPs)
            ctx.receive_packet(pkt, now)
            self.kick(now, True, now_o)
            on_data = self.on_data
            if on_data is not None and (self.data_every or ctx.rx_placed != placed):
                self.last_rx = pkt.dqpn
                on_data(self, now)
            return
        ctx.receive_packet(pkt, now)
        self.kick(now, False, now_o)
        if self.on_activity is not None:
            self.on_activity(self, now)

    # -- controller probes --------------------------------------------------------------
    def _send_controller_probes(self, now: int) -> None:
        ctl = self.ctx.controller
        sent = ctl.probes_to_send()
        if not sent:
            return
        deadline = ctl.get_timer()
        if deadline is not None:
            self.sim.schedule(max(deadline, now), self._controller_timer)
        for req in sent:
            dst = req.dest
            hosts = len(self.fabric.host_ports)
            if not isinstance(dst, int) or not 0 <= dst < hosts or dst == self.index:
                continue  # nowhere to send: it times out
            if ev_plane(req.ev) >= len(self.ports):
                continue
            pkt = ControllerProbe(req.ev, req.probe_id, now, self.index)
            pkt.route = self.fabric.path_for(self.index, dst, req.ev)
            self.ports[ev_plane(req.ev)].enqueue(pkt)

    def _controller_timer(self) -> None:
        ctl = self.ctx.controller
        now = self.sim.now
        ctl.handle_timer(now)
        deadline = ctl.get_timer()
        if deadline is not None:
            self.sim.schedule(max(deadline, now), self._controller_timer)

    def _on_controller_probe(self, pkt: ControllerProbe, now: int) -> None:
        if pkt.reply:
            ctl = self.ctx.controller
            if ctl is not None:
                ctl.on_probe_reply(pkt.seq, now)
            return
        back = ControllerProbe(pkt.ev, pkt.seq, now, self.index, reply=True)
        back.route = self.fabric.path_for(self.index, pkt.src, pkt.ev)
        self.ports[ev_plane(pkt.ev)].enqueue(back)

    def _on_link(self, plane: int, up: bool, now: int) -> None:
        # The NIC acts on its port's state after the detection-and-remap delay.
        at = now + self.fabric.config.nic_port_status_delay_ps
        self.sim.schedule(at, self._on_port_status, plane, up)
        self.kick(now)

    def _on_port_status(self, plane: int, up: bool) -> None:
        now = self.sim.now
        if self.ports[plane].up != up:
            return  # superseded: the port changed again since
        self.ctx.set_port_state(plane, up, now)
        self.kick(now)
        if self.on_activity is not None:
            self.on_activity(self, now)

    def _on_timer(self, at_o: object) -> None:
        # (the time as the object kick posted: handed back to kick, not re-boxed)
        now = cast(int, at_o)  # the event's own time: sim.now
        if self._timer_at != now:
            return  # superseded
        self._timer_at = -1
        self.ctx.handle_timer(now)
        self.kick(now, False, at_o)
        if self.on_activity is not None:
            self.on_activity(self, now)

    def _on_pump(self, at_o: object) -> None:
        at = cast(int, at_o)
        if self._pump_at != at:
            return
        self._pump_at = -1
        self._pump_armed = -1
        self.kick(at, True, at_o)  # the event's own time: sim.now

    # -- cache hints ----------------------------------------------------------------
    def _set_hints(self) -> None:
        """Tell the simulator which objects this host's events read (``sim.set_hints``).

        At a thousand hosts and more a host's state is out of the cache by its next
        event, and the NIC reaches it one pointer at a time (itself, its context,
        the queues, the port list, the routes, the QP and its parts): the native
        kernel fetches these lines a few events ahead instead (each object's first
        lines, a list's items, a dict's keys).  Set again whenever the context's QPs
        change (kick compares their number); a hint has no effect on results.
        """
        entity = self.sim.entity_of(self)
        if entity is None:
            return  # not registered yet: the next kick tries again
        ctx = self.ctx
        qps = list(ctx.qps.values())
        # the NIC's own (every event reads them), most used first, then each QP's
        objs: list[object] = [self, ctx, *ctx.ready.cache_objects(), self.ports, *self.ports]
        for qp in qps:  # the routes kick builds a packet's from
            peer = qp.peer
            if type(peer) is int and peer != self.index and 0 <= peer < len(self.fabric.host_ports):
                found = self._bases.get(peer)
                bases = found if found is not None else self.fabric.route_bases(self.index, peer)
                objs.append(bases)
                objs += bases
        objs += [self.taps, ctx.qps, *ctx.cache_objects(), *ctx.control_ready.cache_objects()]
        objs += [self._pump_cb, self._t1_parts, *self._t1_parts]
        for qp in qps:
            objs.append(qp)
            objs += qp.control.cache_objects()
            req = qp.requester
            objs += [req, qp.responder]
            if req is not None:
                objs += [req.paths, req.cc, req.unacked]
                for fifo in (req.to_segment, req.retx, req.ops):
                    objs += fifo.cache_objects()
            objs.append(qp.reverse)
        self.sim.set_hints(entity, [o for o in objs if o is not None])
        self._hint_qps = len(ctx.qps)

    # -- output ---------------------------------------------------------------------
    def kick(self, now: int, sending_only: bool = False, now_o: object = None) -> None:
        """Send what the ports can take now, then re-arm the pump and the timer.

        ``sending_only``: nothing arrived and no timer ran since the last kick,
        only ports freed up.  Sending can only push the core's deadlines later
        (or create the first one), so an armed timer need not be recomputed.
        ``now_o``: ``now`` as the object the simulator passed the event (None: made
        here), used for the native calls and posts.
        """
        ctx = self.ctx
        ports = self.ports
        all_busy = self._all_busy
        if len(ctx.qps) != self._hint_qps:
            self._set_hints()
        if ctx.controller is not None:
            self._send_controller_probes(now)
        fabric = self.fabric
        src = self.index
        if now_o is None:
            now_o = now  # boxed once for the native calls
        busy = _busy_mask(ports, now_o)
        armed = False  # (the pump armed with the last packet's send)
        while busy != all_busy:
            pkt = ctx.poll(now, busy, now_o)
            if pkt is None:
                break
            qp = ctx.polled_qp
            assert qp is not None  # (set by every poll that returns a packet)
            peer = qp.peer
            ev = pkt.path_ev  # a control packet's reverse EV, else its own
            plane = ev & 0xF  # ev_plane
            key: object = peer  # the bases' key, as it is (compiled: not re-boxed)
            if key is self._last_peer:
                # the same peer object as the last packet's (a host's one QP, or a
                # burst of one QP): its bases without the dict
                bases = self._last_bases
                local = self._last_local
            elif type(peer) is int and peer != src:
                # (the dict read here only: compiled, a local would hold a reference
                # to it from the kick's start, a write to a line no other packet reads)
                found = self._bases.get(key)
                if found is None:
                    found = fabric.route_bases(src, peer)  # the first packet to peer
                bases = found
                local = peer // self._hpt == self._t0
                self._last_peer = key
                self._last_bases = bases
                self._last_local = local
            else:  # (raises the right ValueError for a bad peer)
                pkt.route = fabric.path_for(src, peer, ev)  # type: ignore[arg-type]
                bases = _NO_BASES
                local = True
            if plane < len(bases):
                # Fabric.path_for without a call: under one T0 the base is the
                # route; between T0s the base with the uSID of the T1 the EV picks
                if local:
                    # (read as the object it is: compiled, not unboxed and re-boxed)
                    pkt.route = cast("list[object]", bases)[plane]
                else:
                    # (the two long ints read and ORed as objects: compiled, int items
                    # would each be unboxed first and the OR done on tagged ints)
                    parts: list[Any] = cast("list[Any]", self._t1_parts[plane])
                    base: Any = cast("list[Any]", bases)[plane]
                    pkt.route = base | parts[((ev >> 4) & 0xFFF) % self._t1s]
            elif bases is not _NO_BASES:  # no such plane: path_for raises
                pkt.route = fabric.path_for(src, peer, ev)  # type: ignore[arg-type]
            if self.taps:
                for tap in self.taps:
                    tap(src, qp.peer, pkt, True, now)
            faults = self.faults
            if faults is not None:
                if faults is not self._drop_of:
                    # (the injector's table of per-EV loss, held: compiled, reading it
                    # from the interpreted injector is a generic getattr per packet)
                    self._drop_of = faults
                    self._ev_drop = faults.ev_drop
                if self._ev_drop and type(pkt) is DataPacket and faults.drops(ev, src):
                    continue
            port = ports[plane]
            busy |= 1 << plane  # only the port just used can have changed
            if busy == all_busy and len(ctx.ready):
                # the last free port: the packet enqueued and the pump armed as below,
                # in one call
                soonest_o = _send_post(
                    port, pkt, self.sim, ports, now_o, self._pump_armed, self._pump_cb
                )
                if soonest_o is not None:
                    self._pump_at = cast(int, soonest_o)
                    self._pump_armed = soonest_o
                armed = True
                break
            if type(port) is self._port_type:
                self._enqueue(port, pkt)  # (no method looked up by name)
            else:
                port.enqueue(pkt)
        # (the times posted are passed on as the objects they came as: compiled, an
        # int re-boxed for a call is an allocation, two per post)
        if not armed and busy and len(ctx.ready):
            # Something is waiting for a port: come back when the first one frees
            # (the soonest drain, posted unless a pump is armed at or before it).
            soonest_o = _post_drain(self.sim, ports, now_o, self._pump_armed, self._pump_cb)
            if soonest_o is not None:
                self._pump_at = cast(int, soonest_o)
                self._pump_armed = soonest_o
        if sending_only and self._timer_at >= 0:
            return
        timer_o: object = ctx.get_timer()
        if timer_o is not None:
            timer = cast(int, timer_o)
            if self._timer_at < 0 or timer < self._timer_at:
                if timer <= now:
                    timer_o = now_o
                    timer = now
                self._timer_at = timer
                self._post(timer_o, self._timer_cb, timer_o)
