"""RoCEv2 and InfiniBand-style hosts and experiments on the conventional fabric.

``Experiment(spec, transport_name="roce")`` (or ``TransportConfig(name="roce")``)
builds a :class:`BaselineExperiment`: a :class:`~openmrc.sim.baseline_fabric.BaselineFabric`
and one :class:`BaselineHost` per host, each driving the sans-IO
:mod:`openmrc.baselines.roce` QPs.  The two named setups:

``roce``
    ECMP (5-tuple hash, one path per QP), PFC lossless data priority, DCQCN ECN
    marking and DCQCN rate control, go-back-N.
``ib``
    Adaptive routing (least-loaded uplink per packet), credit-based lossless
    links, no ECN and no DCQCN, go-back-N.

Either can be adjusted with ``TransportConfig.roce`` (RoceConfig keys, e.g.
``qps``, ``timeout_exp``, ``dcqcn``, ``dcqcn_rate_increase_interval_ps``) and
``TransportConfig.baseline_fabric`` (BaselineFabricConfig fields, e.g.
``flow_control``, ``routing``, ``convergence_delay_ps``).  A connection's QP
``i`` sends on plane ``i % planes`` (one plane is the usual RoCE setup).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..baselines.roce import Cnp, RoceAck, RoceConfig, RoceData, RoceReceiver, RoceSender
from ..topology import ClosSpec, Topology
from ..workloads import FlowSpec
from .baseline_fabric import BaselineFabric, BaselineFabricConfig
from .config import FabricConfig
from .engine import Simulator
from .experiment import Experiment, FlowResult, Result, TransportConfig, base_rtt_ps
from .faults import FaultInjector

if TYPE_CHECKING:
    from ..wire.packets import Packet
    from .port import EgressPort

#: The named baseline setups: fabric defaults and RoCE-config defaults.
SETUPS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "roce": ({"routing": "ecmp", "flow_control": "pfc", "ecn": True}, {"dcqcn": True}),
    "ib": (
        {"routing": "adaptive", "flow_control": "credit", "ecn": False},
        {"dcqcn": False, "reorder_window": 1024},
    ),
}


def baseline_configs(
    name: str, transport: TransportConfig
) -> tuple[RoceConfig, BaselineFabricConfig]:
    """The RoCE and fabric configuration of setup ``name`` with ``transport``'s overrides."""
    if name not in SETUPS:
        raise ValueError(f"transport name: must be 'mrc', 'roce' or 'ib', got {name!r}")
    fab, roce = SETUPS[name]
    params = {"mtu": transport.mtu, **roce, **transport.roce}
    rc = RoceConfig.from_dict(params)
    try:
        bc = BaselineFabricConfig(
            **{**fab, "mtu_frame_bytes": rc.mtu + 80 + 38, **transport.baseline_fabric}
        )
    except TypeError as exc:
        raise ValueError(f"baseline_fabric: {exc}") from None
    bc.validate()
    return rc, bc


class BaselineHost:
    """Host ``index``: the NIC scheduling its RoCE QPs onto its ports, and its responders."""

    def __init__(self, sim: Simulator, fabric: BaselineFabric, index: int) -> None:
        self.sim = sim
        self.fabric = fabric
        self.index = index
        self.ports: list[EgressPort] = fabric.host_ports[index]
        #: sending QPs by qp id, and per plane in round-robin order
        self.senders: dict[int, RoceSender] = {}
        self.plane_senders: list[list[RoceSender]] = [[] for _ in self.ports]
        self._rr = [0] * len(self.ports)
        self.receivers: dict[int, RoceReceiver] = {}
        self._pump_at: int | None = None
        self._timer_at: int | None = None
        self.on_activity: Callable[[BaselineHost, int], None] | None = None
        fabric.attach_host(index, self._on_receive, self._on_link)

    def add_sender(self, snd: RoceSender, plane: int) -> None:
        """Register a sending QP on ``plane``."""
        self.senders[snd.qp] = snd
        self.plane_senders[plane].append(snd)

    def add_receiver(self, rcv: RoceReceiver) -> None:
        """Register a receiving QP."""
        self.receivers[rcv.qp] = rcv

    # -- input ----------------------------------------------------------------------
    def _on_receive(self, pkt: Packet, plane: int, now: int) -> None:
        if type(pkt) is RoceData:
            rcv = self.receivers.get(pkt.dqpn)
            if rcv is None:
                return
            port = self.ports[plane]
            for reply in rcv.receive(pkt, now):
                port.enqueue(reply)
            return
        if type(pkt) is RoceAck or type(pkt) is Cnp:
            snd = self.senders.get(pkt.dqpn)
            if snd is None:
                return
            snd.receive(pkt, now)
            self.kick(now)
            if self.on_activity is not None:
                self.on_activity(self, now)

    def _on_link(self, plane: int, up: bool, now: int) -> None:
        self.kick(now)

    def _on_timer(self, at: int) -> None:
        if self._timer_at != at:
            return
        self._timer_at = None
        now = self.sim.now
        for snd in self.senders.values():
            d = snd.deadline()
            if d is not None and d <= now:
                snd.on_timer(now)
        self.kick(now)
        if self.on_activity is not None:
            self.on_activity(self, now)

    def _on_pump(self, at: int) -> None:
        if self._pump_at != at:
            return
        self._pump_at = None
        self.kick(self.sim.now)

    # -- output ---------------------------------------------------------------------
    def kick(self, now: int) -> None:
        """Give every free port a packet from its next ready QP; re-arm pump and timer."""
        wake: int | None = None
        for plane, port in enumerate(self.ports):
            qps = self.plane_senders[plane]
            if not qps:
                continue
            n = len(qps)
            while True:
                if not port.up:
                    break
                if port.busy_until > now or port.data_bytes:
                    # busy, paused or out of credit: look again when it should be free
                    t = port.busy_until if port.busy_until > now else now + 100_000
                    if port.data_bytes:
                        t = max(t, port.drain_time())
                    if any(q.ready() for q in qps):
                        wake = t if wake is None or t < wake else wake
                    break
                start = self._rr[plane]
                chosen = None
                for i in range(n):
                    q = qps[(start + i) % n]
                    if q.ready():
                        t = q.next_tx
                        if t <= now:
                            chosen = q
                            self._rr[plane] = (start + i + 1) % n
                            break
                        if wake is None or t < wake:
                            wake = t
                if chosen is None:
                    break
                port.enqueue(chosen.build(now))
        if wake is not None and (self._pump_at is None or wake < self._pump_at):
            at = wake if wake > now else now + 1
            self._pump_at = at
            self.sim.schedule(at, self._on_pump, at)
        deadline = None
        for snd in self.senders.values():
            d = snd.deadline()
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        if deadline is not None and (self._timer_at is None or deadline < self._timer_at):
            at = deadline if deadline > now else now
            self._timer_at = at
            self.sim.schedule(at, self._on_timer, at)


