"""Collectives folded into per-step records as their transfers finish.

A ring all-reduce of 16 MiB over 1024 ranks is 2,095,104 transfers.  Run as
flows, each transfer keeps a flow object, its ``FlowSpec``, its memory regions,
its goodput series and a result row for the whole run: about 4.7 KB each, 9.8 GB
(issue 20).  A :class:`FoldedCollective` keeps instead, per transfer, only what
its dependencies need (a few bytes in arrays), makes a transfer's flow when the
transfer may start, and folds the flow into its step's :class:`StepRecord` (and
drops it) once its data arrived and its sender's completions are in.  Live
flows are then the collective's wavefront, not its length.

What is kept per step is in :meth:`StepRecord.as_dict` (and docs/results.md);
the collective's summary (time, algbw, busbw, per-iteration times) is the same
as unfolded, from the same arrival times.  The transfers are run exactly as
unfolded (same flows, same start times, same order of starts), so everything
they measure is the same; what is not kept is each transfer's own row in
``Result.flows`` and its goodput series.  :data:`FOLD_TRANSFERS` is where
:meth:`Experiment.add_collective` starts folding by default.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from ..workloads import FlowSpec
from ..workloads.collectives import Collective

#: Collectives of more transfers than this are folded unless told otherwise
#: (``Experiment.add_collective(fold=...)``): below it every transfer is a row of
#: ``Result.flows`` (about 4.7 KB of memory each while it runs).
FOLD_TRANSFERS = 100_000

#: Transfer states: waiting for dependencies, scheduled or running, folded, failed.
_WAITING, _STARTED, _FOLDED, _FAILED = 0, 1, 2, 3

#: Counters a step record sums over its transfers (FlowResult names).
STEP_COUNTERS = ("retransmits", "trims", "nacks", "timeouts", "ecn_echoes")


class StepRecord:
    """What one step of a folded collective did: its transfers, summed and bounded."""

    __slots__ = (
        "arrival",
        "bytes",
        "bytes_received",
        "counters",
        "failures",
        "fct_max",
        "fct_sum",
        "finish",
        "ok",
        "start",
        "step",
        "transfers",
    )

    def __init__(self, step: int, transfers: int, nbytes: int) -> None:
        self.step = step
        #: transfers in the step, and their bytes.
        self.transfers = transfers
        self.bytes = nbytes
        #: transfers folded with status ok, and the failed ones by status.
        self.ok = 0
        self.failures: dict[str, int] = {}
        self.bytes_received = 0
        #: first start, last arrival at a receiver, last sender completion (ps).
        self.start: int | None = None
        self.arrival: int | None = None
        self.finish: int | None = None
        self.fct_max = 0
        self.fct_sum = 0
        self.counters = dict.fromkeys(STEP_COUNTERS, 0)

    def add(
        self,
        status: str,
        started: int | None,
        arrived: int | None,
        done: int | None,
        received: int,
        counters: dict[str, int],
    ) -> None:
        """Fold one transfer in."""
        if status == "ok":
            self.ok += 1
        else:
            self.failures[status] = self.failures.get(status, 0) + 1
        self.bytes_received += received
        if started is not None and (self.start is None or started < self.start):
            self.start = started
        if arrived is not None and (self.arrival is None or arrived > self.arrival):
            self.arrival = arrived
        if done is not None and (self.finish is None or done > self.finish):
            self.finish = done
        if status == "ok" and started is not None and done is not None:
            fct = done - started
            self.fct_sum += fct
            if fct > self.fct_max:
                self.fct_max = fct
        for k in STEP_COUNTERS:
            self.counters[k] += counters.get(k, 0)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (times in us; fct over the transfers that finished ok)."""

        def us(t: int | None) -> float | None:
            return None if t is None else t / 1e6

        failed = sum(self.failures.values())
        return {
            "step": self.step,
            "transfers": self.transfers,
            "ok": self.ok,
            "failed": failed,
            "failures": dict(sorted(self.failures.items())),
            "unfinished": self.transfers - self.ok - failed,
            "bytes": self.bytes,
            "bytes_received": self.bytes_received,
            "start_us": us(self.start),
            "last_arrival_us": us(self.arrival),
            "last_finish_us": us(self.finish),
            "fct_us_mean": round(self.fct_sum / self.ok / 1e6, 6) if self.ok else None,
            "fct_us_max": self.fct_max / 1e6 if self.ok else None,
            **self.counters,
        }


