"""AICB / SimAI workload text files: read into a job graph the way SimAI runs them, and written.

The format SimAI's ASTRA-sim front end consumes (AICB generates it from
Megatron, DeepSpeed and MoE models; docs/workloads.md has the full table):

* line 1: the training loop, then header fields, e.g.
  ``HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 4 pp: 2
  vpp: 1 ga: 8 all_gpus: 32 checkpoints: 0 checkpoint_initiates: 0
  pp_comm: 8388608``;
* line 2: the number of layer lines;
* one line per layer, 12 whitespace-separated columns: name, a reserved
  dependency field (``-1``), forward compute time, forward communication
  type, its size in bytes, input-gradient compute time, type, size,
  weight-gradient compute time, type, size, and the update delay.  Times are
  ASTRA-sim cycles, taken as nanoseconds (its 1 GHz default).

How each line runs is SimAI's (``Workload::iterate_hybrid_parallel_
Transformer_fwd_in_bckwd``): every rank runs every line; the forward pass
runs the lines in order (compute, then the forward collective, blocking);
the backward pass runs them in reverse (input-gradient compute and
collective, blocking; weight-gradient compute, then its collective without
blocking); the step ends when every collective finished.  ``ga`` is not a
repeat count: AICB writes every micro-batch's lines into the file, and
SimAI reads ``ga`` only for the pipeline bubble.  A collective's completion
is signalled ``update`` cycles after it ends (SimAI's per-layer delay; for
the weight-gradient collectives, which nothing waits for until the step
ends, once after the last of them).
``DATA`` runs no forward or input-gradient collectives; ``MICRO`` issues
every line's weight-gradient collective at once, with no compute.

Groups follow SimAI's MockNcclGroup: ranks are laid out TP fastest, then
pipeline stage, then DP (rank ``t + tp * (s + pp * d)``); a plain type in
the forward or input-gradient column runs over TP, in the weight-gradient
column over DP; ``_EP`` names the expert group (``ep`` consecutive DP
replicas of one stage), ``_DP_EP`` the data-parallel group of the expert
weights (the DP replicas ``ep`` apart).  Two choices where SimAI's file does
not say what the framework does:

* **DeepSpeed ZeRO-3** (``model_parallel_NPU_group: 1``): a plain
  ``ALLGATHER`` in the forward or input-gradient column has no TP group to
  run over; AICB writes ZeRO-3's per-layer parameter gathers there, which
  DeepSpeed runs over the data-parallel group, so openmrc runs them over DP
  (phase ``zero``).  SimAI finds the TP dimension disabled and runs nothing.
* **BROADCAST** (Megatron's data broadcast to the TP group, the ``norm``
  line): SimAI's parser has no such type and runs nothing; openmrc runs it
  as NCCL's ring broadcast from the group's first rank (each rank forwards
  the buffer to the next, concurrently: what a pipelined ring moves).

``pp > 1``: every stage runs the file (it is one stage's work, as SimAI
runs it); stage ``s`` starts after stage ``s-1``'s first micro-batch
forward (``pp_comm`` bytes sent between them, then a bubble of one
micro-batch's forward compute) and ends after stage ``s+1``'s last gradient
(``pp_comm`` bytes, then one micro-batch's backward compute): the 1F1B
bubble ``(pp-1)/(ga*vpp)`` of the stage's compute, SimAI's formula.  The
other ``ga*vpp - 1`` micro-batches' activations and gradients
(``pp_comm`` each) move beside the compute and must arrive within the step.

A collective that maps to nothing (a one-rank group, 0 bytes) is counted in
:attr:`JobGraph.skipped` with the reason; an unknown type or field is an
error naming the file, the line and the token.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from .graph import JobGraph, Task
from .model import JobError

#: collective types of the format and openmrc's kinds (``broadcast`` runs as p2p).
COMM_TYPES = {
    "ALLREDUCE": "allreduce",
    "ALLGATHER": "allgather",
    "REDUCESCATTER": "reducescatter",
    "ALLTOALL": "alltoall",
    "BROADCAST": "broadcast",
}
#: a type's group suffix: "" is the column's own group (TP, or DP for weight gradients).
GROUP_SUFFIXES = {"": "", "_TP": "tp", "_DP": "dp", "_EP": "ep", "_DP_EP": "dp_ep"}
#: training loops (SimAI's ParallelismPolicy names) openmrc runs.
LOOPS = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "DATA", "MICRO")
#: header fields with one integer value (``pp_comm`` may be written without its colon).
INT_FIELDS = ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
COLUMNS = ("fwd", "ig", "wg")
#: SimAI rounds a forward collective of fewer bytes up to this.
MIN_FWD_BYTES = 4096

#: the most tasks (about ranks x lines x 6) a file may become: beyond, the graph alone
#: would take tens of GB; ``workload.gpus`` runs the file on fewer GPUs.
MAX_TASKS = 30_000_000

#: ns per cycle (ASTRA-sim's default clock: 1 GHz).
NS_PER_CYCLE = 1.0


@dataclass
class Header:
    """Line 1 of a workload file."""

    loop: str
    fields: dict[str, int] = field(default_factory=dict)
    checkpoints: list[int] = field(default_factory=list)
    initiates: list[int] = field(default_factory=list)

    def get(self, key: str, default: int) -> int:
        """A field's value, or ``default`` when the file does not give it."""
        return self.fields.get(key, default)


