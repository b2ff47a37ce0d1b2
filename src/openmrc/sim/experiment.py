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

import itertools
import json
import random
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..baselines.fabric import baseline_configs
from ..topology import ClosSpec, Topology
from ..transport import (
    CCProfile,
    EVEvent,
    EVProfile,
    EVRemap,
    QPAttr,
    QPEvent,
    QPState,
    RecvWR,
    WCStatus,
)
from ..transport.controller import Controller
from ..wire.packets import DATA_HEADER_BYTES, SACK_BYTES
from ..workloads import FlowSpec, check_dependencies
from ..workloads.collectives import Collective
from . import entities
from .capture import Capture
from .config import ETHERNET_FRAMING_BYTES, FabricConfig
from .engine import Simulator, paused_gc, setup_gc
from .fabric import Fabric, FabricPart
from .faults import FaultInjector
from .flows import COUNTERS, SEQ_SHIFT, Conn, Flow, MrcFlow, Poster, send_order
from .folding import FOLD_TRANSFERS, FoldedCollective
from .host import SimHost
from .metrics import fct_summary
from .result import FlowResult, Result
from .sampling import Sampler


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
    #: :mod:`openmrc.baselines.experiment`: "roce" (ECMP, PFC, DCQCN, go-back-N) or "ib"
    #: (adaptive routing, credits, go-back-N).
    name: str = "mrc"
    #: Baselines only: :class:`openmrc.baselines.roce.RoceConfig` keys (``qps``,
    #: ``timeout_exp``, ``retries``, ``dcqcn``, ``dcqcn_<DcqcnConfig field>``...).
    roce: dict[str, Any] = field(default_factory=dict)
    #: Baselines only: :class:`openmrc.baselines.fabric.BaselineFabricConfig` fields.
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


class _RxQP:
    """A receiving QP of watched flows (:meth:`Experiment._rx_candidates`): the QP, its
    ``rx_messages`` when a packet last looked (-1: never), and its watched flows in
    the order they were watched."""

    __slots__ = ("flows", "placed", "qb")

    def __init__(self, qb: Any) -> None:
        self.qb = qb
        self.placed = -1
        self.flows: list[Flow] = []

    @staticmethod
    def index(by: dict[int, _RxQP], flow: Flow) -> None:
        """Add ``flow`` to ``by`` under each receiving QP it has, once per QP."""
        for qb in dict.fromkeys(flow.qbs):  # type: ignore[attr-defined]
            rq = by.get(qb.qpn)
            if rq is None:
                rq = by[qb.qpn] = _RxQP(qb)
            rq.flows.append(flow)


