"""One training iteration as a task graph: compute spans, collectives and transfers.

A :class:`JobGraph` is a list of :class:`Task` s in topological order (a task's
``deps`` are lower indices).  A task starts when all of its dependencies have
finished: a compute span then lasts ``dur_ps``; a transfer or collective lasts
as long as the network takes to move its bytes (the packet simulator or the
flow-level model decide).  Compute on one GPU is serial: every compute task of
a rank depends on that rank's previous compute task.

:func:`build_iteration` derives the graph from a model description the way
Megatron-LM runs it (docs/training.md): the 1F1B pipeline schedule, TP
all-reduces inside the server as time, PP activations and gradients as
point-to-point transfers, the DP gradient reduction in buckets overlapped with
the last micro-batch's backward pass, ZeRO's reduce-scatter / all-gather, and
MoE all-to-alls over the EP group.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .model import GpuSpec, JobError, ModelSpec, Parallelism, StageArithmetic, stage_arithmetic

#: Task kinds that move bytes over the network (collectives as nccl-tests size them).
COMM_KINDS = ("p2p", "allreduce", "allgather", "reducescatter", "alltoall")

#: Phases of compute tasks that are waiting, not computing (not in a rank's compute).
IDLE_PHASES = ("bubble", "wait")

#: Megatron's default DDP bucket: 40M parameters.
BUCKET_PARAMS = 40_000_000


@dataclass(frozen=True)
class Task:
    """One node of the graph.

    ``kind`` is ``"compute"`` (``ranks`` = (rank,), ``dur_ps``) or one of
    :data:`COMM_KINDS`: ``"p2p"`` moves ``size`` bytes from ``ranks[0]`` to
    ``ranks[1]``; a collective runs over ``ranks`` (in ring order) with
    ``size`` as nccl-tests gives it (the buffer of one rank).
    """

    kind: str
    ranks: tuple[int, ...]
    deps: tuple[int, ...] = ()
    dur_ps: int = 0
    size: int = 0
    label: str = ""
    #: what it is for: fwd, bwd, opt (compute), bubble and wait (a rank waiting for a
    #: pipeline stage or a collective's completion: idle, not compute); pp, dp, ep,
    #: zero (transfers).
    phase: str = ""


@dataclass
class JobGraph:
    """The tasks of one iteration of a job of ``ranks`` GPUs."""

    name: str
    ranks: int
    tasks: list[Task] = field(default_factory=list)
    gpus_per_server: int = 8
    #: NVLink bytes per picosecond per GPU per direction (same-server transfers).
    nvlink_bytes_per_ps: float = 0.45
    #: several iterations (openmrc.workloads.jobs.iterations.repeat): where each copy starts.
    iteration_starts: list[int] = field(default_factory=list)
    #: collectives of a workload file that map to nothing (a one-rank group, no bytes):
    #: reason -> how many, per iteration (results: ``jobs[].skipped_collectives``).
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def iterations(self) -> int:
        """How many iterations the graph holds."""
        return max(1, len(self.iteration_starts))

    def add(self, task: Task) -> int:
        """Append ``task`` (its deps must be earlier tasks); return its index."""
        idx = len(self.tasks)
        for d in task.deps:
            if not 0 <= d < idx:
                raise JobError(f"task {idx} ({task.label}): dependency {d} is not an earlier task")
        if task.kind != "compute" and task.kind not in COMM_KINDS:
            raise JobError(f"task {idx} ({task.label}): unknown kind {task.kind!r}")
        for r in task.ranks:
            if not 0 <= r < self.ranks:
                raise JobError(f"task {idx} ({task.label}): rank {r} is not in 0..{self.ranks - 1}")
        self.tasks.append(task)
        return idx

    def skip(self, reason: str) -> None:
        """Count a collective of the source file that runs nothing, and why."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def compute_busy_ps(self) -> list[int]:
        """Per rank, the sum of its compute spans (a pipeline bubble is idle, not compute)."""
        busy = [0] * self.ranks
        for t in self.tasks:
            if t.kind == "compute" and t.phase not in IDLE_PHASES:
                busy[t.ranks[0]] += t.dur_ps
        return busy

    def critical_compute_ps(self) -> int:
        """The longest path with every transfer taking no time (compute and pipeline bubbles)."""
        end = [0] * len(self.tasks)
        for i, t in enumerate(self.tasks):
            start = max((end[d] for d in t.deps), default=0)
            end[i] = start + (t.dur_ps if t.kind == "compute" else 0)
        return max(end, default=0)

    def comm_bytes(self) -> dict[str, int]:
        """Bytes each rank sends per phase, summed over ranks (for reports and tests)."""
        out: dict[str, int] = {}
        for t in self.tasks:
            if t.kind == "compute":
                continue
            out[t.phase] = out.get(t.phase, 0) + sent_bytes(t)
        return out


