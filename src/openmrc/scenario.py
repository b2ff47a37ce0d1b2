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
                                # message, ev_profile = {EVProfile fields} (per flow)
    size = "8MiB"
    [[faults]]
    at_us = 60
    kind = "link_down"          # link_down | link_up | link_silent | link_loss | flap |
    target = "p2t0x1-p2t1x3"    # switch_down | switch_blackhole | switch_up |
                                # nic_port_down | nic_port_up |
                                # ev_loss (evs = [...], probability)
    [[controller]]              # a host's MRC controller, at a given time:
    at_us = 80                  # deny_ev | allow_ev | deny_plane | allow_plane
    host = 0                    # on EV profile `profile` (0: [transport]'s,
    action = "deny_plane"       # i+1: workload.flows[i].ev_profile); with
    plane = 3                   # `plane` or `ev` (int or "0x13")
    [clustermapper]             # self-probe fault localisation (sim.clustermapper):
    interval_us = 20            # t1_subset, t0_probes, t1_probes, window, fail_rate,
    deny_lossy = false          # lossy_rate, start_us, stop_us; results: "localised"
    [run]
    until_us = 1000             # optional cap
    sample_us = 10              # goodput sampling
    queue_sample_us = 1         # optional: record queue depths
    payloads = false            # real bytes, checked at the end

Every key is checked: an unknown key, a wrong type or an impossible value is a
:class:`ScenarioError` that names the key (``workload.size: ...``).
"""

from __future__ import annotations

import dataclasses
import json
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import units
from .sim.clustermapper import ClustermapperConfig
from .sim.config import FabricConfig
from .sim.experiment import Experiment, Result, TransportConfig, base_rtt_ps
from .topology import ClosSpec
from .transport.attrs import ev_profile_from_dict
from .transport.errors import InvalidArgument
from .workloads import FlowSpec, all_to_all, incast, permutation, shifted_permutation, single

US = 1_000_000


class ScenarioError(ValueError):
    """A scenario file is wrong; the message names the key and the reason."""


def parse_size(value: Any, key: str) -> int:
    """Bytes from an int or a string like ``"8MiB"``, ``"64k"``, ``"1.5G"`` (see openmrc.units)."""
    try:
        return units.parse_size(value, key)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None


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


@dataclass
class ControllerAction:
    """One timed action of a host's MRC controller (``[[controller]]``)."""

    at_us: float
    host: int
    action: str
    profile: int = 0
    ev: Any = None
    plane: int = -1


