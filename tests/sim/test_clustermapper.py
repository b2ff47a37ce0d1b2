"""Fault localisation by self-probes (the paper's Clustermapper)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from openmrc.clustermapper.sim_agent import ClustermapperConfig, enable_clustermapper
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import single

US = 1_000_000
FAULT_AT = 100 * US
SPEC = ClosSpec(planes=2, t0s=3, hosts_per_t0=2, t1s=4)
CFG = ClustermapperConfig(interval_ps=20 * US, stop_ps=400 * US)


def _localise(
    fault: Callable[[Experiment], None], cfg: ClustermapperConfig = CFG
) -> tuple[Experiment, list[dict]]:
    exp = Experiment(SPEC, seed=1)
    cm = enable_clustermapper(exp, cfg)
    fault(exp)
    exp.sim.run()
    assert cm.probes_sent > 0
    return exp, cm.report()


@pytest.mark.parametrize(
    ("fault", "kind", "element"),
    [
        (lambda e: e.faults.link_down("h3-p1t0x1", FAULT_AT), "nic_t0_link", "h3-p1t0x1"),
        (lambda e: e.faults.link_down("p0t0x2-p0t1x1", FAULT_AT), "t0_t1_link", "p0t0x2-p0t1x1"),
        (lambda e: e.faults.switch_down("p1t1x3", FAULT_AT), "t1", "p1t1x3"),
        (lambda e: e.faults.switch_blackhole("p0t1x2", FAULT_AT), "t1", "p0t1x2"),
        (lambda e: e.faults.switch_down("p1t0x0", FAULT_AT), "t0", "p1t0x0"),
        (
            lambda e: e.faults.link_silent("p1t0x1-p1t1x0", True, FAULT_AT),
            "t0_t1_link",
            "p1t0x1-p1t1x0",
        ),
    ],
)
def test_self_probes_name_the_broken_element(
    fault: Callable[[Experiment], None], kind: str, element: str
) -> None:
    _, rep = _localise(fault)
    assert [(r["kind"], r["element"]) for r in rep] == [(kind, element)]
    assert FAULT_AT < rep[0]["time_ps"] <= FAULT_AT + CFG.window * CFG.interval_ps


def test_healthy_fabric_names_nothing_and_repair_clears() -> None:
    _, rep = _localise(lambda e: None)
    assert rep == []

    def flap(e: Experiment) -> None:
        e.faults.link_down("p0t0x0-p0t1x3", FAULT_AT)
        e.faults.link_up("p0t0x0-p0t1x3", FAULT_AT + 100 * US)

    _, rep = _localise(flap)
    assert len(rep) == 1 and rep[0]["cleared_ps"] is not None
    assert rep[0]["cleared_ps"] <= FAULT_AT + 100 * US + CFG.window * CFG.interval_ps


def test_lossy_nic_t0_link_is_named_and_its_plane_denied() -> None:
    cfg = ClustermapperConfig(interval_ps=20 * US, deny_lossy=True)
    exp = Experiment(SPEC, seed=1)
    exp.add_flows(single(4, 0, 24 << 20))
    cm = enable_clustermapper(exp, cfg)
    exp.faults.link_loss("h4-p0t0x2", 0.2, at_ps=FAULT_AT)
    r = exp.run()
    assert r.all_ok
    assert [(x["kind"], x["element"]) for x in r.localised] == [("lossy_nic_t0_link", "h4-p0t0x2")]
    assert cm.denied == {(4, 0)}
    denied_at = r.localised[0]["time_ps"]
    qp = exp.flows[0].qa  # type: ignore[attr-defined]
    assert qp.paths.denied_planes == 1 << 0
    assert denied_at < r.flows[0].finish_ps


def test_openmrc_sim_reports_what_was_localised(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    from openmrc.cli import main

    path = Path(str(tmp_path)) / "cm.toml"
    path.write_text(
        """
[fabric]
planes = 2
t0s = 3
hosts_per_t0 = 2
t1s = 4
[workload]
kind = "single"
src = 0
dst = 5
size = "16MiB"
[[faults]]
at_us = 40
kind = "switch_blackhole"
target = "p1t1x1"
[clustermapper]
interval_us = 10
"""
    )
    assert main(["sim", str(path)]) == 0
    out = capsys.readouterr().out
    assert "localised t1 p1t1x1 at " in out


def test_bad_clustermapper_keys_are_named() -> None:
    from openmrc.pipeline.scenario import ScenarioError, parse

    base = {
        "fabric": {"planes": 1, "t0s": 2, "hosts_per_t0": 2, "t1s": 2},
        "workload": {"kind": "single", "src": 0, "dst": 3, "size": "1MiB"},
    }
    with pytest.raises(ScenarioError, match=r"clustermapper\.intervall_us: unknown key"):
        parse({**base, "clustermapper": {"intervall_us": 5}})
    with pytest.raises(ScenarioError, match=r"clustermapper\.fail_rate"):
        parse({**base, "clustermapper": {"fail_rate": 2}})


def test_controller_probes_return_an_rtt_or_a_timeout_on_the_fabric() -> None:
    from openmrc.transport.ev import make_ev

    exp = Experiment(SPEC, seed=1)
    exp.faults.switch_down("p1t1x2", at_ps=0)
    ctl = exp.controller(0)
    ok = ctl.probe(5, make_ev(1, 1), now=0, timeout_ps=50 * US)
    dead = ctl.probe(5, make_ev(1, 2), now=0, timeout_ps=50 * US)  # through the dead T1
    nowhere = ctl.probe(0, make_ev(0, 0), now=0, timeout_ps=50 * US)  # itself: no route
    exp.hosts[0].kick(0)
    exp.sim.run(until_ps=200 * US)
    got = {r.probe_id: r.rtt_ps for r in ctl.poll_probe_results()}
    assert set(got) == {ok, dead, nowhere}
    ok_rtt = got[ok]
    assert ok_rtt is not None and 0 < ok_rtt < 20 * US
    assert got[dead] is None and got[nowhere] is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_lossy_t0_t1_link_is_named_lossy_within_ten_rounds(seed: int) -> None:
    cfg = ClustermapperConfig(interval_ps=20 * US, stop_ps=FAULT_AT + 40 * 20 * US)
    exp = Experiment(SPEC, seed=seed)
    cm = enable_clustermapper(exp, cfg)
    exp.faults.link_loss("p0t0x2-p0t1x1", 0.2, at_ps=FAULT_AT)
    exp.sim.run()
    rep = cm.report()
    assert [(r["kind"], r["element"], r["cleared_ps"]) for r in rep] == [
        ("lossy_t0_t1_link", "p0t0x2-p0t1x1", None)
    ]
    assert rep[0]["time_ps"] <= FAULT_AT + 10 * cfg.interval_ps
