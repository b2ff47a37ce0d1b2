"""An MRC experiment in the simulator: a fabric, hosts running the core, flows, faults.

    exp = Experiment(ClosSpec(planes=8, t0s=8, hosts_per_t0=8, t1s=8), seed=1)
    exp.add_flows(permutation(64, 2 << 20, random.Random(1)))
    exp.faults.link_down("...", at_ps=50 * US)
    result = exp.run()
    result.flows[0].goodput_gbps, result.to_json("out.json")

Everything random (EV choice, key generation, loss, ECN ramps) draws from
generators seeded from the experiment's seed, so a run is a pure function of
its inputs: the same scenario and seed give the same result, bit for bit.
"""

from __future__ import annotations

import csv
import itertools
import json
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..topology import ClosSpec, Topology
from ..transport import (
    SGE,
    CCProfile,
    EVEvent,
    EVProfile,
    EVRemap,
    QPAttr,
    QPEvent,
    QPState,
    QueuePair,
    RecvWR,
    SendWR,
    WCStatus,
    WROpcode,
)
from ..transport.controller import Controller
from ..transport.verbs import MemoryRegion
from ..wire.packets import DATA_HEADER_BYTES, SACK_BYTES, DataPacket
from ..workloads import FlowSpec, check_dependencies
from ..workloads.collectives import Collective
from .baseline_fabric import baseline_configs
from .capture import Capture
from .clustermapper import Clustermapper, ClustermapperConfig
from .config import ETHERNET_FRAMING_BYTES, FabricConfig
from .engine import Simulator, paused_gc
from .fabric import Fabric
from .faults import FaultInjector
from .folding import FOLD_TRANSFERS, FoldedCollective
from .host import SimHost
from .metrics import fct_summary


@dataclass
class TransportConfig:
    """How the MRC QPs of an experiment are set up (fields map to QPAttr / profiles)."""

    mtu: int = 4096
    cc: str = "nscc"
    cc_params: dict[str, Any] = field(default_factory=dict)
    ev_count: int = 256
    timeout: int = 7
    retry_linear: int = 7
    retry_exp: int = 7
    mpr: int = 64
    probe_interval_ps: int = 32_000_000
    #: RACK's least reordering window; None means half a base RTT.  Under load,
    #: spraying reorders by queueing differences of RTT fractions (the 8-rank
    #: ring all-reduce: 99 % within 0.45 base RTT, at most 0.75); the requester
    #: widens the window to what it measures (mean + 4 deviations of the
    #: lateness of reordered packets) and on spurious retransmissions, so the
    #: floor only covers a QP's first RTTs.  Two base RTTs (before) made every
    #: random loss cost about three RTTs before it was resent.
    reorder_window_ps: int | None = None
    #: Which transport runs: "mrc" (this core), or a baseline of
    #: :mod:`openmrc.sim.baseline`: "roce" (ECMP, PFC, DCQCN, go-back-N) or "ib"
    #: (adaptive routing, credits, go-back-N).
    name: str = "mrc"
    #: Baselines only: :class:`openmrc.baselines.roce.RoceConfig` keys (``qps``,
    #: ``timeout_exp``, ``retries``, ``dcqcn``, ``dcqcn_<DcqcnConfig field>``...).
    roce: dict[str, Any] = field(default_factory=dict)
    #: Baselines only: :class:`openmrc.sim.baseline_fabric.BaselineFabricConfig` fields.
    baseline_fabric: dict[str, Any] = field(default_factory=dict)
    #: QPs per connection, messages striped over them round-robin (as NCCL's
    #: NCCL_IB_QPS_PER_CONNECTION).  None: 1 for MRC, ``roce["qps"]`` (default 1)
    #: for the baselines.  A flow's own ``FlowSpec.qps`` wins.
    qps: int | None = None

    def attr(self, spec: ClosSpec, base_rtt_ps: int) -> QPAttr:
        """The QPAttr for a QP on this fabric (also checks ``name`` and the baseline keys)."""
        if self.name != "mrc":
            baseline_configs(self.name, self)  # raises ValueError naming the bad key
        # The uplink field names the T1s; EVs beyond one per T1 differ in their
        # spare-entropy bits (several EVs per physical path, as MRC has it).
        attr = QPAttr(
            ev_profile=EVProfile(
                planes=spec.planes,
                paths_per_plane=spec.t1s,
                ev_count=self.ev_count,
                probe_interval_ps=self.probe_interval_ps,
                floor=min(8, self.ev_count),
            ),
            cc_profile=CCProfile(
                name=self.cc,
                link_bps=spec.planes * spec.host_gbps * 1e9,
                base_rtt_ps=base_rtt_ps,
                params=dict(self.cc_params),
            ),
            mtu=self.mtu,
            timeout=self.timeout,
            retry_linear=self.retry_linear,
            retry_exp=self.retry_exp,
            mpr=self.mpr,
            reorder_window_ps=(
                base_rtt_ps // 2 if self.reorder_window_ps is None else self.reorder_window_ps
            ),
        )
        attr.validate()
        return attr


#: TransportConfig fields that must be the same for every flow of an experiment
#: (they shape the fabric or pick the transport); every other field can be
#: overridden per flow with ``FlowSpec.settings`` (and so per collective).
EXPERIMENT_WIDE = frozenset({"name", "mtu", "baseline_fabric"})


def flow_settings_keys() -> list[str]:
    """The TransportConfig fields a flow may override (``FlowSpec.settings``)."""
    from dataclasses import fields

    return sorted(f.name for f in fields(TransportConfig) if f.name not in EXPERIMENT_WIDE)


def check_flow_settings(settings: dict[str, Any] | None, key: str) -> None:
    """Raise ValueError naming ``key.<field>`` when a per-flow override is not allowed."""
    if settings is None:
        return
    if not isinstance(settings, dict):
        raise ValueError(f"{key}: must be a table of transport settings")
    allowed = flow_settings_keys()
    for k in settings:
        if k in EXPERIMENT_WIDE:
            raise ValueError(f"{key}.{k}: is experiment-wide and cannot be set per flow")
        if k not in allowed:
            raise ValueError(f"{key}.{k}: unknown transport setting (known: {', '.join(allowed)})")


def base_rtt_ps(spec: ClosSpec, mtu: int, latency_ps: int = 0) -> int:
    """Unloaded RTT of a full-size packet across the T1 tier and its ACK back.

    ``latency_ps``: the fixed one-way processing latency besides the links
    (:meth:`FabricConfig.path_latency_ps`), counted once each way.
    """
    framing = ETHERNET_FRAMING_BYTES
    data = (mtu + DATA_HEADER_BYTES + framing) * 8
    ack = (SACK_BYTES + framing) * 8
    host_ps_per_bit = 1000 / spec.host_gbps
    fab_ps_per_bit = 1000 / spec.fabric_gbps
    ser = 2 * (data + ack) * host_ps_per_bit + 2 * (data + ack) * fab_ps_per_bit
    return int(8 * spec.link_delay_ps + ser + 2 * latency_ps)