@dataclass(frozen=True)
class Comm:
    """One column's collective: openmrc's kind, its group and bytes, and the file's token."""

    kind: str
    group: str
    size: int
    token: str


@dataclass(frozen=True)
class Line:
    """One layer line: compute times in ns, collectives (None: NONE), the update delay."""

    name: str
    number: int
    compute: tuple[int, int, int]
    comms: tuple[Comm | None, Comm | None, Comm | None]
    update: int


def _number(token: str, what: str, where: str, allow_float: bool = False) -> int:
    try:
        return int(token)
    except ValueError:
        pass
    if allow_float:  # AICB writes pp_comm as a float when it divides by TP; SimAI's stoi truncates
        try:
            return int(float(token))
        except (ValueError, OverflowError):
            pass
    raise JobError(f"{where}: {what}: not an integer: {token!r}")


def parse_header(text: str, where: str) -> Header:
    """The training loop and fields of line 1 (errors name the field)."""
    tokens = text.split()
    if not tokens:
        raise JobError(f"{where}: empty; the training loop expected")
    if tokens[0] not in LOOPS:
        raise JobError(
            f"{where}: unknown training loop {tokens[0]!r} (openmrc runs {', '.join(LOOPS)})"
        )
    head = Header(tokens[0])
    i = 1
    while i < len(tokens):
        key = tokens[i].removesuffix(":")
        if i + 1 >= len(tokens):
            raise JobError(f"{where}: {key} has no value")
        if key in ("checkpoints", "checkpoint_initiates"):
            n = _number(tokens[i + 1], key, where)
            vals = tokens[i + 2 : i + 2 + n]
            if n < 0 or len(vals) < n:
                raise JobError(f"{where}: {key}: says {n} layers, gives {len(vals)}")
            layers = [_number(v, key, where) for v in vals]
            (head.checkpoints if key == "checkpoints" else head.initiates).extend(layers)
            i += 2 + n
        elif key in INT_FIELDS:
            v = _number(tokens[i + 1], key, where, allow_float=key == "pp_comm")
            if v < 0:
                raise JobError(f"{where}: {key}: must be >= 0, got {v}")
            head.fields[key] = v
            i += 2
        else:
            raise JobError(
                f"{where}: unknown header field {tokens[i]!r} (known: "
                f"{', '.join(INT_FIELDS)}, checkpoints, checkpoint_initiates)"
            )
    return head


