"""A folded DP job (openmrc.flow.fold) runs the tasks it keeps as the whole job runs them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from openmrc.flow.fold import Fold, plan_fold
from openmrc.flow.model import FluidFault, FluidJob, FluidModel, FluidResult, ecmp_hash
from openmrc.topology import ClosSpec
from openmrc.workloads.jobs.graph import JobSpec, Task, build_iteration
from openmrc.workloads.jobs.model import GpuSpec, ModelSpec, Parallelism

#: 16 DP replicas of TP 2 x PP 2 on 64 hosts, 4 per T0: 2 replicas a block, 8 blocks
SPEC = ClosSpec(planes=2, t0s=16, hosts_per_t0=4, t1s=4)


def _job(dp: int, ep: int = 1) -> JobSpec:
    """A small GPT-like job (``ep`` > 1: MoE, 4 experts, EP across servers)."""
    experts = 4 if ep > 1 else 0
    return JobSpec(
        "fold",
        ModelSpec(
            layers=4,
            hidden=256,
            heads=4,
            seq_len=256,
            vocab=1000,
            global_batch=4 * dp,
            experts=experts,
            ffn_hidden=512,
        ),
        Parallelism(tp=2, pp=2, dp=dp, ep=ep, zero=1, buckets=2),
        GpuSpec(gpus_per_server=2),
    )


def _model(spec: ClosSpec, transport: str, job: FluidJob, faults: list[FluidFault]) -> FluidModel:
    m = FluidModel(
        spec,
        transport,
        qps=2 if transport == "roce" else 1,
        gpus_per_server=2,
        nvlink_bytes_per_ps=job.graph.nvlink_bytes_per_ps,
    )
    m.add_job(job)
    for f in faults:
        m.add_fault(f)
    return m


def _runs(
    transport: str, faults: list[FluidFault], margin: int = 1, rings: bool = True, ep: int = 1
) -> tuple[Fold, FluidResult, FluidResult, list[tuple[int, int]]]:
    """The whole job and its fold: (fold, whole run, folded run, (folded task, whole task))."""
    g = build_iteration(_job(16, ep))
    whole = _model(SPEC, transport, FluidJob(g, list(range(SPEC.hosts))), faults)
    plan = plan_fold(SPEC, 2, 2, 16, [whole.parts(f) for f in faults], margin, ep)
    assert plan is not None
    gf = build_iteration(_job(plan.dp, ep))
    ring = plan.graph(gf, _job(plan.dp, ep))
    job = FluidJob(gf, list(range(plan.spec.hosts)), ring_ranks=ring if rings else {})
    folded = _model(plan.spec, transport, job, plan.faults(whole, faults))
    plan.hashes(folded)

    def name(t: Task, dp: int, rank: Callable[[int], int]) -> tuple[object, ...]:
        """A task across the two runs: a ring by its label, first rank's TP index and
        stage, and group (the dense ring, or which expert ring); others by their ranks."""
        if t.phase in ("dp", "zero"):
            rest = t.ranks[0] // 2
            group = -1 if len(t.ranks) == dp else rest % dp % ep
            return (t.kind, t.label, t.ranks[0] % 2, rest // dp, group)
        return (t.kind, t.label, tuple(rank(r) for r in t.ranks))

    key = {name(t, 16, int): i for i, t in enumerate(g.tasks)}
    pairs = [(i, key[name(t, plan.dp, plan.rank)]) for i, t in enumerate(gf.tasks)]
    assert set(ring) == {i for i, t in enumerate(gf.tasks) if t.phase in ("dp", "zero")}
    return plan, whole.run(), folded.run(), pairs


def _apart(a: FluidResult, b: FluidResult, pairs: list[tuple[int, int]]) -> float:
    """How far apart (ps) the folded run's tasks start and end from the whole run's."""
    worst = 0.0
    for i, j in pairs:
        for x, y in (
            (b.jobs[0].start[i], a.jobs[0].start[j]),
            (b.jobs[0].end[i], a.jobs[0].end[j]),
        ):
            assert x is not None and y is not None
            worst = max(worst, abs(x - y))
    return worst


def test_a_folded_mrc_job_runs_every_kept_task_as_the_whole_job() -> None:
    # a T0 uplink of T0 0 down from the start: T0 0's pool is short, its block apart
    faults = [FluidFault(0, "link_down", "p0t0x0-p0t1x0")]
    plan, whole, folded, pairs = _runs("mrc", faults)
    assert plan.blocks == (0, 1, 7) and plan.spec.t0s == 6
    assert len(pairs) < len(whole.jobs[0].end) / 2
    assert _apart(whole, folded, pairs) <= 1.0
    assert max(e for e in folded.jobs[0].end if e) == max(e for e in whole.jobs[0].end if e)


def test_a_folded_moe_job_with_ep_across_servers_runs_as_the_whole_job() -> None:
    # EP 2: every MoE layer's all-to-all spans two servers of a block; the expert
    # rings (every 2nd replica) fold as the dense ones
    faults = [FluidFault(0, "link_down", "p0t0x0-p0t1x0")]
    plan, whole, folded, pairs = _runs("mrc", faults, ep=2)
    assert plan.blocks == (0, 1, 7)
    assert _apart(whole, folded, pairs) <= 1.0


def test_a_folded_ring_takes_the_whole_rings_steps_and_bytes() -> None:
    # without FluidJob.ring_ranks the folded rings are short rings: they end sooner
    faults = [FluidFault(0, "link_down", "p0t0x0-p0t1x0")]
    _plan, whole, folded, pairs = _runs("mrc", faults, rings=False)
    assert _apart(whole, folded, pairs) > 1e6


def test_the_optimizer_shard_is_the_whole_dps() -> None:
    # ZeRO: the folded graph's optimizer steps update a 1 / 16 shard, not 1 / 6
    plan = plan_fold(SPEC, 2, 2, 16, [])
    assert plan is not None and plan.dp == 4
    whole = build_iteration(_job(16))
    gf = build_iteration(_job(plan.dp))
    plan.graph(gf, _job(plan.dp))
    want = {t.label: t.dur_ps for t in whole.tasks if t.phase == "opt"}
    assert {t.label: t.dur_ps for t in gf.tasks if t.phase == "opt"} == want


def test_the_fold_keeps_the_fault_blocks_and_their_neighbours() -> None:
    m = FluidModel(SPEC)
    # T0 11 is block 3 of stage 1
    parts = [m.parts(FluidFault(0, "link_down", "p1t0x11-p1t1x2"))]
    plan = plan_fold(SPEC, 2, 2, 16, parts, 1)
    assert plan is not None and plan.blocks == (2, 3, 4)
    assert plan.t0(plan.folded_t0(11) or 0) == 11
    got = plan.faults(m, [FluidFault(5, "link_down", "p1t0x11-p1t1x2")])
    assert [(f.at_ps, f.target) for f in got] == [(5, "p1t0x4-p1t1x2")]
    # a T1 switch acts on every T0 alike: no block apart, two kept
    t1 = FluidFault(0, "switch_down", "p0t1x1")
    plan = plan_fold(SPEC, 2, 2, 16, [m.parts(t1)], 1)
    assert plan is not None and plan.blocks == (0, 1)
    assert plan.faults(m, [t1]) == [t1]
    # a NIC port: its host under the folded T0
    nic = FluidFault(0, "nic_port_down", "", 45, 1)  # T0 11
    plan = plan_fold(SPEC, 2, 2, 16, [m.parts(nic)], 0)
    assert plan is not None and plan.blocks == (0, 3)
    (f,) = plan.faults(m, [nic])
    assert plan.host(f.host) == 45 and f.plane == 1
    # nearly every block kept, a job that does not fill the fabric, a T0 not whole blocks
    assert plan_fold(SPEC, 2, 2, 16, [m.parts(nic)], 3) is None
    assert plan_fold(SPEC, 2, 2, 8, []) is None
    assert plan_fold(SPEC, 8, 1, 8, []) is None


def test_folded_roce_qps_take_the_whole_jobs_ecmp_draws() -> None:
    plan = plan_fold(SPEC, 2, 2, 16, [])
    assert plan is not None
    m = FluidModel(plan.spec, "roce", qps=2)
    plan.hashes(m)
    assert m.path_hash is not None and m.ack_hash is not None
    for s, d in ((0, 9), (3, 12), (9, 2)):
        assert m.path_hash(s, d, "0", 1) == ecmp_hash(1, plan.host(s), plan.host(d), "0", 1)
        assert m.ack_hash(s, d, "0", 1) == ecmp_hash(1, plan.host(d), plan.host(s), "0/ack", 1)


@pytest.mark.parametrize("margin", [0, 1])
def test_a_fault_free_fold_is_exact_at_any_margin(margin: int) -> None:
    plan, whole, folded, pairs = _runs("mrc", [], margin)
    assert plan.blocks == (0, 1)
    assert _apart(whole, folded, pairs) <= 1.0
