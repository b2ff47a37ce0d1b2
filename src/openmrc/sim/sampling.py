"""The sampling clock of a simulator experiment and the series it records.

Every ``interval_ps`` the :class:`Sampler` reads each moving flow's received
bytes (its goodput series and the cumulative bytes its steady-state window is
cut from), every plane's NIC egress bytes and, when asked
(:meth:`Sampler.track_ev`), the data bytes sent per (host, EV).  A tick that saw
nothing move puts it to sleep; the next packet, timer or flow start wakes it
(:meth:`Sampler.wake`), which records the ticks slept through as zeros without
running them, so idle time costs no events.

The experiment owns it and tells it what it cannot see itself: how many bytes a
flow's receiver took (a transport hook), whether any flow is still open, and
how to set the hosts' callbacks when it falls asleep or wakes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..wire.packets import DataPacket
from .engine import SAMPLER, Simulator
from .flows import Flow


class Sampler:
    """One experiment's sampling ticks and series (see the module's docstring)."""

    def __init__(
        self,
        sim: Simulator,
        interval_ps: int,
        host_ports: list[list[Any]],
        planes: int,
        received: Callable[[Flow], int | None],
        busy: Callable[[], int],
        hooks: Callable[[bool], None],
    ) -> None:
        self.sim = sim
        self.interval_ps = interval_ps
        self.host_ports = host_ports
        #: the payload bytes a flow's receiver took (None before it started).
        self.received = received
        #: how many flows are still open (none: the sampler stops re-arming).
        self.busy = busy
        #: sets the hosts' callbacks: every host (asleep: any input wakes it) or not.
        self.hooks = hooks
        #: running (between :meth:`start` and :meth:`stop`), and a tick scheduled.
        self.sampling = False
        self.armed = False
        self.t0 = 0
        self.ticks = 0
        self.skipped = 0
        #: the flows it reads: started, and not yet holding all their bytes.
        #: Every other flow's series is a run of zeros (its received bytes cannot
        #: change), appended only when it is next read or the results are collected
        #: (:meth:`pad`): a tick costs O(flows moving), not O(flows), which in a
        #: collective of millions of transfers is the difference that matters.
        self.live: dict[Flow, None] = {}
        self.plane_last = [0] * planes
        self.plane_series: list[list[float]] = [[] for _ in range(planes)]
        self.ev_bytes: dict[tuple[int, int], int] | None = None
        self.ev_last: dict[tuple[int, int], int] = {}
        self.ev_series: dict[tuple[int, int], list[float]] = {}

    def start(self) -> None:
        """Start ticking (the run begins now)."""
        self.t0 = self.sim.now
        self.sampling = True
        self.armed = True
        self.sim.push_as(SAMPLER, self.t0 + self.interval_ps, self.sample)

    def finish(self) -> None:
        """The run stopped at its last completion, inside a sampling interval: record
        that last (partial) interval, or the bytes that arrived since the last tick
        would be missing from the series."""
        if self.armed:
            self.sample()

    def stop(self) -> None:
        """The run ended: nothing wakes the sampler any more."""
        self.sampling = False

    def sample(self) -> None:
        """One sampling tick: every flow's, plane's (and EV's) Gb/s over the last interval.

        Every flow gets an entry at every tick (the ones not read get theirs from
        :meth:`pad`).  A tick that saw nothing move puts the sampler to sleep.
        """
        self.armed = False
        interval = self.interval_ps
        scale = 8 / interval * 1000  # bytes per interval -> Gb/s
        moved = self.read_flows(self.live, scale)
        for plane in range(len(self.plane_series)):
            tx = sum(ports[plane].tx_bytes for ports in self.host_ports)
            delta = tx - self.plane_last[plane]
            moved |= delta
            self.plane_series[plane].append(round(delta * scale, 3))
            self.plane_last[plane] = tx
        self.read_evs(scale)
        self.ticks += 1
        if self.busy() and moved:
            self.armed = True
            self.sim.after(interval, self.sample)
        else:  # asleep: the next arrival or input anywhere wakes it
            self.hooks(True)

    def read_flows(self, flows: dict[Flow, None], scale: float) -> int:
        """This tick's entry of each of ``flows`` (Gb/s at ``scale`` per byte); a flow
        that holds all its bytes leaves ``flows``.  Non-zero if any bytes moved."""
        moved = 0
        ticks = self.ticks
        received = self.received
        full: list[Flow] = []
        for flow in flows:
            self.pad(flow, ticks)
            got = received(flow) or 0
            delta = got - flow.last_bytes
            moved |= delta
            flow.series.append(round(delta * scale, 3))
            flow.cum.append(got)
            flow.last_bytes = got
            if got == flow.spec.size:
                full.append(flow)  # all its bytes are in: nothing more can move
        for flow in full:
            del flows[flow]
        return moved

    def read_evs(self, scale: float) -> None:
        """This tick's entry of each EV's series, when EV bytes are counted."""
        if self.ev_bytes is None:
            return
        ticks = self.ticks
        for key, total in self.ev_bytes.items():
            series = self.ev_series.get(key)
            if series is None:
                series = self.ev_series[key] = [0.0] * ticks
            series.append(round((total - self.ev_last.get(key, 0)) * scale, 3))
            self.ev_last[key] = total

    @staticmethod
    def pad(flow: Flow, ticks: int) -> None:
        """Bring ``flow``'s series up to ``ticks`` entries: the ticks it was not read
        at saw nothing move (it had not started, was full, or the sampler slept)."""
        n = ticks - len(flow.series)
        if n > 0:
            flow.series.extend([0.0] * n)
            flow.cum.extend([flow.last_bytes] * n)

    def wake(self, now: int) -> None:
        """Something may move again: record the idle ticks as zeros and re-arm the sampler."""
        if not self.busy():
            return
        interval = self.interval_ps
        due = (now - self.t0) // interval  # ticks at or before now
        skip = due - self.ticks
        if skip > 0:
            zeros = [0.0] * skip  # (flows' series: padded when next read, pad)
            for series in self.plane_series:
                series.extend(zeros)
            for series in self.ev_series.values():
                series.extend(zeros)
            self.ticks += skip
            self.skipped += skip
        self.armed = True
        self.hooks(False)
        # keyed as the sampler's own event (not as the host input that woke it), as a
        # partitioned run, which decides wake-ups between windows, keys it
        self.sim.push_as(SAMPLER, self.t0 + (due + 1) * interval, self.sample)

    def track_ev(self, hosts: list[Any]) -> None:
        """Record data bytes sent per (host, EV) per tick, from taps on ``hosts`` (MRC)."""
        if self.ev_bytes is not None:
            return
        counts: dict[tuple[int, int], int] = {}
        self.ev_bytes = counts

        def tap(host: int, _peer: int, pkt: Any, sent: bool, _now: int) -> None:
            if sent and isinstance(pkt, DataPacket):
                key = (host, pkt.ev)
                counts[key] = counts.get(key, 0) + pkt.length

        for host in hosts:
            host.taps.append(tap)

    def steady(self, flow: Flow, end: int, skip: float) -> tuple[float, tuple[float, float]] | None:
        """Goodput over the ticks from ``skip`` of the flow's life to ``end``, and that
        window in us (None when it spans less than one tick)."""
        start = flow.started_at
        if start is None or end <= start:
            return None
        interval = self.interval_ps
        t0 = self.t0
        lo = start + int(skip * (end - start))
        i0 = max(1, -(-(lo - t0) // interval))  # first tick at or after lo
        i1 = min(len(flow.cum), (end - t0) // interval)  # last tick at or before end
        if i1 - i0 < 1:
            return None
        nbytes = flow.cum[i1 - 1] - flow.cum[i0 - 1]
        gbps = nbytes * 8 / ((i1 - i0) * interval) * 1000
        return round(gbps, 3), ((t0 + i0 * interval) / 1e6, (t0 + i1 * interval) / 1e6)

    def stats(self) -> dict[str, int]:
        """Sampling cost: ticks run, and ticks skipped while nothing moved."""
        return {"ticks": self.ticks - self.skipped, "skipped": self.skipped}
