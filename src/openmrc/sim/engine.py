"""The discrete-event loop: a heap of timed callbacks in integer picoseconds.

Every event runs on behalf of one *entity* (a host with its NIC and ports, a
switch with its egress ports, the sampler, or :data:`GLOBAL`: set-up and
faults), and is keyed ``(time, scheduling entity << KEY_SHIFT | that entity's
counter)``: events at the same time run in the order of the entity that
scheduled them, then of that entity's own schedule.  The key never depends on
which other events exist, so a simulation partitioned over processes
(:mod:`openmrc.sim.partition`) runs events in the same order as this one; a
run is a pure function of its inputs and the seed.  :meth:`PySimulator.event`
(and the native kernel's ``sim_next_key``) is the one place keys are made.

The entity an event runs for (its *target*, which becomes :attr:`cur` while
it runs, so that what it schedules is keyed by it) is the one registered for
the callback's object (:meth:`add_entity`), else what the :attr:`place` hook
says, else the scheduling entity itself.  An experiment registers its hosts,
switches and sampler; a bare simulator (tests) has only :data:`GLOBAL`, and
then the key is the insertion order.

An event is a tuple ``(time_ps, key, callback, args, target)`` (tuples compare
faster than lists in ``heapq``; keys are unique, so the callback is never
compared); :meth:`schedule` returns it as a handle that :meth:`cancel`
disarms (lazy deletion: its ``key`` goes into a set the loop checks only when
it is non-empty).  :meth:`push` is :meth:`schedule` without its checks and
argument packing, for hot paths (Python ports); :meth:`post` is
:meth:`schedule` of a one-argument call that returns no handle (the NIC's pump
and timer).

Randomness is per entity too: each port draws from its own generator
(:meth:`rng_for`, made on its first draw), so draws do not interleave across
the fabric in a partition-dependent way.

:class:`Simulator` is the native event loop of :mod:`openmrc.sim._kernel`
when it is built (see :mod:`openmrc.sim._native`; ``OPENMRC_PURE_PYTHON=1``
forces pure Python), :class:`PySimulator` otherwise.  Both have the API
documented on :class:`PySimulator` and run the same events in the same order;
the native one keeps its heap as C structs, so code outside the engine reads
it only through :meth:`pending`, :meth:`pending_callbacks` and
:attr:`cancelled`.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from openmrc.sim._native import kernel

#: Picoseconds per common unit, for readable schedules.
NS = 1_000
US = 1_000_000
MS = 1_000_000_000
S = 1_000_000_000_000

Event = tuple[int, int, Any, tuple[Any, ...], int]

#: Entity of set-up and the experiment's global actions (faults, scheduled starts).
GLOBAL = 0
#: Entity of the sampler's ticks.
SAMPLER = 1
#: Entity number of the first one :meth:`PySimulator.add_entity` makes (host 0's).
FIRST_ENTITY = 2
#: Bits of the per-entity counter in an event key.
KEY_SHIFT = 40


def port_rng(seed: int, name: str) -> random.Random:
    """The random generator of the port named ``name`` in a simulator seeded ``seed``."""
    return random.Random(f"{seed}:{name}")


#: The garbage collector's thresholds while :meth:`Simulator.run` runs.  With
#: the defaults (a generation-0 collection every 700 allocations) the collector
#: was 19 % of a 1024-host permutation's time, under 1 % with these (see
#: docs/performance.md).
GC_THRESHOLD = (100_000, 50, 100)

#: "No time limit" as an int (an int-to-int comparison is cheaper than to inf).
_NEVER = 1 << 128


#: How many runs (:func:`quiet_gc`) are under way: a flow added from an event is added
#: inside one.
_runs = 0


@contextmanager
def quiet_gc() -> Iterator[None]:
    """While a run lasts: freeze what exists, raise generation 0's threshold; restore after.

    What exists before a run (fabric, hosts, QPs) is long-lived; the run's own
    garbage (packets, events) is acyclic, so generation 0 is collected rarely.
    """
    global _runs
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    _runs += 1
    try:
        yield
    finally:
        _runs -= 1
        gc.set_threshold(*threshold)
        gc.unfreeze()


@contextmanager
def setup_gc() -> Iterator[None]:
    """While flows are added to a built experiment (their QPs opened): no collection,
    and what was made frozen after, as :func:`paused_gc` does for the fabric.

    Opening 16,384 QPs makes millions of long-lived objects; with the collector on,
    its full collections walked them as they were made (a quarter of the set-up of
    8192 hosts).  What the fabric's set-up froze stays frozen (no collection first,
    unlike :func:`paused_gc`).  Inside a run (a flow started from an event) or with
    the collector already off this changes nothing.
    """
    if _runs or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@contextmanager
def paused_gc() -> Iterator[None]:
    """While a set-up builds its objects: no garbage collection; as it was after.

    A fabric of 131,072 hosts on 8 planes is tens of millions of objects, all
    long-lived: each full collection while they are made walks all made so far,
    and those collections were 60 % of the set-up time of 8192 hosts on 8
    planes (docs/performance.md).  Nothing of the results depends on when the
    collector runs.  What was made is then frozen (``gc.freeze``) until a run
    ends or the next set-up begins (which first collects what is garbage by then).
    """
    if gc.get_freeze_count():
        # what an earlier set-up froze may be garbage now (scenario.parse builds an
        # experiment to check the scenario, then drops it): one collection frees it
        # before a second fabric is built beside it
        gc.unfreeze()
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # what was made is long-lived: out of the collector's generations (else the
        # next collections walk all of it, a few seconds each at 16,384 hosts);
        # the end of a run (quiet_gc) puts it back, in the oldest generation
        gc.freeze()
        if enabled:
            gc.enable()


class PySimulator:
    """Owns simulated time (:attr:`now`, ps), the event heap, the entities and the seed.

    ``rng`` is a generator for code outside the fabric (tests, examples); the
    fabric's ports draw from their own (:meth:`rng_for`).
    """

    __slots__ = (
        "_stopped",
        "cancelled",
        "counters",
        "cur",
        "events_run",
        "heap",
        "now",
        "objects",
        "place",
        "rng",
        "seed",
    )

    def __init__(self, seed: int = 1) -> None:
        self.now: int = 0
        self.heap: list[Event] = []
        self.seed = seed
        self.rng = random.Random(seed)
        self.events_run = 0
        #: ``key`` of cancelled events still in the heap.
        self.cancelled: set[int] = set()
        self._stopped = False
        #: the entity of the running event (:data:`GLOBAL` between runs)
        self.cur = GLOBAL
        #: each entity's next counter
        self.counters: list[int] = [0, 0]
        #: id(object) -> entity, for callbacks bound to registered objects
        self.objects: dict[int, int] = {}
        #: the entity of other callbacks: ``place(callback, args)``, None for the scheduler's
        self.place: Callable[[Any, tuple[Any, ...]], int | None] | None = None

    def add_entity(self, objects: list[Any]) -> int:
        """A new entity; events of callbacks bound to ``objects`` run for it."""
        e = len(self.counters)
        self.counters.append(0)
        objs = self.objects
        for obj in objects:
            objs[id(obj)] = e
        return e

    def set_entity(self, obj: Any, entity: int) -> None:
        """Events of callbacks bound to ``obj`` run for ``entity`` (an existing one)."""
        if not 0 <= entity < len(self.counters):
            raise ValueError(f"set_entity: no entity {entity}")
        self.objects[id(obj)] = entity

    def entity_of(self, obj: Any) -> int | None:
        """The entity registered for ``obj``, or None."""
        return self.objects.get(id(obj))

    def entities(self) -> int:
        """How many entities there are (:data:`GLOBAL` and :data:`SAMPLER` included)."""
        return len(self.counters)

    def set_hints(self, entity: int, objects: Sequence[Any]) -> int:
        """The objects ``entity``'s events read first (its NIC, context, QPs), for the
        native kernel to fetch into the cache a few events ahead of one of them.

        A hint only: results do not depend on it.  The native kernel keeps each
        object's first cache lines (five at most), a list's first line of items and a
        dict's of keys, each line once, at most 96 lines an entity, as addresses with
        no reference, and asks for them into the second-level cache: the owner sets them
        again when the objects change.  It returns the lines kept; this loop, with
        no cache to manage, keeps none (0).
        """
        if not 0 <= entity < len(self.counters):
            raise ValueError(f"set_hints: no entity {entity}")
        return 0

    def hints_of(self, entity: int) -> list[int]:
        """The line addresses :meth:`set_hints` keeps for ``entity`` (none here)."""
        return []

    def rng_for(self, name: str) -> random.Random:
        """The generator of the port named ``name`` (the same whichever process holds it)."""
        return port_rng(self.seed, name)

    def target(self, callback: Any, args: tuple[Any, ...]) -> int:
        """The entity an event of ``callback(*args)`` runs for (see the module)."""
        e = self.objects.get(id(getattr(callback, "__self__", None)))
        if e is not None:
            return e
        place = self.place
        if place is not None:
            e = place(callback, args)
            if e is not None:
                return e
        return self.cur

    def push(self, at_ps: int, callback: Callable[..., Any], args: tuple[Any, ...]) -> Event:
        """:meth:`schedule` without the time check and the ``*args`` packing (hot paths)."""
        ev = self.event(at_ps, callback, args)
        heappush(self.heap, ev)
        return ev

    def event(self, at_ps: int, callback: Callable[..., Any], args: tuple[Any, ...]) -> Event:
        """A new event of ``callback(*args)`` at ``at_ps``, keyed by the running entity's
        next counter (the one place keys are made; the native kernel mirrors it)."""
        cur = self.cur
        counters = self.counters
        c = counters[cur]
        counters[cur] = c + 1
        return (at_ps, cur << KEY_SHIFT | c, callback, args, self.target(callback, args))

    def push_as(self, entity: int, at_ps: int, callback: Callable[..., Any]) -> None:
        """Schedule ``callback()`` as if ``entity`` were running (the sampler's ticks,
        decided outside its own events)."""
        if at_ps < self.now:
            raise ValueError(f"push_as: time {at_ps} ps is in the past (now {self.now} ps)")
        saved = self.cur
        self.cur = entity
        try:
            self.push(at_ps, callback, ())
        finally:
            self.cur = saved

    def schedule(self, at_ps: int, callback: Callable[..., Any], *args: Any) -> Event:
        """Run ``callback(*args)`` at absolute time ``at_ps`` (not before :attr:`now`)."""
        if at_ps < self.now:
            raise ValueError(f"schedule: time {at_ps} ps is in the past (now {self.now} ps)")
        return self.push(at_ps, callback, args)

    def after(self, delay_ps: int, callback: Callable[..., Any], *args: Any) -> Event:
        """Run ``callback(*args)`` ``delay_ps`` after now."""
        if delay_ps < 0:
            raise ValueError(f"after: negative delay {delay_ps} ps")
        return self.push(self.now + delay_ps, callback, args)

    def post(self, at_ps: int, callback: Callable[[Any], Any], arg: Any) -> None:
        """Run ``callback(arg)`` at ``at_ps``, as :meth:`schedule` would, but return no handle.

        For calls that are never cancelled (the NIC's pump and timer): the native
        simulator then makes neither a handle nor an args tuple.  The event takes
        its key as :meth:`schedule` would; :meth:`pending_callbacks` lists it as
        ``(t, key, callback, (arg,))``, a handle :meth:`cancel` takes.
        """
        if at_ps < self.now:
            raise ValueError(f"post: time {at_ps} ps is in the past (now {self.now} ps)")
        self.push(at_ps, callback, (arg,))

    def cancel(self, event: tuple[Any, ...]) -> None:
        """Disarm a scheduled event (it stays in the heap and is skipped).

        Cancelling an event that already ran, or twice, is harmless.
        """
        t, key = event[0], event[1]
        if t > self.now or (t == self.now and any(ev[1] == key for ev in self.heap)):
            self.cancelled.add(key)

    def stop(self) -> None:
        """Make :meth:`run` return after the current event."""
        self._stopped = True

    def pending(self) -> int:
        """Number of entries in the heap (cancelled ones included)."""
        return len(self.heap)

    def pending_callbacks(self) -> list[tuple[int, int, Any, tuple[Any, ...]]]:
        """The scheduled calls not yet run nor cancelled, as ``(t, key, fn, args)``, unordered.

        (The native simulator lists only calls of Python callables; its own
        port events are not callbacks.)
        """
        cancelled = self.cancelled
        return [ev[:4] for ev in self.heap if ev[1] not in cancelled]

    def run(self, until_ps: int | None = None) -> int:
        """Run events in key order until the heap is empty, :meth:`stop`, or ``until_ps``.

        Events at exactly ``until_ps`` run; afterwards :attr:`now` is
        ``until_ps`` (if given and reached).  Returns the number of events run.
        """
        heap = self.heap
        pop = heappop
        limit = until_ps if until_ps is not None else _NEVER
        cancelled = self.cancelled
        n = 0
        self._stopped = False
        with quiet_gc():
            try:
                while heap:
                    if heap[0][0] > limit:
                        break
                    t, key, fn, args, target = pop(heap)
                    if cancelled and key in cancelled:
                        cancelled.discard(key)
                        continue
                    self.now = t
                    self.cur = target
                    n += 1
                    fn(*args)
                    if self._stopped:
                        return n
                if until_ps is not None and until_ps > self.now:
                    self.now = until_ps
                return n
            finally:
                self.cur = GLOBAL
                self.events_run += n


if TYPE_CHECKING:  # type-checked against the pure-Python API, which the native one mirrors
    Simulator = PySimulator
elif kernel is not None:

    class Simulator(kernel.Simulator):
        """The native event loop (:mod:`openmrc.sim._kernel`); the API of :class:`PySimulator`.

        ``heap``, the entity counters and table are internal to it (C structs;
        native ports, switches and host ends hold their own entity).
        Times are whole picoseconds in 64 bits: a float with a whole value is
        taken as that int, a fraction raises TypeError, an event time past
        2**63-1 ps raises OverflowError (Python would accept both); a
        ``run(until_ps=...)`` past that range means "no limit" and leaves
        :attr:`now` at ``until_ps``, as in Python.
        """

        __slots__ = ()

        def run(self, until_ps: int | None = None) -> int:
            """As :meth:`PySimulator.run` (the loop is native)."""
            with quiet_gc():
                return int(super().run(until_ps))

else:
    Simulator = PySimulator
