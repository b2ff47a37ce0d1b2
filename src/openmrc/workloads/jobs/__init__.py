"""Training jobs as the workload: a model description in, one iteration's tasks out.

:mod:`openmrc.workloads.jobs.model` holds the model arithmetic (parameters, FLOPs, bytes,
the roofline), :mod:`openmrc.workloads.jobs.graph` builds one iteration's task graph
(1F1B, DP buckets, ZeRO, EP all-to-all), :mod:`openmrc.workloads.jobs.place` puts ranks
on hosts, :mod:`openmrc.workloads.jobs.lower` turns a graph into the packet simulator's
flows, and :mod:`openmrc.workloads.jobs.report` reads the step time back.  The
flow-level model that runs the same graphs is :mod:`openmrc.flow.model`.
Formulas and choices: docs/training.md.
"""

from .graph import JobGraph, JobSpec, Task, build_iteration
from .model import GpuSpec, JobError, ModelSpec, Parallelism

__all__ = [
    "GpuSpec",
    "JobError",
    "JobGraph",
    "JobSpec",
    "ModelSpec",
    "Parallelism",
    "Task",
    "build_iteration",
]
