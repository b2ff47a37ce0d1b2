"""Running a scenario's training jobs: packet level or flow level, and their step times.

A scenario with ``[job]`` / ``[[jobs]]`` (openmrc.workloads.jobs.config) runs its jobs'
iterations either in the packet simulator (``run.mode = "packet"``, the
default: the task graph lowered to flows by openmrc.workloads.jobs.lower) or in the
flow-level model (``run.mode = "flow"``, openmrc.flow.model).  Either way the
results document gets ``jobs``: one row per job (docs/training.md,
"Step time"):

* ``step_time_us``: from the job's start to the end of its last task;
* ``compute_us``: the busiest rank's compute (forward, backward, optimizer,
  and TP's NVLink time);
* ``exposed_comm_us``: step time minus the critical path with every transfer
  taking no time (communication not hidden behind compute);
* ``idle_us``: mean over ranks of step time minus the rank's compute (bubbles
  and waiting for the network);
* ``ideal_step_us`` and ``slowdown``: a lower bound on the step time (the
  critical path with every transfer at the NIC's line rate and zero latency, or
  the busiest NIC's bytes at line rate: openmrc.workloads.jobs.ideal), and the
  step time over it (never below 1).
* ``skipped_collectives``: a workload file's collectives that ran nothing (a
  one-rank group, 0 bytes), ``{"reason", "count"}`` per iteration; each such job
  also gets one warning.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..baselines.roce import RoceConfig
from ..flow.faults import expand
from ..flow.model import FluidJob, FluidModel, FluidResult
from ..sim.experiment import Experiment
from ..sim.result import Result
from ..topology import ClosSpec
from ..workloads.jobs.config import FileJob, JobConfig
from ..workloads.jobs.graph import JobGraph, build_iteration
from ..workloads.jobs.ideal import ideal_step_ps as ideal_bound_ps
from ..workloads.jobs.ideal import nic_bytes_per_ps
from ..workloads.jobs.iterations import iteration_ends, percentile, repeat
from ..workloads.jobs.lower import Lowered, lower, times
from ..workloads.jobs.trace import chrome_trace

US = 1_000_000

#: the RoCE settings of the packet baseline that the flow level reads (retransmission).
ROCE_ADP_KEYS = ("adaptive_retransmission", "adp_time_base_ps", "adp_init_exp", "adp_init_range")


@dataclass
class PlacedJob:
    """A job of a scenario: its iteration graph, hosts and start."""

    name: str
    graph: JobGraph
    hosts: list[int]
    start_us: float = 0.0
    #: the model's parameters (None for a job read from workload files).
    params: int | None = None

    @property
    def start_ps(self) -> int:
        """When the job starts."""
        return int(self.start_us * US)


def placed(configs: Sequence[JobConfig | FileJob], hosts: list[list[int]]) -> list[PlacedJob]:
    """Every job's iteration graph on its hosts."""
    out = []
    for c, h in zip(configs, hosts, strict=True):
        if isinstance(c, JobConfig):
            graph, params = build_iteration(c.spec), c.spec.model.params()
        else:
            graph, params = c.graph, None
        graph = repeat(graph, c.iterations)
        out.append(PlacedJob(c.name, graph, h, c.start_us, params))
    return out


def add_packet_jobs(
    exp: Experiment, jobs: list[PlacedJob], message: int
) -> list[tuple[int, Lowered]]:
    """Add the jobs' flows to ``exp``; per job (index of its first flow, lowering)."""
    out = []
    for job in jobs:
        base = len(exp.flows)
        low = lower(job.graph, job.hosts, job.start_ps, message, job.name, 0)
        if low.flows:
            exp.add_flows(low.flows, watch=True)
        out.append((base, low))
    return out


