"""AICB / SimAI workload text files: read into a job graph, and written from one.

The format SimAI's ASTRA-sim front end consumes (AICB generates it from
Megatron / DeepSpeed models):

* line 1: the training loop, then ``key: value`` pairs, e.g.
  ``HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1
  vpp: 8 ga: 1 all_gpus: 64 checkpoints: 0 checkpoint_initiates: 0``;
* line 2: the number of layer lines;
* one line per layer, 12 whitespace-separated columns: name, a reserved
  dependency field (``-1``), forward compute time, forward communication
  type, its size in bytes, input-gradient compute time, type, size,
  weight-gradient compute time, type, size, and the weight-update delay.
  Times are ASTRA-sim cycles, taken as nanoseconds (its 1 GHz default).

openmrc maps it onto its task graph (docs/training.md, "Workload files"):
ranks are laid out TP fastest (``model_parallel_NPU_group`` = TP), then DP.
Per rank, ``ga`` times: the forward pass runs the layers in order (compute,
then the forward collective over the TP group), the backward pass runs them
in reverse (input-gradient compute and collective over TP, then
weight-gradient compute); the weight-gradient collective runs over the DP
group beside the next layers' backward pass (on the last pass only, as
gradients accumulate), then the update delay.  Types: ``NONE``,
``ALLREDUCE``, ``ALLGATHER``, ``REDUCESCATTER``, ``ALLTOALL``; a ``_DP_EP``
or ``_EP`` suffix names the expert groups, which this reader treats as the
DP group (``ep = 1``) and refuses otherwise.  ``pp > 1`` is refused (the
file does not say which layers sit on which stage).
"""

from __future__ import annotations

from pathlib import Path

from .graph import JobGraph, Task, rank_of
from .model import JobError, Parallelism

#: collective types of the format and openmrc's kinds.
COMM_TYPES = {
    "ALLREDUCE": "allreduce",
    "ALLGATHER": "allgather",
    "REDUCESCATTER": "reducescatter",
    "ALLTOALL": "alltoall",
}

#: ns per cycle (ASTRA-sim's default clock: 1 GHz).
NS_PER_CYCLE = 1.0


class _Layer:
    __slots__ = ("fwd", "ig", "name", "update", "wg")

    def __init__(
        self,
        name: str,
        fwd: tuple[int, str, int],
        ig: tuple[int, str, int],
        wg: tuple[int, str, int],
        update: int,
    ) -> None:
        self.name = name
        self.fwd = fwd
        self.ig = ig
        self.wg = wg
        self.update = update


