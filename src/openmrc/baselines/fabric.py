"""The conventional fabric the baselines run on: destination routing, ECMP or adaptive
routing, PFC or credit-based lossless links, DCQCN ECN marking, dynamic-routing delays.

Built on the same :class:`~openmrc.topology.Topology` as the MRC fabric (one
plane is the usual choice), by substituting two classes in
:class:`~openmrc.sim.fabric.Fabric`:

:class:`DestSwitch`
    Routes on the packet's destination host (``pkt.dst``), not on an SRv6
    route.  A T0 sends a packet for one of its hosts down; otherwise up to a T1
    chosen among the uplinks that the *routing protocol currently believes*
    lead to the destination's T0: by a hash of ``(src, dst, sport, dport)``
    (``routing="ecmp"``; per-switch seed, stable per 5-tuple) or, per packet, the
    uplink with the fewest queued bytes (``routing="adaptive"``, InfiniBand-style
    adaptive routing; ties rotate; links known down locally are skipped at once).
    A T1 sends down to the destination's T0.
:class:`BaselinePort`
    An egress port whose data queue can be *paused* (PFC) or gated by *credits*
    (InfiniBand-style), with DCQCN's ECN ramp, applied at dequeue (``0`` below ``kmin``, rising to
    ``pmax`` at ``kmax``, ``1`` above).  Control packets (ACK/NAK/CNP) travel in
    the strict-priority queue, which is a separate priority: never paused, no
    credits.

Flow control is accounted at the *upstream* port ``U`` of every link into a
switch (the packet's ingress): ``U.ing_bytes`` are the bytes that came through
``U`` and still sit in the switch's buffer.

* PFC: when they reach ``xoff`` the switch sends PAUSE, which stops ``U``
  serving data one link delay later; when they fall to ``xon`` it sends RESUME
  (also one link delay).  Bytes beyond ``xoff + headroom`` are dropped
  (``pfc_drops``; zero when the headroom covers the link's round trip).
* Credits: ``U`` starts with ``credit_bytes`` of credit for the switch's ingress
  buffer, spends a packet's wire bytes when it starts sending it, and gets them
  back one link delay after the switch starts forwarding the packet.

Hosts drain at line rate, so links into hosts need neither.

Dynamic routing (ECMP and adaptive alike): when a T0-T1 link goes down or up,
the switches' route sets change ``convergence_delay_ps`` later; a silent
failure (link silent in either direction, or an end switch blackholed) is
withdrawn only ``hold_time_ps`` after it started (a hold timer).  Until then
ECMP keeps hashing flows onto the dead link, whose port drops them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..sim.config import FabricConfig
from ..sim.fabric import Fabric
from ..sim.port import EgressPort, PyEgressPort
from ..sim.switch import HostEnd, PySwitch, Switch
from ..wire.packets import DataPacket
from .roce import RoceConfig, default_pfc_xoff_bytes

if TYPE_CHECKING:
    from ..sim.engine import Simulator
    from ..sim.link import Link
    from ..topology import SwitchInfo, Topology
    from ..wire.packets import Packet

FC_NONE = 0
FC_PFC = 1
FC_CREDIT = 2
_FC = {"none": FC_NONE, "pfc": FC_PFC, "credit": FC_CREDIT}
_REF_25G = 25e9

#: ECN marking profiles: (K_min bytes, K_max bytes, at this port rate b/s, P_max).
#: The thresholds scale with the port rate.  docs/baselines.md gives the sources.
ECN_PROFILES: dict[str, tuple[int, int, float, float]] = {
    # NVIDIA Onyx ``roce`` / Cumulus Linux RoCE default: 150 KB / 1.5 MB, probability 100
    "nvidia": (150_000, 1_500_000, 400e9, 1.0),
    # the DCQCN paper's 25 Gb/s values (the HPCC artifact), openmrc's default before
    "hpcc": (100_000, 400_000, 25e9, 0.2),
}


@dataclass(frozen=True)
class BaselineFabricConfig:
    """Switch behaviour of the conventional fabric (byte sizes include Ethernet framing).

    ``None`` sizes are derived per port.  ECN ``K_min``/``K_max``/``P_max`` come
    from ``ecn_profile`` (:data:`ECN_PROFILES`): ``"nvidia"`` (default) -- NVIDIA's
    RoCE switch default, marking from 150 KB to 1.5 MB with probability rising to
    1 (given for 400 Gb/s here and scaled by the port rate, so the ramp always
    ends below the PFC ``xoff``: ECN acts before PFC); ``"hpcc"`` -- the DCQCN
    paper's values at 25 Gb/s (100 KB / 400 KB, ``P_max`` 0.2) scaled by the
    port rate, used before (their ``K_max`` lies above ``xoff``, so PFC pauses
    before the marking is strong).  PFC ``xoff`` 512 KB at 100 Gb/s scaled, ``xon`` = ``xoff`` minus
    2 MTU frames; headroom = the link's round trip at line rate plus 2 MTU
    frames (so lossless mode never drops); credits = 2 x the link's round
    trip at line rate plus 4 MTU frames (enough for line rate).
    """

    routing: str = "ecmp"
    flow_control: str = "pfc"
    ecn: bool = True
    ecn_profile: str = "nvidia"
    ecn_kmin_bytes: int | None = None
    ecn_kmax_bytes: int | None = None
    ecn_pmax: float | None = None
    #: Data queue of a switch egress port when not lossless (drop-tail).
    queue_bytes: int = 4 * 1024 * 1024
    pfc_xoff_bytes: int | None = None
    pfc_xon_bytes: int | None = None
    pfc_headroom_bytes: int | None = None
    credit_bytes: int | None = None
    convergence_delay_ps: int = 200_000_000_000
    hold_time_ps: int = 3_000_000_000_000
    hash_seed: int = 0
    mtu_frame_bytes: int = 4096 + 80 + 38

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        o = "BaselineFabricConfig"
        if self.routing not in ("ecmp", "adaptive"):
            raise ValueError(f"{o}.routing: must be 'ecmp' or 'adaptive', got {self.routing!r}")
        if self.flow_control not in _FC:
            raise ValueError(
                f"{o}.flow_control: must be 'none', 'pfc' or 'credit', got {self.flow_control!r}"
            )
        for name in (
            "ecn_kmin_bytes",
            "ecn_kmax_bytes",
            "pfc_xoff_bytes",
            "pfc_xon_bytes",
            "pfc_headroom_bytes",
            "credit_bytes",
        ):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{o}.{name}: must be None or a non-negative int, got {v!r}")
        for name in ("queue_bytes", "convergence_delay_ps", "hold_time_ps", "mtu_frame_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{o}.{name}: must be a non-negative int, got {v!r}")
        if self.ecn_profile not in ECN_PROFILES:
            raise ValueError(
                f"{o}.ecn_profile: must be one of {', '.join(ECN_PROFILES)}, "
                f"got {self.ecn_profile!r}"
            )
        pmax = self.ecn_pmax
        if pmax is not None and (
            isinstance(pmax, bool) or not isinstance(pmax, int | float) or not 0.0 <= pmax <= 1.0
        ):
            raise ValueError(f"{o}.ecn_pmax: must be None or in [0, 1], got {pmax!r}")
        if (
            self.pfc_xoff_bytes is not None
            and self.pfc_xon_bytes is not None
            and self.pfc_xon_bytes > self.pfc_xoff_bytes
        ):
            raise ValueError(f"{o}.pfc_xon_bytes: must not exceed pfc_xoff_bytes")
        if self.credit_bytes is not None and self.credit_bytes < self.mtu_frame_bytes:
            raise ValueError(f"{o}.credit_bytes: must hold at least one MTU frame")


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
        self.on_state: Any = None

    # ----- downstream side: this port's own queue ---------------------------------
    def enqueue(self, pkt: Packet) -> None:
        """Queue ``pkt`` sent by the node that owns this port (no upstream ingress)."""
        self.accept(pkt, None)

    def accept(self, pkt: Packet, via: BaselinePort | None) -> None:
        """Queue ``pkt``, which arrived through the upstream port ``via`` (None: local).

        The per-packet path: the upstream port's PFC accounting (:meth:`charge`) is
        inlined here, as are :meth:`discharge` and the wire in :meth:`_tx_free`.
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
            if via is not None:
                fc = via.fc
                if fc == FC_PFC:  # charge(), inlined
                    ing = via.ing_bytes + wb
                    if ing > via.xoff + via.headroom:
                        self.pfc_drops += 1
                        return
                    via.ing_bytes = ing
                    if ing > via.max_ing_bytes:
                        via.max_ing_bytes = ing
                    if not via.pause_sent and ing >= via.xoff:
                        via.pause_sent = True
                        via.pause_frames += 1
                        self.sim.after(via.delay, via.set_paused, True)
                elif fc and not via.charge(wb):
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
            if via is not None:
                fc = via.fc
                if fc == FC_PFC:  # discharge(), inlined
                    ing = via.ing_bytes - wb
                    via.ing_bytes = ing
                    if via.pause_sent and ing <= via.xon:
                        via.pause_sent = False
                        self.sim.after(via.delay, via.set_paused, False)
                elif fc:
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


