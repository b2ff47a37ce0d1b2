"""Where time went: a job's iteration as a Chrome / Perfetto trace (trace-event JSON).

``ui.perfetto.dev`` and ``chrome://tracing`` open the file.  Layout:

* one process per job (``pid`` = job index, named after the job);
* one thread (track) per rank (``tid`` = rank, named ``rank r (host h)``);
* compute spans are complete events (``ph = "X"``) on the rank's track:
  a GPU computes one thing at a time, so they never overlap;
* transfers and collectives are async slices (``ph = "b"`` / ``"e"``, one
  ``id`` each) on every rank taking part: they overlap compute and each other,
  which async slices may do;
* faults are global instant events (``ph = "i"``, ``s = "g"``).

Timestamps and durations are microseconds (the format's unit), floats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .graph import JobGraph


def chrome_trace(
    jobs: Sequence[tuple[JobGraph, Sequence[int], Sequence[Any], Sequence[Any]]],
    faults: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The trace of ``jobs``: (graph, hosts, task starts ps, task ends ps) each; tasks
    that never ran are left out."""
    events: list[dict[str, Any]] = []
    next_id = 0
    for pid, (graph, hosts, start, end) in enumerate(jobs):
        events.append(
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": graph.name}}
        )
        for r in range(graph.ranks):
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": r,
                    "args": {"name": f"rank {r} (host {hosts[r]})"},
                }
            )
        for i, task in enumerate(graph.tasks):
            s, e = start[i], end[i]
            if s is None or e is None:
                continue
            ts, dur = s / 1e6, max(0.0, (e - s) / 1e6)
            if task.kind == "compute":
                events.append(
                    {
                        "ph": "X",
                        "name": task.label or task.phase,
                        "cat": task.phase or "compute",
                        "pid": pid,
                        "tid": task.ranks[0],
                        "ts": ts,
                        "dur": dur,
                    }
                )
                continue
            ranks = task.ranks[:1] if task.kind == "p2p" else task.ranks
            args = {"kind": task.kind, "bytes": task.size, "ranks": len(task.ranks)}
            for r in ranks:
                common = {"cat": f"comm.{task.phase}", "pid": pid, "tid": r, "id": next_id}
                name = task.label or task.kind
                events.append({"ph": "b", "name": name, "ts": ts, "args": args, **common})
                events.append({"ph": "e", "name": name, "ts": ts + dur, **common})
                next_id += 1
    for f in faults:
        events.append(
            {
                "ph": "i",
                "s": "g",
                "name": f"{f.get('kind')} {f.get('target', '')}".strip(),
                "cat": "fault",
                "pid": 0,
                "tid": 0,
                "ts": float(f.get("time_ps", 0)) / 1e6,
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


__all__ = ["chrome_trace"]
