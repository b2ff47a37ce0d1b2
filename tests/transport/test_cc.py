"""Congestion control: the registry, and NSCC rule by rule (sans-IO, explicit times)."""

from __future__ import annotations

import pytest

from openmrc.transport import CCProfile, InvalidArgument
from openmrc.transport.cc import CongestionControl, available, create, register
from openmrc.transport.cc.nscc import NSCC
from tests.compiled import interpreted_only

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

        def on_nack(self, nacked_bytes, now, rtt_ps=None, inflight=0) -> None:
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
    assert isinstance(big, NSCC) and big.maxwnd == 8 * cc.maxwnd


US = 1_000_000
TARGET = 9_000_000  # 0.75 x 12 us (trimming)


def _feed(cc: NSCC, delay: int, ecn: bool, n: int = 200, start: int = 0, step: int = US) -> int:
    now = start
    for _ in range(n):
        now += step
        cc.on_ack(MTU, BASE + delay, ecn, cc.cwnd, now)
    return now


def test_no_ecn_low_delay_increases_proportionally() -> None:
    low, mid = nscc(fast_scale=0), nscc(fast_scale=0)
    low.cwnd = mid.cwnd = 50_000
    _feed(low, 2 * US, False, n=20)
    _feed(mid, 6 * US, False, n=20)
    assert low.cwnd > mid.cwnd > 50_000


def test_no_ecn_high_delay_fair_increase() -> None:
    cc = nscc()
    cc.cwnd = 50_000
    _feed(cc, 30 * US, False, n=20)
    assert cc.cwnd > 50_000


def test_ecn_high_delay_decreases_at_most_half_once_per_base_rtt() -> None:
    cc = nscc()
    before = cc.cwnd
    # A marked late ACK with a low filtered delay does not cut the window.
    cc.on_ack(MTU, BASE + 20 * US, True, cc.cwnd, 1_000)
    assert cc.cwnd == before
    cc.avg_delay = 20.0 * US  # sustained delay above target
    cc.on_ack(MTU, BASE + 20 * US, True, cc.cwnd, 50 * US)
    assert before // 2 <= cc.cwnd < before
    first = cc.cwnd
    cc.on_ack(MTU, BASE + 20 * US, True, cc.cwnd, 50 * US + 1)  # same base RTT: no second cut
    assert cc.cwnd == first
    cc.on_ack(MTU, BASE + 20 * US, True, cc.cwnd, 50 * US + BASE + 1)
    assert cc.cwnd < first and cc.stats_decreases == 2
    cc.avg_delay = 1e12  # never more than half in one step
    w = cc.cwnd
    cc.on_ack(MTU, BASE + 20 * US, True, cc.cwnd, 10**9)
    assert w // 2 <= cc.cwnd < 0.55 * w


def test_ecn_low_delay_leaves_window_alone() -> None:
    cc = nscc(eta_mss=0)
    cc.cwnd = 100_000
    _feed(cc, 1 * US, True, n=50)
    assert cc.cwnd == 100_000


