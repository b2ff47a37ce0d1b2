"""Scenario files: a whole simulation described in TOML (or JSON).

::

    seed = 1
    [fabric]            # openmrc.topology.ClosSpec fields
    planes = 8
    t0s = 8
    hosts_per_t0 = 8
    t1s = 8
    [switches]          # openmrc.sim.FabricConfig fields (trimming, ecn, queue_bdp, ...)
    trimming = true
    [transport]         # openmrc.sim.experiment.TransportConfig fields (cc, mtu, ev_count, ...)
    name = "mrc"                # mrc | roce | ib (baselines: docs/baselines.md, with
    cc = "nscc"                 # their own `roce` and `baseline_fabric` tables)
    [workload]
    kind = "permutation"        # permutation | shift | incast | single | all_to_all | flows
                                # flows: [[workload.flows]] src, dst, size, start_us,
                                # message, after, gap_us, qps, settings (the
                                # flow's own [transport] fields, and ev_profile =
                                # {EVProfile fields}: its own EV profile)
    size = "8MiB"               # or a collective: allreduce | allgather | reducescatter |
                                # alltoall | sendrecv | training (docs/collectives.md)
                                # or htsim (file = "x.cm": a uet-htsim connection matrix)
    [[faults]]
    at_us = 60
    kind = "link_down"          # link_down | link_up | link_silent | link_loss | flap |
    target = "p2t0x1-p2t1x3"    # switch_down | switch_blackhole | switch_up |
                                # nic_port_down | nic_port_up |
                                # ev_loss (evs = [...], probability)
    # a group instead of a target: links = "host" | "fabric" | "all" or
    # switches = "t0" | "t1" | "all", narrowed by planes / hosts / t0s / t1s;
    # direction = "down" (towards the host: a NIC's ingress) | "up" | "both" for
    # link_loss and link_silent; flap: period_us + duty + until_us, or
    # period_us + down_us + count.  Every NIC ingress of every plane:
    #   kind = "link_loss", links = "host", direction = "down", probability = 0.01
    [[controller]]              # a host's MRC controller, at a given time:
    at_us = 80                  # deny_ev | allow_ev | deny_plane | allow_plane
    host = 0                    # | replace_ev (ev -> new_ev, same plane) |
    action = "deny_plane"       # set_ev_state (ev, state "GOOD" | "DENIED");
    plane = 3                   # on EV profile `profile` (0: [transport]'s, i+1:
                                # workload.flows[i].settings.ev_profile); `plane` or `ev`
                                # (int or "0x13")
    [clustermapper]             # self-probe fault localisation (openmrc.clustermapper):
    interval_us = 20            # t1_subset, t0_probes, t1_probes, window, fail_rate,
    deny_lossy = false          # lossy_rate, start_us, stop_us; results: "localised"
    [run]
    until_us = 1000             # optional cap
    sample_us = 10              # goodput sampling
    queue_sample_us = 1         # optional: record queue depths
    payloads = false            # real bytes, checked at the end
    steady_skip = 0.1           # start-up share left out of steady-state goodput

Every key is checked: an unknown key, a wrong type or an impossible value is a
:class:`ScenarioError` that names the key (``workload.size: ...``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import units
from ..clustermapper.sim_agent import ClustermapperConfig, enable_clustermapper
from ..sim.config import FabricConfig
from ..sim.experiment import Experiment, TransportConfig, base_rtt_ps, check_flow_settings
from ..sim.factory import make_experiment
from ..sim.fault_select import link_names, switch_names
from ..sim.result import Result
from ..topology import ClosSpec
from ..transport.attrs import ev_profile_from_dict
from ..transport.errors import InvalidArgument
from ..workloads import (
    FlowSpec,
    all_to_all,
    check_dependencies,
    incast,
    permutation,
    shifted_permutation,
    single,
)
from ..workloads import collectives as coll
from ..workloads.htsim import CmError, load_cm
from ..workloads.jobs.config import FileJob, JobConfig, parse_file_workload, parse_jobs, place
from ..workloads.jobs.model import JobError

US = 1_000_000


#: ``<where>: <Class>.<field>: reason`` from a validator deeper down, and the scenario
#: table each class's fields are written in (relative to ``<where>``).
_CLASS_FIELD = re.compile(
    r"^(?P<where>[\w.\[\]]+): (?P<cls>ClosSpec|FabricConfig|QPAttr|EVProfile|CCProfile|"
    r"RoceConfig|BaselineFabricConfig)\.(?P<field>\w+): (?P<reason>.*)$",
    re.DOTALL,
)
#: the keys of a [transport] table (and of a flow's settings)
_TRANSPORT_KEYS = frozenset(f.name for f in dataclasses.fields(TransportConfig))
_CLASS_TABLE = {
    "RoceConfig": "roce",
    "BaselineFabricConfig": "baseline_fabric",
    "CCProfile": "cc_params",
}


def _scenario_key(where: str, cls: str, field: str) -> str | None:
    """The scenario key of ``cls.field`` reported under ``where``, or None if it has none."""
    if cls in ("QPAttr", "EVProfile"):
        # the transport table (or a flow's settings) holds these fields directly
        if where == "workload" and field in _TRANSPORT_KEYS:
            return f"workload settings.{field}"  # a flow's or a collective's settings
        if where.endswith(".ev_profile") or field in _TRANSPORT_KEYS:
            return f"{where}.{field}"
        return None
    if cls == "CCProfile" and field == "name":
        return f"{where}.cc"
    if cls in _CLASS_TABLE:
        return f"{where}.{_CLASS_TABLE[cls]}.{field}"
    return f"{where}.{field}"  # ClosSpec under fabric, FabricConfig under switches


class ScenarioError(ValueError):
    """A scenario file is wrong; the message names the key and the reason.

    A message passed up from a dataclass's validation (``fabric: ClosSpec.planes:
    must be ...``) is rewritten with the scenario key (``fabric.planes: must be ...``),
    the name the user wrote.
    """

    def __init__(self, message: str) -> None:
        m = _CLASS_FIELD.match(message)
        if m is not None:
            key = _scenario_key(m["where"], m["cls"], m["field"])
            if key is not None:
                message = f"{key}: {m['reason']}"
        super().__init__(message)


#: The largest size a scenario may name: a memory region's largest length
#: (2^48 bytes, 256 TiB), which every message and flow must fit.
MAX_SIZE = 1 << 48


def parse_size(value: Any, key: str) -> int:
    """Bytes from an int or a string like ``"8MiB"``, ``"64k"``, ``"1.5G"`` (see openmrc.units),
    at most :data:`MAX_SIZE` (checked here, before anything is estimated or run)."""
    try:
        size = units.parse_size(value, key)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if size > MAX_SIZE:
        raise ScenarioError(
            f"{key}: {value!r} is more than 256 TiB (2^48 bytes, a region's largest)"
        )
    return size


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ScenarioError(f"{key}: must be a table, got {type(value).__name__}")
    return value


def _fill(
    cls: type, values: dict[str, Any], section: str, conv: dict[str, Any] | None = None
) -> Any:
    """Build dataclass ``cls`` from ``values``, naming unknown keys and bad types."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in names:
            raise ScenarioError(f"{section}.{key}: unknown key (known: {', '.join(sorted(names))})")
        if conv and key in conv:
            value = conv[key](value, f"{section}.{key}")
        kwargs[key] = value
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ScenarioError(f"{section}: {exc}") from None
    for key, value in kwargs.items():
        default = names[key].default
        if default is not dataclasses.MISSING and default is not None and value is not None:
            want = type(default)
            ok = isinstance(value, want) or (want is float and isinstance(value, int))
            if not ok or isinstance(value, bool) != isinstance(default, bool):
                raise ScenarioError(
                    f"{section}.{key}: expected {want.__name__}, got {type(value).__name__} {value!r}"
                )
    return obj


