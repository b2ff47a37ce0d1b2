"""A job's task graph as the packet simulator's flows, and the step time read back.

The packet simulator runs flows, not compute.  :func:`lower` turns a
:class:`~openmrc.workloads.jobs.graph.JobGraph` into :class:`~openmrc.workloads.FlowSpec` s:

* a p2p transfer is one flow; a collective is NCCL's ring (or all-to-all) of
  transfers from :mod:`openmrc.workloads.collectives`, its first transfers
  waiting for the collective's dependencies (every rank ready: a barrier);
* a transfer between two GPUs of one server is NVLink time (a delay node),
  not a flow;
* compute spans and NVLink delays are folded into the flows after them: a
  flow waits ``dep_gaps[i]`` after its i-th dependency arrived, where the gap
  is the longest chain of delays between the two, and starts no earlier than
  the longest chain of delays from the job's start (``start_ps``).  Start
  and end times are max-plus sums, so the fold is exact: the packet
  simulator starts every flow when the graph says it starts.

:func:`times` reads the flows' arrival times back into every task's start
and end, the same quantities the flow-level model reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import FlowSpec
from .. import collectives as coll
from .graph import JobGraph
from .model import JobError

#: the frontier key of "the job's start" (static delays from it).
_START = -1


@dataclass
class Lowered:
    """The flows of one job and how to read its task times back."""

    flows: list[FlowSpec]
    #: per lowered node: ("flow", flow index, deps) or ("delay", duration, deps)
    nodes: list[tuple[str, int, tuple[int, ...]]]
    #: per task: its lowered nodes that nothing else of the task waits for
    sinks: list[tuple[int, ...]]
    #: the job's start (ps)
    start_ps: int


def lower(
    graph: JobGraph,
    hosts: Sequence[int],
    start_ps: int = 0,
    message: int = 1 << 20,
    name: str = "",
    base: int = 0,
) -> Lowered:
    """The flows of ``graph`` with rank ``r`` on host ``hosts[r]``, from ``start_ps``.

    ``base``: where these flows will sit in the list given to
    ``Experiment.add_flows`` (their ``deps`` are offset by it).
    """
    if len(hosts) != graph.ranks:
        raise JobError(f"job {graph.name}: {len(hosts)} hosts for {graph.ranks} ranks")
    G = graph.gpus_per_server
    prefix = name or graph.name
    nodes: list[tuple[str, int, tuple[int, ...]]] = []
    flow_meta: list[tuple[int, int, int, str]] = []  # src, dst, size, label
    sinks: list[tuple[int, ...]] = []
    for ti, task in enumerate(graph.tasks):
        ext = tuple(sorted({s for d in task.deps for s in sinks[d]}))
        if task.kind == "compute":
            nodes.append(("delay", task.dur_ps, ext))
            sinks.append((len(nodes) - 1,))
            continue
        if task.kind == "p2p":
            transfers = [coll.Transfer(0, 1, task.size)]
        else:
            n = len(task.ranks)
            if n < 2:
                sinks.append(ext)
                continue
            transfers = list(coll.build(task.kind, n, task.size).transfers)
        ranks = task.ranks
        first = len(nodes)
        used: set[int] = set()
        for t in transfers:
            src, dst = hosts[ranks[t.src]], hosts[ranks[t.dst]]
            deps = ext if not t.deps else tuple(first + d for d in t.deps)
            used.update(t.deps)
            if src // G == dst // G:
                dur = round(t.size / graph.nvlink_bytes_per_ps)
                nodes.append(("delay", dur, deps))
            else:
                nodes.append(("flow", len(flow_meta), deps))
                flow_meta.append(
                    (
                        src,
                        dst,
                        t.size,
                        f"{prefix}#{ti}:{task.label}:r{ranks[t.src]}->r{ranks[t.dst]}",
                    )
                )
        sinks.append(tuple(first + i for i in range(len(transfers)) if i not in used))
    # Fold delays: frontier of every node = {flow node: longest delay chain after it}.
    front: list[dict[int, int]] = []
    flows: list[FlowSpec] = []
    node_flow: dict[int, int] = {}
    for ni, (kind, val, deps) in enumerate(nodes):
        merged: dict[int, int] = {}
        for d in deps:
            if nodes[d][0] == "flow":
                if merged.get(d, -1) < 0:
                    merged[d] = 0
            else:
                for k, g in front[d].items():
                    if g > merged.get(k, -1):
                        merged[k] = g
        if not merged:
            merged = {_START: 0}
        if kind == "delay":
            front.append({k: g + val for k, g in merged.items()})
            continue
        front.append({})
        static = merged.pop(_START, 0)
        keys = sorted(merged)
        src, dst, size, label = flow_meta[val]
        node_flow[ni] = len(flows)
        flows.append(
            FlowSpec(
                src,
                dst,
                size,
                start_ps=start_ps + static,
                message=message,
                name=label,
                deps=tuple(base + node_flow[k] for k in keys),
                dep_gaps=tuple(merged[k] for k in keys) if any(merged.values()) else (),
                conn=f"{prefix}/{src}-{dst}",
            )
        )
    return Lowered(flows, nodes, sinks, start_ps)


def times(
    graph: JobGraph, low: Lowered, arrived: Sequence[int | None]
) -> tuple[list[int | None], list[int | None]]:
    """Every task's (start, end) in ps from the flows' arrival times (None: never)."""
    node_end: list[int | None] = []
    for kind, val, deps in low.nodes:
        ready: int | None = low.start_ps
        for d in deps:
            e = node_end[d]
            if e is None:
                ready = None
                break
            ready = max(ready, e) if ready is not None else None
        if kind == "flow":
            node_end.append(arrived[val])
        else:
            node_end.append(None if ready is None else ready + val)
    start: list[int | None] = []
    end: list[int | None] = []
    for ti, task in enumerate(graph.tasks):
        s: int | None = low.start_ps
        for d in task.deps:
            e = end[d]
            s = None if (e is None or s is None) else max(s, e)
        start.append(s)
        ends = [node_end[n] for n in low.sinks[ti]]
        if task.kind != "compute" and not low.sinks[ti]:
            end.append(s)
        elif any(e is None for e in ends):
            end.append(None)
        else:
            end.append(max(e for e in ends if e is not None))
    return start, end


__all__ = ["Lowered", "lower", "times"]