class Experiment:
    """A fabric of :class:`SimHost` running MRC, with flows and faults, on one simulator.

    Another transport's experiment subclasses it and supplies the transport hooks
    (:class:`openmrc.baselines.experiment.BaselineExperiment` for ``"roce"`` and
    ``"ib"``); :func:`openmrc.sim.factory.make_experiment` builds the class that
    runs ``transport.name``.
    """

    #: the transport names (``TransportConfig.name``) this class runs.
    transport_names: tuple[str, ...] = ("mrc",)

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
        self.transport = transport or TransportConfig()
        name = self.transport.name if transport_name is None else transport_name
        if name not in self.transport_names:
            raise ValueError(
                f"transport name: {type(self).__name__} runs {', '.join(self.transport_names)},"
                f" not {name!r} (openmrc.sim.factory.make_experiment builds the experiment"
                " of any transport)"
            )
        spec.validate()
        self.spec = spec
        self.topology = Topology(spec)
        self.base_rtt_ps = base_rtt_ps(
            spec,
            self.transport.mtu,
            (fabric_config or FabricConfig()).path_latency_ps(),
        )
        self.sim = self._new_simulator(seed)
        with paused_gc():  # the fabric and hosts are long-lived: see paused_gc
            self.fabric = self._build_fabric(fabric_config)
            self.faults = FaultInjector(self.fabric)
            master = random.Random(seed ^ 0x5EED)
            self.hosts = self._build_hosts(master)
        for host in self.hosts:
            if host is not None:  # (None: a host another rank holds, _build_hosts)
                host.faults = self.faults  # per-EV loss is applied where packets leave
        self.payloads = payloads
        self._payload_rng = random.Random(master.getrandbits(64))
        self.flows: list[Flow] = []
        self._controllers: dict[int, Controller] = {}
        #: self-probe fault localisation, when attached (``openmrc.clustermapper.sim_agent.
        #: enable_clustermapper``): its ``report()`` becomes ``Result.localised``.
        self.clustermapper: Any | None = None
        self._sending: dict[int, list[Flow]] = {}
        #: flows whose send CQ got a completion since their host's last activity,
        #: by sending host (filled by the CQs' ``on_push``; MRC only: a host's
        #: activity then looks at these, not at every flow it sends).
        self._cq_news: dict[int, dict[Flow, None]] | None = None
        self._order = itertools.count()
        self._open = 0
        self._captures: list[Capture] = []
        #: flows whose arrival at their receiver something waits for, by receiving host.
        self._rx_watch: dict[int, list[Flow]] = {}
        #: per receiving host: its watched flows by receiving QPN (``_rx_candidates``),
        #: with the watched list they index and its length then
        self._rx_by_qpn: dict[int, tuple[list[Flow], int, dict[int, _RxQP]]] = {}
        self._collectives: list[tuple[Collective, int, int, int] | FoldedCollective] = []
        #: the EV rows last counted from and their ASSUMED_BAD times (``_bad_times``)
        self._bad_memo: tuple[list[dict[str, Any]], int, dict[tuple[int, int], list[float]]] | None
        self._bad_memo = None
        self._attrs: dict[str, QPAttr] = {}
        #: MRC's long-lived connections, by (src, dst, conn key, settings...).
        self._conns: dict[tuple[Any, ...], Conn] = {}
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
        #: the sampling clock and the goodput, plane and EV series (sim.sampling).
        self.sampler = Sampler(
            self.sim,
            sample_interval_ps,
            self.fabric.host_ports,
            self.spec.planes,
            self._received_bytes,
            self._open_flows,
            self._host_hooks,
        )
        for host in self.hosts:
            if host is not None:
                host.on_activity = self._activity
            # on_data is set per host by _watch_rx and _host_hooks: only where it can matter
        #: each host's entity: events are keyed by entity (sim.entities, sim.engine)
        self._host_entity = entities.register(self.sim, self.fabric, self.hosts, self.sampler)
        self.sim.place = self._place

    def _place(self, callback: Any, args: tuple[Any, ...]) -> int | None:
        """The entity of an event no registered object owns (``sim.place``): a flow's
        start runs for its source host; anything else for whoever scheduled it."""
        if getattr(callback, "__self__", None) is self and callback.__name__ == "_launch":
            return self._host_entity[args[0].spec.src]
        return None

    def _new_simulator(self, seed: int) -> Simulator:
        """The event loop the experiment runs on (a partitioned run has its own)."""
        return Simulator(seed)

    # -- transport hooks (MRC here; openmrc.baselines.experiment overrides them) --------------
    def _build_fabric(self, config: FabricConfig | None) -> Fabric:
        """The fabric: SRv6 uSID switches with trimming, no ECN on the last hop."""
        cfg = config or FabricConfig(base_rtt_ps=self.base_rtt_ps, ecn_lasthop=False)
        return Fabric(self.sim, self.topology, cfg, self._fabric_part())

    def _fabric_part(self) -> FabricPart | None:
        """The part of the fabric this process builds: all of it (a partitioned run's
        rank builds its own part, openmrc.sim.partition)."""
        return None

    def _build_hosts(self, master: random.Random) -> list[Any]:
        """One MRC NIC per host, each with its own random generator (None for a host
        the fabric does not hold here: another rank's, whose draw is made all the same)."""
        fabric = self.fabric
        hosts = []
        for h in range(self.spec.hosts):
            rng = random.Random(master.getrandbits(64))
            hosts.append(SimHost(self.sim, fabric, h, rng) if fabric.holds_host(h) else None)
        self.attr = self.transport.attr(self.spec, self.base_rtt_ps)
        return hosts

    def _new_flow(self, spec: FlowSpec) -> Flow:
        return MrcFlow(spec)

    def _drain_completions(self, flow: Flow) -> list[str | None]:
        """Completions that arrived for ``flow``: None for success, else the status."""
        conn = flow.conn  # type: ignore[attr-defined]
        if conn is not None:
            # a shared CQ: route every completion to its flow by the WR id's high bits
            for qa in conn.qas:
                cq = qa.send_cq
                if len(cq):
                    for wc in cq.poll(1 << 20):
                        owner = conn.flows.get(wc.wr_id >> SEQ_SHIFT)
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

    def _rx_complete(self, flow: Flow) -> bool:
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

    def _received_bytes(self, flow: Flow) -> int | None:
        """Payload bytes the receiving end has taken (None before the flow's buffers are
        posted: when it starts, or before a partitioned run)."""
        qbs = flow.qbs  # type: ignore[attr-defined]
        if not flow.nmsgs or not qbs or any(qb.responder is None for qb in qbs):
            return None
        if flow.conn is not None:  # type: ignore[attr-defined]
            return self._conn_received(flow)  # type: ignore[arg-type]
        return sum(qb.responder.rcvd_bytes for qb in qbs)

    @staticmethod
    def _conn_received(flow: MrcFlow) -> int:
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

    def _delivered(self, flow: Flow) -> bytes | bytearray | None:
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

    def _counters(self, flow: Flow, ev_events: list[dict[str, Any]]) -> dict[str, int]:
        """The per-flow counters of :class:`FlowResult`."""
        qas = flow.qas  # type: ignore[attr-defined]
        conn = flow.conn  # type: ignore[attr-defined]
        if (
            not qas
            or not flow.nmsgs
            or (conn is not None and conn.flows.get(flow.wr_base >> SEQ_SHIFT) is not flow)  # type: ignore[attr-defined]
        ):
            return dict.fromkeys(COUNTERS, 0)  # never started (its QPs may be open)
        qpns = {qa.qpn for qa in qas}
        if conn is not None:
            return self._conn_counters(flow, conn, qpns, ev_events)  # type: ignore[arg-type]
        bad_at = self._bad_times(ev_events)
        src = flow.spec.src
        bad = sum(len(bad_at.get((src, q), ())) for q in qpns)
        return {
            "retransmits": sum(qa.stats.retransmits for qa in qas),
            "trims": sum(qa.stats.trims for qa in qas),
            "nacks": sum(qa.stats.rx_nacks for qa in qas),
            "timeouts": sum(qa.stats.timeouts for qa in qas),
            "ecn_echoes": sum(qa.stats.ecn_echoes for qa in qas),
            "evs_assumed_bad": bad,
        }

    def _conn_counters(
        self, flow: MrcFlow, conn: Conn, qpns: set[int], ev_events: list[dict[str, Any]]
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
            return dict.fromkeys(COUNTERS, 0)
        lo_us = None if lo is None else lo / 1e6
        hi_us = None if hi is None else hi / 1e6
        bad_at = self._bad_times(ev_events)
        src = flow.spec.src
        bad = 0
        for q in qpns:  # the transitions in (lo_us, hi_us]
            times = bad_at.get((src, q))
            if times:
                a = 0 if lo_us is None else bisect_right(times, lo_us)
                b = len(times) if hi_us is None else bisect_right(times, hi_us)
                bad += max(b - a, 0)
        counts["evs_assumed_bad"] = bad
        return counts

    def _bad_times(self, ev_events: list[dict[str, Any]]) -> dict[tuple[int, int], list[float]]:
        """The times (us, ascending) of the ASSUMED_BAD transitions among ``ev_events``,
        by (host, QPN): what :meth:`_counters` counts for each flow, looked up and
        bisected instead of scanning every row for every flow (flows x rows: most of a
        lossy collective's result collection).  Made once per list of rows."""
        memo = self._bad_memo
        if memo is not None and memo[0] is ev_events and memo[1] == len(ev_events):
            return memo[2]
        bad_at: dict[tuple[int, int], list[float]] = {}
        for e in ev_events:
            if e["new"] == "ASSUMED_BAD":
                bad_at.setdefault((e["host"], e["qpn"]), []).append(e["time_us"])
        for times in bad_at.values():
            times.sort()
        self._bad_memo = (ev_events, len(ev_events), bad_at)
        return bad_at

    def _flow_done(self, flow: Flow, now: int) -> None:
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
    def reseed_ports(self, seed: int) -> None:
        """Draw the ports' random choices (random loss, RED/ECN marks) from ``seed``
        instead of the experiment's: every other draw (the hosts', the transports')
        stays the experiment's.  Before :meth:`run` (a port makes its generator on its
        first draw).  The same scenario run again with only the switches' coin flips
        redrawn: how much of a result those coin flips decide
        (benchmarks/training.py ``--case packet-noise``)."""
        if self.sim.now:
            raise ValueError("reseed_ports: the experiment has already run")
        self.sim.seed = seed

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
        with setup_gc():  # the QPs opened are long-lived: see setup_gc
            return self._add_flows(specs, watch)

    def _add_flows(self, specs: list[FlowSpec], watch: bool) -> list[int]:
        """:meth:`add_flows`, with the collector as :func:`setup_gc` sets it."""
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
            if isinstance(flow, MrcFlow):
                self._open_qps_of(flow, self.sim.now)
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
        if "mrc" in self.transport_names:
            # its connections now, in the order its unfolded flows would open them
            for spec in folder.conn_specs():
                self._conn_for(spec, self.sim.now)
        self._collectives.append(folder)
        return len(self._collectives) - 1

    def _folded_flow(self, folder: FoldedCollective, i: int) -> Flow:
        """Transfer ``i`` of ``folder`` as a flow (made when it may start)."""
        flow = self._new_flow(folder.spec(i))
        flow.watch_rx = True
        flow.fold = folder
        flow.fold_i = i
        return flow

    def _fold_arrived(self, flow: Flow, now: int) -> None:
        """A folded transfer's data arrived: start what waited for it; fold it if done."""
        folder = flow.fold
        assert folder is not None
        for j, at in folder.arrived(flow.fold_i, now):
            dep = self._folded_flow(folder, j)
            dep.status = "waiting"
            self.sim.schedule(at, self._launch, dep)
        if flow.done_at is not None:
            self._fold(flow)

    def _fold_done(self, flow: Flow) -> None:
        """A folded transfer's sender is done (or it failed): fold it once its data arrived."""
        folder = flow.fold
        assert folder is not None
        if flow.status != "ok":
            self._open -= folder.failed(flow.fold_i)
            self._fold(flow)
        elif flow.rx_done is not None:
            self._fold(flow)

    def _fold(self, flow: Flow) -> None:
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

    def _forget(self, flow: Flow) -> None:
        """Drop what the transport keeps of a folded flow: its place on its connection and,
        when it finished, its memory regions (a late duplicate of its data is recognised
        as a duplicate by its PSN before its rkey is looked at)."""
        conn = getattr(flow, "conn", None)
        if conn is not None:
            conn.flows.pop(flow.wr_base >> SEQ_SHIFT, None)  # type: ignore[attr-defined]
        if flow.status == "ok":
            for mr in (flow.mr_src, flow.mr_dst):  # type: ignore[attr-defined]
                if mr is not None and mr.pd is not None:  # (None: another rank's region)
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

    def _launch(self, flow: Flow) -> None:
        flow.started_at = self.sim.now
        sampler = self.sampler
        if flow.fold is None:  # (a folded transfer has no goodput series)
            sampler.live[flow] = None  # its received bytes may move from now on
        if not sampler.armed and sampler.sampling:
            sampler.wake(self.sim.now)
        # each experiment class is handed back the flow kind its _new_flow made
        self._start(flow)  # type: ignore[arg-type]

    def _open_qps(
        self, spec: FlowSpec, now: int, note: Callable[[], None]
    ) -> tuple[Any, Any, list[Any], list[Any]]:
        """New PDs at both ends and ``qps`` connected QP pairs between them; ``note`` is
        called when a send completion is pushed (so the host's activity polls only the
        flows that have news)."""
        attr = self._attr_for(spec)
        # an end this process does not hold (another rank's host in a partitioned run,
        # openmrc.sim.partition) gets no PD and no QPs: its QPNs are what its own rank
        # gives them (_peer_qpn); each context's verbs run in the same order either way
        held_a, held_b = self._holds(spec.src), self._holds(spec.dst)
        a = self.hosts[spec.src].ctx if held_a else None
        b = self.hosts[spec.dst].ctx if held_b else None
        pa = a.alloc_pd() if a is not None else None
        pb = b.alloc_pd() if b is not None else None
        if spec.ev_profile is not None:  # a per-flow EV profile (scenario [[flows]] ev_profile)
            attr = replace(attr, ev_profile=spec.ev_profile)
        qas, qbs = [], []
        for _ in range(self._qps_for(spec)):
            qa = qb = None
            if pa is not None:
                assert a is not None
                cq = a.create_cq(1 << 20)
                cq.on_push = note
                qa = pa.create_qp(cq)
            if pb is not None:
                assert b is not None
                qb = pb.create_qp(b.create_cq(1 << 20))
            qpn_a = qa.qpn if qa is not None else self._peer_qpn(spec.src)
            qpn_b = qb.qpn if qb is not None else self._peer_qpn(spec.dst)
            if qa is not None:
                qa.connect(qpn_b, attr, peer=spec.dst, now=now)
                qas.append(qa)
            if qb is not None:
                qb.connect(qpn_a, attr, peer=spec.src, now=now)
                qbs.append(qb)
        return pa, pb, qas, qbs

    def _holds(self, host: int) -> bool:
        """Whether this process holds ``host``'s transport state (always, but on a rank
        of a partitioned run, which holds only its own hosts')."""
        return True

    def _peer_qpn(self, host: int) -> int:
        """The QPN ``host``'s next QP gets, for a host not held here (a partitioned
        run's rank answers it; every host is held in an ordinary run)."""
        raise AssertionError(f"host {host} is held by this process")

    def _news_for(self, host: int) -> dict[Flow, None]:
        """The flows of sending host ``host`` with send completions not yet polled."""
        if self._cq_news is None:
            self._cq_news = {}
        return self._cq_news.setdefault(host, {})

    def _conn_for(self, spec: FlowSpec, now: int) -> Conn:
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
            conn = Conn()
            pa, pb, qas, qbs = self._open_qps(spec, now, self._noter(spec.src, conn.active))
            conn.pa, conn.pb = pa, pb
            self._conns[key] = conn
            conn.qas, conn.qbs = qas, qbs
            conn.posted = [0] * self._qps_for(spec)
        return conn

    def _open_qps_of(self, flow: MrcFlow, now: int) -> None:
        """``flow``'s QPs: its connection's, or its own.

        Opened when the flow is added (a folded collective's transfer: when it
        starts, but its connection was opened when the collective was added).
        Opened when each flow starts, they would be numbered in start order, which a
        partitioned run cannot know before the run (:mod:`openmrc.sim.partition`)."""
        spec = flow.spec
        if spec.conn:
            conn = self._conn_for(spec, now)
            flow.qas, flow.qbs = list(conn.qas), list(conn.qbs)
            flow.conn = conn
        else:
            _pa, _pb, flow.qas, flow.qbs = self._open_qps(
                spec, now, self._noter(spec.src, {flow: None})
            )

    def _start(self, flow: MrcFlow) -> None:  # type: ignore[override]
        spec = flow.spec
        now = self.sim.now
        if not flow.qas:
            self._open_qps_of(flow, now)
        conn = flow.conn
        if conn is None:
            pa, pb = flow.qas[0].pd, flow.qbs[0].pd
            seq = 0
        else:
            if any(q.state is QPState.ERROR for q in (*conn.qas, *conn.qbs)):
                # the connection failed under an earlier transfer: nothing can be posted
                self._fail_at_start(flow, now)
                return
            pa, pb = conn.pa, conn.pb
            seq = conn.started
            conn.started += 1
            conn.flows[seq] = flow
            conn.active[flow] = None
        self._post_buffers(flow, pa, pb, conn, seq)
        self._begin_sending(flow, conn)
        if flow.watch_rx:
            self._watch_rx(flow, spec.dst)
        # (the source only: what the receiver needs was posted above, and the
        # partitioned run, whose receiver may be on another rank, kicks only it)
        self.hosts[spec.src].kick(now)

    def _begin_sending(self, flow: Any, conn: Any) -> None:
        """A flow whose buffers are posted starts sending: its WRITEs go to its
        connection's poster (its own when it has no connection), and its source host
        looks at it on its next activity."""
        src = flow.spec.src
        poster = conn.poster if conn is not None else Poster()
        flow.poster = poster
        poster.add(flow)
        poster.fill()
        flow.pending = flow.nmsgs
        flow.status = "running"
        flow.order = next(self._order)
        self._news_for(src)[flow] = None  # looked at on the next activity, as every flow was
        self.hosts[src].on_activity = self._activity
        self._sending.setdefault(src, []).append(flow)

    def _post_buffers(self, flow: Any, pa: Any, pb: Any, conn: Any, seq: int) -> None:
        """A flow's memory regions (with its payload), where its messages sit in each of
        its connection's stripes, its WR ids, and the receives its last messages need."""
        spec = flow.spec
        nq = len(conn.posted) if conn is not None else self._qps_for(spec)  # (its QPs, either end)
        # (``pa`` or ``pb`` is None for an end another rank holds: its region is made there)
        mr_a = mr_b = None
        if self.payloads:
            # drawn for every flow, in the same order on every rank
            data = bytearray(self._payload_rng.randbytes(spec.size))
            flow.src_data = data
            if pa is not None:
                mr_a = pa.reg_mr(spec.size, buffer=data)
            if pb is not None:
                mr_b = pb.reg_mr(spec.size, buffer=bytearray(spec.size))
        else:
            if pa is not None:
                mr_a = pa.reg_mr(spec.size)
            if pb is not None:
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
        flow.wr_base = seq << SEQ_SHIFT
        flow.nmsgs = len(offsets)
        if flow.qbs:
            for i in range(max(0, flow.nmsgs - nq), flow.nmsgs):
                flow.qbs[i % nq].post_recv(RecvWR(flow.wr_base | i))

    def _activity(self, host: Any, now: int) -> None:
        sampler = self.sampler
        if not sampler.armed and sampler.sampling:
            sampler.wake(now)
        flows = self._sending.get(host.index)
        if not flows:
            return
        todo: list[Flow] = flows
        if self._cq_news is not None:
            news = self._cq_news.get(host.index)
            if news is None or not news:
                if self._open == 0:
                    self.sim.stop()
                else:
                    self._quiet(host)
                return
            todo = sorted(news, key=send_order) if len(news) > 1 else list(news)
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

    def _fail_at_start(self, flow: Flow, now: int) -> None:
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

    def _noter(self, src: int, flows: dict[Flow, None]) -> Callable[[], None]:
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
        if news is not None and self.sampler.armed and not news.get(host.index):
            host.on_activity = None

    def _host_hooks(self, everywhere: bool) -> None:
        """Which hosts call the experiment back, a call each time, so only where it can matter.

        :meth:`_data_arrived` after a data packet: on every host while the
        sampler sleeps (any arrival wakes it), otherwise on the hosts that
        receive a watched flow, and there only after a packet that placed a
        message (:meth:`_data_every`).  :meth:`_activity` after any other input: on
        every host while the sampler sleeps, once no flow is open (any input
        stops the run) and when completions are not reported by the CQs (the
        baselines poll); otherwise on the hosts whose send CQs have news.
        """
        data = self._data_arrived
        watched = self._rx_watch
        activity = self._activity
        news = self._cq_news
        always = everywhere or news is None or self._open == 0
        every = self._data_every(everywhere)
        for host in self.hosts:
            if host is None:
                continue
            host.on_data = data if everywhere or host.index in watched else None
            if type(host) is SimHost:
                host.data_every = every
            has_news = news is not None and bool(news.get(host.index))
            host.on_activity = activity if always or has_news else None

    def _watch_rx(self, flow: Flow, dst: int) -> None:
        """Check, at each data arrival at ``dst``, whether ``flow`` has fully arrived."""
        self._rx_watch.setdefault(dst, []).append(flow)
        host = self.hosts[dst]
        if host is not None:  # (None: another rank's host, which watches there)
            host.on_data = self._data_arrived
            if type(host) is SimHost:
                host.data_every = self._data_every(False)

    def _data_every(self, everywhere: bool) -> bool:
        """Whether the hosts that call :meth:`_data_arrived` must call it after every
        data packet (``SimHost.data_every``) rather than only after one that placed a
        message: ``everywhere`` (the sampler went to sleep), or while the sampler is
        not armed (asleep, or not started: any arrival must wake it).  Armed, a call
        after any other packet finds nothing: a flow arrives only when a message of it
        is placed (:meth:`_rx_candidates`), and the sampler needs no wake."""
        return everywhere or not self.sampler.armed

    def _rx_candidates(self, host: Any, flows: list[Flow]) -> list[Flow]:
        """Which of ``flows`` (watched, arriving at ``host``) the data packet that just
        reached ``host`` may have completed: those whose receiving QPs include the one
        it reached (``host.last_rx``), in their order in ``flows``, and none unless the
        packet placed a message there (the QP's ``rx_messages`` moved since the last
        packet looked at it).  A flow completes only when a message of it is placed,
        and only a packet on its own QP places it, so no other flow can have completed
        (checking every flow at every arrival cost 63 checks a packet in a 64-rank
        all-to-all, and two in a ring whose messages are hundreds of packets).  The
        index is brought up to date when the list was replaced (a new object) or grew
        (flows are only appended to it in place)."""
        seen = self._rx_by_qpn.get(host.index)
        if seen is None or seen[0] is not flows:
            by: dict[int, _RxQP] = {}
            for f in flows:
                _RxQP.index(by, f)
            if seen is not None:  # what the QPs had placed when last looked at
                for qpn, now_qp in by.items():
                    was = seen[2].get(qpn)
                    if was is not None:
                        now_qp.placed = was.placed
            seen = self._rx_by_qpn[host.index] = (flows, len(flows), by)
        elif seen[1] != len(flows):
            by = seen[2]
            for f in flows[seen[1] :]:
                _RxQP.index(by, f)
            seen = self._rx_by_qpn[host.index] = (flows, len(flows), by)
        rq = seen[2].get(host.last_rx)
        if rq is None:
            return []
        placed = rq.qb.stats.rx_messages
        if placed == rq.placed:
            return []
        rq.placed = placed
        return rq.flows

    def _data_arrived(self, host: Any, now: int) -> None:
        """A data packet reached ``host``: did a watched flow's last byte arrive?"""
        sampler = self.sampler
        if not sampler.armed and sampler.sampling:
            sampler.wake(now)
        flows = self._rx_watch.get(host.index)
        if not flows:
            return
        done = [f for f in self._rx_candidates(host, flows) if self._rx_complete(f)]
        if not done:
            return
        left = self._rx_watch[host.index] = [
            f for f in flows if f.rx_done is None and f not in done
        ]
        if not left:  # nothing indexed outlives its transfer (a folded run keeps none)
            self._rx_by_qpn.pop(host.index, None)
        for flow in done:
            flow.rx_done = now
            self._release(flow.dependents, now, flow)
            if flow.fold is not None:
                self._fold_arrived(flow, now)

    def _release(self, dependents: list[Flow], now: int, source: Flow | None = None) -> None:
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

    def _fail_dependents(self, flow: Flow) -> None:
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

    def track_ev_activity(self) -> None:
        """Record data bytes sent per (host, EV) per sample interval (MRC; call before run)."""
        self.sampler.track_ev([host for host in self.hosts if host is not None])

    def _open_flows(self) -> int:
        """How many flows are still open (not finished, failed or stranded)."""
        return self._open

    def _ideal_rate_bps(self, flow: Flow) -> float:
        """Payload rate of a flow's connection alone on an idle fabric."""
        mtu = self.transport.mtu
        wire = mtu + DATA_HEADER_BYTES + self.fabric.config.framing_bytes
        return self.spec.planes * self.spec.host_gbps * 1e9 * mtu / wire

    def _ideal_fct_ps(self, flow: Flow) -> int:
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

    def capture(self, path: str | Path, hosts: list[int] | None = None) -> Capture:
        """Write a pcap of what ``hosts`` (default: all) send and receive during :meth:`run`."""
        cap = Capture(self.topology, self.hosts, path, hosts)
        self._captures.append(cap)
        return cap

    # -- running --------------------------------------------------------------------
    def run(self, until_ps: int | None = None) -> Result:
        """Run until every flow finished (or ``until_ps``), and collect the results."""
        self.sampler.start()
        if self.queue_sample_interval_ps is not None:
            self.fabric.metrics.sample_queues(self.queue_sample_interval_ps)
        started = time.perf_counter()
        try:
            self.sim.run(until_ps)
            if self._open == 0:
                self.sampler.finish()
        finally:
            self.sampler.stop()
            for cap in self._captures:
                cap.close()
        wall = time.perf_counter() - started
        # the results are read from long-lived objects and make few: without the
        # collector (paused_gc), which would otherwise walk the whole fabric and
        # hosts once the run gives them back to it (a second at 8192 hosts)
        with paused_gc():
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
        sampler = self.sampler
        flows = []
        verified: bool | None = None
        for flow in self.flows:
            sampler.pad(flow, sampler.ticks)  # before steady() reads its cum, and the series
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
            end = flow.done_at if flow.done_at is not None else self.sim.now
            steady = sampler.steady(flow, end, self.steady_skip)
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
            plane_series={f"plane{p}": s for p, s in enumerate(sampler.plane_series)},
            ev_series={f"h{h}:ev{ev:#x}": s for (h, ev), s in sorted(sampler.ev_series.items())},
            sampling=sampler.stats(),
        )
