"""NSCC: Ultra Ethernet 1.0's sender-side congestion control, MRC's default.

A window algorithm driven by queueing delay (RTT minus base RTT) against a
target delay, plus ECN, as a four-way table:

============== ================ ============================================
ECN echoed     delay vs target  reaction
============== ================ ============================================
no             below            proportional increase (more the lower the
                                delay), or fast increase when the delay has
                                stayed near zero for a whole window
no             above            fair increase (additive, equal for all flows)
yes            above            multiplicative decrease on the filtered
                                delay, at most halving, at most once per
                                base RTT
yes            below            no change (the path is imbalanced: the EV
                                layer switches path instead)
============== ================ ============================================

Increases accumulate and are applied together ("fulfilled") every 8 MTUs
acked or every network RTT; the small additive ``eta`` is added at most once
per network RTT, on its own clock.  Quick adapt: once per base RTT + target,
if a trim NACK, a delay above 4 x target or a loss came while the window
achieved less than ``maxwnd / 8``, the window drops to what was achieved, and
the ECN-marked ACKs and NACKs for the bytes then in flight are ignored (no
second cut at once).  A trim NACK feeds the delay filter a sample of one
network RTT and removes the NACKed bytes from the window; a timeout removes
the timed-out bytes.  The base RTT is learned (the least RTT seen), and with
it the BDP and ``maxwnd``.  The receiver's window penalty (7 bits) takes a
share of each ACK's bytes back out of the window.

The rules and constants follow UET 1.0 as the public simulator uet-htsim
implements it (see ``docs/nscc.md`` for each rule, the remaining differences,
and a side-by-side comparison).  Every constant is named below and can be
overridden through ``CCProfile.params``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from .base import CCProfile, CongestionControl, param, register_builtin

_REF_BDP: Final = 150_000  # bytes: 100 Gb/s x 12 us, the reference network
_REF_RTT_PS: Final = 12_000_000

#: ``CCProfile.params`` names, defaults and allowed ranges.
PARAMS: dict[str, tuple[float, float, float]] = {
    # 1 = the fabric trims (target 0.75 x RTT), 0 = it drops (target 1 x RTT)
    "trimming": (1, 0, 1),
    # target queueing delay / network RTT; 0 = by "trimming" (0.75 or 1.0)
    "target_ratio": (0.0, 0.0, 10.0),
    "maxwnd_bdp": (1.5, 0.1, 100.0),  # maxwnd = this x BDP; initial cwnd = maxwnd
    "alpha_mss": (4.0, 0.0, 1e3),  # proportional increase: 4 MSS x a x b / target
    "fi_mss": (5.0, 0.0, 1e3),  # fair increase per window: 5 MSS x a
    "eta_mss": (0.15, 0.0, 1e3),  # additive increase once per network RTT: 0.15 MSS x a
    "fast_scale": (0.25, 0.0, 10.0),  # fast increase: acked bytes x 0.25 x a
    "fast_delay_ps": (1_000_000, 0, 1e9),  # fast increase while delay < 1 us
    "gamma": (0.8, 0.0, 1.0),  # multiplicative decrease strength
    "md_floor": (0.5, 0.0, 1.0),  # one decrease keeps at least this share
    "delay_ewma": (0.0125, 1e-6, 1.0),  # delay filter weight
    "delay_ewma_large": (0.0125, 1e-6, 1.0),  # weight for samples above 5 base RTTs
    "large_delay_rtts": (5.0, 0.0, 1e3),  # "large" = above this many base RTTs
    "pull_fraction": (0.25, 0.0, 1.0),  # unmarked above-target: pull toward this x base RTT
    "nack_delay_rtts": (1.0, 0.0, 100.0),  # a NACK's delay sample, in network RTTs
    "qa_delay_mult": (4.0, 1.0, 1e3),  # quick adapt on delay above 4 x target
    "qa_gate": (3, 0, 16),  # ... when achieved < maxwnd >> 3
    "adjust_mtus": (8, 1, 1e6),  # fulfil increases every 8 MTUs acked ...
    "adjust_rtts": (1.0, 0.01, 100.0),  # ... or every network RTT (and eta's period)
    "learn_base_rtt": (1, 0, 1),  # 1 = base RTT = least RTT seen
}


#: The last profile given, its ``params`` as they were then, and the parameters
#: checked from them: one dict (never changed) shared by the instances of a
#: profile, as a fabric's QPs all have the same (a dict each was about 1.2 KB).
_LAST_PARAMS: list[Any] = [None, None, None]


def _checked_params(profile: CCProfile) -> dict[str, float]:
    """Every NSCC parameter of ``profile`` (its overrides range-checked)."""
    last = _LAST_PARAMS
    if profile is last[0] and profile.params == last[1]:
        p: dict[str, float] = last[2]
        return p
    p = {name: param(profile, name, *spec) for name, spec in PARAMS.items()}
    last[0], last[1], last[2] = profile, dict(profile.params), p
    return p


class NSCC(CongestionControl):
    """UET NSCC with BDP-scaled constants (times in picoseconds, sizes in bytes)."""

    name: ClassVar[str] = "nscc"

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    base_rtt: int
    _received: int
    _ignored: int
    _inc: float
    maxwnd: int
    target: int
    _achieved: int
    avg_delay: float
    minwnd: int
    _fast_count: int
    _qa_end: int
    _last_eta: int
    adjust_period: int
    _learn: float
    _large_rtts: float
    _ewma: float
    _to_ignore: int
    _fast_delay: float
    alpha: float
    adjust_bytes: int
    _fast: bool
    _trigger_qa: bool
    params: dict[str, float]
    link_Bps: float
    network_rtt: int
    bdp: float
    fi: float
    eta: float
    fast_scale: float
    gamma: float
    qa_threshold: float
    _ewma_large: float
    _pull: float
    _last_decrease: int
    stats_decreases: int
    stats_quick_adapts: int
    stats_fast_increases: int
    stats_eta: int

    def __init__(self, profile: CCProfile, mtu: int) -> None:
        super().__init__(profile, mtu)
        p = _checked_params(profile)
        self.params = p
        net_rtt = profile.base_rtt_ps
        self.link_Bps = profile.link_bps / 8
        #: the configured network RTT (the profile's base RTT): scales the constants
        self.network_rtt = net_rtt
        #: the learned base RTT: the least RTT seen (starts at the configured one)
        self.base_rtt = net_rtt
        self.bdp = self.link_Bps * net_rtt / 1e12
        ratio = p["target_ratio"] or (0.75 if p["trimming"] else 1.0)
        self.target = int(ratio * net_rtt)
        a = self.bdp / _REF_BDP
        b = self.target / _REF_RTT_PS
        self.minwnd = mtu
        self.maxwnd = max(int(p["maxwnd_bdp"] * self.bdp), 2 * mtu)
        self.cwnd = self.maxwnd
        self.alpha = p["alpha_mss"] * mtu * a * b / max(self.target, 1)
        self.fi = p["fi_mss"] * mtu * a
        self.eta = p["eta_mss"] * mtu * a
        self.fast_scale = p["fast_scale"] * a
        self.gamma = p["gamma"]
        self.qa_threshold = p["qa_delay_mult"] * self.target
        self.adjust_bytes = int(p["adjust_mtus"] * mtu)
        self.adjust_period = int(p["adjust_rtts"] * net_rtt)
        self.avg_delay = 0.0
        # The parameters read on every ACK, as float attributes: a look-up in
        # ``params`` (a str-keyed dict) each time costs a compiled build more.
        self._learn = p["learn_base_rtt"]
        self._ewma = p["delay_ewma"]
        self._ewma_large = p["delay_ewma_large"]
        self._large_rtts = p["large_delay_rtts"]
        self._pull = p["pull_fraction"]
        self._fast_delay = p["fast_delay_ps"]
        self._inc = 0.0  # pending increase, in bytes x bytes (divided by cwnd when fulfilled)
        self._received = 0  # bytes acked since the last fulfilment
        self._last_eta = 0  # when eta was last added (its own clock)
        self._last_decrease = -(1 << 62)
        self._fast_count = 0  # bytes acked in a row with delay below fast_delay_ps
        self._fast = False  # in fast increase
        self._achieved = 0  # bytes acked in this quick-adapt period
        self._qa_end = 0  # end of the quick-adapt period (0: not started)
        self._trigger_qa = False  # a NACK since the last quick adapt
        self._to_ignore = 0  # after quick adapt: the bytes then in flight ...
        self._ignored = 0  # ... and how many of them have been acked/NACKed since
        self.stats_decreases = 0
        self.stats_quick_adapts = 0
        self.stats_fast_increases = 0
        self.stats_eta = 0

    # -- the delay filter and the base RTT --------------------------------------------
    def _learn_base(self, rtt: int) -> None:
        if self._learn and 0 < rtt < self.base_rtt:
            self.base_rtt = rtt
            self.bdp = self.link_Bps * rtt / 1e12
            self.maxwnd = max(int(self.params["maxwnd_bdp"] * self.bdp), 2 * self.mtu)
            if self.cwnd > self.maxwnd:
                self.cwnd = self.maxwnd

    def _update_delay(self, rtt: int, ecn: bool) -> None:
        """One sample into the EWMA; an unmarked sample above target is not trusted
        (the queue it saw is not ours to fix): the average is pulled toward a
        quarter of the base RTT instead."""
        base = self.base_rtt
        delay = rtt - base
        if not ecn and delay > self.target:
            w = self._ewma
            self.avg_delay = w * base * self._pull + (1 - w) * self.avg_delay
        else:
            w = self._ewma_large if delay > self._large_rtts * base else self._ewma
            self.avg_delay = w * delay + (1 - w) * self.avg_delay

    # -- events -----------------------------------------------------------------------
    def on_ack(
        self, acked_bytes: int, rtt_ps: int | None, ecn: bool, inflight: int, now: int
    ) -> None:
        """One ACK event: ``rtt_ps`` its RTT sample (None: no valid sample)."""
        # (the sample unboxed once: compiled, each use of an ``int | None`` converts it)
        rtt = rtt_ps if rtt_ps is not None else 0
        if rtt > 0:
            self._learn_base(rtt)
            if rtt >= self.base_rtt:
                self._update_delay(rtt, ecn)
                delay: float = float(rtt - self.base_rtt)
            else:
                delay = self.avg_delay
        else:
            delay = self.avg_delay
        self._achieved += acked_bytes
        self._received += acked_bytes
        self._ignored += acked_bytes
        if self._quick_adapt(False, ecn, delay, inflight, now):
            return
        target = self.target
        if not ecn:
            if delay >= target:
                self._inc += self.fi * acked_bytes
            elif not self._fast_increase(acked_bytes, delay):
                self._inc += self.alpha * acked_bytes * (target - delay)
        elif delay >= target:
            self._multiplicative_decrease(now)
        self._bound()
        if self._received > self.adjust_bytes or now - self._last_eta > self.adjust_period:
            self._fulfil(now)
        self._bound()

    def _fast_increase(self, acked_bytes: int, delay: float) -> bool:
        """Near-zero delay for a whole window: grow by a share of the acked bytes at once."""
        if delay < self._fast_delay:
            self._fast_count += acked_bytes
            if self._fast_count > self.cwnd or self._fast:
                self.cwnd += int(acked_bytes * self.fast_scale)
                self._fast = True
                self.stats_fast_increases += 1
                return True
        else:
            self._fast_count = 0
        self._fast = False
        return False

    def _multiplicative_decrease(self, now: int) -> None:
        self._fast = False
        self._fast_count = 0
        avg = self.avg_delay
        if avg > self.target and now - self._last_decrease > self.base_rtt:
            factor = max(1.0 - self.gamma * (avg - self.target) / avg, self.params["md_floor"])
            self.cwnd = max(self.minwnd, int(self.cwnd * factor))
            self._last_decrease = now
            self.stats_decreases += 1

    def _fulfil(self, now: int) -> None:
        """Apply the accumulated increase; eta at most once per network RTT."""
        self.cwnd += int(self._inc / max(self.cwnd, 1))
        if now - self._last_eta >= self.adjust_period:
            self.cwnd += int(self.eta)
            self._last_eta = now
            self.stats_eta += 1
        self._inc = 0.0
        self._received = 0

    def _quick_adapt(self, loss: bool, ecn: bool, delay: float, inflight: int, now: int) -> bool:
        """True when this event is consumed by quick adapt or its ignore window."""
        done = False
        if self._ignored < self._to_ignore and ecn:
            done = True  # inside the ignore window: these signals predate the cut
        elif now > self._qa_end:
            if (
                self._qa_end
                and (self._trigger_qa or loss or delay > self.qa_threshold)
                and self._achieved < self.maxwnd >> int(self.params["qa_gate"])
            ):
                self.cwnd = max(self._achieved, self.minwnd)
                self._to_ignore = inflight
                self._ignored = 0
                self._trigger_qa = False
                self.stats_quick_adapts += 1
                done = True
            self._achieved = 0
            self._qa_end = now + self.base_rtt + self.target
        if done:
            self._inc = 0.0
            self._received = 0
        return done

    def _bound(self) -> None:
        if self.cwnd < self.minwnd:
            self.cwnd = self.minwnd
        elif self.cwnd > self.maxwnd:
            self.cwnd = self.maxwnd

    def on_nack(
        self, nacked_bytes: int, now: int, rtt_ps: int | None = None, inflight: int = 0
    ) -> None:
        """A trim: a congestion sample, a quick-adapt trigger, and the bytes out of the window."""
        self._ignored += nacked_bytes
        if rtt_ps is not None and rtt_ps > 0:
            self._learn_base(rtt_ps)
        nack_rtt = self.base_rtt + int(self.params["nack_delay_rtts"] * self.network_rtt)
        self._update_delay(nack_rtt, True)
        self._trigger_qa = True
        if not self._quick_adapt(True, True, 0, inflight, now):
            self.cwnd -= nacked_bytes
            self._bound()

    def on_loss(self, lost_bytes: int, now: int) -> None:
        """A loss without a trim: a path failure, handled by the EV layer; no window change."""

    def on_timeout(self, lost_bytes: int, now: int) -> None:
        """A retransmission timeout: the timed-out bytes leave the window."""
        self.cwnd -= lost_bytes
        self._bound()

    def on_penalty(self, penalty: int, acked_bytes: int, now: int) -> None:
        """The receiver's window penalty: ``penalty / 127`` of the acked bytes come off."""
        if penalty > 0:
            self.cwnd -= acked_bytes * min(penalty, 127) // 127
            self._bound()

    def describe(self) -> dict[str, Any]:
        """Window, delays and decision counters."""
        return {
            "name": self.name,
            "cwnd": self.cwnd,
            "maxwnd": self.maxwnd,
            "target_ps": self.target,
            "base_rtt_ps": self.base_rtt,
            "avg_delay_ps": round(self.avg_delay),
            "decreases": self.stats_decreases,
            "quick_adapts": self.stats_quick_adapts,
            "fast_increases": self.stats_fast_increases,
        }


register_builtin(NSCC)
