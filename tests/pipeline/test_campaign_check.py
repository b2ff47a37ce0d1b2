"""A campaign's flow-level iterations re-run at packet level (openmrc.pipeline.campaign_check):
the recording campaign keeps exactly what the campaign simulated, and the packet run
starts from the iteration's state with its changes at their offsets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.pipeline import campaign as cp
from openmrc.pipeline import campaign_check as cc
from openmrc.pipeline.jobrun import packet_times

from .campaign_inputs import EXAMPLE, NO_DRAWN_FAILURES

#: the example's job made tiny (an iteration of about 100 us, packets in under a second),
#: no drawn failures; a T0-T1 link down 30 ms in and up 60 ms in; RoCE converging in 200 us
SMALL = [
    *NO_DRAWN_FAILURES,
    "job.model.layers=1",
    "job.model.hidden=256",
    "job.model.vocab=1000",
    "transport.roce.dcqcn=false",
    "transport.baseline_fabric.convergence_delay_ps=200000000",
    'faults=[{at_us=30000.5, kind="link_down", target="p0t0x0-p0t1x0"}, '
    '{at_us=60000.25, kind="link_up", target="p0t0x0-p0t1x0"}]',
]
LINK = ("f", 0, 0, 0)


def _setup(**kw: Any) -> cp.CampaignSetup:
    return cp.load(str(EXAMPLE), SMALL, hours=0.1 / 3600, **kw)


def test_recording_campaign_keeps_every_iteration_it_simulated() -> None:
    setup = _setup()
    plain = cp.run(setup)
    for name in ("mrc", "roce"):
        c, out = cc.record(setup, name)
        doc = cp.transport_doc(out, 16)
        want = plain["transports"][name]
        assert doc == want  # recording changes nothing
        its = c.iterations
        steady = [i for i in its if i.kind == "steady"]
        trans = [i for i in its if i.kind == "transition"]
        # one steady iteration per state met, first the healthy fabric's
        assert [i.view for i in steady] == [tuple(s) for s in (st[0] for st in out.states)]
        assert steady[0].view == () and steady[0].step_ps == out.base_step_ps
        assert all(not i.changes and i.lead_ps == 0 for i in steady)
        assert {i.view for i in steady} == {(), (LINK,)}
        # one transition per touched segment, its start and step
        touched = [(s.start_ps, s.step_ps) for s in out.segments if s.touched]
        assert [(i.start_ps, i.step_ps) for i in trans] == touched
        assert len(trans) >= 2  # the failure's and the repair's
        # a steady iteration dates from the first untouched iterations in its state
        first = {out.states[s.state][0]: s.start_ps for s in reversed(out.segments)}
        assert all(i.start_ps == first[i.view] for i in steady)
        # a transition's changes are the failure's and the repair's, at their offsets
        down, up = 30_000_500_000, 60_000_250_000
        for i in trans:
            assert i.failures == (0,)
            for at, is_up, parts in i.changes:
                origin = i.start_ps - i.lead_ps
                assert origin + at == (up if is_up else down)
                assert parts in ((LINK,), ())


def _run(sc: Any, it: cc.Iteration) -> tuple[int | None, list[dict[str, Any]], int]:
    """``it`` at packet level: (step ps, the faults applied, the job's start)."""
    psc, exp, start, until = cc.packet_experiment(sc, it)
    res = exp.run(until)
    ((_s, ends),) = packet_times(psc.jobs, psc.job_state, res)
    step = None if None in ends else round(max(ends)) - start
    return step, exp.fabric.metrics.faults, start


def test_packet_iteration_starts_from_the_state_with_the_changes_at_their_offsets() -> None:
    setup = _setup()
    for name in ("mrc", "roce"):
        sc = setup.scenarios[name]
        c, _out = cc.record(setup, name)
        healthy, degraded = (i for i in c.iterations if i.kind == "steady")
        # the healthy fabric's iteration is the scenario's own at packet level
        psc = dataclasses.replace(sc, mode="packet")
        exp = psc.build()
        ((_s, ends),) = packet_times(psc.jobs, psc.job_state, exp.run())
        h_step, h_faults, _ = _run(sc, healthy)
        assert h_step == round(max(ends)) and h_faults == []
        # the degraded state: the link down before the job, after RoCE's routing converged
        d_step, d_faults, d_start = _run(sc, degraded)
        got = [(f["time_ps"], f["kind"], f["target"]) for f in d_faults]
        assert got[0] == (0, "link_down", "p0t0x0-p0t1x0")
        pre = 201_000_000 if name == "roce" else 1_000_000
        assert d_start == pre == cc.preroll_ps(sc, degraded)
        if name == "roce":  # routing has converged when the job starts
            assert got[1:] == [(200_000_000, "route_withdrawn", "p0t0x0-p0t1x0")]
        else:
            assert got[1:] == []
        assert d_step is not None and h_step is not None and d_step != h_step
        assert cc.packet_step(sc, degraded)[0] == d_step
        # a transition: its changes at their offsets from the job's start
        for it in (i for i in c.iterations if i.kind == "transition"):
            _step, faults, start = _run(sc, it)
            want = [(0, "link_down")] * len(it.view) + [
                (start - it.lead_ps + at, "link_up" if up else "link_down")
                for at, up, parts in it.changes
                for _ in parts
            ]
            kinds = ("link_down", "link_up")
            assert [(f["time_ps"], f["kind"]) for f in faults if f["kind"] in kinds] == want


def test_check_rows() -> None:
    setup = _setup(transports=["mrc"])
    rows = cc.check(setup, limit=3)
    # the healthy state, then the failure's two iterations (MRC's detection, 47 us, outlasts
    # the rest of the one it falls into)
    assert [r["kind"] for r in rows] == ["steady", "transition", "transition"]
    assert rows[0]["iteration"] == "healthy"
    for r in rows:
        assert r["transport"] == "mrc" and r["seed"] == 1
        f, p = r["flow_step_us"], r["packet_step_us"]
        assert r["diff_pct"] == round(100 * (f - p) / p, 2)
    assert "down p0t0x0-p0t1x0 at +" in rows[1]["iteration"]
    only = cc.check(setup, limit=2, transitions_only=True)
    assert [r["kind"] for r in only] == ["transition", "transition"]
    assert only[0]["packet_step_us"] == rows[1]["packet_step_us"]


def test_campaign_packet_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["campaign", str(EXAMPLE), "--hours", str(0.1 / 3600), "--transports", "mrc"]
    for s in SMALL:
        args += ["--set", s]
    out = tmp_path / "out"
    assert main([*args, "--packet-check", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = json.loads((out / "packet_check.json").read_text())
    assert [r["kind"] for r in rows][:3] == ["steady", "transition", "transition"]
    assert "mrc steady at 0.000000 s: flow " in text and "[healthy]" in text
    assert text.count(", packet ") == len(rows)
    assert main([*args, "--packet-check", "--seeds", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--packet-check: checks one campaign (not with --seeds, --workers, --dask)")
