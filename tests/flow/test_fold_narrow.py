"""A fold whose kept blocks run representative replicas (openmrc.flow.fold.narrow_replicas)
runs every task it keeps as the whole job runs it, for MRC."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from openmrc.flow.fold import Fold, narrow_replicas, plan_fold
from openmrc.flow.model import FluidFault, FluidJob, FluidModel, FluidResult
from openmrc.topology import ClosSpec
from openmrc.workloads.jobs.graph import JobSpec, Task, build_iteration
from openmrc.workloads.jobs.model import GpuSpec, ModelSpec, Parallelism
from tests.flow.test_fold import _apart

#: 48 DP replicas of TP 2 x PP 2 on 384 hosts, 32 per T0: 16 replicas a block, 6 blocks;
#: 8 T1s, so a T0's pool is half its hosts' rate and the pools set the rates
SPEC = ClosSpec(planes=2, t0s=12, hosts_per_t0=32, t1s=8)
DP = 96

#: a NIC port of block 1's stage 0 (replica 4 of 16), a T0-T1 link of block 2's stage 1
FAULTS = [
    FluidFault(40_000_000, "nic_port_down", "", 32 + 9, 1),
    FluidFault(90_000_000, "link_down", "p0t0x8-p0t1x3"),
]


def _job(dp: int) -> JobSpec:
    """A small GPT-like job."""
    return JobSpec(
        "narrow",
        ModelSpec(layers=4, hidden=256, heads=4, seq_len=256, vocab=1000, global_batch=2 * dp),
        Parallelism(tp=2, pp=2, dp=dp, zero=1, buckets=2),
        GpuSpec(gpus_per_server=2),
    )


def _model(spec: ClosSpec, job: FluidJob, faults: list[FluidFault]) -> FluidModel:
    m = FluidModel(
        spec, "mrc", gpus_per_server=2, nvlink_bytes_per_ps=job.graph.nvlink_bytes_per_ps
    )
    m.add_job(job)
    for f in faults:
        m.add_fault(f)
    return m


def _runs(
    faults: list[FluidFault], narrow: int, weigh: bool = True
) -> tuple[Fold, FluidResult, FluidResult, list[tuple[int, int]]]:
    """The whole job and its narrowed fold: (fold, whole run, folded run, (folded task,
    whole task)); ``weigh`` False: the representatives weigh 1 on the pools (wrong)."""
    g = build_iteration(_job(DP))
    whole = _model(SPEC, FluidJob(g, list(range(SPEC.hosts))), faults)
    plan = plan_fold(SPEC, 2, 2, DP, [whole.parts(f) for f in faults], 1, 1, narrow)
    assert plan is not None and plan.offsets
    gf = build_iteration(_job(plan.dp))
    ring = plan.graph(gf, _job(plan.dp))
    folded = _model(
        plan.spec,
        FluidJob(gf, plan.hosts(), ring_ranks=ring),
        plan.faults(whole, faults),
    )
    if weigh:
        folded.host_weight = np.array(plan.host_weights(), dtype=float)

    def name(t: Task, dp: int, rank: Callable[[int], int]) -> tuple[object, ...]:
        if t.phase in ("dp", "zero"):
            rest = t.ranks[0] // 2
            return (t.kind, t.label, t.ranks[0] % 2, rest // dp)
        return (t.kind, t.label, tuple(rank(r) for r in t.ranks))

    key = {name(t, DP, int): i for i, t in enumerate(g.tasks)}
    pairs = [(i, key[name(t, plan.dp, plan.rank)]) for i, t in enumerate(gf.tasks)]
    return plan, whole.run(), folded.run(), pairs


@pytest.mark.parametrize("narrow", [0, 1])
def test_representative_replicas_run_every_kept_task_as_the_whole_job(narrow: int) -> None:
    plan, whole, folded, pairs = _runs(FAULTS, narrow)
    assert plan.blocks == (0, 1, 2, 3)
    # the failed replica (4 of block 1) and the blocks' ends run as themselves, the rest
    # stand in; the other blocks run fewer (their T0s' other hosts idle)
    assert 4 in plan.offsets[1] and all({0, 15} <= set(o) for o in plan.offsets)
    assert plan.kept_per_block < 16 and all(sum(w) == 16 for w in plan.weights)
    assert len(plan.offsets[0]) < len(plan.offsets[1]) == plan.kept_per_block
    assert folded.events < whole.events / 2
    assert _apart(whole, folded, pairs) <= 1.0


def test_a_fault_free_block_runs_three_replicas_exactly() -> None:
    plan, whole, folded, pairs = _runs([], 0)
    assert plan.offsets == ((0, 1, 15),) * 2 and plan.weights == ((1, 14, 1),) * 2
    assert _apart(whole, folded, pairs) <= 1.0


def test_representatives_weighing_one_replica_are_wrong() -> None:
    """The check above can fail: representatives that do not weigh what they stand for
    on the T0 pools move the tasks by microseconds."""
    _plan, whole, folded, pairs = _runs(FAULTS, 1, weigh=False)
    assert _apart(whole, folded, pairs) > 1e6


def test_narrow_replicas_keeps_the_ends_and_the_replicas_set_apart() -> None:
    # one host link of replica 6 of block 1 at stage 1 (T0 1 + 6; hosts 12, 13 of a T0
    # of 32, TP 2), margin 1: block 1 keeps it, block 2 its ends only
    offsets, weights = narrow_replicas(16, 2, 32, 6, (1, 2), [([(7 * 32 + 13, 0)], [])], 1)
    assert offsets[0] == (0, 1, 2, 5, 6, 7, 8, 14, 15)
    assert weights[0] == (1, 1, 3, 1, 1, 1, 6, 1, 1)
    assert offsets[1] == (0, 1, 2, 14, 15) and weights[1] == (1, 1, 12, 1, 1)
    # a part on every host of a T0 alike (a T0 switch) sets none apart
    whole_t0: tuple[list[tuple[int, int]], list[tuple[int, int, int]]] = (
        [(h, 0) for h in range(32, 64)],
        [],
    )
    got = narrow_replicas(16, 2, 32, 6, (1,), [whole_t0], 1)
    assert got == (((0, 1, 2, 14, 15),), ((1, 1, 12, 1, 1),))
    # fabric links set no replica apart
    got = narrow_replicas(16, 2, 32, 6, (1,), [([], [(0, 1, 3)])], 0)
    assert got == (((0, 1, 15),), ((1, 14, 1),))


def test_plan_fold_narrows_only_when_asked_and_without_ep() -> None:
    assert plan_fold(SPEC, 2, 2, DP, [], 1).offsets == ()  # type: ignore[union-attr]
    assert plan_fold(SPEC, 2, 2, DP, [], 1, 2, 1).offsets == ()  # type: ignore[union-attr]
    plan = plan_fold(SPEC, 2, 2, DP, [], 1, 1, 1)
    assert plan is not None and plan.spec.hosts_per_t0 == 10 and plan.dp == 10
    assert plan.host_weights()[:10] == [1, 1, 1, 1, 12, 12, 1, 1, 1, 1]
    # folded host 4 (replica 2 of block 0, TP 0) stands for whole host 4; 10 for T0 1's
    assert plan.host(4) == 4 and plan.folded_host(4) == 4 and plan.folded_host(6) is None
    assert plan.host(10) == 32 and plan.folded_host(32 + 28) == 16
    assert plan.hosts() == list(range(40))  # every block the same: packed
    # blocks that run different replicas: rank -> host slots, idle slots left over
    odd = plan_fold(SPEC, 2, 2, DP, [([(32 + 13, 0)], [])], 1, 1, 1)
    assert odd is not None and odd.blocks == (0, 1, 2)
    assert [len(o) for o in odd.offsets] == [5, 9, 5] and odd.dp == 19
    hosts = odd.hosts()
    assert len(hosts) == len(set(hosts)) == 19 * 2 * 2
    assert hosts[:10] == list(range(10)) and hosts[10:12] == [18, 19]  # block 1, T0 1
    assert all(odd.host(h) == odd.rank(r) for r, h in enumerate(hosts))
