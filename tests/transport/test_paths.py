"""EV state machine: blackholed planes, trims, ECN, probes, floor, deny/allow."""

from __future__ import annotations

import itertools
import random
import tracemalloc

import pytest

from openmrc.loopback import Faults
from openmrc.transport import (
    EVEvent,
    EVField,
    EVProfile,
    EVRemap,
    EVState,
    InvalidArgument,
    PathSet,
    QPAttr,
    paths,
)
from openmrc.transport.ev import ev_path, ev_plane, ev_spare, make_ev
from openmrc.wire.packets import DataPacket

from .helpers import assert_exact, run_transfer, setup_transfer


def _events(ctx) -> list[EVEvent]:
    out = []
    while (ev := ctx.next_event()) is not None:
        if isinstance(ev, EVEvent):
            out.append(ev)
    return out


def test_blackholed_plane_detected_within_three_rtts_then_recovered_by_probes() -> None:
    t = setup_transfer(Faults(blackhole_planes={3}), count=60, imm_every=4)
    run_transfer(t)
    assert_exact(t)
    assert t.qa.requester is not None and t.qa.paths is not None
    rtt = t.qa.requester.min_rtt
    first_loss = t.lb.stats("ab").first_blackholed
    events = _events(t.lb.a)
    bad_at = {e.ev: e.time for e in events if e.new is EVState.ASSUMED_BAD}
    assert first_loss, "the black hole swallowed nothing"
    # Every EV that lost a packet in the black hole is ASSUMED_BAD within three
    # RTTs and two reordering windows: once the packet is overdue (the RACK RTT
    # plus the gap allowance, under one window) an EV probe goes out on its EV,
    # and an unanswered probe blames the EV one probe wait later (before the QP
    # has measured its probes: one smoothed RTT plus half a minimum RTT).
    reo = t.qa.requester.reo_window()
    for ev, lost_at in first_loss.items():
        if ev_plane(ev) != 3:
            continue
        assert ev in bad_at, f"EV {ev:#x} lost a packet but never went ASSUMED_BAD"
        assert bad_at[ev] - lost_at <= 3 * rtt + 2 * reo, (ev, bad_at[ev] - lost_at, rtt, reo)
    # Nothing outside the black hole was blamed.
    assert all(ev_plane(ev) == 3 for ev in bad_at)
    paths = t.qa.paths
    assert paths.counts()["ASSUMED_BAD"] > 0
    # Restore the plane: background probes bring the EVs back.
    t.lb.faults_ab.blackhole_planes.clear()
    t.lb.faults_ba.blackhole_planes.clear()
    t.lb.run(until=t.lb.now + 500_000_000)
    recovered = {e.ev for e in _events(t.lb.a) if e.new is EVState.GOOD}
    assert set(bad_at) <= recovered
    assert paths.counts()["ASSUMED_BAD"] == 0
    assert not paths.probing
    assert t.qa.stats.probe_replies >= 3 * len(bad_at)


def test_trim_nack_retransmits_on_another_ev_within_one_rtt() -> None:
    t = setup_transfer(Faults(trim=0.1), count=30, seed=3)
    trimmed: dict[int, tuple[int, int]] = {}
    resent: dict[int, tuple[int, int]] = {}

    def trace(now: int, direction: str, pkt: object, fate: str) -> None:
        if direction != "ab" or type(pkt) is not DataPacket:
            return
        if pkt.trimmed and pkt.psn not in trimmed:
            trimmed[pkt.psn] = (pkt.ts, pkt.ev)
        elif pkt.retransmit and pkt.psn in trimmed and pkt.psn not in resent:
            resent[pkt.psn] = (pkt.ts, pkt.ev)

    t.lb.trace = trace
    run_transfer(t)
    assert_exact(t)
    assert len(trimmed) >= 5
    # From the trimmed packet's transmission to its retransmission: one round
    # trip (the NACK's), plus at most the one packet already on the wire.
    assert t.qa.requester is not None and t.qa.paths is not None
    rtt = t.qa.requester.srtt  # the smoothed RTT of full-size packets
    one_packet = (4096 + 200) * 8 * 10  # ps at 100 Gb/s
    for psn, (at, ev) in trimmed.items():
        again_at, again_ev = resent[psn]
        assert again_ev != ev
        assert again_at - at <= rtt + one_packet, (psn, again_at - at, rtt)
    # A trim is congestion, not failure: no EV went ASSUMED_BAD.
    assert not any(e.new is EVState.ASSUMED_BAD for e in _events(t.lb.a))
    assert t.qa.paths.stats_bad == 0


