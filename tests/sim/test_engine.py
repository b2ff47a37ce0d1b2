"""Tests of the event loop: ordering, ties, cancellation, run limits, determinism."""

from __future__ import annotations

import pytest

from openmrc.sim.engine import Simulator


def test_time_order_and_fifo_ties() -> None:
    sim = Simulator()
    trace: list[tuple[int, str]] = []
    for name, t in [("c", 30), ("a", 10), ("b1", 20), ("b2", 20), ("b3", 20), ("z", 0)]:
        sim.schedule(t, lambda n=name: trace.append((sim.now, n)))
    assert sim.run() == 6
    assert trace == [(0, "z"), (10, "a"), (20, "b1"), (20, "b2"), (20, "b3"), (30, "c")]


def test_events_scheduled_from_events_and_args() -> None:
    sim = Simulator()
    out: list[tuple[int, int]] = []

    def tick(i: int) -> None:
        out.append((sim.now, i))
        if i < 3:
            sim.after(5, tick, i + 1)
            sim.schedule(sim.now, out.append, (sim.now, -i))  # same time: runs after this one

    sim.schedule(1, tick, 0)
    sim.run()
    assert out == [(1, 0), (1, 0), (6, 1), (6, -1), (11, 2), (11, -2), (16, 3)]


def test_past_and_negative_rejected() -> None:
    sim = Simulator()
    sim.schedule(10, lambda: None)
    sim.run()
    with pytest.raises(ValueError, match="past"):
        sim.schedule(5, lambda: None)
    with pytest.raises(ValueError, match="negative"):
        sim.after(-1, lambda: None)


def test_cancel() -> None:
    sim = Simulator()
    out: list[int] = []
    ev = sim.schedule(10, out.append, 1)
    sim.schedule(20, out.append, 2)
    sim.cancel(ev)
    sim.run()
    assert out == [2]
    assert not sim.cancelled
    # cancelling an event that already ran (same time) leaves nothing behind
    done = sim.schedule(sim.now, out.append, 3)
    sim.schedule(sim.now, lambda: sim.cancel(done))
    sim.run()
    assert out == [2, 3] and not sim.cancelled


def test_run_until_and_stop() -> None:
    sim = Simulator()
    out: list[int] = []
    for t in (5, 10, 15):
        sim.schedule(t, out.append, t)
    sim.run(until_ps=10)
    assert out == [5, 10]
    assert sim.now == 10
    sim.run(until_ps=12)
    assert sim.now == 12 and out == [5, 10]
    sim.schedule(13, sim.stop)
    sim.schedule(14, out.append, 14)
    sim.run()
    assert sim.now == 13 and out == [5, 10]
    sim.run()
    assert out == [5, 10, 14, 15]


def _random_trace(seed: int) -> list[tuple[int, int]]:
    sim = Simulator(seed)
    trace: list[tuple[int, int]] = []

    def node(i: int) -> None:
        trace.append((sim.now, i))
        if len(trace) < 500:
            # many ties on purpose: delays from a small set
            sim.after(sim.rng.choice((0, 1, 2, 3)), node, sim.rng.randrange(1000))
            if sim.rng.random() < 0.5:
                sim.after(sim.rng.choice((0, 2)), node, i)

    for i in range(4):
        sim.schedule(0, node, i)
    sim.run()
    return trace


def test_same_seed_same_trace() -> None:
    a, b = _random_trace(7), _random_trace(7)
    assert a == b
    assert len(a) >= 500
    assert _random_trace(8) != a