# the slot descriptor, wrapped by DestSwitch.forwarding (read on the class on purpose)
_FWD: Any = PySwitch.forwarding  # type: ignore[misc]


_M64 = 0xFFFFFFFFFFFFFFFF


def _mix(x: int) -> int:
    """A 64-bit finalizer (splitmix's): the ECMP hash of a 5-tuple and the switch seeds."""
    x &= 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 33)


class DestSwitch(PySwitch):
    """A T0/T1 switch routing on ``pkt.dst`` with ECMP or adaptive routing (module doc)."""

    __slots__ = ("_rr", "adaptive", "hpt", "nh", "no_route", "on_state", "seed")

    def __init__(self, info: SwitchInfo, nports: int) -> None:
        super().__init__(info, nports)
        self.hpt = 1
        #: per destination T0: the uplinks routing currently believes usable.
        self.nh: list[list[BaselinePort]] = []
        self.adaptive = False
        self.seed = 0
        self.no_route = 0
        self._rr = 0
        self.on_state: Any = None

    @property  # type: ignore[override]
    def forwarding(self) -> bool:
        """Whether the switch forwards (cleared by switch down / blackhole faults)."""
        return bool(_FWD.__get__(self))

    @forwarding.setter
    def forwarding(self, value: bool) -> None:
        _FWD.__set__(self, value)
        cb = getattr(self, "on_state", None)
        if cb is not None:
            cb(self)

    def ecmp_index(self, src: int, dst: int, sport: int, n: int) -> int:
        """Which of ``n`` equal-cost next hops the 5-tuple hashes to (stable per tuple)."""
        return _mix(self.seed ^ (src << 40) ^ (dst << 20) ^ (sport << 1) ^ 4791) % n

    def receive(self, pkt: Packet, via: EgressPort, epoch: int) -> None:  # type: ignore[override]
        """Route ``pkt`` on its destination host and queue it on the chosen egress."""
        if epoch != via.epoch:
            via.lost_in_flight(pkt)
            return
        up: BaselinePort = via  # type: ignore[assignment]
        if not _FWD.__get__(self):
            self.discarded += 1
            if isinstance(pkt, DataPacket):
                up.refund(pkt.size + up.framing)
            return
        try:
            dst: int = pkt.dst  # type: ignore[attr-defined]
        except AttributeError:
            self.bad_route += 1
            return
        hpt = self.hpt
        b = dst // hpt
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
                x = (
                    self.seed ^ (pkt.src << 40) ^ (dst << 20) ^ (pkt.sport << 1) ^ 4791  # type: ignore[attr-defined]
                ) & _M64
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
                    up.refund(pkt.size + up.framing)
                return
        self.forwarded += 1
        out.accept(pkt, up)  # type: ignore[union-attr]

    def counters(self) -> dict[str, int]:
        """Switch counters plus no_route."""
        out = super().counters()
        out["no_route"] = self.no_route
        return out


