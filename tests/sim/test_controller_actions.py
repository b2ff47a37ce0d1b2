"""Scenario [[controller]] actions: timed deny/allow on a host's MRC controller."""

from __future__ import annotations

from typing import Any

import pytest

from openmrc.pipeline.scenario import ScenarioError, parse
from openmrc.transport.ev import ev_plane
from openmrc.wire.packets import DataPacket

US = 1_000_000


def _data(controller: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "fabric": {"planes": 4, "t0s": 2, "hosts_per_t0": 1, "t1s": 2},
        "workload": {"kind": "single", "src": 0, "dst": 1, "size": "12MiB"},
        "controller": controller,
    }


def test_deny_plane_at_a_time_then_allow_it() -> None:
    sc = parse(
        _data(
            [
                {"at_us": 30, "host": 0, "action": "deny_plane", "plane": 1},
                {"at_us": 80, "host": 0, "action": "allow_plane", "plane": 1},
            ]
        )
    )
    exp = sc.build()
    sent: list[tuple[int, int]] = []

    def tap(host: int, peer: int, pkt: object, is_sent: bool, now: int) -> None:
        if is_sent and type(pkt) is DataPacket:
            sent.append((now, ev_plane(pkt.ev)))

    exp.hosts[0].taps.append(tap)
    r = exp.run()
    assert r.all_ok
    assert {p for t, p in sent if t < 30 * US} == {0, 1, 2, 3}
    assert {p for t, p in sent if 31 * US < t < 80 * US} == {0, 2, 3}
    assert 1 in {p for t, p in sent if t > 81 * US}
    kinds = [(f["kind"], f["time_ps"]) for f in r.fabric["faults"]]
    assert ("controller_deny_plane", 30 * US) in kinds
    assert ("controller_allow_plane", 80 * US) in kinds


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ({"at_us": 1, "host": 0, "action": "deny_path", "plane": 1}, r"controller\[0\]\.action"),
        ({"at_us": 1, "host": 9, "action": "deny_plane", "plane": 1}, r"controller\[0\]\.host"),
        ({"at_us": 1, "host": 0, "action": "deny_plane", "plane": 7}, r"controller\[0\]\.plane"),
        ({"at_us": 1, "host": 0, "action": "deny_ev", "ev": "0x7"}, r"controller\[0\]\.ev"),
        ({"at_us": 1, "host": 0, "action": "deny_ev", "ev": "zz"}, r"controller\[0\]\.ev"),
        ({"at_us": 1, "host": 0, "action": "allow_plane", "plane": 1}, r"not denied before"),
        ({"at_us": 1, "host": 0, "action": "deny_plane", "profile": 4}, r"\.profile"),
        ({"at_us": 1, "host": 0, "action": "deny_plane", "plan": 1}, r"controller\[0\]\.plan"),
        ({"host": 0, "action": "deny_plane", "plane": 1}, r"controller\[0\]\.at_us"),
    ],
)
def test_bad_controller_actions_name_the_key(action: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse(_data([action]))


def test_replace_ev_and_set_ev_state_actions() -> None:
    from openmrc.transport.paths import EVState

    sc = parse(_data([]))
    exp = sc.build()
    exp.run(until_ps=1)  # the QPs exist
    qa = exp.flows[0].qa  # type: ignore[attr-defined]
    old = qa.paths.slots[2]
    new = next(old ^ (s << 16) for s in range(1, 64) if qa.paths.state.get(old ^ (s << 16)) is None)
    sc = parse(
        _data(
            [
                {"at_us": 20, "host": 0, "action": "replace_ev", "ev": hex(old), "new_ev": new},
                {"at_us": 30, "host": 0, "action": "set_ev_state", "ev": new, "state": "DENIED"},
                {"at_us": 40, "host": 0, "action": "set_ev_state", "ev": new, "state": "GOOD"},
            ]
        )
    )
    exp = sc.build()
    r = exp.run()
    assert r.all_ok
    qa = exp.flows[0].qa  # type: ignore[attr-defined]
    # new_ev took old's slot; denied, its slot was refilled from the plane's
    # backups (old, given back first); allowed, it is a backup itself.
    assert qa.paths.state[new] is EVState.GOOD and not qa.paths.in_slot(new)
    assert qa.paths.slots[2] == old
    kinds = [f["kind"] for f in r.fabric["faults"]]
    assert kinds == [
        "controller_replace_ev",
        "controller_set_ev_state",
        "controller_set_ev_state",
    ]
    with pytest.raises(ScenarioError, match=r"controller\[0\]\.state"):
        parse(
            _data([{"at_us": 1, "host": 0, "action": "set_ev_state", "ev": old, "state": "BAD"}])
        ).build()
    with pytest.raises(ScenarioError, match=r"controller\[0\]\.new_ev: .* not in the plane"):
        parse(
            _data([{"at_us": 1, "host": 0, "action": "replace_ev", "ev": old, "new_ev": old ^ 1}])
        ).build()
