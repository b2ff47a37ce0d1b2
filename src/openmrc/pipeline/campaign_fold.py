"""A campaign of a job that fills the whole cluster, each fabric state run folded.

A 131,072-GPU job has some 17 million tasks per iteration: too many to build,
let alone to simulate for every state a day of failures visits.  But a job of
TP x PP x DP placed packed on every host repeats itself block by block
(:mod:`openmrc.flow.fold`): the blocks of replicas no failure touches behave
alike.  With ``campaign.fold = true`` every iteration the campaign simulates
(a state's steady iteration, or one a change falls into) runs only the blocks
the parts down in it (and the parts its changes take down or up) touch,
``campaign.fold_margin`` blocks either side of each and two at least, on a
fabric of those T0s.  For MRC this is exact (the same step to the picosecond as
the whole job: ``tests/pipeline/test_campaign_fold.py``); for RoCE the kept QPs
take their whole-job ECMP draws and the blocks left out are not seen (a sample,
docs/performance.md).  With ``campaign.fold_replicas`` (the default) an MRC job's
kept blocks run only the replicas a part sets apart and representatives for the
rest (openmrc.flow.fold.narrow_replicas), exact too.

:class:`FoldedJob` keeps the scenario's data, never the whole job's graph: it
builds the folded job per state (the parsed folded scenario is kept for the
last number of blocks, which states share), and the whole job only when a state
does not fold (a fold that would keep nearly every block).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..flow.fold import Fold, plan_fold
from ..flow.model import FluidModel
from ..topology import ClosSpec
from ..workloads.jobs.config import JobConfig, JobError, parse_jobs

#: an element of the fabric, as :mod:`openmrc.pipeline.campaign` has them:
#: ("h", host, plane) a host link, ("f", plane, t0, t1) a T0-T1 link.
Element = tuple[Any, ...]
#: a state's model and how its elements map onto that model's fabric (None: the
#: element is on a T0 the fold leaves out, which only a part on every T0 alike can be)
Folded = tuple[FluidModel, Callable[[Element], Element | None]]


#: representative replicas (``campaign.fold_replicas``): the replicas kept as themselves
#: either side of each one a part sets apart (openmrc.flow.fold.narrow_replicas; 0 was
#: exact on the tests' job too, 1 is the margin the fold of blocks needs)
REPLICA_MARGIN = 1


class FoldError(ValueError):
    """A campaign that asks to fold a job that does not fold (the message says why)."""


def _spec_of(fab: Any) -> ClosSpec:
    """The fabric table's ClosSpec (a FoldError naming the table when it is bad)."""
    if not isinstance(fab, dict):
        raise FoldError("fabric: must be a table")
    try:
        return ClosSpec(**fab)
    except (TypeError, ValueError) as exc:
        raise FoldError(f"fabric: {exc}") from None


def parts_of(
    elements: frozenset[Element] | set[Element], t0s: int
) -> list[tuple[list[tuple[int, int]], list[tuple[int, int, int]]]]:
    """``elements`` as :func:`openmrc.flow.fold.plan_fold` takes faults' parts: a host
    link alone, a T0-T1 link alone, except that the links of one T1 on every T0 (a T1
    switch down) are one part, which sets no block apart.

    A T1 down on more T0s than not (a T1 switch down while a restart has left one of
    its links behind, or a link of it up again before the switch) is that part on
    every T0, and the T0s where its link is up each a part of their own: those set
    their blocks apart, not the T0s where it is down (else nearly every block is set
    apart and the state does not fold).  The part on every T0 names links that are
    up; it only plans the fold, the model takes down what ``elements`` has."""
    out: list[tuple[list[tuple[int, int]], list[tuple[int, int, int]]]] = []
    by_t1: dict[tuple[int, int], list[int]] = {}
    for e in sorted(elements, key=repr):
        if e[0] == "h":
            out.append(([(e[1], e[2])], []))
        else:
            by_t1.setdefault((e[1], e[3]), []).append(e[2])
    for (p, k), a_s in sorted(by_t1.items()):
        down = set(a_s)
        if len(down) == t0s:
            out.append(([], [(p, a, k) for a in sorted(down)]))
        elif 2 * len(down) > t0s:
            out.append(([], [(p, a, k) for a in range(t0s)]))
            out += [([], [(p, a, k)]) for a in range(t0s) if a not in down]
        else:
            out += [([], [(p, a, k)]) for a in sorted(down)]
    return out