def parse_comm(token: str, size: int, column: str, where: str) -> Comm | None:
    """A column's type token as a collective (None for ``NONE``); unknown: an error."""
    if token == "NONE":
        return None
    for base in sorted(COMM_TYPES, key=len, reverse=True):
        if token.startswith(base) and token[len(base) :] in GROUP_SUFFIXES:
            group = GROUP_SUFFIXES[token[len(base) :]] or ("dp" if column == "wg" else "tp")
            return Comm(COMM_TYPES[base], group, size, token)
    extra = " (SimAI's parser runs it as nothing)" if token.startswith("ALLREDUCEALLTOALL") else ""
    known = ", ".join(f"{b}[{'|'.join(s for s in GROUP_SUFFIXES if s)}]" for b in COMM_TYPES)
    raise JobError(
        f"{where}: {column} column: unknown communication type {token!r}{extra} "
        f"(known: NONE, {known})"
    )


def parse(path: str | Path) -> tuple[Header, list[Line]]:
    """The header and layer lines of an AICB file (errors name the file and the line)."""
    p = Path(path)
    try:
        raw = p.read_text()
    except OSError as exc:
        raise JobError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise JobError(f"{p}: not a text file (an AICB / SimAI workload .txt expected)") from None
    numbered = [(n, ln) for n, ln in enumerate(raw.splitlines(), start=1) if ln.strip()]
    if len(numbered) < 2:
        raise JobError(f"{p}: line 1: needs a header line and a layer count")
    head = parse_header(numbered[0][1], f"{p}: line {numbered[0][0]}")
    n2, second = numbered[1]
    try:
        count = int(second.split()[0])
    except (ValueError, IndexError):
        raise JobError(f"{p}: line {n2}: the number of layers, got {second!r}") from None
    body = numbered[2:]
    if count != len(body):
        raise JobError(f"{p}: line {n2}: says {count} layers, the file has {len(body)}")
    lines: list[Line] = []
    for n, text in body:
        cols = text.split()
        where = f"{p}: line {n}"
        if len(cols) < 12:
            raise JobError(f"{where}: needs 12 columns, got {len(cols)}")
        try:
            nums = [int(cols[c]) for c in (2, 4, 5, 7, 8, 10, 11)]
        except ValueError:
            raise JobError(f"{where}: a time or size is not an integer") from None
        if any(v < 0 for v in nums):
            raise JobError(f"{where}: a time or size is negative")
        comms = tuple(
            parse_comm(cols[c], nums[k], col, where)
            for c, k, col in ((3, 1, "fwd"), (6, 3, "ig"), (9, 5, "wg"))
        )
        lines.append(
            Line(
                cols[0],
                n,
                (_ns(nums[0]), _ns(nums[2]), _ns(nums[4])),
                (comms[0], comms[1], comms[2]),
                _ns(nums[6]),
            )
        )
    return head, lines


def _ns(cycles: int) -> int:
    return round(cycles * NS_PER_CYCLE)


