"""Jobs in scenario files: the ``[job]`` table (or ``[[jobs]]``) and rank placement.

::

    [job]                       # or [[jobs]], one table per job
    name = "gpt-1b"
    start_us = 0                # when its first compute starts
    placement = "packed"        # packed (next free servers, rack by rack) |
                                # spread (servers round-robin over the T0s) |
                                # [h0, h1, ...] one host per rank
    [job.model]                 # ModelSpec fields: layers, hidden, heads, seq_len, vocab,
    layers = 24                 # ffn_hidden, micro_batch, global_batch, dtype, experts,
    hidden = 2048               # top_k, capacity_factor, recompute
    [job.parallel]              # tp, pp, dp, ep, zero, buckets
    tp = 8
    [job.gpu]                   # tflops, mfu, hbm_gbytes_s, nvlink_gbytes_s, gpus_per_server

A server is ``gpus_per_server`` consecutive hosts (one NIC per GPU: a
simulator host is a GPU's NIC), so a server sits under one T0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...topology import ClosSpec
from .graph import JobGraph, JobSpec
from .model import GpuSpec, JobError, ModelSpec, Parallelism

JOB_KEYS = ("name", "start_us", "placement", "iterations", "model", "parallel", "gpu")


@dataclass
class JobConfig:
    """One job of a scenario: what it is, where its ranks go, when it starts."""

    spec: JobSpec
    placement: str | list[int] = "packed"
    start_us: float = 0.0
    #: iterations run back to back (openmrc.workloads.jobs.iterations).
    iterations: int = 1

    @property
    def name(self) -> str:
        """The job's name."""
        return self.spec.name

    @property
    def gpus(self) -> int:
        """GPUs (hosts) it needs."""
        return self.spec.gpus

    @property
    def gpus_per_server(self) -> int:
        """GPUs per server."""
        return self.spec.gpu.gpus_per_server


@dataclass
class FileJob:
    """A job read from a workload file (AICB text, Chakra traces): its graph is given."""

    graph: JobGraph
    placement: str | list[int] = "packed"
    start_us: float = 0.0
    #: iterations run back to back (openmrc.workloads.jobs.iterations).
    iterations: int = 1
    #: the file or folder it was read from (for messages).
    source: str = ""

    @property
    def name(self) -> str:
        """The job's name."""
        return self.graph.name

    @property
    def gpus(self) -> int:
        """GPUs (hosts) it needs."""
        return self.graph.ranks

    @property
    def gpus_per_server(self) -> int:
        """GPUs per server."""
        return self.graph.gpus_per_server


