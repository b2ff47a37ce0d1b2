"""The run keeps an ended flow's slot in its per-slot tables, marked gone, and drops the
gone slots only when a share of them is gone (``FluidModel.compact_dead``): the task
times are those of compacting at every end, and of never compacting while a flow is in
flight, with and without a failure (whose rerouting compacts first).  The flows on each
resource are kept in sets that stay when emptied; a reroute empties every one before
the flows are put back on their new routes, so a flow rerouted and ended leaves nothing
on its old route for a later change's walk to reach."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from openmrc.flow.model import FluidFault, FluidJob, FluidModel
from openmrc.topology import ClosSpec
from openmrc.workloads.jobs.graph import JobGraph, Task
from tests.flow.mixed import mixed_roce_run


def _compacting(share: float) -> Callable[[FluidModel], None]:
    """A model set-up that compacts the tables at ``share`` of their slots gone."""

    def configure(model: FluidModel) -> None:
        model.compact_dead = share

    return configure


@pytest.mark.parametrize("fault", [False, True])
def test_gone_slots_change_no_task_time(fault: bool) -> None:
    """Compacting at every end (0), at half gone (the default) and only when none is in
    flight (inf): the same start and end for every task, and every task ends."""
    runs = []
    for share in (0.0, 0.5, math.inf):
        res = mixed_roce_run(_compacting(share), fault=fault)
        assert None not in res.jobs[0].end
        runs.append((res.jobs[0].start, res.jobs[0].end, res.events))
    assert runs[1] == runs[0]
    assert runs[2] == runs[0]


def _rerouted_then_ended(refill: str, share: float) -> tuple[list[float | None], ...]:
    """Host 0 sends to host 4 (T0 0 to T0 1) through T1 0, whose link from T0 0 is
    down: routing converges while it sends and moves it to T1 1, and it ends while
    host 3's long transfer stays in flight.  Then host 8 (T0 2) sends to host 5 through
    T1 0's link down to T0 1, on host 0's old route, and host 0 to host 6: every
    task's start and end."""
    spec = ClosSpec(planes=1, t0s=3, hosts_per_t0=4, t1s=2)
    model = FluidModel(
        spec,
        "roce",
        gpus_per_server=1,
        convergence_ps=150_000_000,
        detect_ps=100_000_000,
        rto_ps=2_000_000_000,
        path_hash=lambda s, d, c, q: 0,  # every QP on T1 0 while it is known alive
    )
    model.refill = refill
    model.compact_dead = share
    model.add_fault(FluidFault(0, "link_down", "p0t0x0-p0t1x0"))
    g = JobGraph("pairs", 12, gpus_per_server=1)
    first = g.add(Task("p2p", (0, 4), size=4 << 20))
    g.add(Task("p2p", (3, 7), size=64 << 20))
    g.add(Task("p2p", (8, 5), size=4 << 20, deps=(first,)))
    g.add(Task("p2p", (0, 6), size=4 << 20, deps=(first,)))
    model.add_job(FluidJob(g, list(range(12))))
    res = model.run()
    return res.jobs[0].start, res.jobs[0].end


def test_a_rerouted_flow_that_ended_is_on_no_resource() -> None:
    """The walks' refills give the rates of refilling every flow: had host 0's ended
    flow stayed on its old route's sets, host 8's walk would reach it (its slot kept
    gone, or another slot by its id) and fill it beside host 0's new flow."""
    every = _rerouted_then_ended("all", 0.0)
    assert None not in every[1]
    assert _rerouted_then_ended("component", math.inf) == every
    assert _rerouted_then_ended("component", 0.5) == every
