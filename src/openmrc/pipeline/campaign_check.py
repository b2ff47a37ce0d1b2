"""A campaign's flow-level iterations re-run at packet level: the campaign's own check.

A campaign (:mod:`openmrc.pipeline.campaign`) simulates few iterations at flow
level: one per fabric state it meets (its *steady* iteration, reused for every
iteration nothing touches) and every iteration a failure or repair falls into
(a *transition*).  On a job small enough for packets (tens to a thousand GPUs)
each of them can be run again at packet level from the same fabric state with
the same changes at the same offsets, which says how far the campaign's step
times, and so its goodput, can be trusted.

:class:`RecordingCampaign` runs a transport's campaign as usual and keeps every
flow-level iteration it used (:class:`Iteration`: the parts down at its start,
the changes in it and when, the flow-level step).  :func:`packet_step` runs one
of them at packet level:

* the parts down at the iteration's start go down at packet time 0, before the
  job starts; the job starts once the transport has acted on them (RoCE: after
  routing converged, ``convergence_delay_ps``; MRC and a NIC port: 1 us
  later).  MRC's flow level starts with the dead paths known; at packet level
  every transfer is a QP of its own, and each one that meets a dead path
  learns it from its own losses (an upper bound on what a job whose QPs live
  across iterations pays).
* the changes go down or up at their offsets from the job's start, as in the
  flow-level iteration (one before the start that the transport had not acted
  on yet goes before it);
* the step is the job's last task end minus its start; an iteration that never
  ends at flow level (the job restarts) is run to twice its give-up time.

:func:`check` does both for every transport of a loaded campaign and returns
one row per iteration: flow step, packet step, their difference.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .campaign import (
    Campaign,
    CampaignError,
    CampaignSetup,
    Element,
    State,
    model_factory,
    state_key,
)

US = 1_000_000
#: how long before the job's start a part down in its state goes down at packet level,
#: when nothing has to converge (MRC, a NIC port): the fault first, then the job
PREROLL_PS = 1 * US


@dataclass(frozen=True)
class Iteration:
    """One flow-level iteration a campaign simulated.

    ``view``: the parts down and known at its start; ``changes``: (model time ps,
    up, parts) of every failure or repair in it; the job starts ``lead_ps`` after
    the model's time 0 (a change before the iteration that the transport had not
    acted on yet is at time 0).  ``step_ps`` None: it never ended (``end_ps``: when
    the job gave up, after its start)."""

    kind: str  # "steady" (a state's iteration) or "transition" (a change falls into it)
    transport: str
    start_ps: int  # campaign time: the transition's start; a steady one's first use
    view: State
    changes: tuple[tuple[int, bool, tuple[Element, ...]], ...]
    lead_ps: int
    step_ps: int | None
    end_ps: int
    failures: tuple[int, ...] = ()


class RecordingCampaign(Campaign):
    """A :class:`~openmrc.pipeline.campaign.Campaign` that keeps the flow-level
    iterations it used: every state's steady iteration and every transition
    (``iterations``, in the order the campaign met them).  Its results are the
    plain campaign's."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.iterations: list[Iteration] = []
        self._calls: list[tuple[State, tuple[Any, ...], int, int | None, int]] = []

    def _simulate(
        self, view: frozenset[Element], changes: list[tuple[int, bool, list[Element]]], lead: int
    ) -> tuple[int | None, int]:
        step, end = super()._simulate(view, changes, lead)
        frozen = tuple((at, up, tuple(sorted(parts, key=repr))) for at, up, parts in changes)
        self._calls.append((state_key(view), frozen, lead, step, end))
        return step, end

    def _clean(self, view: frozenset[Element]) -> tuple[int | None, int]:
        n = len(self._calls)
        got = super()._clean(view)
        if len(self._calls) > n:
            key, changes, lead, step, end = self._calls[-1]
            self.iterations.append(
                Iteration("steady", self.transport, -1, key, changes, lead, step, end)
            )
        return got

    def _touched(
        self,
        t: int,
        first: int,
        view: frozenset[Element],
        down: dict[Element, int],
        masked: set[Element],
        guess: int,
    ) -> tuple[int | None, int, list[int]]:
        step, end, window = super()._touched(t, first, view, down, masked, guess)
        key, changes, lead, _s, _e = self._calls[-1]  # the last try is the one kept
        failures = tuple(sorted({self.events[i].failure for i in window}))
        self.iterations.append(
            Iteration("transition", self.transport, t, key, changes, lead, step, end, failures)
        )
        return step, end, window

    def run(self) -> Any:
        """Run the campaign (:meth:`Campaign.run`); then date each steady iteration by
        the first iterations that used it (nothing touching them)."""
        out = super().run()
        first: dict[State, int] = {}
        for touched in (False, True):
            for s in out.segments:
                if s.touched == touched:
                    first.setdefault(out.states[s.state][0], s.start_ps)
        self.iterations = [
            dataclasses.replace(i, start_ps=first.get(i.view, 0)) if i.kind == "steady" else i
            for i in self.iterations
        ]
        return out