class _Builder:
    """The task graph of one file: ranks, groups and the running state of every rank."""

    def __init__(self, g: JobGraph, tp: int, pp: int, dp: int, ep: int) -> None:
        self.g = g
        self.tp, self.pp, self.dp, self.ep = tp, pp, dp, ep
        self.last: dict[int, int] = {}
        self.pending: dict[int, list[int]] = {r: [] for r in range(g.ranks)}
        #: per rank, the update delay of its non-blocking collectives (after the last one)
        self.delay: dict[int, int] = {}
        self._parts: dict[str, list[list[int]]] = {}

    def rank(self, t: int, s: int, d: int) -> int:
        """SimAI's layout: TP fastest, then the pipeline stage, then DP."""
        return t + self.tp * (s + self.pp * d)

    def groups(self, kind: str) -> list[list[int]]:
        """Every group of a kind (tp, dp, ep, dp_ep): a partition of the ranks."""
        if kind not in self._parts:
            tp, pp, dp, ep = self.tp, self.pp, self.dp, self.ep
            r = self.rank
            out: list[list[int]]
            if kind == "tp":
                out = [[r(t, s, d) for t in range(tp)] for d in range(dp) for s in range(pp)]
            elif kind == "dp":
                out = [[r(t, s, d) for d in range(dp)] for s in range(pp) for t in range(tp)]
            elif kind == "ep":
                out = [
                    [r(t, s, d) for d in range(b, b + ep)]
                    for b in range(0, dp, ep)
                    for s in range(pp)
                    for t in range(tp)
                ]
            else:
                out = [
                    [r(t, s, d) for d in range(j, dp, ep)]
                    for j in range(ep)
                    for s in range(pp)
                    for t in range(tp)
                ]
            self._parts[kind] = out
        return self._parts[kind]

    def comp(
        self, rank: int, dur: int, label: str, phase: str, extra: tuple[int, ...] = ()
    ) -> None:
        """A span on ``rank`` after its previous one (and ``extra``)."""
        prev = self.last.get(rank)
        if dur == 0 and not extra:
            return
        deps = tuple(sorted({*extra, *((prev,) if prev is not None else ())}))
        self.last[rank] = self.g.add(Task("compute", (rank,), deps, dur * 1000, 0, label, phase))

    def skip_reason(self, c: Comm, size: int, group: str, group_size: int) -> str | None:
        """Why a collective runs nothing, or None."""
        if group_size < 2:
            return f"{c.token} over a one-rank {group.upper()} group"
        if size <= 0:
            return f"{c.token} of 0 bytes"
        return None

    def coll(self, c: Comm, ranks: list[int], size: int, label: str, phase: str) -> list[int]:
        """The tasks of one collective over ``ranks`` once each of them is ready."""
        deps = tuple(sorted({self.last[r] for r in ranks if r in self.last}))
        if c.kind == "broadcast":
            return [
                self.g.add(Task("p2p", (a, b), deps, size=size, label=label, phase=phase))
                for a, b in itertools.pairwise(ranks)
            ]
        return [self.g.add(Task(c.kind, tuple(ranks), deps, size=size, label=label, phase=phase))]

    def issue(
        self,
        c: Comm | None,
        line: Line,
        col: str,
        with_compute: bool,
        blocking: bool,
        dur: int,
    ) -> None:
        """One column of a line on every rank: compute spans, then the collective.

        ``with_compute``: every rank first runs the column's compute (``dur`` ns);
        ``blocking``: every rank waits for its group's collective (and the update
        delay); otherwise the collective only has to finish within the step.
        """
        label = f"{line.name} L{line.number} {col}"
        cphase = "fwd" if col == "fwd" else "bwd"
        size = 0 if c is None else c.size
        if c is not None and col == "fwd" and 0 < size < MIN_FWD_BYTES:
            size = MIN_FWD_BYTES
        group_kind = "tp" if c is None else self._group_of(c, col)
        parts = self.groups(group_kind)
        reason = None if c is None else self.skip_reason(c, size, group_kind, len(parts[0]))
        if reason is not None:
            self.g.skip(reason)
        phase = "zero" if c is not None and group_kind != c.group else group_kind
        for group in parts:
            if with_compute:
                for r in group:
                    self.comp(r, dur, label, cphase)
            if c is None or reason is not None:
                continue
            tasks = self.coll(c, group, size, label, phase)
            done = tuple(tasks)
            if blocking:
                for r in group:
                    self.comp(r, line.update, f"{label} wait", "wait", done)
            else:
                for r in group:
                    self.pending[r].extend(done)
                    self.delay[r] = max(self.delay.get(r, 0), line.update)

    def _group_of(self, c: Comm, col: str) -> str:
        # ZeRO-3's parameter gathers (module docstring): no TP group, so the DP group
        if (
            self.tp == 1
            and col in ("fwd", "ig")
            and c.kind == "allgather"
            and c.token == "ALLGATHER"
        ):
            return "dp"
        return c.group


