"""Several iterations of a job back to back, and the step time of each.

``[job] iterations = N`` runs the iteration's task graph ``N`` times.  Copy
``k + 1`` starts after copy ``k`` has ended: a zero-length *barrier* task on
rank 0 waits for every task of copy ``k`` that nothing else in it waits for,
and every task of copy ``k + 1`` without dependencies waits for the barrier
(2 x ranks dependencies per boundary, not ranks squared).  Megatron ranks do
not barrier between iterations (a rank starts its next forward pass after its
own optimizer step), so this puts at most the skew between the ranks' ends
into each step; in exchange every iteration's step time is well defined:

    step_k = end of copy k - end of copy k-1     (end of copy -1: the job's start)

The repeated graph records where each copy starts in
:attr:`JobGraph.iteration_starts`; :func:`iteration_ends` reads the ends back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .graph import JobGraph, Task
from .model import JobError


def repeat(graph: JobGraph, n: int) -> JobGraph:
    """``graph``'s tasks ``n`` times in a row, with a barrier between copies (module doc)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise JobError(f"job.iterations: must be a positive integer, got {n!r}")
    if n == 1:
        return graph
    base = graph.tasks
    used = {d for t in base for d in t.deps}
    sinks = [i for i in range(len(base)) if i not in used]
    out = JobGraph(
        graph.name,
        graph.ranks,
        gpus_per_server=graph.gpus_per_server,
        nvlink_bytes_per_ps=graph.nvlink_bytes_per_ps,
        skipped=dict(graph.skipped),
    )
    barrier = -1
    for k in range(n):
        out.iteration_starts.append(len(out.tasks))
        off = len(out.tasks)
        for t in base:
            deps = tuple(d + off for d in t.deps)
            if not deps and barrier >= 0:
                deps = (barrier,)
            out.tasks.append(Task(t.kind, t.ranks, deps, t.dur_ps, t.size, t.label, t.phase))
        if k < n - 1:
            barrier = out.add(
                Task(
                    "compute",
                    (0,),
                    tuple(s + off for s in sinks),
                    0,
                    label=f"end of iteration {k}",
                    phase="barrier",
                )
            )
    return out


def iteration_ends(graph: JobGraph, end: Sequence[float | None]) -> list[float | None]:
    """When each iteration's last task ended (None: it never did); one iteration: the last end."""
    starts = graph.iteration_starts or [0]
    bounds = [*starts[1:], len(graph.tasks)]
    out: list[float | None] = []
    for a, b in zip(starts, bounds, strict=True):
        part = end[a:b]
        out.append(None if any(e is None for e in part) else max(e for e in part if e is not None))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (q in 0..100): ``sorted[ceil(q n / 100) - 1]``."""
    s = sorted(values)
    if not s:
        raise ValueError("percentile of no values")
    k = max(1, math.ceil(q * len(s) / 100 - 1e-9))
    return s[min(k, len(s)) - 1]


__all__ = ["iteration_ends", "percentile", "repeat"]
