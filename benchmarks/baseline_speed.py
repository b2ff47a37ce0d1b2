"""Speed of the baselines' runs (RoCE and IB): the paper's 64-rank RoCE collectives.

The figures of ``openmrc paper --figures`` spend most of their time in the RoCE
runs with 16 QPs per connection (64 x 63 x 16 QPs in the all-to-all).  This
times those scenario runs, each in a fresh process, and prints one JSON object
per run: the scenario, its ``--set`` overrides, wall and CPU seconds, simulated
microseconds, the collective's busbw, and a digest of ``results.json`` less its
wall time and provenance (equal digests: the same results)::

    python benchmarks/baseline_speed.py --out b.json
    python benchmarks/baseline_speed.py --case a2a-16qp --case ring-16qp

Run it on two builds (``PYTHONPATH=OTHER/src``) to compare them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "scenarios" / "paper"

#: case -> (scenario file, ``--set`` overrides)
CASES: dict[str, tuple[str, list[str]]] = {
    "a2a-16qp": ("alltoall-64-roce-16qp.toml", []),
    "a2a-1qp": ("alltoall-64-roce-1qp.toml", []),
    "ring-16qp": ("ring-allreduce-64-roce-16qp.toml", ['workload.size="4MiB"']),
    "ring-1qp": ("ring-allreduce-64-roce-1qp.toml", ['workload.size="4MiB"']),
}


def digest(results: dict[str, object]) -> str:
    """SHA-256 of the results without what differs from run to run."""
    kept = {k: v for k, v in results.items() if k not in ("wall_seconds", "provenance")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def run(case: str) -> dict[str, object]:
    """One case in a fresh ``openmrc run`` process."""
    scenario, overrides = CASES[case]
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "openmrc.cli", "run", str(PAPER / scenario), "--out", out]
        for o in overrides:
            cmd += ["--set", o]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        results = json.loads((Path(out) / "results.json").read_text())
    coll = results.get("collectives") or [{}]
    return {
        "case": case,
        "scenario": f"scenarios/paper/{scenario}",
        "overrides": overrides,
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "sim_us": results.get("sim_end_us"),
        "busbw_gbps": coll[0].get("busbw_gbps"),
        "results_sha256": digest(results),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    ap.add_argument("--out", help="also write the JSON list here")
    args = ap.parse_args(argv)
    rows = []
    for case in args.case or list(CASES):
        row = run(case)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
