"""A small RoCE job whose flows end at many different times: the shared input of the
flow-level tests that compare two ways of computing one run's rates."""

from __future__ import annotations

import random
from collections.abc import Callable

from openmrc.flow.model import FluidFault, FluidJob, FluidModel, FluidResult
from openmrc.topology import ClosSpec
from openmrc.workloads.jobs.graph import JobGraph, Task


def mixed_roce_run(configure: Callable[[FluidModel], None], fault: bool = False) -> FluidResult:
    """RoCE QPs in 2 planes: 12 chains of compute and point-to-point transfers of
    different sizes between random hosts, a ring all-reduce and an all-to-all (with
    ``fault``, a T0-T1 link failing 60 us in), on a model ``configure`` has set up;
    kept sets of flows are reused from one flow on.  The run's result."""
    spec = ClosSpec(planes=2, t0s=4, hosts_per_t0=4, t1s=4)
    model = FluidModel(spec, "roce", qps=2, seed=3, gpus_per_server=1)
    model.reuse_min_flows = 1
    configure(model)
    rng = random.Random(7)
    g = JobGraph("mix", 16, gpus_per_server=1)
    for _chain in range(12):
        prev: tuple[int, ...] = ()
        for _k in range(4):
            a, b = rng.sample(range(16), 2)
            prev = (g.add(Task("compute", (a,), deps=prev, dur_ps=rng.randrange(1, 40) * 10**6)),)
            prev = (g.add(Task("p2p", (a, b), deps=prev, size=rng.randrange(64, 2048) << 10)),)
    g.add(Task("allreduce", tuple(range(0, 16, 2)), size=1 << 20))
    g.add(Task("alltoall", tuple(range(1, 16, 2)), size=1 << 20))
    model.add_job(FluidJob(g, list(range(16))))
    if fault:
        model.add_fault(FluidFault(60_000_000, "link_down", "p0t0x0-p0t1x0"))
    return model.run()
