"""Folding a data-parallel job that fills the fabric: a few blocks of its replicas stand
for all of them.

A job of TP x PP x DP GPUs placed packed (Megatron's rank order: TP fastest, then
DP, then PP) puts DP replica ``d``'s stage ``s`` on the ``tp`` hosts from
``tp (d + dp s)``.  With ``hosts_per_t0 / tp`` replicas per T0 (a *block*), block
``b``'s stage ``s`` sits under T0 ``b + blocks s``, and every T0 holds one block of
one stage.  The pipeline sends of a block go from its T0 at one stage to its T0 at
the next; a DP ring of a stage runs through the blocks in order, crossing one T0
boundary per block.  Two blocks that no fault touches see the same resources with
the same flows on them at the same times, so the flow level's rates and times for
them are the same: simulating them again only repeats the arithmetic.

The fold keeps the blocks a fault touches, ``margin`` blocks on either side of each
(a fault's effect on a ring hop reaches its neighbours' host ports), and at least
two blocks (so that the folded ring still crosses a T0 boundary), in ring order;
it runs them on a fabric of ``kept x pp`` T0s, and its DP rings take the whole
ring's steps and hop bytes (``FluidJob.ring_ranks``) over the kept ranks' hops
only.  Faults are moved to the kept T0s; a fault that acts on every T0 alike (a T1
switch) stays as it is.  RoCE's ECMP draws are the whole job's (``path_hash`` and
``ack_hash`` of the host the folded host stands for), so the kept QPs take the
paths they take in the whole job; the blocks left out have draws of their own,
which the fold does not see (docs/training.md: exact for MRC, a sample for RoCE).

Inside a kept block the replicas are alike too, but for the block's first and last
(their ring hops cross T0s) and those a host fault touches.  For MRC the fold may
run only those (``narrow``), with one representative per run of the others whose
flows weigh the run's length on the T0 pools (``FluidModel.host_weight``):
:func:`narrow_replicas`, exact for MRC (docs/campaign.md, ``fold_replicas``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..topology import ClosSpec
from ..workloads.jobs.graph import JobGraph, JobSpec, Task
from ..workloads.jobs.model import stage_arithmetic
from .model import FluidFault, FluidModel, ecmp_hash


@dataclass(frozen=True)
class Fold:
    """Which blocks of a job's DP replicas a folded run keeps, and how its fabric,
    hosts, faults and rings map to the whole job's (see the module doc)."""

    #: the whole fabric
    full: ClosSpec
    #: the whole job's blocks kept, in ring order
    blocks: tuple[int, ...]
    #: DP replicas per block (hosts_per_t0 / tp)
    per_block: int
    #: the whole job's DP, PP and TP
    full_dp: int
    pp: int
    tp: int
    #: expert parallelism: EP groups of ``ep`` consecutive replicas (inside a block)
    ep: int = 1
    #: per kept block (in ``blocks``' order), the replicas it runs by their place in it
    #: (empty: all of them), and how many of the block's replicas each stands for
    #: (``narrow_replicas``)
    offsets: tuple[tuple[int, ...], ...] = ()
    weights: tuple[tuple[int, ...], ...] = ()

    @property
    def kept_per_block(self) -> int:
        """Replicas the folded fabric has room for under each T0 (the most a kept block
        runs; a block that runs fewer leaves the rest of its T0's hosts idle)."""
        return max(map(len, self.offsets)) if self.offsets else self.per_block

    @property
    def dp(self) -> int:
        """The folded job's DP replicas."""
        if self.offsets:
            return sum(map(len, self.offsets))
        return len(self.blocks) * self.per_block

    def offset(self, i: int, j: int) -> int:
        """The place in its block of the ``j``-th replica kept block ``i`` runs."""
        return self.offsets[i][j] if self.offsets else j

    def replica(self, d: int) -> tuple[int, int]:
        """Folded DP replica ``d``: (its kept block's index, its index among the
        block's replicas run); the folded ring runs the blocks in order."""
        if not self.offsets:
            return divmod(d, self.per_block)
        for i, kept in enumerate(self.offsets):
            if d < len(kept):
                return i, d
            d -= len(kept)
        raise ValueError(f"fold: no folded replica {d}")

    def hosts(self) -> list[int]:
        """The folded job's placement: rank ``r`` (TP fastest, then DP, then PP, as
        packed) on host ``hosts()[r]`` of the folded fabric; replica ``j`` of kept block
        ``i`` at stage ``s`` under folded T0 ``i + blocks s``, at its ``j``-th host slot."""
        n, w = len(self.blocks), self.kept_per_block
        out = []
        for s in range(self.pp):
            for d in range(self.dp):
                i, j = self.replica(d)
                a = i + n * s
                out += [(a * w + j) * self.tp + t for t in range(self.tp)]
        return out

    def host_weights(self) -> list[int]:
        """Per folded host, how many of the whole job's hosts it stands for (1 unless
        the blocks run representative replicas, and for an idle host;
        ``FluidModel.host_weight``)."""
        n, w = len(self.blocks), self.kept_per_block
        out: list[int] = []
        for a in range(n * self.pp):
            ws = self.weights[a % n] if self.weights else ()
            ws = tuple(ws) + (1,) * (w - len(ws))
            out += [x for x in ws for _t in range(self.tp)]
        return out

    @property
    def full_blocks(self) -> int:
        """Blocks of the whole job."""
        return self.full_dp // self.per_block

    @property
    def spec(self) -> ClosSpec:
        """The folded fabric: one T0 per kept block and stage."""
        return replace(
            self.full,
            t0s=len(self.blocks) * self.pp,
            hosts_per_t0=self.kept_per_block * self.tp,
        )

    def t0(self, a: int) -> int:
        """The whole fabric's T0 that folded T0 ``a`` stands for."""
        s, i = divmod(a, len(self.blocks))
        return self.blocks[i] + self.full_blocks * s

    def host(self, h: int) -> int:
        """The whole fabric's host that folded host ``h`` stands for (a representative
        replica's: the first of those it stands for)."""
        a, off = divmod(h, self.kept_per_block * self.tp)
        j, t = divmod(off, self.tp)
        i = a % len(self.blocks)
        if self.offsets:  # an idle host: the block's last replica's place
            j = min(j, len(self.offsets[i]) - 1)
        return self.t0(a) * self.full.hosts_per_t0 + self.offset(i, j) * self.tp + t

    def folded_host(self, h: int) -> int | None:
        """The folded host standing for the whole fabric's host ``h`` (None: its T0 or its
        replica is not run)."""
        hpt = self.full.hosts_per_t0
        b = self.folded_t0(h // hpt)
        j, t = divmod(h % hpt, self.tp)
        if b is None:
            return None
        if self.offsets:
            kept = self.offsets[b % len(self.blocks)]
            if j not in kept:
                return None
            j = kept.index(j)
        return (b * self.kept_per_block + j) * self.tp + t

    def rank(self, r: int) -> int:
        """The whole job's rank that folded rank ``r`` stands for."""
        rest, t = divmod(r, self.tp)
        s, d = divmod(rest, self.dp)
        i, j = self.replica(d)
        return t + self.tp * (
            self.blocks[i] * self.per_block + self.offset(i, j) + self.full_dp * s
        )

    def folded_t0(self, a: int) -> int | None:
        """The folded T0 standing for the whole fabric's T0 ``a`` (None: not kept)."""
        s, b = divmod(a, self.full_blocks)
        if b not in self.blocks:
            return None
        return self.blocks.index(b) + len(self.blocks) * s

    def faults(self, model: FluidModel, faults: list[FluidFault]) -> list[FluidFault]:
        """The faults (of ``model``, the whole fabric's) on the folded fabric.

        A fault on a T1 switch acts on every T0 alike and stays as it is; a part on a
        T0 that is not kept is a ValueError (the fold keeps every T0 a fault touches)."""
        hpt = self.full.hosts_per_t0
        out: list[FluidFault] = []
        for f in faults:
            hl, fl = model.parts(f)
            if f.kind.startswith("switch"):
                if "t1x" in f.target:
                    out.append(f)  # every T0 alike
                    continue
                p, a = fl[0][0], fl[0][1]
                b = self._kept(a, f.target)
                out.append(FluidFault(f.at_ps, f.kind, f"p{p}t0x{b}"))
                continue
            for h, p in hl:
                b = self._kept(h // hpt, f"h{h}")
                got = self.folded_host(h)
                if got is None:
                    raise ValueError(f"fold: h{h}'s replica is not run on its own")
                hh = got
                if f.kind.startswith("nic_port"):
                    out.append(FluidFault(f.at_ps, f.kind, "", hh, p))
                else:
                    out.append(FluidFault(f.at_ps, f.kind, f"h{hh}-p{p}t0x{b}"))
            for p, a, k in fl:
                b = self._kept(a, f.target)
                out.append(FluidFault(f.at_ps, f.kind, f"p{p}t0x{b}-p{p}t1x{k}"))
        return out

    def _kept(self, a: int, what: str) -> int:
        """The folded T0 of the whole fabric's T0 ``a`` (ValueError naming ``what``: not kept)."""
        b = self.folded_t0(a)
        if b is None:
            raise ValueError(f"fold: {what} is under T0 {a}, which the fold does not keep")
        return b

    def graph(self, graph: JobGraph, job: JobSpec) -> dict[int, int]:
        """Make ``graph`` (the folded job's, built with DP ``self.dp``) the whole job's
        where DP enters a replica's own work, and return its DP rings (phases dp and
        zero over the folded DP's ranks, and a MoE job's expert rings over every
        ``ep``-th of them) as task index -> the whole ring's ranks
        (``FluidJob.ring_ranks``).

        With ZeRO the optimizer step updates a 1 / DP shard of the stage's parameters:
        its duration is the whole DP's (as ``build_iteration`` computes it)."""
        par = replace(job.parallel, dp=self.full_dp)
        if par.zero >= 1:
            opt = {
                f"optimizer s{s}": job.gpu.compute_ps(
                    0, 16 * (stage_arithmetic(job.model, par, s).params_rank // self.full_dp)
                )
                for s in range(par.pp)
            }
            for i, t in enumerate(graph.tasks):
                if t.phase == "opt" and t.label in opt:
                    graph.tasks[i] = Task(
                        t.kind, t.ranks, t.deps, opt[t.label], t.size, t.label, t.phase
                    )
        whole = {self.dp: self.full_dp}
        if self.ep > 1:
            whole[self.dp // self.ep] = self.full_dp // self.ep
        return {
            i: whole[len(t.ranks)]
            for i, t in enumerate(graph.tasks)
            if t.kind in ("allreduce", "allgather", "reducescatter")
            and t.phase in ("dp", "zero")
            and len(t.ranks) in whole
        }

    def hashes(self, model: FluidModel) -> None:
        """Give ``model`` (the folded fabric's) the whole job's ECMP draws: a QP between
        folded hosts takes the path the QP between the hosts they stand for takes."""
        seed = model.seed
        model.path_hash = lambda s, d, conn, qp: ecmp_hash(
            seed, self.host(s), self.host(d), conn, qp
        )
        model.ack_hash = lambda s, d, conn, qp: ecmp_hash(
            seed, self.host(d), self.host(s), conn + "/ack", qp
        )


def plan_fold(
    spec: ClosSpec,
    tp: int,
    pp: int,
    dp: int,
    parts: list[tuple[list[tuple[int, int]], list[tuple[int, int, int]]]],
    margin: int = 1,
    ep: int = 1,
    narrow: int | None = None,
) -> Fold | None:
    """The fold of a TP x PP x DP job placed packed on every host of ``spec``, whose
    faults act on ``parts`` ((host links, fabric links) per fault, as
    ``FluidModel.parts`` gives them); None when the job does not fold (it does not
    fill the fabric, a T0's hosts are not whole blocks of replicas or a block not whole
    EP groups of ``ep`` replicas, or the fold would keep nearly every block).

    ``narrow`` (MRC only, ``ep`` 1): the kept blocks run representative replicas
    (:func:`narrow_replicas`, ``narrow`` replicas kept either side of each one set
    apart); None: every replica of a kept block."""
    hpt = spec.hosts_per_t0
    if tp <= 0 or pp <= 0 or dp <= 0 or tp * pp * dp != spec.hosts or hpt % tp:
        return None
    per_block = hpt // tp
    if dp % per_block or ep <= 0 or per_block % ep:
        return None
    nb = dp // per_block
    if spec.t0s != nb * pp or margin < 0:
        return None
    hit: set[int] = set()
    for hl, fl in parts:
        t0s = {h // hpt for h, _p in hl} | {a for _p, a, _k in fl}
        if not hl and len(t0s) == spec.t0s:
            continue  # every T0 alike (a T1 switch): no block set apart
        hit |= {a % nb for a in t0s}
    keep: set[int] = set()
    for b in hit:
        keep |= {(b + d) % nb for d in range(-margin, margin + 1)}
    for b in range(nb):
        if len(keep) >= 2:
            break
        keep.add(b)
    if len(keep) >= nb - 1:
        return None
    fold = Fold(spec, tuple(sorted(keep)), per_block, dp, pp, tp, ep)
    if narrow is None or ep != 1:
        return fold
    offsets, weights = narrow_replicas(per_block, tp, hpt, nb, fold.blocks, parts, narrow)
    if sum(map(len, offsets)) >= len(offsets) * per_block:
        return fold
    return replace(fold, offsets=offsets, weights=weights)


def narrow_replicas(
    per_block: int,
    tp: int,
    hpt: int,
    nb: int,
    blocks: tuple[int, ...],
    parts: list[tuple[list[tuple[int, int]], list[tuple[int, int, int]]]],
    margin: int,
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """Which replicas each kept block of a folded MRC run runs, and how many each
    stands for.

    Inside a block the replicas are alike but for the first and the last (their DP
    ring hops cross to the neighbouring blocks) and those whose hosts a fault sets
    apart (a host link or NIC port, at any stage of the block; a fault on every host
    of a T0 alike sets none apart).  Those are kept with ``margin`` replicas either
    side (a replica's flows share its host ports with its ring neighbours'); each run
    of replicas between them is one representative, its first, standing for the run:
    its flows weigh the run's length on the T0 pools (``FluidModel.host_weight``),
    MRC's only resources that hosts share, so every pool carries what the whole block
    puts on it.  Returns, per block of ``blocks`` (of ``nb``),
    (its kept places, ascending; what each stands for)."""
    special = {b: {0, per_block - 1} for b in blocks}
    for hl, _fl in parts:
        by_t0: dict[int, set[int]] = {}
        for h, _p in hl:
            by_t0.setdefault(h // hpt, set()).add(h % hpt)
        for a, offs in by_t0.items():
            if len(offs) < hpt and a % nb in special:
                special[a % nb] |= {o // tp for o in offs}
    runs: dict[int, list[list[int]]] = {}  # per block: [place, what it stands for]
    for b in blocks:
        kept: set[int] = set()
        for o in special[b]:
            kept |= {j for j in range(o - margin, o + margin + 1) if 0 <= j < per_block}
        out: list[list[int]] = []
        for j in range(per_block):
            if j in kept or j - 1 in kept:
                out.append([j, 1])  # kept, or the first of a run: its representative
            else:
                out[-1][1] += 1
        runs[b] = out
    return (
        tuple(tuple(j for j, _w in runs[b]) for b in blocks),
        tuple(tuple(w for _j, w in runs[b]) for b in blocks),
    )


__all__ = ["Fold", "narrow_replicas", "plan_fold"]