def test_lasthop_trim_leaves_ev_state_alone_and_midpath_trim_skips() -> None:
    t = run_transfer(setup_transfer(Faults(trim_lasthop=0.2), count=20))
    assert_exact(t)
    assert t.qa.stats.trims_lasthop > 0
    assert t.qa.paths is not None
    assert t.qa.paths.stats_skips == 0
    assert t.qa.paths.stats_bad == 0
    t2 = run_transfer(setup_transfer(Faults(trim=0.2), count=20))
    assert_exact(t2)
    assert t2.qa.paths is not None
    assert t2.qa.paths.stats_skips > 0
    assert t2.qa.paths.stats_bad == 0


def test_ecn_on_one_ev_skips_it() -> None:
    t = setup_transfer(count=40)
    assert t.qa.paths is not None
    victim = t.qa.paths.slots[5]
    t.lb.faults_ab.ecn_evs.add(victim)
    uses: dict[int, int] = {}

    def trace(now: int, direction: str, pkt: object, fate: str) -> None:
        if direction == "ab" and type(pkt) is DataPacket:
            uses[pkt.ev] = uses.get(pkt.ev, 0) + 1

    t.lb.trace = trace
    run_transfer(t)
    assert_exact(t)
    assert t.qa.paths.stats_skips > 0
    # Skipped for a rotation after each echo: it carries well under its share.
    others = [n for ev, n in uses.items() if ev != victim]
    assert 0 < uses[victim] < 0.75 * (sum(others) / len(others))
    # ECN is a load-balancing signal, never a failure: the EV is skipped, not blamed.
    assert t.qa.paths.stats_bad == 0


def test_lossy_ev_replaced_from_same_plane() -> None:
    t = setup_transfer(count=80, imm_every=0)
    assert t.qa.paths is not None
    victim = t.qa.paths.slots[9]
    t.lb.faults_ab.loss_by_ev[victim] = 1.0
    run_transfer(t)
    assert_exact(t)
    assert t.qa.paths.state[victim] is EVState.ASSUMED_BAD
    assert victim not in t.qa.paths.slots
    assert ev_plane(t.qa.paths.slots[9]) == ev_plane(victim)
    assert t.qa.paths.stats_replacements == 1


def test_ev_set_split_over_planes_with_backups() -> None:
    prof = EVProfile(planes=8, paths_per_plane=64, ev_count=256)
    ps = PathSet(prof, random.Random(1), qpn=1)
    assert len(ps.slots) == 256 == len(set(ps.slots))
    per_plane = [sum(1 for ev in ps.slots if ev_plane(ev) == p) for p in range(8)]
    assert per_plane == [32] * 8
    # The backup set is the rest of each plane's space: 64 uplinks x 2^16 spare values
    # (the default spare field), less the 32 active EVs.
    assert all(ps.backup_count(p) == 64 * 65536 - 32 for p in range(8))
    # Rotation: consecutive packets visit every EV once per round.
    assert sorted(ps.next_ev() for _ in range(256)) == sorted(ps.slots)


def test_qps_share_their_first_rotation_until_one_changes_its_own() -> None:
    # Every QP's rotation starts as the same ids in order: one list, shared (about
    # 2 KB a QP of a fabric), copied by the first QP that refills a slot.
    prof = EVProfile(planes=8, paths_per_plane=64, ev_count=256)
    rng = random.Random(1)
    a, b = PathSet(prof, rng, qpn=1), PathSet(prof, rng, qpn=2)
    assert a._slots is b._slots
    before = b.slots
    victim = a.slots[9]
    a.on_loss(victim, 1, "test")
    assert victim not in a.slots and ev_plane(a.slots[9]) == ev_plane(victim)
    assert b.slots == before  # b's rotation did not move with a's
    assert PathSet(prof, rng, qpn=3)._slots == list(range(256))
    assert b.plane_shares() == [1.0] * 16


def test_floor_keeps_some_evs_usable() -> None:
    # No spare entropy: the 8 EVs are the whole space, there are no backups.
    prof = EVProfile(
        planes=2, paths_per_plane=4, ev_count=8, floor=3, spare_field=EVField(width=1, max=0)
    )
    ps = PathSet(prof, random.Random(1), qpn=1)
    for ev in list(ps.slots):
        ps.on_loss(ev, 0, "test")
    assert ps.usable == 3
    assert ps.stats_bad == 5
    assert ps.stats_floor_hits == 3


def test_deny_and_allow_produce_events() -> None:
    ps = PathSet(EVProfile(), random.Random(2), qpn=9)
    ev = ps.slots[0]
    ps.deny(ev, 10)
    assert ps.state[ev] is EVState.DENIED
    assert all(ps.next_ev() != ev for _ in range(600))
    ps.allow(ev, 20)
    kinds = [(e.new, e.time) if isinstance(e, EVEvent) else e for e in ps.events]
    assert kinds == [(EVState.DENIED, 10), (EVState.GOOD, 20)]
    with pytest.raises(InvalidArgument, match="not in this QP's EV set"):
        ps.deny(0xFFFFFFF, 0)


