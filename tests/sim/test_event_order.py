"""The order events run in: the native kernel's event store against a plain heap.

The native simulator keeps its pending events in the current time slot's events
sorted (a radix sort as the slot is loaded) beside a small heap of those added
since, a wheel of unsorted buckets for the next slots and a heap for events
further ahead (``_kernel.c``, "the event store"); :class:`PySimulator` keeps one
``heapq``.  Both must run every event in the same (time, key) order.  These tests
drive both with the same random mixes of events (ties at one time, slot and wheel
boundaries, far timers, times in the past, cancellations, events scheduling more
events) and compare what ran, in what order, against each other and against the
order sorted by (time, key).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from openmrc.sim.engine import PySimulator
from tests.sim.test_kernel import _kernel_required, kernel, native  # noqa: F401 (the fixture `native` names under OPENMRC_REQUIRE_NATIVE=1)

#: The kernel's slot (2**WHEEL_SHIFT ps) and the wheel's reach in slots (_kernel.c).
SLOT_PS = 1 << 11
WHEEL_SLOTS = 4096


def _delay(rnd: random.Random) -> int:
    """A delay from a mix that lands events in every part of the store."""
    kind = rnd.randrange(8)
    if kind == 0:
        return 0  # the current time: a tie
    if kind == 1:
        return rnd.randrange(SLOT_PS)  # the current slot
    if kind == 2:  # either side of a slot boundary
        return rnd.randrange(1, 8) * SLOT_PS + rnd.choice((-1, 0, 1))
    if kind == 3:  # either side of the wheel's reach
        return WHEEL_SLOTS * SLOT_PS + rnd.randrange(-3 * SLOT_PS, 3 * SLOT_PS)
    if kind == 4:
        return rnd.randrange(2_000_000)  # in the wheel (arrivals, transmitters)
    if kind == 5:
        return rnd.randrange(100_000_000)  # far (timers)
    if kind == 6:
        return rnd.choice((0, 1_000, 5_000))  # a few shared delays: many ties
    return -rnd.randrange(1, 3 * SLOT_PS)  # in the past (push does not check)


def _run_mix(make: Any, seed: int, *, until_steps: int = 4) -> dict[str, Any]:
    """Run one random mix on the simulator ``make`` makes; what ran and how."""
    sim = make(seed)
    rnd = random.Random(seed)
    ran: list[tuple[int, int]] = []  # (now, event id)
    handles: dict[int, Any] = {}
    next_id = [0]
    peeks: list[tuple[int | None, int]] = []

    def schedule(at: int) -> None:
        i = next_id[0]
        next_id[0] += 1
        h = sim.push(at, fire, (i,))
        handles[i] = h

    def fire(i: int) -> None:
        ran.append((sim.now, i))
        r = random.Random(seed * 1_000_003 + i)  # the same follow-ups on both sides
        if next_id[0] < 3000:
            for _ in range(r.randrange(3)):
                schedule(sim.now + _delay(r))
        if r.randrange(10) == 0 and handles:
            victim = r.randrange(next_id[0])
            if victim in handles:
                sim.cancel(handles[victim])

    base = rnd.choice((0, 10**6, 2**40 + 12_345))
    for _ in range(rnd.randrange(1, 400)):
        schedule(base + abs(_delay(rnd)))
    # run in steps (each a peek through run(until_ps=...), next_time, pending)
    horizon = base + 50_000_000
    for k in range(1, until_steps + 1):
        sim.run(until_ps=base + k * horizon // until_steps)
        peeks.append((sim.next_time() if hasattr(sim, "next_time") else None, sim.pending()))
    sim.run()
    return {"ran": ran, "now": sim.now, "pending": sim.pending(), "peeks": peeks}


@native
@pytest.mark.parametrize("seed", range(40))
def test_native_runs_events_in_the_heap_order(seed: int) -> None:
    """The native store and PySimulator's heap run the same events in the same order."""
    assert kernel is not None
    py = _run_mix(PySimulator, seed)
    nat = _run_mix(kernel.Simulator, seed)
    assert nat["ran"] == py["ran"]
    assert nat["now"] == py["now"] and nat["pending"] == py["pending"] == 0
    assert [p[1] for p in nat["peeks"]] == [p[1] for p in py["peeks"]]
    assert len(py["ran"]) > 50


