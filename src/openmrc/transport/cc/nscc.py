"""NSCC: Ultra Ethernet 1.0's sender-side congestion control, MRC's default.

A window algorithm driven by queueing delay (RTT minus base RTT) against a
target delay, plus ECN, as a four-way table:

============== ================ ============================================
ECN echoed     delay vs target  reaction
============== ================ ============================================
no             below            proportional increase (more the lower the delay)
no             above            fair increase (additive, equal for all flows)
yes            above            multiplicative decrease, at most halving,
                                at most once per base RTT
yes            below            no change (the path is imbalanced: the EV
                                layer switches path instead)
============== ================ ============================================

Quick adapt: when a loss or a very high delay coincides with a low achieved
window, the window drops to what was actually achieved.  A trim NACK removes
the NACKed bytes from the window.  Constants follow the public UET simulator's
defaults, scaled from its 100 Gb/s, 12 us reference to this QP's link rate and
base RTT (see ``../shared/mrc-notes.md`` section 11); each can be overridden
through ``CCProfile.params`` by the names used below.
"""

from __future__ import annotations

from typing import Any

from ..attrs import CCProfile
from .base import CongestionControl, param, register

_REF_BDP = 150_000  # bytes: 100 Gb/s x 12 us
_REF_RTT_PS = 12_000_000


@register("nscc")
class NSCC(CongestionControl):
    """UET NSCC with BDP-scaled constants."""

    def __init__(self, profile: CCProfile, mtu: int) -> None:
        super().__init__(profile, mtu)
        base_rtt = profile.base_rtt_ps
        bdp = profile.link_bps / 8 * base_rtt / 1e12
        self.base_rtt = base_rtt
        self.bdp = bdp
        self.target = int(param(profile, "target_ratio", 0.75, 0.05, 10.0) * base_rtt)
        a = bdp / _REF_BDP
        b = self.target / _REF_RTT_PS
        self.maxwnd = int(param(profile, "maxwnd_bdp", 1.5, 0.1, 100.0) * bdp)
        self.minwnd = mtu
        self.maxwnd = max(self.maxwnd, 2 * mtu)
        self.cwnd = self.maxwnd
        # Proportional increase: bytes of window per byte acked per ps of headroom.
        self.alpha = param(profile, "alpha_mss", 4.0, 0.0, 1e3) * mtu * a * b / self.target
        self.fi = param(profile, "fi_mss", 5.0, 0.0, 1e3) * mtu * a
        self.eta = param(profile, "eta_mss", 0.15, 0.0, 1e3) * mtu * a
        self.gamma = param(profile, "gamma", 0.8, 0.0, 1.0)
        self.ewma = param(profile, "delay_ewma", 0.0125, 1e-6, 1.0)
        self.qa_delay_mult = param(profile, "qa_delay_mult", 4.0, 1.0, 1e3)
        self.avg_delay = 0.0
        self._inc = 0.0  # pending increase, in bytes * bytes (divided by cwnd on apply)
        self._last_decrease = -(1 << 62)
        self._last_adjust = 0
        self._acked_since_adjust = 0
        self._period_start = 0
        self._achieved = 0
        self._last_qa = -(1 << 62)
        self._loss_seen = False
        self.stats_decreases = 0
        self.stats_quick_adapts = 0

    def on_ack(self, acked_bytes: int, rtt_ps: int, ecn: bool, inflight: int, now: int) -> None:
        """Feed one ACK's delay and ECN sample into the four-way table."""
        delay = rtt_ps - self.base_rtt
        if delay < 0:
            delay = 0
        self.avg_delay += self.ewma * (delay - self.avg_delay)
        target = self.target
        self._achieved += acked_bytes
        if not ecn:
            if delay < target:
                self._inc += self.alpha * acked_bytes * (target - delay)
            else:
                self._inc += self.fi * acked_bytes
        elif (
            delay >= target
            and self.avg_delay > target
            and now - self._last_decrease >= self.base_rtt
        ):
            # The sample says "above target" (quadrant choice); the size of the cut
            # comes from the filtered delay, so one delayed ACK cannot halve the window.
            avg = self.avg_delay
            factor = 1.0 - self.gamma * (avg - target) / avg
            self.cwnd = max(self.minwnd, int(self.cwnd * max(factor, 0.5)))
            self._last_decrease = now
            self._inc = 0.0
            self.stats_decreases += 1
        self._acked_since_adjust += acked_bytes
        if delay > self.qa_delay_mult * target:
            self._loss_seen = True
        if self._acked_since_adjust >= 8 * self.mtu or now - self._last_adjust >= self.base_rtt:
            self._adjust(now)

    def _adjust(self, now: int) -> None:
        if self._inc:
            self.cwnd += int(self._inc / max(self.cwnd, 1))
            self._inc = 0.0
        if now - self._last_adjust >= self.base_rtt:
            self.cwnd += int(self.eta)
        self._last_adjust = now
        self._acked_since_adjust = 0
        self._quick_adapt(now)
        if self.cwnd > self.maxwnd:
            self.cwnd = self.maxwnd
        elif self.cwnd < self.minwnd:
            self.cwnd = self.minwnd

    def _quick_adapt(self, now: int) -> None:
        period = self.base_rtt + self.target
        if now - self._period_start < period:
            return
        if self._loss_seen and self._achieved < self.maxwnd / 8 and now - self._last_qa >= period:
            self.cwnd = max(self.minwnd, self._achieved)
            self._last_qa = now
            self.stats_quick_adapts += 1
        self._loss_seen = False
        self._achieved = 0
        self._period_start = now

    def on_nack(self, nacked_bytes: int, now: int) -> None:
        """A trim: take the trimmed bytes out of the window."""
        self.cwnd = max(self.minwnd, self.cwnd - nacked_bytes)
        self._loss_seen = True

    def on_loss(self, lost_bytes: int, now: int) -> None:
        """A loss (failure signal): only arms quick adapt; the EV layer reacts."""
        self._loss_seen = True

    def describe(self) -> dict[str, Any]:
        """Window, delay average and decision counters."""
        return {
            "name": self.name,
            "cwnd": self.cwnd,
            "maxwnd": self.maxwnd,
            "target_ps": self.target,
            "avg_delay_ps": round(self.avg_delay),
            "decreases": self.stats_decreases,
            "quick_adapts": self.stats_quick_adapts,
        }