def test_eta_once_per_rtt_under_a_steady_ack_stream() -> None:
    # Only eta may grow the window here (no fair/proportional/fast increase).
    # ACKs every 0.5 us fulfil the increases every 8 MTUs (4.5 us); eta still
    # comes once per network RTT (12 us), on its own clock.
    cc = nscc(fi_mss=0, alpha_mss=0, fast_scale=0)
    cc.cwnd = 100_000
    _feed(cc, TARGET + US, False, n=240, step=US // 2)  # 120 us, unmarked, above target
    assert 9 <= cc.stats_eta <= 10
    assert cc.cwnd == 100_000 + cc.stats_eta * int(cc.eta)


def test_quick_adapt_then_an_ignore_window_no_second_cut() -> None:
    cc = nscc()
    cc.on_ack(MTU, BASE, False, 0, 1)  # opens the first quick-adapt period
    # A trim after a period in which little was achieved: down to what was achieved.
    cc.on_nack(MTU, 30 * US, BASE + 5 * US, inflight=100_000)
    assert cc.stats_quick_adapts == 1 and cc.cwnd == MTU
    cc.cwnd = 50_000  # (as if the window regrew)
    # The marked ACKs and NACKs for the 100 kB then in flight are ignored: no cut.
    cc.avg_delay = 40.0 * US
    t = 31 * US
    for _ in range(10):
        t += BASE
        cc.on_ack(MTU, BASE + 40 * US, True, 100_000, t)
        cc.on_nack(MTU, t, BASE + 40 * US, inflight=100_000)
    assert cc.cwnd == 50_000 and cc.stats_decreases == 0 and cc.stats_quick_adapts == 1
    # Past the ignore window, the same signals act again.
    for _ in range(10):
        t += BASE
        cc.on_ack(MTU, BASE + 40 * US, True, 100_000, t)
    assert cc.cwnd < 50_000 and cc.stats_decreases > 0


def test_fast_increase_after_a_window_at_near_zero_delay() -> None:
    cc = nscc()
    cc.cwnd = 40_000
    slow = nscc(fast_scale=0)
    slow.cwnd = 40_000
    for c in (cc, slow):
        _feed(c, 0, False, n=30, step=US // 4)  # 120 kB acked in 7.5 us, delay 0
    assert cc.stats_fast_increases > 0
    assert cc.cwnd > slow.cwnd
    # Once in, each ACK adds a share (0.25 x a) of its bytes at once.
    before = cc.cwnd
    cc.on_ack(MTU, BASE, False, cc.cwnd, 8 * US)
    assert cc.cwnd == before + int(MTU * 0.25)


def test_delay_filter_pulls_unmarked_above_target_samples_toward_base_rtt() -> None:
    cc = nscc()
    cc.avg_delay = 20.0 * US
    cc.on_ack(MTU, BASE + 30 * US, False, cc.cwnd, 100 * US)  # unmarked, above target
    assert cc.avg_delay == pytest.approx(0.0125 * 0.25 * BASE + 0.9875 * 20 * US)
    marked = nscc()
    marked.avg_delay = 20.0 * US
    marked.on_ack(MTU, BASE + 30 * US, True, marked.cwnd, 100 * US)
    assert marked.avg_delay == pytest.approx(0.0125 * 30 * US + 0.9875 * 20 * US)


def test_nacks_are_delay_samples_of_one_network_rtt() -> None:
    cc = nscc()
    cc.on_nack(MTU, 5 * US, BASE + 3 * US, inflight=0)
    assert cc.avg_delay == pytest.approx(0.0125 * BASE)


def test_base_rtt_is_learned_with_bdp_and_maxwnd() -> None:
    cc = nscc()
    assert cc.base_rtt == BASE and cc.maxwnd == 225_000
    cc.on_ack(MTU, 8 * US, False, 0, 10 * US)
    assert cc.base_rtt == 8 * US
    assert cc.maxwnd == 150_000 and cc.cwnd <= 150_000
    cc.on_ack(MTU, 10 * US, False, 0, 20 * US)  # larger samples do not raise it
    assert cc.base_rtt == 8 * US
    fixed = nscc(learn_base_rtt=0)
    fixed.on_ack(MTU, 8 * US, False, 0, 10 * US)
    assert fixed.base_rtt == BASE


def test_target_is_one_rtt_without_trimming_three_quarters_with() -> None:
    assert nscc().target == 9 * US
    assert nscc(trimming=0).target == 12 * US
    assert nscc(target_ratio=0.5).target == 6 * US


def test_timeouts_reduce_the_window_losses_do_not() -> None:
    cc = nscc()
    cc.cwnd = 50_000
    cc.on_loss(MTU, 0)
    assert cc.cwnd == 50_000
    cc.on_timeout(MTU, 0)
    assert cc.cwnd == 50_000 - MTU


def test_nack_removes_nacked_bytes_and_floor_is_one_mtu() -> None:
    cc = nscc()
    cc.cwnd = 20_000
    cc.on_nack(4096, 0)  # the first quick-adapt period has not started: no quick adapt
    assert cc.cwnd == 20_000 - 4096
    for _ in range(10):
        cc.on_nack(4096, 0)
    assert cc.cwnd == MTU


def test_window_never_exceeds_maxwnd() -> None:
    cc = nscc()
    _feed(cc, 0, False, n=2000)
    assert cc.cwnd == cc.maxwnd


def test_receiver_window_penalty_applied_by_the_sender() -> None:
    cc = nscc()
    cc.cwnd = 100_000
    cc.on_penalty(0, 8192, 0)
    assert cc.cwnd == 100_000
    cc.on_penalty(127, 8192, 0)
    assert cc.cwnd == 100_000 - 8192
    cc.on_penalty(64, 8192, 0)
    assert cc.cwnd == 100_000 - 8192 - 8192 * 64 // 127


def test_receiver_computes_the_penalty_from_its_out_of_order_backlog() -> None:
    from openmrc.loopback import Loopback
    from openmrc.transport import QPAttr
    from openmrc.transport.responder import window_penalty
    from openmrc.wire.packets import DataPacket, Opcode, SackPacket

    assert window_penalty(64, 128) == 0 and window_penalty(128, 128) == 127
    assert window_penalty(96, 128) == 64
    lb = Loopback()
    qa, qb = lb.connect(QPAttr(mpr=1))  # a 128-PSN receive window
    mr = qb.pd.reg_mr(1 << 20)
    penalties = []
    for psn in range(1, 121):  # PSN 0 missing: everything is held out of order
        pkt = DataPacket(qa.qpn, 1, Opcode.WRITE_MIDDLE, psn, 0, mr.addr + psn * 1024,
                         mr.rkey, 1024, ts=psn, ack_req=True)  # fmt: skip
        qb.receive_packet(pkt, psn)
        while (out := qb.poll_packet(psn)) is not None:
            if isinstance(out, SackPacket):
                penalties.append((out.ooo_count, out.penalty))
    assert all(p == 0 for held, p in penalties if held <= 64)
    assert penalties[-1] == (120, window_penalty(120, 128)) and penalties[-1][1] > 100


@interpreted_only("openmrc.transport.requester")
def test_one_delay_sample_per_ack_event_not_per_sack_of_a_group() -> None:
    import random

    from openmrc.transport import SGE, Context, QPAttr, SendWR, WROpcode
    from openmrc.wire.packets import DataPacket, ProbePacket, SackPacket

    a, b = Context(random.Random(1)), Context(random.Random(2))
    qa = a.alloc_pd().create_qp(a.create_cq())
    qb = b.alloc_pd().create_qp(b.create_cq())
    qa.connect(qb.qpn, QPAttr(ack_coalesce_bytes=1 << 24), peer="b")
    qb.connect(qa.qpn, QPAttr(ack_coalesce_bytes=1 << 24), peer="a")
    src = qa.pd.reg_mr(1 << 20)
    dst = qb.pd.reg_mr(1 << 20)
    qa.post_send(SendWR(1, WROpcode.RDMA_WRITE, [SGE(src.addr, 100 * MTU, src.lkey)],
                        dst.addr, dst.rkey))  # fmt: skip
    sent = []
    while (item := a.poll_packet(1000)) is not None:
        sent.append(item[1])
    for p in sent[1:]:  # all but PSN 0, without ACK requests: coalesced
        assert isinstance(p, DataPacket)
        p.ack_req = False
        b.receive_packet(p, 2000)
    b.receive_packet(ProbePacket(qb.qpn, 5, 0, 1500, reliability=True), 3000)
    sacks = []
    while (item := b.poll_packet(3000)) is not None:
        sacks.append(item[1])
    assert len(sacks) >= 2 and all(isinstance(s, SackPacket) for s in sacks)
    samples: list[int | None] = []
    assert qa.cc is not None
    on_ack = qa.cc.on_ack

    def recording(n: int, rtt: int | None, ecn: bool, infl: int, now: int) -> None:
        samples.append(rtt)
        on_ack(n, rtt, ecn, infl, now)

    qa.cc.on_ack = recording  # type: ignore[method-assign,assignment]  # the same call, recorded
    for s in sacks:
        a.receive_packet(s, 4000)
    assert [r for r in samples if r is not None] == [4000 - 1500]  # one sample, one event


def test_every_constant_is_overridable_and_checked() -> None:
    from openmrc.transport.cc.nscc import PARAMS

    for name, (default, lo, hi) in PARAMS.items():
        nscc(**{name: default})
        with pytest.raises(InvalidArgument, match=rf"params\['{name}'\]"):
            nscc(**{name: hi + 1 if hi < 1e9 else lo - 1})


def test_nscc_instances_of_one_profile_share_their_checked_parameters() -> None:
    # A fabric's QPs all have the same profile: one parameter dict for all of them
    # (about 1.2 KB a QP), and a profile whose overrides changed since is checked again.
    prof = CCProfile(name="nscc", link_bps=100e9, base_rtt_ps=BASE)
    a, b = create(prof, MTU), create(prof, MTU)
    assert isinstance(a, NSCC) and isinstance(b, NSCC)
    assert a.params is b.params
    prof.params["gamma"] = 0.5
    c = create(prof, MTU)
    assert isinstance(c, NSCC) and c.params["gamma"] == 0.5 and a.params["gamma"] != 0.5
    prof.params["gamma"] = 7.0
    with pytest.raises(InvalidArgument, match="gamma"):
        create(prof, MTU)