class _BFlow:
    __slots__ = (
        "done_at",
        "dst_buf",
        "finished",
        "last_bytes",
        "pending",
        "receivers",
        "senders",
        "series",
        "spec",
        "src_data",
        "status",
    )

    def __init__(self, spec: FlowSpec) -> None:
        self.spec = spec
        self.senders: list[RoceSender] = []
        self.receivers: list[RoceReceiver] = []
        self.pending = 0
        self.finished: list[int] = []
        self.done_at: int | None = None
        self.status = "not started"
        self.last_bytes = 0
        self.series: list[float] = []
        self.src_data: bytearray | None = None
        self.dst_buf: bytearray | None = None


class BaselineExperiment(Experiment):
    """An experiment running RoCEv2 (``roce``) or InfiniBand-style (``ib``) connections.

    Same interface and :class:`~openmrc.sim.experiment.Result` as
    :class:`~openmrc.sim.experiment.Experiment`; a flow is one connection of
    ``RoceConfig.qps`` QPs.  ``FlowResult.retransmits`` counts go-back-N
    rewinds, ``nacks`` NAKs sent, ``timeouts`` local ACK timeouts,
    ``ecn_echoes`` CNPs.
    """

    def __init__(
        self,
        spec: ClosSpec,
        fabric_config: FabricConfig | None = None,
        transport: TransportConfig | None = None,
        seed: int = 1,
        payloads: bool = False,
        sample_interval_ps: int = 10_000_000,
        transport_name: str | None = None,
        baseline_fabric: BaselineFabricConfig | None = None,
        **_ignored: Any,
    ) -> None:
        spec.validate()
        transport = transport or TransportConfig()
        name = transport_name if transport_name is not None else transport.name
        if transport.name != name:
            transport = replace(transport, name=name)
        self.transport = transport
        self.transport_name = name
        self.roce_config, bc = baseline_configs(name, transport)
        if baseline_fabric is not None:
            bc = baseline_fabric
        self.spec = spec
        self.topology = Topology(spec)
        self.base_rtt_ps = base_rtt_ps(spec, transport.mtu)
        self.sim = Simulator(seed)
        cfg = fabric_config or FabricConfig(base_rtt_ps=self.base_rtt_ps, trimming=False)
        self.fabric: BaselineFabric = BaselineFabric(self.sim, self.topology, cfg, bc)
        self.faults = FaultInjector(self.fabric)
        self.line_bps = spec.host_gbps * 1e9
        self.hosts = [BaselineHost(self.sim, self.fabric, h) for h in range(spec.hosts)]  # type: ignore[assignment]
        master = random.Random(seed ^ 0x5EED)
        self._sport_rng = random.Random(master.getrandbits(64))
        self._payload_rng = random.Random(master.getrandbits(64))
        self.payloads = payloads
        self.flows: list[_BFlow] = []  # type: ignore[assignment]
        self._sending: dict[int, list[_BFlow]] = {}  # type: ignore[assignment]
        self._open = 0
        self._next_qp = 1
        self._captures: list[Any] = []
        if not isinstance(sample_interval_ps, int) or sample_interval_ps <= 0:
            raise ValueError(
                f"sample_interval_ps: must be a positive int, got {sample_interval_ps!r}"
            )
        self.sample_interval_ps = sample_interval_ps
        self.queue_sample_interval_ps = None
        for host in self.hosts:
            host.on_activity = self._activity  # type: ignore[assignment]

    def add_flow(self, spec: FlowSpec) -> None:
        """Add one connection."""
        spec.validate(self.spec.hosts)
        flow = _BFlow(spec)
        self.flows.append(flow)
        self._open += 1
        self.sim.schedule(spec.start_ps, self._start, flow)

    def _start(self, flow: _BFlow) -> None:  # type: ignore[override]
        spec = flow.spec
        now = self.sim.now
        cfg = self.roce_config
        if self.payloads:
            flow.src_data = bytearray(self._payload_rng.randbytes(spec.size))
            flow.dst_buf = bytearray(spec.size)
        src, dst = self.hosts[spec.src], self.hosts[spec.dst]
        planes = self.spec.planes
        for i in range(cfg.qps):
            qp = self._next_qp
            self._next_qp += 1
            sport = self._sport_rng.randrange(cfg.sport_base, 65536)
            snd = RoceSender(
                cfg,
                qp,
                spec.src,
                spec.dst,
                sport,
                self.line_bps,
                data=flow.src_data,
                now=now,
                wire_overhead=self.fabric.config.framing_bytes,
            )
            rcv = RoceReceiver(cfg, qp, spec.dst, spec.src, sport, buffer=flow.dst_buf)
            src.add_sender(snd, i % planes)  # type: ignore[attr-defined]
            dst.add_receiver(rcv)  # type: ignore[attr-defined]
            flow.senders.append(snd)
            flow.receivers.append(rcv)
        n = 0
        for off in range(0, spec.size, spec.message):
            length = min(spec.message, spec.size - off)
            flow.senders[n % cfg.qps].post(n, off, length)
            n += 1
        flow.pending = n
        flow.status = "running"
        self._sending.setdefault(spec.src, []).append(flow)
        src.kick(now)

    def _activity(self, host: Any, now: int) -> None:
        flows = self._sending.get(host.index)
        if not flows:
            return
        for flow in flows:
            for snd in flow.senders:
                if snd.completed:
                    for _msg, ok, _t in snd.completed:
                        flow.pending -= 1
                        flow.finished.append(now)
                        if not ok and flow.status == "running":
                            flow.status = "qp_error"
                    snd.completed.clear()
            if flow.pending == 0 and flow.done_at is None:
                flow.done_at = now
                if flow.status == "running":
                    flow.status = "ok"
                self._open -= 1
        self._sending[host.index] = [f for f in flows if f.pending]
        if self._open == 0:
            self.sim.stop()

    def _sample(self) -> None:
        interval = self.sample_interval_ps
        scale = 8 / interval * 1000
        for flow in self.flows:
            if not flow.receivers:
                if flow.status == "not started":
                    flow.series.append(0.0)
                continue
            got = sum(r.rcvd_bytes for r in flow.receivers)
            flow.series.append(round((got - flow.last_bytes) * scale, 3))
            flow.last_bytes = got
        if self._open:
            self.sim.after(interval, self._sample)

    def run(self, until_ps: int | None = None) -> Result:
        """Run until every flow finished (or ``until_ps``), and collect the results."""
        self.sim.after(self.sample_interval_ps, self._sample)
        started = time.perf_counter()
        self.sim.run(until_ps)
        return self._collect(time.perf_counter() - started)

    def _collect(self, wall: float) -> Result:
        flows = []
        verified: bool | None = None
        for flow in self.flows:
            spec = flow.spec
            ok = flow.status == "ok"
            if self.payloads and flow.src_data is not None:
                exact = flow.dst_buf == flow.src_data
                verified = exact if verified is None else verified and exact
                ok = ok and exact
            flows.append(
                FlowResult(
                    name=spec.name or f"{spec.src}->{spec.dst}",
                    src=spec.src,
                    dst=spec.dst,
                    size=spec.size,
                    start_ps=spec.start_ps,
                    finish_ps=flow.done_at,
                    ok=ok,
                    status=flow.status,
                    message_finish_ps=flow.finished,
                    retransmits=sum(s.rewinds for s in flow.senders),
                    trims=0,
                    nacks=sum(r.naks for r in flow.receivers),
                    timeouts=sum(s.timeouts for s in flow.senders),
                    ecn_echoes=sum(r.cnps for r in flow.receivers),
                    evs_assumed_bad=0,
                )
            )
        series = {f.spec.name or f"{f.spec.src}->{f.spec.dst}": f.series for f in self.flows}
        return Result(
            flows=flows,
            sim_end_ps=self.sim.now,
            wall_seconds=round(wall, 3),
            events=self.sim.events_run,
            ev_events=[],
            qp_events=[],
            goodput_series=series,
            sample_interval_ps=self.sample_interval_ps,
            fabric=self.fabric.metrics.snapshot(include_samples=False),
            verified=verified,
        )