def test_explicit_ev_list() -> None:
    evs = [0x10, 0x21, 0x30, 0x41]
    t = run_transfer(setup_transfer(attr=QPAttr(ev_profile=EVProfile(explicit=evs)), count=5))
    assert_exact(t)
    assert t.lb.stats("ab").evs_used <= set(evs)


def test_busy_planes_are_passed_over_without_losing_their_turn() -> None:
    prof = EVProfile(planes=4, paths_per_plane=2, ev_count=8)
    ps = PathSet(prof, random.Random(1), qpn=1)
    busy = 0b0101  # planes 0 and 2 cannot take a packet now
    picked = [ps.next_ev(busy) for _ in range(8)]
    assert {ev_plane(ev) for ev in picked} == {1, 3}
    assert all(ps.state[ev] is EVState.GOOD for ev in ps.slots)
    assert ps.next_ev(0b1111) == -1  # every usable EV is on a busy plane
    assert ev_plane(ps.next_ev(0)) in range(4)


def test_context_keeps_a_port_blocked_qp_ready() -> None:
    from openmrc.transport import SGE, SendWR, WROpcode

    t = setup_transfer(count=0)
    mra, mrb = t.qa.pd.mrs[0], t.qb.pd.mrs[0]
    t.qa.post_send(
        SendWR(0, WROpcode.RDMA_WRITE, [SGE(mra.addr, 4096, mra.lkey)], mrb.addr, mrb.rkey)
    )
    every_plane = (1 << 8) - 1
    assert t.lb.a.poll_packet(0, busy=every_plane) is None
    item = t.lb.a.poll_packet(0, busy=every_plane & ~(1 << 5))
    assert item is not None and ev_plane(item[1].ev) == 5


def test_more_evs_than_paths_use_spare_entropy_and_differ_per_qp() -> None:
    # 8 T1s per plane, 256 EVs over 8 planes: 32 per plane, 4 per physical path,
    # made distinct by the spare-entropy bits.
    prof = EVProfile(planes=8, paths_per_plane=8, ev_count=256)
    prof.validate()
    a = PathSet(prof, random.Random(1), qpn=1)
    b = PathSet(prof, random.Random(2), qpn=2)
    for ps in (a, b):
        assert len(set(ps.slots)) == 256
        for p in range(8):
            plane = [ev for ev in ps.slots if ev_plane(ev) == p]
            assert len(plane) == 32
            # spread evenly over the uplinks: 4 EVs on each of the 8 physical paths
            assert sorted({ev_path(ev) for ev in plane}) == list(range(8))
            assert all(sum(1 for ev in plane if ev_path(ev) == u) == 4 for u in range(8))
        assert len({ev_spare(ev) for ev in ps.slots}) > 8
    assert set(a.slots) != set(b.slots)
    assert len(set(a.slots) & set(b.slots)) < 16


def test_backups_replace_failed_evs_from_the_same_plane() -> None:
    # one EV per path (8 per plane over 8 uplinks): no sibling fails with a victim
    prof = EVProfile(planes=4, paths_per_plane=8, ev_count=32)
    ps = PathSet(prof, random.Random(3), qpn=1)
    victims = [ev for ev in ps.slots if ev_plane(ev) == 2][:3]
    for i, ev in enumerate(victims):
        ps.on_loss(ev, 1000 * i, "test")
    assert ps.stats_replacements == 3
    assert not set(victims) & set(ps.slots)
    assert sum(1 for ev in ps.slots if ev_plane(ev) == 2) == 8
    assert len(set(ps.slots)) == 32 and ps.usable == 32


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"planes": 8, "paths_per_plane": 8, "ev_count": 250}, "EVProfile.ev_count"),
        (
            {"planes": 8, "paths_per_plane": 8, "ev_count": 256, "spare_field": EVField(1)},
            "EVProfile.ev_count",
        ),
        ({"spare_field": EVField(17)}, "EVProfile.spare_field.width"),
        ({"uplink_field": EVField(4, min=9, max=3)}, "EVProfile.uplink_field.max"),
        ({"plane_field": EVField(4, mask=0x10)}, "EVProfile.plane_field.mask"),
    ],
)
def test_profile_that_cannot_give_what_was_asked_names_the_field(
    kwargs: dict[str, object], field: str
) -> None:
    prof = EVProfile(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        prof.validate()
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        PathSet(prof, random.Random(1), qpn=1)


def test_field_values_follow_min_max_mask_and_init() -> None:
    assert list(EVField(4, min=2, max=5).values()) == [2, 3, 4, 5]
    # mask 0b0101 generated, bit 1 fixed to 1 by init, bit 3 fixed to 0
    assert list(EVField(4, mask=0b0101, init=0b0010).values()) == [2, 3, 6, 7]
    prof = EVProfile(plane_field=EVField(4, mask=0b0110), ev_count=64)
    prof.validate()
    ps = PathSet(prof, random.Random(1), qpn=1)
    assert {ev_plane(ev) for ev in ps.slots} == {0, 2, 4, 6}


def test_deny_reaches_backups_not_drawn_yet() -> None:
    prof = EVProfile(planes=1, paths_per_plane=1, ev_count=1, floor=0, spare_field=EVField(1))
    ps = PathSet(prof, random.Random(1), qpn=1)
    (active,) = ps.slots
    backup = active ^ (1 << 16)
    ps.deny(backup, 0)
    ps.on_loss(active, 1, "test")  # the only backup is denied: nothing replaces it
    assert ps.slots == [active] and ps.stats_replacements == 0


def test_ecn_single_mark_skips_a_run_of_marks_remaps_within_the_plane() -> None:
    from openmrc.transport.paths import ECN_REMAP_RUN

    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=8)
    ps = PathSet(prof, random.Random(5), qpn=1)
    for ev in ps.slots:
        ps.on_clean_ack(ev)
    hot = ps.slots[3]
    ps.on_ecn(hot, 1)
    assert ps.state[hot] is EVState.SKIP and hot in ps.slots  # one mark: one rotation
    ps.on_clean_ack(hot)  # a clean ACK ends the run
    for _ in range(ECN_REMAP_RUN - 1):
        ps.on_ecn(hot, 2)
    assert hot in ps.slots and ps.stats_ecn_remaps == 0
    ps.on_ecn(hot, 3)
    assert hot not in ps.slots and ps.stats_ecn_remaps == 1
    assert ev_plane(ps.slots[3]) == ev_plane(hot)
    assert ps.state[hot] is EVState.GOOD and ps.usable == 8
    remaps = [(e.ev, e.reason) if isinstance(e, EVRemap) else e for e in ps.events]
    assert remaps == [(hot, "mapped out: ECN")]