def _int(value: Any, key: str, lo: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (lo is not None and value < lo):
        raise ScenarioError(
            f"{key}: expected an integer{f' >= {lo}' if lo is not None else ''}, got {value!r}"
        )
    return value


def _num(value: Any, key: str, lo: float = 0.0, hi: float | None = None) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < lo
        or (hi is not None and value > hi)
    ):
        rng = f"{lo:g}..{hi:g}" if hi is not None else f">= {lo:g}"
        raise ScenarioError(f"{key}: expected a number {rng}, got {value!r}")
    return float(value)


@dataclass
class FaultSpec:
    """One fault at a time (see the module docstring for the kinds)."""

    at_us: float
    kind: str
    target: str = ""
    host: int = -1
    plane: int = -1
    probability: float = 0.0
    period_us: float = 0.0
    duty: float = 0.5
    until_us: float = 0.0
    #: ev_loss: the EVs (ints or strings like "0x10") whose data packets are dropped.
    evs: list[Any] = field(default_factory=list)

    #: a group instead of one ``target``: "host" | "fabric" | "all" links
    #: (openmrc.sim.fault_select), or "t0" | "t1" | "all" switches.
    links: str = ""
    switches: str = ""
    #: filters of the group (None: all); ``hosts`` / ``planes`` also give NIC-port groups.
    planes: list[int] | None = None
    hosts: list[int] | None = None
    t0s: list[int] | None = None
    t1s: list[int] | None = None
    #: link_loss / link_silent only: "both", "up" (towards T1; a NIC's egress) or
    #: "down" (towards the host; a NIC's ingress).
    direction: str = "both"
    #: flap with a count: down for ``down_us`` every ``period_us``, ``count`` times.
    down_us: float = 0.0
    count: int = 0


@dataclass
class ControllerAction:
    """One timed action of a host's MRC controller (``[[controller]]``)."""

    at_us: float
    host: int
    action: str
    profile: int = 0
    ev: Any = None
    plane: int = -1
    #: replace_ev: the EV that takes ``ev``'s slot.
    new_ev: Any = None
    #: set_ev_state: "GOOD" or "DENIED".
    state: str = ""


CONTROLLER_ACTIONS = (
    "deny_ev",
    "allow_ev",
    "deny_plane",
    "allow_plane",
    "replace_ev",
    "set_ev_state",
)


FAULT_KINDS = {
    "ev_loss",
    "link_down",
    "link_up",
    "link_silent",
    "link_loss",
    "flap",
    "switch_down",
    "switch_blackhole",
    "switch_up",
    "nic_port_down",
    "nic_port_up",
}


@dataclass
class CollectiveRun:
    """A collective of a scenario and how it is run (``Experiment.add_collective`` arguments)."""

    collective: coll.Collective
    placement: list[int] | None = None
    message: int = 1 << 20
    start_ps: int = 0
    qps: int | None = None
    settings: dict[str, Any] | None = None


