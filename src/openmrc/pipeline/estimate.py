"""``openmrc run --estimate`` / ``compare --estimate``: what a run will cost, without it.

The scenario is read and checked as for a run (``--set``, ``--seed``,
``--transport``), then its size is counted from the scenario alone (nothing is
built): hosts, ports and links, flows and QPs, data packets and events, and the
peak memory and CPU time those come to (:mod:`openmrc.sim.budget`, whose
per-object costs are measured: docs/results/estimate.md).  No output folder is
made and nothing is simulated.
"""

from __future__ import annotations

from typing import Any

from ..sim.budget import available_bytes
from ..units import plural
from .run import load_scenario, run_estimate


def _duration(seconds: float) -> str:
    """``about 14 min`` / ``about 3.2 s`` / ``about 2.1 h``."""
    if seconds < 60:
        return f"about {seconds:.1f} s"
    if seconds < 3600:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def lines(scenario: Any, scenario_file: str) -> list[str]:
    """The estimate of one scenario (one transport) as lines for a person."""
    from ..sim import _native

    spec = scenario.spec
    name = scenario.name or scenario_file
    out = [f"estimate for {name} [transport {scenario.transport.name}]: nothing built or run"]
    jobs = getattr(scenario, "jobs", None) or []
    out.append(
        f"  hosts     {spec.hosts:,} x {plural(spec.planes, 'plane')} "
        f"({spec.t0s} T0 x {spec.t1s} T1 per plane)"
    )
    if getattr(scenario, "mode", "packet") == "flow":
        tasks = sum(len(j.graph.tasks) for j in jobs)
        moves = sum(1 for j in jobs for t in j.graph.tasks if t.kind != "compute")
        out.append(
            f"  jobs      {plural(len(jobs), 'job')}: {tasks:,} tasks, {moves:,} transfers "
            "and collectives"
        )
        out.append(
            "  flow level: the flow-level model holds rates, not packets or QPs: the "
            "packet simulator's memory, event and time estimates do not apply "
            "(--set run.mode=packet for them)"
        )
        return out
    est = run_estimate(scenario)
    out.append(f"  ports     {est.ports:,} ({est.links:,} links, both directions)")
    if jobs:
        out.append(
            f"  jobs      {plural(len(jobs), 'job')}, lowered to {plural(est.flows, 'flow')}"
        )
    else:
        out.append(f"  flows     {est.flows:,}")
    out.append(
        f"  QPs       {est.qps:,} ({est.local_qps:,} of flows under one T0, "
        f"{est.qps - est.local_qps:,} through the T1 tier)"
    )
    out.append(f"  packets   {est.packets:,} data packets of {scenario.transport.mtu:,} B")
    out.append(f"  events    about {est.events:,}")
    free = available_bytes()
    gib = est.memory_bytes / 2**30
    room = ""
    if free is not None:
        room = f"; {free / 2**30:.1f} GiB available now" + (
            ": MORE than available, the run may fail or swap" if est.memory_bytes > free else ""
        )
    size = f"{gib:.1f} GiB" if gib >= 1 else f"{est.memory_bytes / 2**20:,.0f} MiB"
    out.append(f"  memory    about {size} peak ({est.memory_bytes / 1e9:.2f} GB){room}")
    build = (
        "compiled build" if _native.NATIVE else "this install runs pure Python: several times more"
    )
    out.append(f"  time      {_duration(est.cpu_seconds)} of CPU on one core ({build})")
    if scenario.transport.name != "mrc":
        out.append(
            "  note      memory per QP is measured for MRC; a RoCE / IB QP keeps less "
            "state (no EVs): read it as an upper bound"
        )
    return out


def estimate_file(
    scenario_file: str,
    transports: list[str | None],
    *,
    overrides: list[str] | None = None,
    seed: int | None = None,
    compare: bool = False,
) -> int:
    """Print the estimate of ``scenario_file`` for each transport (None: the file's;
    ``compare``: each striped as ``openmrc compare`` runs it); builds nothing, writes
    nothing; returns the exit code (0)."""
    from .run import fair_striping

    texts = []
    for transport in transports:
        extra = list(overrides or [])
        scenario, workload = load_scenario(scenario_file, extra, seed, transport, build=False)
        stripe = fair_striping(scenario, workload) if compare else None
        if stripe is not None:  # as compare runs it: one QP per plane
            scenario, _ = load_scenario(
                scenario_file, [*extra, stripe], seed, transport, build=False
            )
        texts.append("\n".join(lines(scenario, scenario_file)))
    print("\n".join(texts))
    return 0


__all__ = ["estimate_file", "lines"]