def element_map(plan: Fold) -> Callable[[Element], Element | None]:
    """Element of the whole fabric -> the folded fabric's (None: its T0 or its replica is
    not run)."""

    def mapped(e: Element) -> Element | None:
        if e[0] == "h":
            # a host link is a part of its own (parts_of), so its replica is run
            h = plan.folded_host(e[1])
            return None if h is None else ("h", h, e[2])
        b = plan.folded_t0(e[2])
        return None if b is None else ("f", e[1], b, e[3])

    return mapped


@dataclass
class FoldedJob:
    """One transport's campaign job that fills its fabric, built folded per state
    (module doc)."""

    #: the scenario's data (transport set, striping applied, no faults)
    data: dict[str, Any]
    name: str
    base_dir: Path | None
    #: the whole fabric and the job's cut
    spec: ClosSpec
    tp: int
    pp: int
    dp: int
    ep: int
    per_replica: int
    margin: int
    config: JobConfig
    #: MRC: the kept blocks run representative replicas, this many kept either side of
    #: each one set apart (openmrc.flow.fold.narrow_replicas); None: every replica
    narrow: int | None = None
    _cached: tuple[tuple[int, int], Any] | None = field(default=None, repr=False)
    _whole: Any = field(default=None, repr=False)

    @property
    def gpus(self) -> int:
        """The whole job's GPUs."""
        return self.tp * self.pp * self.dp

    def plan(self, elements: frozenset[Element]) -> Fold | None:
        """The fold for a state and its changes' parts (None: it keeps nearly every block)."""
        parts = parts_of(elements, self.spec.t0s)
        return plan_fold(
            self.spec, self.tp, self.pp, self.dp, parts, self.margin, self.ep, self.narrow
        )

    def scenario(self, dp: int | None = None, per_block: int | None = None) -> Any:
        """The scenario with the job cut to ``dp`` replicas on a fabric with room for
        ``per_block`` of them under each T0 (default: the whole job's, every replica of
        a block), on as many blocks' T0s as ``dp`` fills so (None: the whole job, built
        once and kept).  A fold whose blocks run fewer replicas places the job itself
        (``Fold.hosts``)."""
        from .run import scenario_from_data

        if dp is None:
            if self._whole is None:
                self._whole, _ = scenario_from_data(
                    self.data, [], name=self.name, base_dir=self.base_dir
                )
            return self._whole
        per_block = per_block or self.spec.hosts_per_t0 // self.tp
        if self._cached is not None and self._cached[0] == (dp, per_block):
            return self._cached[1]
        d = copy.deepcopy(self.data)
        d["fabric"]["t0s"] = -(-dp // per_block) * self.pp
        d["fabric"]["hosts_per_t0"] = per_block * self.tp
        d["job"]["parallel"]["dp"] = dp
        d["job"]["model"]["global_batch"] = self.per_replica * dp
        sc, _ = scenario_from_data(d, [], name=self.name, base_dir=self.base_dir)
        self._cached = ((dp, per_block), sc)
        return sc

    def whole_model(self) -> FluidModel:
        """The whole job's model (a state that does not fold)."""
        from .jobrun import fluid_model

        sc = self.scenario()
        job = replace(sc.jobs[0], start_us=0.0)
        return fluid_model(sc.spec, sc.transport, sc.seed, [job], [])

    def fabric_model(self) -> FluidModel:
        """The whole fabric with the transport and no job: what a campaign asks of the
        fabric (a failure's parts, detection and convergence times), built cheaply."""
        from .jobrun import fluid_model

        sc = self.scenario(2 * (self.spec.hosts_per_t0 // self.tp))
        return fluid_model(self.spec, sc.transport, sc.seed, [], [])

    def groups(self, elements: frozenset[Element]) -> list[frozenset[Element]]:
        """``elements`` cut into groups that lie apart on the ring of blocks (``campaign.
        fold_groups``): two parts are in one group when the blocks they touch are at
        most ``2 margin + 1`` apart (their folds' windows overlap or touch).  A part on
        every T0 alike (a T1 switch) touches every block: it joins every group (and is
        the only group when nothing else is down).  In the order of their sorted parts."""
        nb = self.dp // (self.spec.hosts_per_t0 // self.tp)
        near = 2 * self.margin + 1
        every: list[Element] = []
        located: list[tuple[int, list[Element]]] = []
        for hl, fl in parts_of(elements, self.spec.t0s):
            es = [("h", h, p) for h, p in hl] + [("f", p, a, k) for p, a, k in fl]
            if not hl and len({a for _p, a, _k in fl}) == self.spec.t0s:
                every += es
                continue
            t0 = hl[0][0] // self.spec.hosts_per_t0 if hl else fl[0][1]
            located.append((t0 % nb, es))
        # union-find over the located parts: near on the ring of nb blocks
        root = list(range(len(located)))

        def find(i: int) -> int:
            while root[i] != i:
                root[i] = root[root[i]]
                i = root[i]
            return i

        for i, (bi, _) in enumerate(located):
            for j in range(i):
                d = abs(bi - located[j][0])
                if min(d, nb - d) <= near:
                    root[find(i)] = find(j)
        by_root: dict[int, list[Element]] = {}
        for i, (_b, es) in enumerate(located):
            by_root.setdefault(find(i), []).extend(es)
        out = [frozenset(es + every) for es in by_root.values()]
        if not out:
            out = [frozenset(every)]
        return sorted(out, key=lambda g: sorted(map(repr, g)))

    def folded(self, elements: frozenset[Element]) -> Folded | None:
        """The folded model of a state whose parts down and changing are ``elements``,
        and the map of elements onto it; None: the state does not fold."""
        from .jobrun import fluid_model

        plan = self.plan(elements)
        if plan is None:
            return None
        sc = self.scenario(plan.dp, plan.kept_per_block)
        job = replace(sc.jobs[0], start_us=0.0)
        if plan.offsets:
            job = replace(job, hosts=plan.hosts())
        model = fluid_model(plan.spec, sc.transport, sc.seed, [job], [])
        model.jobs[0].ring_ranks = plan.graph(model.jobs[0].graph, self.config.spec)
        plan.hashes(model)
        if plan.offsets:
            model.host_weight = np.array(plan.host_weights(), dtype=float)
        return model, element_map(plan)


def folded_job(
    data: dict[str, Any],
    name: str,
    base_dir: Path | None,
    margin: int,
    replicas: bool = False,
) -> FoldedJob:
    """The scenario's (one transport's, checked) job to fold; a FoldError naming the
    reason when it does not fold (not one ``[job]`` of TP x PP x DP placed packed on
    every host, a T0's hosts not whole replicas, a block not whole EP groups).
    ``replicas`` (``campaign.fold_replicas``): an MRC job without EP runs representative
    replicas in its kept blocks (:data:`REPLICA_MARGIN` either side of each one set
    apart); RoCE's ECMP draws set every replica apart, so it runs them all."""
    try:
        configs = parse_jobs(data)
    except JobError as exc:
        raise FoldError(str(exc)) from None
    if len(configs) != 1 or "job" not in data or not isinstance(configs[0], JobConfig):
        raise FoldError("campaign.fold: folds one [job] table (not [[jobs]] or a workload file)")
    cfg = configs[0]
    if cfg.placement != "packed":
        raise FoldError(f"campaign.fold: the job must be placed packed, not {cfg.placement!r}")
    spec = _spec_of(data.get("fabric", {}))
    par = cfg.spec.parallel
    tp, pp, dp, ep = par.tp, par.pp, par.dp, par.ep
    if tp * pp * dp != spec.hosts:
        raise FoldError(
            f"campaign.fold: the job's {tp * pp * dp:,} GPUs (TP x PP x DP) must fill the "
            f"fabric's {spec.hosts:,} hosts"
        )
    if plan_fold(spec, tp, pp, dp, [], margin, ep) is None:
        raise FoldError(
            f"campaign.fold: the job does not fold on this fabric (a T0's "
            f"{spec.hosts_per_t0} hosts must be whole replicas of TP {tp}, EP {ep} groups "
            f"whole inside them, and the job at least 4 such blocks of replicas)"
        )
    d = copy.deepcopy(data)
    d.pop("faults", None)
    d["job"].setdefault("model", {})
    per_replica = cfg.spec.model.global_batch // dp
    mrc = (d.get("transport") or {}).get("name", "mrc") == "mrc"
    narrow = REPLICA_MARGIN if replicas and mrc and ep == 1 else None
    return FoldedJob(d, name, base_dir, spec, tp, pp, dp, ep, per_replica, margin, cfg, narrow)


__all__ = [
    "REPLICA_MARGIN",
    "Element",
    "FoldError",
    "Folded",
    "FoldedJob",
    "element_map",
    "folded_job",
    "parts_of",
]
