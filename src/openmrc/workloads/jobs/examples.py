"""The example workload files shipped in scenarios/training/, generated from openmrc's own jobs.

``python -m openmrc.workloads.jobs.examples [DIR]`` (default ``scenarios/training``)
writes:

* ``gpt-small-16.aicb.txt``: an AICB / SimAI workload text file of a
  4-layer GPT (hidden 512) on 16 GPUs, TP 2 x DP 8;
* ``gpt-small-8-et/gpt-small-8.<rank>.et``: Chakra execution traces, one per
  rank, of the same model on 8 GPUs, PP 2 x DP 4 (1F1B, DP buckets).

Both are what :mod:`openmrc.workloads.jobs.aicb` and :mod:`openmrc.workloads.jobs.chakra` write
from the job descriptions below; tests check the shipped files are exactly
what this module writes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from . import aicb, chakra
from .graph import JobSpec, build_iteration
from .model import GpuSpec, ModelSpec, Parallelism

SMALL = ModelSpec(layers=4, hidden=512, heads=8, seq_len=512, vocab=8192, global_batch=16)
AICB_JOB = JobSpec("gpt-small-16", SMALL, Parallelism(tp=2, dp=8), GpuSpec(gpus_per_server=2))
CHAKRA_JOB = JobSpec(
    "gpt-small-8", SMALL, Parallelism(pp=2, dp=4, buckets=2), GpuSpec(gpus_per_server=1)
)

#: The scenario (as parsed data) of the small job on which the flow-level model is
#: calibrated against the packet simulator: 8 GPUs, PP 2 x DP 4, runs in seconds at
#: packet level.  ``tests/pipeline/test_training.py`` checks the agreement on it and
#: ``benchmarks/training.py`` puts it first in its agreement table.
CALIBRATION_SCENARIO: dict[str, Any] = {
    "seed": 1,
    "fabric": {"planes": 2, "t0s": 2, "hosts_per_t0": 4, "t1s": 2},
    "job": {
        "name": "small",
        "model": {
            "layers": 2,
            "hidden": 256,
            "heads": 4,
            "seq_len": 256,
            "vocab": 4096,
            "global_batch": 8,
        },
        "parallel": {"pp": 2, "dp": 4},
        "gpu": {"gpus_per_server": 1, "tflops": 50.0},
    },
}


def write_examples(directory: str | Path) -> list[Path]:
    """Write the example files into ``directory``; their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    layers, tp, gpus, ga = aicb.layers_of(AICB_JOB)
    out = [aicb.write(layers, d / "gpt-small-16.aicb.txt", tp, gpus, ga)]
    out += chakra.write(build_iteration(CHAKRA_JOB), d / "gpt-small-8-et", "gpt-small-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the examples (into the folder given, default scenarios/training)."""
    args = sys.argv[1:] if argv is None else argv
    for p in write_examples(args[0] if args else "scenarios/training"):
        print(p)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["AICB_JOB", "CHAKRA_JOB", "main", "write_examples"]