def fluid_model(
    spec: ClosSpec, transport: Any, seed: int, jobs: list[PlacedJob], faults: list[Any]
) -> FluidModel:
    """The flow-level model of a scenario's fabric, transport, jobs and faults."""
    name = transport.name
    if name not in ("mrc", "roce"):
        raise ValueError(
            f"transport.name: the flow-level model runs mrc and roce, not {name!r} "
            "(IB's adaptive routing is not modelled there)"
        )
    qps = transport.qps or int(transport.roce.get("qps", 1)) if name != "mrc" else 1
    conv = int(transport.baseline_fabric.get("convergence_delay_ps", 200_000_000_000))
    rto = round(4.096e6 * 2 ** int(transport.roce.get("timeout_exp", 20)))
    retries = int(transport.roce.get("retries", 7))
    hold = int(transport.baseline_fabric.get("hold_time_ps", 3_000_000_000_000))
    rc = RoceConfig(**{k: v for k, v in transport.roce.items() if k in ROCE_ADP_KEYS})
    # DCQCN as the packet baseline runs it (profile, dcqcn_<field> keys, dcqcn = false)
    dcqcn = RoceConfig.from_dict(dict(transport.roce)).dcqcn if name == "roce" else None
    # the PFC budget a sending port may fill at a switch (a dead QP's packets queue
    # before the switch that drops them): the baseline fabric's xoff under PFC, none to
    # fill without flow control (drop-tail: nothing pauses the sender)
    bf = transport.baseline_fabric
    flow_control = str(bf.get("flow_control", "pfc"))
    xoff = bf.get("pfc_xoff_bytes")
    if flow_control == "pfc":
        pfc_xoff: float | None = None if xoff is None else float(xoff)
    else:
        pfc_xoff = math.inf if flow_control == "none" else 0.0
    g = jobs[0].graph if jobs else None
    model = FluidModel(
        spec,
        name,
        qps=qps,
        convergence_ps=conv,
        mtu=transport.mtu,
        seed=seed,
        gpus_per_server=g.gpus_per_server if g else 8,
        nvlink_bytes_per_ps=g.nvlink_bytes_per_ps if g else 0.45,
        rto_ps=rto,
        retries=retries,
        hold_ps=hold,
        adp_base_ps=rc.adp_time_base_ps if rc.adaptive_retransmission else None,
        adp_init_exp=rc.adp_init_exp,
        adp_init_range=rc.adp_init_range,
        dcqcn=dcqcn,
        ecn_profile=str(transport.baseline_fabric.get("ecn_profile", "nvidia")),
        pfc_xoff_bytes=pfc_xoff,
    )
    for job in jobs:
        model.add_job(FluidJob(job.graph, job.hosts, job.start_ps))
    for i, f in enumerate(faults):
        for fault in expand(f, spec, f"faults[{i}]"):
            try:
                model.add_fault(fault)
            except ValueError as exc:
                raise ValueError(f"faults[{i}].{exc}") from None
    return model


def ideal_step_ps(spec: ClosSpec, job: PlacedJob) -> float | None:
    """The job's ideal step (ps, all its iterations): a lower bound on its step time on
    this fabric whatever the transport (:mod:`openmrc.workloads.jobs.ideal`: the critical
    path with transfers at the NIC's line rate and zero latency, or the busiest NIC)."""
    return ideal_bound_ps(job.graph, job.hosts, nic_bytes_per_ps(spec.planes, spec.host_gbps))


def job_row(
    job: PlacedJob, start: list[Any], end: list[Any], ideal_ps: float | None
) -> dict[str, Any]:
    """One ``jobs`` entry of the results (see the module docstring)."""
    g = job.graph
    n = g.iterations
    busy = g.compute_busy_ps()
    done = all(e is not None for e in end)
    row: dict[str, Any] = {
        "name": job.name,
        "gpus": g.ranks,
        "hosts": [min(job.hosts), max(job.hosts)],
        "start_us": job.start_us,
        "complete": done,
        "tasks": len(g.tasks),
        "compute_us": round(max(busy) / n / 1e6, 3),
        "params": job.params,
        "skipped_collectives": skipped_rows(g),
    }
    if n > 1:
        row.update(iteration_rows(job, end, ideal_ps))
    if not done:
        row.update(step_time_us=None, exposed_comm_us=None, idle_us=None, slowdown=None)
        return row
    # per iteration (the mean when the job runs several)
    step = (max((e for e in end if e is not None), default=0.0) - job.start_ps) / n
    crit = g.critical_compute_ps() / n
    ideal = None if ideal_ps is None else ideal_ps / n
    row["step_time_us"] = round(step / 1e6, 3)
    row["exposed_comm_us"] = round(max(0.0, step - crit) / 1e6, 3)
    row["idle_us"] = round(sum(step - b / n for b in busy) / len(busy) / 1e6, 3)
    row["ideal_step_us"] = None if ideal is None else round(ideal / 1e6, 3)
    row["slowdown"] = None if not ideal else round(step / ideal, 4)
    comm: dict[str, float] = {}
    for t, s, e in zip(g.tasks, start, end, strict=True):
        if t.kind != "compute" and s is not None and e is not None:
            comm[t.phase] = comm.get(t.phase, 0.0) + (e - s)
    row["comm_time_us_by_phase"] = {k: round(v / n / 1e6, 3) for k, v in sorted(comm.items())}
    return row


def skipped_rows(g: JobGraph) -> list[dict[str, Any]]:
    """A workload file's collectives that ran nothing, by reason, per iteration."""
    return [{"reason": k, "count": v} for k, v in sorted(g.skipped.items())]


