"""A campaign run folded (openmrc.pipeline.campaign_fold, ``campaign.fold``): the same
campaign as the whole job's for MRC, and clear errors for a job that does not fold."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.flow.fold import Fold
from openmrc.pipeline import campaign as cp
from openmrc.pipeline import campaign_fold as cf

from .campaign_inputs import EXAMPLE, NO_DRAWN_FAILURES

#: the example's small GPT widened to fill 16 T0s of 8 hosts: TP 8, PP 2, DP 8 (128
#: GPUs, 8 blocks of one replica), no drawn failures; hand-given: a T0-T1 link of stage
#: 1, a NIC port of stage 0, the link's repair, a T1 switch (every T0 alike)
FILLED = [
    *NO_DRAWN_FAILURES,
    "transport.roce.timeout_exp=12",
    "transport.roce.retries=3",
    "transport.roce.dcqcn=false",
    "fabric.t0s=16",
    "job.parallel.pp=2",
    "job.parallel.dp=8",
    "job.model.global_batch=8",
    "faults=["
    '{at_us=100000.5,kind="link_down",target="p0t0x13-p0t1x1"},'
    '{at_us=300000,kind="nic_port_down",host=20,plane=1},'
    '{at_us=700000,kind="link_up",target="p0t0x13-p0t1x1"},'
    '{at_us=1000000,kind="switch_down",target="p1t1x0"}]',
]


def _doc(fold: bool, transport: str = "mrc") -> dict[str, Any]:
    setup = cp.load(
        str(EXAMPLE),
        [*FILLED, f"campaign.fold={str(fold).lower()}"],
        hours=0.0004,
        transports=[transport],
    )
    doc = json.loads(json.dumps(cp.run(setup)))
    doc.pop("provenance")
    for t in doc["transports"].values():
        t.pop("iterations_simulated")
    return doc


def _record_plans(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The fold plan of every iteration a campaign simulates from now on (None where
    it ran unfolded), recorded as ``FoldedJob.folded`` is called."""
    plans: list[Any] = []
    folded = cf.FoldedJob.folded

    def spy(self: cf.FoldedJob, elements: frozenset[Any]) -> Any:
        plans.append(self.plan(elements))
        return folded(self, elements)

    monkeypatch.setattr(cf.FoldedJob, "folded", spy)
    return plans


def test_folded_mrc_campaign_equals_the_whole_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _doc(False)
    plans = _record_plans(monkeypatch)
    got = _doc(True)
    kept = [() if plan is None else plan.blocks for plan in plans]
    t = got["transports"]["mrc"]
    assert len(got["failures"]) == 3
    assert len(t["states"]) >= 4 and t["step_ms"]["max"] > t["failure_free_step_ms"]
    # every simulated iteration ran folded, on fewer blocks than the job's 8
    assert kept and all(0 < len(b) < 8 for b in kept)
    assert got == whole


def test_parts_of_groups_a_t1_on_every_t0() -> None:
    t1 = {("f", 1, a, 0) for a in range(4)}
    parts = cf.parts_of(t1 | {("f", 0, 2, 1), ("h", 5, 0)}, 4)
    assert ([(5, 0)], []) in parts
    assert ([], [(0, 2, 1)]) in parts
    assert ([], [(1, a, 0) for a in range(4)]) in parts
    assert len(parts) == 3
    # a T1's links on half the T0s or fewer: each its own part (its T0's block kept)
    assert len(cf.parts_of({("f", 1, a, 0) for a in range(2)}, 4)) == 2
    # on more than half: the part on every T0, and each T0 where it is up a part
    parts = cf.parts_of({("f", 1, a, 0) for a in range(3)}, 4)
    assert parts == [([], [(1, a, 0) for a in range(4)]), ([], [(1, 3, 0)])]


def test_a_t1_down_on_all_t0s_but_one_folds_exactly() -> None:
    """A T1 switch down but for its link to one T0 (a RoCE restart left that link
    behind, or it came back before the switch): the fold keeps that T0's block and its
    neighbours, not every block, and MRC's step is the whole job's to the picosecond,
    with the links down from the start and going down during the iteration."""
    setup = cp.load(
        str(EXAMPLE), [*FILLED[:11], "faults=[]", "campaign.fold=true"], transports=["mrc"]
    )
    fj = setup.folds["mrc"]
    links = frozenset(("f", 1, a, 0) for a in range(16) if a != 5)
    plan = fj.plan(links)
    assert plan is not None and plan.blocks == (4, 5, 6)
    probe = fj.fabric_model()
    folded = cp.Campaign("mrc", fj.whole_model, [], 0.001, folded=fj.folded, probe=probe)
    whole = cp.Campaign("mrc", fj.whole_model, [], 0.001, probe=probe)
    healthy, _ = whole._run_model(frozenset(), [], 0)
    for view, changes in [(links, []), (frozenset(), [(200_000_000, False, sorted(links))])]:
        got = folded._run_model(view, changes, 0)
        want = whole._run_model(view, changes, 0)
        assert got == want
        assert got[0] is not None and healthy is not None and got[0] > healthy


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        (["campaign.fold=true", "fabric.t0s=4"], "must fill the fabric"),
        (["campaign.fold=true"], "does not fold on this fabric"),
        (
            [
                "campaign.fold=true",
                "fabric.t0s=16",
                "job.parallel.dp=16",
                "job.model.global_batch=16",
            ],
            "placed packed",
        ),
        (["campaign.fold=1"], "campaign.fold: must be true or false"),
        (["campaign.fold_replicas=1"], "campaign.fold_replicas: must be true or false"),
        (["campaign.fold_margin=-1"], "campaign.fold_margin: must be an integer >= 0"),
    ],
)
def test_a_job_that_does_not_fold_is_one_clear_error(extra: list[str], want: str) -> None:
    more = ['job.placement="spread"'] if want == "placed packed" else []
    with pytest.raises(cp.CampaignError, match=want):
        cp.load(str(EXAMPLE), [*extra, *more], hours=0.001)


