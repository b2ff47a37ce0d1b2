"""The per-node controller: profiles with ids and a lifecycle, deny lists, events, probes."""

from __future__ import annotations

import pytest

from openmrc.transport import CCProfile, EVProfile, InvalidArgument, InvalidState
from openmrc.transport.controller import (
    EVENT_ASSUMED_BAD,
    EVENT_DENIED,
    Controller,
    ProfileState,
)
from openmrc.transport.ev import ev_plane
from openmrc.transport.paths import EVState

from .helpers import assert_exact, run_transfer, setup_transfer


def _controller() -> Controller:
    c = Controller()
    c.create_ev_profile(7, EVProfile(planes=4, paths_per_plane=4, ev_count=32))
    c.create_cc_profile(3, CCProfile(name="fixed"))
    return c


def test_profiles_have_ids_and_a_lifecycle() -> None:
    c = _controller()
    assert c.ev_profile_state(7) is ProfileState.OFFLINE
    with pytest.raises(InvalidState, match="ev_profile_id"):
        c.qp_attr(7, 3)
    c.set_ev_profile_online(7)
    with pytest.raises(InvalidState, match="cc_profile_id"):
        c.qp_attr(7, 3)
    c.set_cc_profile_online(3)
    attr = c.qp_attr(7, 3, mpr=16)
    assert attr.mpr == 16 and attr.ev_profile is c._ev[7].profile
    with pytest.raises(InvalidArgument, match="profile_id: EV profile 7 already exists"):
        c.create_ev_profile(7, EVProfile())
    with pytest.raises(InvalidArgument, match="profile_id: no EV profile 9"):
        c.deny_plane(9, 0)
    with pytest.raises(InvalidArgument, match="EVProfile.ev_count"):
        c.create_ev_profile(8, EVProfile(planes=8, ev_count=12))
    t = setup_transfer(attr=attr, count=3)
    c.add_context(t.lb.a)
    with pytest.raises(InvalidState, match="in use by QPs"):
        c.destroy_ev_profile(7)
    with pytest.raises(InvalidState, match="in use by QPs"):
        c.destroy_cc_profile(3)
    c.set_ev_profile_online(7, False)
    with pytest.raises(InvalidState):
        c.qp_attr(7, 3)
    t.lb.a.destroy_qp(t.qa)
    c.destroy_ev_profile(7)


def test_one_plane_deny_covers_every_qp_of_the_profile_now_and_later() -> None:
    c = _controller()
    c.set_ev_profile_online(7)
    c.set_cc_profile_online(3)
    attr = c.qp_attr(7, 3)
    t = setup_transfer(attr=attr, count=20)
    c.add_context(t.lb.a)
    ctx = t.lb.a
    other = ctx.alloc_pd().create_qp(ctx.create_cq())
    other.connect(0x999, attr, peer="b")
    c.deny_plane(7, 2)
    late = ctx.alloc_pd().create_qp(ctx.create_cq())
    late.connect(0x998, attr, peer="b")  # created after the deny
    for qp in (t.qa, other, late):
        assert qp.paths is not None
        assert all(ev_plane(qp.paths.next_ev()) != 2 for _ in range(64))
    run_transfer(t)
    assert_exact(t)
    assert 2 not in {ev_plane(ev) for ev in t.lb.stats("ab").evs_used}
    c.allow_plane(7, 2)
    assert late.paths is not None
    assert 2 in {ev_plane(late.paths.next_ev()) for _ in range(64)}
    with pytest.raises(InvalidArgument, match="plane: 2 is not denied"):
        c.allow_plane(7, 2)
    with pytest.raises(InvalidArgument, match="plane: 5 is not a plane"):
        c.deny_plane(7, 5)


def test_ev_deny_reaches_existing_and_new_qps_and_allow_undoes_it() -> None:
    c = _controller()
    c.set_ev_profile_online(7)
    c.set_cc_profile_online(3)
    attr = c.qp_attr(7, 3)
    t = setup_transfer(attr=attr, count=0)
    c.add_context(t.lb.a)
    assert t.qa.paths is not None
    ev = t.qa.paths.slots[0]
    c.deny_ev(7, ev)
    late = t.lb.a.alloc_pd().create_qp(t.lb.a.create_cq())
    late.connect(0x999, attr, peer="b")
    for qp in (t.qa, late):
        assert qp.paths is not None and qp.paths.state[ev] is EVState.DENIED
    c.allow_ev(7, ev)
    assert t.qa.paths.state[ev] is EVState.GOOD and late.paths is not None
    assert late.paths.state[ev] is EVState.GOOD
    with pytest.raises(InvalidArgument, match="ev: 0x5 is not in EV profile 7"):
        c.deny_ev(7, 0x5)  # plane 5: the profile has 4 planes