def test_ecn_on_every_ev_is_congestion_not_imbalance() -> None:
    from openmrc.transport.paths import ECN_REMAP_RUN

    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=8)
    ps = PathSet(prof, random.Random(5), qpn=1)
    before = list(ps.slots)
    for _ in range(3 * ECN_REMAP_RUN):
        for ev in before:
            ps.on_ecn(ev, 1)
    assert ps.slots == before and ps.stats_ecn_remaps == 0


def test_port_down_maps_the_plane_out_without_blame_and_back() -> None:
    prof = EVProfile(planes=4, paths_per_plane=2, ev_count=16)
    ps = PathSet(prof, random.Random(1), qpn=1)
    assert ps.set_ports_down(local=0b0100)
    assert all(ev_plane(ps.next_ev()) != 2 for _ in range(64))
    victim = next(ev for ev in ps.slots if ev_plane(ev) == 2)
    ps.on_loss(victim, 5, "test")  # a loss on a down plane blames nothing
    assert ps.state[victim] is EVState.GOOD and ps.stats_bad == 0
    assert ps.set_ports_down(remote=0b1000)  # the peer's plane 3 too
    assert all(ev_plane(ps.next_ev()) in (0, 1) for _ in range(64))
    assert ps.set_ports_down(local=0, remote=0)
    assert {ev_plane(ps.next_ev()) for _ in range(16)} == {0, 1, 2, 3}
    assert not ps.set_ports_down(local=0)


def test_context_port_state_reaches_qps_and_sacks() -> None:
    t = setup_transfer(count=0)
    t.lb.b.set_port_state(5, False, 7)
    assert t.qa.paths is not None and t.qb.paths is not None and t.qb.responder is not None
    assert t.qa.paths.down == 0 and t.qb.paths.local_down == 1 << 5
    sack = t.qb.responder.sack(0, False, 0)
    assert sack.ports_down == 1 << 5
    t.lb.b.set_port_state(5, True, 9)
    assert t.qb.responder.sack(0, False, 0).ports_down == 0
    with pytest.raises(InvalidArgument, match="plane"):
        t.lb.b.set_port_state(16, False)


