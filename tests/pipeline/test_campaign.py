"""The training campaign (openmrc.pipeline.campaign, ``openmrc campaign``): exact step-time
bookkeeping, changes confined to the iterations they touch, determinism, and the
state-keyed reuse against simulating every iteration."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.pipeline import campaign as cp
from openmrc.pipeline.jobrun import run_flow

from .campaign_inputs import EXAMPLE, NO_DRAWN_FAILURES

#: no drawn failures (every rate zero), no hand-given ones
NO_FAILURES = [
    *NO_DRAWN_FAILURES,
    "faults=[]",
]
#: RoCE that gives up in 50 ms instead of 30 s (ACK timeout 16.8 ms, 3 retries), no DCQCN
#: (faster to simulate): a restart fits in a test
FAST_ROCE = [
    "transport.roce.timeout_exp=12",
    "transport.roce.retries=3",
    "transport.roce.dcqcn=false",
]


def _setup(extra: list[str], hours: float, fast: bool = True, **kw: Any) -> cp.CampaignSetup:
    roce = FAST_ROCE if fast else FAST_ROCE[2:]
    return cp.load(str(EXAMPLE), [*NO_FAILURES, *roce, *extra], hours=hours, **kw)


def _iterations(t: dict[str, Any]) -> list[tuple[int, int | None]]:
    """Every iteration (start, step) of a transport's campaign."""
    out = []
    for start, count, step, _state, _touched in t["segments"]:
        out += [(start + i * (step or 0), step) for i in range(count)]
    return out


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    doc.pop("provenance")
    for t in doc["transports"].values():
        t.pop("iterations_simulated")
    return doc


def test_failure_free_campaign_is_hours_of_the_step_time() -> None:
    hours = 0.5
    setup = _setup([], hours)
    doc = cp.run(setup)
    for name, t in doc["transports"].items():
        sc = setup.scenarios[name]
        res, _rows, _wall = run_flow(sc.spec, sc.transport, sc.seed, sc.jobs, [])
        base = t["segments"][0][2]
        assert base == round(max(e or 0 for e in res.jobs[0].end))  # openmrc run's iteration
        n = math.ceil(hours * cp.PS_PER_HOUR / base)
        assert t["segments"] == [[0, n, base, 0, False]]
        assert t["iterations"] == t["useful_iterations"] == n
        assert t["span_s"] == n * base / cp.PS_PER_S
        assert t["goodput"] == 1.0
        assert t["restarts"] == [] and t["lost_s_by_kind"] == {}
        assert t["step_ms"]["p50"] == t["step_ms"]["max"] == round(base / 1e9, 6)


#: one hand-given failure and its repair per kind (the kind it is counted under in
#: lost_s_by_kind): (down, up).  A NIC port failure kills a RoCE QP (the job restarts:
#: test_state_keyed_reuse_equals_simulating_every_iteration), so only MRC there.
ONE_FAILURE = {
    "link": ('kind="link_down", target="p0t0x0-p0t1x0"', 'kind="link_up", target="p0t0x0-p0t1x0"'),
    "switch": ('kind="switch_down", target="p1t1x0"', 'kind="switch_up", target="p1t1x0"'),
    "nic_port": ('kind="nic_port_down", host=3, plane=1', 'kind="nic_port_up", host=3, plane=1'),
}