def _comm(kind: str, where: str) -> str | None:
    """openmrc's kind for a type of the format (None: no communication)."""
    if kind == "NONE":
        return None
    base = kind
    for suffix in ("_DP_EP", "_EP", "_DP"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    if base not in COMM_TYPES:
        raise JobError(f"{where}: unknown communication type {kind!r}")
    return COMM_TYPES[base]


def read(path: str | Path, gpus: int | None = None, gpus_per_server: int = 8) -> JobGraph:
    """The job graph of an AICB workload file (errors name the file and the line)."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as exc:
        raise JobError(f"{p}: cannot read ({exc.strerror})") from None
    lines = [ln for ln in lines if ln.strip()]
    if len(lines) < 2:
        raise JobError(f"{p}: line 1: needs a header line and a layer count")
    head = lines[0].split()
    policy = head[0]
    if not policy.startswith(("HYBRID_TRANSFORMER", "DATA", "MICRO")):
        raise JobError(f"{p}: line 1: unknown training loop {policy!r}")
    conf: dict[str, int] = {}
    rest = head[1:]
    i = 0
    while i < len(rest):
        key = rest[i].rstrip(":")
        if i + 1 >= len(rest):
            raise JobError(f"{p}: line 1: {key} has no value")
        try:
            conf[key] = int(rest[i + 1])
        except ValueError:
            raise JobError(f"{p}: line 1: {key}: not an integer: {rest[i + 1]!r}") from None
        i += 2
    tp = conf.get("model_parallel_NPU_group", 1)
    total = gpus if gpus is not None else conf.get("all_gpus")
    if total is None:
        raise JobError(f"{p}: line 1: no all_gpus (give workload.gpus)")
    if conf.get("pp", 1) != 1:
        raise JobError(f"{p}: line 1: pp = {conf['pp']}: pipelines are not read from this format")
    if conf.get("ep", 1) != 1:
        raise JobError(
            f"{p}: line 1: ep = {conf['ep']}: expert groups are not read from this format"
        )
    if tp < 1 or total < 1 or total % tp:
        raise JobError(f"{p}: line 1: model_parallel_NPU_group {tp} does not divide {total} GPUs")
    ga = max(1, conf.get("ga", 1))
    try:
        count = int(lines[1].split()[0])
    except (ValueError, IndexError):
        raise JobError(f"{p}: line 2: the number of layers, got {lines[1]!r}") from None
    if count != len(lines) - 2:
        raise JobError(f"{p}: line 2: says {count} layers, the file has {len(lines) - 2}")
    layers: list[_Layer] = []
    for n, line in enumerate(lines[2:], start=3):
        cols = line.split()
        where = f"{p}: line {n}"
        if len(cols) < 12:
            raise JobError(f"{where}: needs 12 columns, got {len(cols)}")
        try:
            nums = [int(cols[c]) for c in (2, 4, 5, 7, 8, 10, 11)]
        except ValueError:
            raise JobError(f"{where}: a time or size is not an integer") from None
        if any(v < 0 for v in nums):
            raise JobError(f"{where}: a time or size is negative")
        kinds = [_comm(cols[c], where) for c in (3, 6, 9)]
        layers.append(
            _Layer(
                cols[0],
                (nums[0], kinds[0] or "", nums[1]),
                (nums[2], kinds[1] or "", nums[3]),
                (nums[4], kinds[2] or "", nums[5]),
                nums[6],
            )
        )
    dp = total // tp
    par = Parallelism(tp=tp, dp=dp)
    g = JobGraph(p.stem, total, gpus_per_server=gpus_per_server)

    def ps(cycles: int) -> int:
        return round(cycles * NS_PER_CYCLE * 1000)

    last: dict[int, int] = {}
    pending_wg: list[int] = []

    def comp(rank: int, dur: int, label: str, phase: str, extra: tuple[int, ...] = ()) -> int:
        deps = tuple(sorted({*extra, *((last[rank],) if rank in last else ())}))
        idx = g.add(Task("compute", (rank,), deps, dur, 0, label, phase))
        last[rank] = idx
        return idx

    def coll(kind: str, ranks: list[int], size: int, label: str, phase: str) -> int | None:
        if len(ranks) < 2 or size <= 0:
            return None
        deps = tuple(sorted({last[r] for r in ranks if r in last}))
        return g.add(Task(kind, tuple(ranks), deps, size=size, label=label, phase=phase))

    tp_groups = [[rank_of(par, t, d, 0) for t in range(tp)] for d in range(dp)]
    dp_groups = [[rank_of(par, t, d, 0) for d in range(dp)] for t in range(tp)]
    for mb in range(ga):
        for li, layer in enumerate(layers):
            for group in tp_groups:
                for r in group:
                    comp(r, ps(layer.fwd[0]), f"{layer.name} fwd{mb}", "fwd")
                if layer.fwd[1]:
                    c = coll(layer.fwd[1], group, layer.fwd[2], f"{layer.name} L{li} fwd", "tp")
                    if c is not None:
                        for r in group:
                            last[r] = comp(r, 0, f"{layer.name} wait", "fwd", (c,))
        for li in range(len(layers) - 1, -1, -1):
            layer = layers[li]
            for group in tp_groups:
                for r in group:
                    comp(r, ps(layer.ig[0]), f"{layer.name} ig{mb}", "bwd")
                if layer.ig[1]:
                    c = coll(layer.ig[1], group, layer.ig[2], f"{layer.name} L{li} ig", "tp")
                    if c is not None:
                        for r in group:
                            last[r] = comp(r, 0, f"{layer.name} wait", "bwd", (c,))
                for r in group:
                    comp(r, ps(layer.wg[0]), f"{layer.name} wg{mb}", "bwd")
            if mb == ga - 1 and layer.wg[1]:
                for group in dp_groups:
                    c = coll(layer.wg[1], group, layer.wg[2], f"{layer.name} L{li} wg", "dp")
                    if c is not None:
                        pending_wg.append(c)
    # the step ends when every weight-gradient collective is done and the updates ran
    update = sum(ps(layer.update) for layer in layers)
    for r in range(total):
        mine = tuple(c for c in pending_wg if r in g.tasks[c].ranks)
        comp(r, update, "update", "opt", mine)
    return g


def write(graph_layers: list[tuple[str, tuple[int, str, int], tuple[int, str, int], tuple[int, str, int], int]],
          path: str | Path, tp: int, gpus: int, ga: int = 1) -> Path:  # fmt: skip
    """Write layer lines (name, fwd, ig, wg as (ns, type, bytes), update ns) as an AICB file."""
    p = Path(path)
    inverse = {v: k for k, v in COMM_TYPES.items()}
    out = [
        f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: 1 pp: 1 "
        f"vpp: 1 ga: {ga} all_gpus: {gpus} checkpoints: 0 checkpoint_initiates: 0",
        str(len(graph_layers)),
    ]
    for name, fwd, ig, wg, update in graph_layers:
        cols = [name, "-1"]
        for t, kind, size in (fwd, ig, wg):
            cols += [str(round(t / NS_PER_CYCLE)), inverse.get(kind, "NONE"), str(size)]
        cols.append(str(update))
        out.append("\t".join(cols))
    p.write_text("\n".join(out) + "\n")
    return p


def layers_of(job: object) -> tuple[list[tuple[str, tuple[int, str, int], tuple[int, str, int], tuple[int, str, int], int]], int, int, int]:  # fmt: skip
    """The AICB layer lines of one of openmrc's jobs (PP 1): (layers, tp, gpus, ga).

    Per layer: forward and input-gradient compute from the roofline (half the
    backward each), TP's all-reduce of the activation (``b s h w``) after the
    forward and input-gradient passes when ``tp > 1``, and the layer's
    gradient all-reduce (ZeRO 0) or reduce-scatter (ZeRO >= 1) over DP.
    """
    from .graph import JobSpec
    from .model import stage_arithmetic

    assert isinstance(job, JobSpec)
    job.validate()
    m, par, gpu = job.model, job.parallel, job.gpu
    if par.pp != 1 or par.ep != 1:
        raise JobError("aicb: only jobs with pp = 1 and ep = 1 can be written in this format")
    a = stage_arithmetic(m, par, 0)
    per_layer_fwd = a.fwd_flops / a.layers
    fwd_ns = gpu.compute_ps(per_layer_fwd, a.params_rank * m.dtype_bytes / a.layers) // 1000
    bwd_ns = gpu.compute_ps(2 * per_layer_fwd, 0) // 1000
    grad = m.layer_params() // par.tp * m.dtype_bytes
    tp_kind = "allreduce" if par.tp > 1 else ""
    dp_kind = ("allreduce" if par.zero == 0 else "reducescatter") if par.dp > 1 else ""
    out = []
    for li in range(a.layers):
        out.append(
            (
                f"layer{li}",
                (fwd_ns, tp_kind, a.tp_bytes if tp_kind else 0),
                (bwd_ns // 2, tp_kind, a.tp_bytes if tp_kind else 0),
                (bwd_ns - bwd_ns // 2, dp_kind, grad if dp_kind else 0),
                0,
            )
        )
    return out, par.tp, par.gpus, par.micro_batches(m)


__all__ = ["COMM_TYPES", "layers_of", "read", "write"]