def skipped_warnings(jobs: Sequence[PlacedJob]) -> list[str]:
    """One warning per job whose workload file has collectives that ran nothing."""
    out = []
    for j in jobs:
        if j.graph.skipped:
            n = sum(j.graph.skipped.values())
            why = "; ".join(f"{c} x {r}" for r, c in sorted(j.graph.skipped.items()))
            out.append(f"job {j.name}: {n} collectives of its workload file ran nothing ({why})")
    return out


def iteration_rows(job: PlacedJob, end: list[Any], ideal_ps: float | None) -> dict[str, Any]:
    """A several-iteration job's per-iteration step times and their headline (docs/training.md).

    ``step_times_us``: every iteration that ended (in order); ``mean_step_us``,
    ``p99_step_us`` (nearest rank: the maximum below 100 iterations),
    ``max_step_us`` over them; ``p99_slowdown``: the p99 over the ideal fabric's
    mean step.
    """
    g = job.graph
    steps: list[float] = []
    prev = float(job.start_ps)
    for e in iteration_ends(g, end):
        if e is None:
            break
        steps.append(e - prev)
        prev = e
    out: dict[str, Any] = {
        "iterations": g.iterations,
        "step_times_us": [round(x / 1e6, 3) for x in steps],
    }
    if steps:
        p99 = percentile(steps, 99)
        out["mean_step_us"] = round(sum(steps) / len(steps) / 1e6, 3)
        out["p99_step_us"] = round(p99 / 1e6, 3)
        out["max_step_us"] = round(max(steps) / 1e6, 3)
        if ideal_ps:
            out["p99_slowdown"] = round(p99 / (ideal_ps / g.iterations), 4)
    return out


def packet_times(
    jobs: list[PlacedJob], lowered: list[tuple[int, Lowered]], result: Result
) -> list[tuple[list[Any], list[Any]]]:
    """Every job's task (starts, ends) in ps from a packet-level run."""
    out = []
    for job, (base, low) in zip(jobs, lowered, strict=True):
        arrived = [f.rx_finish_ps for f in result.flows[base : base + len(low.flows)]]
        start, end = times(job.graph, low, arrived)
        out.append((list(start), list(end)))
    return out


def packet_rows(
    spec: ClosSpec, jobs: list[PlacedJob], lowered: list[tuple[int, Lowered]], result: Result
) -> list[dict[str, Any]]:
    """The ``jobs`` rows of a packet-level run."""
    return [
        job_row(job, start, end, ideal_step_ps(spec, job))
        for job, (start, end) in zip(jobs, packet_times(jobs, lowered, result), strict=True)
    ]


def trace(
    jobs: list[PlacedJob], job_times: list[tuple[list[Any], list[Any]]], faults: list[Any]
) -> dict[str, Any]:
    """The Chrome / Perfetto trace of a run's jobs (openmrc.workloads.jobs.trace)."""
    return chrome_trace(
        [(j.graph, j.hosts, s, e) for j, (s, e) in zip(jobs, job_times, strict=True)], faults
    )


def run_flow(
    spec: ClosSpec,
    transport: Any,
    seed: int,
    jobs: list[PlacedJob],
    faults: list[Any],
    until_us: float | None = None,
) -> tuple[FluidResult, list[dict[str, Any]], float]:
    """Run the jobs in the flow-level model: (raw result, ``jobs`` rows, wall seconds)."""
    started = time.perf_counter()
    model = fluid_model(spec, transport, seed, jobs, faults)
    res = model.run(None if until_us is None else until_us * US)
    wall = time.perf_counter() - started
    rows = [
        job_row(job, t.start, t.end, ideal_step_ps(spec, job))
        for job, t in zip(jobs, res.jobs, strict=True)
    ]
    return res, rows, wall


def flow_result(res: FluidResult, wall: float, sample_us: float) -> Result:
    """A packet-style Result (no flows) carrying the flow-level run's end, events and faults."""
    return Result(
        flows=[],
        sim_end_ps=int(res.end_ps),
        wall_seconds=round(wall, 3),
        events=res.events,
        ev_events=[],
        qp_events=[],
        goodput_series={},
        sample_interval_ps=int(sample_us * US),
        fabric={
            "time_ps": int(res.end_ps),
            "events": res.events,
            "totals": {},
            "ports": [],
            "switches": [],
            "hosts": [],
            "faults": res.faults,
            "model": "flow",
            "rate_recomputes": res.recomputes,
        },
        verified=None,
    )