def record(setup: CampaignSetup, transport: str) -> tuple[RecordingCampaign, Any]:
    """Run one transport's campaign of ``setup``; (the campaign with its iterations,
    its :class:`~openmrc.pipeline.campaign.TransportCampaign`)."""
    cfg = setup.config
    if cfg.fold:
        raise CampaignError(
            "campaign.fold: the packet check runs every GPU at packet level; set "
            "campaign.fold = false on a job small enough for packets"
        )
    c = RecordingCampaign(
        transport,
        model_factory(setup.scenarios[transport]),
        setup.failures,
        cfg.hours,
        cfg.checkpoint_s,
        cfg.restart_s,
    )
    return c, c.run()


def _fault(inj: Any, e: Element, up: bool, at_ps: int) -> None:
    """Take part ``e`` (a host link or a T0-T1 link) down or up at ``at_ps``."""
    if e[0] == "h":
        (inj.nic_port_up if up else inj.nic_port_down)(e[1], e[2], at_ps=at_ps)
    else:
        p, a, k = e[1], e[2], e[3]
        (inj.link_up if up else inj.link_down)(f"p{p}t0x{a}-p{p}t1x{k}", at_ps=at_ps)


def preroll_ps(scenario: Any, it: Iteration) -> int:
    """How long before the packet-level job the parts of ``it``'s state go down: the
    routing convergence for RoCE with a fabric link among them, else 1 us."""
    if it.transport != "mrc" and any(e[0] == "f" for e in it.view):
        conv = int(scenario.transport.baseline_fabric.get("convergence_delay_ps", 0))
        return conv + PREROLL_PS
    return PREROLL_PS


def packet_experiment(scenario: Any, it: Iteration) -> tuple[Any, Any, int, int]:
    """Iteration ``it`` of a campaign of (flow-level) ``scenario`` as a packet-level
    experiment, built and not run (module doc): (the packet scenario, its experiment,
    the job's start ps, the time to run it until)."""
    job = dataclasses.replace(
        scenario.jobs[0], start_us=(preroll_ps(scenario, it) + it.lead_ps) / US
    )
    sc = dataclasses.replace(scenario, mode="packet", faults=[], jobs=[job], controller=[])
    exp = sc.build()
    start = job.start_ps
    origin = start - it.lead_ps  # the flow-level model's time 0
    for e in it.view:
        _fault(exp.faults, e, False, 0)
    for at, up, parts in it.changes:
        for e in parts:
            _fault(exp.faults, e, up, origin + at)
    horizon = it.step_ps if it.step_ps is not None else it.end_ps
    return sc, exp, start, start + max(2 * horizon, horizon + 50 * 1_000_000_000)


def packet_step(scenario: Any, it: Iteration) -> tuple[int | None, float]:
    """Iteration ``it`` of a campaign of (flow-level) ``scenario`` at packet level
    (module doc): (its step ps, None if it never ended; wall seconds)."""
    from .jobrun import packet_times

    started = time.perf_counter()
    sc, exp, start, until = packet_experiment(scenario, it)
    res = exp.run(until)
    ((_starts, ends),) = packet_times(sc.jobs, sc.job_state, res)
    wall = time.perf_counter() - started
    if not ends or any(e is None for e in ends):
        return None, wall
    return round(max(ends)) - start, wall


def _name(e: Element) -> str:
    if e[0] == "h":
        return f"h{e[1]}/p{e[2]}"
    return f"p{e[1]}t0x{e[2]}-p{e[1]}t1x{e[3]}"


def describe(it: Iteration) -> str:
    """One line: the iteration's state and changes (offsets from the job's start, us)."""
    state = "healthy" if not it.view else "down: " + ", ".join(_name(e) for e in it.view)
    if not it.changes:
        return state
    ch = "; ".join(
        f"{'up' if up else 'down'} {', '.join(_name(e) for e in parts)} at "
        f"{(at - it.lead_ps) / US:+,.1f} us"
        for at, up, parts in it.changes
        if parts
    )
    return f"{state}; {ch}"


def check(
    setup: CampaignSetup,
    *,
    limit: int | None = None,
    transitions_only: bool = False,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Every transport's campaign of ``setup`` with its flow-level iterations re-run at
    packet level (at most ``limit`` per transport, in the order met): one row per
    iteration (kind, campaign time, state and changes, flow and packet step, the
    difference in percent, wall seconds), each also given to ``on_row`` when done."""
    rows: list[dict[str, Any]] = []
    for name, sc in setup.scenarios.items():
        c, _out = record(setup, name)
        its = [i for i in c.iterations if not transitions_only or i.kind == "transition"]
        for it in its[:limit]:
            pkt, wall = packet_step(sc, it)
            flow = it.step_ps
            rows.append(
                {
                    "transport": name,
                    "seed": sc.seed,
                    "kind": it.kind,
                    "campaign_s": it.start_ps / 1e12,
                    "iteration": describe(it),
                    "failures": list(it.failures),
                    "flow_step_us": None if flow is None else round(flow / US, 3),
                    "packet_step_us": None if pkt is None else round(pkt / US, 3),
                    "diff_pct": (
                        None
                        if flow is None or pkt is None or not pkt
                        else round(100 * (flow - pkt) / pkt, 2)
                    ),
                    "packet_wall_s": round(wall, 1),
                }
            )
            if on_row is not None:
                on_row(rows[-1])
    return rows


__all__ = [
    "PREROLL_PS",
    "Iteration",
    "RecordingCampaign",
    "check",
    "describe",
    "packet_experiment",
    "packet_step",
    "preroll_ps",
    "record",
]
