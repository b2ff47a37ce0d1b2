"""How long ``openmrc paper --seeds N`` at full size takes on W workers, from per-run costs.

``openmrc paper`` submits its distinct runs longest first
(:func:`openmrc.paper.run.plan`) to a pool of ``--workers``; each worker takes the
next run when it is free.  This replays that order on W workers with each run's CPU
seconds and prints when the last one ends (on an idle machine with a core per worker
the wall time is about that), without running anything::

    python benchmarks/paper_full_cost.py --seeds 5 --workers 2 \
        --measured benchmarks/results/paper-loss-rows-full-seeds3.json \
        --cost alltoall-64-mrc=150 ...

A run's cost is the mean over the seeds measured of ``cpu_seconds`` (or, where a
results file has only ``wall_seconds``, that: an upper bound of the CPU) from the
``--measured`` files' ``runs`` lists, matched by scenario file and overrides; a
``--cost FILE=SECONDS`` gives it for every seed of a run not measured (all runs of
that file); a run with neither is reported and counted as 0.
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
from pathlib import Path

from openmrc.paper.experiments import EXPERIMENTS
from openmrc.paper.run import plan


def measured_costs(paths: list[Path]) -> dict[tuple[str, tuple[str, ...]], list[float]]:
    """Every measured run's CPU seconds, by (scenario file, overrides)."""
    out: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    for p in paths:
        for r in json.loads(p.read_text())["runs"]:
            cost = r.get("cpu_seconds", r.get("wall_seconds"))
            out.setdefault((r["run"], tuple(r["overrides"])), []).append(float(cost))
    return out


def main(argv: list[str] | None = None) -> int:
    """Replay the plan and print the per-run costs used and the total."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--measured", type=Path, action="append", default=[])
    p.add_argument(
        "--cost", action="append", default=[], help="FILE=SECONDS for a run not measured"
    )
    a = p.parse_args(argv)
    given = {}
    for c in a.cost:
        name, _, secs = c.partition("=")
        given[name] = float(secs)
    measured = measured_costs(a.measured)
    pl = plan(list(EXPERIMENTS), False, a.seeds)
    per_run: dict[tuple[str, tuple[str, ...]], tuple[float, str]] = {}
    costs: list[float] = []
    missing: set[str] = set()
    for pt in pl.points:
        key = (pt.name, tuple(pt.overrides))
        if key not in per_run:
            if key in measured:
                per_run[key] = (statistics.mean(measured[key]), "measured")
            elif pt.name in given:
                per_run[key] = (given[pt.name], "given")
            else:
                per_run[key] = (0.0, "unknown")
                missing.add(pt.name)
        costs.append(per_run[key][0])
    workers = [0.0] * a.workers
    heapq.heapify(workers)
    for c in costs:  # in the plan's order: the next run goes to the first free worker
        heapq.heappush(workers, heapq.heappop(workers) + c)
    for (name, over), (c, how) in sorted(per_run.items(), key=lambda kv: -kv[1][0]):
        print(f"{c:8.1f} s  {how:8s}  {name} {' '.join(over)}")
    total = sum(costs)
    print(
        f"{len(costs)} runs over {a.seeds} seeds: {total:.0f} CPU s in all; "
        f"on {a.workers} workers the last ends at {max(workers):.0f} s ({max(workers) / 60:.1f} min)"
    )
    if missing:
        print("no cost for (counted as 0):", ", ".join(sorted(missing)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