@pytest.mark.parametrize("kind", sorted(ONE_FAILURE))
def test_one_failure_changes_exactly_the_iterations_it_touches(kind: str) -> None:
    hours = 0.01  # 36 s
    down_us, up_us = 10_000_000.25, 20_000_000.0
    d, u = ONE_FAILURE[kind]
    fault = [f"faults=[{{at_us={down_us}, {d}}}, {{at_us={up_us}, {u}}}]"]
    transports = ["mrc"] if kind == "nic_port" else ["mrc", "roce"]
    # (RoCE's own timeouts: it resends when routing has converged, 200 ms on)
    quiet = cp.run(_setup([], hours, fast=False, transports=transports))
    hit = cp.run(_setup(fault, hours, fast=False, transports=transports))
    settle = {"mrc": 47_000_000, "roce": 200_000_000_000}
    for name in transports:
        q = _iterations(quiet["transports"][name])
        h = _iterations(hit["transports"][name])
        base = q[0][1]
        assert base is not None
        down, up = round(down_us * 1e6), round(up_us * 1e6)

        def touched(
            start: int, step: int, s: int = settle[name], es: tuple[int, int] = (down, up)
        ) -> bool:
            return any(e < start + step and e + s > start for e in es)

        # before the failure: the same iterations
        before = [x for x in q if x[0] + base <= down]
        assert h[: len(before)] == before
        # the iterations it touches are simulated with it; between the changes the
        # degraded state's step, after the repair the failure-free one again
        degraded = None
        for start, step in h[len(before) :]:
            assert step is not None
            if touched(start, step):
                continue
            if down < start < up:
                degraded = step if degraded is None else degraded
                assert step == degraded
            else:
                assert start > up and step == base
        assert degraded is not None and degraded != base
        # the iterations it touches run with it at its offset: one is slower than the
        # failure-free step (RoCE's waits for routing to converge)
        worst = max(st or 0 for s, st in h if touched(s, st or 0))
        assert worst > base
        if name == "mrc":  # the failure's own iteration (MRC spreads over every path)
            assert next(st for s, st in h if s <= down < s + (st or 0)) != base
        if name == "roce":
            assert worst > settle["roce"]
        marks = [s[4] for s in hit["transports"][name]["segments"] for _ in range(s[1])]
        assert [touched(s, st or 0) for s, st in h] == marks
        # the time lost is the failure's, and adds up
        t = hit["transports"][name]
        useful = t["useful_iterations"] * base / cp.PS_PER_S
        assert list(t["lost_s_by_kind"]) == [kind]
        assert t["span_s"] - useful == pytest.approx(t["lost_s_by_kind"][kind], abs=1e-9)


def test_same_seed_same_campaign() -> None:
    # the default rates, scaled: a few failures in the hour
    scaled = ["faults=[]", *FAST_ROCE, "failures.scale=3e4"]
    a = cp.run(cp.load(str(EXAMPLE), scaled, hours=1.0, seed=5))
    b = cp.run(cp.load(str(EXAMPLE), scaled, hours=1.0, seed=5))
    c = cp.run(cp.load(str(EXAMPLE), scaled, hours=1.0, seed=6))
    assert a["failures"], "the scale draws failures"
    assert json.dumps(_strip(a), sort_keys=True) == json.dumps(_strip(b), sort_keys=True)
    assert a["failures"] != c["failures"]


def test_a_monte_carlo_seed_is_that_seeds_campaign(tmp_path: Path) -> None:
    """The sweep's point for a seed (its own process in a pool) is the campaign of
    ``openmrc campaign --seed`` that seed, number for number."""
    scaled = ["faults=[]", *FAST_ROCE, "failures.scale=3e4"]
    args = ["campaign", str(EXAMPLE), "--hours", "1", "--seed", "5", "--workers", "1"]
    for s in scaled:
        args += ["--set", s]
    assert main([*args, "--seeds", "2", "--out", str(tmp_path)]) == 0
    points = [json.loads(p.read_text())["record"] for p in (tmp_path / "points").glob("*.json")]
    by_seed = {d["seed"]: d for d in points}
    assert sorted(by_seed) == [5, 6]
    for seed in (5, 6):
        alone = cp.run(cp.load(str(EXAMPLE), scaled, hours=1.0, seed=seed))
        assert alone["failures"], "the scale draws failures"
        assert _strip(by_seed[seed]) == _strip(alone)


def _events() -> list[str]:
    """A link down and up, a switch down, a NIC port down (RoCE restarts) and up."""
    return [
        "faults=["
        '{at_us=150000.5, kind="link_down", target="p0t0x1-p0t1x1"}, '
        '{at_us=400000, kind="switch_down", target="p1t1x0"}, '
        '{at_us=700000, kind="link_up", target="p0t0x1-p0t1x1"}, '
        '{at_us=900000.5, kind="nic_port_down", host=9, plane=0}, '
        '{at_us=1400000, kind="nic_port_up", host=9, plane=0}]',
        "campaign.checkpoint_s=0.3",
        "campaign.restart_s=0.1",
    ]