def step_lines(doc: dict[str, Any]) -> list[str]:
    """The CLI's step-time lines, one per job."""
    out = []
    for j in doc.get("jobs") or []:
        if j.get("step_time_us") is None:
            out.append(f"  job {j['name']}: did not finish ({j['gpus']} GPUs)")
            continue
        sd = j.get("slowdown")
        out.append(
            f"  job {j['name']}: step time {j['step_time_us'] / 1000:,.3f} ms, "
            f"compute {j['compute_us'] / 1000:,.3f} ms, exposed comm "
            f"{j['exposed_comm_us'] / 1000:,.3f} ms, idle {j['idle_us'] / 1000:,.3f} ms"
            + ("" if sd is None else f", slowdown {sd:.3f}")
            + f" ({j['gpus']} GPUs)"
        )
        if j.get("iterations", 1) > 1 and j.get("p99_step_us") is not None:
            p99 = j.get("p99_slowdown")
            out.append(
                f"    {len(j['step_times_us'])} of {j['iterations']} iterations: mean step "
                f"{j['mean_step_us'] / 1000:,.3f} ms, p99 {j['p99_step_us'] / 1000:,.3f} ms"
                + (
                    ""
                    if p99 is None
                    else f" (slowdown {j['slowdown'] or 0:.3f} mean, {p99:.3f} p99)"
                )
            )
    return out


def has_jobs(docs: Sequence[dict[str, Any]]) -> bool:
    """Whether these results are of a job run (their summaries lead with step time)."""
    return any(d.get("jobs") for d in docs)


def _ms(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value / 1000:,.{digits}f}"


def job_rows(docs: Sequence[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The summary table of a job run: per job, one row per measure, one column per
    run (transport); step time first (docs/training.md, "Step time")."""
    names: list[str] = []
    for d in docs:
        for j in d.get("jobs") or []:
            if j["name"] not in names:
                names.append(j["name"])
    rows: list[tuple[str, list[str]]] = []
    several = len(names) > 1
    for name in names:
        found = [next((j for j in d.get("jobs") or [] if j["name"] == name), None) for d in docs]

        def row(
            label: str, fn: Any, found: list[Any] = found, name: str = name
        ) -> tuple[str, list[str]]:
            named = several and not label.startswith("job ")
            return (f"{name}: {label}" if named else label), [
                "-" if j is None else fn(j) for j in found
            ]

        gpus = next(j["gpus"] for j in found if j is not None)
        rows.append(
            row(
                f"job {name} ({gpus} GPUs): step time ms",
                lambda j: (
                    "did not finish" if j.get("step_time_us") is None else _ms(j["step_time_us"])
                ),
            )
        )
        rows.append(row("compute ms (busiest GPU)", lambda j: _ms(j.get("compute_us"))))
        rows.append(row("exposed comm ms", lambda j: _ms(j.get("exposed_comm_us"))))
        rows.append(row("idle ms (mean per GPU)", lambda j: _ms(j.get("idle_us"))))
        rows.append(row("ideal step ms (lower bound)", lambda j: _ms(j.get("ideal_step_us"))))
        rows.append(
            row(
                "slowdown (step / ideal)",
                lambda j: "-" if j.get("slowdown") is None else f"{j['slowdown']:.3f}",
            )
        )
        if any(j is not None and j.get("iterations", 1) > 1 for j in found):
            rows.append(
                row(
                    "iterations",
                    lambda j: f"{len(j.get('step_times_us') or [])}/{j.get('iterations', 1)}",
                )
            )
            rows.append(row("p99 step ms", lambda j: _ms(j.get("p99_step_us"))))
            rows.append(
                row(
                    "p99 slowdown",
                    lambda j: "-" if j.get("p99_slowdown") is None else f"{j['p99_slowdown']:.3f}",
                )
            )
        if any(j is not None and j.get("skipped_collectives") for j in found):
            rows.append(
                row("skipped collectives", lambda j: str(_count(j.get("skipped_collectives"))))
            )
    return rows


def _count(value: Any) -> int:
    """How many skipped collectives a ``skipped_collectives`` field records (a count, a
    list of records, or a table of counts by reason)."""
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return sum(_count(v) if not isinstance(v, int) else v for v in value.values())
    if isinstance(value, list):
        return sum(int(x.get("count", 1)) if isinstance(x, dict) else 1 for x in value)
    return 0


def network_line(doc: dict[str, Any]) -> str | None:
    """One line on the network under a packet-level job run (None at flow level, where
    there are no flows): flows, retransmissions, timeouts; results.json has the rest."""
    s = doc["summary"]
    if not s.get("flows"):
        return None
    return (
        f"  network: {s['completed']:,}/{s['flows']:,} flows done, "
        f"{s.get('retransmits', 0):,} retransmits, {s.get('timeouts', 0):,} timeouts, "
        f"{s.get('faults', 0):,} faults applied (results.json has every flow)"
    )


__all__ = [
    "PlacedJob",
    "add_packet_jobs",
    "flow_result",
    "fluid_model",
    "has_jobs",
    "ideal_step_ps",
    "job_row",
    "job_rows",
    "network_line",
    "packet_rows",
    "packet_times",
    "placed",
    "run_flow",
    "step_lines",
    "trace",
]
