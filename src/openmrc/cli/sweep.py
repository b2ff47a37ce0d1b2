"""``openmrc sweep``: run a scenario over the cross product of swept values,
transports and seeds, resumably, on a process pool or Dask; write ``sweep.csv``
and ``report.html`` (docs/sweeps.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..pipeline.run import EXIT_INTERRUPTED, EXIT_OK, UsageError, prepare_out
from .common import progress_enabled

#: Exit code when at least one point failed (the others were written).
EXIT_POINT_FAILED = 1


def _positive(name: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
        return value

    return parse


def _cmd_sweep(args: argparse.Namespace) -> int:
    from ..sweep.aggregate import check_metrics
    from ..sweep.runner import dask_executor, pending_points, process_pool, progress_bar, run_sweep
    from ..sweep.spec import build_points, load_spec

    spec = load_spec(
        args.sweep,
        params=args.param,
        sets=args.set,
        transports=args.transports,
        seeds=args.seeds,
        metrics=args.metric,
    )
    check_metrics(spec.metrics)
    points = build_points(spec)  # every point validated before anything runs
    out = prepare_out(args.out or f"sweep-{spec.name}")
    assert out is not None
    shape = " x ".join(
        [f"{len(a.values)} {a.name}" for a in spec.axes]
        + [f"{len(spec.transports)} transport{'s' if len(spec.transports) != 1 else ''}"]
        + [f"{len(spec.seeds)} seed{'s' if len(spec.seeds) != 1 else ''}"]
    )
    todo, done = pending_points(out, points)
    backend = (
        dask_executor(args.dask, args.workers)
        if args.dask
        else process_pool(min(args.workers or os.cpu_count() or 1, max(1, len(todo))))
    )
    with backend as (executor, what):
        print(
            f"sweep {spec.name}: {len(points)} points ({shape}); "
            f"skipped {done} finished point{'s' if done != 1 else ''}, "
            + (f"{len(todo)} to run on {what}" if todo else "nothing to run"),
            flush=True,
        )
        bar = progress_bar(len(points), done, f"sweep {spec.name}", progress_enabled(args))

        def on_done(point: Any, result: dict[str, Any]) -> None:
            if bar is not None:
                bar.advance(bar.task_ids[0])
            if result.get("status") != "ok":
                msg = f"  point failed ({point.label()}): {result.get('error')}"
                if bar is not None:
                    bar.console.print(msg, markup=False, highlight=False)
                else:
                    print(msg, file=sys.stderr, flush=True)

        if bar is not None:
            bar.start()
        try:
            outcome = run_sweep(points, out, executor, on_done=on_done, stop_children=not args.dask)
        finally:
            if bar is not None:
                bar.stop()
    summary = {
        "sweep": spec.describe(),
        "points": len(points),
        "ran": outcome.ran,
        "skipped": outcome.skipped,
        "failed": outcome.failed,
        "interrupted": outcome.interrupted,
        "fingerprints": [p.fingerprint for p in points],
    }
    tmp = out / "sweep.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1, sort_keys=True))
    tmp.replace(out / "sweep.json")
    finished = outcome.skipped + outcome.ran - outcome.failed
    if outcome.interrupted:
        print(
            f"openmrc sweep: interrupted: {finished} of {len(points)} points finished "
            f"(ran {outcome.ran} now); run the same command again to run the other "
            f"{len(points) - finished}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    from ..sweep.aggregate import aggregate, format_table

    agg = aggregate(spec, points, out)
    print(
        f"  ran {outcome.ran}, skipped {outcome.skipped} finished, failed {outcome.failed}"
        f" (of {len(points)} points); metrics: {', '.join(agg.metrics) or '-'}"
    )
    if agg.rows:
        seeds = len(spec.seeds)
        print(
            f"  mean over {seeds} seed{'s' if seeds != 1 else ''}"
            + (" ± 95 % Student-t confidence interval:" if seeds > 1 else ":")
        )
        print(format_table(agg.headers, agg.rows))
    if agg.note:
        print(f"  note: {agg.note}")
    print(f"  wrote {', '.join(str(w) for w in agg.files)} (+ {out / 'points'}/*.json)")
    if outcome.failed:
        print(
            f"openmrc sweep: {outcome.failed} point{'s' if outcome.failed != 1 else ''} failed "
            "(errors in sweep.csv and report.html; a rerun retries them)",
            file=sys.stderr,
        )
        return EXIT_POINT_FAILED
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the command line."""
    p = sub.add_parser(
        "sweep",
        help="run a scenario over swept values x transports x seeds (process pool or Dask)",
        description="The cross product of --param values, transports and seeds; each point "
        "written as it finishes (rerunning skips finished points); sweep.csv and report.html "
        "with the chosen metrics against each swept value (docs/sweeps.md).",
    )
    p.add_argument("sweep", help="a sweep file (scenarios/sweeps/*.toml) or a scenario file")
    p.add_argument(
        "--param",
        action="append",
        metavar="KEY.PATH=V1,V2,...",
        help="sweep a scenario value over TOML values separated by top-level commas, e.g. "
        "--param transport.ev_count=8,64,256 --param 'workload.placement=[0,1],[2,3]'; repeatable",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="a fixed override of every point (as openmrc run --set); repeatable",
    )
    p.add_argument(
        "--transports", help="comma-separated, of mrc, roce, ib (default: the scenario's)"
    )
    p.add_argument(
        "--seeds",
        type=_positive("--seeds"),
        help="N seeds per point: the scenario's seed and the N-1 after it (default 1)",
    )
    p.add_argument(
        "--metric",
        action="append",
        help="a metric for the CSV and the plots (repeatable; default aggregate_gbps, "
        "fct_p99_us, slowdown_p99, collective_time_us; the list: docs/sweeps.md)",
    )
    p.add_argument("--out", help="the sweep's directory (default sweep-NAME); rerun to resume")
    p.add_argument(
        "--workers",
        type=_positive("--workers"),
        help="local worker processes (default: the CPU count); with --dask local, Dask workers",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run on Dask distributed: 'local' (a LocalCluster) or a scheduler address "
        "(tcp://host:8786); needs openmrc[cluster]",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_sweep)


__all__ = ["EXIT_POINT_FAILED", "UsageError", "register"]