def test_state_keyed_reuse_equals_simulating_every_iteration() -> None:
    hours = 1.8 / 3600  # a few hundred iterations
    setup = _setup(_events(), hours)
    reused = cp.run(setup)
    every = cp.run(setup, reuse=False)
    assert _strip(reused) == _strip(every)
    for name, t in reused["transports"].items():
        assert len(_iterations(t)) > 150
        assert t["iterations_simulated"] < every["transports"][name]["iterations_simulated"] / 3
    assert reused["transports"]["roce"]["restarts"], "a RoCE QP runs out of retries"
    assert len(reused["transports"]["mrc"]["states"]) >= 3

    # a key that ignores the host links reuses a wrong step time: the check sees it
    def blind(view: frozenset[cp.Element]) -> cp.State:
        return cp.state_key(frozenset(e for e in view if e[0] != "h"))

    sc = setup.scenarios["mrc"]
    c = cp.Campaign("mrc", cp.model_factory(sc), setup.failures, hours, 0.3, 0.1, key=blind)
    wrong = cp.transport_doc(c.run(), 16)
    assert wrong["segments"] != every["transports"]["mrc"]["segments"]


def test_campaign_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(
        ["campaign", str(EXAMPLE), "--hours", "14", "--set", FAST_ROCE[2], "--out", str(out)]
    )
    text = capsys.readouterr().out
    assert code == 0
    assert "mrc: goodput" in text and "roce: goodput" in text
    doc = json.loads((out / "campaign.json").read_text())
    assert [f["kind"] for f in doc["failures"]] == ["link", "nic_port"]
    assert len(doc["transports"]["roce"]["restarts"]) == 1
    assert doc["transports"]["mrc"]["restarts"] == []
    pytest.importorskip("matplotlib")
    assert (out / "campaign.png").stat().st_size > 0