@dataclass
class Scenario:
    """A parsed, validated scenario, ready to :meth:`run`."""

    spec: ClosSpec
    switches: dict[str, Any]
    transport: TransportConfig
    flows: list[FlowSpec]
    faults: list[FaultSpec] = field(default_factory=list)
    seed: int = 1
    until_us: float | None = None
    sample_us: float = 10.0
    payloads: bool = False
    name: str = ""
    queue_sample_us: float | None = None
    controller: list[ControllerAction] = field(default_factory=list)
    clustermapper: ClustermapperConfig | None = None
    collectives: list[CollectiveRun] = field(default_factory=list)
    #: the part of each flow's life left out of its steady-state goodput.
    steady_skip: float = 0.1
    #: training jobs (``[job]`` / ``[[jobs]]`` or an aicb / chakra workload):
    #: openmrc.pipeline.jobrun.PlacedJob s, graphs built and ranks placed.
    jobs: list[Any] = field(default_factory=list)
    #: "packet" (the packet simulator) or "flow" (openmrc.flow.model; jobs only).
    mode: str = "packet"
    #: set by :meth:`build` at packet level: where each job's flows are (openmrc.pipeline.jobrun).
    job_state: Any = None
    #: ``[failures]``: the rates, the window and the drawn faults (openmrc.pipeline.failures).
    failures: dict[str, Any] | None = None

    def build(self) -> Experiment:
        """The experiment this scenario describes (not yet run)."""
        fc = {"ecn_lasthop": False, **self.switches}
        try:
            cfg = FabricConfig(**fc)
            if "base_rtt_ps" not in self.switches:
                rtt = base_rtt_ps(self.spec, self.transport.mtu, cfg.path_latency_ps())
                cfg = dataclasses.replace(cfg, base_rtt_ps=rtt)
            cfg.validate()
        except (TypeError, ValueError) as exc:
            raise ScenarioError(f"switches: {exc}") from None
        exp: Experiment = make_experiment(
            self.spec,
            fabric_config=cfg,
            transport=self.transport,
            seed=self.seed,
            payloads=self.payloads,
            sample_interval_ps=int(self.sample_us * US),
            queue_sample_interval_ps=(
                None if self.queue_sample_us is None else int(self.queue_sample_us * US)
            ),
        )
        exp.steady_skip = self.steady_skip
        try:
            if self.flows:
                exp.add_flows(self.flows)
            for c in self.collectives:
                exp.add_collective(
                    c.collective, c.placement, c.message, c.start_ps, qps=c.qps, settings=c.settings
                )
        except ValueError as exc:
            raise ScenarioError(f"workload: {exc}") from None
        if self.jobs:
            from .jobrun import add_packet_jobs

            try:
                self.job_state = add_packet_jobs(exp, self.jobs, 1 << 20)
            except (JobError, ValueError) as exc:
                raise ScenarioError(f"job: {exc}") from None
        for i, f in enumerate(self.faults):
            _apply_fault(exp, f, f"faults[{i}]")
        _apply_controller(exp, self.controller)
        if self.clustermapper is not None:
            enable_clustermapper(exp, self.clustermapper)
        return exp

    def run(self) -> Result:
        """Build and run; the result of the experiment."""
        exp = self.build()
        return exp.run(None if self.until_us is None else int(self.until_us * US))


def _int_list(value: Any, key: str, hi: int) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ScenarioError(f"{key}: must be an index or a non-empty list of indices")
    out = [_int(v, f"{key}[]", 0) for v in value]
    for v in out:
        if v >= hi:
            raise ScenarioError(f"{key}: {v} is out of range (0..{hi - 1})")
    return out


