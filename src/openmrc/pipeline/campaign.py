"""A training campaign: one job for hours of its own time, failing and repairing at real rates.

``openmrc campaign SCENARIO --hours H`` answers "what do failures cost my
training job over a day", per transport.  The scenario is a flow-level job
scenario (``run.mode = "flow"``, one job of one iteration); its components
fail as Poisson processes at the ``[failures]`` rates (unscaled by default:
:mod:`openmrc.pipeline.failures`) over the campaign's ``hours``, and come back
after the repair time of their kind; ``[[faults]]`` entries are hand-given
failures at campaign time ``at_us``.  docs/campaign.md gives each parameter.

How it runs (:class:`Campaign`): the job's iterations follow each other.  The
fabric's *state* is the set of its parts (host links ``(h, p)``, fabric links
``(p, a, k)``) down, and known down by the transport.  An iteration that no
failure or repair touches takes the step time of its state: measured once per
state (one flow-level iteration from that state), then reused, so a day of
iterations between changes is arithmetic.  An iteration a change touches (the
change happens during it, or before it but the transport has not acted on it
yet: MRC's detection, RoCE's routing convergence) is simulated with the change
at its offset, unless no part the job sees changes (a part already down fails
again, a part held down by another failure or left behind by a restart comes
back): that iteration is its state's.  Times are integer picoseconds, so reuse
and re-simulation give the same campaign bit for bit.

An iteration that never ends (a RoCE QP whose retries ran out: NCCL aborts)
restarts the job: the work since the last checkpoint is lost, the restart
takes ``restart_s``, and the job resumes on hardware that works (the
scheduler's health check swaps in spares): the parts down at that moment no
longer touch it, even before their repair.  Checkpoints are taken at the end
of the first iteration ``checkpoint_s`` or more after the last one (or the
resume).
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..flow.faults import expand
from ..flow.model import FluidFault, FluidModel
from ..topology import ClosSpec
from .campaign_fold import Folded, FoldedJob, FoldError, folded_job
from .failures import FailureError, FailureRates, components, parse_rates

PS_PER_S = 1_000_000_000_000
PS_PER_HOUR = 3600 * PS_PER_S

#: repair time per component kind, seconds (docs/campaign.md: our choices, no source
#: gives repair times for GPU fabrics): a cable or an optic is swapped by a technician
#: within a shift (4 h); a NIC port means re-seating or swapping the NIC (4 h); a switch
#: is replaced by a spare and configured (12 h).
DEFAULT_REPAIR_S: dict[str, float] = {
    "link": 4 * 3600.0,
    "optic": 4 * 3600.0,
    "switch": 12 * 3600.0,
    "nic_port": 4 * 3600.0,
}
#: checkpoint interval and restart cost, seconds (our choices, docs/campaign.md).
DEFAULT_CHECKPOINT_S = 1800.0
DEFAULT_RESTART_S = 600.0

KEYS = (
    "hours",
    "seed",
    "transports",
    "checkpoint_s",
    "restart_s",
    "link_repair_s",
    "optic_repair_s",
    "switch_repair_s",
    "nic_port_repair_s",
    "fold",
    "fold_margin",
    "fold_groups",
    "fold_replicas",
)

#: fault kinds a hand-given campaign failure may have.
CAMPAIGN_KINDS = (
    "link_down",
    "link_up",
    "switch_down",
    "switch_up",
    "nic_port_down",
    "nic_port_up",
)

#: an element of the fabric: ("h", host, plane) a host link, ("f", plane, t0, t1) a T0-T1 link.
Element = tuple[Any, ...]
State = tuple[Element, ...]


class CampaignError(ValueError):
    """A bad campaign (the message names the field and the reason)."""


@dataclass(frozen=True)
class CampaignConfig:
    """The ``[campaign]`` table (module doc; docs/campaign.md)."""

    hours: float = 24.0
    seed: int | None = None
    transports: tuple[str, ...] = ("mrc", "roce")
    checkpoint_s: float = DEFAULT_CHECKPOINT_S
    restart_s: float = DEFAULT_RESTART_S
    repair_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_REPAIR_S))
    #: run each state folded (openmrc.pipeline.campaign_fold), ``fold_margin`` blocks
    #: either side of the blocks a part down touches
    fold: bool = False
    fold_margin: int = 1
    #: with ``fold``: run the groups of parts that lie apart each alone, the slowest
    #: group's step the iteration's (an approximation, docs/campaign.md)
    fold_groups: bool = False
    #: with ``fold``: MRC's kept blocks run representative replicas (exact; docs/campaign.md)
    fold_replicas: bool = True


def parse_config(raw: Any) -> CampaignConfig:
    """The ``[campaign]`` table, checked: one CampaignError naming the first bad field."""
    if not isinstance(raw, dict):
        raise CampaignError("campaign: must be a table")
    for k in raw:
        if k not in KEYS:
            raise CampaignError(f"campaign.{k}: unknown key (known: {', '.join(KEYS)})")
    out: dict[str, Any] = {}
    repair = dict(DEFAULT_REPAIR_S)
    for k, v in raw.items():
        if k == "seed":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise CampaignError(f"campaign.seed: must be an integer >= 0, got {v!r}")
            out["seed"] = v
        elif k == "transports":
            if not isinstance(v, list) or not v or any(t not in ("mrc", "roce") for t in v):
                raise CampaignError(
                    f"campaign.transports: must be a list of 'mrc' and 'roce', got {v!r}"
                )
            if len(set(v)) != len(v):
                raise CampaignError(f"campaign.transports: {v!r} names a transport twice")
            out["transports"] = tuple(v)
        elif k == "fold":
            if not isinstance(v, bool):
                raise CampaignError(f"campaign.fold: must be true or false, got {v!r}")
            out["fold"] = v
        elif k in ("fold_groups", "fold_replicas"):
            if not isinstance(v, bool):
                raise CampaignError(f"campaign.{k}: must be true or false, got {v!r}")
            out[k] = v
        elif k == "fold_margin":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise CampaignError(f"campaign.fold_margin: must be an integer >= 0, got {v!r}")
            out["fold_margin"] = v
        else:
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise CampaignError(f"campaign.{k}: must be a number, got {v!r}")
            low_ok = v > 0 if k in ("hours", "checkpoint_s") else v >= 0
            if not low_ok:
                bound = "> 0" if k in ("hours", "checkpoint_s") else ">= 0"
                raise CampaignError(f"campaign.{k}: must be {bound}, got {v!r}")
            if k.endswith("_repair_s"):
                repair[k[: -len("_repair_s")]] = float(v)
            else:
                out[k] = float(v)
    if out.get("fold_groups") and not out.get("fold"):
        raise CampaignError("campaign.fold_groups: needs campaign.fold = true")
    return CampaignConfig(**out, repair_s=repair)


@dataclass(frozen=True)
class Failure:
    """One failure of a campaign: what failed, when, when it is back (None: never)."""

    index: int
    #: its component kind: link, optic, switch, nic_port (a hand-given one: link, switch, nic_port)
    kind: str
    name: str
    down_ps: int
    up_ps: int | None
    #: the flow-level fault that takes it down (``at_ps`` unused)
    fault: FluidFault


@dataclass(frozen=True)
class Event:
    """A failure (``up`` False) or its repair at ``at_ps`` of campaign time."""

    at_ps: int
    up: bool
    failure: int


def _fault_of(kind: str, target: str, host: int, plane: int) -> FluidFault:
    fk = {"switch": "switch", "nic_port": "nic_port"}.get(kind, "link")
    return FluidFault(0, f"{fk}_down", target, host, plane)


def draw_failures(
    rates: FailureRates, spec: ClosSpec, hours: float, seed: int, repair_s: dict[str, float]
) -> list[Failure]:
    """The failures in ``[0, hours)``, each with its repair (``repair_s`` per kind; 0: none).

    Every component fails as a Poisson process of rate ``per_hour x scale`` (as
    :func:`openmrc.pipeline.failures.draw`); a part already down does not fail
    again.  Same rates, fabric, hours and seed: the same failures.
    """
    rng = random.Random(f"openmrc-campaign:{seed}")
    window = hours * PS_PER_HOUR
    drawn: list[tuple[int, int, str, tuple[str, str, int, int]]] = []
    order = 0
    for cls, items in components(spec).items():
        rate = len(items) * getattr(rates, f"{cls}_per_hour") * rates.scale / PS_PER_HOUR
        if rate <= 0 or not items:
            continue
        t = rng.expovariate(rate)
        while t < window:
            drawn.append((round(t), order, cls, items[rng.randrange(len(items))]))
            order += 1
            t += rng.expovariate(rate)
    drawn.sort()
    back: dict[str, float] = {}
    out: list[Failure] = []
    for at, _o, cls, (name, target, host, plane) in drawn:
        element = target or name
        if back.get(element, -1.0) > at:
            continue  # already down
        rep = repair_s.get(cls, 0.0)
        up = at + round(rep * PS_PER_S) if rep > 0 else None
        back[element] = math.inf if up is None else float(up)
        out.append(Failure(len(out), cls, name, at, up, _fault_of(cls, target, host, plane)))
    return out


def scripted_failures(faults: list[Any], spec: ClosSpec, start: int = 0) -> list[Failure]:
    """Hand-given failures: a scenario's ``[[faults]]`` at campaign time ``at_us``.

    A ``*_down`` entry is a failure; a later ``*_up`` of the same part is its
    repair (else it stays down).  Group entries (``links = "fabric"``) are one
    failure per part.
    """
    singles: list[tuple[int, int, FluidFault]] = []
    for i, f in enumerate(faults):
        if f.kind not in CAMPAIGN_KINDS:
            raise CampaignError(
                f"faults[{i}].kind: a campaign takes {', '.join(CAMPAIGN_KINDS)}, not {f.kind!r}"
            )
        for x in expand(f, spec, f"faults[{i}]"):
            singles.append((x.at_ps, len(singles), x))
    singles.sort(key=lambda s: (s[0], s[1]))
    open_: dict[tuple[str, str, int, int], int] = {}
    made: list[dict[str, Any]] = []
    for at, _o, x in singles:
        kind = x.kind.rsplit("_", 1)[0]
        part = (kind, x.target, x.host, x.plane)
        name = x.target or f"h{x.host}/p{x.plane}"
        if x.kind.endswith("_down"):
            if part in open_:
                continue  # already down
            open_[part] = len(made)
            made.append({"kind": kind, "name": name, "down": at, "up": None, "fault": x})
        elif part in open_:
            made[open_.pop(part)]["up"] = at
    return [
        Failure(
            start + i,
            m["kind"],
            m["name"],
            m["down"],
            m["up"],
            replace(m["fault"], at_ps=0),
        )
        for i, m in enumerate(made)
    ]


def events_of(failures: list[Failure]) -> list[Event]:
    """Every failure's down and up, in time order (a tie: the lower failure index first)."""
    out = [Event(f.down_ps, False, f.index) for f in failures]
    out += [Event(f.up_ps, True, f.index) for f in failures if f.up_ps is not None]
    out.sort(key=lambda e: (e.at_ps, e.failure, e.up))
    return out


