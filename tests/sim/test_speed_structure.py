"""Structural speed properties of the simulator: cost that must not grow with QPs.

Timings are benchmarks (``benchmarks/sim_speed.py``), not tests; these check
the structure that keeps the cost per packet independent of how many QPs a
host has, and that the engine's collector tuning is undone after a run.
"""

from __future__ import annotations

import gc

import pytest

from openmrc.sim.engine import GC_THRESHOLD, Simulator
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import all_to_all


def test_host_activity_polls_only_the_flows_that_completed_something(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8 hosts, 7 flows each of 4 messages: every ACK a host takes used to poll
    # the completion queues of all 7 of its flows.
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=4)
    exp = Experiment(spec, seed=1)
    exp.add_flows(all_to_all(list(range(8)), 64 << 10, message=16 << 10))
    polls = 0
    real = Experiment._drain_completions

    def counting(self: Experiment, flow: object) -> list[str | None]:
        nonlocal polls
        polls += 1
        return real(self, flow)  # type: ignore[arg-type]

    monkeypatch.setattr(Experiment, "_drain_completions", counting)
    result = exp.run()
    assert result.all_ok
    messages = 56 * 4
    # one look per completion at most (plus one per flow at its start)
    assert polls <= messages + 56


def test_run_tunes_the_collector_and_restores_it() -> None:
    before = gc.get_threshold()
    sim = Simulator()
    seen: list[tuple[int, ...]] = []
    sim.schedule(5, lambda: seen.append(gc.get_threshold()))
    sim.run()
    assert seen == [GC_THRESHOLD]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