def _apply_fault(exp: Experiment, f: FaultSpec, key: str) -> None:
    at = int(f.at_us * US)
    inj = exp.faults
    switches = exp.fabric.switches
    spec = exp.spec
    hosts = spec.hosts
    if f.kind not in FAULT_KINDS:
        raise ScenarioError(
            f"{key}.kind: {f.kind!r} is not one of {', '.join(sorted(FAULT_KINDS))}"
        )
    if f.direction not in ("both", "up", "down"):
        raise ScenarioError(f"{key}.direction: must be 'both', 'up' or 'down', got {f.direction!r}")
    if f.direction != "both" and f.kind not in ("link_loss", "link_silent"):
        raise ScenarioError(
            f"{key}.direction: only link_loss and link_silent act on one direction "
            f"(a {f.kind} takes the whole link)"
        )
    planes = _int_list(f.planes, f"{key}.planes", spec.planes)
    host_list = _int_list(f.hosts, f"{key}.hosts", hosts)
    t0s = _int_list(f.t0s, f"{key}.t0s", spec.t0s)
    t1s = _int_list(f.t1s, f"{key}.t1s", spec.t1s)
    if f.kind.startswith("link") or f.kind == "flap":
        if f.switches:
            raise ScenarioError(f"{key}.switches: a {f.kind} acts on links (use links = ...)")
        if f.links:
            if f.target:
                raise ScenarioError(f"{key}: give either target or links, not both")
            try:
                group = link_names(spec, f.links, planes, host_list, t0s, t1s)
            except ValueError as exc:
                raise ScenarioError(f"{key}.{exc}") from None
            if not group:
                raise ScenarioError(f"{key}: the selection matches no link")
        else:
            if exp.topology.link_index(f.target) is None:
                raise ScenarioError(
                    f"{key}.target: no link {f.target!r} (links look like 'p0t0x1-p0t1x3' "
                    "or 'h5-p0t0x1'; or select a group with links = ...)"
                )
            group = [f.target]
        if f.kind == "link_loss":
            _num(f.probability, f"{key}.probability", 0.0, 1.0)
        if f.kind == "flap":
            if f.count:
                _int(f.count, f"{key}.count", 1)
                if f.period_us <= 0 or not 0 < f.down_us < f.period_us:
                    raise ScenarioError(
                        f"{key}: a flap with count needs period_us > 0 and 0 < down_us < period_us"
                    )
            elif f.period_us <= 0 or not 0 < f.duty < 1 or f.until_us <= f.at_us:
                raise ScenarioError(
                    f"{key}: flap needs period_us > 0, 0 < duty < 1 and until_us > at_us "
                    "(or period_us, down_us and count)"
                )
        for link in group:
            if f.kind == "link_down":
                inj.link_down(link, at_ps=at)
            elif f.kind == "link_up":
                inj.link_up(link, at_ps=at)
            elif f.kind == "link_silent":
                inj.link_silent(link, True, at_ps=at, direction=f.direction)
            elif f.kind == "link_loss":
                inj.link_loss(link, f.probability, at_ps=at, direction=f.direction)
            elif f.count:
                inj.flap_schedule(link, at, int(f.period_us * US), int(f.down_us * US), f.count)
            else:
                inj.flap(link, at, int(f.period_us * US), f.duty, int(f.until_us * US))
    elif f.kind == "ev_loss":
        if not isinstance(f.evs, list) or not f.evs:
            raise ScenarioError(f"{key}.evs: must be a non-empty list of EVs")
        evs = []
        for i, ev in enumerate(f.evs):
            try:
                ev = int(ev, 0) if isinstance(ev, str) else ev
            except ValueError:
                raise ScenarioError(f"{key}.evs[{i}]: not a number: {ev!r}") from None
            _int(ev, f"{key}.evs[{i}]", 0)
            evs.append(ev)
        _num(f.probability, f"{key}.probability", 0.0, 1.0)
        inj.ev_loss(evs, f.probability, at_ps=at)
    elif f.kind.startswith("switch"):
        if f.links:
            raise ScenarioError(f"{key}.links: a {f.kind} acts on switches (use switches = ...)")
        if f.switches:
            if f.target:
                raise ScenarioError(f"{key}: give either target or switches, not both")
            if host_list is not None:
                raise ScenarioError(f"{key}.hosts: not a switch filter (planes, t0s, t1s)")
            index = t0s if f.switches == "t0" else t1s if f.switches == "t1" else None
            try:
                names = switch_names(spec, f.switches, planes, index)
            except ValueError as exc:
                raise ScenarioError(f"{key}.{exc}") from None
            if not names:
                raise ScenarioError(f"{key}: the selection matches no switch")
        else:
            if f.target not in switches:
                raise ScenarioError(
                    f"{key}.target: no switch {f.target!r} (switches look like 'p0t1x3')"
                )
            names = [f.target]
        for name in names:
            getattr(inj, f.kind)(name, at_ps=at)
    else:
        if f.host >= 0 or f.plane >= 0:
            if not 0 <= f.host < hosts:
                raise ScenarioError(
                    f"{key}.host: must be a host index in 0..{hosts - 1}, got {f.host}"
                )
            if not 0 <= f.plane < spec.planes:
                raise ScenarioError(f"{key}.plane: must be 0..{spec.planes - 1}, got {f.plane}")
            pairs = [(f.host, f.plane)]
        elif host_list is not None or planes is not None:
            pairs = [
                (h, p)
                for h in (host_list if host_list is not None else range(hosts))
                for p in (planes if planes is not None else range(spec.planes))
            ]
        else:
            raise ScenarioError(
                f"{key}.host: a {f.kind} needs host and plane (or hosts / planes lists)"
            )
        for h, p in pairs:
            getattr(inj, f.kind)(h, p, at_ps=at)


FLOW_KEYS = {
    "src",
    "dst",
    "size",
    "start_us",
    "message",
    "after",
    "gap_us",
    "qps",
    "settings",
}

COLLECTIVE_KEYS = {
    "size",
    "message",
    "ranks",
    "placement",
    "channels",
    "chunks",
    "qps",
    "settings",
    "start_us",
}
TRAINING_KEYS = (COLLECTIVE_KEYS - {"size"}) | {
    "collectives",
    "iterations",
    "compute_us",
    "straggler",
    "straggler_us",
}


def _settings(value: Any, key: str) -> dict[str, Any] | None:
    """Per-flow / per-collective transport overrides, checked by name."""
    if value is None:
        return None
    try:
        check_flow_settings(value, key)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    _fill(TransportConfig, value, key)  # names a value of the wrong type
    for f in dataclasses.fields(TransportConfig):
        if f.default_factory is dict and f.name in value and not isinstance(value[f.name], dict):  # type: ignore[comparison-overlap]
            raise ScenarioError(f"{key}.{f.name}: must be a table, got {value[f.name]!r}")
    return dict(value)


