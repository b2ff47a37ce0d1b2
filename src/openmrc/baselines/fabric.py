"""The conventional fabric the baselines run on: destination routing, ECMP or adaptive
routing, PFC or credit-based lossless links, DCQCN ECN marking, dynamic-routing delays.

Built on the same :class:`~openmrc.topology.Topology` as the MRC fabric (one
plane is the usual choice), by substituting two classes in
:class:`~openmrc.sim.fabric.Fabric` (both in :mod:`openmrc.baselines.datapath`,
which a compiled build compiles):

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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..sim.config import FabricConfig
from ..sim.fabric import Fabric
from ..sim.switch import HostEnd, Switch
from .datapath import FC_CREDIT, FC_NONE, FC_PFC, BaselinePort, DestSwitch, _mix
from .roce import RoceConfig, default_pfc_xoff_bytes

if TYPE_CHECKING:
    from ..sim.engine import Simulator
    from ..sim.link import Link
    from ..topology import Topology

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


class BaselineFabric(Fabric):
    """A :class:`Fabric` of :class:`DestSwitch` and :class:`BaselinePort` (module doc)."""

    switch_class = DestSwitch  # type: ignore[assignment]
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


__all__ = [
    "ECN_PROFILES",
    "FC_CREDIT",
    "FC_NONE",
    "FC_PFC",
    "SETUPS",
    "BaselineFabric",
    "BaselineFabricConfig",
    "BaselinePort",
    "DestSwitch",
    "baseline_configs",
]
