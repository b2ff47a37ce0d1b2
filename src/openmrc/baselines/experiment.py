"""RoCEv2 and InfiniBand-style hosts and experiments on the conventional fabric.

``BaselineExperiment(spec, transport_name="roce")`` (or
``openmrc.sim.factory.make_experiment(spec, transport=TransportConfig(name="roce"))``)
builds a :class:`~openmrc.baselines.fabric.BaselineFabric`
and one :class:`~openmrc.baselines.nic.BaselineHost` per host, each driving the sans-IO
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
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..sim.config import FabricConfig
from ..sim.experiment import Experiment, TransportConfig
from ..sim.flows import Flow
from ..topology import ClosSpec
from ..workloads import FlowSpec
from .fabric import SETUPS, BaselineFabric, BaselineFabricConfig, baseline_configs
from .nic import BaselineHost
from .roce import RoceConfig, RoceReceiver, RoceSender, received_bytes, received_messages


class _BFlow(Flow):
    """A RoCE/IB connection: its sending and receiving QPs, and the receive buffer."""

    __slots__ = ("dst_buf", "receivers", "senders")

    def __init__(self, spec: FlowSpec) -> None:
        super().__init__(spec)
        self.senders: list[RoceSender] = []
        self.receivers: list[RoceReceiver] = []
        self.dst_buf: bytearray | None = None


class BaselineExperiment(Experiment):
    """An experiment running RoCEv2 (``roce``) or InfiniBand-style (``ib``) connections.

    Same interface and :class:`~openmrc.sim.result.Result` as
    :class:`~openmrc.sim.experiment.Experiment`, which runs it; this class only
    supplies the transport's hooks.  A flow is one connection of
    ``RoceConfig.qps`` QPs.  ``FlowResult.retransmits`` counts go-back-N
    rewinds, ``nacks`` NAKs sent, ``timeouts`` local ACK timeouts,
    ``ecn_echoes`` CNPs.
    """

    transport_names = ("roce", "ib")

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
        baseline_fabric: BaselineFabricConfig | None = None,
    ) -> None:
        transport = transport or TransportConfig()
        name = transport_name if transport_name is not None else transport.name
        if transport.name != name:
            transport = replace(transport, name=name)
        spec.validate()
        self.transport_name = name
        self.roce_config, self.baseline_config = baseline_configs(name, transport)
        if baseline_fabric is not None:
            self.baseline_config = baseline_fabric
        self.line_bps = spec.host_gbps * 1e9
        self._next_qp = 1
        #: every random choice made for a QP, by name (:meth:`qp_draws`); a long-lived
        #: connection's QPs find their source ports (ECMP paths) here after the first
        self._qp_draws: dict[tuple[Any, ...], int] = {}
        #: flows started so far per (name, src, dst): a flow's occurrence in its draws' keys
        self._flow_seen: dict[tuple[str, int, int], int] = {}
        #: per long-lived connection (src, dst, conn): the QP its next message goes
        #: on (NCCL keeps turning its QP index over a connection's messages)
        self._conn_next_qp: dict[tuple[int, int, str], int] = {}
        self._roce_cfgs: dict[str, RoceConfig] = {}
        #: the flow of each receiving QP (:meth:`_rx_candidates`)
        self._rx_flows: dict[int, Flow] = {}
        #: per host: its list of watched flows as last seen, its length then, and a set of it
        self._rx_watch_sets: dict[int, tuple[list[Flow], list[int], set[Flow]]] = {}
        super().__init__(
            spec,
            fabric_config,
            transport,
            seed,
            payloads,
            sample_interval_ps,
            queue_sample_interval_ps,
        )
        for host in self.hosts:
            host.sampler = self.sampler  # (on_data: see BaselineHost.on_data)

    # -- transport hooks --------------------------------------------------------------
    def _build_fabric(self, config: FabricConfig | None) -> BaselineFabric:  # type: ignore[override]
        cfg = config or FabricConfig(base_rtt_ps=self.base_rtt_ps, trimming=False)
        return BaselineFabric(self.sim, self.topology, cfg, self.baseline_config)

    def _build_hosts(self, master: random.Random) -> list[Any]:
        hosts = [BaselineHost(self.sim, self.fabric, h) for h in range(self.spec.hosts)]  # type: ignore[arg-type]
        seed = master.getrandbits(64)
        self._sport_rng = random.Random(seed)
        # the ADP initial timeouts get a stream of their own (derived, so that the
        # source ports, and so the ECMP paths, do not depend on it)
        self._adp_rng = random.Random(seed ^ 0x5EED_ADB0)
        return hosts

    def _new_flow(self, spec: FlowSpec) -> Flow:
        return _BFlow(spec)

    def _drain_completions(self, flow: Flow) -> list[str | None]:
        out: list[str | None] = []
        for snd in flow.senders:  # type: ignore[attr-defined]
            if snd.completed:
                out.extend(None if ok else "qp_error" for _msg, ok, _t in snd.completed)
                snd.completed.clear()
        return out

    def _rx_candidates(self, host: Any, flows: list[Flow]) -> list[Flow]:
        # only the flow whose QP the packet reached can have completed with it
        flow = self._rx_flows.get(host.last_rx)
        if flow is None:
            return []
        if len(flows) <= 8:  # a short list: scanning it is cheaper than the set
            return [flow] if flow in flows else []
        # whether it is among ``flows`` (the host's watched flows, hundreds in an
        # all-to-all): a set beside the list, brought up to date when the list was
        # replaced (a new object) or grew (flows are only appended to it in place)
        seen = self._rx_watch_sets.get(host.index)
        if seen is None or seen[0] is not flows:
            seen = self._rx_watch_sets[host.index] = (flows, [len(flows)], set(flows))
        elif seen[1][0] != len(flows):
            seen[2].update(flows[seen[1][0] :])
            seen[1][0] = len(flows)
        return [flow] if flow in seen[2] else []

    def _rx_complete(self, flow: Flow) -> bool:
        return received_messages(flow.receivers) >= flow.nmsgs  # type: ignore[attr-defined]

    def _received_bytes(self, flow: Flow) -> int | None:
        receivers = flow.receivers  # type: ignore[attr-defined]
        if not receivers:
            return None
        return received_bytes(receivers)

    def _delivered(self, flow: Flow) -> bytes | bytearray | None:
        return flow.dst_buf  # type: ignore[attr-defined,no-any-return]

    def _events(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return [], []  # RoCE and IB QPs have no EV set

    def _counters(self, flow: Flow, ev_events: list[dict[str, Any]]) -> dict[str, int]:
        snd, rcv = flow.senders, flow.receivers  # type: ignore[attr-defined]
        return {
            "retransmits": sum(s.rewinds for s in snd),
            "trims": 0,
            "nacks": sum(r.naks for r in rcv),
            "timeouts": sum(s.timeouts for s in snd),
            "ecn_echoes": sum(r.cnps for r in rcv),
            "evs_assumed_bad": 0,
        }

    def capture(self, path: Any, hosts: list[int] | None = None) -> Any:
        """Not available: captures encode MRC packets, and these are RoCE/IB ones."""
        raise ValueError(
            f"capture: pcap capture is available for the 'mrc' transport, not {self.transport_name!r}"
        )

    def qp_draws(self) -> dict[tuple[Any, ...], int]:
        """Every random choice this run has made for its QPs, by name: a QP's UDP
        source port (so its ECMP path) under ``("sport", src, dst, conn, qp index)``
        for a long-lived connection's QP and ``("sport", flow name, src, dst,
        occurrence, qp index)`` otherwise, and its adaptive retransmission's initial
        timeout (the exponent's offset) under ``("adp", flow name, src, dst,
        occurrence, qp index)``; a flow's occurrence counts the flows of the same name
        and hosts started before it.  :meth:`replay_qp_draws` hands them to another
        run of the same scenario."""
        return dict(self._qp_draws)

    def replay_qp_draws(self, draws: dict[tuple[Any, ...], int]) -> None:
        """Before :meth:`run`: make the choices in ``draws`` (:meth:`qp_draws` of an
        earlier run of the same scenario) wherever their names come again, whatever
        order the QPs are made in; choices not in it are drawn as usual.  With
        :meth:`reseed_ports`, a run on the same paths and timeouts with only the
        switches' coin flips redrawn."""
        if self.sim.now:
            raise ValueError("replay_qp_draws: the experiment has already run")
        self._qp_draws.update(draws)

    def _draw(self, key: tuple[Any, ...], rng: random.Random, lo: int, hi: int) -> int:
        """The choice named ``key``: replayed, or drawn from ``rng`` in [lo, hi)."""
        v = self._qp_draws.get(key)
        if v is None:
            v = self._qp_draws[key] = rng.randrange(lo, hi)
        return v

    def _start(self, flow: _BFlow) -> None:  # type: ignore[override]
        spec = flow.spec
        now = self.sim.now
        cfg = self._roce_for(spec)
        if self.payloads:
            flow.src_data = bytearray(self._payload_rng.randbytes(spec.size))
            flow.dst_buf = bytearray(spec.size)
        src, dst = self.hosts[spec.src], self.hosts[spec.dst]
        planes = self.spec.planes
        fkey = (spec.name, spec.src, spec.dst)
        occ = self._flow_seen.get(fkey, 0)
        self._flow_seen[fkey] = occ + 1
        adaptive = cfg.adaptive_retransmission and cfg.adp_init_range > 1
        for i in range(cfg.qps):
            qp = self._next_qp
            self._next_qp += 1
            # a long-lived connection's QP keeps its source port (ECMP path) every time
            name = (spec.src, spec.dst, spec.conn, i) if spec.conn else (*fkey, occ, i)
            sport = self._draw(("sport", *name), self._sport_rng, cfg.sport_base, 65536)
            adp = (
                self._draw(("adp", *fkey, occ, i), self._adp_rng, 0, cfg.adp_init_range)
                if adaptive
                else None
            )
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
                adp_offset=adp,
            )
            rcv = RoceReceiver(
                cfg,
                qp,
                spec.dst,
                spec.src,
                sport,
                buffer=flow.dst_buf,
                cnp_pacer=dst.cnp_pacers[i % planes],
            )
            dst.add_receiver(rcv)
            self._rx_flows[qp] = flow
            flow.senders.append(snd)
            flow.receivers.append(rcv)
        # Messages go round-robin over the QPs.  A long-lived connection (a
        # collective's ring channel or peer pair) carries on from the QP after
        # its previous message, as NCCL's IB transport turns its QP index over a
        # connection's messages (NCCL_IB_SPLIT_DATA_ON_QPS=0, its default): the
        # successive steps of a ring go out on successive QPs, so paths.
        ckey = (spec.src, spec.dst, spec.conn)
        first = self._conn_next_qp.get(ckey, 0) if spec.conn else 0
        n = 0
        for off in range(0, spec.size, spec.message):
            length = min(spec.message, spec.size - off)
            flow.senders[(first + n) % cfg.qps].post(n, off, length)
            n += 1
        if spec.conn:
            self._conn_next_qp[ckey] = (first + n) % cfg.qps
        # A QP given no message (a connection with more QPs than messages: a ring
        # step of NCCL's 512 KiB slices over 16 QPs is one message) stays empty for
        # good, and nothing retires a QP that is never ACKed: registered, it would
        # stay in its plane's scan to the end of the run (15 more per ring step and
        # channel, thousands per host by the end of a 64-rank ring).  It is only
        # passed over, which keeps the order in which the others are served.
        for i, snd in enumerate(flow.senders):
            if snd.idle():
                src.pass_over(i % planes)
            else:
                src.tx_flows[snd] = flow
                src.add_sender(snd, i % planes)
        flow.pending = n
        flow.nmsgs = n
        flow.status = "running"
        # Completions are reported, not polled: the host notes the flow whose QP
        # completed (BaselineHost.note_completions) and the experiment's activity
        # hook looks at those flows only, in start order (what polling every flow
        # found, without the scan).  A new flow is looked at on the next activity.
        flow.order = next(self._order)
        self._news_for(spec.src)[flow] = None
        if src.note_completions is None:
            src.note_completions = self._completion_noter(spec.src)
        src.on_activity = self._activity
        self._sending.setdefault(spec.src, []).append(flow)
        if flow.watch_rx:
            self._watch_rx(flow, spec.dst)
        src.kick(now)

    def _completion_noter(self, src: int) -> Callable[[Any], None]:
        """What host ``src`` calls when a flow's QP has completions: the flow has news,
        and the host reports its next activity."""
        news = self._news_for(src)
        host = self.hosts[src]
        hook = self._activity

        def note(flow: Any) -> None:
            news[flow] = None
            host.on_activity = hook

        return note

    def _roce_for(self, spec: FlowSpec) -> RoceConfig:
        """The RoCE config of a flow: the experiment's, with its own settings and QP count."""
        if not spec.settings and spec.qps is None and self.transport.qps is None:
            return self.roce_config
        key = repr((sorted((spec.settings or {}).items()), spec.qps))
        cfg = self._roce_cfgs.get(key)
        if cfg is None:
            transport = replace(self.transport, **(spec.settings or {}))
            cfg, _ = baseline_configs(self.transport_name, transport)
            qps = spec.qps if spec.qps is not None else transport.qps
            if qps is not None:
                cfg = replace(cfg, qps=qps)
                cfg.validate()
            self._roce_cfgs[key] = cfg
        return cfg

    def _ideal_rate_bps(self, flow: Flow) -> float:
        """One plane per QP (QP i on plane i % planes), WRITE headers of 80 B."""
        cfg = self._roce_for(flow.spec)
        wire = cfg.mtu + 80 + self.fabric.config.framing_bytes
        return min(cfg.qps, self.spec.planes) * self.line_bps * cfg.mtu / wire

    def _attr_for(self, spec: FlowSpec) -> Any:
        return self._roce_for(spec)  # validates a flow's settings for the baselines


__all__ = ["SETUPS", "BaselineExperiment", "BaselineHost", "baseline_configs"]