CONTROLLER_ACTIONS = ("deny_ev", "allow_ev", "deny_plane", "allow_plane")


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

    def build(self) -> Experiment:
        """The experiment this scenario describes (not yet run)."""
        rtt = base_rtt_ps(self.spec, self.transport.mtu)
        fc = {"base_rtt_ps": rtt, "ecn_lasthop": False, **self.switches}
        try:
            cfg = FabricConfig(**fc)
            cfg.validate()
        except (TypeError, ValueError) as exc:
            raise ScenarioError(f"switches: {exc}") from None
        exp = Experiment(
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
        exp.add_flows(self.flows)
        for i, f in enumerate(self.faults):
            _apply_fault(exp, f, f"faults[{i}]")
        _apply_controller(exp, self.controller)
        if self.clustermapper is not None:
            exp.enable_clustermapper(self.clustermapper)
        return exp

    def run(self) -> Result:
        """Build and run; the result of the experiment."""
        exp = self.build()
        return exp.run(None if self.until_us is None else int(self.until_us * US))


def _apply_fault(exp: Experiment, f: FaultSpec, key: str) -> None:
    at = int(f.at_us * US)
    inj = exp.faults
    links = exp.fabric.links
    switches = exp.fabric.switches
    hosts = exp.spec.hosts
    if f.kind not in FAULT_KINDS:
        raise ScenarioError(
            f"{key}.kind: {f.kind!r} is not one of {', '.join(sorted(FAULT_KINDS))}"
        )
    if f.kind.startswith("link") or f.kind == "flap":
        if f.target not in links:
            raise ScenarioError(
                f"{key}.target: no link {f.target!r} (links look like 'p0t0x1-p0t1x3' or 'h5-p0t0x1')"
            )
        if f.kind == "link_down":
            inj.link_down(f.target, at_ps=at)
        elif f.kind == "link_up":
            inj.link_up(f.target, at_ps=at)
        elif f.kind == "link_silent":
            inj.link_silent(f.target, True, at_ps=at)
        elif f.kind == "link_loss":
            _num(f.probability, f"{key}.probability", 0.0, 1.0)
            inj.link_loss(f.target, f.probability, at_ps=at)
        else:
            if f.period_us <= 0 or not 0 < f.duty < 1 or f.until_us <= f.at_us:
                raise ScenarioError(
                    f"{key}: flap needs period_us > 0, 0 < duty < 1 and until_us > at_us"
                )
            inj.flap(f.target, at, int(f.period_us * US), f.duty, int(f.until_us * US))
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
        if f.target not in switches:
            raise ScenarioError(
                f"{key}.target: no switch {f.target!r} (switches look like 'p0t1x3')"
            )
        getattr(inj, f.kind)(f.target, at_ps=at)
    else:
        if not 0 <= f.host < hosts:
            raise ScenarioError(f"{key}.host: must be a host index in 0..{hosts - 1}, got {f.host}")
        if not 0 <= f.plane < exp.spec.planes:
            raise ScenarioError(f"{key}.plane: must be 0..{exp.spec.planes - 1}, got {f.plane}")
        getattr(inj, f.kind)(f.host, f.plane, at_ps=at)


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
                "i+1 is workload.flows[i].ev_profile)"
            ) from None
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
    """The ``[clustermapper]`` table: self-probe fault localisation (sim.clustermapper)."""
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
        raise ScenarioError(f"workload.kind: {kind!r} is not one of {', '.join(known)}")
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
            extra = set(item) - {"src", "dst", "size", "start_us", "message", "ev_profile"}
            if extra:
                raise ScenarioError(f"{k}.{sorted(extra)[0]}: unknown key")
            profile = None
            if "ev_profile" in item:
                try:
                    profile = ev_profile_from_dict(item["ev_profile"], f"{k}.ev_profile")
                except InvalidArgument as exc:
                    raise ScenarioError(str(exc)) from None
            out.append(
                FlowSpec(
                    _int(item.get("src"), f"{k}.src", 0),
                    _int(item.get("dst"), f"{k}.dst", 0),
                    parse_size(item.get("size"), f"{k}.size"),
                    int(_num(item.get("start_us", 0), f"{k}.start_us") * US),
                    parse_size(item.get("message", 1 << 20), f"{k}.message"),
                    name=f"{item.get('src')}->{item.get('dst')}#{i}",
                    ev_profile=profile,
                )
            )
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


def parse(data: dict[str, Any], name: str = "") -> Scenario:
    """Validate a scenario given as a dict (the parsed TOML/JSON)."""
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
    }
    for key in data:
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
    if not workload:
        raise ScenarioError(
            'workload: missing (e.g. [workload] kind = "permutation", size = "8MiB")'
        )
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
        if key not in {"until_us", "sample_us", "payloads", "queue_sample_us"}:
            raise ScenarioError(
                f"run.{key}: unknown key (known: payloads, queue_sample_us, sample_us, until_us)"
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
    scenario = Scenario(
        spec, switches, transport, flows, faults, seed, until, sample, payloads, name, qs,
        controller, clustermapper,
    )  # fmt: skip
    scenario.build()  # resolve fault targets and switch settings now, with clear errors
    return scenario


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file (.toml or .json)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ScenarioError(
            f"{p}: not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {exc}"
        ) from None
    return parse(data, name=p.stem)