def test_packet_check_refuses_a_folded_campaign(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["campaign", str(EXAMPLE), "--packet-check", "--hours", "0.0001"]
    for s in [*FILLED[:7], *FILLED[7:11], "faults=[]", "campaign.fold=true"]:
        args += ["--set", s]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "--packet-check" in err and "campaign.fold" in err and "Traceback" not in err


def test_folded_roce_campaign_restarts_where_the_whole_one_does() -> None:
    """RoCE folded is a sample of the ECMP draws: its steps near the whole job's (the
    folded rings take the whole ring's steps), its restarts where the whole job's are."""
    whole, got = _doc(False, "roce"), _doc(True, "roce")
    w, g = whole["transports"]["roce"], got["transports"]["roce"]
    assert g["restarts"] and len(g["restarts"]) == len(w["restarts"])
    assert [r["failures"] for r in g["restarts"]] == [r["failures"] for r in w["restarts"]]
    assert g["failure_free_step_ms"] == pytest.approx(w["failure_free_step_ms"], rel=0.02)


def test_the_packet_check_api_refuses_a_folded_campaign() -> None:
    from openmrc.pipeline.campaign_check import check

    setup = cp.load(str(EXAMPLE), [*FILLED[:11], "faults=[]", "campaign.fold=true"], hours=1e-4)
    with pytest.raises(cp.CampaignError, match="campaign.fold"):
        check(setup, limit=0)


def test_a_folded_campaigns_bad_fault_target_is_named_at_load() -> None:
    bad = 'faults=[{at_us=1,kind="link_down",target="p0t0x99-p0t1x0"}]'
    with pytest.raises(cp.CampaignError, match=r"faults\[0\]\.target: no link"):
        cp.load(str(EXAMPLE), [*FILLED[:11], bad, "campaign.fold=true"], hours=1e-4)


#: the example's small GPT at TP 2 filling 12 T0s of 32 hosts: PP 2, DP 96 (384 GPUs, 6
#: blocks of 16 replicas, 4 T1s); hand-given: a NIC port of replica 4 of block 3 (stage 0),
#: a T0-T1 link of block 2's stage 1, the NIC port's repair
NARROW = [
    *NO_DRAWN_FAILURES,
    "fabric.t0s=12",
    "fabric.hosts_per_t0=32",
    "fabric.t1s=4",
    "job.parallel.tp=2",
    "job.gpu.gpus_per_server=2",
    "job.parallel.pp=2",
    "job.parallel.dp=96",
    "job.model.global_batch=96",
    "faults=["
    '{at_us=100000.5,kind="nic_port_down",host=105,plane=1},'
    '{at_us=300000,kind="link_down",target="p0t0x8-p0t1x1"},'
    '{at_us=700000,kind="nic_port_up",host=105,plane=1}]',
]


def _narrow_doc(fold: bool, replicas: bool = True) -> dict[str, Any]:
    setup = cp.load(
        str(EXAMPLE),
        [
            *NARROW,
            f"campaign.fold={str(fold).lower()}",
            f"campaign.fold_replicas={str(replicas).lower()}",
        ],
        hours=0.0003,
        transports=["mrc"],
    )
    doc = json.loads(json.dumps(cp.run(setup)))
    doc.pop("provenance")
    for t in doc["transports"].values():
        t.pop("iterations_simulated")
    return doc


def test_representative_replicas_give_the_whole_jobs_mrc_campaign(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kept blocks running representative replicas (``campaign.fold_replicas``): the
    same MRC campaign as the whole job's, to the picosecond; with the representatives
    weighing one replica on the T0 pools (the grouping wrong) it is not."""
    whole = _narrow_doc(False)
    plans = _record_plans(monkeypatch)
    got = _narrow_doc(True)
    assert all(plan is not None for plan in plans)
    ran = [(plan.blocks, plan.kept_per_block) for plan in plans if plan is not None]
    t = got["transports"]["mrc"]
    assert len(got["failures"]) == 2
    assert len(t["states"]) >= 3 and t["step_ms"]["max"] > t["failure_free_step_ms"]
    # every simulated iteration ran on fewer blocks than 6 and fewer replicas than 16
    assert ran and all(0 < len(b) < 6 and 0 < k < 16 for b, k in ran)
    assert got == whole
    # the grouping wrong: each representative weighing one replica on the pools
    monkeypatch.setattr(Fold, "host_weights", lambda self: [1] * self.spec.hosts)
    assert _narrow_doc(True)["transports"]["mrc"] != whole["transports"]["mrc"]
