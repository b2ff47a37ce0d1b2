"""The flow level's run skips steps that change nothing: the lost bytes of dead QPs,
the queues of QPs dropped past a T0 uplink and the efficiencies below 1, while no
flow in flight has them (``FluidModel.skip_idle_steps``).  Runs where such flows come
in flight after a failure (fresh QPs on a dead path, dead QPs filling an uplink's
queue until PFC pauses them, MRC flows spraying onto dead paths) give every task the
same start and end with the skipping on and off.
"""

from __future__ import annotations

import gc

from openmrc.flow.model import FluidFault, FluidJob, FluidModel
from openmrc.topology import ClosSpec
from openmrc.workloads.jobs.graph import JobGraph, Task


def _run(transport: str, skip: bool) -> tuple[list[float | None], list[float | None]]:
    """Three hosts of T0 0 sending 4 MiB to three of T0 1 through T1 0, whose link down
    to T0 1 fails before they start (RoCE: dropped at the T1, their uplink's queue fills
    until PFC pauses them; routing converges while they send); then two more rounds,
    one while the link is still down: every task's start and end."""
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=2)
    model = FluidModel(
        spec,
        transport,
        gpus_per_server=1,
        convergence_ps=150_000_000,
        detect_ps=100_000_000,
        rto_ps=2_000_000_000,
        path_hash=lambda s, d, c, q: 0,  # every QP on T1 0
    )
    model.skip_idle_steps = skip
    model.add_fault(FluidFault(0, "link_down", "p0t0x1-p0t1x0"))
    g = JobGraph("pairs", 8, gpus_per_server=1)
    prev: tuple[int, ...] = ()
    for size in (4 << 20, 1 << 20, 2 << 20):
        prev = tuple(g.add(Task("p2p", (h, 4 + h), size=size, deps=prev)) for h in range(3))
    model.add_job(FluidJob(g, list(range(8)), start_ps=10_000_000))
    res = model.run()
    return res.jobs[0].start, res.jobs[0].end


def test_skipping_the_idle_steps_changes_no_task_time() -> None:
    """RoCE (dead QPs, lost bytes, an uplink's queue filling) and MRC (flows of
    efficiency below 1 until the failure is detected): the same times with the
    skipping on and off, and every transfer ends."""
    for transport in ("roce", "mrc"):
        on = _run(transport, True)
        assert None not in on[1], transport
        assert _run(transport, False) == on, transport


def test_a_run_leaves_the_garbage_collector_as_it_found_it() -> None:
    """The run turns the cyclic collector off while it runs, and back on after."""
    assert gc.isenabled()
    _run("roce", True)
    assert gc.isenabled()
    gc.disable()
    try:
        _run("roce", True)
        assert not gc.isenabled()
    finally:
        gc.enable()


def _p2p_ends(sizes: list[int]) -> list[float]:
    """Each of hosts 0.. sending ``sizes[i]`` bytes to host ``len(sizes) + i`` of the
    same T0 at once, every flow alone on its ports: when each transfer ends (ps)."""
    n = len(sizes)
    spec = ClosSpec(planes=1, t0s=1, hosts_per_t0=2 * n, t1s=1)
    model = FluidModel(spec, "roce", gpus_per_server=1)
    g = JobGraph("pairs", 2 * n, gpus_per_server=1)
    for h, size in enumerate(sizes):
        g.add(Task("p2p", (h, n + h), size=size))
    model.add_job(FluidJob(g, list(range(2 * n))))
    ends = model.run().jobs[0].end
    assert None not in ends
    return [float(e) for e in ends if e is not None]


def test_flows_ending_together_leave_the_others_their_own_bytes() -> None:
    """The run keeps its flows in flight beside their per-slot tables (bytes left,
    rates) and takes the slots that end at one instant out of both: two flows ending
    together in slots 0 and 2 leave the flows of slots 1, 3, 4 and 5 their own bytes and
    rates, each ending when it would alone."""
    sizes = [1 << 20, 4 << 20, 1 << 20, 2 << 20, 3 << 20, 5 << 20]
    together = _p2p_ends(sizes)
    assert together[0] == together[2]
    for size, end in zip(sizes, together, strict=True):
        (alone,) = _p2p_ends([size])
        assert abs(end - alone) <= 1e-9 * alone, (size, end, alone)