def read(path: str | Path, gpus: int | None = None, gpus_per_server: int = 8) -> JobGraph:
    """The job graph of an AICB workload file (errors name the file and the line)."""
    p = Path(path)
    head, lines = parse(p)
    where = f"{p}: line 1"
    total = gpus if gpus is not None else head.fields.get("all_gpus")
    if not total:
        raise JobError(f"{where}: no all_gpus (give workload.gpus)")
    tp = head.get("model_parallel_NPU_group", 1) or total  # SimAI: 0 means every GPU
    pp = head.get("pp", 1)
    ep = head.get("ep", 1)
    vpp = head.get("vpp", 1)
    ga = head.get("ga", 1)
    for key, v in (("pp", pp), ("ep", ep), ("vpp", vpp), ("ga", ga)):
        if v < 1:
            raise JobError(f"{where}: {key}: must be >= 1, got {v}")
    if total % (tp * pp):
        raise JobError(
            f"{where}: model_parallel_NPU_group {tp} x pp {pp} does not divide {total} GPUs"
        )
    dp = total // (tp * pp)
    if dp % ep:
        raise JobError(f"{where}: ep {ep} does not divide the {dp} data-parallel replicas")
    for key, layers in (
        ("checkpoints", head.checkpoints),
        ("checkpoint_initiates", head.initiates),
    ):
        for x in layers:
            if not 0 <= x < len(lines):
                raise JobError(f"{where}: {key}: layer {x} is not one of 0..{len(lines) - 1}")
    for x in head.initiates:
        if not any(c <= x for c in head.checkpoints):
            raise JobError(
                f"{where}: checkpoint_initiates: layer {x} has no checkpoint at or below it"
            )
    if total * max(1, len(lines)) * 6 > MAX_TASKS:
        raise JobError(
            f"{where}: {total} GPUs x {len(lines)} lines is too large a graph to build "
            f"(about {total * len(lines) * 6:,} tasks, at most {MAX_TASKS:,}); give "
            "workload.gpus to run it on fewer GPUs"
        )
    g = JobGraph(p.stem, total, gpus_per_server=gpus_per_server)
    b = _Builder(g, tp, pp, dp, ep)
    if head.loop == "MICRO":
        for line in lines:
            b.issue(line.comms[2], line, "wg", False, False, 0)
    else:
        _pipeline_fill(b, head, lines, vpp * ga)
        _sweeps(b, head, lines)
        _pipeline_drain(b, head, lines, vpp * ga)
    for r in range(total):
        mine = tuple(sorted(set(b.pending[r])))
        b.comp(r, b.delay.get(r, 0) if mine else 0, "step end", "wait", mine)
        if r not in b.last:  # a rank with nothing at all: still part of the job
            b.last[r] = g.add(Task("compute", (r,), (), 0, 0, "step end", "wait"))
    return g


def _sweeps(b: _Builder, head: Header, lines: list[Line]) -> None:
    """SimAI's forward pass, then its backward pass, on every rank."""
    data = head.loop == "DATA"
    for line in lines:
        b.issue(None if data else line.comms[0], line, "fwd", True, True, line.compute[0])
    checkpoints = set(head.checkpoints)
    initiates = set(head.initiates)
    everyone = list(range(b.g.ranks))
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if i in initiates and not data:
            j = max(c for c in checkpoints if c <= i)
            for k in range(j, i) if j < i else (i,):
                redo = lines[k]
                b.issue(redo.comms[0], redo, "fwd", True, True, redo.compute[0])
        if data:
            # SimAI's data-parallel loop: weight gradient and its collective, then the
            # input gradient (none for the first layer), no other collectives
            for r in everyone:
                b.comp(r, line.compute[2], f"{line.name} L{line.number} wg", "bwd")
            b.issue(line.comms[2], line, "wg", False, False, 0)
            if i > 0:
                for r in everyone:
                    b.comp(r, line.compute[1], f"{line.name} L{line.number} ig", "bwd")
            continue
        b.issue(line.comms[1], line, "ig", True, True, line.compute[1])
        for r in everyone:
            b.comp(r, line.compute[2], f"{line.name} L{line.number} wg", "bwd")
        b.issue(line.comms[2], line, "wg", False, False, 0)


def _micro(lines: list[Line], col: int, chunks: int) -> int:
    """One micro-batch's share (ns) of a column's compute."""
    return sum(line.compute[col] for line in lines) // chunks


