"""Collectives as dependency graphs of transfers between ranks, as NCCL runs them.

A :class:`Collective` is a list of :class:`Transfer` s between *ranks*; each
transfer names the transfers whose data must have *arrived at their receiver*
before it may start.  Nothing here knows about the fabric or the transport:
:meth:`Collective.flows` places ranks on hosts and turns the graph into
:class:`~openmrc.workloads.FlowSpec` s whose ``deps`` the simulator's
experiment honours (a flow starts ``gap_ps`` after its last dependency
arrived), over whichever transport it runs.

Sizes follow nccl-tests (``size`` is what ``-b``/``-e`` give):

=============  =================================  =====================  ===========
kind           ``size`` is                        per-step transfer      busbw factor
=============  =================================  =====================  ===========
allreduce      the buffer on every rank           size / n               2(n-1)/n
allgather      the output buffer (n inputs)       size / n               (n-1)/n
reducescatter  the input buffer (n outputs)       size / n               (n-1)/n
alltoall       the send buffer of a rank          size / n to each peer  (n-1)/n
sendrecv       what each rank sends to rank + 1   size                   1
=============  =================================  =====================  ===========

``algbw = size / time`` and ``busbw = algbw x factor`` (nccl-tests'
PERFORMANCE.md).  The ring collectives run on ``channels`` rings, each moving
``1/channels`` of the data, and cut each step into ``chunks`` pipelined pieces,
as NCCL's ring kernels do; a piece may be in flight before the previous piece
of the same step arrived (NCCL keeps several slots in flight per connection).
Ring all-reduce is reduce-scatter then all-gather: ``2(n-1)`` steps.  The
all-to-all is NCCL's grouped sends: every peer at once in NCCL's peer order, each
peer's bytes over ``channels`` p2p channels in 128 KiB chunks, 8 chunks in
flight per connection (:func:`alltoall`; the defaults' sources are in
docs/collectives.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import FlowSpec

#: nccl-tests' bus-bandwidth factor per kind, as a function of the rank count.
BUSBW_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}

KINDS = tuple(BUSBW_FACTORS)


@dataclass(frozen=True, slots=True)
class Transfer:
    """``size`` bytes from rank ``src`` to rank ``dst`` once ``deps`` (indices) have arrived."""

    src: int
    dst: int
    size: int
    deps: tuple[int, ...] = ()
    step: int = 0
    channel: int = 0
    chunk: int = 0
    #: wait this long after the last dependency arrived (compute time), or from the start.
    gap_ps: int = 0


@dataclass(frozen=True)
class Collective:
    """One collective (or a sequence of them): transfers between ``ranks`` ranks."""

    kind: str
    ranks: int
    size: int
    transfers: tuple[Transfer, ...]
    steps: int
    #: index ranges (start, end) of the transfers of each iteration (a training loop has several).
    iterations: tuple[tuple[int, int], ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def busbw_factor(self) -> float:
        """nccl-tests' factor turning algbw into busbw for this kind and rank count."""
        return BUSBW_FACTORS[self.kind](self.ranks) if self.kind in BUSBW_FACTORS else 1.0

    def flows(
        self,
        placement: Sequence[int] | None = None,
        message: int = 1 << 20,
        start_ps: int = 0,
        name: str = "",
        qps: int | None = None,
        settings: dict[str, Any] | None = None,
    ) -> list[FlowSpec]:
        """The transfers as flows, rank ``r`` on host ``placement[r]`` (default: host ``r``).

        ``deps`` of the flows index this list, as ``Experiment.add_flows`` expects.
        ``qps`` and ``settings`` are per-connection transport settings for every flow.
        Transfers of the same ring channel between the same two hosts share a
        connection key (``conn``): the simulator runs them on one long-lived
        connection, as NCCL keeps its QPs for the whole job (MRC: the same QPs,
        so EV and congestion state persist; a baseline: the same ECMP paths).
        """
        hosts = self.check_placement(placement)
        prefix = name or self.kind
        merged = {**self.settings, **(settings or {})}
        return [
            self.flow(i, hosts, message, start_ps, prefix, qps, merged)
            for i in range(len(self.transfers))
        ]

    def check_placement(self, placement: Sequence[int] | None) -> list[int]:
        """The host of each rank (default: host ``r``); ValueError if ``placement`` is bad."""
        hosts = list(range(self.ranks)) if placement is None else list(placement)
        if len(hosts) != self.ranks:
            raise ValueError(f"placement: needs one host per rank ({self.ranks}), got {len(hosts)}")
        if len(set(hosts)) != len(hosts):
            raise ValueError("placement: two ranks on one host (one rank per NIC)")
        return hosts

    def flow(
        self,
        i: int,
        hosts: Sequence[int],
        message: int,
        start_ps: int,
        prefix: str,
        qps: int | None,
        merged: dict[str, Any],
    ) -> FlowSpec:
        """Transfer ``i`` as a flow (one item of :meth:`flows`; ``prefix`` names it,
        ``merged`` is the collective's settings updated with the run's)."""
        t = self.transfers[i]
        return FlowSpec(
            hosts[t.src],
            hosts[t.dst],
            t.size,
            start_ps=start_ps + (t.gap_ps if not t.deps else 0),
            message=message,
            name=f"{prefix}#{i}:r{t.src}->r{t.dst}:s{t.step}c{t.channel}k{t.chunk}",
            deps=t.deps,
            gap_ps=t.gap_ps if t.deps else 0,
            conn=f"{prefix}/ch{t.channel}",
            qps=qps,
            settings=dict(merged) if merged else None,
        )

    def summary(self, start_ps: int, arrived_ps: Sequence[int | None]) -> dict[str, Any]:
        """Completion time, algbw and busbw from each transfer's arrival time (None: never).

        ``time_us`` runs from ``start_ps`` to the last arrival (per iteration in
        ``iteration_us``: each ends when its slowest rank received its last byte).
        """
        done = all(a is not None for a in arrived_ps)
        if not done or not arrived_ps:
            return self.summary_of(start_ps, None)
        arrived = [a for a in arrived_ps if a is not None]  # all of them: done
        return self.summary_of(
            start_ps, [max(arrived[a:b]) for a, b in self.iterations] or [max(arrived)]
        )

    def summary_of(self, start_ps: int, ends: Sequence[int] | None) -> dict[str, Any]:
        """:meth:`summary` from the last arrival of each iteration (None: not complete)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "ranks": self.ranks,
            "size": self.size,
            "steps": self.steps,
            "transfers": len(self.transfers),
            "busbw_factor": round(self.busbw_factor, 6),
        }
        out["complete"] = ends is not None
        if ends is None:
            out.update(time_us=None, algbw_gbps=0.0, busbw_gbps=0.0, iteration_us=[])
            return out
        end = max(ends)
        elapsed = end - start_ps
        iters = []
        prev = start_ps
        for e in ends:
            iters.append((e - prev) / 1e6)
            prev = e
        per_iter = elapsed / max(1, len(ends))
        algbw = self.size * 8 / per_iter * 1000 if per_iter else 0.0
        out.update(
            time_us=elapsed / 1e6,
            iteration_us=iters,
            algbw_gbps=round(algbw, 3),
            busbw_gbps=round(algbw * self.busbw_factor, 3),
        )
        return out


def _split(total: int, parts: int) -> list[int]:
    """``total`` bytes cut into ``parts`` near-equal positive pieces."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def _check(n: int, size: int, pieces: int, what: str) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"ranks: a {what} needs at least 2 ranks, got {n!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"size: must be a positive number of bytes, got {size!r}")
    if size < pieces:
        raise ValueError(
            f"size: {size} B is too small to cut into {pieces} pieces (ranks x channels x chunks)"
        )