@dataclass
class FlowResult:
    """What happened to one flow."""

    name: str
    src: int
    dst: int
    size: int
    start_ps: int
    finish_ps: int | None
    ok: bool
    status: str
    message_finish_ps: list[int]
    retransmits: int
    trims: int
    nacks: int
    timeouts: int
    ecn_echoes: int
    evs_assumed_bad: int
    #: when the receiver had all the data (only tracked for flows others wait for,
    #: and collective flows; None otherwise or when it never did).
    rx_finish_ps: int | None = None
    #: when the flow actually started (later than ``start_ps`` if it waited for others).
    started_ps: int | None = None
    #: payload bytes the receiver took (all of them when finished; partial otherwise).
    bytes_received: int = 0
    #: goodput over the steady-state window (start-up excluded; None when the flow
    #: lasted too few sample intervals), and that window in us.
    steady_goodput_gbps: float | None = None
    steady_window_us: tuple[float, float] | None = None
    #: unloaded FCT: size at the connection's payload rate plus the path's base RTT.
    ideal_fct_ps: int | None = None
    #: the end of the run (for the partial goodput of unfinished flows).
    _end_ps: int | None = field(default=None, repr=False)

    @property
    def fct_ps(self) -> int | None:
        """Flow completion time (ps), None when it did not finish."""
        if self.finish_ps is None:
            return None
        return self.finish_ps - (self.start_ps if self.started_ps is None else self.started_ps)

    @property
    def goodput_gbps(self) -> float:
        """Bytes over completion time, in Gb/s (0 when unfinished)."""
        fct = self.fct_ps
        return self.size * 8 / fct * 1000 if fct else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        # what asdict gives, without its deep copies (a flow's lists are ints and floats)
        out = {
            f.name: list(v) if isinstance(v := getattr(self, f.name), list | tuple) else v
            for f in fields(self)
            if f.name != "_end_ps"
        }
        out["fct_us"] = None if self.fct_ps is None else self.fct_ps / 1e6
        out["goodput_gbps"] = round(self.goodput_gbps, 3)
        out["partial_goodput_gbps"] = round(self.partial_goodput_gbps, 3)
        out["slowdown"] = self.slowdown
        if self.steady_window_us is not None:
            out["steady_window_us"] = list(self.steady_window_us)
        return out

    @property
    def partial_goodput_gbps(self) -> float:
        """Bytes received over the time since the flow started (for unfinished flows)."""
        if self.finish_ps is not None:
            return self.goodput_gbps
        if self.started_ps is None or self._end_ps is None or self._end_ps <= self.started_ps:
            return 0.0
        return self.bytes_received * 8 / (self._end_ps - self.started_ps) * 1000

    @property
    def slowdown(self) -> float | None:
        """FCT over the ideal FCT (None when unfinished)."""
        fct = self.fct_ps
        if fct is None or not self.ideal_fct_ps:
            return None
        return round(fct / self.ideal_fct_ps, 4)


@dataclass
class Result:
    """Everything an experiment measured."""

    flows: list[FlowResult]
    sim_end_ps: int
    wall_seconds: float
    events: int
    ev_events: list[dict[str, Any]]
    qp_events: list[dict[str, Any]]
    goodput_series: dict[str, list[float]]
    sample_interval_ps: int
    fabric: dict[str, Any]
    verified: bool | None
    #: what self-probe fault localisation named, and when (see sim.clustermapper).
    localised: list[dict[str, Any]] = field(default_factory=list)
    #: one summary per collective added (:meth:`Collective.summary`).
    collectives: list[dict[str, Any]] = field(default_factory=list)
    #: things the user should know: faults that never fired, a run cut by its time cap.
    warnings: list[str] = field(default_factory=list)
    #: FCT and slowdown percentiles over the finished flows (:func:`metrics.fct_summary`).
    fct_summary: dict[str, Any] = field(default_factory=dict)
    #: NIC egress Gb/s per plane per sample interval (all hosts), "plane0", ...
    plane_series: dict[str, list[float]] = field(default_factory=dict)
    #: data Gb/s sent per (host, EV) per sample interval, "h0:ev0x12"; only after
    #: :meth:`Experiment.track_ev_activity` (MRC).
    ev_series: dict[str, list[float]] = field(default_factory=dict)
    #: sampling cost: ticks run, and ticks skipped while nothing moved.
    sampling: dict[str, int] = field(default_factory=dict)

    @property
    def all_ok(self) -> bool:
        """Every flow completed successfully (and verified, when payloads are real)."""
        return all(f.ok for f in self.flows) and self.verified is not False

    def aggregate_series(self) -> list[float]:
        """Total goodput (Gb/s) per sample interval, over all flows."""
        series = list(self.goodput_series.values())
        if not series:
            return []
        return [sum(v[i] for v in series if i < len(v)) for i in range(max(map(len, series)))]

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "all_ok": self.all_ok,
            "sim_end_us": self.sim_end_ps / 1e6,
            "wall_seconds": self.wall_seconds,
            "events": self.events,
            "verified": self.verified,
            "flows": [f.as_dict() for f in self.flows],
            "ev_events": self.ev_events,
            "qp_events": self.qp_events,
            "sample_interval_us": self.sample_interval_ps / 1e6,
            "goodput_gbps_series": self.goodput_series,
            "fabric": self.fabric,
            "localised": self.localised,
            "collectives": self.collectives,
            "warnings": self.warnings,
            "fct_summary": self.fct_summary,
            "plane_tx_gbps_series": self.plane_series,
            "ev_tx_gbps_series": self.ev_series,
            "sampling": self.sampling,
        }

    def to_json(self, path: str | Path) -> None:
        """Write :meth:`as_dict` as JSON."""
        Path(path).write_text(json.dumps(self.as_dict(), indent=1, sort_keys=True))

    def to_csv(self, directory: str | Path) -> list[Path]:
        """Write flows.csv, goodput.csv and ev_events.csv into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        written = []
        rows = [f.as_dict() for f in self.flows]
        for row in rows:
            row.pop("message_finish_ps")
        for name, data in (("flows.csv", rows), ("ev_events.csv", self.ev_events)):
            path = d / name
            with path.open("w", newline="") as fh:
                if data:
                    writer = csv.DictWriter(fh, fieldnames=list(data[0]))
                    writer.writeheader()
                    writer.writerows(data)
            written.append(path)
        path = d / "goodput.csv"
        with path.open("w", newline="") as fh:
            out = csv.writer(fh)
            names = list(self.goodput_series)
            out.writerow(["time_us", *names])
            length = max((len(v) for v in self.goodput_series.values()), default=0)
            for i in range(length):
                t = (i + 1) * self.sample_interval_ps / 1e6
                out.writerow(
                    [
                        t,
                        *(
                            self.goodput_series[n][i] if i < len(self.goodput_series[n]) else ""
                            for n in names
                        ),
                    ]
                )
        written.append(path)
        return written


_COUNTERS = ("retransmits", "trims", "nacks", "timeouts", "ecn_echoes", "evs_assumed_bad")


class _Flow:
    """What an experiment tracks of every flow, whatever the transport."""

    __slots__ = (
        "cum",
        "dep_gaps",
        "dependents",
        "deps_left",
        "deps_spare",
        "done_at",
        "finished",
        "fold",
        "fold_i",
        "last_bytes",
        "nmsgs",
        "order",
        "pending",
        "ready_at",
        "rx_done",
        "send_dependents",
        "series",
        "spec",
        "src_data",
        "started_at",
        "status",
        "watch_rx",
    )

    def __init__(self, spec: FlowSpec) -> None:
        self.spec = spec
        #: flows waiting for this one's data to arrive / for its sender to complete.
        self.dependents: list[_Flow] = []
        self.send_dependents: list[_Flow] = []
        self.deps_left = 0
        #: per-dependency waits (FlowSpec.dep_gaps by dependency flow), and when the
        #: flow is ready for the dependencies met so far.
        self.dep_gaps: dict[_Flow, int] | None = None
        self.ready_at = 0
        #: dependencies that may still fail without stranding this flow.
        self.deps_spare = 0
        self.nmsgs = 0
        self.rx_done: int | None = None
        self.started_at: int | None = None
        self.watch_rx = False
        #: bytes received at each sample tick (the steady-state window is cut from it).
        self.cum: list[int] = []
        self.pending = 0
        #: when it joined its sender's list (completions are handled in this order).
        self.order = 0
        self.finished: list[int] = []
        self.done_at: int | None = None
        self.status = "not started"
        self.last_bytes = 0
        self.series: list[float] = []
        self.src_data: bytearray | None = None
        #: the folded collective this flow is a transfer of (openmrc.sim.folding), and
        #: its index there; None for a flow of its own.
        self.fold: FoldedCollective | None = None
        self.fold_i = 0


def _send_order(flow: _Flow) -> int:
    return flow.order


class _Conn:
    """One long-lived MRC connection: the QPs (one per stripe) that the flows of a
    ``FlowSpec.conn`` key share, their protection domains, and the bookkeeping
    that splits the QPs' counters and completions among those flows.

    A flow's messages on stripe ``i`` are the MSNs ``posted[i]`` had reached when
    it posted them (post order is MSN order), so what it has received is exact:
    its completed messages (completions are in MSN order) plus the bytes placed
    of its messages still open.  Transport counters cannot be split by message,
    so each flow takes, when it completes, whatever the connection counted since
    the previous flow on it completed (see :meth:`Experiment._counters`).
    """

    __slots__ = (
        "active",
        "flows",
        "pa",
        "pb",
        "posted",
        "poster",
        "qas",
        "qbs",
        "started",
        "taken",
        "taken_at",
    )

    def __init__(self) -> None:
        self.pa: Any = None
        self.pb: Any = None
        self.qas: list[QueuePair] = []
        self.qbs: list[QueuePair] = []
        #: messages posted so far on each stripe (the next flow's first MSN there).
        self.posted: list[int] = []
        #: the flows started on it, by sequence number (the high bits of their WR ids);
        #: a folded collective's transfers leave once folded.  ``started``: how many.
        self.flows: dict[int, _MrcFlow] = {}
        self.started = 0
        #: those of them still waiting for completions (told when the shared CQ has news).
        self.active: dict[_Flow, None] = {}
        #: counter totals already attributed to a flow, and when that was.
        self.taken: dict[str, int] = dict.fromkeys(_COUNTERS[:-1], 0)
        self.taken_at: int | None = None
        #: posts the flows' WRITEs in start order as the QPs' send queues have room.
        self.poster = _Poster()

    def totals(self) -> dict[str, int]:
        """The QPs' counters so far (FlowResult names, without ``evs_assumed_bad``)."""
        qas = self.qas
        return {
            "retransmits": sum(qa.stats.retransmits for qa in qas),
            "trims": sum(qa.stats.trims for qa in qas),
            "nacks": sum(qa.stats.rx_nacks for qa in qas),
            "timeouts": sum(qa.stats.timeouts for qa in qas),
            "ecn_echoes": sum(qa.stats.ecn_echoes for qa in qas),
        }