def _dataclass(cls: type, raw: Any, key: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise JobError(f"{key}: must be a table")
    names = {f.name: f for f in dataclasses.fields(cls)}
    for k, v in raw.items():
        if k not in names:
            raise JobError(f"{key}.{k}: unknown key (known: {', '.join(sorted(names))})")
        default = names[k].default
        want = type(default)
        ok = isinstance(v, want) or (want is float and isinstance(v, int))
        if not ok or isinstance(v, bool) != isinstance(default, bool):
            raise JobError(f"{key}.{k}: expected {want.__name__}, got {type(v).__name__} {v!r}")
    return cls(**raw)


def parse_job(raw: Any, key: str, index: int = 0) -> JobConfig:
    """A job table, checked (errors name ``key`` and the field)."""
    if not isinstance(raw, dict):
        raise JobError(f"{key}: must be a table")
    for k in raw:
        if k not in JOB_KEYS:
            raise JobError(f"{key}.{k}: unknown key (known: {', '.join(JOB_KEYS)})")
    name = raw.get("name", f"job{index}")
    if not isinstance(name, str) or not name:
        raise JobError(f"{key}.name: must be a non-empty string")
    model = _dataclass(ModelSpec, raw.get("model"), f"{key}.model")
    par = _dataclass(Parallelism, raw.get("parallel"), f"{key}.parallel")
    gpu = _dataclass(GpuSpec, raw.get("gpu"), f"{key}.gpu")
    spec = JobSpec(name, model, par, gpu)
    try:
        spec.validate()
    except JobError as exc:
        raise JobError(str(exc).replace("job.", f"{key}.", 1)) from None
    start = raw.get("start_us", 0)
    if isinstance(start, bool) or not isinstance(start, int | float) or start < 0:
        raise JobError(f"{key}.start_us: must be a number >= 0, got {start!r}")
    placement = raw.get("placement", "packed")
    if isinstance(placement, list):
        if not all(isinstance(h, int) and not isinstance(h, bool) for h in placement):
            raise JobError(f"{key}.placement: a list must hold host indices")
    elif placement not in ("packed", "spread"):
        raise JobError(
            f"{key}.placement: must be 'packed', 'spread' or a list of hosts, got {placement!r}"
        )
    return JobConfig(spec, placement, float(start), _iterations(raw.get("iterations", 1), key))


def _iterations(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobError(f"{key}.iterations: must be a positive integer, got {value!r}")
    return value


def parse_jobs(data: dict[str, Any]) -> list[JobConfig]:
    """The jobs of a scenario dict: ``[job]`` (one) or ``[[jobs]]`` (several)."""
    if "job" in data and "jobs" in data:
        raise JobError("job: give either [job] or [[jobs]], not both")
    if "job" in data:
        return [parse_job(data["job"], "job")]
    raw = data.get("jobs", [])
    if not isinstance(raw, list):
        raise JobError("jobs: must be an array of tables ([[jobs]])")
    out = [parse_job(item, f"jobs[{i}]", i) for i, item in enumerate(raw)]
    names = [j.spec.name for j in out]
    for n in names:
        if names.count(n) > 1:
            raise JobError(f"jobs: two jobs are named {n!r}")
    return out


def place(jobs: Sequence[JobConfig | FileJob], spec: ClosSpec) -> list[list[int]]:
    """Hosts of every rank of every job (explicit lists first, then packed / spread)."""
    taken: set[int] = set()
    out: list[list[int] | None] = [None] * len(jobs)
    for i, job in enumerate(jobs):
        key = f"jobs[{i}]" if len(jobs) > 1 else "job"
        if isinstance(job.placement, list):
            hosts = job.placement
            if len(hosts) != job.gpus:
                raise JobError(f"{key}.placement: {len(hosts)} hosts for {job.gpus} ranks")
            for h in hosts:
                if not 0 <= h < spec.hosts:
                    raise JobError(f"{key}.placement: host {h} is not in 0..{spec.hosts - 1}")
                if h in taken:
                    raise JobError(f"{key}.placement: host {h} is used twice")
                taken.add(h)
            out[i] = list(hosts)
    for i, job in enumerate(jobs):
        if out[i] is not None:
            continue
        key = f"jobs[{i}]" if len(jobs) > 1 else "job"
        g = job.gpus_per_server
        if spec.hosts_per_t0 % g:
            raise JobError(
                f"{key}.gpu.gpus_per_server: {g} does not divide fabric.hosts_per_t0 = "
                f"{spec.hosts_per_t0} (a server sits under one T0)"
            )
        per_t0 = spec.hosts_per_t0 // g
        servers = list(range(spec.hosts // g))
        if job.placement == "spread":
            servers = [a * per_t0 + j for j in range(per_t0) for a in range(spec.t0s)]
        free = [s for s in servers if not any(h in taken for h in range(s * g, s * g + g))]
        need = -(-job.gpus // g)
        if len(free) < need:
            what = key
            if isinstance(job, FileJob) and job.source:
                what = f"workload ({job.source}: {job.gpus} ranks)"
            raise JobError(
                f"{what}: needs {need} servers of {g} GPUs, {len(free)} are free on this fabric"
            )
        hosts = [s * g + x for s in free[:need] for x in range(g)][: job.gpus]
        taken.update(hosts)
        out[i] = hosts
    return [h for h in out if h is not None]


FILE_KEYS = {
    "aicb": ("file", "gpus", "gpus_per_server", "placement", "start_us", "name", "iterations"),
    "chakra": (
        "files",
        "comm_groups",
        "gpus_per_server",
        "placement",
        "start_us",
        "name",
        "iterations",
    ),
}


def parse_file_workload(w: dict[str, Any], base: Path | None) -> FileJob:
    """``[workload] kind = "aicb"`` (``file``, ``gpus``) or ``"chakra"`` (``files``: a
    folder, a glob or one file, one trace per rank; ``comm_groups``: astra-sim's
    communicator-group file): a job read from files (docs/workloads.md)."""
    from . import aicb, chakra

    kind = w.get("kind")
    known = FILE_KEYS[str(kind)]
    for k in w:
        if k != "kind" and k not in known:
            raise JobError(
                f"workload.{k}: not a key of a {kind} workload (known: {', '.join(known)})"
            )
    g = w.get("gpus_per_server", 8)
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        raise JobError(f"workload.gpus_per_server: must be a positive integer, got {g!r}")
    if kind == "aicb":
        name = w.get("file")
        if not isinstance(name, str) or not name:
            raise JobError("workload.file: the path of an AICB / SimAI workload .txt file")
        path = Path(name)
        if not path.is_absolute() and base is not None:
            path = base / path
        gpus = w.get("gpus")
        if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1):
            raise JobError(f"workload.gpus: must be a positive integer, got {gpus!r}")
        graph = aicb.read(path, gpus, g)
    else:
        spec = w.get("files")
        if not isinstance(spec, str) or not spec:
            raise JobError("workload.files: a folder, a glob or a file of Chakra traces (*.et)")
        files = chakra.trace_files(spec, base)
        groups = None
        cg = w.get("comm_groups")
        if cg is not None:
            if not isinstance(cg, str) or not cg:
                raise JobError(
                    "workload.comm_groups: the path of astra-sim's communicator-group JSON file"
                )
            cpath = Path(cg)
            if not cpath.is_absolute() and base is not None:
                cpath = base / cpath
            groups = chakra.read_comm_groups(cpath)
        name = Path(spec).name.split("*")[0].strip(".") or "chakra"
        graph = chakra.read(files, name, g, groups)
    if isinstance(w.get("name"), str) and w["name"]:
        graph.name = w["name"]
    placement = w.get("placement", "packed")
    if not isinstance(placement, list) and placement not in ("packed", "spread"):
        raise JobError(
            f"workload.placement: must be 'packed', 'spread' or a list, got {placement!r}"
        )
    start = w.get("start_us", 0)
    if isinstance(start, bool) or not isinstance(start, int | float) or start < 0:
        raise JobError(f"workload.start_us: must be a number >= 0, got {start!r}")
    source = str(path) if kind == "aicb" else str(spec)
    return FileJob(
        graph, placement, float(start), _iterations(w.get("iterations", 1), "workload"), source
    )


__all__ = [
    "FILE_KEYS",
    "JOB_KEYS",
    "FileJob",
    "JobConfig",
    "parse_file_workload",
    "parse_job",
    "parse_jobs",
    "place",
]
