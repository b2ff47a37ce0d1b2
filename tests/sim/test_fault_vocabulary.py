"""Fault groups (selectors), per-direction loss, flap schedules, warnings for faults that never fire."""

from __future__ import annotations

from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.pipeline.scenario import ScenarioError, parse

FABRIC = {"planes": 2, "t0s": 2, "hosts_per_t0": 2, "t1s": 2}
ONE_FLOW = {"kind": "single", "src": 0, "dst": 3, "size": "64KiB"}


def _build(faults: list[dict], run: dict | None = None, workload: dict | None = None):
    return parse(
        {"fabric": FABRIC, "workload": workload or ONE_FLOW, "faults": faults, "run": run or {}}
    )


def test_every_nic_ingress_of_every_plane_in_one_entry() -> None:
    sc = _build(
        [
            {
                "at_us": 0,
                "kind": "link_loss",
                "links": "host",
                "direction": "down",
                "probability": 0.01,
            }
        ]
    )
    exp = sc.build()
    exp.run()
    host_links = [lk for lk in exp.fabric.links.values() if lk.info.a.startswith("h")]
    assert len(host_links) == 4 * 2
    for lk in exp.fabric.links.values():
        is_host = lk in host_links
        assert lk.down_port.loss == (0.01 if is_host else 0.0)  # T0 -> NIC: the ingress
        assert lk.up_port.loss == 0.0  # NIC egress and T0 -> T1 untouched
    assert sum(1 for f in exp.fabric.metrics.faults if f["kind"] == "link_loss") == 8


def test_link_groups_filter_by_plane_host_and_switch() -> None:
    exp = _build(
        [
            {"at_us": 0, "kind": "link_down", "links": "fabric", "planes": [1], "t1s": 0},
            {
                "at_us": 0,
                "kind": "link_silent",
                "links": "host",
                "hosts": [2],
                "planes": 0,
                "direction": "up",
            },
        ]
    ).build()
    exp.sim.run(0)
    down = sorted(lk.name for lk in exp.fabric.links.values() if not lk.up)
    assert down == ["p1t0x0-p1t1x0", "p1t0x1-p1t1x0"]
    silent = [lk.name for lk in exp.fabric.links.values() if lk.up_port.silent]
    assert silent == ["h2-p0t0x1"] and not any(
        lk.down_port.silent for lk in exp.fabric.links.values()
    )


def test_switch_and_nic_port_groups() -> None:
    exp = _build(
        [
            {"at_us": 0, "kind": "switch_blackhole", "switches": "t1", "planes": [0]},
            {"at_us": 0, "kind": "nic_port_down", "hosts": [1, 2], "planes": [1]},
        ]
    ).build()
    exp.sim.run(0)
    states = {n: sw.state for n, sw in exp.fabric.switches.items() if sw.state != "up"}
    assert states == {"p0t1x0": "blackhole", "p0t1x1": "blackhole"}
    assert [lk.name for lk in exp.fabric.links.values() if not lk.up] == [
        "h1-p1t0x0",
        "h2-p1t0x1",
    ]


def test_flap_with_period_down_time_and_count() -> None:
    exp = _build(
        [
            {
                "at_us": 10,
                "kind": "flap",
                "target": "p0t0x0-p0t1x0",
                "period_us": 20,
                "down_us": 5,
                "count": 3,
            }
        ],
        run={"until_us": 200},
        workload={**ONE_FLOW, "size": "8MiB"},
    ).build()
    exp.run(200_000_000)
    log = [(f["kind"], f["time_ps"] // 1_000_000) for f in exp.fabric.metrics.faults]
    assert log == [
        ("flap_down", 10),
        ("flap_up", 15),
        ("flap_down", 30),
        ("flap_up", 35),
        ("flap_down", 50),
        ("flap_up", 55),
    ]


def test_fault_after_the_end_and_time_cap_are_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    res = _build([{"at_us": 1e6, "kind": "switch_down", "target": "p0t1x0"}]).run()
    assert res.all_ok
    (w,) = res.warnings
    assert "never fired" in w and "switch" in w and "1e+06 us" in w
    assert res.as_dict()["warnings"] == res.warnings
    res = _build([], run={"until_us": 2}).run()
    assert any("time cap" in w and "1 of 1 flows unfinished" in w for w in res.warnings)
    path = tmp_path / "late.toml"
    path.write_text(
        "[fabric]\nplanes = 2\nt0s = 2\nhosts_per_t0 = 2\nt1s = 2\n"
        '[workload]\nkind = "single"\nsrc = 0\ndst = 3\nsize = "64KiB"\n'
        '[[faults]]\nat_us = 5000\nkind = "link_down"\ntarget = "p0t0x0-p0t1x0"\n'
    )
    assert main(["sim", str(path)]) == 0
    assert "warning: 1 fault event(s) (set_link) scheduled from 5000 us never fired" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (
            {"kind": "link_down", "links": "host", "direction": "down"},
            "only link_loss and link_silent",
        ),
        ({"kind": "link_down", "links": "spine"}, "faults[0].links: must be one of"),
        (
            {"kind": "link_down", "links": "host", "planes": [5]},
            "faults[0].planes: 5 is out of range",
        ),
        ({"kind": "link_down", "links": "host", "target": "h0-p0t0x0"}, "either target or links"),
        ({"kind": "switch_down", "switches": "t2"}, "faults[0].switches: must be one of"),
        ({"kind": "switch_down", "switches": "t0", "hosts": [1]}, "faults[0].hosts: not a switch"),
        (
            {"kind": "flap", "target": "h0-p0t0x0", "period_us": 5, "down_us": 6, "count": 2},
            "0 < down_us < period_us",
        ),
        ({"kind": "nic_port_down"}, "needs host and plane"),
        ({"kind": "link_loss", "links": "host", "direction": "sideways"}, "faults[0].direction"),
    ],
)
def test_fault_mistakes_name_the_key(fault: dict, message: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        _build([{"at_us": 0, **fault}])
    assert message in str(exc.value)