def test_event_queue_masks_and_counts_drops() -> None:
    c = Controller(event_depth=2)
    c.create_ev_profile(1, EVProfile(planes=4, paths_per_plane=8, ev_count=32, floor=0))
    c.create_cc_profile(1, CCProfile(name="fixed"))
    c.set_ev_profile_online(1)
    c.set_cc_profile_online(1)
    t = setup_transfer(attr=c.qp_attr(1, 1), count=0)
    c.add_context(t.lb.a)
    paths = t.qa.paths
    assert paths is not None
    evs = paths.slots[:5]
    c.deny_ev(1, evs[0])  # DENIED: not in the default mask
    for i, ev in enumerate(evs[1:]):
        paths.on_loss(ev, 10 + i, "test")  # four ASSUMED_BAD events
    got = c.poll_events()
    assert [(e.event.ev, e.event.new, e.dropped) for e in got] == [
        (evs[1], EVState.ASSUMED_BAD, 0),
        (evs[2], EVState.ASSUMED_BAD, 0),
    ]
    assert c.events_dropped == 2
    c.set_event_mask(1, EVENT_DENIED | EVENT_ASSUMED_BAD)
    c.deny_ev(1, evs[1])
    paths.on_loss(paths.slots[10], 20, "test")
    got = c.poll_events()
    # The first event after the drops says how many were lost before it.
    assert [(e.event.new, e.dropped, e.profile_id) for e in got] == [
        (EVState.DENIED, 2, 1),
        (EVState.ASSUMED_BAD, 0, 1),
    ]


def test_probes_return_an_rtt_or_a_timeout_and_port_status() -> None:
    c = Controller()
    t = setup_transfer(count=0)
    c.add_context(t.lb.a)
    a = c.probe("h9", 0x13, now=100, timeout_ps=1000)
    b = c.probe("h9", 0x23, now=150, timeout_ps=1000)
    sent = c.probes_to_send()
    assert [(p.probe_id, p.dest, p.ev) for p in sent] == [(a, "h9", 0x13), (b, "h9", 0x23)]
    assert c.probes_to_send() == []
    assert c.get_timer() == 1100
    c.on_probe_reply(a, 400)
    c.handle_timer(1150)
    c.on_probe_reply(b, 1200)  # too late: ignored
    assert [(r.probe_id, r.rtt_ps) for r in c.poll_probe_results()] == [(a, 300), (b, None)]
    assert c.get_timer() is None
    c.set_port_state(t.lb.a, 3, False, 5)
    assert c.port_status(t.lb.a) == 1 << 3
    assert t.qa.paths is not None and t.qa.paths.local_down == 1 << 3
    with pytest.raises(InvalidArgument, match="timeout_ps"):
        c.probe("h9", 1, 0, 0)


def test_match_equal_covers_qps_with_an_equal_profile_object() -> None:
    import copy

    for match_equal in (False, True):
        c = Controller(match_equal=match_equal)
        prof = EVProfile(planes=4, paths_per_plane=4, ev_count=32)
        c.create_ev_profile(0, prof)
        c.set_ev_profile_online(0)
        c.create_cc_profile(0, CCProfile(name="fixed"))
        c.set_cc_profile_online(0)
        attr = c.qp_attr(0, 0)
        attr.ev_profile = copy.deepcopy(prof)  # equal, not the same object (a peer's hello)
        t = setup_transfer(attr=attr, count=0)
        c.add_context(t.lb.a)
        c.deny_plane(0, 1)
        assert t.qa.paths is not None
        assert c.qps_using(0) == ([t.qa] if match_equal else [])
        assert t.qa.paths.denied_planes == (0b10 if match_equal else 0)


def test_deliver_event_takes_events_a_driver_drained_itself() -> None:
    c = Controller()
    c.create_ev_profile(1, EVProfile(planes=4, paths_per_plane=8, ev_count=32, floor=0))
    c.create_cc_profile(1, CCProfile(name="fixed"))
    c.set_ev_profile_online(1)
    c.set_cc_profile_online(1)
    t = setup_transfer(attr=c.qp_attr(1, 1), count=0)
    c.add_context(t.lb.a)
    assert t.qa.paths is not None
    ev = t.qa.paths.slots[0]
    t.qa.paths.on_loss(ev, 10, "test")
    drained = list(t.lb.a.events)
    t.lb.a.events.clear()  # the driver's own drain
    for item in drained:
        c.deliver_event(t.lb.a, item)
    assert c.queued_events() == 1
    got = c.poll_events()
    assert [(e.event.ev, e.event.new, e.profile_id) for e in got] == [(ev, EVState.ASSUMED_BAD, 1)]
    assert c.ev_profile_ids() == [1] and c.event_mask(1) == EVENT_ASSUMED_BAD | 1 << EVState.GOOD