# ----- one transport's campaign ---------------------------------------------------------
def state_key(view: frozenset[Element]) -> State:
    """The key a state's step time is kept under: every part down the job sees."""
    return tuple(sorted(view, key=repr))


@dataclass
class Segment:
    """``count`` iterations in a row from ``start_ps``, each ``step_ps`` long (None: it
    never ended, the job restarted), in the state ``state``; ``touched``: a change
    fell into it (simulated on its own)."""

    start_ps: int
    count: int
    step_ps: int | None
    state: int
    touched: bool


@dataclass
class TransportCampaign:
    """What one transport's campaign measured (:meth:`Campaign.run`)."""

    transport: str
    base_step_ps: int
    span_ps: int = 0
    useful_iterations: int = 0
    iterations: int = 0
    segments: list[Segment] = field(default_factory=list)
    #: the states met: index -> (parts down, step time ps or None)
    states: list[tuple[State, int | None]] = field(default_factory=list)
    #: time lost (ps) per failure kind, and per failure index
    lost_by_kind: dict[str, int] = field(default_factory=dict)
    lost_by_failure: dict[int, int] = field(default_factory=dict)
    #: restarts: (error time, resume time, lost ps, failures blamed)
    restarts: list[tuple[int, int, int, list[int]]] = field(default_factory=list)
    simulated: int = 0
    wall_s: float = 0.0