def _collective(w: dict[str, Any], hosts: int) -> CollectiveRun:
    """A collective workload ([workload] kind = "allreduce" ...)."""
    kind = w["kind"]
    known = TRAINING_KEYS if kind == "training" else COLLECTIVE_KEYS
    for key in w:
        if key != "kind" and key not in known:
            raise ScenarioError(
                f"workload.{key}: not a key of a {kind} workload (known: {', '.join(sorted(known))})"
            )
    placement = w.get("placement")
    if placement is not None:
        if not isinstance(placement, list):
            raise ScenarioError("workload.placement: must be a list of host indices, one per rank")
        placement = [_int(h, "workload.placement[]", 0) for h in placement]
        for h in placement:
            if h >= hosts:
                raise ScenarioError(f"workload.placement: host {h} is not in 0..{hosts - 1}")
    ranks = _int(w.get("ranks", len(placement) if placement else hosts), "workload.ranks", 2)
    if placement is None and ranks > hosts:
        raise ScenarioError(
            f"workload.ranks: {ranks} ranks need a host each; the fabric has {hosts}"
        )
    channels = _int(w.get("channels", 1), "workload.channels", 1)
    chunks = _int(w.get("chunks", 1), "workload.chunks", 1)
    qps = w.get("qps")
    try:
        if kind == "training":
            raw = w.get("collectives")
            if not isinstance(raw, list) or not raw:
                raise ScenarioError(
                    'workload.collectives: must be a non-empty list of {kind = "allreduce", size = ...}'
                )
            parts = []
            for i, item in enumerate(raw):
                k = f"workload.collectives[{i}]"
                if not isinstance(item, dict) or set(item) - {"kind", "size"}:
                    raise ScenarioError(f"{k}: must be a table with kind and size only")
                if item.get("kind") not in coll.KINDS:
                    raise ScenarioError(
                        f"{k}.kind: {item.get('kind')!r} is not one of {', '.join(coll.KINDS)}"
                    )
                parts.append((item["kind"], parse_size(item.get("size"), f"{k}.size")))
            straggler = w.get("straggler")
            c = coll.training(
                ranks,
                parts,
                _int(w.get("iterations", 1), "workload.iterations", 1),
                int(_num(w.get("compute_us", 0), "workload.compute_us") * US),
                None if straggler is None else _int(straggler, "workload.straggler", 0),
                int(_num(w.get("straggler_us", 0), "workload.straggler_us") * US),
                channels,
                chunks,
            )
        else:
            c = coll.build(
                kind, ranks, parse_size(w.get("size"), "workload.size"), channels, chunks
            )
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(f"workload.{exc}") from None
    return CollectiveRun(
        c,
        placement,
        parse_size(w.get("message", 1 << 20), "workload.message"),
        int(_num(w.get("start_us", 0), "workload.start_us") * US),
        None if qps is None else _int(qps, "workload.qps", 1),
        _settings(w.get("settings"), "workload.settings"),
    )


def _htsim(w: dict[str, Any], hosts: int, base_dir: Path | None) -> list[FlowSpec]:
    """A uet-htsim connection matrix ([workload] kind = "htsim", file = "x.cm")."""
    known = {"file", "message", "placement", "fractional_start"}
    for key in w:
        if key != "kind" and key not in known:
            raise ScenarioError(
                f"workload.{key}: not a key of a htsim workload (known: {', '.join(sorted(known))})"
            )
    name = w.get("file")
    if not isinstance(name, str) or not name:
        raise ScenarioError("workload.file: the path of a .cm file (relative to the scenario)")
    path = Path(name)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    frac = w.get("fractional_start", False)
    if not isinstance(frac, bool):
        raise ScenarioError(f"workload.fractional_start: expected true or false, got {frac!r}")
    placement = w.get("placement")
    if placement is not None:
        if not isinstance(placement, list):
            raise ScenarioError("workload.placement: must be a list of host indices, one per node")
        placement = [_int(h, "workload.placement[]", 0) for h in placement]
    try:
        cm = load_cm(path, frac)
        if placement is None and cm.nodes > hosts:
            raise ScenarioError(
                f"workload.file: {cm.nodes} nodes, but the fabric has {hosts} hosts"
            )
        return cm.flow_specs(parse_size(w.get("message", 1 << 20), "workload.message"), placement)
    except CmError as exc:
        raise ScenarioError(f"workload.file: {path}: {exc}") from None


def _ctl_ev(ctl: Any, profile: int, value: Any, key: str) -> int:
    """An EV of a [[controller]] entry (int or "0x13"), checked against the profile."""
    try:
        ev = int(value, 0) if isinstance(value, str) else value
        ctl.check_ev(profile, ev)
    except (ValueError, InvalidArgument) as exc:
        raise ScenarioError(f"{key}: {exc}") from None
    return int(ev)


def _schedule_ev_op(
    exp: Experiment, ctl: Any, a: ControllerAction, key: str, denied: set[tuple[int, int, str, int]]
) -> None:
    """Check and schedule a replace_ev (``ev`` -> ``new_ev``) or set_ev_state
    (``ev``, ``state`` GOOD or DENIED) action (the OCP controller operations)."""
    from ..transport.paths import EVState

    ev = _ctl_ev(ctl, a.profile, a.ev, f"{key}.ev")
    args: tuple[Any, ...]
    if a.action == "replace_ev":
        try:
            new = int(a.new_ev, 0) if isinstance(a.new_ev, str) else a.new_ev
            if not isinstance(new, int) or isinstance(new, bool) or not 0 <= new <= 0xFFFFFFFF:
                raise ValueError(f"must be a 32-bit EV, got {a.new_ev!r}")
        except ValueError as exc:
            raise ScenarioError(f"{key}.new_ev: {exc}") from None
        if new & 15 != ev & 15:
            raise ScenarioError(f"{key}.new_ev: {new:#x} is not in the plane of {ev:#x}")
        args = (ev, new)
        value = new
    else:
        if a.state not in ("GOOD", "DENIED"):
            raise ScenarioError(f'{key}.state: must be "GOOD" or "DENIED", got {a.state!r}')
        state = EVState[a.state]
        item = (a.host, a.profile, "ev", ev)
        (denied.add if state is EVState.DENIED else denied.discard)(item)
        args = (ev, state)
        value = ev

    def act(ctl: Any = ctl, a: ControllerAction = a, args: tuple[Any, ...] = args) -> None:
        getattr(ctl, a.action)(a.profile, *args, exp.sim.now)
        exp.fabric.metrics.record_fault(
            f"controller_{a.action}", f"h{a.host}", profile=a.profile, value=value
        )

    exp.sim.schedule(int(a.at_us * US), act)


