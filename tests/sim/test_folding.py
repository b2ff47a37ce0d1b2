"""Folded collectives (openmrc.sim.folding): per-step records instead of a row per transfer.

A folded collective must run its transfers exactly as unfolded (same summary, same
events), its step records must be the per-transfer results summed by step, and it
must let go of a transfer's flow once the transfer is over (the memory point).
"""

from __future__ import annotations

import gc
from typing import Any

from openmrc.sim.experiment import Experiment
from openmrc.sim.flows import MrcFlow
from openmrc.sim.folding import STEP_COUNTERS, FoldedCollective
from openmrc.topology import ClosSpec
from openmrc.workloads.collectives import allreduce, training


def _run(fold: bool) -> tuple[Any, int]:
    exp = Experiment(ClosSpec(planes=2, t0s=4, hosts_per_t0=4, t1s=4), seed=3)
    coll = allreduce(16, 1 << 20, channels=2)
    exp.add_collective(coll, fold=fold)
    # a lossy host link: retransmissions for the records to sum
    exp.faults.link_loss(exp.topology.host_link(5, 0).name, 0.02)
    result = exp.run()
    # the run leaves what it made frozen (engine.paused_gc), where get_objects does not
    # look: unfrozen, every object still alive is counted
    gc.unfreeze()
    gc.collect()
    alive = sum(1 for o in gc.get_objects() if isinstance(o, MrcFlow))
    del exp
    return result, alive


def test_folded_collective_runs_as_unfolded_and_records_each_step() -> None:
    plain, plain_alive = _run(False)
    folded, folded_alive = _run(True)
    assert plain.events == folded.events and plain.sim_end_ps == folded.sim_end_ps
    a, b = plain.collectives[0], folded.collectives[0]
    assert {k: v for k, v in b.items() if k not in ("per_transfer", "step_records")} == a
    assert b["per_transfer"] is False and "step_records" not in a
    assert folded.flows == [] and len(plain.flows) == a["transfers"] == 960
    # the records are the unfolded run's flow results summed by step
    by_step: dict[int, list[Any]] = {}
    for f in plain.flows:
        by_step.setdefault(int(f.name.split(":s")[1].split("c")[0]), []).append(f)
    records = b["step_records"]
    assert [r["step"] for r in records] == sorted(by_step) == list(range(30))
    assert sum(r["retransmits"] for r in records) > 0
    for rec in records:
        flows = by_step[rec["step"]]
        assert rec["transfers"] == len(flows) == rec["ok"]
        assert rec["failed"] == rec["unfinished"] == 0
        assert rec["bytes"] == rec["bytes_received"] == sum(f.size for f in flows)
        assert rec["start_us"] == min(f.started_ps for f in flows) / 1e6
        assert rec["last_arrival_us"] == max(f.rx_finish_ps for f in flows) / 1e6
        assert rec["last_finish_us"] == max(f.finish_ps for f in flows) / 1e6
        assert rec["fct_us_max"] == max(f.fct_ps for f in flows) / 1e6
        for k in STEP_COUNTERS:
            assert rec[k] == sum(getattr(f, k) for f in flows), k
    # folded: no transfer's flow outlives it (unfolded: every one is kept)
    assert plain_alive >= 960 and folded_alive == 0


def test_a_failed_transfer_fails_what_waits_on_it_directly_or_not() -> None:
    # 4 ranks, one channel: transfer (s, r) feeds (s + 1, r + 1) for s in 0..5
    coll = allreduce(4, 4096)
    folder = FoldedCollective(coll, [0, 1, 2, 3], 1 << 20, 0, "allreduce", None, {})
    assert folder.initial() == [0, 1, 2, 3]
    for i in folder.initial():
        folder.spec(i)  # started
    # transfer 0 (step 0, rank 0) fails: the chain through steps 1..5 never starts
    assert folder.failed(0) == 5
    records = folder.summary()["step_records"]
    assert [r["failures"] for r in records] == [{}] + [{"dependency_failed": 1}] * 5
    # rank 1's step-0 data arrives: only (step 1, rank 2) may start, at once
    assert folder.arrived(1, 7) == [(6, 7)]


def test_training_iterations_are_timed_from_folded_arrivals() -> None:
    coll = training(4, [("allreduce", 8192)], iterations=2, compute_ps=1_000_000)
    summaries = []
    for fold in (False, True):
        exp = Experiment(ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2), seed=1)
        exp.add_collective(coll, fold=fold)
        summaries.append(exp.run().collectives[0])
    plain, folded = summaries
    assert len(plain["iteration_us"]) == 2 and plain["complete"]
    for key in ("time_us", "iteration_us", "algbw_gbps", "busbw_gbps", "complete"):
        assert folded[key] == plain[key], key


def test_a_folded_run_cut_short_is_not_all_ok_and_says_what_is_unfinished() -> None:
    exp = Experiment(ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2), seed=1)
    exp.add_collective(allreduce(4, 1 << 20), fold=True)
    result = exp.run(until_ps=5_000_000)  # 5 us: the first step is still moving
    assert result.flows == []
    assert not result.all_ok
    records = result.collectives[0]["step_records"]
    assert sum(r["unfinished"] for r in records) > 0
    assert all(r["ok"] + r["failed"] + r["unfinished"] == r["transfers"] for r in records)