class Campaign:
    """One job's campaign for one transport (module doc).

    ``make_model()`` builds the flow-level model of the job alone (one iteration,
    its transport), ``reuse`` False simulates every iteration (the check of the
    state-keyed reuse), ``key`` is the state's cache key (:func:`state_key`).
    ``folded(parts)``, when given, builds the model of an iteration whose parts down
    and changing are ``parts`` folded (:mod:`openmrc.pipeline.campaign_fold`), with
    the map of parts onto its fabric (None: it does not fold, ``make_model`` builds
    the whole job); ``probe`` answers what the campaign asks of the fabric (a
    failure's parts, detection and convergence), else a ``make_model()``.
    """

    def __init__(
        self,
        transport: str,
        make_model: Callable[[], FluidModel],
        failures: list[Failure],
        hours: float,
        checkpoint_s: float = DEFAULT_CHECKPOINT_S,
        restart_s: float = DEFAULT_RESTART_S,
        *,
        reuse: bool = True,
        key: Callable[[frozenset[Element]], State] = state_key,
        folded: Callable[[frozenset[Element]], Folded | None] | None = None,
        probe: FluidModel | None = None,
        groups: Callable[[frozenset[Element]], list[frozenset[Element]]] | None = None,
    ) -> None:
        self.transport = transport
        self.make_model = make_model
        self.failures = failures
        self.events = events_of(failures)
        self.end_ps = round(hours * PS_PER_HOUR)
        self.checkpoint_ps = round(checkpoint_s * PS_PER_S)
        self.restart_ps = round(restart_s * PS_PER_S)
        self.reuse = reuse
        self.key = key
        self.folded = folded
        self.groups = groups
        if probe is None:
            probe = make_model()
        self._parts: list[frozenset[Element]] = []
        for f in failures:
            hl, fl = probe.parts(f.fault)
            self._parts.append(
                frozenset([("h", h, p) for h, p in hl] + [("f", p, a, k) for p, a, k in fl])
            )
        self._detect_ps = probe.detect_ps if transport == "mrc" else 0
        self._converge_ps = 0 if transport == "mrc" else probe.convergence_ps
        self._cache: dict[State, tuple[int | None, int]] = {}
        #: with ``groups``: a group's iteration by (its parts down, its changes, lead)
        self._group_cache: dict[tuple[Any, ...], tuple[int | None, int]] = {}
        self._state_ids: dict[State, int] = {}
        self.out = TransportCampaign(transport, 0)

    # ----- the fabric's state ----------------------------------------------------------
    def _settle(self, ev: Event) -> int:
        """How long after ``ev`` the transport acts on it (MRC: its loss detection;
        RoCE: at once for a host link, at routing convergence for a fabric link)."""
        if self.transport == "mrc":
            return self._detect_ps
        fabric = any(e[0] == "f" for e in self._parts[ev.failure])
        return self._converge_ps if fabric else 0

    @staticmethod
    def _apply(
        down: dict[Element, int], masked: set[Element], parts: Iterable[Element], up: bool
    ) -> list[Element]:
        """Count a failure's parts down (or up); the parts whose state changed."""
        changed = []
        for e in parts:
            if up:
                n = down.get(e, 0) - 1
                if n <= 0:
                    down.pop(e, None)
                    if e not in masked:
                        changed.append(e)
                    masked.discard(e)
                else:
                    down[e] = n
            else:
                n = down.get(e, 0)
                down[e] = n + 1
                if n == 0:
                    changed.append(e)
        return changed

    @staticmethod
    def _view(down: dict[Element, int], masked: set[Element]) -> frozenset[Element]:
        return frozenset(e for e in down if e not in masked)

    def _state_id(self, key: State, step: int | None) -> int:
        sid = self._state_ids.get(key)
        if sid is None:
            sid = self._state_ids[key] = len(self.out.states)
            self.out.states.append((key, step))
        return sid

    # ----- simulating one iteration -------------------------------------------------------
    def _simulate(
        self, view: frozenset[Element], changes: list[tuple[int, bool, list[Element]]], lead: int
    ) -> tuple[int | None, int]:
        """One iteration from state ``view``, starting ``lead`` ps after the model's time
        0, with ``changes`` (model time, up, parts); (step ps or None, its end or the
        time it gave up, ps after its start).

        With ``groups`` (``campaign.fold_groups``) each group of parts is run alone (its
        own parts down and changes; a group without changes beside others as its steady
        iteration), each such run kept by its parts, changes and lead (a group's steady
        run serves every later iteration it is in), and the iteration takes the
        slowest group's step: an approximation (docs/campaign.md), where one group
        is the exact run."""
        if self.groups is not None:
            every = set(view)
            for _at, _up, parts in changes:
                every |= set(parts)
            return self._by_groups(view, changes, lead, self.groups(frozenset(every)))
        return self._run_model(view, changes, lead)

    def _by_groups(
        self,
        view: frozenset[Element],
        changes: list[tuple[int, bool, list[Element]]],
        lead: int,
        gs: list[frozenset[Element]],
    ) -> tuple[int | None, int]:
        """:meth:`_simulate` by groups: the slowest group's step (None: a group's job
        cannot go on, and the earliest such group's end)."""
        got: list[tuple[int | None, int]] = []
        for g in gs:
            sub = frozenset(view & g)
            mine = [(at, up, [e for e in parts if e in g]) for at, up, parts in changes]
            mine = [c for c in mine if c[2]]
            # a group without changes beside others: its steady iteration
            at_lead = lead if mine or len(gs) == 1 else 0
            key = (
                tuple(sorted(sub, key=repr)),
                tuple((at, up, tuple(sorted(ps, key=repr))) for at, up, ps in mine),
                at_lead,
            )
            hit = self._group_cache.get(key) if self.reuse else None
            if hit is None:
                hit = self._run_model(sub, mine, at_lead)
                if self.reuse:
                    self._group_cache[key] = hit
            got.append(hit)
        stuck = [end for step, end in got if step is None]
        if stuck:
            return None, min(stuck)
        step = max(s for s, _ in got if s is not None)
        return step, step

    def _run_model(
        self, view: frozenset[Element], changes: list[tuple[int, bool, list[Element]]], lead: int
    ) -> tuple[int | None, int]:
        """One flow-level run of an iteration (:meth:`_simulate`'s arguments), folded
        when ``folded`` is given and the parts fold."""
        got = None
        if self.folded is not None:
            every = set(view)
            for _at, _up, parts in changes:
                every |= set(parts)
            got = self.folded(frozenset(every))
        if got is None:
            model = self.make_model()
            on = view
        else:
            model, to_fold = got
            on = frozenset(m for m in map(to_fold, view) if m is not None)
            changes = [
                (at, up, [m for m in map(to_fold, parts) if m is not None])
                for at, up, parts in changes
            ]
        model.start_down(
            [(e[1], e[2]) for e in on if e[0] == "h"],
            [(e[1], e[2], e[3]) for e in on if e[0] == "f"],
        )
        model.jobs[0] = replace(model.jobs[0], start_ps=lead)
        for at, up, parts in changes:
            for e in sorted(parts, key=repr):
                if e[0] == "h":
                    f = FluidFault(at, "nic_port_up" if up else "nic_port_down", "", e[1], e[2])
                else:
                    p, a, k = e[1], e[2], e[3]
                    f = FluidFault(at, "link_up" if up else "link_down", f"p{p}t0x{a}-p{p}t1x{k}")
                model.add_fault(f)
        self.out.simulated += 1
        res = model.run()
        ends = res.jobs[0].end
        if any(e is None for e in ends):
            return None, max(0, round(res.end_ps) - lead)
        step = round(max(e for e in ends if e is not None)) - lead
        return step, step

    def _clean(self, view: frozenset[Element]) -> tuple[int | None, int]:
        """The step time of an iteration in state ``view`` that nothing touches."""
        if not self.reuse:
            return self._simulate(view, [], 0)
        key = self.key(view)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._simulate(view, [], 0)
        return hit

    # ----- the campaign -----------------------------------------------------------------
    def run(self) -> TransportCampaign:
        """Run the campaign (module doc); the measurements."""
        started = time.perf_counter()
        out = self.out
        base, _ = self._clean(frozenset())
        if base is None:
            raise CampaignError("job: its iteration does not finish on a healthy fabric")
        if base <= 0:
            raise CampaignError("job: its iteration takes no time (nothing to repeat)")
        out.base_step_ps = base
        events = self.events
        down: dict[Element, int] = {}
        masked: set[Element] = set()
        active: dict[int, frozenset[Element]] = {}  # failures down now, their parts
        ei = 0  # events applied to the state
        t = 0
        last_ckpt = 0
        # since the last checkpoint: iterations, and time lost per failure
        pend_iters = 0
        pend_lost: dict[int, int] = {}
        committed_lost: dict[int, int] = {}

        def blame(into: dict[int, int], failures: list[int], ps: int) -> None:
            if not failures or ps == 0:
                if ps:
                    into[-1] = into.get(-1, 0) + ps
                return
            share, rest = divmod(ps, len(failures))
            for i, f in enumerate(sorted(failures)):
                into[f] = into.get(f, 0) + share + (1 if i < rest else 0)

        def causes(view: frozenset[Element]) -> list[int]:
            return [f for f, parts in active.items() if parts & view]

        def apply(ev: Event) -> None:
            self._apply(down, masked, self._parts[ev.failure], ev.up)
            if ev.up:
                active.pop(ev.failure, None)
            else:
                active[ev.failure] = self._parts[ev.failure]

        while t < self.end_ps:
            # the state: every change the transport has acted on by t
            while ei < len(events) and events[ei].at_ps + self._settle(events[ei]) <= t:
                apply(events[ei])
                ei += 1
            view = self._view(down, masked)
            clean, clean_end = self._clean(view)
            sid = self._state_id(self.key(view), clean)
            next_at = events[ei].at_ps if ei < len(events) else math.inf
            if clean is not None and next_at >= t + clean:
                # iterations nothing touches: all those before the next change
                left = -(-(self.end_ps - t) // clean)
                n = min(left, int((next_at - t) // clean)) if next_at < math.inf else left
                if not self.reuse:
                    n = 1
                excess = clean - base
                # checkpoints among them: the end of the first iteration checkpoint_ps or
                # more after the last, and so on
                k0 = max(1, -(-(last_ckpt + self.checkpoint_ps - t) // clean))
                blamed = causes(view)
                if k0 <= n:
                    per = max(1, -(-self.checkpoint_ps // clean))
                    q = (n - k0) // per
                    done = k0 + q * per
                    out.useful_iterations += pend_iters + done
                    for f, ps in pend_lost.items():
                        committed_lost[f] = committed_lost.get(f, 0) + ps
                    pend_lost = {}
                    blame(committed_lost, blamed, excess * done)
                    pend_iters = n - done
                    blame(pend_lost, blamed, excess * (n - done))
                    last_ckpt = t + done * clean
                else:
                    pend_iters += n
                    blame(pend_lost, blamed, excess * n)
                self._segment(t, n, clean, sid, False)
                t += n * clean
                continue
            # an iteration a change touches (or a state the job cannot run in)
            step, end, window = self._touched(t, ei, view, down, masked, clean_end)
            if step is not None:
                touched_by = sorted({events[i].failure for i in window})
                blame(pend_lost, causes(view), (clean if clean is not None else step) - base)
                blame(pend_lost, touched_by, step - (clean if clean is not None else step))
                pend_iters += 1
                self._segment(t, 1, step, sid, True)
                if t + step >= last_ckpt + self.checkpoint_ps:
                    out.useful_iterations += pend_iters
                    for f, ps in pend_lost.items():
                        committed_lost[f] = committed_lost.get(f, 0) + ps
                    pend_iters, pend_lost, last_ckpt = 0, {}, t + step
                t += step
                continue
            # the job cannot go on: restart from the last checkpoint
            err = t + end
            resume = err + self.restart_ps
            blamed = sorted({events[i].failure for i in window} | set(causes(view)))
            lost = resume - last_ckpt
            out.restarts.append((err, resume, lost, blamed))
            self._segment(t, 1, None, sid, True)
            blame(committed_lost, blamed, lost)
            pend_iters, pend_lost = 0, {}
            while ei < len(events) and events[ei].at_ps <= resume:
                apply(events[ei])
                ei += 1
            masked |= set(down)  # the job resumes on parts that work
            t = last_ckpt = resume
        out.useful_iterations += pend_iters
        for f, ps in pend_lost.items():
            committed_lost[f] = committed_lost.get(f, 0) + ps
        out.span_ps = t
        out.lost_by_failure = dict(sorted(committed_lost.items()))
        by_kind: dict[str, int] = {}
        for f, ps in committed_lost.items():
            kind = self.failures[f].kind if f >= 0 else "other"
            by_kind[kind] = by_kind.get(kind, 0) + ps
        out.lost_by_kind = dict(sorted(by_kind.items()))
        out.iterations = sum(s.count for s in out.segments if s.step_ps is not None)
        out.wall_s = round(time.perf_counter() - started, 3)
        return out

    def _segment(self, t: int, n: int, step: int | None, sid: int, touched: bool) -> None:
        segs = self.out.segments
        last = segs[-1] if segs else None
        if (
            last is not None
            and not touched
            and not last.touched
            and last.step_ps == step
            and last.state == sid
            and step is not None
            and last.start_ps + last.count * step == t
        ):
            last.count += n
        else:
            segs.append(Segment(t, n, step, sid, touched))

    def _touched(
        self,
        t: int,
        first: int,
        view: frozenset[Element],
        down: dict[Element, int],
        masked: set[Element],
        guess: int,
    ) -> tuple[int | None, int, list[int]]:
        """Simulate the iteration starting at ``t`` from state ``view`` with every change
        from event ``first`` on that falls into it (one before ``t`` that the transport
        has not acted on yet too); (step or None, its end, the events' indices)."""
        events = self.events
        horizon = t + max(guess, 1)
        while True:
            last = first
            while last < len(events) and events[last].at_ps < horizon:
                last += 1
            window = list(range(first, last))
            origin = min([t] + [events[i].at_ps for i in window])
            d, m = dict(down), set(masked)
            changes = []
            for i in window:
                ev = events[i]
                parts = self._apply(d, m, self._parts[ev.failure], ev.up)
                changes.append((ev.at_ps - origin, ev.up, parts))
            if all(not parts for _at, _up, parts in changes):
                # nothing the job sees changes (a part already down fails again, a
                # part still held down by another failure or no longer used since a
                # restart comes back): the iteration is its state's, kept or run once
                step, end = self._clean(view)
            else:
                step, end = self._simulate(view, changes, t - origin)
            if last >= len(events) or events[last].at_ps >= t + end:
                return step, end, window
            horizon = max(horizon, t + end)


# ----- a scenario's campaign ----------------------------------------------------------
@dataclass
class CampaignSetup:
    """A campaign scenario, loaded and checked: the job per transport and the failures."""

    name: str
    scenario_file: str
    config: CampaignConfig
    seed: int
    rates: FailureRates
    failures: list[Failure]
    #: per transport: the checked scenario (its transport, fabric, job; folded: the
    #: job cut to two blocks, :mod:`openmrc.pipeline.campaign_fold`)
    scenarios: dict[str, Any]
    #: per transport with ``campaign.fold``: the job, built folded per state
    folds: dict[str, FoldedJob] = field(default_factory=dict)

    @property
    def spec(self) -> ClosSpec:
        """The whole fabric."""
        first = self.config.transports[0]
        return self.folds[first].spec if first in self.folds else self.scenarios[first].spec

    @property
    def gpus(self) -> int:
        """The job's GPUs (the whole job's when folded)."""
        first = self.config.transports[0]
        if first in self.folds:
            return self.folds[first].gpus
        return int(self.scenarios[first].jobs[0].graph.ranks)


def load(
    scenario_file: str,
    overrides: list[str] | None = None,
    *,
    hours: float | None = None,
    seed: int | None = None,
    transports: list[str] | None = None,
) -> CampaignSetup:
    """Read and check a campaign scenario (``--set`` overrides first, then ``hours``,
    ``seed``, ``transports`` over its ``[campaign]`` table); draw its failures."""
    from .run import read_scenario_data

    path = Path(scenario_file)
    return load_data(
        read_scenario_data(scenario_file),
        overrides,
        name=path.stem,
        base_dir=path.parent,
        scenario_file=scenario_file,
        hours=hours,
        seed=seed,
        transports=transports,
    )


def load_data(
    data: dict[str, Any],
    overrides: list[str] | None = None,
    *,
    name: str = "",
    base_dir: Path | None = None,
    scenario_file: str = "",
    hours: float | None = None,
    seed: int | None = None,
    transports: list[str] | None = None,
) -> CampaignSetup:
    """:func:`load` for scenario data already read (``data`` is not changed)."""
    from .run import apply_override, fair_striping, scenario_from_data

    data = copy.deepcopy(data)
    for assignment in overrides or []:
        apply_override(data, assignment)
    raw = data.pop("campaign", {})
    if isinstance(raw, dict):
        given = {"hours": hours, "transports": transports, "seed": seed}
        raw = {**raw, **{k: v for k, v in given.items() if v is not None}}
    cfg = parse_config(raw)
    raw_rates = data.pop("failures", {})
    if isinstance(raw_rates, dict):
        for k in ("window_us", "repair_us"):
            if k in raw_rates:
                raise CampaignError(
                    f"failures.{k}: not used by a campaign (it runs campaign.hours, and "
                    "repairs per kind: campaign.link_repair_s, ...)"
                )
    try:
        rates = parse_rates(raw_rates)
    except FailureError as exc:
        raise CampaignError(str(exc)) from None
    scenarios: dict[str, Any] = {}
    folds: dict[str, FoldedJob] = {}
    for tname in cfg.transports:
        if cfg.fold:
            fj = _fold_setup(data, tname, name, base_dir, cfg.fold_margin, cfg.fold_replicas)
            folds[tname] = fj
            sc = fj.scenario(2 * (fj.spec.hosts_per_t0 // fj.tp))
            scenarios[tname] = _checked(sc)
            continue
        sc, workload = scenario_from_data(data, [], None, tname, name=name, base_dir=base_dir)
        stripe = fair_striping(sc, workload)
        if stripe is not None:
            sc, _ = scenario_from_data(data, [stripe], None, tname, name=name, base_dir=base_dir)
        scenarios[tname] = _checked(sc)
    first = scenarios[cfg.transports[0]]
    spec = folds[cfg.transports[0]].spec if cfg.fold else first.spec
    the_seed = cfg.seed
    if the_seed is None:
        the_seed = rates.seed if rates.seed is not None else first.seed
    try:
        failures = draw_failures(rates, spec, cfg.hours, the_seed, cfg.repair_s)
        scripted = _whole_faults(data, spec) if cfg.fold else first.faults
        failures += scripted_failures(scripted, spec, len(failures))
    except ValueError as exc:
        raise CampaignError(str(exc)) from None
    return CampaignSetup(
        name, scenario_file, cfg, the_seed, rates, _renumber(failures), scenarios, folds
    )


def _checked(sc: Any) -> Any:
    """``sc`` if a campaign can run it (flow level, one job of one iteration), else
    the CampaignError that says why."""
    if sc.mode != "flow":
        raise CampaignError('run.mode: a campaign runs at flow level (run.mode = "flow")')
    if len(sc.jobs) != 1:
        raise CampaignError(f"job: a campaign runs one job, the scenario has {len(sc.jobs)}")
    if sc.jobs[0].graph.iterations != 1:
        raise CampaignError(
            "job.iterations: a campaign repeats one iteration for campaign.hours; leave it out"
        )
    return sc


def _fold_setup(
    data: dict[str, Any],
    transport: str,
    name: str,
    base_dir: Path | None,
    margin: int,
    replicas: bool = True,
) -> FoldedJob:
    """One transport's job to fold (``campaign.fold``), RoCE striped over the planes as
    an unfolded campaign stripes it; a CampaignError naming the reason it does not fold."""
    from .run import apply_override, fair_striping

    d = copy.deepcopy(data)
    table = d.setdefault("transport", {})
    if not isinstance(table, dict):
        raise CampaignError("transport: must be a table")
    table["name"] = transport
    try:
        fj = folded_job(d, name, base_dir, margin, replicas)
        stripe = fair_striping(
            fj.scenario(2 * (fj.spec.hosts_per_t0 // fj.tp)), d.get("workload", {})
        )
        if stripe is not None:
            apply_override(d, stripe)
            fj = folded_job(d, name, base_dir, margin, replicas)
    except FoldError as exc:
        raise CampaignError(str(exc)) from None
    return fj


def _whole_faults(data: dict[str, Any], spec: ClosSpec) -> list[Any]:
    """A folded campaign's hand-given ``[[faults]]``, checked against the whole fabric
    (the folded scenario's parse does not see them): a CampaignError names the first
    bad one."""
    from .scenario import FaultSpec, ScenarioError, _fill, _num

    raw = data.get("faults", [])
    if not isinstance(raw, list):
        raise CampaignError("faults: must be an array of tables ([[faults]])")
    fabric = FluidModel(spec) if raw else None
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or "at_us" not in item or "kind" not in item:
            raise CampaignError(f"faults[{i}]: must be a table with at_us and kind")
        try:
            f = _fill(FaultSpec, item, f"faults[{i}]")
            _num(f.at_us, f"faults[{i}].at_us")
            for x in expand(f, spec, f"faults[{i}]"):
                assert fabric is not None
                fabric.parts(x)
        except (ScenarioError, ValueError) as exc:
            msg = str(exc)
            raise CampaignError(
                msg if msg.startswith("faults[") else f"faults[{i}].{msg}"
            ) from None
        out.append(f)
    return out


def _renumber(failures: list[Failure]) -> list[Failure]:
    """The failures in time order, numbered in that order."""
    ordered = sorted(failures, key=lambda f: (f.down_ps, f.index))
    return [replace(f, index=i) for i, f in enumerate(ordered)]


def model_factory(scenario: Any) -> Callable[[], FluidModel]:
    """The flow-level model of a scenario's job alone, one iteration, no faults."""
    from .jobrun import fluid_model

    job = replace(scenario.jobs[0], start_us=0.0)

    def make() -> FluidModel:
        return fluid_model(scenario.spec, scenario.transport, scenario.seed, [job], [])

    return make


def run_transport(setup: CampaignSetup, name: str, reuse: bool = True) -> TransportCampaign:
    """One transport's campaign of ``setup`` (``name`` one of its transports)."""
    sc = setup.scenarios[name]
    fj = setup.folds.get(name)
    c = Campaign(
        name,
        model_factory(sc) if fj is None else fj.whole_model,
        setup.failures,
        setup.config.hours,
        setup.config.checkpoint_s,
        setup.config.restart_s,
        reuse=reuse,
        folded=None if fj is None else fj.folded,
        probe=None if fj is None else fj.fabric_model(),
        groups=fj.groups if fj is not None and setup.config.fold_groups else None,
    )
    return c.run()


#: the setup a forked worker of :func:`run` runs a transport of
_FORKED: CampaignSetup | None = None


def _run_forked(name: str, reuse: bool) -> TransportCampaign:
    """A forked worker's transport campaign of the setup it inherited."""
    assert _FORKED is not None
    return run_transport(_FORKED, name, reuse)


def run(setup: CampaignSetup, *, reuse: bool = True, parallel: bool = False) -> dict[str, Any]:
    """Every transport's campaign; the document (``campaign.json``, docs/campaign.md).

    ``parallel``: each transport's campaign in a worker process of its own, at once
    (the transports share nothing, so the document is the same; the wall time is the
    slowest transport's instead of their sum, on as many cores)."""
    names = list(setup.scenarios)
    results: dict[str, TransportCampaign] = {}
    if parallel and len(names) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # forked workers inherit the setup (the whole cluster's is some 100 MB pickled)
        global _FORKED
        _FORKED = setup
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=len(names), mp_context=ctx) as pool:
                futures = {n: pool.submit(_run_forked, n, reuse) for n in names}
                results = {n: f.result() for n, f in futures.items()}
        finally:
            _FORKED = None
    else:
        results = {n: run_transport(setup, n, reuse) for n in names}
    return document(setup, results)


def _pct(segments: list[Segment], q: float) -> int | None:
    """The nearest-rank ``q`` percentile of the step times of every iteration that ended."""
    steps = sorted((s.step_ps, s.count) for s in segments if s.step_ps is not None)
    total = sum(c for _, c in steps)
    if not total:
        return None
    rank = max(1, math.ceil(q * total / 100))
    seen = 0
    for step, c in steps:
        seen += c
        if seen >= rank:
            return step
    return steps[-1][0]  # pragma: no cover


def _s(ps: int | None) -> float | None:
    return None if ps is None else ps / PS_PER_S


def _ms(ps: int | None) -> float | None:
    return None if ps is None else round(ps / 1e9, 6)


def transport_doc(r: TransportCampaign, gpus: int) -> dict[str, Any]:
    """One transport's part of the document."""
    useful = r.useful_iterations * r.base_step_ps
    return {
        "gpus": gpus,
        "failure_free_step_ms": _ms(r.base_step_ps),
        "span_s": _s(r.span_ps),
        "iterations": r.iterations,
        "useful_iterations": r.useful_iterations,
        "goodput": useful / r.span_ps if r.span_ps else None,
        "useful_gpu_hours": gpus * useful / PS_PER_HOUR,
        "gpu_hours": gpus * r.span_ps / PS_PER_HOUR,
        "step_ms": {
            "p50": _ms(_pct(r.segments, 50)),
            "p99": _ms(_pct(r.segments, 99)),
            "max": _ms(max((s.step_ps for s in r.segments if s.step_ps is not None), default=None)),
        },
        "lost_s_by_kind": {k: _s(v) for k, v in r.lost_by_kind.items()},
        "lost_s_by_failure": {str(k): _s(v) for k, v in r.lost_by_failure.items()},
        "restarts": [
            {"error_s": _s(e), "resume_s": _s(b), "lost_s": _s(lost), "failures": fs}
            for e, b, lost, fs in r.restarts
        ],
        "states": [
            {"parts_down": [list(e) for e in key], "step_ms": _ms(step)} for key, step in r.states
        ],
        "segments": [[s.start_ps, s.count, s.step_ps, s.state, s.touched] for s in r.segments],
        "iterations_simulated": r.simulated,
    }


def document(setup: CampaignSetup, results: dict[str, TransportCampaign]) -> dict[str, Any]:
    """The campaign's JSON document (docs/campaign.md, "What it reports")."""
    from ..version import openmrc_version

    cfg = setup.config
    gpus = setup.gpus
    return {
        "campaign": setup.name,
        "scenario_file": setup.scenario_file,
        "provenance": {
            "openmrc": openmrc_version(),
            "wall_s": {name: r.wall_s for name, r in results.items()},
        },
        "hours": cfg.hours,
        "seed": setup.seed,
        "checkpoint_s": cfg.checkpoint_s,
        "restart_s": cfg.restart_s,
        "repair_s": dict(sorted(cfg.repair_s.items())),
        **({"fold_groups": True} if cfg.fold_groups else {}),
        "rates_per_hour": {
            k: getattr(setup.rates, f"{k}_per_hour") * setup.rates.scale
            for k in ("link", "optic", "switch", "nic_port")
        },
        "failures": [
            {
                "index": f.index,
                "kind": f.kind,
                "name": f.name,
                "down_s": _s(f.down_ps),
                "up_s": _s(f.up_ps),
            }
            for f in setup.failures
        ],
        "segments_columns": ["start_ps", "count", "step_ps", "state", "touched"],
        "transports": {name: transport_doc(r, gpus) for name, r in results.items()},
    }


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The printed summary: a line of headline numbers per transport, then the losses."""
    out = [
        f"campaign {doc['campaign']}: {doc['hours']:g} h, seed {doc['seed']}, "
        f"{len(doc['failures'])} failure{'s' if len(doc['failures']) != 1 else ''}"
        + (
            ", fold_groups (approximate: the slowest group's step)"
            if doc.get("fold_groups")
            else ""
        )
    ]
    for name, t in doc["transports"].items():
        st = t["step_ms"]
        out.append(
            f"  {name}: goodput {t['goodput']:.6f}, {t['useful_iterations']:,} useful of "
            f"{t['iterations']:,} iterations, step p50 {st['p50']:.3f} ms p99 {st['p99']:.3f} ms "
            f"max {st['max']:.3f} ms, {len(t['restarts'])} restart"
            f"{'s' if len(t['restarts']) != 1 else ''}, {len(t['states'])} state"
            f"{'s' if len(t['states']) != 1 else ''} ({t['iterations_simulated']} iterations "
            f"simulated, {doc['provenance']['wall_s'][name]:.1f} s)"
        )
        if t["lost_s_by_kind"]:
            lost = ", ".join(f"{k} {v:,.3f} s" for k, v in t["lost_s_by_kind"].items())
            out.append(f"    time lost: {lost}")
    return out


def plot(doc: dict[str, Any], path: Path) -> Path:
    """Step time over the campaign's hours per transport, each failure marked (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for name, t in doc["transports"].items():
        xs: list[float] = []
        ys: list[float] = []
        for start, count, step, _state, _touched in t["segments"]:
            if step is None:
                continue
            if xs and start / PS_PER_HOUR > xs[-1]:  # a restart: break the line
                xs.append(xs[-1])
                ys.append(math.nan)
            xs += [start / PS_PER_HOUR, (start + count * step) / PS_PER_HOUR]
            ys += [step / 1e9, step / 1e9]
        (line,) = ax.plot(xs, ys, label=name, drawstyle="steps-post", linewidth=1.2)
        for r in t["restarts"]:
            ax.axvspan(
                r["error_s"] / 3600, r["resume_s"] / 3600, alpha=0.15, color=line.get_color()
            )
    colors = {
        "link": "tab:orange",
        "optic": "tab:purple",
        "switch": "tab:red",
        "nic_port": "tab:green",
    }
    for f in doc["failures"]:
        ax.axvline(
            f["down_s"] / 3600, color=colors.get(f["kind"], "gray"), linestyle="--", linewidth=0.8
        )
        if f["up_s"] is not None:
            ax.axvline(
                f["up_s"] / 3600, color=colors.get(f["kind"], "gray"), linestyle=":", linewidth=0.8
            )
    ax.set_xlabel("campaign time (h)")
    ax.set_ylabel("step time (ms)")
    ax.set_yscale("log")
    ax.set_xlim(0, doc["hours"])
    ax.set_title(
        f"{doc['campaign']}: step time over {doc['hours']:g} h (failure --, repair :, a transport's restarts shaded)"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = [
    "CAMPAIGN_KINDS",
    "DEFAULT_CHECKPOINT_S",
    "DEFAULT_REPAIR_S",
    "DEFAULT_RESTART_S",
    "KEYS",
    "Campaign",
    "CampaignConfig",
    "CampaignError",
    "CampaignSetup",
    "Event",
    "Failure",
    "Segment",
    "TransportCampaign",
    "document",
    "draw_failures",
    "events_of",
    "load",
    "load_data",
    "model_factory",
    "parse_config",
    "plot",
    "run",
    "run_transport",
    "scripted_failures",
    "state_key",
    "summary_lines",
    "transport_doc",
]