def test_ev_probes_back_off_per_ev_with_a_bounded_rate_per_qp() -> None:
    # A dead peer: every EV (and every backup drawn) goes bad, no probe is answered.
    interval = 25_000_000_000  # the lab driver's 25 ms
    prof = EVProfile(planes=8, ev_count=256, floor=0, probe_interval_ps=interval)
    ps = PathSet(prof, random.Random(1), qpn=1)
    for ev in list(ps.slots):
        ps.on_loss(ev, 0, "test")
    bad = len(ps.probing)
    assert bad >= 256
    sent: dict[int, list[int]] = {}
    seq = 0
    now = 0
    rounds = 0
    while ps.next_probe_at is not None and ps.next_probe_at <= 10 * 10**12:  # 10 s
        now = ps.next_probe_at
        got = ps.due_probes(now, seq)
        assert len(got) <= prof.probe_budget
        for ev, _ in got:
            sent.setdefault(ev, []).append(now)
        seq += len(got)
        rounds += 1
    total = sum(len(v) for v in sent.values())
    # Without backoff: every bad EV every 25 ms = 10,000+ probes/s; now bounded by the
    # budget (32 per interval = 1280/s) and, once backed off, far below it.
    assert total / 10 <= prof.probe_budget * 10**12 / interval
    assert total / 10 < 1000
    # Per EV, the gaps double up to 2 ** probe_backoff_max intervals.
    gaps = [b - a for times in sent.values() for a, b in itertools.pairwise(times)]
    assert max(gaps) >= (interval << prof.probe_backoff_max)
    assert max(gaps) <= (interval << prof.probe_backoff_max) + 2 * interval
    # An answer resets that EV's backoff.
    ev = next(iter(ps.probing))
    now = ps.next_probe_at or now
    while ev not in dict(got := ps.due_probes(now, seq)):
        assert ps.next_probe_at is not None
        now = ps.next_probe_at
        seq += len(got)
    ps.on_probe_reply(ev, dict(got)[ev], now)
    assert ps.probe_backoff[ev] == 0


def test_a_sack_bitmap_cannot_take_the_plane_it_arrived_on() -> None:
    from openmrc.wire.packets import SackPacket

    t = setup_transfer(count=0)
    paths = t.qa.paths
    assert paths is not None
    ev = next(e for e in paths.slots if ev_plane(e) == 6)
    sack = SackPacket(t.qa.qpn, ev, 0, 0, 0, ports_down=0xFFFF)
    t.qa.receive_packet(sack, 10)
    assert paths.remote_down == 0xFFFF & ~(1 << 6)
    assert all(ev_plane(paths.next_ev(1)) == 6 for _ in range(8))  # still sending on plane 6


def _reference_slots(prof: EVProfile, rng: random.Random) -> list[int]:
    """The documented draws, written plainly with the stdlib: per plane a random
    order of the uplinks, then each uplink's share of distinct spare values,
    then the plane's backup seed; slots interleave the planes."""
    planes, uplinks, spares = prof.plane_values(), prof.uplink_values(), prof.spare_values()
    per_plane = prof.ev_count // len(planes)
    columns = []
    for plane in planes:
        order = list(uplinks)
        rng.shuffle(order)
        rounds, extra = divmod(per_plane, len(order))
        picks = {}
        for i, u in enumerate(order):
            k = rounds + (1 if i < extra else 0)
            if k:
                picks[u] = rng.sample(spares, k)
        column = [
            make_ev(plane, u, picks[u][r])
            for r in range(rounds + (1 if extra else 0))
            for u in order
            if r < len(picks.get(u, ()))
        ]
        columns.append(column)
        rng.getrandbits(64)  # the plane's backup seed
    return [column[i] for i in range(per_plane) for column in columns]


@pytest.mark.parametrize(
    "prof",
    [
        EVProfile(),
        EVProfile(planes=8, paths_per_plane=256, ev_count=256),  # the paper's cluster
        EVProfile(planes=1, paths_per_plane=8, ev_count=256),
        EVProfile(planes=1, paths_per_plane=128, ev_count=256),
        EVProfile(planes=4, paths_per_plane=3, ev_count=4 * 100),
        # 50 of 512 spare values per uplink: repeats within an uplink are likely
        EVProfile(planes=2, paths_per_plane=2, ev_count=2 * 100, spare_field=EVField(9)),
        # 8 spare values: the stdlib samples from a pool, not a set
        EVProfile(planes=2, paths_per_plane=3, ev_count=2 * 7, spare_field=EVField(3)),
        EVProfile(plane_field=EVField(4, mask=0b0110), uplink_field=EVField(5, min=3), ev_count=64),
    ],
)
def test_ev_draws_are_the_documented_stdlib_draws(prof: EVProfile) -> None:
    # Results depend on the draws: the compact PathSet must draw the same EVs in
    # the same order, and leave the random stream where the plain version does
    # (on CPython with its own faster draws, not the stdlib's).
    assert paths._INLINE_DRAWS
    for seed in range(12):
        got, want = random.Random(seed), random.Random(seed)
        ps = PathSet(prof, got, qpn=1)
        assert ps.slots == _reference_slots(prof, want)
        assert got.getrandbits(64) == want.getrandbits(64)