def _sorted_mix(make: Any, seed: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Events scheduled up front only (no past, no follow-ups): what ran, by
    (time, key), and the same events sorted by (time, key)."""
    sim = make(seed)
    rnd = random.Random(seed)
    ran: list[tuple[int, int]] = []
    pushed: list[tuple[int, int]] = []

    def fire(key: int) -> None:
        ran.append((sim.now, key))

    for _ in range(3000):
        t = max(0, abs(_delay(rnd)) + rnd.choice((0, 0, 7 * SLOT_PS, 10**9)))
        ev = sim.push(t, fire, (len(pushed),))
        pushed.append((t, ev[1]))
    sim.run()
    by_key = {k: i for i, (_, k) in enumerate(pushed)}
    got = [(t, pushed[i][1]) for t, i in ran]
    assert len(by_key) == len(pushed)
    return got, sorted(pushed)


@native
@pytest.mark.parametrize("seed", range(10))
def test_native_order_is_the_sorted_time_key_order(seed: int) -> None:
    """Many ties at one time and events in every part of the store come out sorted by
    (time, key): the key breaks every tie."""
    assert kernel is not None
    got, want = _sorted_mix(kernel.Simulator, seed)
    assert got == want


def test_python_order_is_the_sorted_time_key_order() -> None:
    """The reference itself: PySimulator's heap sorts by (time, key)."""
    got, want = _sorted_mix(PySimulator, 3)
    assert got == want


class _Node:
    """An object registered as its own entity: the events its method schedules take
    keys with that entity in their high bytes."""

    __slots__ = ("nodes", "ran", "rnd", "sim")

    def __init__(self, sim: Any, nodes: list[_Node], ran: list[tuple[int, int]], seed: int) -> None:
        self.sim = sim
        self.nodes = nodes
        self.ran = ran
        self.rnd = random.Random(seed)

    def fire(self, tag: int) -> None:
        sim = self.sim
        self.ran.append((sim.now, tag))
        if tag >= 20_000:
            return
        for _ in range(self.rnd.randrange(4)):
            other = self.nodes[self.rnd.randrange(len(self.nodes))]
            # a few shared delays (whole slots of ties) and spread ones in one slot
            delay = self.rnd.choice((1_000_000, 1_000_000, 330_000, 1_330_000, 0))
            delay += self.rnd.choice((0, 0, 0, self.rnd.randrange(SLOT_PS)))
            sim.push(sim.now + delay, other.fire, (tag * 4 + self.rnd.randrange(4) + 1,))


def _entity_mix(make: Any, seed: int) -> list[tuple[int, int]]:
    """What ran, in order, when 700 registered nodes (entities past 256: keys that
    differ in their entity's bytes, not only in the counter's) schedule each other
    at shared and spread times, slots of hundreds of events each."""
    sim = make(seed)
    ran: list[tuple[int, int]] = []
    nodes: list[_Node] = []
    for i in range(700):
        node = _Node(sim, nodes, ran, seed * 10_007 + i)
        nodes.append(node)
        sim.add_entity([node])
    for i, node in enumerate(nodes):
        sim.push(random.Random(seed + i).randrange(3) * 1_000_000, node.fire, (i % 5 + 1,))
    sim.run(until_ps=12_000_000)
    return ran


@native
@pytest.mark.parametrize("seed", range(3))
def test_native_order_with_many_entities_per_slot(seed: int) -> None:
    """Slots of hundreds of events from hundreds of entities (the fabric's case: its
    events bunch at the same instants) run in PySimulator's order."""
    assert kernel is not None
    py = _entity_mix(PySimulator, seed)
    nat = _entity_mix(kernel.Simulator, seed)
    assert len(py) > 5_000
    assert nat == py


@native
@pytest.mark.parametrize("n", [2, 24, 25, 40, 100, 255, 256, 257, 600])
def test_native_order_of_one_slot_of_n_events(n: int) -> None:
    """A slot of n events, pushed in a shuffled order at shuffled times inside one
    slot (ties included), runs in (time, key) order whichever way the kernel sorts
    a slot of that size (by insertion, merging or radix)."""
    assert kernel is not None
    for seed in range(4):
        rnd = random.Random(seed * 1_000 + n)
        sim = kernel.Simulator(seed)
        ran: list[tuple[int, int]] = []
        pushed: list[tuple[int, int]] = []

        def fire(i: int, sim: Any = sim, ran: list[tuple[int, int]] = ran) -> None:
            ran.append((sim.now, i))

        def start(sim: Any = sim, rnd: random.Random = rnd, pushed: list[Any] = pushed) -> None:
            # pushed while running: into the wheel's bucket of a later slot, which is
            # sorted as a whole when the run reaches it
            base = 5 * SLOT_PS
            spread = rnd.choice((1, 7, SLOT_PS))  # all ties, a few times, the whole slot
            for _ in range(n):
                t = base + rnd.randrange(spread)
                ev = sim.push(t, fire, (len(pushed),))
                pushed.append((t, ev[1]))

        sim.push(0, start, ())
        sim.run()
        assert len(ran) == n
        assert [(t, pushed[i][1]) for t, i in ran] == sorted(pushed)


class _Sink:
    """A port's receiver, registered as an entity: the arrivals it got, in order."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.got: list[tuple[int, int]] = []

    def receive(self, pkt: Any, port: Any, epoch: int) -> None:
        self.got.append((self.sim.now, pkt))


@native
@pytest.mark.parametrize("spread", [1, 5])
def test_native_order_of_a_slot_whose_entity_events_came_out_of_order(spread: int) -> None:
    """A big slot whose events of one scheduling entity were added in falling counter
    order (a rank's arrivals carry the sending rank's keys): the slot's sort, which
    first leaves each entity's events in the order they were added, still runs them
    in (time, key) order."""
    assert kernel is not None
    sim = kernel.Simulator(1)
    sink = _Sink(sim)
    sim.add_entity([sink])
    port = kernel.EgressPort(sim, "p", 10**11, 1, sink.receive, data_limit=10**6, prio_limit=10**5)
    rnd = random.Random(spread)
    pushed: list[tuple[int, int]] = []

    def start() -> None:
        # added while running: into the wheel's bucket of a later slot, sorted as a
        # whole when the run reaches it
        for i in range(400):  # past the merge sort's 256: the radix sort
            entity = 3 + i % 7
            key = entity << 40 | (1_000 - i)  # each entity's counters falling
            t = 5 * SLOT_PS + rnd.randrange(spread)
            sim.arrive(t, key, port, 0, len(pushed))
            pushed.append((t, key))

    sim.push(0, start, ())
    sim.run()
    assert len(sink.got) == len(pushed)
    assert [(t, pushed[i][1]) for t, i in sink.got] == sorted(pushed)