class BaselineFabric(Fabric):
    """A :class:`Fabric` of :class:`DestSwitch` and :class:`BaselinePort` (module doc)."""

    switch_class = DestSwitch
    port_class = BaselinePort

    def __init__(
        self,
        sim: Simulator,
        topology: Topology,
        config: FabricConfig | None = None,
        baseline: BaselineFabricConfig | None = None,
    ) -> None:
        super().__init__(sim, topology, config)
        bc = baseline if baseline is not None else BaselineFabricConfig()
        bc.validate()
        self.baseline = bc
        spec = topology.spec
        hpt = spec.hosts_per_t0
        fc = _FC[bc.flow_control]
        mtu = bc.mtu_frame_bytes
        for sw in self.switches.values():
            assert isinstance(sw, DestSwitch)
            sw.hpt = hpt
            sw.adaptive = bc.routing == "adaptive"
            sw.seed = _mix(bc.hash_seed * 1_000_003 + sw.plane * 4099 + sw.index * 2 + sw.tier)
            sw.on_state = self._switch_state
        for port in self.ports:
            assert isinstance(port, BaselinePort)
            rate = port.rate_bps
            into_switch = not isinstance(getattr(port.rx, "__self__", None), HostEnd)
            link_rtt_bytes = 2 * port.delay * rate // (8 * 10**12)
            if port in (p for ports in self.host_ports for p in ports):
                pass  # host NIC port: keep the host queue; ECN is a switch feature
            else:
                pkmin, pkmax, pref, ppmax = ECN_PROFILES[bc.ecn_profile]
                scale = rate / pref
                kmin = bc.ecn_kmin_bytes if bc.ecn_kmin_bytes is not None else int(pkmin * scale)
                kmax = bc.ecn_kmax_bytes if bc.ecn_kmax_bytes is not None else int(pkmax * scale)
                port.ecn = bc.ecn
                port.kmin, port.kmax = kmin, max(kmin, kmax)
                port.pmax = bc.ecn_pmax if bc.ecn_pmax is not None else ppmax
                port.trim = False
                port.data_limit = bc.queue_bytes if fc == FC_NONE else 1 << 50
            if into_switch and fc != FC_NONE:
                port.fc = fc
                xoff = (
                    bc.pfc_xoff_bytes
                    if bc.pfc_xoff_bytes is not None
                    else default_pfc_xoff_bytes(rate)
                )
                port.xoff = xoff
                port.xon = (
                    bc.pfc_xon_bytes if bc.pfc_xon_bytes is not None else max(0, xoff - 2 * mtu)
                )
                port.headroom = (
                    bc.pfc_headroom_bytes
                    if bc.pfc_headroom_bytes is not None
                    else link_rtt_bytes + 2 * mtu
                )
                port.credits = port.credit_cap = (
                    bc.credit_bytes if bc.credit_bytes is not None else 2 * link_rtt_bytes + 4 * mtu
                )
        # Routing state: uplinks per (plane, T0 index, T1 index).
        self._uplinks: dict[tuple[int, int, int], Link] = {}
        self.believed: dict[str, bool] = {}
        self._stamp: dict[str, int] = {}
        for link in self.links.values():
            a = self.switches.get(link.info.a)
            b = self.switches.get(link.info.b)
            if a is None or b is None:
                continue
            self._uplinks[(a.plane, a.index, b.index)] = link
            self.believed[link.name] = True
            self._stamp[link.name] = 0
            link.watch(self._link_event)
            for port in link.ports:
                port.on_state = lambda _p, _l=link: self._health_event(_l)  # type: ignore[attr-defined]
        #: (time_ps, link name, believed up) for every routing change applied.
        self.route_changes: list[tuple[int, str, bool]] = []
        for plane in range(spec.planes):
            self._recompute(plane)

    # ----- routing model -----------------------------------------------------------
    def healthy(self, link: Link) -> bool:
        """Ground truth: the link is up, not silent, and both end switches forward."""
        if not link.up:
            return False
        if link.up_port.silent or link.down_port.silent:
            return False
        a, b = self.switches[link.info.a], self.switches[link.info.b]
        return a.state == "up" and b.state == "up" and a.forwarding and b.forwarding

    def _link_event(self, link: Link, up: bool, now: int) -> None:
        self._schedule_settle(link, self.baseline.convergence_delay_ps)

    def _health_event(self, link: Link) -> None:
        # A silent failure starting is noticed at the hold timer; anything else converges.
        if self.believed[link.name] and link.up and not self.healthy(link):
            delay = self.baseline.hold_time_ps
        else:
            delay = self.baseline.convergence_delay_ps
        self._schedule_settle(link, delay)

    def _switch_state(self, sw: Switch) -> None:
        for port in sw.ports:
            if port is not None and port.link is not None and port.link.name in self.believed:
                self._health_event(port.link)

    def _schedule_settle(self, link: Link, delay: int) -> None:
        stamp = self._stamp[link.name] + 1
        self._stamp[link.name] = stamp
        self.sim.after(delay, self._settle, link, stamp)

    def _settle(self, link: Link, stamp: int) -> None:
        if self._stamp[link.name] != stamp:
            return  # a later change has its own settle
        ok = self.healthy(link)
        if ok != self.believed[link.name]:
            self.believed[link.name] = ok
            self.route_changes.append((self.sim.now, link.name, ok))
            self.metrics.record_fault("route_up" if ok else "route_withdrawn", link.name)
            self._recompute(self.switches[link.info.a].plane)

    def _recompute(self, plane: int) -> None:
        spec = self.topology.spec
        hpt, t0s, t1s = spec.hosts_per_t0, spec.t0s, spec.t1s
        ok = self.believed
        up = self._uplinks
        for sw in self.switches.values():
            if sw.plane != plane or sw.tier != 0:
                continue
            assert isinstance(sw, DestSwitch)
            i = sw.index
            nh: list[list[BaselinePort]] = []
            for b in range(t0s):
                ports = []
                for k in range(t1s):
                    if ok[up[(plane, i, k)].name] and ok[up[(plane, b, k)].name]:
                        ports.append(sw.ports[hpt + k])
                nh.append(ports)  # type: ignore[arg-type]
            sw.nh = nh

    def uplink_choice(self, src: int, dst: int, sport: int, plane: int = 0) -> int:
        """Which T1 index ECMP sends ``(src, dst, sport)`` to from ``src``'s T0 (now)."""
        spec = self.topology.spec
        sw = self.switches[self.topology.t0_name(plane, src // spec.hosts_per_t0)]
        assert isinstance(sw, DestSwitch)
        cand = sw.nh[dst // spec.hosts_per_t0]
        port = cand[sw.ecmp_index(src, dst, sport, len(cand))]
        return sw.ports.index(port) - spec.hosts_per_t0


#: The named baseline setups: fabric defaults and RoCE-config defaults.
SETUPS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "roce": ({"routing": "ecmp", "flow_control": "pfc", "ecn": True}, {"dcqcn": True}),
    "ib": (
        {"routing": "adaptive", "flow_control": "credit", "ecn": False},
        {"dcqcn": False, "reorder_window": 1024, "adaptive_retransmission": False},
    ),
}


def baseline_configs(name: str, transport: Any) -> tuple[RoceConfig, BaselineFabricConfig]:
    """The RoCE and fabric configuration of setup ``name`` with ``transport``'s overrides.

    ``transport`` is a :class:`~openmrc.sim.experiment.TransportConfig` (its
    ``mtu``, ``qps``, ``roce`` and ``baseline_fabric``).
    """
    if name not in SETUPS:
        raise ValueError(f"transport name: must be 'mrc', 'roce' or 'ib', got {name!r}")
    fab, roce = SETUPS[name]
    params = {"mtu": transport.mtu, **roce, **transport.roce}
    if transport.qps is not None:
        params["qps"] = transport.qps
    rc = RoceConfig.from_dict(params)
    try:
        bc = BaselineFabricConfig(
            **{**fab, "mtu_frame_bytes": rc.mtu + 80 + 38, **transport.baseline_fabric}
        )
    except TypeError as exc:
        raise ValueError(f"baseline_fabric: {exc}") from None
    bc.validate()
    return rc, bc