def _pp_comm(b: _Builder, head: Header) -> int:
    size = head.get("pp_comm", 0)
    if b.pp > 1 and size == 0:
        b.g.skip("pipeline transfers: pp_comm is 0")
    return size


def _pipeline_fill(b: _Builder, head: Header, lines: list[Line], chunks: int) -> None:
    """Stage s starts after stage s-1's first micro-batch forward (module docstring)."""
    if b.pp == 1:
        return
    size = _pp_comm(b, head)
    fwd = _micro(lines, 0, chunks)
    for t in range(b.tp):
        for d in range(b.dp):
            for s in range(1, b.pp):
                src, dst = b.rank(t, s - 1, d), b.rank(t, s, d)
                dep = (b.last[src],) if src in b.last else ()
                extra = _pp_transfer(b, src, dst, dep, size, chunks, "activation")
                b.comp(dst, fwd, "pipeline fill", "bubble", extra)


def _pipeline_drain(b: _Builder, head: Header, lines: list[Line], chunks: int) -> None:
    """Stage s ends after stage s+1's last micro-batch gradient and its own backward."""
    if b.pp == 1:
        return
    size = head.get("pp_comm", 0)
    bwd = _micro(lines, 1, chunks) + _micro(lines, 2, chunks)
    for t in range(b.tp):
        for d in range(b.dp):
            for s in range(b.pp - 2, -1, -1):
                src, dst = b.rank(t, s + 1, d), b.rank(t, s, d)
                dep = (b.last[src],) if src in b.last else ()
                extra = _pp_transfer(b, src, dst, dep, size, chunks, "gradient")
                b.comp(dst, bwd, "pipeline drain", "bubble", extra)


def _pp_transfer(
    b: _Builder, src: int, dst: int, dep: tuple[int, ...], size: int, chunks: int, what: str
) -> tuple[int, ...]:
    """The pipeline transfer between two stages that the fill (``what`` =
    "activation") or the drain ("gradient") waits for: the first (fill) or last
    (drain) micro-batch's ``size`` bytes; the other ``chunks - 1`` go as one bulk
    transfer the receiving rank's next step waits for.  Returns what the bubble
    compute depends on (``dep`` itself when the file gives no ``pp_comm`` bytes)."""
    if not size:
        return dep
    edge = "first" if what == "activation" else "last"
    first = b.g.add(Task("p2p", (src, dst), dep, size=size, label=f"pp {edge} {what}", phase="pp"))
    if chunks > 1:
        bulk = Task(
            "p2p", (src, dst), dep, size=size * (chunks - 1), label=f"pp {what}s", phase="pp"
        )
        b.pending[dst].append(b.g.add(bulk))
    return (first,)


def write(graph_layers: list[tuple[str, tuple[int, str, int], tuple[int, str, int], tuple[int, str, int], int]],
          path: str | Path, tp: int, gpus: int, ga: int = 1) -> Path:  # fmt: skip
    """Write layer lines (name, fwd, ig, wg as (ns, type, bytes), update ns) as an AICB file.

    As AICB does, every micro-batch's lines are in the file (``ga`` copies); the
    weight-gradient collectives sit on the first copy, which SimAI's backward
    pass reaches last (gradients are reduced once they have accumulated).
    """
    p = Path(path)
    inverse = {v: k for k, v in COMM_TYPES.items()}
    out = [
        f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: 1 pp: 1 "
        f"vpp: 1 ga: {ga} all_gpus: {gpus} checkpoints: 0 checkpoint_initiates: 0",
        str(ga * len(graph_layers)),
    ]
    for copy in range(ga):
        for name, fwd, ig, wg, update in graph_layers:
            cols = [name, "-1"]
            for col, (t, kind, size) in enumerate((fwd, ig, wg)):
                if col == 2 and copy > 0:
                    kind, size = "", 0
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


__all__ = [
    "COMM_TYPES",
    "LOOPS",
    "Header",
    "Line",
    "layers_of",
    "parse",
    "parse_header",
    "read",
    "write",
]
