"""The job section of ``report.html``: where a training job's step time went.

For results with ``jobs`` (openmrc.pipeline.jobrun) the report leads with them: the
headline is each job's step time per transport, the summary table is
:func:`openmrc.pipeline.jobrun.job_rows`, and three figures follow:

* ``job-breakdown``: per job, one bar per transport: its step time split into
  compute (the busiest GPU's), idle on the critical path (pipeline bubbles and
  waits that are not the network) and exposed communication, which add up to
  the step time; the ideal step (a lower bound, openmrc.workloads.jobs.ideal) as
  a dashed line;
* ``job-timeline``: per transport, a row per rank (the first
  :data:`TIMELINE_RANKS` ranks of the first job, spread evenly over its ranks so
  that every pipeline stage and server shows): compute spans, each collective's
  and transfer's span by kind and purpose, faults as dashed lines; drawn from
  the run's trace (trace.json), so only when the report is written with it;
* ``job-iterations``: step time per iteration per transport, from two
  iterations on; the same numbers are written as ``job_steps.csv``.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .jobrun import has_jobs

Plot = tuple[str, str, bytes]  # (id, caption, PNG), as openmrc.pipeline.report


@dataclass(frozen=True)
class Kit:
    """The report's figure helpers (openmrc.pipeline.report hands them over, so that this
    module does not import it): the same layout, PNG, fault marks and time axes as
    the report's other figures."""

    #: (plt, rows, cols, height in inches, **subplots kwargs) -> (fig, axes grid)
    figure: Callable[..., tuple[Any, Any]]
    #: (fig, plt) -> PNG bytes carrying the figure's layout
    png: Callable[[Any, Any], bytes]
    #: docs -> every fault of the runs, (time us, label) in time order
    faults: Callable[[list[dict[str, Any]]], list[tuple[float, str]]]
    #: docs -> the caption's key to the fault marks
    fault_key: Callable[[list[dict[str, Any]]], str]
    #: (ax, doc, numbering, scale) -> dashed, labelled lines at a run's own faults
    mark_faults: Callable[..., None]
    #: panels share a time axis when the longest run is at most this many times the shortest
    shared_x_ratio: float


#: The timeline shows at most this many ranks (rows) of a job.
TIMELINE_RANKS = 16
#: The file of per-iteration step times written next to report.html.
STEPS_CSV = "job_steps.csv"

