"""A job's ideal step: a lower bound on its step time on any fabric and transport.

A job's slowdown is its step time over this ideal, so it is never below 1.
The ideal is the longest of two bounds, each of which no run can beat:

* **the critical path at line rate**: the task graph's longest path where a
  compute span takes its time, a transfer between two GPUs of one server
  takes its bytes over NVLink, and a transfer over the network takes its bytes
  at the NIC's full line rate (every plane, headers free) with zero latency.
  A collective is the chain of transfers it runs as (NCCL's ring or the
  all-to-all of :mod:`openmrc.workloads.collectives`, each step waiting for the
  one before it, as the packet simulator and the flow-level model both run it),
  and takes at least what its busiest NIC sends or receives at line rate;
* **the busiest NIC**: the most bytes any host sends (or receives) over the
  network in the whole iteration, at line rate.

Neither counts queueing, sharing between flows, latency, headers or
retransmissions: that is what the slowdown measures.  (An earlier ideal was the
job alone in the flow-level model; the packet level, whose transfers between
hosts of one T0 take two links where the flow level charges every transfer the
path through a T1, could beat it: a slowdown of 0.87 on a small all-reduce.)
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import collectives as coll
from .graph import JobGraph

#: a transfer task's time at line rate and its (rank position, bytes) sent and received
_Shape = tuple[float, list[tuple[int, int]], list[tuple[int, int]]]


def ideal_step_ps(graph: JobGraph, hosts: Sequence[int], nic_bytes_per_ps: float) -> float:
    """The lower bound (ps) on ``graph`` run with rank ``r`` on host ``hosts[r]``, from
    its start to its last task's end (all iterations of a repeated graph), when a
    host's NIC moves at most ``nic_bytes_per_ps`` (all planes, line rate)."""
    if nic_bytes_per_ps <= 0:
        raise ValueError("nic_bytes_per_ps: must be > 0")
    G = graph.gpus_per_server
    nvl = graph.nvlink_bytes_per_ps
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    end = [0.0] * len(graph.tasks)
    # a transfer task's own cost depends only on its kind, size and which of its ranks
    # share a server: computed once per such shape (a job's DP rings, pipeline sends
    # and expert all-to-alls repeat a few shapes thousands of times)
    shapes: dict[tuple[object, ...], _Shape] = {}
    for i, task in enumerate(graph.tasks):
        start = max((end[d] for d in task.deps), default=0.0)
        if task.kind == "compute":
            end[i] = start + task.dur_ps
            continue
        if task.kind != "p2p" and len(task.ranks) < 2:
            end[i] = start
            continue
        ranks = task.ranks[:2] if task.kind == "p2p" else task.ranks
        servers: dict[int, int] = {}
        where = tuple(servers.setdefault(hosts[r] // G, len(servers)) for r in ranks)
        key = (task.kind, task.size, where)
        got = shapes.get(key)
        if got is None:
            got = _shape_cost(task.kind, task.size, where, nvl, nic_bytes_per_ps)
            shapes[key] = got
        took, out, into = got
        end[i] = start + took
        for pos, b in out:
            h = hosts[ranks[pos]]
            sent[h] = sent.get(h, 0) + b
        for pos, b in into:
            h = hosts[ranks[pos]]
            received[h] = received.get(h, 0) + b
    path = max(end, default=0.0)
    nic = max([*sent.values(), *received.values(), 0]) / nic_bytes_per_ps
    return max(path, nic)


def _shape_cost(kind: str, size: int, where: tuple[int, ...], nvl: float, nic: float) -> _Shape:
    """A transfer task's time at line rate (its transfers' own chain, or its busiest
    NIC) and the bytes each of its ranks sends and receives over the network, by
    rank position, for ranks on servers ``where`` (a server index per position)."""
    if kind == "p2p":
        transfers = [coll.Transfer(0, 1, size)]
    else:
        transfers = list(coll.build(kind, len(where), size).transfers)
    done: list[float] = []
    out: dict[int, int] = {}
    into: dict[int, int] = {}
    for t in transfers:
        ready = max((done[d] for d in t.deps), default=0.0)
        if where[t.src] == where[t.dst]:
            done.append(ready + t.size / nvl)
            continue
        done.append(ready + t.size / nic)
        out[t.src] = out.get(t.src, 0) + t.size
        into[t.dst] = into.get(t.dst, 0) + t.size
    busiest = max([*out.values(), *into.values(), 0]) / nic
    return max(max(done, default=0.0), busiest), list(out.items()), list(into.items())


def nic_bytes_per_ps(planes: int, host_gbps: float) -> float:
    """A host's NIC line rate over all its planes, bytes per picosecond."""
    return planes * host_gbps / 8000.0


__all__ = ["ideal_step_ps", "nic_bytes_per_ps"]