def test_pathset_memory_stays_compact() -> None:
    # A simulated fabric holds tens of thousands of QPs: a QP's EV state is a few
    # arrays, not an object per EV (it was about 55 KB at the default profile).
    prof = EVProfile()  # 256 EVs over 8 planes
    rng = random.Random(1)
    PathSet(prof, rng, qpn=0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sets = [PathSet(prof, rng, qpn=i) for i in range(50)]
        idle = (tracemalloc.get_traced_memory()[0] - before) / len(sets)
        for ps in sets:  # feedback builds the EV lookup and the ECN state
            for ev in ps.slots:
                ps.on_clean_ack(ev)
            ps.on_ecn(ps.slots[0], 1)
            ps.on_loss(ps.slots[1], 2, "test")
        busy = (tracemalloc.get_traced_memory()[0] - before) / len(sets)
    finally:
        tracemalloc.stop()
    assert idle < 10_000, idle  # was about 55,600
    assert busy < 40_000, busy  # was about 68,500


def test_state_view_and_lookups_survive_many_drawn_backups() -> None:
    # Every replacement draws a backup the QP then knows: the EV -> id map grows.
    # (many uplinks: a backup is seldom on the one failed path and passed over)
    prof = EVProfile(planes=2, paths_per_plane=4096, ev_count=8, floor=0, plane_down_fraction=1.0)
    ps = PathSet(prof, random.Random(4), qpn=1)
    for _ in range(200):
        for ev in ps.slots:
            ps.on_loss(ev, 0, "test")
            ps.probing.clear()  # keep replacing: the planes never look down
    known = list(ps.state)
    assert len(known) == len(set(known)) == len(ps.state) > 8 * 100
    assert all(ps.state[ev] is EVState.ASSUMED_BAD for ev in known if ev not in ps.slots)
    assert all(ps.state.get(ev) is EVState.GOOD for ev in ps.slots)
    assert dict(ps.state.items())[known[-1]] is ps.state[known[-1]]
    stranger = next(ev for ev in range(1 << 16, 1 << 20) if ev not in ps.state)
    assert ps.state.get(stranger) is None and stranger not in ps.state
    with pytest.raises(KeyError):
        ps.state[stranger]
    ps.on_loss(stranger, 0, "test")  # feedback for an EV the QP does not know: ignored
    assert ps.state.get(stranger) is None
    # knows(ev): state_of(ev) is not None, for the active, the replaced and strangers
    assert all(ps.knows(ev) and ps.state_of(ev) is not None for ev in known)
    assert not ps.knows(stranger) and ps.state_of(stranger) is None
    assert not ps.knows(-1) and not ps.knows(1 << 40)


def test_more_than_65535_known_evs() -> None:
    # Ids past 16 bits (as many EVs as a profile may ask for, and one more).
    prof = EVProfile(planes=1, paths_per_plane=4096, ev_count=65536, floor=0)
    ps = PathSet(prof, random.Random(2), qpn=1)
    slots = ps.slots
    victim = slots[-1]
    # 16 EVs per path: the victim and its siblings on its path fail together, and
    # each draws a backup (on another path): the QP's 65,537th EV and on.
    siblings = [ev for ev in slots if ev & 0xFFFF == victim & 0xFFFF]
    ps.on_loss(victim, 0, "test")
    assert all(ps.state[ev] is EVState.ASSUMED_BAD for ev in siblings)
    assert ps.stats_replacements == len(siblings) > 1
    backups = set(ps.slots) - set(slots)
    assert len(backups) == len(siblings) and len(ps.state) == 65536 + len(siblings)
    assert all(ps.state[ev] is EVState.GOOD and ev & 0xFFFF != victim & 0xFFFF for ev in backups)
    assert all(ps.state.get(ev) is EVState.GOOD for ev in slots[:-1:97])


def _uniform_marks(ps: PathSet, p: float, rounds: int, seed: int, hot: int | None = None) -> None:
    """ACK every active EV ``rounds`` times, each ACK echoing ECN with probability
    ``p`` (``hot``, if given, echoes every time)."""
    r = random.Random(seed)
    t = 0
    for _ in range(rounds):
        for ev in ps.slots:
            t += 1
            if ev == hot or r.random() < p:
                ps.on_ecn(ev, t)
            else:
                ps.on_clean_ack(ev)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_uniform_ecn_marking_moves_no_flow(seed: int) -> None:
    # 256 EVs all marked at p = 0.2: no EV is worse than the QP's others, so none
    # is mapped out (the old run-of-4 rule made 59-81 pointless swaps here).
    ps = PathSet(EVProfile(), random.Random(seed), qpn=1)
    before = list(ps.slots)
    _uniform_marks(ps, 0.2, 200, seed)
    assert ps.stats_ecn_remaps == 0 and ps.slots == before


def test_a_path_marked_above_the_qps_average_is_moved_off() -> None:
    ps = PathSet(EVProfile(), random.Random(4), qpn=1)
    hot = ps.slots[17]
    _uniform_marks(ps, 0.2, 40, 4, hot=hot)
    assert hot not in ps.slots and ps.stats_ecn_remaps == 1
    assert ev_plane(ps.slots[17]) == ev_plane(hot)


def test_ecn_remap_is_not_reported_to_the_controller_as_a_transition() -> None:
    from openmrc.transport import CCProfile, EVRemap
    from openmrc.transport.controller import EVENT_GOOD, Controller
    from openmrc.transport.paths import ECN_REMAP_RUN

    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=8)
    c = Controller()
    c.create_ev_profile(1, prof, event_mask=EVENT_GOOD)
    c.create_cc_profile(1, CCProfile(name="fixed"))
    c.set_ev_profile_online(1)
    c.set_cc_profile_online(1)
    t = setup_transfer(attr=c.qp_attr(1, 1), count=0)
    c.add_context(t.lb.a)
    ps = t.qa.paths
    assert ps is not None
    for ev in ps.slots:
        ps.on_clean_ack(ev)
    hot = ps.slots[2]
    for _ in range(ECN_REMAP_RUN):
        ps.on_ecn(hot, 5)
    assert ps.stats_ecn_remaps == 1
    logged = [e for e in t.lb.a.events if isinstance(e, EVRemap)]
    assert [(e.ev, e.replacement, e.reason) for e in logged] == [
        (hot, ps.slots[2], "mapped out: ECN")
    ]
    assert c.poll_events() == []  # no GOOD -> GOOD "transition"


