"""Scenario files with collectives, flow dependencies and per-flow transport settings."""

from __future__ import annotations

import pytest

from openmrc.pipeline.scenario import ScenarioError, parse
from tests.narrow import known, mrc_flow

FABRIC = {"planes": 2, "t0s": 2, "hosts_per_t0": 2, "t1s": 2}


def test_allreduce_scenario_runs_and_reports_busbw() -> None:
    sc = parse(
        {
            "fabric": FABRIC,
            "workload": {"kind": "allreduce", "size": "1MiB", "channels": 2, "message": "256KiB"},
        }
    )
    res = sc.run()
    assert res.all_ok
    (c,) = res.collectives
    assert c["kind"] == "allreduce" and c["ranks"] == 4 and c["steps"] == 6
    assert c["busbw_gbps"] > 0
    assert res.as_dict()["collectives"] == res.collectives


def test_training_scenario_with_placement_and_straggler() -> None:
    sc = parse(
        {
            "fabric": FABRIC,
            "workload": {
                "kind": "training",
                "placement": [3, 1, 0],
                "collectives": [{"kind": "allgather", "size": "96KiB"}],
                "iterations": 2,
                "compute_us": 5,
                "straggler": 1,
                "straggler_us": 20,
            },
        }
    )
    res = sc.run()
    assert res.all_ok
    (c,) = res.collectives
    assert c["ranks"] == 3 and len(c["iteration_us"]) == 2
    assert c["iteration_us"][0] >= 25.0
    assert {f.src for f in res.flows} == {0, 1, 3}


def test_flow_dependencies_qps_and_settings() -> None:
    sc = parse(
        {
            "fabric": FABRIC,
            "workload": {
                "kind": "flows",
                "flows": [
                    {"src": 0, "dst": 1, "size": "64KiB", "qps": 4, "message": "16KiB"},
                    {
                        "src": 1,
                        "dst": 2,
                        "size": "64KiB",
                        "after": [0],
                        "gap_us": 3,
                        "settings": {"ev_count": 2},
                    },
                ],
            },
        }
    )
    exp = sc.build()
    res = exp.run()
    assert res.all_ok
    a, b = res.flows
    assert b.started_ps == known(a.rx_finish_ps) + 3_000_000
    assert len(mrc_flow(exp.flows[0]).qas) == 4
    assert mrc_flow(exp.flows[1]).qas[0].attr.ev_profile.ev_count == 2


def test_a_flows_ev_profile_is_given_in_its_settings() -> None:
    """One table for a flow's own transport settings: its EV profile is
    ``settings.ev_profile``; the old flow key is refused with one line naming it."""
    flow = {"src": 0, "dst": 1, "size": "64KiB"}
    profile = {"explicit": ["0x00", "0x10"], "ev_count": 1, "floor": 0}
    sc = parse(
        {
            "fabric": FABRIC,
            "workload": {
                "kind": "flows",
                "flows": [{**flow, "settings": {"ev_profile": profile, "timeout": 8}}],
            },
        }
    )
    (spec,) = sc.flows
    assert spec.ev_profile is not None and spec.ev_profile.explicit == [0x00, 0x10]
    assert spec.settings == {"timeout": 8}
    exp = sc.build()
    assert exp.run().all_ok
    assert mrc_flow(exp.flows[0]).qas[0].attr.ev_profile.explicit == [0x00, 0x10]
    with pytest.raises(ScenarioError) as err:
        parse(
            {
                "fabric": FABRIC,
                "workload": {"kind": "flows", "flows": [{**flow, "ev_profile": profile}]},
            }
        )
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("workload.flows[0].ev_profile: ")
    assert "workload.flows[0].settings.ev_profile" in msg
    with pytest.raises(ScenarioError, match=r"settings\.ev_profile\.ev_count"):
        parse(
            {
                "fabric": FABRIC,
                "workload": {
                    "kind": "flows",
                    "flows": [{**flow, "settings": {"ev_profile": {"ev_count": -1}}}],
                },
            }
        )


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            {"kind": "allreduce", "size": "1MiB", "rings": 2},
            "workload.rings: not a key of a allreduce",
        ),
        ({"kind": "allreduce", "size": "1MiB", "ranks": 9}, "workload.ranks: 9 ranks"),
        (
            {"kind": "allreduce", "size": "1MiB", "ranks": 1},
            "workload.ranks: expected an integer >= 2",
        ),
        ({"kind": "allreduce", "size": 3}, "workload.size"),
        ({"kind": "alltoall", "size": "1MiB", "placement": [0, 9]}, "workload.placement: host 9"),
        ({"kind": "alltoall", "size": "1MiB", "placement": [0, 0]}, "placement: two ranks"),
        (
            {"kind": "sendrecv", "size": "1MiB", "settings": {"mtu": 1024}},
            "settings.mtu: is experiment-wide",
        ),
        (
            {"kind": "sendrecv", "size": "1MiB", "settings": {"colour": 1}},
            "settings.colour: unknown",
        ),
        (
            {"kind": "sendrecv", "size": "1MiB", "settings": {"ev_count": "x"}},
            "workload.settings.ev_count: expected int",
        ),
        (
            {"kind": "sendrecv", "size": "1MiB", "settings": {"cc_params": 5}},
            "workload.settings.cc_params: must be a table",
        ),
        (
            {"kind": "sendrecv", "size": "1MiB", "settings": {"timeout": 99}},
            "workload settings.timeout: must be an int in 0..24, got 99",
        ),
        (
            {"kind": "allreduce", "size": "1MiB", "start_us": float("nan")},
            "workload.start_us: expected a number",
        ),
        (
            {"kind": "training", "collectives": [{"kind": "bcast", "size": 10}]},
            "collectives[0].kind",
        ),
        ({"kind": "training"}, "workload.collectives: must be a non-empty list"),
        (
            {"kind": "flows", "flows": [{"src": 0, "dst": 1, "size": 9, "after": [0]}]},
            "flows[0].after: 0 is not another flow",
        ),
        (
            {
                "kind": "flows",
                "flows": [
                    {"src": 0, "dst": 1, "size": 9, "after": [1]},
                    {"src": 1, "dst": 0, "size": 9, "after": [0]},
                ],
            },
            "cycle",
        ),
        ({"kind": "flows", "flows": [{"src": 0, "dst": 1, "size": 9, "qps": 0}]}, "flows[0].qps"),
    ],
)
def test_workload_mistakes_name_the_key(workload: dict, message: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        parse({"fabric": FABRIC, "workload": workload})
    assert message in str(exc.value)