def sent_bytes(t: Task) -> int:
    """Bytes all ranks of transfer ``t`` send (ring algorithms, as NCCL runs them)."""
    n = len(t.ranks)
    if t.kind == "p2p":
        return t.size
    if t.kind == "allreduce":
        return 2 * (n - 1) * t.size
    if t.kind in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) * t.size
    raise JobError(f"sent_bytes: {t.kind!r} moves no bytes")


@dataclass(frozen=True)
class JobSpec:
    """A job: model, parallelism, GPU; the graph comes from :func:`build_iteration`."""

    name: str
    model: ModelSpec
    parallel: Parallelism
    gpu: GpuSpec = field(default_factory=GpuSpec)

    def validate(self) -> None:
        """Raise JobError naming the first bad field."""
        self.model.validate()
        self.parallel.validate(self.model)
        self.gpu.validate()
        g = self.gpu.gpus_per_server
        if self.parallel.tp > g or g % self.parallel.tp:
            raise JobError(
                f"job.parallel.tp: TP {self.parallel.tp} must divide gpus_per_server = {g} "
                "(tensor parallelism stays inside the scale-up domain)"
            )

    @property
    def gpus(self) -> int:
        """GPUs (= simulator hosts) the job uses."""
        return self.parallel.gpus


def rank_of(par: Parallelism, tp: int, dp: int, pp: int) -> int:
    """Megatron's rank order: TP fastest, then DP, then PP."""
    return tp + par.tp * (dp + par.dp * pp)