def test_denying_an_active_ev_refills_its_slot_from_the_same_plane() -> None:
    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=8)
    ps = PathSet(prof, random.Random(3), qpn=1)
    ev = ps.slots[5]
    ps.deny(ev, 1)
    assert ev not in ps.slots and ps.usable == 8  # not a dead slot
    assert ev_plane(ps.slots[5]) == ev_plane(ev) and ps.stats_replacements == 1
    ps.allow(ev, 2)
    assert ev not in ps.slots and ps.usable == 8  # back among the backups


def test_a_denied_backup_passed_over_rejoins_the_pool_when_allowed() -> None:
    a = [make_ev(0, p) for p in range(4)]
    denied, spare = make_ev(0, 4), make_ev(0, 5)
    prof = EVProfile(explicit=[*a, denied, spare], ev_count=4, floor=0, plane_down_fraction=1.0)
    ps = PathSet(prof, random.Random(1), qpn=1)
    ps.deny(denied, 0)
    ps.on_loss(a[0], 1, "test")  # passes over the denied backup, takes the spare
    assert ps.slots[0] == spare
    ps.allow(denied, 2)
    ps.on_loss(a[1], 3, "test")  # the allowed backup is still there
    assert ps.slots[1] == denied and ps.usable == 4


def _flap(
    ps: PathSet, ev: int, up: int, down: int, cycles: int, stable: int, start: int = 0
) -> tuple[int, int]:
    """Drive ``ev`` over a path that is up ``up`` probe intervals and down
    ``down``, ``cycles`` times, then up for ``stable`` intervals: a packet is
    lost on it whenever it is GOOD while the path is down; probes are answered
    while it is up.  Time starts after interval ``start``.  Returns (failures
    while flapping, interval it was last brought back, or -1)."""
    step = ps.profile.probe_interval_ps
    seq = 0
    failures = 0
    back_at = -1
    for k in range(cycles * (up + down) + stable):
        now = (start + k + 1) * step
        path_up = k >= cycles * (up + down) or k % (up + down) < up
        if not path_up and ps.state[ev] is EVState.GOOD:
            ps.on_loss(ev, now, "test")
            failures += 1
        for pev, s in ps.due_probes(now, seq):
            seq = s + 1
            if path_up:
                was = ps.state[pev]
                ps.on_probe_reply(pev, s, now)
                if was is not EVState.GOOD and ps.state[pev] is EVState.GOOD:
                    back_at = k
    return failures, back_at


def test_a_flapping_path_is_kept_out_longer_each_time_then_returns() -> None:
    from openmrc.transport.paths import FLAP_MAX_DOUBLINGS

    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=8, floor=0)
    ps = PathSet(prof, random.Random(1), qpn=1)
    ev = ps.slots[0]
    # Up 30 intervals, down 10, 40 times: without memory the EV came back after
    # 3 probes every cycle and lost a packet on every flap (40 failures).
    failures, _ = _flap(ps, ev, up=30, down=10, cycles=40, stable=0)
    assert failures <= 4
    assert ps.state[ev] is EVState.ASSUMED_BAD
    assert ps.probes_needed(ev) >= 4 * prof.probe_successes  # held down longer each time
    assert ps.probes_needed(ev) <= prof.probe_successes << FLAP_MAX_DOUBLINGS
    # Once it stops flapping it returns (within the longest hold-down and backoff).
    _, back = _flap(ps, ev, up=1, down=0, cycles=0, stable=400, start=40 * 40)
    assert ps.state[ev] is EVState.GOOD and 0 <= back <= 200


