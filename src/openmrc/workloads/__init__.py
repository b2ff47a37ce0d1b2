"""Traffic patterns for the simulator: who sends how much to whom, and when.

Each generator returns a list of :class:`FlowSpec`.  A flow is one MRC
connection (one QP pair) carrying ``size`` bytes as WRITEs of ``message``
bytes; its completion time is when the last WRITE's completion reaches the
sender.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from openmrc.transport.attrs import EVProfile


@dataclass(frozen=True)
class FlowSpec:
    """One flow: ``size`` bytes from host ``src`` to host ``dst`` starting at ``start_ps``."""

    src: int
    dst: int
    size: int
    start_ps: int = 0
    message: int = 1 << 20
    name: str = ""
    #: this flow's own EV profile (both QPs), instead of the experiment's.
    ev_profile: EVProfile | None = None
    #: Indices (into the list given to ``Experiment.add_flows``) of flows whose data
    #: must have arrived at their receiver before this one starts; ``start_ps`` is
    #: then a lower bound.
    deps: tuple[int, ...] = ()
    #: Indices of flows that must have completed at their *sender* (the last ACK).
    send_deps: tuple[int, ...] = ()
    #: How many of ``deps`` + ``send_deps`` must be met (0: all); 1 is htsim's
    #: oneshot trigger, k a barrier of count k or the k-th start of a multishot one.
    deps_needed: int = 0
    #: Wait this long after the dependencies are met (compute time).
    gap_ps: int = 0
    #: Per-dependency waits, aligned with ``deps`` (empty: none): the flow is ready
    #: ``dep_gaps[i]`` after ``deps[i]`` arrived, and starts when it is ready for
    #: every dependency (then ``gap_ps`` later).  A training job's compute spans
    #: between transfers fold into these (openmrc.workloads.jobs.lower).
    dep_gaps: tuple[int, ...] = ()
    #: Connection key: flows with the same (src, dst, conn) model one long-lived
    #: connection (a baseline keeps its UDP source ports, hence its ECMP paths).
    conn: str = ""
    #: QPs for this connection (None: the transport's default); messages are
    #: striped over them round-robin, as NCCL stripes over its QPs per connection.
    qps: int | None = None
    #: Transport overrides for this flow (TransportConfig field names; see
    #: ``openmrc.sim.experiment.FLOW_SETTINGS``).
    settings: dict[str, Any] | None = None

    def validate(self, hosts: int) -> None:
        """Raise ValueError naming the bad field."""
        for field_name in ("src", "dst"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or not 0 <= value < hosts:
                raise ValueError(
                    f"flow.{field_name}: must be a host index in 0..{hosts - 1}, got {value!r}"
                )
        if self.src == self.dst:
            raise ValueError(f"flow: src and dst are both host {self.src}")
        if not isinstance(self.size, int) or self.size <= 0:
            raise ValueError(f"flow.size: must be a positive number of bytes, got {self.size!r}")
        if not isinstance(self.message, int) or self.message <= 0:
            raise ValueError(
                f"flow.message: must be a positive number of bytes, got {self.message!r}"
            )
        if not isinstance(self.start_ps, int) or self.start_ps < 0:
            raise ValueError(f"flow.start_ps: must be a non-negative int, got {self.start_ps!r}")
        if not isinstance(self.gap_ps, int) or self.gap_ps < 0:
            raise ValueError(f"flow.gap_ps: must be a non-negative int, got {self.gap_ps!r}")
        if self.qps is not None and (
            not isinstance(self.qps, int) or isinstance(self.qps, bool) or not 1 <= self.qps <= 256
        ):
            raise ValueError(f"flow.qps: must be an integer in 1..256, got {self.qps!r}")
        if self.dep_gaps and (
            len(self.dep_gaps) != len(self.deps)
            or any(not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in self.dep_gaps)
        ):
            raise ValueError(
                "flow.dep_gaps: must hold one non-negative int per entry of deps, "
                f"got {self.dep_gaps!r} for {len(self.deps)} deps"
            )
        ndeps = len(self.deps) + len(self.send_deps)
        if not isinstance(self.deps_needed, int) or not 0 <= self.deps_needed <= ndeps:
            raise ValueError(
                f"flow.deps_needed: must be in 0..{ndeps} (the number of dependencies), "
                f"got {self.deps_needed!r}"
            )
        for field_name in ("deps", "send_deps"):
            for d in getattr(self, field_name):
                if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                    raise ValueError(
                        f"flow.{field_name}: must hold flow indices (non-negative ints), got {d!r}"
                    )


def check_dependencies(specs: list[FlowSpec]) -> None:
    """Raise ValueError if some flow of ``specs`` could never start.

    ``deps`` / ``send_deps`` must index other flows of the list, and following
    them (a flow starts once ``deps_needed``, or all, of them are met) must
    start every flow: no cycle.
    """
    n = len(specs)
    need = []
    users: list[list[int]] = [[] for _ in specs]
    for i, s in enumerate(specs):
        deps = (*s.deps, *s.send_deps)
        for d in deps:
            if not isinstance(d, int) or not 0 <= d < n or d == i:
                raise ValueError(
                    f"flow {i}.deps: {d!r} is not another flow of this list (0..{n - 1})"
                )
            users[d].append(i)
        need.append(s.deps_needed or len(deps))
    ready = [i for i, k in enumerate(need) if k == 0]
    started = 0
    while ready:
        i = ready.pop()
        started += 1
        for u in users[i]:
            need[u] -= 1
            if need[u] == 0:
                ready.append(u)
    if started != n:
        stuck = next(i for i, k in enumerate(need) if k > 0)
        raise ValueError(f"flow {stuck}.deps: would never start (the dependencies form a cycle)")


def single(src: int, dst: int, size: int, message: int = 1 << 20) -> list[FlowSpec]:
    """One flow."""
    return [FlowSpec(src, dst, size, message=message, name=f"{src}->{dst}")]


def permutation(
    hosts: int, size: int, rng: random.Random, message: int = 1 << 20
) -> list[FlowSpec]:
    """Every host sends to exactly one other host and receives from exactly one (a derangement)."""
    if hosts < 2:
        raise ValueError(f"permutation: needs at least 2 hosts, got {hosts}")
    while True:
        dst = list(range(hosts))
        rng.shuffle(dst)
        if all(d != s for s, d in enumerate(dst)):
            break
    return [FlowSpec(s, d, size, message=message, name=f"{s}->{d}") for s, d in enumerate(dst)]


def shifted_permutation(
    hosts: int, size: int, shift: int, message: int = 1 << 20
) -> list[FlowSpec]:
    """Host h sends to host (h + shift) % hosts: a deterministic permutation (e.g. rack to rack)."""
    if not 0 < shift < hosts:
        raise ValueError(f"shift: must be in 1..{hosts - 1}, got {shift}")
    return [
        FlowSpec(h, (h + shift) % hosts, size, message=message, name=f"{h}->{(h + shift) % hosts}")
        for h in range(hosts)
    ]


def incast(senders: list[int], target: int, size: int, message: int = 1 << 20) -> list[FlowSpec]:
    """Many senders to one target at the same time."""
    if target in senders:
        raise ValueError(f"incast: target {target} is also a sender")
    return [FlowSpec(s, target, size, message=message, name=f"{s}->{target}") for s in senders]


def all_to_all(hosts: list[int], size: int, message: int = 1 << 20) -> list[FlowSpec]:
    """Every host sends ``size`` bytes to every other (one flow per ordered pair)."""
    return [
        FlowSpec(s, d, size, message=message, name=f"{s}->{d}")
        for s in hosts
        for d in hosts
        if s != d
    ]


__all__ = [
    "FlowSpec",
    "all_to_all",
    "check_dependencies",
    "incast",
    "permutation",
    "shifted_permutation",
    "single",
]