COLOURS = {"mrc": "#1f77b4", "roce": "#d62728", "ib": "#2ca02c"}
#: compute, idle on the critical path, exposed communication.
PARTS = (
    ("compute (busiest GPU)", "#4c72b0"),
    ("idle on the critical path (bubbles, waits)", "#c7c7c7"),
    ("exposed communication", "#dd8452"),
)
COMM_COLOURS = ["#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


def _label(doc: dict[str, Any]) -> str:
    return str(doc["provenance"]["transport"])


def _colour(doc: dict[str, Any]) -> str:
    return COLOURS.get(_label(doc), "#7f7f7f")


def _names(docs: Sequence[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for d in docs:
        for j in d.get("jobs") or []:
            if j["name"] not in out:
                out.append(j["name"])
    return out


def _job(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((j for j in doc.get("jobs") or [] if j["name"] == name), None)


def headline(docs: Sequence[dict[str, Any]]) -> list[str]:
    """The report's headline for a job run: each transport's step time per job, its
    breakdown and slowdown, and which transport's step was shortest."""
    lines = []
    names = _names(docs)
    for doc in docs:
        parts = []
        for name in names:
            j = _job(doc, name)
            if j is None:
                continue
            if j.get("step_time_us") is None:
                parts.append(f"job {name} did not finish its iteration")
                continue
            mean = " (mean of its iterations)" if j.get("iterations", 1) > 1 else ""
            sd = j.get("slowdown")
            parts.append(
                f"job {name} ({j['gpus']} GPUs): step time {j['step_time_us'] / 1000:,.3f} ms"
                f"{mean}: compute {j['compute_us'] / 1000:,.3f} ms, exposed communication "
                f"{j['exposed_comm_us'] / 1000:,.3f} ms, idle {j['idle_us'] / 1000:,.3f} ms "
                "per GPU"
                + (
                    ""
                    if sd is None
                    else f"; slowdown {sd:.3f} over its ideal step of "
                    f"{j['ideal_step_us'] / 1000:,.3f} ms (a lower bound)"
                )
            )
        text = f"{_label(doc)}: " + "; ".join(parts)
        if doc.get("partial"):
            text += " (interrupted: partial results)"
        lines.append(text)
    if len(docs) > 1 and names:
        name = names[0]
        steps = {
            _label(d): j["step_time_us"]
            for d in docs
            if (j := _job(d, name)) is not None and j.get("step_time_us")
        }
        if steps:
            best = min(steps, key=lambda n: steps[n])
            slower = [
                f"{n}'s took {steps[n] / steps[best]:,.2f} x as long" for n in steps if n != best
            ]
            lines.insert(
                0,
                f"Outcome: {best} had the shortest step of job {name}"
                + (f"; {', '.join(slower)}" if slower else ""),
            )
    return lines


def plot_breakdown(docs: Sequence[dict[str, Any]], plt: Any, kit: Kit) -> Plot | None:
    """Per job, a stacked bar per transport: compute, idle on the critical path,
    exposed communication (they add up to the step time); the ideal dashed."""
    names = [n for n in _names(docs) if any(_finished(d, n) for d in docs)]
    if not names:
        return None
    have = [d for d in docs if any(_finished(d, n) for n in names)]
    fig, axes = kit.figure(plt, len(names), 1, 0.9 + (0.5 + 0.45 * len(have)) * len(names))
    for ax, name in zip((row[0] for row in axes), names, strict=True):
        ys, labels = [], []
        longest = 0.0
        ideal = None
        for y, doc in enumerate(reversed(have)):
            j = _job(doc, name)
            if j is None or j.get("step_time_us") is None:
                continue
            step = j["step_time_us"] / 1000
            compute = min(step, j["compute_us"] / 1000)
            exposed = min(step - compute, j["exposed_comm_us"] / 1000)
            parts = (compute, max(0.0, step - compute - exposed), exposed)
            left = 0.0
            for (label, colour), width in zip(PARTS, parts, strict=True):
                ax.barh(y, width, left=left, color=colour, height=0.6, label=label)
                left += width
            ax.text(step, y, f" {step:,.3f} ms", va="center", ha="left", fontsize=8)
            longest = max(longest, step)
            ideal = j.get("ideal_step_us") if ideal is None else ideal
            ys.append(y)
            labels.append(_label(doc))
        if ideal:
            ax.axvline(
                ideal / 1000, color="#222222", linestyle="--", linewidth=1, label="ideal step"
            )
        ax.set_yticks(ys)
        ax.set_yticklabels(labels)
        ax.set_ylim(-0.6, len(have) - 0.4)
        ax.set_xlim(0, longest * 1.3 or 1.0)
        ax.set_ylabel(f"job {name}")
        ax.grid(axis="x", alpha=0.3)
    axes[-1][0].set_xlabel("step time (ms)")
    _legend(fig, axes)
    return (
        "job-breakdown",
        "Step time per transport, split into compute (the busiest GPU's), idle on the "
        "critical path (pipeline bubbles and waits other than the network) and exposed "
        "communication (not hidden behind compute); they add up to the step time. Dashed: "
        "the ideal step, a lower bound (the critical path with every transfer at the NIC's "
        "line rate and no latency, or the busiest NIC's bytes at line rate).",
        kit.png(fig, plt),
    )


def _finished(doc: dict[str, Any], name: str) -> bool:
    j = _job(doc, name)
    return j is not None and j.get("step_time_us") is not None


def _legend(fig: Any, axes: Any) -> None:
    handles: dict[str, Any] = {}
    for row in axes:
        for ax in row:
            for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, h)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside upper center",
            ncol=min(len(handles), 3),
            fontsize=8,
            frameon=False,
        )


def spans(
    trace: dict[str, Any], pid: int = 0
) -> tuple[
    dict[int, list[tuple[float, float]]], dict[str, dict[int, list[tuple[float, float]]]], int
]:
    """A job's spans from its trace (openmrc.workloads.jobs.trace): per rank its compute
    spans, per collective kind and purpose (``allreduce dp``) per rank its spans, in
    (start us, duration us); and the job's rank count."""
    compute: dict[int, list[tuple[float, float]]] = {}
    comm: dict[str, dict[int, list[tuple[float, float]]]] = {}
    begun: dict[int, tuple[str, int, float]] = {}
    ranks = 0
    for e in trace.get("traceEvents", []):
        if e.get("pid") != pid:
            continue
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "thread_name":
            ranks = max(ranks, int(e["tid"]) + 1)
        elif ph == "X":
            compute.setdefault(int(e["tid"]), []).append((float(e["ts"]), float(e["dur"])))
        elif ph == "b":
            kind = str(e.get("args", {}).get("kind", "transfer"))
            phase = str(e.get("cat", "")).removeprefix("comm.")
            begun[int(e["id"])] = (f"{kind} {phase}".strip(), int(e["tid"]), float(e["ts"]))
        elif ph == "e" and int(e["id"]) in begun:
            what, tid, ts = begun.pop(int(e["id"]))
            comm.setdefault(what, {}).setdefault(tid, []).append((ts, float(e["ts"]) - ts))
    return compute, comm, ranks


def timeline_ranks(ranks: int) -> list[int]:
    """The ranks the timeline shows: all of them up to :data:`TIMELINE_RANKS`, else that
    many evenly spread from rank 0 (every k-th)."""
    if ranks <= TIMELINE_RANKS:
        return list(range(ranks))
    step = -(-ranks // TIMELINE_RANKS)
    return list(range(0, ranks, step))


def plot_timeline(
    docs: Sequence[dict[str, Any]], traces: Sequence[dict[str, Any] | None], plt: Any, kit: Kit
) -> Plot | None:
    """Per transport, one row per rank of the first job: compute and each collective's
    spans over time, faults dashed (the run's own, numbered as in the other plots)."""
    have = [
        (d, spans(t)) for d, t in zip(docs, traces, strict=True) if t is not None and d.get("jobs")
    ]
    have = [(d, s) for d, s in have if s[0] or s[1]]
    if not have:
        return None
    ranks = max(s[2] for _, s in have) or 1
    picked = timeline_ranks(ranks)
    shown = len(picked)
    kinds = sorted({k for _, s in have for k in s[1]})
    colour = {k: COMM_COLOURS[i % len(COMM_COLOURS)] for i, k in enumerate(kinds)}
    fig, axes = kit.figure(plt, len(have), 1, 1.2 + len(have) * (0.7 + 0.16 * shown))
    flat = [row[0] for row in axes]
    numbering = kit.faults([d for d, _ in have])
    ends = []
    for ax, (doc, (compute, comm, _)) in zip(flat, have, strict=True):
        end = 0.0
        for row, r in enumerate(picked):
            items = compute.get(r, [])
            if items:
                ax.barh(
                    [row - 0.2] * len(items),  # compute: the upper bar (y grows down)
                    [d / 1000 for _, d in items],
                    left=[s / 1000 for s, _ in items],
                    height=0.4,
                    color="#4c72b0",
                    label="compute",
                )
                end = max(end, max(s + d for s, d in items))
        for k in kinds:
            for row, r in enumerate(picked):
                items = comm.get(k, {}).get(r, [])
                if items:
                    ax.barh(
                        [row + 0.2] * len(items),
                        [max(d, 0.0) / 1000 for _, d in items],
                        left=[s / 1000 for s, _ in items],
                        height=0.4,
                        color=colour[k],
                        alpha=0.8,
                        label=k,
                    )
                    end = max(end, max(s + d for s, d in items))
        ends.append(end / 1000)
        ax.set_ylim(shown - 0.5, -0.5)
        ticks = list(range(0, shown, max(1, shown // 8)))
        ax.set_yticks(ticks)
        ax.set_yticklabels([str(picked[t]) for t in ticks])
        ax.set_ylabel(f"{_label(doc)}\nrank")
        ax.grid(axis="x", alpha=0.3)
    # one time axis when the runs are of similar length, else each to its own end (as
    # the report's other per-transport panels)
    shared = max(ends) <= kit.shared_x_ratio * min(ends) if min(ends) > 0 else True
    for ax, end in zip(flat, ends, strict=True):
        ax.set_xlim(0, (max(ends) if shared else end) or 1.0)
    for ax, (doc, _) in zip(flat, have, strict=True):
        kit.mark_faults(ax, doc, numbering, 1e-3)
    for ax in flat if not shared else flat[-1:]:
        ax.set_xlabel("time (ms)")
    _legend(fig, axes)
    key = kit.fault_key([d for d, _ in have])
    job = _names([d for d, _ in have])[0]
    return (
        "job-timeline",
        f"Per-rank timeline of job {job}"
        + (
            f" (ranks 0, {picked[1]}, {picked[2]}, ... {picked[-1]}: {shown} of its {ranks})"
            if shown < ranks
            else ""
        )
        + ": compute (upper bar of each row) and each collective or transfer by kind and "
        "purpose (lower bar; dp: data parallel, pp: pipeline, ep: expert, zero: ZeRO), "
        "as in trace.json"
        + ("" if shared else " (each transport on its own time scale)")
        + (f"; dashed lines: faults: {key}" if key else ""),
        kit.png(fig, plt),
    )


def step_rows(docs: Sequence[dict[str, Any]]) -> list[tuple[str, str, int, float]]:
    """(job, transport, iteration from 1, step time us) of every iteration that ended
    (a one-iteration job: its step time)."""
    out = []
    for doc in docs:
        for j in doc.get("jobs") or []:
            steps = j.get("step_times_us")
            if steps is None:
                steps = [] if j.get("step_time_us") is None else [j["step_time_us"]]
            for i, s in enumerate(steps):
                out.append((j["name"], _label(doc), i + 1, float(s)))
    return out


def steps_csv(docs: Sequence[dict[str, Any]]) -> str:
    """:func:`step_rows` as CSV (``job,transport,iteration,step_time_us``)."""
    lines = ["job,transport,iteration,step_time_us"]
    for job, transport, i, s in step_rows(docs):
        lines.append(f"{_csv(job)},{transport},{i},{s}")
    return "\n".join(lines) + "\n"


def _csv(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def plot_iterations(docs: Sequence[dict[str, Any]], plt: Any, kit: Kit) -> Plot | None:
    """Step time per iteration, one line per transport (and job), from two iterations."""
    series: dict[tuple[str, str], list[float]] = {}
    for job, transport, _i, s in step_rows(docs):
        series.setdefault((job, transport), []).append(s / 1000)
    series = {k: v for k, v in series.items() if len(v) > 1}
    if not series:
        return None
    several = len({job for job, _ in series}) > 1
    fig, axes = kit.figure(plt, 1, 1, 3.2)
    ax = axes[0][0]
    for (job, transport), values in series.items():
        ax.plot(
            range(1, len(values) + 1),
            values,
            marker="o",
            markersize=3,
            color=COLOURS.get(transport, "#7f7f7f"),
            label=f"{transport} {job}" if several else transport,
        )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(fig, axes)
    return (
        "job-iterations",
        f"Step time per iteration (the numbers: {STEPS_CSV})",
        kit.png(fig, plt),
    )


def render(
    docs: Sequence[dict[str, Any]], traces: Sequence[dict[str, Any] | None], plt: Any, kit: Kit
) -> list[Plot]:
    """The job section's plots the documents (and traces) have data for."""
    if not has_jobs(docs):
        return []
    out = []
    for plot in (
        plot_breakdown(docs, plt, kit),
        plot_timeline(docs, traces, plt, kit),
        plot_iterations(docs, plt, kit),
    ):
        if plot is not None:
            out.append(plot)
    return out


def write_csv(directory: str | Path, docs: Sequence[dict[str, Any]]) -> Path | None:
    """Write :data:`STEPS_CSV` into ``directory`` (None: the results have no jobs)."""
    if not has_jobs(docs):
        return None
    path = Path(directory) / STEPS_CSV
    path.write_text(steps_csv(docs))
    return path


def section_note(docs: Sequence[dict[str, Any]]) -> str:
    """The HTML line under the job figures: where the per-iteration numbers are."""
    if not has_jobs(docs):
        return ""
    return (
        f"<p class='meta' id='job-steps'>Step time of every iteration: "
        f"<a href='{html.escape(STEPS_CSV)}'>{html.escape(STEPS_CSV)}</a>; "
        "every task's start and end: trace.json (ui.perfetto.dev opens it).</p>"
    )


__all__ = [
    "STEPS_CSV",
    "TIMELINE_RANKS",
    "Kit",
    "headline",
    "plot_breakdown",
    "plot_iterations",
    "plot_timeline",
    "render",
    "section_note",
    "spans",
    "step_rows",
    "steps_csv",
    "timeline_ranks",
    "write_csv",
]