def test_campaign_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["campaign", str(EXAMPLE), "--set", "campaign.restart_s=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "openmrc campaign: error: campaign.restart_s: must be >= 0, got -1"
    assert main(["campaign", str(EXAMPLE), "--set", "failures.window_us=5"]) == 2
    assert "failures.window_us: not used by a campaign" in capsys.readouterr().err
    silent = 'faults=[{at_us=1, kind="link_silent", target="p0t0x0-p0t1x0"}]'
    assert main(["campaign", str(EXAMPLE), "--set", silent]) == 2
    assert "faults[0].kind: a campaign takes link_down" in capsys.readouterr().err
    assert main(["campaign", str(EXAMPLE), "--set", "run.mode=packet"]) == 2
    assert "run.mode: a campaign runs at flow level" in capsys.readouterr().err


def test_mrc_campaign_equals_one_continuous_run() -> None:
    """The campaign's iterations, one by one or reused, are those of one flow-level run
    of as many iterations with the same faults at the same times (MRC; RoCE's
    per-message timeout draws are keyed by the transfer, which differs from copy to
    copy of a repeated graph, so there it differs by those draws)."""
    n = 60
    sc, step = _mrc_scenario_and_step()
    faults = [
        (round(step * 10.3), "link_down", "p0t0x0-p0t1x0", -1, -1),
        (round(step * 25.6), "nic_port_down", "", 9, 1),
        (round(step * 40.7), "link_up", "p0t0x0-p0t1x0", -1, -1),
    ]
    setup = _setup([_faults_set(faults)], step * n / cp.PS_PER_HOUR, transports=["mrc"])
    steps = [st for _s, st in _iterations(cp.run(setup)["transports"]["mrc"])]
    assert len(steps) > 40 and len(set(steps)) > 3
    for mine, whole in zip(steps, _continuous_steps(sc, n, faults), strict=False):
        assert mine is not None
        assert abs(mine - whole) <= 1  # ps: the campaign keeps integer ps


#: a fault as these tests give it: ps, kind, target, host, plane
Fault = tuple[int, str, str, int, int]


def _mrc_scenario_and_step() -> tuple[Any, float]:
    """The example's MRC scenario and its failure-free step (ps)."""
    sc = _setup([], 1.0, transports=["mrc"]).scenarios["mrc"]
    return sc, max(e or 0 for e in cp.model_factory(sc)().run().jobs[0].end)


def _faults_set(faults: list[Fault]) -> str:
    """The ``--set`` that gives ``faults`` as the scenario's faults."""
    given = ", ".join(
        f'{{at_us={at / 1e6!r}, kind="{k}", target="{tg}"}}'
        if tg
        else f'{{at_us={at / 1e6!r}, kind="{k}", host={h}, plane={p}}}'
        for at, k, tg, h, p in faults
    )
    return f"faults=[{given}]"


def _continuous_steps(sc: Any, n: int, faults: list[Fault]) -> list[float]:
    """Each iteration's step of one flow-level run of ``n`` iterations of ``sc``'s job
    with ``faults`` at their times."""
    from dataclasses import replace

    from openmrc.flow.model import FluidFault
    from openmrc.pipeline.jobrun import fluid_model
    from openmrc.workloads.jobs.iterations import iteration_ends, repeat

    graph = repeat(sc.jobs[0].graph, n)
    model = fluid_model(sc.spec, sc.transport, sc.seed, [replace(sc.jobs[0], graph=graph)], [])
    for at, k, tg, h, p in faults:
        model.add_fault(FluidFault(at, k, tg, h, p))
    out, prev = [], 0.0
    for end in iteration_ends(graph, model.run().jobs[0].end):
        assert end is not None
        out.append(end - prev)
        prev = end
    return out


def test_a_change_the_job_does_not_see_is_not_simulated() -> None:
    """A link that fails while its T1 switch is down, and comes back before it: the
    iterations those two changes fall into are the switch state's own (served from
    its step, not simulated), and the campaign is still one continuous flow-level run
    of as many iterations with the same faults (MRC)."""
    n = 60
    sc, step = _mrc_scenario_and_step()
    faults = [
        (round(step * 10.3), "switch_down", "p0t1x0", -1, -1),
        (round(step * 20.6), "link_down", "p0t0x0-p0t1x0", -1, -1),
        (round(step * 30.4), "link_up", "p0t0x0-p0t1x0", -1, -1),
        (round(step * 40.7), "switch_up", "p0t1x0", -1, -1),
    ]
    setup = _setup([_faults_set(faults)], step * n / cp.PS_PER_HOUR, transports=["mrc"])
    t = cp.run(setup)["transports"]["mrc"]
    # the four changes each mark the iteration they fall into
    assert sum(1 for s in t["segments"] if s[4]) == 4
    # simulated: the healthy state, the switch's state, the iterations the switch's
    # failure and repair fall into; not the link's two (nothing the job sees changes)
    assert len(t["states"]) == 2
    assert t["iterations_simulated"] == 4
    steps = [st for _s, st in _iterations(t)]
    assert len(steps) > 40 and len(set(steps)) > 2
    for mine, whole in zip(steps, _continuous_steps(sc, n, faults), strict=False):
        assert mine is not None
        assert abs(mine - whole) <= 1  # ps: the campaign keeps integer ps


def test_monte_carlo_over_seeds_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mc"
    args = ["campaign", str(EXAMPLE), "--hours", "2", "--set", "faults=[]"]
    args += ["--set", "failures.scale=1e4", "--set", FAST_ROCE[2], "--workers", "1"]
    assert main([*args, "--seeds", "3", "--out", str(out)]) == 0
    first = capsys.readouterr()
    assert "0 already" in first.err and "3 to run" in first.err
    points = sorted((out / "points").glob("*.json"))
    assert len(points) == 3
    docs = [json.loads(p.read_text())["record"] for p in points]
    stamps = [p.read_text() for p in points]
    assert sorted(d["seed"] for d in docs) == [1, 2, 3]
    assert main([*args, "--seeds", "4", "--out", str(out)]) == 0  # one more seed
    assert "3 already" in capsys.readouterr().err
    assert [p.read_text() for p in points] == stamps  # the done seeds were not run again
    agg = json.loads((out / "montecarlo.json").read_text())
    assert agg["seeds"] == [1, 2, 3, 4]
    docs.append(
        next(
            json.loads(p.read_text())["record"]
            for p in (out / "points").glob("*.json")
            if p not in points
        )
    )
    for name in ("mrc", "roce"):
        goodputs = [d["transports"][name]["goodput"] for d in docs]
        g = agg["transports"][name]["goodput"]
        assert g["n"] == 4 and g["mean"] == pytest.approx(sum(goodputs) / 4)
        assert g["ci95"] is not None and g["ci95"] >= 0


def test_transports_in_parallel_give_the_same_document() -> None:
    # each transport's campaign in a process of its own: the same document as one after
    # the other (the wall times in provenance aside), RoCE's restart and MRC's states too
    setup = _setup(_events(), 1.8 / 3600)
    one_by_one = cp.run(setup)
    parallel = cp.run(setup, parallel=True)
    assert _strip(parallel) == _strip(one_by_one)
    assert list(parallel["transports"]) == ["mrc", "roce"]
    assert parallel["transports"]["roce"]["restarts"]


def test_parallel_is_refused_with_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["campaign", str(EXAMPLE), "--parallel", "--seeds", "2"]) != 0
    err = capsys.readouterr().err
    assert "--parallel: runs one campaign's transports at once" in err
    assert "Traceback" not in err