def _ring(
    kind: str, n: int, size: int, steps: int, channels: int, chunks: int, gaps: Sequence[int]
) -> list[Transfer]:
    """``steps`` ring steps, rank r -> r+1, on ``channels`` rings, ``chunks`` pieces per step."""
    for name, value in (("channels", channels), ("chunks", chunks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")
    _check(n, size, n * channels * chunks, kind)
    out: list[Transfer] = []
    index: dict[tuple[int, int, int, int], int] = {}
    for ch, ch_bytes in enumerate(_split(size, channels)):
        for k, piece in enumerate(_split(ch_bytes, chunks)):
            step_bytes = _split(piece, n)
            for s in range(steps):
                for r in range(n):
                    # The block rank r forwards at step s is the one it received at s-1.
                    block = (r - s) % n
                    deps = () if s == 0 else (index[(ch, k, s - 1, (r - 1) % n)],)
                    index[(ch, k, s, r)] = len(out)
                    out.append(
                        Transfer(
                            r,
                            (r + 1) % n,
                            step_bytes[block],
                            deps,
                            s,
                            ch,
                            k,
                            gaps[r] if s == 0 else 0,
                        )
                    )
    return out


def _gaps(
    n: int, compute_ps: int = 0, straggler: int | None = None, straggler_ps: int = 0
) -> list[int]:
    gaps = [compute_ps] * n
    if straggler is not None:
        if not 0 <= straggler < n:
            raise ValueError(f"straggler: must be a rank in 0..{n - 1}, got {straggler}")
        gaps[straggler] += straggler_ps
    return gaps


def allreduce(n: int, size: int, channels: int = 1, chunks: int = 1) -> Collective:
    """Ring all-reduce: reduce-scatter then all-gather, ``2(n-1)`` steps."""
    steps = 2 * (n - 1)
    t = _ring("allreduce", n, size, steps, channels, chunks, [0] * n)
    return Collective("allreduce", n, size, tuple(t), steps, ((0, len(t)),))


def allgather(n: int, size: int, channels: int = 1, chunks: int = 1) -> Collective:
    """Ring all-gather: ``n-1`` steps, each rank forwards one block of ``size / n``."""
    t = _ring("allgather", n, size, n - 1, channels, chunks, [0] * n)
    return Collective("allgather", n, size, tuple(t), n - 1, ((0, len(t)),))


def reducescatter(n: int, size: int, channels: int = 1, chunks: int = 1) -> Collective:
    """Ring reduce-scatter: ``n-1`` steps, each rank sends one partial block of ``size / n``."""
    t = _ring("reducescatter", n, size, n - 1, channels, chunks, [0] * n)
    return Collective("reducescatter", n, size, tuple(t), n - 1, ((0, len(t)),))


#: NCCL's chunk for a send or receive over the network (``NCCL_P2P_NET_CHUNKSIZE``,
#: 128 KiB; docs/collectives.md gives the source of each default).
P2P_NET_CHUNK = 128 << 10
#: Chunks a p2p connection keeps in flight (``NCCL_STEPS``: the slots of its buffer).
P2P_STEPS = 8


def p2p_deltas(n: int) -> list[int]:
    """The order in which a rank meets its peers in a grouped send/receive: round ``i``
    sends to ``rank + deltas[i]`` (and receives from ``rank - deltas[i]``).

    NCCL's schedule with one rank per node: the deltas ``(x*x + x) / 2`` mod the power
    of two at or above ``n``, those ``>= n`` left out, starting at 0 (the rank itself,
    left out here).  For 16 ranks: 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"ranks: must be a positive integer, got {n!r}")
    span = 1
    while span < n:
        span *= 2
    out: list[int] = []
    delta = 0
    for x in range(1, span):
        delta = (delta + x) & (span - 1)
        if delta < n:
            out.append(delta)
    return out


def alltoall(
    n: int,
    size: int,
    channels: int = 1,
    chunks: int = 1,
    chunk_bytes: int = P2P_NET_CHUNK,
    slots: int = P2P_STEPS,
) -> Collective:
    """All-to-all as NCCL runs it: every rank sends ``size / n`` to every other rank.

    A rank posts its sends in NCCL's peer order (:func:`p2p_deltas`), all in one
    batch; each peer's bytes are split over ``channels`` p2p channels (one
    connection each), and each channel's part is cut into ``chunk_bytes`` chunks
    (the last one shorter).  A connection holds ``slots`` chunks in flight: chunk
    ``k`` waits until chunk ``k - slots`` arrived (its slot in the receiver's
    buffer is free again).  ``chunks`` belongs to the ring collectives and must be 1.
    """
    if chunks != 1:
        raise ValueError(
            f"chunks: the all-to-all cuts each peer's data into NCCL's p2p chunks "
            f"({P2P_NET_CHUNK >> 10} KiB), not into a number of pieces; got {chunks!r}"
        )
    for name, value in (("channels", channels), ("chunk_bytes", chunk_bytes), ("slots", slots)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")
    _check(n, size, n * channels, "alltoall")
    t: list[Transfer] = []
    deltas = p2p_deltas(n)
    for src in range(n):
        for rnd, delta in enumerate(deltas):
            dst = (src + delta) % n
            for ch, part in enumerate(_split(size // n, channels)):
                first = len(t)
                for k, off in enumerate(range(0, part, chunk_bytes)):
                    deps = (first + k - slots,) if k >= slots else ()
                    piece = min(chunk_bytes, part - off)
                    t.append(Transfer(src, dst, piece, deps, rnd, ch, k))
    return Collective("alltoall", n, size, tuple(t), 1, ((0, len(t)),))


def sendrecv(n: int, size: int, channels: int = 1, chunks: int = 1) -> Collective:
    """nccl-tests' sendrecv: rank r sends ``size`` to rank r+1 (and receives from r-1)."""
    _check(n, size, channels * chunks, "sendrecv")
    t = []
    for r in range(n):
        for ch, b in enumerate(_split(size, channels)):
            for k, piece in enumerate(_split(b, chunks)):
                t.append(Transfer(r, (r + 1) % n, piece, (), 0, ch, k))
    return Collective("sendrecv", n, size, tuple(t), 1, ((0, len(t)),))


BUILDERS = {
    "allreduce": allreduce,
    "allgather": allgather,
    "reducescatter": reducescatter,
    "alltoall": alltoall,
    "sendrecv": sendrecv,
}


def build(kind: str, n: int, size: int, channels: int = 1, chunks: int = 1) -> Collective:
    """The collective ``kind`` (one of :data:`KINDS`)."""
    if kind not in BUILDERS:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    return BUILDERS[kind](n, size, channels, chunks)


def training(
    n: int,
    collectives: Sequence[tuple[str, int]],
    iterations: int = 1,
    compute_ps: int = 0,
    straggler: int | None = None,
    straggler_ps: int = 0,
    channels: int = 1,
    chunks: int = 1,
) -> Collective:
    """A training loop: per iteration, compute for ``compute_ps``, then the collectives in order.

    ``collectives`` is ``[(kind, size), ...]``.  A rank starts computing when it
    has received everything of the previous iteration, and starts a collective
    once it has received everything of the previous one; ``straggler`` (a rank)
    computes ``straggler_ps`` longer.  Each iteration's time is that of its
    slowest rank (see :meth:`Collective.summary`).  ``size`` of the result is
    the first collective's, ``kind`` is ``"training"``.
    """
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations: must be a positive integer, got {iterations!r}")
    if not collectives:
        raise ValueError("collectives: a training step needs at least one collective")
    gaps = _gaps(n, compute_ps, straggler, straggler_ps)
    out: list[Transfer] = []
    spans = []
    steps = 0
    prev_into: dict[int, list[int]] | None = None
    for _ in range(iterations):
        it_start = len(out)
        for ci, (kind, size) in enumerate(collectives):
            part = build(kind, n, size, channels, 1 if kind == "alltoall" else chunks)
            base = len(out)
            into: dict[int, list[int]] = {r: [] for r in range(n)}
            for t in part.transfers:
                deps = tuple(base + d for d in t.deps)
                gap = 0
                if not t.deps:
                    # The rank's first sends wait for what it received before (and compute).
                    gap = gaps[t.src] if ci == 0 else 0
                    if prev_into is not None:
                        deps = tuple(prev_into[t.src])
                out.append(
                    Transfer(t.src, t.dst, t.size, deps, steps + t.step, t.channel, t.chunk, gap)
                )
                into[t.dst].append(len(out) - 1)
            steps += part.steps
            prev_into = into
        spans.append((it_start, len(out)))
    first_kind, first_size = collectives[0]
    kind = first_kind if len(collectives) == 1 else "training"
    return Collective(kind, n, first_size, tuple(out), steps, tuple(spans))


def nccl_table(rows: Sequence[dict[str, Any]]) -> str:
    """An nccl-tests-style table: size, time, algbw, busbw (GB/s, as nccl-tests prints)."""
    lines = [f"{'size(B)':>14} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"]
    for r in rows:
        t = r.get("time_us")
        lines.append(
            f"{r['size']:>14} {f'{t:.2f}' if t is not None else 'n/a':>12} "
            f"{r['algbw_gbps'] / 8:>12.2f} {r['busbw_gbps'] / 8:>12.2f}"
        )
    return "\n".join(lines)


__all__ = [
    "BUSBW_FACTORS",
    "KINDS",
    "P2P_NET_CHUNK",
    "P2P_STEPS",
    "Collective",
    "Transfer",
    "allgather",
    "allreduce",
    "alltoall",
    "build",
    "nccl_table",
    "p2p_deltas",
    "reducescatter",
    "sendrecv",
    "training",
]
