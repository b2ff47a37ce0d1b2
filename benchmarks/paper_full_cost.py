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
``--measured`` files' ``runs`` lists, matched by scenario file and overrides (a run
measured to the end of its collective under another ``run.until_us`` cap matches
too: the cap did not cut it, so it costs the same); a ``--cost FILE=SECONDS`` gives
it for every seed of a run not measured (all runs of that file); a run with neither
is reported and counted as 0.  ``--scale FILE=FACTOR`` multiplies the cost of every
run of that file, measured or given (for runs measured before a speed-up that a
paired benchmark measured: ``sim_speed.py --vs-ref``).

It also prints the two lower bounds of any order on W workers, the total over W and
the longest run, so the replayed makespan shows what the order itself costs.
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
from pathlib import Path

from openmrc.paper.experiments import EXPERIMENTS
from openmrc.paper.run import plan


def uncapped(overrides: tuple[str, ...]) -> tuple[str, ...]:
    """``overrides`` without a ``run.until_us`` cap."""
    return tuple(o for o in overrides if not o.startswith("run.until_us="))


def measured_costs(paths: list[Path]) -> dict[tuple[str, tuple[str, ...]], list[float]]:
    """Every measured run's CPU seconds, by (scenario file, overrides); a run that
    finished its collective also under its overrides without the cap."""
    out: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    for p in paths:
        doc = json.loads(p.read_text())
        if "runs" not in doc:
            raise SystemExit(f"--measured {p}: no 'runs' list (not a paper_loss_rows.py file)")
        for r in doc["runs"]:
            cost = float(r.get("cpu_seconds", r.get("wall_seconds")))
            over = tuple(r["overrides"])
            out.setdefault((r["run"], over), []).append(cost)
            if r.get("complete") and uncapped(over) != over:
                out.setdefault((r["run"], ("finished", *uncapped(over))), []).append(cost)
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
    p.add_argument(
        "--scale", action="append", default=[], help="FILE=FACTOR: every run of FILE costs FACTOR x"
    )
    a = p.parse_args(argv)
    given: dict[str, float] = {}
    scale: dict[str, float] = {}
    for opt, c, into in [("--cost", c, given) for c in a.cost] + [
        ("--scale", c, scale) for c in a.scale
    ]:
        name, eq, val = c.partition("=")
        try:
            into[name] = float(val)
        except ValueError:
            raise SystemExit(f"{opt} {c!r}: expected FILE=NUMBER") from None
        if not eq or into[name] < 0:
            raise SystemExit(f"{opt} {c!r}: expected FILE=NUMBER (a non-negative number)")
    measured = measured_costs(a.measured)
    pl = plan(list(EXPERIMENTS), False, a.seeds)
    per_run: dict[tuple[str, tuple[str, ...]], tuple[float, str]] = {}
    costs: list[float] = []
    missing: set[str] = set()
    for pt in pl.points:
        key = (pt.name, tuple(pt.overrides))
        if key not in per_run:
            finished = (pt.name, ("finished", *uncapped(key[1])))
            f = scale.get(pt.name, 1.0)
            how = "" if f == 1.0 else f" x{f:g}"
            if key in measured:
                per_run[key] = (f * statistics.mean(measured[key]), "measured" + how)
            elif finished in measured:
                per_run[key] = (f * statistics.mean(measured[finished]), "measured" + how)
            elif pt.name in given:
                per_run[key] = (f * given[pt.name], "given" + how)
            else:
                per_run[key] = (0.0, "unknown")
                missing.add(pt.name)
        costs.append(per_run[key][0])
    workers = [0.0] * a.workers
    heapq.heapify(workers)
    for c in costs:  # in the plan's order: the next run goes to the first free worker
        heapq.heappush(workers, heapq.heappop(workers) + c)
    for (name, over), (c, how) in sorted(per_run.items(), key=lambda kv: -kv[1][0]):
        print(f"{c:8.1f} s  {how:14s}  {name} {' '.join(over)}")
    total = sum(costs)
    bound = max(total / a.workers, max(costs, default=0.0))
    print(
        f"{len(costs)} runs over {a.seeds} seeds: {total:.0f} CPU s in all; "
        f"on {a.workers} workers the last ends at {max(workers):.0f} s ({max(workers) / 60:.1f} min); "
        f"no order does better than {bound:.0f} s ({bound / 60:.1f} min); idle tail "
        f"{max(workers) - min(workers):.0f} s (the first worker to run out of runs waits "
        "that long for the last)"
    )
    if missing:
        print("no cost for (counted as 0):", ", ".join(sorted(missing)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