#: WR ids of a flow on a shared connection: its sequence number there, shifted.
_SEQ_SHIFT = 32


class _Poster:
    """Posts the WRITEs of the flows on one set of QPs as their send queues have room.

    A flow's messages go round-robin over its QPs (message ``i`` on stripe
    ``i % n``); they are posted in flow start order and message order, so each
    stripe's MSN order is what :meth:`Experiment._start` computed, and a flow of
    any size runs within the QPs' ``max_send_wr`` (a flow is not posted whole up
    front).  What is posted is the same as posting everything at once whenever it
    fits: small flows see no difference.
    """

    __slots__ = ("next_msg", "queue")

    def __init__(self) -> None:
        #: flows with messages still to post, in start order.
        self.queue: deque[_MrcFlow] = deque()
        #: the next message index of the flow at the head of the queue.
        self.next_msg = 0

    def add(self, flow: _MrcFlow) -> None:
        """Queue ``flow``'s messages behind those of the flows before it."""
        if not self.queue:
            self.next_msg = 0
        self.queue.append(flow)

    def fill(self) -> None:
        """Post queued messages in order until the next one's send queue is full."""
        queue = self.queue
        while queue:
            flow = queue[0]
            spec = flow.spec
            nmsgs = flow.nmsgs
            nq = len(flow.qas)
            i = self.next_msg
            mr_a, mr_b = flow.mr_src, flow.mr_dst
            assert mr_a is not None and mr_b is not None  # registered before it is queued
            wr_base = flow.wr_base
            while i < nmsgs:
                qa = flow.qas[i % nq]
                if qa.send_queue_room() <= 0:
                    self.next_msg = i
                    return
                off = i * spec.message
                # the last message on each QP carries the immediate
                last = i >= nmsgs - nq
                qa.post_send(
                    SendWR(
                        wr_base | i,
                        WROpcode.RDMA_WRITE_WITH_IMM if last else WROpcode.RDMA_WRITE,
                        [SGE(mr_a.addr + off, min(spec.message, spec.size - off), mr_a.lkey)],
                        mr_b.addr + off,
                        mr_b.rkey,
                        imm_data=i if last else None,
                    )
                )
                i += 1
            queue.popleft()
            self.next_msg = 0


class _MrcFlow(_Flow):
    """An MRC flow: its QPs at each end (one per ``qps``) and the two memory regions.

    A flow with a ``conn`` key shares its QPs with the other flows of that
    connection (``conn``); ``rx_lo``/``rx_hi``/``rx_cum`` locate its messages
    on each stripe, ``inbox`` holds its completions drained from the shared CQ.
    """

    __slots__ = (
        "conn",
        "counts",
        "ev_window",
        "inbox",
        "mr_dst",
        "mr_src",
        "poster",
        "qas",
        "qbs",
        "rx_cum",
        "rx_hi",
        "rx_lo",
        "wr_base",
    )

    def __init__(self, spec: FlowSpec) -> None:
        super().__init__(spec)
        self.qas: list[QueuePair] = []
        self.qbs: list[QueuePair] = []
        self.mr_src: MemoryRegion | None = None
        self.mr_dst: MemoryRegion | None = None
        self.conn: _Conn | None = None
        #: what posts its WRITEs (its connection's, or its own), and its WR ids' high bits.
        self.poster: _Poster | None = None
        self.wr_base = 0
        self.inbox: list[str | None] = []
        self.rx_lo: list[int] = []
        self.rx_hi: list[int] = []
        #: per stripe, the bytes of the flow's first k messages there, k = 0, 1, ...
        self.rx_cum: list[list[int]] = []
        #: the connection's counters this flow took when it completed, and the
        #: (exclusive, inclusive) time window of the EV events it took.
        self.counts: dict[str, int] | None = None
        self.ev_window: tuple[int | None, int | None] = (None, None)

    @property
    def qa(self) -> QueuePair | None:
        """The (first) sending QP."""
        return self.qas[0] if self.qas else None

    @property
    def qb(self) -> QueuePair | None:
        """The (first) receiving QP."""
        return self.qbs[0] if self.qbs else None


#: Experiment classes of the other transports, by name (``openmrc.sim.baseline``
#: registers "roce" and "ib"; importing :mod:`openmrc.sim` loads it).
_TRANSPORTS: dict[str, type[Experiment]] = {}


def register_transport(name: str, cls: type[Experiment]) -> None:
    """Make ``Experiment(..., transport_name=name)`` build a ``cls`` (a subclass)."""
    _TRANSPORTS[name] = cls