def _online() -> tuple[Controller, object]:
    c = _controller()
    c.set_ev_profile_online(7)
    c.set_cc_profile_online(3)
    return c, c.qp_attr(7, 3)


def test_replace_ev_puts_a_same_plane_ev_in_the_slot_now_and_in_later_qps() -> None:
    from openmrc.transport.ev import make_ev

    c, attr = _online()
    t = setup_transfer(attr=attr, count=20)  # type: ignore[arg-type]
    c.add_context(t.lb.a)
    paths = t.qa.paths
    assert paths is not None
    old = paths.slots[6]
    new = next(
        make_ev(ev_plane(old), u, s)
        for u in range(4)
        for s in range(8)
        if paths.state.get(make_ev(ev_plane(old), u, s)) is None
    )
    assert c.replace_ev(7, old, new, now=5) == 1
    assert paths.slots[6] == new and paths.state[new] is EVState.GOOD
    assert paths.state[old] is EVState.GOOD and not paths.in_slot(old)  # now a backup
    assert c.poll_events() == []  # a slot change, not a state transition
    run_transfer(t)
    assert_exact(t)
    assert new in t.lb.stats("ab").evs_used and old not in t.lb.stats("ab").evs_used
    with pytest.raises(InvalidArgument, match="new_ev: .* is not in the plane"):
        c.replace_ev(7, new, new ^ 1)
    with pytest.raises(InvalidArgument, match="new_ev: .* is not in EV profile 7"):
        c.replace_ev(7, new, new | 0xF0)  # uplink 15: the profile has 4


def test_replace_ev_of_an_explicit_profile_reaches_qps_made_later() -> None:
    c = Controller()
    evs = [0x10, 0x21, 0x30, 0x41]
    c.create_ev_profile(2, EVProfile(explicit=evs, floor=0))
    c.create_cc_profile(3, CCProfile(name="fixed"))
    c.set_ev_profile_online(2)
    c.set_cc_profile_online(3)
    attr = c.qp_attr(2, 3)
    t = setup_transfer(attr=attr, count=0)
    c.add_context(t.lb.a)
    assert c.replace_ev(2, 0x21, 0x7771) == 1
    late = t.lb.a.alloc_pd().create_qp(t.lb.a.create_cq())
    late.connect(0x999, attr, peer="b")
    assert late.paths is not None and late.paths.slots == [0x10, 0x7771, 0x30, 0x41]
    c.deny_ev(2, 0x7771)  # the replacement belongs to the profile now
    assert late.paths.state[0x7771] is EVState.DENIED


def test_set_ev_state_good_brings_an_assumed_bad_ev_back_without_probes() -> None:
    c, attr = _online()
    t = setup_transfer(attr=attr, count=0)  # type: ignore[arg-type]
    c.add_context(t.lb.a)
    paths = t.qa.paths
    assert paths is not None
    ev = paths.slots[3]
    paths.on_loss(ev, 10, "test")
    paths.flaps[ev] = 3  # it flapped: held down for 4x the probes
    assert paths.probes_needed(ev) == 4 * attr.ev_profile.probe_successes  # type: ignore[attr-defined]
    assert paths.state[ev] is EVState.ASSUMED_BAD and ev in paths.probing
    c.set_ev_state(7, ev, EVState.GOOD, 20)
    assert paths.state[ev] is EVState.GOOD and ev not in paths.probing
    assert paths.probes_needed(ev) == attr.ev_profile.probe_successes  # type: ignore[attr-defined]
    c.set_ev_state(7, ev, EVState.DENIED, 30)
    assert paths.state[ev] is EVState.DENIED and ev in c.denied(7)[0]
    c.set_ev_state(7, ev, EVState.GOOD, 40)
    assert paths.state[ev] is EVState.GOOD and ev not in c.denied(7)[0]
    with pytest.raises(InvalidArgument, match="state: only GOOD or DENIED"):
        c.set_ev_state(7, ev, EVState.SKIP)


def test_queries_report_each_qps_ev_array_and_an_evs_state() -> None:
    c, attr = _online()
    t = setup_transfer(attr=attr, count=0)  # type: ignore[arg-type]
    c.add_context(t.lb.a)
    paths = t.qa.paths
    assert paths is not None
    bad = paths.slots[4]
    paths.on_loss(bad, 10, "test")
    array = c.query_ev_array(7)
    assert [(e.qpn, e.slot, e.ev) for e in array] == [
        (t.qa.qpn, i, ev) for i, ev in enumerate(paths.slots)
    ]
    assert all(e.state is EVState.GOOD and e.context == 0 for e in array)
    (entry,) = c.query_ev_state(7, bad)
    assert (entry.qpn, entry.slot, entry.state) == (t.qa.qpn, None, EVState.ASSUMED_BAD)
    (entry,) = c.query_ev_state(7, paths.slots[4])
    assert (entry.slot, entry.state) == (4, EVState.GOOD)