def _apply_controller(exp: Experiment, actions: list[ControllerAction]) -> None:
    """Check and schedule the ``[[controller]]`` actions (errors name the key)."""
    denied: set[tuple[int, int, str, int]] = set()
    order = sorted(range(len(actions)), key=lambda i: actions[i].at_us)
    for i in order:
        a = actions[i]
        key = f"controller[{i}]"
        if a.action not in CONTROLLER_ACTIONS:
            raise ScenarioError(
                f"{key}.action: {a.action!r} is not one of {', '.join(CONTROLLER_ACTIONS)}"
            )
        _num(a.at_us, f"{key}.at_us")
        hosts = exp.spec.hosts
        if not isinstance(a.host, int) or not 0 <= a.host < hosts:
            raise ScenarioError(
                f"{key}.host: must be a host index in 0..{hosts - 1}, got {a.host!r}"
            )
        ctl = exp.controller(a.host)
        try:
            ctl.denied(a.profile)
        except InvalidArgument:
            raise ScenarioError(
                f"{key}.profile: no EV profile {a.profile!r} (0 is [transport]'s, "
                "i+1 is workload.flows[i].settings.ev_profile)"
            ) from None
        if a.action in ("replace_ev", "set_ev_state"):
            _schedule_ev_op(exp, ctl, a, key, denied)
            continue
        kind, what = a.action.split("_")
        if what == "ev":
            ev = a.ev
            try:
                ev = int(ev, 0) if isinstance(ev, str) else ev
                ctl.check_ev(a.profile, ev)
            except (ValueError, InvalidArgument) as exc:
                raise ScenarioError(f"{key}.ev: {exc}") from None
            target = ev
        else:
            try:
                ctl.check_plane(a.profile, a.plane)
            except InvalidArgument as exc:
                raise ScenarioError(f"{key}.plane: {exc}") from None
            target = a.plane
        item = (a.host, a.profile, what, target)
        if kind == "allow" and item not in denied:
            raise ScenarioError(f"{key}.action: allow_{what} of something not denied before it")
        (denied.add if kind == "deny" else denied.discard)(item)
        at = int(a.at_us * US)

        def act(ctl: Any = ctl, a: ControllerAction = a, target: int = target) -> None:
            getattr(ctl, a.action)(a.profile, target, exp.sim.now)
            exp.fabric.metrics.record_fault(
                f"controller_{a.action}", f"h{a.host}", profile=a.profile, value=target
            )

        exp.sim.schedule(at, act)


_CM_US = {"interval_us": "interval_ps", "start_us": "start_ps", "stop_us": "stop_ps"}
_CM_KEYS = (
    "t1_subset",
    "t0_probes",
    "t1_probes",
    "window",
    "fail_rate",
    "lossy_rate",
    "deny_lossy",
)


