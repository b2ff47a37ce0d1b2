"""Traffic patterns for the simulator: who sends how much to whom, and when.

Each generator returns a list of :class:`FlowSpec`.  A flow is one MRC
connection (one QP pair) carrying ``size`` bytes as WRITEs of ``message``
bytes; its completion time is when the last WRITE's completion reaches the
sender.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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


__all__ = ["FlowSpec", "all_to_all", "incast", "permutation", "shifted_permutation", "single"]
