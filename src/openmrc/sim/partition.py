"""One simulation partitioned over K processes (MPI ranks), the same results for every K.

How it works (docs/parallel.md has the reasons):

* **Entities and the event key** are the sequential run's
  (:mod:`openmrc.sim.engine`, :mod:`openmrc.sim.entities`): every host (its NIC,
  ports and transport context) and every switch (with its egress ports) is an
  entity; two more are the experiment's global actions (faults, flow starts set
  up before the run) and the sampler.  An event runs on behalf of one entity (the
  one whose state it changes: a packet's arrival, the receiving switch or host)
  and is keyed ``(time, scheduling entity << 40 | that entity's counter)``: the
  key of every event is the same whichever process runs it, so events at equal
  times run in the same order for K = 1, 2, 4 ... as in ``openmrc run``.
* **Randomness** is per entity (as in the sequential run): each port draws its
  ECN marks and losses from its own generator, each host its per-EV losses.
* **Partitioning**: by rack groups: T0 index ``i`` of every plane with its hosts
  goes to rank ``i * K // t0s``; T1 ``k`` of plane ``p`` to rank
  ``(p * t1s + k) % K``.  Only T0-T1 links cross ranks; their delay (link delay
  plus switch latency) is the lookahead.
* **Conservative windows** no wider than the lookahead (and dividing the sample
  interval): each rank runs its own events of a window, then packets that
  crossed are exchanged (``alltoall``) with their keys.  Global actions (faults,
  sample ticks) run on every rank, each on its own part of the state.
* **Stopping** when the last flow completes: a rank whose own flows are all done
  pauses at that event; when every rank has, the stop is the latest of those
  points and the others run up to it (so the state is the sequential one's).
* **Results** are gathered at rank 0 and merged into one :class:`Result`.

Flows need their QPs, memory regions and receives at both ends: a partitioned
run makes them for every flow before the run, in flow order (the sequential run
opens the QPs so too, and posts the buffers when each flow starts, which is the
same when a connection's flows start in flow order; a partitioned run refuses
the others).  A flow released by a dependency starts on
the rank that saw the dependency met: its source must be there.

A rank runs the native kernel when it is built (:class:`NativePartitionedSimulator`:
the kernel writes the packets for other ranks' entities as bytes, the classes in
:data:`EXCHANGED` field by field, and pickles only what it cannot write), else pure
Python (:class:`PartitionedSimulator`, which pickles its outbox); the same results
either way.

Not supported yet (refused with one line): the controller, the clustermapper,
queue sampling, the RoCE/IB baselines, flow dependencies whose
release and start are on different ranks.
"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import resource
import time
from array import array
from collections.abc import Callable
from heapq import heappop, heappush
from pathlib import Path
from typing import Any, Protocol

from ..transport import QPState
from ..transport.context import FIRST_QPN
from ..wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
    packet_fields,
)
from ..wire.pcap import PcapWriter
from ._native import NATIVE
from .capture import Capture
from .engine import GLOBAL, SAMPLER, PySimulator, Simulator, paused_gc, quiet_gc
from .experiment import Experiment
from .fabric import FabricPart
from .flows import SEQ_SHIFT
from .port import COUNTERS
from .sampling import Sampler


class PartitionError(ValueError):
    """What a partitioned run cannot do (yet); the message names it."""


class Comm(Protocol):
    """The part of an MPI communicator a partitioned run uses (mpi4py's lower-case API)."""

    rank: int
    size: int

    def allgather(self, obj: Any) -> list[Any]: ...

    def alltoall(self, objs: list[Any]) -> list[Any]: ...

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None: ...

    def Abort(self, errorcode: int = 0) -> None: ...


class LocalComm:
    """A communicator of one process (K = 1, no MPI needed)."""

    rank = 0
    size = 1

    def allgather(self, obj: Any) -> list[Any]:
        """``[obj]``."""
        return [obj]

    def alltoall(self, objs: list[Any]) -> list[Any]:
        """What this rank sent itself."""
        return list(objs)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """``[obj]``."""
        return [obj]

    def Abort(self, errorcode: int = 0) -> None:
        """End the process."""
        raise SystemExit(errorcode)


class _Request:
    """A partitioned run asked for: the communicator."""

    def __init__(self, comm: Comm) -> None:
        self.comm = comm


_ACTIVE: _Request | None = None


def request(comm: Comm | None) -> None:
    """Make the experiments built from now on partitioned over ``comm`` (None: stop)."""
    global _ACTIVE
    _ACTIVE = None if comm is None else _Request(comm)


def active_comm() -> Comm | None:
    """The communicator of the requested partitioned run, if any."""
    return None if _ACTIVE is None else _ACTIVE.comm


def mpi_comm() -> Comm | None:
    """``MPI.COMM_WORLD`` when this process was started by ``mpirun`` with more than one
    rank (and mpi4py imports), else None."""

    if not any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")):
        return None
    # waiting ranks yield the core (Open MPI spins otherwise: with more ranks than
    # cores, a spinning rank takes the time of the one that works)
    os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise PartitionError(
            "partitioned run: mpi4py is not installed (pip install 'openmrc[mpi]')"
        ) from exc
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None  # type: ignore[no-any-return]


def partitioned_class(transport_name: Any) -> type[Experiment] | None:
    """The experiment class to build when a partitioned run is requested, else None."""
    if _ACTIVE is None:
        return None
    if transport_name not in (None, "mrc"):
        raise PartitionError(
            f"partitioned run: transport {transport_name!r} is not supported (only mrc)"
        )
    return PartitionedExperiment


# ----- the event loop ------------------------------------------------------------------
class PartitionedSimulator(PySimulator):
    """The pure-Python event loop of one rank: the sequential run's keys and entities,
    and what crosses ranks.

    An event is ``(time, key, callback, args, target)`` as in
    :class:`PySimulator`.  Events for entities of other ranks are dropped
    (global actions, which every rank schedules) or, when they are a packet's
    arrival over a link between ranks, put in :attr:`outbox`.
    """

    __slots__ = (
        "cur_key",
        "global_events",
        "last_t",
        "outbox",
        "owned",
        "port_index",
        "ports",
        "rank",
        "rank_of",
        "sent",
        "sub",
    )

    def __init__(self, seed: int, rank: int, nranks: int) -> None:
        super().__init__(seed)
        self.rank = rank
        #: the running event's key, and how many host link listeners it has called
        #: so far (a capture's records are ordered by both)
        self.cur_key = -1
        self.sub = 0
        #: each entity's rank (-1: every rank's) and whether this rank holds it
        self.rank_of: list[int] = [-1, -1]
        self.owned: list[bool] = [True, True]
        self.port_index: dict[int, int] = {}
        self.ports: list[Any] = []
        self.outbox: list[list[Any]] = [[] for _ in range(nranks)]
        self.global_events = 0
        self.last_t = 0
        self.sent = 0

    def set_ranks(self, ranks: list[int]) -> None:
        """The rank of each entity past :data:`SAMPLER`, in entity order."""
        self.rank_of = [-1, -1, *ranks]
        self.owned = [True, True, *(r == self.rank for r in ranks)]

    def push(self, at_ps: int, callback: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """Schedule ``callback(*args)`` at ``at_ps`` with the current entity's next key."""
        ev = self.event(at_ps, callback, args)
        target = ev[4]
        if self.owned[target]:
            heappush(self.heap, ev)
            return ev
        cur = self.cur
        if cur > SAMPLER:
            via = args[1] if len(args) == 3 else None
            i = self.port_index.get(id(via))
            if i is None:
                raise PartitionError(
                    f"partitioned run: entity {cur} scheduled {callback!r} for entity "
                    f"{target} of rank {self.rank_of[target]} (only packets cross ranks)"
                )
            self.outbox[self.rank_of[target]].append((at_ps, ev[1], i, args[2], args[0]))
            self.sent += 1
        # else: a global action's event for an entity of another rank, which runs it
        return ev

    def arrive(self, at_ps: int, key: int, port_no: int, epoch: int, pkt: Any) -> None:
        """A packet another rank sent over port ``port_no``: its arrival, with its key."""
        port = self.ports[port_no]
        rx = port.rx
        ev = (at_ps, key, rx, (pkt, port, epoch), self.target(rx, ()))
        heappush(self.heap, ev)

    def next_time(self) -> int | None:
        """When this rank's next event is (None: nothing scheduled)."""
        return self.heap[0][0] if self.heap else None

    def run_window(
        self, end_ps: int, stop_at: tuple[int, int] | None = None, honor_stop: bool = True
    ) -> tuple[int, int] | None:
        """Run events before ``end_ps`` (or up to the key ``stop_at``, inclusive).

        Returns ``(time, key)`` of the event that called :meth:`stop` (when
        ``honor_stop``), else None.
        """
        heap = self.heap
        cancelled = self.cancelled
        n = 0
        g = 0
        try:
            while heap:
                ev: Any = heap[0]
                if stop_at is None:
                    if ev[0] >= end_ps:
                        break
                elif (ev[0], ev[1]) > stop_at:
                    break
                heappop(heap)
                t, key, fn, args, target = ev
                if cancelled and key in cancelled:
                    cancelled.discard(key)
                    continue
                self.now = t
                self.cur = target
                self.cur_key = key
                self.sub = 0
                n += 1
                if target <= SAMPLER:
                    g += 1
                fn(*args)
                self.last_t = t
                if self._stopped:
                    self._stopped = False
                    if honor_stop:
                        return (t, key)
            return None
        finally:
            self.cur = GLOBAL
            self.events_run += n
            self.global_events += g

    def take_outbox(self) -> list[list[Any]]:
        """The packets for each rank since the last call."""
        out = self.outbox
        self.outbox = [[] for _ in out]
        return out

    def set_ports(self, ports: list[Any]) -> None:
        """Number the fabric's ports by their places in ``ports`` (None: a port not
        made here, ``Fabric.numbered_ports``): a packet crossing ranks names its port so."""
        self.ports = ports
        self.port_index = {id(p): i for i, p in enumerate(ports) if p is not None}

    def pack(self) -> tuple[list[Any], int | None]:
        """What to send each rank (the packets since the last call, pickled), and the
        least time among them (None: none)."""
        return _pickled(self.take_outbox())

    def unpack(self, blob: Any) -> None:
        """The packets another rank packed for this one: their arrivals."""
        _arrive_pickled(self, blob)


class NativePartitionedSimulator(Simulator):
    """A rank's event loop on the native kernel: the same keys, entities and routing as
    :class:`PartitionedSimulator` (the kernel routes an event for an entity of another
    rank to its outbox: ``set_owned``, ``take_outbox``, ``arrive``, ``run_window``)."""

    __slots__ = ("nranks", "owned", "ports", "rank", "rank_of")

    def __init__(self, seed: int, rank: int, nranks: int) -> None:
        super().__init__(seed)
        self.rank = rank
        self.nranks = nranks
        self.rank_of: list[int] = [-1, -1]
        self.owned: list[bool] = [True, True]
        self.ports: list[Any] = []

    def set_ranks(self, ranks: list[int]) -> None:
        """The rank of each entity past :data:`SAMPLER`, in entity order."""
        self.rank_of = [-1, -1, *ranks]
        self.owned = [True, True, *(r == self.rank for r in ranks)]
        self.set_owned(bytes(self.owned))  # type: ignore[attr-defined]

    def take_outbox(self) -> list[list[Any]]:  # type: ignore[override]
        """The packets for each rank since the last call (as PartitionedSimulator's)."""
        out: list[list[Any]] = [[] for _ in range(self.nranks)]
        rank_of = self.rank_of
        for target, t, key, port, epoch, pkt in super().take_outbox():  # type: ignore[misc]
            out[rank_of[target]].append((t, key, port.xid1 - 1, epoch, pkt))
        return out

    def arrive(self, at_ps: int, key: int, port_no: int, epoch: int, pkt: Any) -> None:  # type: ignore[override]
        """A packet another rank sent over port ``port_no``: its arrival, with its key."""
        super().arrive(at_ps, key, self.ports[port_no], epoch, pkt)  # type: ignore[misc]

    def set_ports(self, ports: list[Any]) -> None:
        """Number the fabric's ports (as :meth:`PartitionedSimulator.set_ports`), and
        from now on write the packets for other ranks as bytes (the kernel's exchange:
        the wire packet classes field by field; anything else stays an object in the
        outbox and is pickled)."""
        self.ports = ports
        for i, p in enumerate(ports):
            if p is not None:
                p.xid1 = i + 1
        rank_of = array("i", self.rank_of)
        self.set_exchange(  # type: ignore[attr-defined]
            rank_of,
            self.nranks,
            EXCHANGED,
            tuple(tuple(packet_fields(c)) for c in EXCHANGED),
            tuple((e, {m.value: m for m in e}) for e in (Opcode, NackReason)),
        )

    def pack(self) -> tuple[list[Any], int | None]:
        """What to send each rank: the packets written as bytes since the last call,
        and the others pickled (None: none); and the least time among them."""
        wire, first = self.take_wire()  # type: ignore[attr-defined]
        pickled, others = _pickled(self.take_outbox())
        if others is not None and (first is None or others < first):
            first = others
        return list(zip(wire, pickled, strict=True)), first

    def unpack(self, blob: Any) -> None:
        """The packets another rank packed for this one: their arrivals."""
        wire, pickled = blob
        self.arrive_wire(wire, self.ports)  # type: ignore[attr-defined]
        _arrive_pickled(self, pickled)


class WireSwap:
    """The native ranks' packet bytes sent and received as MPI buffers (mpi4py's
    ``Isend``/``Irecv``), into one buffer per sending rank kept from window to window:
    pickling them with the states copied each window's bytes twice more, into memory
    new each time."""

    def __init__(self) -> None:
        self.bufs: dict[int, bytearray] = {}

    def swap(self, comm: Any, out: list[bytes], sizes: list[int]) -> list[Any]:
        """Send ``out[r]`` to each rank r and receive ``sizes[r]`` bytes from it; what
        each rank sent (views of this object's buffers, valid until the next swap)."""
        got: list[Any] = [b""] * len(out)
        got[comm.rank] = out[comm.rank]  # (a rank sends itself nothing; if it did, as it is)
        reqs = []
        for r, n in enumerate(sizes):
            if n and r != comm.rank:
                buf = self.bufs.get(r)
                if buf is None or len(buf) < n:
                    buf = self.bufs[r] = bytearray(max(n, 2 * len(buf) if buf else n))
                got[r] = memoryview(buf)[:n]
                reqs.append(comm.Irecv([got[r], "B"], source=r, tag=_WIRE_TAG))
        for r, data in enumerate(out):
            if data and r != comm.rank:
                reqs.append(comm.Isend([data, "B"], dest=r, tag=_WIRE_TAG))
        for req in reqs:
            req.Wait()
        return got


#: The MPI tag of the packet bytes between ranks (the states go by collectives).
_WIRE_TAG = 7

#: The packet classes the native exchange writes as bytes, field by field (others, such
#: as a baseline's or a controller's packets, are pickled).
EXCHANGED: tuple[type, ...] = (DataPacket, SackPacket, NackPacket, ProbePacket, ProbeReplyPacket)


#: A rank's event loop: pure Python or on the native kernel (type-checked as the first,
#: whose API the second has).
RANK_SIMULATORS: tuple[type[PartitionedSimulator], ...] = (
    PartitionedSimulator,
    NativePartitionedSimulator,  # type: ignore[assignment]
)


def _trim() -> None:
    """Hand the C heap's free memory back to the system (glibc's ``malloc_trim``; a
    no-op where there is none): what was freed is then no longer resident."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _resident_mib() -> float | None:
    """This process's resident memory now, in MiB (None where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


# ----- the partition -------------------------------------------------------------------
def rank_of_t0(i: int, t0s: int, nranks: int) -> int:
    """The rank of T0 index ``i`` (every plane's) and its hosts: contiguous rack groups."""
    return i * nranks // t0s


def rank_of_t1(plane: int, k: int, t1s: int, nranks: int) -> int:
    """The rank of T1 ``k`` of ``plane``: spread round robin."""
    return (plane * t1s + k) % nranks


def window_ps(lookahead_ps: int | None, interval_ps: int) -> int:
    """The window: at most ``lookahead_ps`` and a divisor of the sample interval."""
    if lookahead_ps is None or lookahead_ps >= interval_ps:
        return interval_ps
    if lookahead_ps < 1:
        raise PartitionError("partitioned run: a link between ranks has no delay (no lookahead)")
    n = -(-interval_ps // lookahead_ps)
    while interval_ps % n:
        n += 1
    return interval_ps // n


class PartitionedSampler(Sampler):
    """The sampler of one rank of a partitioned run.

    A tick (a global event: every rank runs it) reads what this rank holds: the
    flows whose receiver is here, the planes' bytes sent by its hosts (kept as
    byte counts, summed over the ranks before rounding).  Whether the sampler
    sleeps after a tick, and when it wakes, are decided at the next window
    boundary from every rank's report (:meth:`decide`), the same on all.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: the flows whose receiver this rank holds, until they hold all their bytes
        self.rx_flows: dict[Any, None] = {}
        #: the NIC ports of this rank's hosts
        self.my_ports: list[list[Any]] = []
        #: plane bytes sent per tick by this rank's hosts (rank 0 sums and rounds)
        self.plane_raw: list[list[int]] = [[] for _ in self.plane_series]
        #: the first host input since the last tick (what would wake a sleeping sampler)
        self.first_wake: int | None = None
        #: (time, moved, open flows here) of the tick run in this window, if one ran
        self.tick: tuple[int, int, int] | None = None
        self.asleep = False
        #: a tick falls in every window: the hosts report every input throughout
        self.every_window = False

    def start(self) -> None:
        """Start ticking, armed as the sequential sampler starts (no input before the
        first tick can matter: the tick forgets it), unless a tick falls in every window."""
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        self.t0 = sim.now
        self.sampling = True
        self.armed = not self.every_window
        sim.push_as(SAMPLER, self.t0 + self.interval_ps, self.sample)

    def _track(self) -> None:
        """From this tick until it is decided (and on while the sampler sleeps) every
        host input reports to :meth:`wake` (``armed`` False, the hosts' hooks on)."""
        if self.armed:
            self.armed = False
            self.hooks(True)

    def _arm(self) -> None:
        """Re-armed (a tick is scheduled): until it, no input can matter, and the hosts
        call back only as in a sequential run with its sampler armed (a Python call
        per host input otherwise); kept on where a tick falls in every window."""
        if not self.armed and not self.every_window:
            self.armed = True
            self.hooks(False)

    def wake(self, now: int) -> None:
        """A host input: noted (the first since the last tick); decided at the boundary."""
        fw = self.first_wake
        if fw is None or now < fw:
            self.first_wake = now

    def sample(self) -> None:
        """This rank's part of a tick."""
        interval = self.interval_ps
        scale = 8 / interval * 1000
        moved = self.read_flows(self.rx_flows, scale)
        for plane in range(len(self.plane_raw)):
            tx = sum(ports[plane].tx_bytes for ports in self.my_ports)
            delta = tx - self.plane_last[plane]
            moved |= delta
            self.plane_raw[plane].append(delta)
            self.plane_last[plane] = tx
        self.read_evs(scale)
        self.ticks += 1
        self.tick = (self.sim.now, 1 if moved else 0, self.busy())
        self.first_wake = None
        self._track()

    def decide(self, ticks: list[Any], wakes: list[Any]) -> int | None:
        """From every rank's tick report and first input: re-arm, sleep or wake, as the
        sequential sampler would have; the time of the tick scheduled, if any."""
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        interval = self.interval_ps
        done = [t for t in ticks if t is not None]
        if done:
            if sum(t[2] for t in done) and any(t[1] for t in done):
                nxt = done[0][0] + interval
                sim.push_as(SAMPLER, nxt, self.sample)
                self._arm()
                return nxt
            self.asleep = True
        woken = [w for w in wakes if w is not None]
        if not self.asleep or not woken:
            return None
        now = min(woken)
        due = (now - self.t0) // interval
        skip = due - self.ticks
        if skip > 0:
            for raw in self.plane_raw:
                raw.extend([0] * skip)
            for series in self.ev_series.values():
                series.extend([0.0] * skip)
            self.ticks += skip
            self.skipped += skip
        nxt = self.t0 + (due + 1) * interval
        sim.push_as(SAMPLER, nxt, self.sample)
        self.first_wake = None
        self.asleep = False
        self._arm()
        return nxt


class _NoTaps:
    """A host of another rank, as a capture sees it: its taps are never called."""

    def __init__(self) -> None:
        self.taps: list[Any] = []


class _Recorder:
    """A capture's writer on one rank: frames kept with the key of the event that
    made them (time, event key, host reaction, order), for rank 0 to merge."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.records: list[tuple[int, int, int, int, bytes]] = []

    def write(self, frame: bytes | bytearray | memoryview, ts_ps: int) -> None:
        """Keep ``frame`` captured at ``ts_ps``."""
        sim = self.sim
        self.records.append((ts_ps, sim.cur_key, sim.sub, len(self.records), bytes(frame)))

    def close(self) -> None:
        """Nothing to flush: rank 0 writes the file."""


class _Listener:
    """A host's link listener, called only on the host's rank, as the host."""

    __slots__ = ("entity", "inner", "sim")

    def __init__(self, sim: PartitionedSimulator, entity: int, inner: Any) -> None:
        self.sim = sim
        self.entity = entity
        self.inner = inner

    def __call__(self, link: Any, up: bool, now: int) -> None:
        sim = self.sim
        # the order of the hosts' reactions to one event, the same on every rank (a
        # rank makes only its own hosts' links, so it hears only their listeners)
        sim.sub = self.entity
        if not sim.owned[self.entity]:
            return
        saved = sim.cur
        sim.cur = self.entity
        try:
            self.inner(link, up, now)
        finally:
            sim.cur = saved


class RemoteRegion:
    """Where a flow writes, seen from its source's rank when its destination is on
    another rank: the destination region's address and rkey (all a WRITE names)."""

    __slots__ = ("addr", "buffer", "pd", "rkey")

    def __init__(self, addr: int, rkey: int) -> None:
        self.addr = addr
        self.rkey = rkey
        #: not a region of this process: no buffer, no protection domain here.
        self.buffer = None
        self.pd = None


class PartitionedExperiment(Experiment):
    """An MRC experiment run on one rank of a partitioned simulation (see the module)."""

    def _new_simulator(self, seed: int) -> Any:
        comm = active_comm()
        assert comm is not None
        self._comm = comm
        cls = NativePartitionedSimulator if NATIVE else PartitionedSimulator
        return cls(seed, comm.rank, comm.size)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.queue_sample_interval_ps is not None:
            raise PartitionError("partitioned run: queue sampling is not supported yet")
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        spec = self.spec
        k = self._comm.size
        hpt = spec.hosts_per_t0
        # the entities are the sequential run's (made by Experiment, sim.entities):
        # hosts, then switches in the fabric's order; each gets its rank here
        ranks = [rank_of_t0(h // hpt, spec.t0s, k) for h in range(spec.hosts)]
        for sw in self.fabric.switches.values():
            info = sw.info
            if info.tier == 0:
                ranks.append(rank_of_t0(info.index, spec.t0s, k))
            else:
                ranks.append(rank_of_t1(info.plane, info.index, spec.t1s, k))
        assert sim.entities() == 2 + len(ranks)
        sim.set_ranks(ranks)
        sim.set_ports(self.fabric.numbered_ports())
        # the lookahead: the least delay of a link between ranks
        look = None
        for port in sim.ports:
            if port is None:  # (a port between two other ranks' nodes: not made here)
                continue
            a = sim.entity_of(port)
            b = sim.entity_of(port.rx.__self__)
            assert a is not None and b is not None  # (every port and receiver has one)
            if sim.rank_of[a] != sim.rank_of[b]:
                look = port.delay if look is None else min(look, port.delay)
        self.lookahead_ps = look
        for h in range(spec.hosts):
            if not self.fabric.holds_host(h):
                continue
            for plane in range(spec.planes):
                link = self.fabric.host_link(h, plane)
                e = self._host_entity[h]
                link.listeners = tuple(_Listener(sim, e, x) for x in link.listeners)
        self.sampler = PartitionedSampler(
            sim,
            self.sample_interval_ps,
            self.fabric.host_ports,
            self.spec.planes,
            self._received_bytes,
            self._open_flows,
            self._host_hooks,
        )
        sim.set_entity(self.sampler, SAMPLER)
        self._capture_paths: list[Path] = []
        self._merged: dict[str, Any] | None = None
        self._index: dict[Any, int] = {}
        #: the next QPN of each host this rank does not hold (_peer_qpn).
        self._peer_qpns: dict[int, int] = {}
        self.parallel_stats: dict[str, Any] = {}
        self._swap = WireSwap()

    def _fabric_part(self) -> FabricPart:
        """This rank's part of the fabric: its rack groups' T0s with their hosts, its
        T1s, and the links with an end among them (the ports it sends on or receives
        from; a link between two other ranks' nodes is not made here)."""
        spec = self.spec
        k, rank = self._comm.size, self._comm.rank
        return FabricPart(
            [rank_of_t0(i, spec.t0s, k) == rank for i in range(spec.t0s)],
            [
                [rank_of_t1(p, j, spec.t1s, k) == rank for j in range(spec.t1s)]
                for p in range(spec.planes)
            ],
        )

    # -- placement ----------------------------------------------------------------
    def _place(self, callback: Any, args: tuple[Any, ...]) -> int:
        owner = getattr(callback, "__self__", None)
        name = getattr(callback, "__name__", "")
        if owner is self and name == "_launch":
            return self._host_entity[args[0].spec.src]
        if owner is self.faults:
            return GLOBAL
        module = getattr(owner if owner is not None else callback, "__module__", "") or ""
        if "clustermapper" in module:
            raise PartitionError("partitioned run: the clustermapper is not supported yet")
        raise PartitionError(f"partitioned run: cannot place the event {callback!r}")

    def _mine(self, host: int) -> bool:
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        return sim.owned[self._host_entity[host]]

    def _holds(self, host: int) -> bool:
        # a rank makes the PDs, QPs, memory regions and receives of its own hosts only
        return self._mine(host)

    def _peer_qpn(self, host: int) -> int:
        # QPNs are a context's count of the QPs made on it (from FIRST_QPN), and every
        # rank opens every flow's QPs in flow order: counting them gives the number
        # the host's own rank gives
        qpn = self._peer_qpns.get(host, FIRST_QPN)
        self._peer_qpns[host] = qpn + 1
        return qpn

    def _sends_here(self, port: Any) -> bool:
        """Whether ``port``'s sending end (a host or switch) is this rank's."""
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        e = sim.entity_of(port)
        return e is not None and sim.owned[e]

    def _rank(self, host: int) -> int:
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        return sim.rank_of[self._host_entity[host]]

    # -- what is not supported yet --------------------------------------------------
    def controller(self, host: int) -> Any:
        """Refused: the controller does not run in a partitioned run yet."""
        raise PartitionError("partitioned run: the controller is not supported yet")

    def capture(self, path: Any, hosts: Any = None) -> Any:
        """As :meth:`Experiment.capture`: each rank records what its hosts send and
        receive, rank 0 writes the file in event order after the run."""
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        nics = [h if self._mine(i) else _NoTaps() for i, h in enumerate(self.hosts)]
        # (only rank 0 writes the file: the others open nothing of it)
        cap = Capture(self.topology, nics, path if self._comm.rank == 0 else os.devnull, hosts)
        cap.writer.close()  # (the file is written by rank 0 at the end)
        cap.writer = _Recorder(sim)  # type: ignore[assignment]
        self._captures.append(cap)
        self._capture_paths.append(Path(path))
        return cap

    def add_flows(self, specs: list[Any], watch: bool = False) -> list[int]:
        """As :meth:`Experiment.add_flows`; a dependency must be met where its dependent starts."""
        idx = super().add_flows(specs, watch)
        base = idx[0] if idx else 0
        for i, spec in enumerate(specs):
            for d in spec.deps:
                if self._rank(specs[d].dst) != self._rank(spec.src):
                    raise PartitionError(
                        f"partitioned run: flow {base + i} ({spec.src}->{spec.dst}) waits "
                        f"for flow {base + d}'s data at host {specs[d].dst}, on another "
                        "rank than its source: not supported yet"
                    )
            for d in spec.send_deps:
                if self._rank(specs[d].src) != self._rank(spec.src):
                    raise PartitionError(
                        f"partitioned run: flow {base + i} ({spec.src}->{spec.dst}) waits "
                        f"for flow {base + d}'s sender, host {specs[d].src}, on another "
                        "rank than its source: not supported yet"
                    )
        return idx

    def _fail_dependents(self, flow: Any) -> None:
        stack = [*flow.dependents, *flow.send_dependents]
        seen = set()
        while stack:
            dep = stack.pop()
            if id(dep) in seen:
                continue
            seen.add(id(dep))
            if not self._mine(dep.spec.src):
                raise PartitionError(
                    f"partitioned run: flow {dep.spec.src}->{dep.spec.dst} depends on a "
                    "failed flow whose failure was seen on another rank: not supported yet"
                )
            stack.extend(dep.dependents)
            stack.extend(dep.send_dependents)
        super()._fail_dependents(flow)

    # -- flows: both ends made before the run ---------------------------------------
    def _prepare_flows(self) -> None:
        """Memory regions, payloads and receives of every flow, in flow order (its QPs
        were opened when it was added, as in the sequential run), each end on its own
        rank; then each source learns where its flow writes (the destination region's
        address and rkey, made on the destination's rank)."""
        seqs: dict[int, int] = {}
        flow: Any
        out: list[list[tuple[int, int, int]]] = [[] for _ in range(self._comm.size)]
        for i, flow in enumerate(self.flows):
            self._index[flow] = i
            conn = flow.conn
            if conn is not None:
                pa, pb = conn.pa, conn.pb
                seq = seqs.get(id(conn), 0)
                seqs[id(conn)] = seq + 1
            else:
                pa = flow.qas[0].pd if flow.qas else None
                pb = flow.qbs[0].pd if flow.qbs else None
                seq = 0
            self._post_buffers(flow, pa, pb, conn, seq)
            spec = flow.spec
            src_mine, dst_mine = self._mine(spec.src), self._mine(spec.dst)
            if dst_mine and not src_mine:
                mr = flow.mr_dst
                out[self._rank(spec.src)].append((i, mr.addr, mr.rkey))
            if not (src_mine or dst_mine):
                flow.src_data = None  # (a payload neither end of it is here to use)
            if flow.watch_rx:
                self._watch_rx(flow, spec.dst)
        for got in self._comm.alltoall(out):
            for i, addr, rkey in got:
                self.flows[i].mr_dst = RemoteRegion(addr, rkey)

    def _start(self, flow: Any) -> None:
        """The source's half of a flow's start (its QPs and receives exist already)."""
        spec = flow.spec
        now = self.sim.now
        conn = flow.conn
        if conn is not None:
            if any(q.state is QPState.ERROR for q in (*conn.qas, *conn.qbs)):
                self._fail_at_start(flow, now)
                return
            seq = conn.started
            if seq != flow.wr_base >> SEQ_SHIFT:
                raise PartitionError(
                    f"partitioned run: flow {spec.src}->{spec.dst} started before an "
                    "earlier flow of its connection: not supported yet"
                )
            conn.flows[seq] = flow
            conn.started = seq + 1
            conn.active[flow] = None
        self._begin_sending(flow, conn)
        self.hosts[spec.src].kick(now)  # type: ignore[has-type]

    # -- the sampler: each rank its part, decisions at window boundaries ------------
    def _host_hooks(self, everywhere: bool) -> None:
        # every host reports its input while the sampler is not armed: from a tick until
        # the window boundary decides it, and while it sleeps (PartitionedSampler)
        super()._host_hooks(everywhere or not self.sampler.armed)

    # -- running ----------------------------------------------------------------------
    def run(self, until_ps: int | None = None) -> Any:
        """Run this rank's part in windows; rank 0 returns the merged result
        (the other ranks None).  An error on one rank of several ends them all."""
        try:
            return self._run(until_ps)
        except Exception as exc:
            if self._comm.size == 1:
                raise
            import sys

            print(f"openmrc: error: rank {self._comm.rank}: {exc}", file=sys.stderr, flush=True)
            self._comm.Abort(2)
            raise

    def _run(self, until_ps: int | None) -> Any:
        comm = self._comm
        sim = self.sim
        assert isinstance(sim, RANK_SIMULATORS)
        nranks = comm.size
        rank = comm.rank
        self._prepare_flows()
        if self.clustermapper is not None:
            raise PartitionError("partitioned run: the clustermapper is not supported yet")
        self._my_hosts = [h for h in range(self.spec.hosts) if self._mine(h)]
        sampler = self.sampler
        assert isinstance(sampler, PartitionedSampler)
        sampler.rx_flows = {f: None for f in self.flows if self._mine(f.spec.dst)}
        sampler.my_ports = [self.fabric.host_ports[h] for h in self._my_hosts]
        self._open = sum(1 for f in self.flows if self._mine(f.spec.src))
        interval = self.sample_interval_ps
        width = window_ps(self.lookahead_ps, interval)
        sampler.every_window = width >= interval
        sampler.start()
        self._host_hooks(False)  # (on every host only while the sampler is not armed)
        t0 = sampler.t0
        start = t0
        windows = 0
        idle = 0.0
        stop: tuple[int, int] | None = None
        end_time = start
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        before = (-1, -1)
        with quiet_gc():
            while True:
                windows += 1
                end = start + width
                if until_ps is not None:
                    end = min(end, until_ps + 1)
                pause: tuple[int, int] | None = before
                if self._open > 0:
                    pause = sim.run_window(end)
                # one exchange per window: the packets, and each rank's state (a rank
                # that paused at its last flow's end sends a second, after the rest)
                w = time.perf_counter()
                statuses = self._exchange(sim, comm, (self._open, pause))
                idle += time.perf_counter() - w
                if sum(st[0] for st in statuses) == 0:
                    stop = max(st[1] for st in statuses if st[1] is not None)
                    if pause is None or pause < stop:
                        sim.run_window(end, stop_at=stop, honor_stop=False)
                    end_time = stop[0]
                    # the sequential sampler acts on a tick or an input at once; here
                    # that waits for a window boundary, and the stop came first: what
                    # every rank saw up to the stop is decided now, or a wake-up before
                    # the stop would count on K ranks and not on one (whose window is
                    # wider) -- the same document for every K
                    final = comm.allgather((sampler.tick, sampler.first_wake))
                    sampler.tick = None
                    sampler.decide([f[0] for f in final], [f[1] for f in final])
                    if not sampler.asleep:
                        # the last, partial interval, as the sequential run's
                        # Sampler.finish records it (every rank its part)
                        sampler.sample()
                        sampler.tick = None
                    break
                if any(st[1] is not None for st in statuses):
                    if pause is not None:
                        sim.run_window(end, honor_stop=False)
                    w = time.perf_counter()
                    statuses = self._exchange(sim, comm, (self._open, None))
                    idle += time.perf_counter() - w
                sampler.tick = None
                nxt = sampler.decide([st[2] for st in statuses], [st[3] for st in statuses])
                # the next event anywhere: each rank's own (before it received what
                # was sent in the last exchange), what was sent, the sampler's next tick
                nexts = [t for st in statuses for t in (st[4], st[6]) if t is not None]
                if nxt is not None:
                    nexts.append(nxt)
                if not nexts:
                    end_time = max(st[5] for st in statuses)
                    if until_ps is not None:
                        end_time = max(end_time, until_ps)
                    break
                first_t = min(nexts)
                if until_ps is not None and first_t > until_ps:
                    end_time = until_ps
                    break
                start = max(end, t0 + (first_t - t0) // width * width)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        sim.now = end_time
        mine_stats: dict[str, Any] = {
            "rank": rank,
            "events": sim.events_run - (sim.global_events if rank else 0),
            "cpu_s": round(cpu, 3),
            "idle_s": round(idle, 3),
            "packets_sent": sim.sent,
            # the QPs this rank made (its hosts' ends of every flow's connections)
            "qps": sum(len(self.hosts[h].ctx.qps) for h in self._my_hosts),
            # the rank's peak resident memory up to here (before rank 0 merges)
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        # the fragment, the merge and the results are made from long-lived objects, with
        # no collection (paused_gc, as the sequential run collects its results): each
        # full collection would walk the whole fabric and hosts, 0.6 s a rank at
        # 8192 hosts x 8 planes (_free_transport's own collection frees the transport)
        with paused_gc():
            frag = self._fragment(mine_stats)
            self._free_transport()
            # what the rank holds from here on, while rank 0 merges (None: not on Linux)
            mine_stats["rss_freed_mib"] = _resident_mib()
            frags = comm.gather(frag, root=0)
            if rank != 0 or frags is None:
                return None  # rank 0 has the result
            del frag
            self._merge(frags)
            self._write_captures(frags)
            self.parallel_stats = {
                "ranks": nranks,
                "window_ps": width,
                "lookahead_ps": self.lookahead_ps,
                "windows": windows,
                "per_rank": [f["stats"] for f in frags],
            }
            import sys

            print(f"openmrc: {format_stats(self.parallel_stats)}", file=sys.stderr, flush=True)
            result = self._collect(wall)
            result.warnings.extend(self._warnings(until_ps))
            return result

    def collect(self, wall_seconds: float = 0.0) -> Any:
        """Refused: after an interruption each rank holds only its part of the state."""
        raise PartitionError(
            "partitioned run: interrupted; no partial results (each rank holds part of the state)"
        )

    def _write_captures(self, frags: list[dict[str, Any]]) -> None:
        """Rank 0: every capture's records from all ranks, in event order, to its file."""
        for i, cap in enumerate(self._captures):
            records = sorted(r for f in frags for r in f["captures"][i])
            writer = PcapWriter(self._capture_paths[i])
            for t, _key, _sub, _n, frame in records:
                writer.write(frame, t)
            writer.close()
            cap.packets = len(records)

    def _exchange(self, sim: PartitionedSimulator, comm: Comm, head: tuple[Any, ...]) -> list[Any]:
        """Send the packets for each rank with this rank's state, receive theirs; every
        rank's state ``(*head, tick, first wake, next event, last event, first sent)``.

        Under MPI the native ranks' packets (bytes: about 11 MB a window each way at
        8,192 hosts x 8 planes) go as buffers, not pickled with the states: each rank
        learns what it will receive from the states and receives it into its own
        reused buffers (:class:`WireSwap`)."""
        blobs, sent_first = sim.pack()
        sampler = self.sampler
        assert isinstance(sampler, PartitionedSampler)
        status = (*head, sampler.tick, sampler.first_wake, sim.next_time(), sim.last_t, sent_first)
        statuses = []
        if isinstance(sim, NativePartitionedSimulator) and hasattr(comm, "Isend"):
            got = comm.alltoall([(len(wire), pickled, status) for wire, pickled in blobs])
            wires = self._swap.swap(comm, [wire for wire, _ in blobs], [g[0] for g in got])
            for wire, (_, pickled, st) in zip(wires, got, strict=True):
                sim.unpack((wire, pickled))
                statuses.append(st)
            return statuses
        for blob, st in comm.alltoall([(blob, status) for blob in blobs]):
            sim.unpack(blob)
            statuses.append(st)
        return statuses

    # -- results ---------------------------------------------------------------------
    def _free_transport(self) -> None:
        """Once this rank's fragment is made: destroy its hosts' QPs (the verbs'
        ``destroy_qp``; their timers go with them) and drop every reference the flows,
        their connections and the host list hold to the transport state, then collect
        what that freed.  The results need none of it (the fragment holds what was
        measured), and it is most of a rank's memory: rank 0 merges into the memory it
        frees, and every rank holds little while rank 0 writes the results."""
        hosts: list[Any] = self.hosts  # type: ignore[has-type]
        for h in self._my_hosts:
            ctx = hosts[h].ctx
            for qp in list(ctx.qps.values()):
                ctx.destroy_qp(qp)
            ctx.get_timer()  # (drops the destroyed QPs' deadlines)
        flow: Any
        for flow in self.flows:
            flow.qas = []
            flow.qbs = []
            flow.conn = None
            flow.poster = None
            flow.mr_src = None
            flow.mr_dst = None
        self._conns.clear()
        gc.collect()
        _trim()

    def _local_events(self) -> dict[int, tuple[list[Any], list[Any]]]:
        saved: list[Any] = self.hosts  # type: ignore[has-type]
        out = {}
        for h in self._my_hosts:
            self.hosts = [saved[h]]
            try:
                out[h] = super()._events()
            finally:
                self.hosts = saved
        return out

    def _fragment(self, stats: dict[str, Any]) -> dict[str, Any]:
        """What this rank measured of what it holds (for rank 0 to merge)."""
        sampler = self.sampler
        assert isinstance(sampler, PartitionedSampler)
        events = self._local_events()
        rows: list[Any] = []
        for h in sorted(events):
            rows.extend(events[h][0])
        rows.sort(key=lambda e: (e["time_us"], e["host"], e["qpn"], e["ev"]))
        src: dict[int, Any] = {}
        dst: dict[int, Any] = {}
        for i, flow in enumerate(self.flows):
            spec = flow.spec
            if self._mine(spec.src):
                src[i] = {
                    "status": flow.status,
                    "done_at": flow.done_at,
                    "finished": flow.finished,
                    "started_at": flow.started_at,
                    "counters": self._counters(flow, rows),
                }
            if self._mine(spec.dst):
                self.sampler.pad(flow, self.sampler.ticks)
                got = self._delivered(flow) if self.payloads else None
                dst[i] = {
                    "rx_done": flow.rx_done,
                    "series": flow.series,
                    "cum": flow.cum,
                    "last_bytes": flow.last_bytes,
                    "received": self._received_bytes(flow),
                    "exact": None if got is None else got == flow.src_data,
                }

        def nonzero(objs: Any, names: tuple[str, ...]) -> list[Any]:
            out = []
            for i, obj in objs:
                vals = tuple(getattr(obj, n) for n in names)
                if any(vals):
                    out.append((i, vals))
            return out

        fabric = self.fabric
        numbers = fabric.port_numbers

        def ports() -> Any:
            if numbers is None:
                return enumerate(fabric.ports)
            return zip(numbers, fabric.ports, strict=True)

        # the counters: rank 0 merges into its own objects, so only the others send
        # theirs (the ports' as two arrays: millions of them at the paper's size)
        merger = self._comm.rank == 0
        idx, vals = array("q"), array("q")
        if not merger:
            for i, port in ports():
                row = [getattr(port, n) for n in _PORT_FIELDS]
                if any(row):
                    idx.append(i)
                    vals.extend(row)
        planes = self.spec.planes
        ends = [(h * planes + e.plane, e) for h, es in enumerate(fabric.host_ends) for e in es]
        return {
            "stats": stats,
            "open": self._open,
            "events": {h: e for h, e in events.items()},
            "src": src,
            "dst": dst,
            "ports": (idx, vals),
            # the wire state of the ports whose sending end is this rank's (the faults
            # acted on every rank's copies; rank 0 copies it to the ports it lacked)
            "port_state": []
            if merger
            else [
                (i, port.up, port.silent, port.loss)
                for i, port in ports()
                if (not port.up or port.impaired) and self._sends_here(port)
            ],
            "switches": []
            if merger
            else nonzero(enumerate(fabric.switches.values()), _SWITCH_FIELDS),
            "ends": [] if merger else nonzero(ends, _END_FIELDS),
            "captures": [cap.writer.records for cap in self._captures],  # type: ignore[attr-defined]
            "plane_raw": sampler.plane_raw,
            "ev_series": dict(self.sampler.ev_series),
            "stats_events": stats["events"],
        }

    def _merge(self, frags: list[dict[str, Any]]) -> None:
        """Rank 0: put every rank's measurements on this rank's copies."""
        me = 0
        sim = self.sim
        sim.events_run = sum(f["stats_events"] for f in frags)
        self._open = sum(f["open"] for f in frags)
        fabric = self.fabric
        # the ports this rank did not make get made, with the wire state the faults
        # left them in on a rank that had them
        new = bytearray(2 * len(self.topology.links))
        for num in fabric.complete():
            new[num] = 1
        for f in frags:
            for i, up, silent, loss in f["port_state"]:
                if new[i]:
                    port = fabric.ports[i]
                    port.set_up(up)
                    port.set_impairment(silent, loss)
        width = len(_PORT_FIELDS)
        ports = fabric.ports
        switches = list(fabric.switches.values())
        ends = [e for es in fabric.host_ends for e in es]
        for r, f in enumerate(frags):
            if r == me:
                continue
            idx, flat = f["ports"]
            for j, i in enumerate(idx):
                _add_counters(ports[i], _PORT_FIELDS, flat[j * width : (j + 1) * width])
            f["ports"] = None  # (read: the arrays may go)
            for i, vals in f["switches"]:
                _add_counters(switches[i], _SWITCH_FIELDS, vals)
            for i, vals in f["ends"]:
                _add_counters(ends[i], _END_FIELDS, vals)
        ev_rows: list[Any] = []
        qp_rows: list[Any] = []
        per_host: dict[int, Any] = {}
        for f in frags:
            per_host.update(f["events"])
        for h in sorted(per_host):
            ev_rows.extend(per_host[h][0])
            qp_rows.extend(per_host[h][1])
        ev_rows.sort(key=lambda e: (e["time_us"], e["host"], e["qpn"], e["ev"]))
        counters: dict[int, Any] = {}
        received: dict[int, Any] = {}
        exact: dict[int, Any] = {}
        for f in frags:
            for i, d in f["src"].items():
                flow = self.flows[i]
                flow.status = d["status"]
                flow.done_at = d["done_at"]
                flow.finished = d["finished"]
                flow.started_at = d["started_at"]
                counters[i] = d["counters"]
            for i, d in f["dst"].items():
                flow = self.flows[i]
                flow.rx_done = d["rx_done"]
                flow.series = d["series"]
                flow.cum = d["cum"]
                flow.last_bytes = d["last_bytes"]
                received[i] = d["received"]
                exact[i] = d["exact"]
        scale = 8 / self.sample_interval_ps * 1000
        planes = []
        for p in range(self.spec.planes):
            raw = [sum(vals) for vals in zip(*(f["plane_raw"][p] for f in frags), strict=True)]
            planes.append([round(v * scale, 3) for v in raw])
        self.sampler.plane_series = planes
        ev_series: dict[Any, Any] = {}
        for f in frags:
            ev_series.update(f["ev_series"])
        self.sampler.ev_series = ev_series
        self._merged = {
            "events": (ev_rows, qp_rows),
            "counters": counters,
            "received": received,
            "exact": exact,
        }

    def _events(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if self._merged is not None:
            return self._merged["events"]  # type: ignore[no-any-return]
        return super()._events()

    def _counters(self, flow: Any, ev_events: list[dict[str, Any]]) -> dict[str, int]:
        if self._merged is not None:
            return self._merged["counters"][self._index[flow]]  # type: ignore[no-any-return]
        return super()._counters(flow, ev_events)

    def _received_bytes(self, flow: Any) -> int | None:
        if self._merged is not None:
            return self._merged["received"][self._index[flow]]  # type: ignore[no-any-return]
        return super()._received_bytes(flow)

    def _delivered(self, flow: Any) -> bytes | bytearray | None:
        if self._merged is not None:
            ok = self._merged["exact"][self._index[flow]]
            if ok is None:
                return None
            return flow.src_data if ok else b""  # type: ignore[no-any-return]
        return super()._delivered(flow)


#: the counters each rank sends rank 0 to merge: a port's (its queued bytes last), a
#: switch's and a host end's
_PORT_FIELDS = (*COUNTERS, "data_bytes", "prio_bytes")
_SWITCH_FIELDS = ("forwarded", "bad_route", "discarded")
_END_FIELDS = ("received", "undelivered")


def _add_counters(obj: Any, fields: tuple[str, ...], vals: Any) -> None:
    """Add another rank's counts of ``obj`` to this rank's (``max_queue_bytes``: the
    larger; the queued bytes through ``report_queued``, read-only on a native port)."""
    queued = []
    for n, v in zip(fields, vals, strict=True):
        if n == "max_queue_bytes":
            setattr(obj, n, max(getattr(obj, n), v))
        elif n in ("data_bytes", "prio_bytes"):
            queued.append(getattr(obj, n) + v)
        else:
            setattr(obj, n, getattr(obj, n) + v)
    if queued:
        obj.report_queued(*queued)


def format_stats(stats: dict[str, Any]) -> str:
    """One line: ranks, windows, and per rank events, CPU, idle time and packets sent."""
    ranks = "; ".join(
        f"rank {r['rank']}: {r['events']:,} events, {r['cpu_s']:.2f} s CPU, "
        f"{r['idle_s']:.2f} s waiting, {r['packets_sent']:,} packets out, "
        f"peak {r['peak_rss_mib']:,.0f} MiB"
        for r in stats["per_rank"]
    )
    return (
        f"partitioned over {stats['ranks']} rank(s), {stats['windows']:,} windows of "
        f"{stats['window_ps'] / 1e6:g} us: {ranks}"
    )


def _pickled(out: list[list[Any]]) -> tuple[list[bytes | None], int | None]:
    """Each rank's packets ``(t, key, port number, epoch, packet)`` pickled (None: no
    packet), and the least time among them (None: none)."""
    first = min((p[0] for o in out for p in o), default=None)
    blobs = [pickle.dumps(_portable(o), pickle.HIGHEST_PROTOCOL) if o else None for o in out]
    return blobs, first


def _arrive_pickled(sim: Any, blob: bytes | None) -> None:
    """The arrivals of the packets in ``blob`` (:func:`_pickled`) on ``sim``."""
    if blob is not None:
        for item in pickle.loads(blob):
            sim.arrive(*item)


def _portable(items: list[Any]) -> list[Any]:
    """Packets as pickle takes them (a payload that is a memoryview becomes bytes)."""
    for item in items:
        pkt = item[4]
        payload = getattr(pkt, "payload", None)
        if isinstance(payload, memoryview):
            pkt.payload = bytes(payload)
    return items
