"""A fixed window: no congestion reaction at all.  For tests and for comparisons."""

from __future__ import annotations

from typing import ClassVar

from .base import CCProfile, CongestionControl, param, register_builtin


class FixedWindow(CongestionControl):
    """``cwnd`` = ``params['window']`` bytes (default: 64 packets), never changed."""

    name: ClassVar[str] = "fixed"

    def __init__(self, profile: CCProfile, mtu: int) -> None:
        super().__init__(profile, mtu)
        self.cwnd = int(param(profile, "window", 64 * mtu, mtu, 1 << 34))

    def on_ack(
        self, acked_bytes: int, rtt_ps: int | None, ecn: bool, inflight: int, now: int
    ) -> None:
        """Ignored."""

    def on_nack(
        self, nacked_bytes: int, now: int, rtt_ps: int | None = None, inflight: int = 0
    ) -> None:
        """Ignored."""

    def on_loss(self, lost_bytes: int, now: int) -> None:
        """Ignored."""


register_builtin(FixedWindow)