class Experiment:
    """A fabric of :class:`SimHost` running MRC, with flows and faults, on one simulator.

    ``transport_name`` (or ``transport.name``) ``"roce"`` or ``"ib"`` builds a
    :class:`openmrc.sim.baseline.BaselineExperiment` instead (same interface).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Experiment:
        if cls is Experiment:
            name = kwargs.get("transport_name")
            if name is None:
                transport = kwargs.get("transport", args[2] if len(args) > 2 else None)
                name = getattr(transport, "name", "mrc")
            if name != "mrc":
                other = _TRANSPORTS.get(name) if isinstance(name, str) else None
                if other is None:
                    known = ", ".join(["mrc", *sorted(_TRANSPORTS)])
                    raise ValueError(f"transport name: must be one of {known}, got {name!r}")
                return super().__new__(other)
        return super().__new__(cls)

    def __init__(
        self,
        spec: ClosSpec,
        fabric_config: FabricConfig | None = None,
        transport: TransportConfig | None = None,
        seed: int = 1,
        payloads: bool = False,
        sample_interval_ps: int = 10_000_000,
        queue_sample_interval_ps: int | None = None,
        transport_name: str | None = None,
    ) -> None:
        if transport_name not in (None, "mrc"):
            raise ValueError(
                f"transport_name: must be 'mrc', 'roce' or 'ib', got {transport_name!r}"
            )
        spec.validate()
        self.spec = spec
        self.topology = Topology(spec)
        self.transport = transport or TransportConfig()
        self.base_rtt_ps = base_rtt_ps(
            spec,
            self.transport.mtu,
            fabric_config.path_latency_ps() if fabric_config is not None else 0,
        )
        self.sim = Simulator(seed)
        with paused_gc():  # the fabric and hosts are long-lived: see paused_gc
            self.fabric = self._build_fabric(fabric_config)
            self.faults = FaultInjector(self.fabric)
            master = random.Random(seed ^ 0x5EED)
            self.hosts = self._build_hosts(master)
        for host in self.hosts:
            host.faults = self.faults  # per-EV loss is applied where packets leave
        self.payloads = payloads
        self._payload_rng = random.Random(master.getrandbits(64))
        self.flows: list[_Flow] = []
        self._controllers: dict[int, Controller] = {}
        self.clustermapper: Clustermapper | None = None
        self._sending: dict[int, list[_Flow]] = {}
        #: flows whose send CQ got a completion since their host's last activity,
        #: by sending host (filled by the CQs' ``on_push``; MRC only: a host's
        #: activity then looks at these, not at every flow it sends).
        self._cq_news: dict[int, dict[_Flow, None]] | None = None
        self._order = itertools.count()
        self._open = 0
        self._captures: list[Capture] = []
        #: flows whose arrival at their receiver something waits for, by receiving host.
        self._rx_watch: dict[int, list[_Flow]] = {}
        self._collectives: list[tuple[Collective, int, int, int] | FoldedCollective] = []
        self._attrs: dict[str, QPAttr] = {}
        #: MRC's long-lived connections, by (src, dst, conn key, settings...).
        self._conns: dict[tuple[Any, ...], _Conn] = {}
        if not isinstance(sample_interval_ps, int) or sample_interval_ps <= 0:
            raise ValueError(
                f"sample_interval_ps: must be a positive int, got {sample_interval_ps!r}"
            )
        self.sample_interval_ps = sample_interval_ps
        if queue_sample_interval_ps is not None and (
            not isinstance(queue_sample_interval_ps, int) or queue_sample_interval_ps <= 0
        ):
            raise ValueError(
                f"queue_sample_interval_ps: must be a positive int, got {queue_sample_interval_ps!r}"
            )
        #: when set, every non-empty queue's depth is recorded at this interval.
        self.queue_sample_interval_ps = queue_sample_interval_ps
        #: the part of a flow's life left out of its steady-state goodput (start-up).
        self.steady_skip = 0.1
        self._sampling = False
        self._armed = False
        self._t0 = 0
        self._ticks = 0
        self._skipped = 0
        #: the flows the sampler reads: started, and not yet holding all their bytes.
        #: Every other flow's series is a run of zeros (its received bytes cannot
        #: change), appended only when it is next read or the results are collected
        #: (:meth:`_pad`): a tick costs O(flows moving), not O(flows), which in a
        #: collective of millions of transfers is the difference that matters.
        self._live: dict[_Flow, None] = {}
        self._plane_last = [0] * spec.planes
        self._plane_series: list[list[float]] = [[] for _ in range(spec.planes)]
        self._ev_bytes: dict[tuple[int, int], int] | None = None
        self._ev_last: dict[tuple[int, int], int] = {}
        self._ev_series: dict[tuple[int, int], list[float]] = {}
        for host in self.hosts:
            host.on_activity = self._activity
            # on_data is set per host by _watch_rx and _host_hooks: only where it can matter

    # -- transport hooks (MRC here; openmrc.sim.baseline overrides them) --------------
    def _build_fabric(self, config: FabricConfig | None) -> Fabric:
        """The fabric: SRv6 uSID switches with trimming, no ECN on the last hop."""
        cfg = config or FabricConfig(base_rtt_ps=self.base_rtt_ps, ecn_lasthop=False)
        return Fabric(self.sim, self.topology, cfg)

    def _build_hosts(self, master: random.Random) -> list[Any]:
        """One MRC NIC per host, each with its own random generator."""
        hosts = [
            SimHost(self.sim, self.fabric, h, random.Random(master.getrandbits(64)))
            for h in range(self.spec.hosts)
        ]
        self.attr = self.transport.attr(self.spec, self.base_rtt_ps)
        return hosts

    def _new_flow(self, spec: FlowSpec) -> _Flow:
        return _MrcFlow(spec)

    def _drain_completions(self, flow: _Flow) -> list[str | None]:
        """Completions that arrived for ``flow``: None for success, else the status."""
        conn = flow.conn  # type: ignore[attr-defined]
        if conn is not None:
            # a shared CQ: route every completion to its flow by the WR id's high bits
            for qa in conn.qas:
                cq = qa.send_cq
                if len(cq):
                    for wc in cq.poll(1 << 20):
                        owner = conn.flows.get(wc.wr_id >> _SEQ_SHIFT)
                        if owner is not None:  # (a folded transfer has had all of its)
                            owner.inbox.append(
                                None if wc.status is WCStatus.SUCCESS else wc.status.value
                            )
            out = flow.inbox  # type: ignore[attr-defined]
            flow.inbox = []  # type: ignore[attr-defined]
            return out  # type: ignore[no-any-return]
        out = []
        for qa in flow.qas:  # type: ignore[attr-defined]
            cq = qa.send_cq
            if len(cq):
                out.extend(
                    None if wc.status is WCStatus.SUCCESS else wc.status.value
                    for wc in cq.poll(1 << 20)
                )
        return out

    def _rx_complete(self, flow: _Flow) -> bool:
        """Whether every message of ``flow`` has been placed at its receiver."""
        conn = flow.conn  # type: ignore[attr-defined]
        if conn is not None:
            # messages complete in MSN order on each stripe: the flow's last one there
            done = all(
                qb.stats.rx_messages >= hi
                for qb, hi in zip(conn.qbs, flow.rx_hi, strict=True)  # type: ignore[attr-defined]
            )
            if done:
                for qb in conn.qbs:  # the receives' completions: nothing waits for them
                    if len(qb.recv_cq):
                        qb.recv_cq.poll(1 << 20)
            return done
        return sum(qb.stats.rx_messages for qb in flow.qbs) >= flow.nmsgs  # type: ignore[attr-defined]

    def _received_bytes(self, flow: _Flow) -> int | None:
        """Payload bytes the receiving end has taken (None before the flow starts)."""
        qbs = flow.qbs  # type: ignore[attr-defined]
        if not qbs or any(qb.responder is None for qb in qbs):
            return None
        if flow.conn is not None:  # type: ignore[attr-defined]
            return self._conn_received(flow)  # type: ignore[arg-type]
        return sum(qb.responder.rcvd_bytes for qb in qbs)

    @staticmethod
    def _conn_received(flow: _MrcFlow) -> int:
        """Bytes placed of a shared-connection flow's own messages (exact)."""
        total = 0
        for qb, lo, hi, cum in zip(flow.qbs, flow.rx_lo, flow.rx_hi, flow.rx_cum, strict=True):
            done = min(max(qb.stats.rx_messages - lo, 0), hi - lo)
            total += cum[done]
            if lo + done < hi:
                first = lo + done
                resp = qb.responder
                assert resp is not None
                total += sum(n for msn, n in resp.msg_bytes.items() if first <= msn < hi)
        return total

    def _delivered(self, flow: _Flow) -> bytes | bytearray | None:
        """The destination buffer, when payloads are real."""
        mr = flow.mr_dst  # type: ignore[attr-defined]
        return None if mr is None or mr.buffer is None else bytes(mr.buffer)

    def _events(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """EV and QP state changes, as JSON-able rows (EV rows sorted by time)."""
        ev_events: list[dict[str, Any]] = []
        qp_events: list[dict[str, Any]] = []
        for host in self.hosts:
            for ev in host.ctx.events:
                if isinstance(ev, EVEvent):
                    ev_events.append(
                        {
                            "time_us": ev.time / 1e6,
                            "host": host.index,
                            "qpn": ev.qpn,
                            "ev": ev.ev,
                            "old": ev.old.name,
                            "new": ev.new.name,
                            "reason": ev.reason,
                        }
                    )
                elif isinstance(ev, EVRemap):  # a move, not a transition: the EV stays GOOD
                    ev_events.append(
                        {
                            "time_us": ev.time / 1e6,
                            "host": host.index,
                            "qpn": ev.qpn,
                            "ev": ev.ev,
                            "old": "GOOD",
                            "new": "GOOD",
                            "reason": ev.reason,
                        }
                    )
                elif isinstance(ev, QPEvent):
                    qp_events.append(
                        {
                            "time_us": ev.time / 1e6,
                            "host": host.index,
                            "qpn": ev.qpn,
                            "old": ev.old.value,
                            "new": ev.new.value,
                            "reason": ev.reason,
                        }
                    )
        ev_events.sort(key=lambda e: (e["time_us"], e["host"], e["qpn"], e["ev"]))
        return ev_events, qp_events

    def _counters(self, flow: _Flow, ev_events: list[dict[str, Any]]) -> dict[str, int]:
        """The per-flow counters of :class:`FlowResult`."""
        qas = flow.qas  # type: ignore[attr-defined]
        if not qas:
            return dict.fromkeys(_COUNTERS, 0)
        qpns = {qa.qpn for qa in qas}
        conn = flow.conn  # type: ignore[attr-defined]
        if conn is not None:
            return self._conn_counters(flow, conn, qpns, ev_events)  # type: ignore[arg-type]
        bad = sum(
            1
            for e in ev_events
            if e["host"] == flow.spec.src and e["qpn"] in qpns and e["new"] == "ASSUMED_BAD"
        )
        return {
            "retransmits": sum(qa.stats.retransmits for qa in qas),
            "trims": sum(qa.stats.trims for qa in qas),
            "nacks": sum(qa.stats.rx_nacks for qa in qas),
            "timeouts": sum(qa.stats.timeouts for qa in qas),
            "ecn_echoes": sum(qa.stats.ecn_echoes for qa in qas),
            "evs_assumed_bad": bad,
        }

    def _conn_counters(
        self, flow: _MrcFlow, conn: _Conn, qpns: set[int], ev_events: list[dict[str, Any]]
    ) -> dict[str, int]:
        """Counters of a flow on a shared connection (attribution rule).

        The QPs' counters cannot be split by message, so each increment goes to
        the flow on the connection that completes next after it: a flow takes,
        when it completes, what the connection counted since the previous flow
        on it completed (EV events likewise by time).  Every increment is
        counted once; the flows' sum is the connection's total.  An unfinished
        flow (a run cut short) shows what is not yet taken if it is the
        connection's first unfinished flow, else zeros.
        """
        if flow.counts is not None:
            counts = dict(flow.counts)
            lo, hi = flow.ev_window
        elif next(f for f in conn.flows.values() if f.counts is None) is flow:
            now = conn.totals()
            counts = {k: now[k] - conn.taken[k] for k in now}
            lo, hi = conn.taken_at, None
        else:
            return dict.fromkeys(_COUNTERS, 0)
        lo_us = None if lo is None else lo / 1e6
        hi_us = None if hi is None else hi / 1e6
        counts["evs_assumed_bad"] = sum(
            1
            for e in ev_events
            if e["host"] == flow.spec.src
            and e["qpn"] in qpns
            and e["new"] == "ASSUMED_BAD"
            and (lo_us is None or e["time_us"] > lo_us)
            and (hi_us is None or e["time_us"] <= hi_us)
        )
        return counts

    def _flow_done(self, flow: _Flow, now: int) -> None:
        """``flow`` completed (or failed): a shared-connection flow takes its counters."""
        conn = getattr(flow, "conn", None)
        if conn is None:
            return
        now_counts = conn.totals()
        flow.counts = {k: now_counts[k] - conn.taken[k] for k in now_counts}  # type: ignore[attr-defined]
        flow.ev_window = (conn.taken_at, now)  # type: ignore[attr-defined]
        conn.taken = now_counts
        conn.taken_at = now

    # -- set-up ---------------------------------------------------------------------
    def controller(self, host: int) -> Controller:
        """Host ``host``'s MRC controller, made on first use.

        Its EV profiles: id 0 is the experiment's (``[transport]``) profile,
        id ``i + 1`` the ``ev_profile`` of flow ``i`` when it has its own.
        """
        ctl = self._controllers.get(host)
        if ctl is None:
            ctl = Controller([self.hosts[host].ctx])
            ctl.create_ev_profile(0, self.attr.ev_profile)
            ctl.set_ev_profile_online(0)
            for i, flow in enumerate(self.flows):
                prof = flow.spec.ev_profile
                if prof is not None and not ctl.has_ev_profile(prof):
                    ctl.create_ev_profile(i + 1, prof)
                    ctl.set_ev_profile_online(i + 1)
            self._controllers[host] = ctl
        return ctl

    def enable_clustermapper(self, config: ClustermapperConfig | None = None) -> Clustermapper:
        """Self-probe fault localisation on every host (reported in ``Result.localised``)."""
        self.clustermapper = Clustermapper(self, config)
        return self.clustermapper

    def _attr_for(self, spec: FlowSpec) -> QPAttr:
        """The QPAttr of a flow: the experiment's, or with the flow's own settings."""
        if not spec.settings:
            return self.attr
        key = json.dumps(spec.settings, sort_keys=True, default=str)
        attr = self._attrs.get(key)
        if attr is None:
            attr = replace(self.transport, **spec.settings).attr(self.spec, self.base_rtt_ps)
            self._attrs[key] = attr
        return attr

    def _qps_for(self, spec: FlowSpec) -> int:
        """How many QPs the flow's connection uses."""
        if spec.qps is not None:
            return spec.qps
        if spec.settings and spec.settings.get("qps") is not None:
            return int(spec.settings["qps"])
        return self.transport.qps or 1

    # -- set-up ---------------------------------------------------------------------
    def add_flows(self, specs: list[FlowSpec], watch: bool = False) -> list[int]:
        """Add flows (validated); return their indices in :attr:`flows`.

        ``watch``: record when each flow's data has all arrived (``rx_finish_ps``),
        as for collectives (a training job reads its transfers' arrival times).

        A flow without dependencies starts at its ``start_ps``.  One with
        ``deps`` / ``send_deps`` (indices into ``specs``) starts ``gap_ps``
        after they are met (all of them, or the first ``deps_needed``), and
        not before ``start_ps``.  If a dependency fails, so do its dependents
        (status ``dependency_failed``).
        """
        n = len(specs)
        for i, spec in enumerate(specs):
            spec.validate(self.spec.hosts)
            check_flow_settings(spec.settings, f"flow {i}.settings")
            if spec.settings:
                try:
                    self._attr_for(spec)  # raises ValueError on a bad value
                except TypeError as exc:
                    raise ValueError(f"flow {i}.settings: {exc}") from None
        check_dependencies(specs)
        base = len(self.flows)
        new = [self._new_flow(spec) for spec in specs]
        if watch:
            for flow in new:
                flow.watch_rx = True
        for flow in new:
            spec = flow.spec
            ndeps = len(spec.deps) + len(spec.send_deps)
            self.flows.append(flow)
            self._open += 1
            if not ndeps:
                self.sim.schedule(spec.start_ps, self._launch, flow)
                continue
            flow.deps_left = spec.deps_needed or ndeps
            flow.deps_spare = ndeps - flow.deps_left
            for d in spec.deps:
                new[d].dependents.append(flow)
                new[d].watch_rx = True
            if spec.dep_gaps:
                flow.dep_gaps = {new[d]: g for d, g in zip(spec.deps, spec.dep_gaps, strict=True)}
            for d in spec.send_deps:
                new[d].send_dependents.append(flow)
        return list(range(base, base + n))

    def add_flow(self, spec: FlowSpec) -> int:
        """Add one flow (no dependencies); return its index."""
        return self.add_flows([spec])[0]

    def add_collective(
        self,
        collective: Collective,
        placement: list[int] | None = None,
        message: int = 1 << 20,
        start_ps: int = 0,
        name: str = "",
        qps: int | None = None,
        settings: dict[str, Any] | None = None,
        fold: bool | None = None,
    ) -> int:
        """Run ``collective`` with rank ``r`` on host ``placement[r]`` (default host ``r``).

        Every transfer is a flow (``qps`` and ``settings`` are its connection's
        transport settings); a transfer starts once the data it needs arrived.
        The result's ``collectives`` holds its completion time, algbw and busbw.
        Returns the collective's index there.

        ``fold``: keep per-step records instead of a flow result per transfer
        (:mod:`openmrc.sim.folding`); None folds collectives of more than
        ``FOLD_TRANSFERS`` transfers.
        """
        if fold is None:
            fold = len(collective.transfers) > FOLD_TRANSFERS
        if fold:
            return self._add_folded(collective, placement, message, start_ps, name, qps, settings)
        flows = collective.flows(placement, message, start_ps, name, qps, settings)
        idx = self.add_flows(flows)
        for i in idx:
            self.flows[i].watch_rx = True
        self._collectives.append((collective, start_ps, idx[0], idx[-1] + 1))
        return len(self._collectives) - 1

    # -- folded collectives (openmrc.sim.folding) ---------------------------------------
    def _add_folded(
        self,
        collective: Collective,
        placement: list[int] | None,
        message: int,
        start_ps: int,
        name: str,
        qps: int | None,
        settings: dict[str, Any] | None,
    ) -> int:
        """:meth:`add_collective` folded: flows made as transfers may start (validated
        here, once: every transfer's flow differs only in hosts, size and timing)."""
        hosts = collective.check_placement(placement)
        for h in hosts:
            if not isinstance(h, int) or not 0 <= h < self.spec.hosts:
                raise ValueError(
                    f"placement: must hold host indices in 0..{self.spec.hosts - 1}, got {h!r}"
                )
        merged = {**collective.settings, **(settings or {})}
        folder = FoldedCollective(
            collective, hosts, message, start_ps, name or collective.kind, qps, merged
        )
        if folder.size:
            first = collective.flow(0, hosts, message, start_ps, folder.prefix, qps, merged)
            first.validate(self.spec.hosts)
            check_flow_settings(first.settings, "collective.settings")
            if first.settings:
                try:
                    self._attr_for(first)
                except TypeError as exc:
                    raise ValueError(f"collective.settings: {exc}") from None
        self._open += folder.size
        for i in folder.initial():
            flow = self._folded_flow(folder, i)
            self.sim.schedule(flow.spec.start_ps, self._launch, flow)
        self._collectives.append(folder)
        return len(self._collectives) - 1

    def _folded_flow(self, folder: FoldedCollective, i: int) -> _Flow:
        """Transfer ``i`` of ``folder`` as a flow (made when it may start)."""
        flow = self._new_flow(folder.spec(i))
        flow.watch_rx = True
        flow.fold = folder
        flow.fold_i = i
        return flow

    def _fold_arrived(self, flow: _Flow, now: int) -> None:
        """A folded transfer's data arrived: start what waited for it; fold it if done."""
        folder = flow.fold
        assert folder is not None
        for j, at in folder.arrived(flow.fold_i, now):
            dep = self._folded_flow(folder, j)
            dep.status = "waiting"
            self.sim.schedule(at, self._launch, dep)
        if flow.done_at is not None:
            self._fold(flow)

    def _fold_done(self, flow: _Flow) -> None:
        """A folded transfer's sender is done (or it failed): fold it once its data arrived."""
        folder = flow.fold
        assert folder is not None
        if flow.status != "ok":
            self._open -= folder.failed(flow.fold_i)
            self._fold(flow)
        elif flow.rx_done is not None:
            self._fold(flow)

    def _fold(self, flow: _Flow) -> None:
        """Add a folded transfer to its step's record and let go of its flow."""
        folder = flow.fold
        assert folder is not None
        ok = flow.status == "ok"
        received = flow.spec.size if ok else self._received_bytes(flow) or 0
        folder.fold(
            flow.fold_i,
            flow.status,
            flow.started_at,
            flow.rx_done,
            flow.done_at,
            received,
            self._counters(flow, []),
        )
        self._forget(flow)

    def _forget(self, flow: _Flow) -> None:
        """Drop what the transport keeps of a folded flow: its place on its connection and,
        when it finished, its memory regions (a late duplicate of its data is recognised
        as a duplicate by its PSN before its rkey is looked at)."""
        conn = getattr(flow, "conn", None)
        if conn is not None:
            conn.flows.pop(flow.wr_base >> _SEQ_SHIFT, None)  # type: ignore[attr-defined]
        if flow.status == "ok":
            for mr in (flow.mr_src, flow.mr_dst):  # type: ignore[attr-defined]
                if mr is not None:
                    mr.pd.dereg_mr(mr)
            flow.mr_src = flow.mr_dst = None  # type: ignore[attr-defined]

    def flow_counts(self) -> tuple[int, int]:
        """(flows done, flows), folded collectives' transfers included (for progress)."""
        flows = list(self.flows)
        done = sum(1 for f in flows if f.done_at is not None)
        total = len(flows)
        for c in list(self._collectives):
            if isinstance(c, FoldedCollective):
                done += c.over
                total += c.size
        return done, total

    def folded_open(self) -> bool:
        """Whether a folded collective still has a transfer that is not over."""
        return any(isinstance(c, FoldedCollective) and c.open for c in self._collectives)

    def _launch(self, flow: _Flow) -> None:
        flow.started_at = self.sim.now
        if flow.fold is None:  # (a folded transfer has no goodput series)
            self._live[flow] = None  # its received bytes may move from now on
        if not self._armed and self._sampling:
            self._wake(self.sim.now)
        # each experiment class is handed back the flow kind its _new_flow made
        self._start(flow)  # type: ignore[arg-type]

    def _open_qps(
        self, spec: FlowSpec, now: int, note: Callable[[], None]
    ) -> tuple[Any, Any, list[Any], list[Any]]:
        """New PDs at both ends and ``qps`` connected QP pairs between them; ``note`` is
        called when a send completion is pushed (so the host's activity polls only the
        flows that have news)."""
        attr = self._attr_for(spec)
        a, b = self.hosts[spec.src].ctx, self.hosts[spec.dst].ctx
        pa, pb = a.alloc_pd(), b.alloc_pd()
        if spec.ev_profile is not None:  # a per-flow EV profile (scenario [[flows]] ev_profile)
            attr = replace(attr, ev_profile=spec.ev_profile)
        qas, qbs = [], []
        for _ in range(self._qps_for(spec)):
            cq = a.create_cq(1 << 20)
            cq.on_push = note
            qa = pa.create_qp(cq)
            qb = pb.create_qp(b.create_cq(1 << 20))
            qa.connect(qb.qpn, attr, peer=spec.dst, now=now)
            qb.connect(qa.qpn, attr, peer=spec.src, now=now)
            qas.append(qa)
            qbs.append(qb)
        return pa, pb, qas, qbs

    def _news_for(self, host: int) -> dict[_Flow, None]:
        """The flows of sending host ``host`` with send completions not yet polled."""
        if self._cq_news is None:
            self._cq_news = {}
        return self._cq_news.setdefault(host, {})

    def _conn_for(self, spec: FlowSpec, now: int) -> _Conn:
        """The long-lived connection of a flow with a ``conn`` key, opened on first use.

        Flows with the same (src, dst, conn) share it, as NCCL keeps one set of
        QPs per peer for the whole job (so EV state and congestion state carry
        over from one transfer to the next).  Flows of one key with different
        transport settings (``settings``, ``ev_profile``, ``qps``) get separate
        connections.
        """
        key = (
            spec.src,
            spec.dst,
            spec.conn,
            json.dumps(spec.settings, sort_keys=True, default=str) if spec.settings else "",
            repr(spec.ev_profile),
            self._qps_for(spec),
        )
        conn = self._conns.get(key)
        if conn is None:
            conn = _Conn()
            pa, pb, qas, qbs = self._open_qps(spec, now, self._noter(spec.src, conn.active))
            conn.pa, conn.pb = pa, pb
            self._conns[key] = conn
            conn.qas, conn.qbs = qas, qbs
            conn.posted = [0] * len(qas)
        return conn

    def _start(self, flow: _MrcFlow) -> None:  # type: ignore[override]
        spec = flow.spec
        now = self.sim.now
        conn = self._conn_for(spec, now) if spec.conn else None
        if conn is None:
            pa, pb, flow.qas, flow.qbs = self._open_qps(
                spec, now, self._noter(spec.src, {flow: None})
            )
            seq = 0
        else:
            if any(q.state is QPState.ERROR for q in (*conn.qas, *conn.qbs)):
                # the connection failed under an earlier transfer: nothing can be posted
                self._fail_at_start(flow, now)
                return
            pa, pb = conn.pa, conn.pb
            flow.qas, flow.qbs = list(conn.qas), list(conn.qbs)
            flow.conn = conn
            seq = conn.started
            conn.started += 1
            conn.flows[seq] = flow
            conn.active[flow] = None
        nq = len(flow.qas)
        if self.payloads:
            data = bytearray(self._payload_rng.randbytes(spec.size))
            flow.src_data = data
            mr_a = pa.reg_mr(spec.size, buffer=data)
            mr_b = pb.reg_mr(spec.size, buffer=bytearray(spec.size))
        else:
            mr_a = pa.reg_mr(spec.size)
            mr_b = pb.reg_mr(spec.size)
        flow.mr_src, flow.mr_dst = mr_a, mr_b
        offsets = list(range(0, spec.size, spec.message))
        if conn is not None:
            # where this flow's messages sit in each stripe's MSN sequence
            flow.rx_lo = list(conn.posted)
            flow.rx_cum = [[0] for _ in range(nq)]
            for i, off in enumerate(offsets):
                cum = flow.rx_cum[i % nq]
                cum.append(cum[-1] + min(spec.message, spec.size - off))
            for q in range(nq):
                conn.posted[q] += len(flow.rx_cum[q]) - 1
            flow.rx_hi = list(conn.posted)
        flow.wr_base = seq << _SEQ_SHIFT
        flow.nmsgs = len(offsets)
        for i in range(max(0, flow.nmsgs - nq), flow.nmsgs):
            flow.qbs[i % nq].post_recv(RecvWR(flow.wr_base | i))
        poster = conn.poster if conn is not None else _Poster()
        flow.poster = poster
        poster.add(flow)
        poster.fill()
        flow.pending = len(offsets)
        flow.status = "running"
        flow.order = next(self._order)
        self._news_for(spec.src)[flow] = None  # looked at on the next activity, as every flow was
        self.hosts[spec.src].on_activity = self._activity
        self._sending.setdefault(spec.src, []).append(flow)
        if flow.watch_rx:
            self._watch_rx(flow, spec.dst)
        self.hosts[spec.src].kick(now)
        self.hosts[spec.dst].kick(now)

    def _activity(self, host: Any, now: int) -> None:
        if not self._armed and self._sampling:
            self._wake(now)
        flows = self._sending.get(host.index)
        if not flows:
            return
        todo: list[_Flow] = flows
        if self._cq_news is not None:
            news = self._cq_news.get(host.index)
            if news is None or not news:
                if self._open == 0:
                    self.sim.stop()
                else:
                    self._quiet(host)
                return
            todo = sorted(news, key=_send_order) if len(news) > 1 else list(news)
            news.clear()
        finished = False
        for flow in todo:
            if flow.done_at is not None:
                continue  # done already (a late completion of a finished flow)
            for failure in self._drain_completions(flow):
                flow.pending -= 1
                flow.finished.append(now)
                if failure is not None and flow.status == "running":
                    flow.status = failure
            poster = getattr(flow, "poster", None)
            if poster is not None and poster.queue:
                poster.fill()  # completions made room in the send queues
            if flow.pending == 0 and flow.done_at is None:
                finished = True
                flow.done_at = now
                conn = getattr(flow, "conn", None)
                if conn is not None:
                    del conn.active[flow]
                self._flow_done(flow, now)
                if flow.status == "running":
                    flow.status = "ok"
                self._open -= 1
                if flow.status != "ok":
                    self._fail_dependents(flow)
                else:
                    self._release(flow.send_dependents, now)
                if flow.fold is not None:
                    self._fold_done(flow)
        if finished or todo is flows:
            self._sending[host.index] = [f for f in flows if f.pending]
        if self._open == 0:
            self._host_hooks(everywhere=False)  # (every host's input stops the run now)
            self.sim.stop()
        else:
            self._quiet(host)

    def _fail_at_start(self, flow: _Flow, now: int) -> None:
        """``flow`` cannot start (its connection's QPs are in ERROR): it fails now."""
        flow.status = WCStatus.WR_FLUSH_ERR.value
        flow.done_at = now
        self._open -= 1
        self._fail_dependents(flow)
        if flow.fold is not None:
            self._fold_done(flow)
        if self._open == 0:
            self._host_hooks(everywhere=False)
            self.sim.stop()

    def _noter(self, src: int, flows: dict[_Flow, None]) -> Callable[[], None]:
        """What a send CQ calls on each completion: ``flows`` (a flow, or a
        connection's live set of active flows) have news, so ``src`` looks."""
        news = self._news_for(src)
        host = self.hosts[src]
        hook = self._activity

        def note() -> None:
            news.update(flows)
            host.on_activity = hook

        return note

    def _quiet(self, host: Any) -> None:
        """``host`` has no send completion to look at: its input stops calling
        :meth:`_activity` until a CQ's note turns it on (while the sampler is awake)."""
        news = self._cq_news
        if news is not None and self._armed and not news.get(host.index):
            host.on_activity = None

    def _host_hooks(self, everywhere: bool) -> None:
        """Which hosts call the experiment back, a call each time, so only where it can matter.

        :meth:`_data_arrived` after a data packet: on every host while the
        sampler sleeps (any arrival wakes it), otherwise on the hosts that
        receive a watched flow.  :meth:`_activity` after any other input: on
        every host while the sampler sleeps, once no flow is open (any input
        stops the run) and when completions are not reported by the CQs (the
        baselines poll); otherwise on the hosts whose send CQs have news.
        """
        data = self._data_arrived
        watched = self._rx_watch
        activity = self._activity
        news = self._cq_news
        always = everywhere or news is None or self._open == 0
        for host in self.hosts:
            host.on_data = data if everywhere or host.index in watched else None
            has_news = news is not None and bool(news.get(host.index))
            host.on_activity = activity if always or has_news else None

    def _watch_rx(self, flow: _Flow, dst: int) -> None:
        """Check, at each data arrival at ``dst``, whether ``flow`` has fully arrived."""
        self._rx_watch.setdefault(dst, []).append(flow)
        self.hosts[dst].on_data = self._data_arrived

    def _data_arrived(self, host: Any, now: int) -> None:
        """A data packet reached ``host``: did a watched flow's last byte arrive?"""
        if not self._armed and self._sampling:
            self._wake(now)
        flows = self._rx_watch.get(host.index)
        if not flows:
            return
        done = [f for f in flows if self._rx_complete(f)]
        if not done:
            return
        self._rx_watch[host.index] = [f for f in flows if f.rx_done is None and f not in done]
        for flow in done:
            flow.rx_done = now
            self._release(flow.dependents, now, flow)
            if flow.fold is not None:
                self._fold_arrived(flow, now)

    def _release(self, dependents: list[_Flow], now: int, source: _Flow | None = None) -> None:
        """One dependency (``source``) of each of ``dependents`` is met: start those now free."""
        for dep in dependents:
            if dep.status != "not started" or dep.deps_left <= 0:
                continue
            ready = now
            if dep.dep_gaps is not None and source is not None:
                ready += dep.dep_gaps.get(source, 0)
            if ready > dep.ready_at:
                dep.ready_at = ready
            dep.deps_left -= 1
            if dep.deps_left == 0:
                dep.status = "waiting"
                at = max(dep.ready_at + dep.spec.gap_ps, dep.spec.start_ps)
                self.sim.schedule(at, self._launch, dep)

    def _fail_dependents(self, flow: _Flow) -> None:
        """``flow`` failed: whatever waits for it will never start."""
        stack = [*flow.dependents, *flow.send_dependents]
        while stack:
            dep = stack.pop()
            if dep.status != "not started":
                continue
            if dep.deps_spare > 0:
                dep.deps_spare -= 1  # enough other dependencies may still be met
                continue
            dep.status = "dependency_failed"
            dep.deps_left = -1
            self._open -= 1
            stack.extend(dep.dependents)
            stack.extend(dep.send_dependents)

    def _sample(self) -> None:
        """One sampling tick: every flow's, plane's (and EV's) Gb/s over the last interval.

        Every flow gets an entry at every tick.  A tick that saw nothing move
        puts the sampler to sleep; the next packet, timer or flow start wakes it
        (:meth:`_wake`), which records the ticks slept through as zeros without
        running them, so idle time costs no events.
        """
        self._armed = False
        interval = self.sample_interval_ps
        scale = 8 / interval * 1000  # bytes per interval -> Gb/s
        moved = 0
        ticks = self._ticks
        live = self._live
        full: list[_Flow] = []
        for flow in live:
            self._pad(flow, ticks)
            got = self._received_bytes(flow) or 0
            delta = got - flow.last_bytes
            moved |= delta
            flow.series.append(round(delta * scale, 3))
            flow.cum.append(got)
            flow.last_bytes = got
            if got == flow.spec.size:
                full.append(flow)  # all its bytes are in: nothing more can move
        for flow in full:
            del live[flow]
        for plane in range(self.spec.planes):
            tx = sum(ports[plane].tx_bytes for ports in self.fabric.host_ports)
            delta = tx - self._plane_last[plane]
            moved |= delta
            self._plane_series[plane].append(round(delta * scale, 3))
            self._plane_last[plane] = tx
        if self._ev_bytes is not None:
            for key, total in self._ev_bytes.items():
                series = self._ev_series.get(key)
                if series is None:
                    series = self._ev_series[key] = [0.0] * ticks
                series.append(round((total - self._ev_last.get(key, 0)) * scale, 3))
                self._ev_last[key] = total
        self._ticks += 1
        if self._open and moved:
            self._armed = True
            self.sim.after(interval, self._sample)
        else:  # asleep: the next arrival or input anywhere wakes it
            self._host_hooks(everywhere=True)

    @staticmethod
    def _pad(flow: _Flow, ticks: int) -> None:
        """Bring ``flow``'s series up to ``ticks`` entries: the ticks it was not read
        at saw nothing move (it had not started, was full, or the sampler slept)."""
        n = ticks - len(flow.series)
        if n > 0:
            flow.series.extend([0.0] * n)
            flow.cum.extend([flow.last_bytes] * n)

    def _wake(self, now: int) -> None:
        """Something may move again: record the idle ticks as zeros and re-arm the sampler."""
        if not self._open:
            return
        interval = self.sample_interval_ps
        due = (now - self._t0) // interval  # ticks at or before now
        skip = due - self._ticks
        if skip > 0:
            zeros = [0.0] * skip  # (flows' series: padded when next read, _pad)
            for series in self._plane_series:
                series.extend(zeros)
            for series in self._ev_series.values():
                series.extend(zeros)
            self._ticks += skip
            self._skipped += skip
        self._armed = True
        self._host_hooks(everywhere=False)
        self.sim.schedule(self._t0 + (due + 1) * interval, self._sample)

    def track_ev_activity(self) -> None:
        """Record data bytes sent per (host, EV) per sample interval (MRC; call before run)."""
        if self._ev_bytes is not None:
            return
        counts: dict[tuple[int, int], int] = {}
        self._ev_bytes = counts

        def tap(host: int, _peer: int, pkt: Any, sent: bool, _now: int) -> None:
            if sent and isinstance(pkt, DataPacket):
                key = (host, pkt.ev)
                counts[key] = counts.get(key, 0) + pkt.length

        for host in self.hosts:
            host.taps.append(tap)

    def _ideal_rate_bps(self, flow: _Flow) -> float:
        """Payload rate of a flow's connection alone on an idle fabric."""
        mtu = self.transport.mtu
        wire = mtu + DATA_HEADER_BYTES + self.fabric.config.framing_bytes
        return self.spec.planes * self.spec.host_gbps * 1e9 * mtu / wire

    def _ideal_fct_ps(self, flow: _Flow) -> int:
        """Unloaded FCT: the flow at its connection's payload rate, plus its path's base RTT."""
        spec = flow.spec
        cfg = self.fabric.config
        rtt = self.base_rtt_ps
        hpt = self.spec.hosts_per_t0
        if spec.src // hpt == spec.dst // hpt:
            # two links and two switches less each way, and no fabric-rate hops
            mtu = self.transport.mtu
            bits = (mtu + DATA_HEADER_BYTES + SACK_BYTES + 2 * cfg.framing_bytes) * 8
            rtt -= 4 * self.spec.link_delay_ps + 4 * cfg.switch_latency_ps
            rtt -= int(2 * bits * 1000 / self.spec.fabric_gbps)
        return int(spec.size * 8 / self._ideal_rate_bps(flow) * 1e12) + rtt

    def _steady(self, flow: _Flow, end: int) -> tuple[float, tuple[float, float]] | None:
        """Goodput over the sample ticks from ``steady_skip`` of the flow's life to its end."""
        start = flow.started_at
        if start is None or end <= start:
            return None
        interval = self.sample_interval_ps
        t0 = self._t0
        lo = start + int(self.steady_skip * (end - start))
        i0 = max(1, -(-(lo - t0) // interval))  # first tick at or after lo
        i1 = min(len(flow.cum), (end - t0) // interval)  # last tick at or before end
        if i1 - i0 < 1:
            return None
        nbytes = flow.cum[i1 - 1] - flow.cum[i0 - 1]
        gbps = nbytes * 8 / ((i1 - i0) * interval) * 1000
        return round(gbps, 3), ((t0 + i0 * interval) / 1e6, (t0 + i1 * interval) / 1e6)

    def capture(self, path: str | Path, hosts: list[int] | None = None) -> Capture:
        """Write a pcap of what ``hosts`` (default: all) send and receive during :meth:`run`."""
        cap = Capture(self.topology, self.hosts, path, hosts)
        self._captures.append(cap)
        return cap

    # -- running --------------------------------------------------------------------
    def run(self, until_ps: int | None = None) -> Result:
        """Run until every flow finished (or ``until_ps``), and collect the results."""
        self._t0 = self.sim.now
        self._sampling = True
        self._armed = True
        self.sim.after(self.sample_interval_ps, self._sample)
        if self.queue_sample_interval_ps is not None:
            self.fabric.metrics.sample_queues(self.queue_sample_interval_ps)
        started = time.perf_counter()
        try:
            self.sim.run(until_ps)
        finally:
            self._sampling = False
            for cap in self._captures:
                cap.close()
        wall = time.perf_counter() - started
        result = self._collect(wall)
        result.warnings.extend(self._warnings(until_ps))
        return result

    def _warnings(self, until_ps: int | None) -> list[str]:
        """Faults still waiting in the event heap; flows cut off by ``until_ps``."""
        out = []
        now = self.sim.now
        pending: dict[str, list[int]] = {}
        for t, _seq, fn, _args in self.sim.pending_callbacks():
            if getattr(fn, "__self__", None) is self.faults:
                pending.setdefault(fn.__name__.lstrip("_"), []).append(t)
        for name, times in sorted(pending.items()):
            out.append(
                f"{len(times)} fault event(s) ({name}) scheduled from {min(times) / 1e6:g} us "
                f"never fired: the run ended at {now / 1e6:g} us"
            )
        if until_ps is not None and self._open > 0:
            out.append(
                f"run cut short by its time cap (until_us = {until_ps / 1e6:g}): "
                f"{self._open} of {self.flow_counts()[1]} flows unfinished"
            )
        return out

    def collect(self, wall_seconds: float = 0.0) -> Result:
        """What was measured so far, e.g. after :meth:`run` was interrupted (Ctrl-C).

        Unfinished flows have no finish time and status ``running`` or
        ``not started``; the front end marks such a result partial.
        """
        return self._collect(wall_seconds)

    def _summary(self, c: tuple[Collective, int, int, int] | FoldedCollective) -> dict[str, Any]:
        """A collective's entry of ``Result.collectives``."""
        if isinstance(c, FoldedCollective):
            return c.summary()
        coll, start, a, b = c
        return coll.summary(start, [self.flows[i].rx_done for i in range(a, b)])

    def _collect(self, wall: float) -> Result:
        ev_events, qp_events = self._events()
        flows = []
        verified: bool | None = None
        for flow in self.flows:
            self._pad(flow, self._ticks)  # before _steady reads its cum, and the series
            spec = flow.spec
            ok = flow.status == "ok"
            if self.payloads and flow.src_data is not None:
                got = self._delivered(flow)
                if got is not None:
                    exact = got == flow.src_data
                    verified = exact if verified is None else verified and exact
                    ok = ok and exact
            counters = self._counters(flow, ev_events)
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
                    retransmits=counters["retransmits"],
                    trims=counters["trims"],
                    nacks=counters["nacks"],
                    timeouts=counters["timeouts"],
                    ecn_echoes=counters["ecn_echoes"],
                    evs_assumed_bad=counters["evs_assumed_bad"],
                    rx_finish_ps=flow.rx_done,
                    started_ps=flow.started_at,
                    bytes_received=self._received_bytes(flow) or 0,
                    ideal_fct_ps=self._ideal_fct_ps(flow),
                    _end_ps=self.sim.now,
                )
            )
            steady = self._steady(flow, flow.done_at if flow.done_at is not None else self.sim.now)
            if steady is not None:
                flows[-1].steady_goodput_gbps, flows[-1].steady_window_us = steady
        series = {f.spec.name or f"{f.spec.src}->{f.spec.dst}": f.series for f in self.flows}
        return Result(
            flows=flows,
            sim_end_ps=self.sim.now,
            wall_seconds=round(wall, 3),
            events=self.sim.events_run,
            ev_events=ev_events,
            qp_events=qp_events,
            goodput_series=series,
            sample_interval_ps=self.sample_interval_ps,
            fabric=self.fabric.metrics.snapshot(
                include_samples=self.queue_sample_interval_ps is not None
            ),
            verified=verified,
            localised=self.clustermapper.report() if self.clustermapper is not None else [],
            collectives=[self._summary(c) for c in self._collectives],
            fct_summary=fct_summary(flows),
            plane_series={f"plane{p}": s for p, s in enumerate(self._plane_series)},
            ev_series={f"h{h}:ev{ev:#x}": s for (h, ev), s in sorted(self._ev_series.items())},
            sampling={"ticks": self._ticks - self._skipped, "skipped": self._skipped},
        )