def one_f_one_b(stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage: warm-up forwards, F/B pairs, cool-down backwards."""
    warm = min(stages - stage - 1, micro)
    ops: list[tuple[str, int]] = [("F", m) for m in range(warm)]
    f, b = warm, 0
    while f < micro:
        ops.append(("F", f))
        f += 1
        ops.append(("B", b))
        b += 1
    ops.extend(("B", m) for m in range(b, micro))
    return ops


def _buckets(par: Parallelism, params_rank: int) -> int:
    if par.buckets:
        return par.buckets
    return max(1, math.ceil(params_rank / BUCKET_PARAMS))


def _split(total: int, parts: int) -> list[int]:
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def build_iteration(job: JobSpec) -> JobGraph:
    """The task graph of one iteration of ``job`` (docs/training.md, "One iteration")."""
    job.validate()
    m, par, gpu = job.model, job.parallel, job.gpu
    g = JobGraph(job.name, par.gpus, gpus_per_server=gpu.gpus_per_server)
    g.nvlink_bytes_per_ps = gpu.nvlink_gbytes_s * 1e9 / 1e12
    micro = par.micro_batches(m)
    t, p, d, e = par.tp, par.pp, par.dp, par.ep
    db = m.dtype_bytes
    arith = [stage_arithmetic(m, par, s) for s in range(p)]
    # TP all-reduce time inside the server: 2 per layer forward, 2 backward (ring, NVLink).
    tp_ps = [
        0 if t == 1 else gpu.scaleup_ps(2 * a.layers * 2 * (t - 1) / t * a.tp_bytes) for a in arith
    ]
    fwd_ps = [
        gpu.compute_ps(a.fwd_flops, a.params_rank * db) + tp_ps[s] for s, a in enumerate(arith)
    ]
    bwd_ps = [
        gpu.compute_ps(a.bwd_flops, 2 * a.params_rank * db) + tp_ps[s] for s, a in enumerate(arith)
    ]
    last_compute: dict[int, int] = {}

    def compute(rank: int, dur: int, label: str, phase: str, deps: tuple[int, ...] = ()) -> int:
        prev = last_compute.get(rank)
        waits = after.pop(rank, None)
        extra = [x for x in (prev, waits) if x is not None]
        all_deps = tuple(sorted({*deps, *extra}))
        idx = g.add(Task("compute", (rank,), all_deps, dur, 0, label, phase))
        last_compute[rank] = idx
        return idx

    # Per (stage, dp, tp): the 1F1B ops, interleaved across stages in time order so
    # that every p2p receive exists before the compute that needs it.  Processing
    # in a global order that respects the dependencies: a simple worklist.
    ops = {s: one_f_one_b(s, p, micro) for s in range(p)}
    pos = dict.fromkeys(range(p), 0)
    sent_act: dict[tuple[int, int, int, int], int] = {}  # (stage, m, dp, tp) -> p2p task
    sent_grad: dict[tuple[int, int, int, int], int] = {}
    bwd_parts: dict[tuple[int, int, int], list[int]] = {}  # (stage, dp, tp) -> last B parts
    after: dict[int, int] = {}
    zero_prev: dict[tuple[int, int], int] = {}
    opt_ps = [0] * p
    bucket_counts = [_buckets(par, a.params_rank) for a in arith]
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while pos[s] < len(ops[s]):
                kind, mb = ops[s][pos[s]]
                if kind == "F" and s > 0 and (s - 1, mb, 0, 0) not in sent_act:
                    break
                if kind == "B" and s < p - 1 and (s + 1, mb, 0, 0) not in sent_grad:
                    break
                _emit_op(
                    g, job, arith[s], s, kind, mb, micro,
                    fwd_ps[s] if kind == "F" else bwd_ps[s], compute, after,
                    sent_act, sent_grad, bwd_parts, bucket_counts[s], zero_prev,
                )  # fmt: skip
                pos[s] += 1
                progress = True
    if any(pos[s] < len(ops[s]) for s in range(p)):
        raise JobError("job: the pipeline schedule deadlocked (a bug)")  # pragma: no cover
    # DP gradient reduction per bucket, overlapped with the last backward pass.
    for s in range(p):
        a = arith[s]
        k = bucket_counts[s]
        dense_bytes = (a.params_rank - a.expert_params_rank) * db
        expert_bytes = a.expert_params_rank * db
        for ti in range(t):
            groups: list[tuple[list[int], int, str]] = []
            if d > 1:
                groups.append(([rank_of(par, ti, di, s) for di in range(d)], dense_bytes, "dp"))
            if expert_bytes and d // e > 1:
                for ei in range(e):
                    ranks = [rank_of(par, ti, di, s) for di in range(ei, d, e)]
                    groups.append((ranks, expert_bytes, "dp"))
            elif expert_bytes and d > 1 and e == 1:
                groups[0] = (groups[0][0], dense_bytes + expert_bytes, "dp")
            reduce_kind = "allreduce" if par.zero == 0 else "reducescatter"
            done_by_rank: dict[int, list[int]] = {}
            for ranks, nbytes, phase in groups:
                prev: int | None = None
                for b, size in enumerate(_split(nbytes, k)):
                    if size < len(ranks):
                        continue
                    deps = [bwd_parts[(s, rank // t % d, ti)][b] for rank in ranks]
                    if prev is not None:
                        deps.append(prev)
                    prev = g.add(
                        Task(
                            reduce_kind,
                            tuple(ranks),
                            tuple(sorted(set(deps))),
                            size=size,
                            label=f"{reduce_kind} grads s{s} t{ti} bucket {b}",
                            phase=phase,
                        )
                    )
                if prev is not None:
                    for rank in ranks:
                        done_by_rank.setdefault(rank, []).append(prev)
            # Optimizer step: memory bound, 16 bytes read+written per (sharded) parameter.
            for di in range(d):
                rank = rank_of(par, ti, di, s)
                shard = a.params_rank // (d if par.zero >= 1 else 1)
                opt_ps[s] = gpu.compute_ps(0, 16 * shard)
                step = compute(
                    rank, opt_ps[s], f"optimizer s{s}", "opt", tuple(done_by_rank.get(rank, ()))
                )
                done_by_rank[rank] = [step]
            if par.zero in (1, 2) and d > 1:
                ranks = [rank_of(par, ti, di, s) for di in range(d)]
                gather_deps = tuple(sorted(done_by_rank[r][0] for r in ranks))
                g.add(
                    Task(
                        "allgather",
                        tuple(ranks),
                        gather_deps,
                        size=a.params_rank * db,
                        label=f"allgather params s{s} t{ti}",
                        phase="zero",
                    )
                )
    return g


def _emit_op(
    g: JobGraph,
    job: JobSpec,
    a: StageArithmetic,
    s: int,
    kind: str,
    mb: int,
    micro: int,
    dur: int,
    compute: Callable[..., int],
    after: dict[int, int],
    sent_act: dict[tuple[int, int, int, int], int],
    sent_grad: dict[tuple[int, int, int, int], int],
    bwd_parts: dict[tuple[int, int, int], list[int]],
    buckets: int,
    zero_prev: dict[tuple[int, int], int],
) -> None:
    """Add the tasks of one 1F1B op (F or B of micro-batch ``mb``) on every rank of stage ``s``.

    ``after[rank]`` is a transfer the rank's next compute task must wait for (the
    last MoE combine of the previous op).
    """
    par = job.parallel
    t, p, d, e = par.tp, par.pp, par.dp, par.ep
    moe = job.model.experts > 0
    phase = "fwd" if kind == "F" else "bwd"
    gathered: dict[int, int] = {}
    if par.zero == 3 and d > 1:
        # ZeRO-3: gather the stage's parameters before each forward and backward pass
        # (prefetched: the gather waits for nothing but the previous one).
        for ti in range(t):
            ranks = tuple(rank_of(par, ti, di, s) for di in range(d))
            prev_gather = zero_prev.get((s, ti))
            gathered[ti] = g.add(
                Task(
                    "allgather",
                    ranks,
                    () if prev_gather is None else (prev_gather,),
                    size=a.params_rank * job.model.dtype_bytes,
                    label=f"zero3 gather s{s} {kind}{mb}",
                    phase="zero",
                )
            )
            zero_prev[(s, ti)] = gathered[ti]
    first: dict[int, list[int]] = {}
    for ti in range(t):
        for di in range(d):
            rank = rank_of(par, ti, di, s)
            deps: list[int] = []
            if kind == "F" and s > 0:
                deps.append(sent_act[(s - 1, mb, di, ti)])
            if kind == "B" and s < p - 1:
                deps.append(sent_grad[(s + 1, mb, di, ti)])
            if ti in gathered:
                deps.append(gathered[ti])
            if rank in after:
                deps.append(after.pop(rank))
            first[rank] = deps
    last_b = kind == "B" and mb == micro - 1
    layers = a.layers if moe else 1
    pieces = _split(dur, 2 * layers) if moe else [dur]
    prev: dict[int, int] = {}
    for i, piece in enumerate(pieces):
        for rank, deps0 in first.items():
            waits = tuple(deps0) if i == 0 else (prev[rank],)
            if last_b and i == len(pieces) - 1:
                # The last backward pass fills the gradient buckets one after another.
                parts = [
                    compute(rank, sub, f"B{mb} s{s} bucket {b}", "bwd", waits if b == 0 else ())
                    for b, sub in enumerate(_split(piece, buckets))
                ]
                bwd_parts[(s, rank // t % d, rank % t)] = parts
                prev[rank] = parts[-1]
            else:
                label = f"{kind}{mb} s{s}" + (f" L{i // 2}.{i % 2}" if moe else "")
                prev[rank] = compute(rank, piece, label, phase, waits)
        if moe and e > 1:
            # MoE: all-to-all dispatch after the attention part, combine after the experts.
            what = "dispatch" if i % 2 == 0 else "combine"
            for ti in range(t):
                for block in range(d // e):
                    ranks = tuple(rank_of(par, ti, block * e + x, s) for x in range(e))
                    a2a = g.add(
                        Task(
                            "alltoall",
                            ranks,
                            tuple(sorted(prev[r] for r in ranks)),
                            size=a.a2a_bytes,
                            label=f"{kind}{mb} s{s} L{i // 2} {what}",
                            phase="ep",
                        )
                    )
                    for r in ranks:
                        prev[r] = a2a
    for rank, end in prev.items():
        if g.tasks[end].kind != "compute":
            after[rank] = end
        ti, di = rank % t, rank // t % d
        if kind == "F" and s < p - 1:
            sent_act[(s, mb, di, ti)] = g.add(
                Task(
                    "p2p",
                    (rank, rank_of(par, ti, di, s + 1)),
                    (end,),
                    size=a.p2p_bytes,
                    label=f"act F{mb} s{s}->s{s + 1}",
                    phase="pp",
                )
            )
        if kind == "B" and s > 0:
            sent_grad[(s, mb, di, ti)] = g.add(
                Task(
                    "p2p",
                    (rank, rank_of(par, ti, di, s - 1)),
                    (end,),
                    size=a.p2p_bytes,
                    label=f"grad B{mb} s{s}->s{s - 1}",
                    phase="pp",
                )
            )


__all__ = [
    "BUCKET_PARAMS",
    "COMM_KINDS",
    "JobGraph",
    "JobSpec",
    "Task",
    "build_iteration",
    "one_f_one_b",
    "rank_of",
    "sent_bytes",
]