class FoldedCollective:
    """One collective run folded: its dependency state in arrays, its step records.

    The experiment asks :meth:`initial` for the transfers that start on their own,
    :meth:`spec` for a transfer's flow when it may start, tells :meth:`arrived`
    when a transfer's data arrived (and gets the transfers that may then start),
    :meth:`failed` when one failed (and gets how many will never start), and
    :meth:`fold` when one is over.
    """

    def __init__(
        self,
        collective: Collective,
        hosts: Sequence[int],
        message: int,
        start_ps: int,
        prefix: str,
        qps: int | None,
        merged: dict[str, Any],
    ) -> None:
        self.collective = collective
        self.hosts = list(hosts)
        self.message = message
        self.start_ps = start_ps
        self.prefix = prefix
        self.qps = qps
        self.merged = merged
        transfers = collective.transfers
        n = len(transfers)
        self.size = n
        self.deps_left = array("i", bytes(4 * n))
        self.ready_at = array("q", bytes(8 * n))
        self.state = bytearray(n)
        # the transfers waiting for each one, as compressed rows: dependents of i
        # are targets[first[i]:first[i + 1]], in index order (as add_flows has them)
        first = array("q", bytes(8 * (n + 1)))
        step_count: dict[int, list[int]] = {}
        for i, t in enumerate(transfers):
            for d in t.deps:
                if not 0 <= d < i:
                    raise ValueError(
                        f"collective transfer {i}: dependency {d} is not an earlier transfer"
                    )
                first[d + 1] += 1
            self.deps_left[i] = len(t.deps)
            c = step_count.get(t.step)
            if c is None:
                step_count[t.step] = [1, t.size]
            else:
                c[0] += 1
                c[1] += t.size
        for i in range(n):
            first[i + 1] += first[i]
        fill = array("q", first[:n])
        targets = array("i", bytes(4 * first[n]))
        for i, t in enumerate(transfers):
            for d in t.deps:
                targets[fill[d]] = i
                fill[d] += 1
        self.first = first
        self.targets = targets
        self.records = {s: StepRecord(s, c, b) for s, (c, b) in sorted(step_count.items())}
        spans = collective.iterations or ((0, n),)
        self._iter_starts = [a for a, _b in spans]
        self._iter_end: list[int | None] = [None] * len(spans)
        #: transfers whose data arrived, and those folded or failed.
        self.arrived_count = 0
        self.over = 0

    def initial(self) -> list[int]:
        """The transfers without dependencies, in index order (they start at their own time)."""
        return [i for i, t in enumerate(self.collective.transfers) if not t.deps]

    def spec(self, i: int) -> FlowSpec:
        """Transfer ``i`` as a flow, as ``Collective.flows`` would give it."""
        self.state[i] = _STARTED
        return self.collective.flow(
            i, self.hosts, self.message, self.start_ps, self.prefix, self.qps, self.merged
        )

    def conn_specs(self) -> list[FlowSpec]:
        """The first transfer on each connection (a pair of ranks and a channel), in
        transfer order: what opening the connections before the run needs (the same
        order as the unfolded collective's flows open them)."""
        seen: set[tuple[int, int, int]] = set()
        out = []
        for i, t in enumerate(self.collective.transfers):
            k = (t.src, t.dst, t.channel)
            if k not in seen:
                seen.add(k)
                out.append(
                    self.collective.flow(
                        i,
                        self.hosts,
                        self.message,
                        self.start_ps,
                        self.prefix,
                        self.qps,
                        self.merged,
                    )
                )
        return out

    def arrived(self, i: int, now: int) -> list[tuple[int, int]]:
        """Transfer ``i``'s data all arrived at ``now``: the transfers now free to start,
        with their start times, in index order (the dependency rule of ``add_flows``)."""
        self.arrived_count += 1
        k = bisect_right(self._iter_starts, i) - 1
        end = self._iter_end[k]
        if end is None or now > end:
            self._iter_end[k] = now
        out = []
        transfers = self.collective.transfers
        state, left, ready = self.state, self.deps_left, self.ready_at
        for p in range(self.first[i], self.first[i + 1]):
            j = self.targets[p]
            if state[j] != _WAITING or left[j] <= 0:
                continue
            if now > ready[j]:
                ready[j] = now
            left[j] -= 1
            if left[j] == 0:
                t = transfers[j]
                out.append((j, max(ready[j] + t.gap_ps, self.start_ps)))
        return out

    def failed(self, i: int) -> int:
        """Transfer ``i`` failed: every transfer waiting on it, directly or not, never
        starts (status ``dependency_failed``).  Returns how many that is."""
        transfers = self.collective.transfers
        state = self.state
        stack = list(self.targets[self.first[i] : self.first[i + 1]])
        count = 0
        while stack:
            j = stack.pop()
            if state[j] != _WAITING:
                continue
            state[j] = _FAILED
            self.deps_left[j] = -1
            count += 1
            self.over += 1
            t = transfers[j]
            self.records[t.step].add("dependency_failed", None, None, None, 0, {})
            stack.extend(self.targets[self.first[j] : self.first[j + 1]])
        return count

    def fold(
        self,
        i: int,
        status: str,
        started: int | None,
        arrived: int | None,
        done: int | None,
        received: int,
        counters: dict[str, int],
    ) -> None:
        """Transfer ``i`` is over (its data arrived and its sender is done, or it failed):
        add it to its step's record."""
        if self.state[i] == _FOLDED:
            return
        self.state[i] = _FOLDED
        self.over += 1
        t = self.collective.transfers[i]
        self.records[t.step].add(status, started, arrived, done, received, counters)

    @property
    def open(self) -> bool:
        """Whether some transfer is not over yet."""
        return self.over < self.size

    def summary(self) -> dict[str, Any]:
        """The collective's summary (as unfolded) with its per-step records."""
        complete = self.arrived_count == self.size and self.size > 0
        ends = [e for e in self._iter_end if e is not None] if complete else None
        out = self.collective.summary_of(self.start_ps, ends)
        out["per_transfer"] = False
        out["step_records"] = [r.as_dict() for r in self.records.values()]
        return out