def _clustermapper(raw: Any) -> ClustermapperConfig | None:
    """The ``[clustermapper]`` table: self-probe fault localisation (openmrc.clustermapper)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ScenarioError("clustermapper: must be a table")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _CM_US:
            kwargs[_CM_US[key]] = int(_num(value, f"clustermapper.{key}") * US)
        elif key in _CM_KEYS:
            kwargs[key] = value
        else:
            known = ", ".join(sorted([*_CM_US, *_CM_KEYS]))
            raise ScenarioError(f"clustermapper.{key}: unknown key (known: {known})")
    cfg = ClustermapperConfig(**kwargs)
    try:
        cfg.validate()
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    return cfg


def _workload(w: dict[str, Any], hosts: int, seed: int) -> list[FlowSpec]:
    kind = w.get("kind")
    known = {
        "permutation": {"size", "message"},
        "shift": {"size", "message", "shift"},
        "incast": {"size", "message", "senders", "target"},
        "single": {"size", "message", "src", "dst"},
        "all_to_all": {"size", "message", "hosts"},
        "flows": {"flows"},
    }
    if kind not in known:
        raise ScenarioError(
            f"workload.kind: {kind!r} is not one of "
            f"{', '.join([*known, *coll.KINDS, 'training', 'htsim'])}"
        )
    for key in w:
        if key != "kind" and key not in known[kind]:
            raise ScenarioError(
                f"workload.{key}: not a key of a {kind} workload (known: {', '.join(sorted(known[kind]))})"
            )
    if kind == "flows":
        raw = w.get("flows")
        if not isinstance(raw, list) or not raw:
            raise ScenarioError(
                "workload.flows: must be a non-empty list of {src, dst, size[, start_us, message]}"
            )
        out = []
        for i, item in enumerate(raw):
            k = f"workload.flows[{i}]"
            if not isinstance(item, dict):
                raise ScenarioError(f"{k}: must be a table")
            if "ev_profile" in item:
                raise ScenarioError(
                    f"{k}.ev_profile: no longer a flow key; give the flow's EV profile in its"
                    f" settings: {k}.settings.ev_profile = {{...}}"
                )
            extra = set(item) - FLOW_KEYS
            if extra:
                raise ScenarioError(
                    f"{k}.{sorted(extra)[0]}: unknown key (known: {', '.join(sorted(FLOW_KEYS))})"
                )
            after = item.get("after", [])
            if not isinstance(after, list):
                raise ScenarioError(f"{k}.after: must be a list of flow indices")
            deps = tuple(_int(d, f"{k}.after[]", 0) for d in after)
            for d in deps:
                if d >= len(raw) or d == i:
                    raise ScenarioError(
                        f"{k}.after: {d} is not another flow index (0..{len(raw) - 1})"
                    )
            qps = item.get("qps")
            raw_settings = item.get("settings")
            profile = None
            if isinstance(raw_settings, dict) and "ev_profile" in raw_settings:
                raw_settings = dict(
                    raw_settings
                )  # the flow's own EV profile, not a transport field
                try:
                    profile = ev_profile_from_dict(
                        raw_settings.pop("ev_profile"), f"{k}.settings.ev_profile"
                    )
                except InvalidArgument as exc:
                    raise ScenarioError(str(exc)) from None
                raw_settings = raw_settings or None  # nothing but the EV profile
            settings = _settings(raw_settings, f"{k}.settings")
            out.append(
                FlowSpec(
                    _int(item.get("src"), f"{k}.src", 0),
                    _int(item.get("dst"), f"{k}.dst", 0),
                    parse_size(item.get("size"), f"{k}.size"),
                    int(_num(item.get("start_us", 0), f"{k}.start_us") * US),
                    parse_size(item.get("message", 1 << 20), f"{k}.message"),
                    name=f"{item.get('src')}->{item.get('dst')}#{i}",
                    ev_profile=profile,
                    deps=deps,
                    gap_ps=int(_num(item.get("gap_us", 0), f"{k}.gap_us") * US),
                    qps=None if qps is None else _int(qps, f"{k}.qps", 1),
                    settings=settings,
                )
            )
        try:
            check_dependencies(out)
        except ValueError as exc:
            raise ScenarioError(f"workload.flows: {exc}") from None
        return out
    size = parse_size(w.get("size", 2 << 20), "workload.size")
    message = parse_size(w.get("message", 1 << 20), "workload.message")
    try:
        if kind == "permutation":
            return permutation(hosts, size, random.Random(seed), message)
        if kind == "shift":
            return shifted_permutation(
                hosts, size, _int(w.get("shift", 1), "workload.shift", 1), message
            )
        if kind == "incast":
            senders = w.get("senders")
            if not isinstance(senders, list) or not senders:
                raise ScenarioError("workload.senders: must be a non-empty list of host indices")
            return incast(
                [_int(s, "workload.senders[]", 0) for s in senders],
                _int(w.get("target"), "workload.target", 0),
                size,
                message,
            )
        if kind == "single":
            return single(
                _int(w.get("src"), "workload.src", 0),
                _int(w.get("dst"), "workload.dst", 0),
                size,
                message,
            )
        members = w.get("hosts", list(range(hosts)))
        return all_to_all([_int(h, "workload.hosts[]", 0) for h in members], size, message)
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(f"workload: {exc}") from None


def parse(
    data: dict[str, Any], name: str = "", base_dir: Path | None = None, build: bool = True
) -> Scenario:
    """Validate a scenario given as a dict (the parsed TOML/JSON).

    ``base_dir``: where relative file names (a .cm workload) are looked up.
    ``build``: a packet-level scenario is checked by building its experiment once
    (fault targets, switch settings, the workload on the fabric), which is most of
    a large run's set-up; a caller that builds it next anyway (``openmrc run``)
    passes False and gets the same errors from :meth:`Scenario.build`.
    """
    if not isinstance(data, dict):
        raise ScenarioError("scenario: the top level must be a table")
    allowed = {
        "seed",
        "fabric",
        "switches",
        "transport",
        "workload",
        "faults",
        "controller",
        "clustermapper",
        "run",
        "name",
        "description",
        "job",
        "jobs",
        "failures",
    }
    for key in data:
        if key == "campaign":
            raise ScenarioError(
                "campaign: a campaign scenario; run it with 'openmrc campaign' "
                "(openmrc run simulates one iteration of a job without the table)"
            )
        if key not in allowed:
            raise ScenarioError(
                f"{key}: unknown top-level key (known: {', '.join(sorted(allowed))})"
            )
    seed = _int(data.get("seed", 1), "seed", 0)
    spec = _fill(ClosSpec, _table(data, "fabric"), "fabric")
    try:
        spec.validate()
    except ValueError as exc:
        raise ScenarioError(f"fabric: {exc}") from None
    switches = _table(data, "switches")
    _fill(FabricConfig, switches, "switches")  # names unknown keys and wrong types
    transport = _fill(TransportConfig, _table(data, "transport"), "transport")
    try:
        transport.attr(spec, base_rtt_ps(spec, transport.mtu))
    except ValueError as exc:
        raise ScenarioError(f"transport: {exc}") from None
    workload = _table(data, "workload")
    try:
        configs: list[JobConfig | FileJob] = list(parse_jobs(data))
        if workload.get("kind") in ("aicb", "chakra"):
            configs.append(parse_file_workload(workload, base_dir))
            workload = {**workload, "kind": "jobs"}
        from .jobrun import placed

        jobs = placed(configs, place(configs, spec))
    except JobError as exc:
        raise ScenarioError(str(exc)) from None
    if not workload and jobs:
        workload = {"kind": "jobs"}
    if not workload:
        raise ScenarioError(
            'workload: missing (e.g. [workload] kind = "permutation", size = "8MiB")'
        )
    collectives = []
    flows: list[FlowSpec] = []
    if workload.get("kind") == "jobs":
        pass
    elif workload.get("kind") in (*coll.KINDS, "training"):
        collectives.append(_collective(workload, spec.hosts))
    elif workload.get("kind") == "htsim":
        flows = _htsim(workload, spec.hosts, base_dir)
    else:
        flows = _workload(workload, spec.hosts, seed)
    for i, flow in enumerate(flows):
        try:
            flow.validate(spec.hosts)
        except ValueError as exc:
            raise ScenarioError(f"workload (flow {i}): {exc}") from None
    raw_faults = data.get("faults", [])
    if not isinstance(raw_faults, list):
        raise ScenarioError("faults: must be an array of tables ([[faults]])")
    faults = []
    for i, item in enumerate(raw_faults):
        if not isinstance(item, dict):
            raise ScenarioError(f"faults[{i}]: must be a table")
        if "at_us" not in item or "kind" not in item:
            raise ScenarioError(f"faults[{i}]: needs at_us and kind")
        fault = _fill(FaultSpec, item, f"faults[{i}]")
        _num(fault.at_us, f"faults[{i}].at_us")
        faults.append(fault)
    drawn = _draw_failures(data, spec, seed, jobs)
    if drawn is not None:
        for i, d in enumerate(drawn["drawn"]):
            faults.append(_fill(FaultSpec, d.fault(), f"failures (drawn fault {i})"))
        drawn["drawn"] = [{**d.fault(), "component": d.component} for d in drawn["drawn"]]
    raw_ctl = data.get("controller", [])
    if not isinstance(raw_ctl, list):
        raise ScenarioError("controller: must be an array of tables ([[controller]])")
    controller = []
    for i, item in enumerate(raw_ctl):
        if not isinstance(item, dict):
            raise ScenarioError(f"controller[{i}]: must be a table")
        for need in ("at_us", "host", "action"):
            if need not in item:
                raise ScenarioError(f"controller[{i}].{need}: required")
        controller.append(_fill(ControllerAction, item, f"controller[{i}]"))
    clustermapper = _clustermapper(data.get("clustermapper"))
    run = _table(data, "run")
    for key in run:
        if key not in {
            "until_us",
            "sample_us",
            "payloads",
            "queue_sample_us",
            "steady_skip",
            "mode",
        }:
            raise ScenarioError(
                f"run.{key}: unknown key "
                "(known: mode, payloads, queue_sample_us, sample_us, steady_skip, until_us)"
            )
    mode = run.get("mode", "packet")
    if mode not in ("packet", "flow"):
        raise ScenarioError(f"run.mode: must be 'packet' or 'flow', got {mode!r}")
    if mode == "flow" and (flows or collectives or not jobs):
        raise ScenarioError(
            "run.mode: the flow-level model runs training jobs ([job] or [[jobs]]) only, "
            "without a [workload]"
        )
    until = run.get("until_us")
    if until is not None:
        _num(until, "run.until_us", 0.001)
    sample = _num(run.get("sample_us", 10.0), "run.sample_us", 0.001)
    payloads = run.get("payloads", False)
    if not isinstance(payloads, bool):
        raise ScenarioError(f"run.payloads: expected true or false, got {payloads!r}")
    qs = run.get("queue_sample_us")
    if qs is not None:
        _num(qs, "run.queue_sample_us", 0.001)
    steady_skip = _num(run.get("steady_skip", 0.1), "run.steady_skip", 0.0, 0.99)
    scenario = Scenario(
        spec,
        switches,
        transport,
        flows,
        faults,
        seed,
        until,
        sample,
        payloads,
        name,
        qs,
        controller=controller,
        clustermapper=clustermapper,
        collectives=collectives,
        steady_skip=steady_skip,
        jobs=jobs,
        mode=mode,
        failures=drawn,
    )
    if mode == "packet":
        if build:
            scenario.build()  # resolve fault targets and switch settings now, clearly
    else:
        from .jobrun import fluid_model

        try:
            fluid_model(spec, transport, seed, jobs, faults)
        except (JobError, ValueError) as exc:
            raise ScenarioError(str(exc)) from None
    return scenario


def _draw_failures(
    data: dict[str, Any], spec: ClosSpec, seed: int, jobs: list[Any]
) -> dict[str, Any] | None:
    """``[failures]``: random faults from component failure rates (openmrc.pipeline.failures)."""
    if "failures" not in data:
        return None
    from .failures import FailureError, draw, expected, parse_rates

    try:
        rates = parse_rates(data["failures"])
    except FailureError as exc:
        raise ScenarioError(str(exc)) from None
    window = rates.window_us
    if window <= 0:
        if not jobs:
            raise ScenarioError(
                "failures.window_us: needed without a job (the default is the jobs' "
                "iterations' compute critical path)"
            )
        window = max(j.start_us + j.graph.critical_compute_ps() / US for j in jobs)
    return {
        "scale": rates.scale,
        "window_us": round(window, 6),
        "expected": expected(rates, spec, window),
        "drawn": draw(rates, spec, window, seed),
    }


def read_data(path: str | Path) -> dict[str, Any]:
    """The parsed TOML/JSON of a scenario file, not yet validated (errors name the file)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read ({exc.strerror})") from None
    kind = "JSON" if p.suffix == ".json" else "TOML"
    depth = nesting_depth(text)
    if depth > MAX_NESTING:
        raise ScenarioError(
            f"{p}: arrays and tables nested {depth} deep; at most {MAX_NESTING} levels"
        )
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"{p}: not valid {kind}: {exc}") from None
    except RecursionError:
        raise ScenarioError(f"{p}: arrays and tables nested too deep") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{p}: the top level must be a table")
    return data


#: The deepest nesting of arrays and inline tables a scenario may have: the
#: parsers recurse per level (Python's limit is about 1,000), and no scenario
#: needs more than a handful.
MAX_NESTING = 64


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in TOML or JSON ``text``, outside strings and
    comments (an upper bound: a TOML table header counts as one level)."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else ch
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                i += 2 if text[i] == "\\" and quote[0] == '"' else 1
            i += len(quote)
            continue
        if ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file (.toml or .json)."""
    p = Path(path)
    return parse(read_data(p), name=p.stem, base_dir=p.parent)
