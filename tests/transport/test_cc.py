"""Congestion control: the registry and NSCC's four-way table."""

from __future__ import annotations

import pytest

from openmrc.transport import CCProfile, InvalidArgument
from openmrc.transport.cc import CongestionControl, available, create, register
from openmrc.transport.cc.nscc import NSCC

MTU = 4096
BASE = 12_000_000  # 12 us


def nscc(**params: float) -> NSCC:
    cc = create(CCProfile(name="nscc", link_bps=100e9, base_rtt_ps=BASE, params=params), MTU)
    assert isinstance(cc, NSCC)
    return cc


def test_registry_names() -> None:
    assert {"nscc", "fixed"} <= set(available())
    with pytest.raises(InvalidArgument, match="unknown congestion control 'nope'"):
        create(CCProfile(name="nope"), MTU)


def test_custom_algorithm_registers_by_name() -> None:
    @register("halve-on-nack-test")
    class Halve(CongestionControl):
        def __init__(self, profile: CCProfile, mtu: int) -> None:
            super().__init__(profile, mtu)
            self.cwnd = 100 * mtu

        def on_ack(self, acked_bytes, rtt_ps, ecn, inflight, now) -> None:
            pass

        def on_nack(self, nacked_bytes, now) -> None:
            self.cwnd //= 2

        def on_loss(self, lost_bytes, now) -> None:
            pass

    cc = create(CCProfile(name="halve-on-nack-test"), MTU)
    cc.on_nack(1, 0)
    assert cc.cwnd == 50 * MTU


def test_constants_scale_with_bdp() -> None:
    cc = nscc()
    assert cc.bdp == pytest.approx(150_000)
    assert cc.maxwnd == 225_000
    assert cc.cwnd == cc.maxwnd  # starts at maxwnd
    assert cc.target == 9_000_000  # 0.75 x base RTT
    big = create(CCProfile(link_bps=800e9, base_rtt_ps=BASE), MTU)
    assert big.maxwnd == 8 * cc.maxwnd


def _feed(
    cc: NSCC, delay: int, ecn: bool, n: int = 200, start: int = 0, step: int = 1_000_000
) -> int:
    now = start
    for _ in range(n):
        now += step
        cc.on_ack(MTU, BASE + delay, ecn, cc.cwnd, now)
    return now


def test_no_ecn_low_delay_increases_proportionally() -> None:
    low, mid = nscc(), nscc()
    low.cwnd = mid.cwnd = 50_000
    _feed(low, 0, False, n=20)
    _feed(mid, 6_000_000, False, n=20)
    assert low.cwnd > mid.cwnd > 50_000


def test_no_ecn_high_delay_fair_increase() -> None:
    cc = nscc()
    cc.cwnd = 50_000
    _feed(cc, 30_000_000, False, n=20)
    assert cc.cwnd > 50_000


def test_ecn_high_delay_decreases_at_most_half_once_per_rtt() -> None:
    cc = nscc()
    before = cc.cwnd
    # A single late ACK does not cut the window: the filtered delay is still low.
    cc.on_ack(MTU, BASE + 20_000_000, True, cc.cwnd, 1_000)
    assert cc.cwnd == before
    # Sustained delay above target: the filtered delay crosses the target, then a cut.
    cc.avg_delay = 20_000_000.0
    cc.on_ack(MTU, BASE + 20_000_000, True, cc.cwnd, 50_000_000)
    assert before // 2 <= cc.cwnd < before
    after_first = cc.cwnd
    cc.on_ack(MTU, BASE + 20_000_000, True, cc.cwnd, 50_000_001)  # same RTT: no second cut
    assert cc.cwnd == after_first
    cc.on_ack(MTU, BASE + 20_000_000, True, cc.cwnd, 50_000_000 + BASE)
    assert cc.cwnd < after_first
    assert cc.stats_decreases == 2
    # Never more than half in one step, however large the delay.
    cc.avg_delay = 1e12
    w = cc.cwnd
    cc.on_ack(MTU, BASE + 20_000_000, True, cc.cwnd, 10**9)
    assert w // 2 <= cc.cwnd < 0.55 * w  # halved (plus the per-RTT eta increase)


def test_ecn_low_delay_leaves_window_alone() -> None:
    cc = nscc()
    cc.cwnd = 100_000
    _feed(cc, 1_000_000, True, n=50)
    assert cc.cwnd == 100_000


def test_nack_removes_nacked_bytes_and_floor_is_one_mtu() -> None:
    cc = nscc()
    cc.cwnd = 20_000
    cc.on_nack(4096, 0)
    assert cc.cwnd == 20_000 - 4096
    for _ in range(10):
        cc.on_nack(4096, 0)
    assert cc.cwnd == MTU


def test_quick_adapt_on_loss_with_low_achieved_window() -> None:
    cc = nscc()
    cc.on_loss(MTU, 0)
    # Very little acknowledged over a whole period, with a loss: drop to what was achieved.
    cc.on_ack(MTU, BASE, False, 0, 1)
    cc.on_ack(MTU, BASE, False, 0, 2 * (BASE + cc.target))
    assert cc.stats_quick_adapts == 1
    assert cc.cwnd <= 3 * MTU


def test_window_never_exceeds_maxwnd() -> None:
    cc = nscc()
    _feed(cc, 0, False, n=2000)
    assert cc.cwnd == cc.maxwnd