def test_flap_memory_decays_after_a_stable_period() -> None:
    from openmrc.transport.paths import FLAP_DECAY_INTERVALS

    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=8, floor=0)
    ps = PathSet(prof, random.Random(1), qpn=1)
    ev = ps.slots[0]
    step = prof.probe_interval_ps
    ps.on_loss(ev, 0, "test")
    assert ps.probes_needed(ev) == prof.probe_successes  # a first failure: as before
    _flap(ps, ev, up=1, down=0, cycles=0, stable=10)  # three probes: back
    assert ps.state[ev] is EVState.GOOD
    ps.on_loss(ev, 11 * step, "test")  # again at once: twice the probes
    assert ps.probes_needed(ev) == 2 * prof.probe_successes
    ps.probing[ev] = 0
    for k in range(2 * prof.probe_successes):
        (probe,) = ps.due_probes(10**15 + k * 64 * step, k)
        ps.on_probe_reply(ev, probe[1], 10**15 + k * 64 * step)
    assert ps.state[ev] is EVState.GOOD
    # Two stable periods later both failures are forgiven: a new one counts as the first.
    later = 10**15 + 2 * FLAP_DECAY_INTERVALS * step + 64 * 64 * step
    ps.on_loss(ev, later, "test")
    assert ps.probes_needed(ev) == prof.probe_successes


def test_ports_freeing_in_a_steady_pattern_still_use_every_ev_of_a_plane() -> None:
    # 16 EVs, two per plane; one port frees at a time, in a repeating order.
    # Before, the rotation reached the same EV of planes 0, 1, 2, 4 and 6 every
    # time and never used their other EV.
    evs = [make_ev(p, 0) for p in range(8)] + [make_ev(p, 1) for p in range(8)]
    ps = PathSet(EVProfile(explicit=evs), random.Random(1), qpn=1)
    pattern = [1, 3, 0, 3, 6, 4, 2, 6]
    use = dict.fromkeys(evs, 0)
    for t in range(800):
        use[ps.next_ev(0xFF & ~(1 << pattern[t % len(pattern)]))] += 1
    for p in set(pattern):
        a, b = use[make_ev(p, 0)], use[make_ev(p, 1)]
        assert abs(a - b) <= 1, (p, a, b)


def _plane_counts(ps: PathSet, packets: int) -> list[int]:
    counts = [0, 0]
    for _ in range(packets):
        counts[ev_plane(ps.next_ev())] += 1
    return counts


def test_a_failed_path_takes_its_siblings_and_backups_avoid_it() -> None:
    # 16 EVs per plane over 4 uplinks: 4 EVs (siblings) on each physical path.
    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=32)
    ps = PathSet(prof, random.Random(1), qpn=1)
    victim = ps.slots[0]
    path = victim & 0xFFFF
    siblings = [ev for ev in ps.slots if ev & 0xFFFF == path]
    assert len(siblings) == 4
    ps.on_loss(victim, 0, "test")
    bad = [e for e in ps.events if isinstance(e, EVEvent) and e.new is EVState.ASSUMED_BAD]
    assert sorted(e.ev for e in bad) == sorted(siblings)
    assert {e.reason for e in bad if e.ev != victim} == {"path failed: sibling EV lost"}
    # every slot refilled, none on the failed path, the plane still 16 EVs
    assert ps.usable == 32 and not [ev for ev in ps.slots if ev & 0xFFFF == path]
    assert sum(1 for ev in ps.slots if ev_plane(ev) == ev_plane(victim)) == 16
    # the plane's share: 3 of its 4 uplinks
    assert ps.plane_shares()[ev_plane(victim)] == 0.75
    assert ps.plane_shares()[1 - ev_plane(victim)] == 1.0


def test_a_degraded_plane_sends_its_share_while_it_shows_congestion() -> None:
    prof = EVProfile(planes=2, paths_per_plane=4, ev_count=32)
    ps = PathSet(prof, random.Random(1), qpn=1)
    assert _plane_counts(ps, 640) == [320, 320]
    victim = next(ev for ev in ps.slots if ev_plane(ev) == 0)
    ps.on_loss(victim, 0, "test")
    _plane_counts(ps, 200)  # past the hold right after the failure
    # no congestion on the degraded plane: it keeps its full share (room left)
    assert _plane_counts(ps, 640) == [320, 320]
    # congestion on it: 3/4 of the other plane's packets for 32 rotations
    ps.on_ecn(next(ev for ev in ps.slots if ev_plane(ev) == 0))
    a, b = _plane_counts(ps, 700)
    assert abs(a / b - 0.75) < 0.02, (a, b)
    # the failed path answers its probes again: equal shares
    for ev in list(ps.probing):
        ps.force_good(ev, 10)
    assert ps.plane_shares()[0] == 1.0
    assert _plane_counts(ps, 640) == [320, 320]
