"""``campaign.fold_groups``: a folded campaign whose parts down lie apart runs each
group of them alone and keeps each group's run by its own parts, changes and lead."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openmrc.pipeline import campaign as cp
from openmrc.pipeline import campaign_fold as cf

from .campaign_inputs import EXAMPLE
from .test_campaign_fold import FILLED

#: test_campaign_fold's 128-GPU job (8 blocks of one replica), its NIC port moved to
#: host 8 (block 1), four blocks from the T0-T1 link's (T0 13: block 5): two groups
#: while both are down; then the link comes back, the NIC port stays down, a T1 switch
#: fails (every T0 alike: in every group)
APART = [f.replace("host=20", "host=8") for f in FILLED]


def _doc(extra: list[str], reuse: bool = True) -> dict[str, Any]:
    setup = cp.load(
        str(EXAMPLE),
        [*APART, "campaign.fold=true", *extra],
        hours=0.0004,
        transports=["mrc"],
    )
    doc = json.loads(json.dumps(cp.run(setup, reuse=reuse)))
    doc.pop("provenance")
    for t in doc["transports"].values():
        t.pop("iterations_simulated")
    return doc


def _job() -> cf.FoldedJob:
    setup = cp.load(str(EXAMPLE), [*APART, "campaign.fold=true"], hours=0.0004, transports=["mrc"])
    return setup.folds["mrc"]


def test_groups_split_parts_that_lie_apart() -> None:
    fj = _job()  # 16 T0s: 8 blocks x 2 stages, margin 1
    link, port = ("f", 0, 13, 1), ("h", 8, 1)  # blocks 5 and 1
    assert fj.groups(frozenset({link, port})) == [frozenset({link}), frozenset({port})]
    # three blocks apart (windows 0-2 and 3-5 touch): one group
    near = ("h", 4 * 8, 0)  # T0 4: block 4
    assert fj.groups(frozenset({port, near})) == [frozenset({port, near})]
    # across the ring's wrap: blocks 7 and 1 are two apart
    wrap = ("f", 1, 15, 0)  # T0 15: stage 1, block 7
    assert len(fj.groups(frozenset({port, wrap}))) == 1
    # a T1 switch (its links on every T0) joins every group, and is a group alone
    t1 = frozenset(("f", 1, a, 0) for a in range(16))
    got = fj.groups(frozenset({link, port}) | t1)
    assert got == [frozenset({link}) | t1, frozenset({port}) | t1]
    assert fj.groups(t1) == [t1]
    assert fj.groups(frozenset()) == [frozenset()]


def test_fold_groups_runs_groups_alone_and_reuses_them_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exact = _doc([])
    kept: list[int] = []
    folded = cf.FoldedJob.folded

    def spy(self: cf.FoldedJob, elements: frozenset[Any]) -> Any:
        plan = self.plan(elements)
        kept.append(8 if plan is None else len(plan.blocks))
        return folded(self, elements)

    monkeypatch.setattr(cf.FoldedJob, "folded", spy)
    got = _doc(["campaign.fold_groups=true"])
    # the printed summary's first line says so
    assert "fold_groups (approximate" in cp.summary_lines({**got, "transports": {}})[0]
    assert "fold_groups" not in cp.summary_lines({**exact, "transports": {}})[0]
    assert got.pop("fold_groups") is True
    # both parts down at once (the exact fold keeps 6 blocks), yet no run keeps more
    # than one group's 3 blocks
    states = got["transports"]["mrc"]["states"]
    assert any(len(s["parts_down"]) == 2 for s in states)
    assert kept and max(kept) == 3
    # each group's run kept by its parts, changes and lead: the same campaign as
    # running every group of every iteration again
    runs = len(kept)
    every = _doc(["campaign.fold_groups=true"], reuse=False)
    every.pop("fold_groups")
    assert len(kept) - runs > 2 * runs
    # (the time lost per failure is split per run of iterations, its remainders in
    # picoseconds by the run: compared to the nanosecond)
    for doc in (got, every):
        t = doc["transports"]["mrc"]
        t["lost_s_by_failure"] = {k: round(v, 9) for k, v in t["lost_s_by_failure"].items()}
        t["lost_s_by_kind"] = {k: round(v, 9) for k, v in t["lost_s_by_kind"].items()}
    assert got == every
    # on this job the link's group is the slower in every iteration both are down:
    # the slowest group's step is the whole job's
    t, e = got["transports"]["mrc"], exact["transports"]["mrc"]
    assert t["segments"] == e["segments"] and t["states"] == e["states"]


def test_fold_groups_needs_fold() -> None:
    with pytest.raises(cp.CampaignError, match="campaign.fold_groups: needs campaign.fold"):
        cp.parse_config({"fold_groups": True})
    with pytest.raises(cp.CampaignError, match="campaign.fold_groups: must be true or false"):
        cp.parse_config({"fold": True, "fold_groups": 1})
