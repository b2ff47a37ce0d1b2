"""``openmrc paper``: the paper's published experiments over seeds (the table, paper.md,
paper.json, report.html) or, with ``--figures``, Figures 16 and 17 as curves."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..paper import experiments as paper
from ..paper import figures as paper_figures
from ..paper import run as paper_run
from ..pipeline.run import EXIT_FLOW_FAILED, EXIT_INTERRUPTED, EXIT_OK, UsageError, prepare_out


def _cmd_paper(args: argparse.Namespace) -> int:
    """``openmrc paper``: every bundled published experiment over ``--seeds`` seeds, in
    parallel and resumably (openmrc.paper.run); the table, paper.md/json, report;
    with ``--figures``, the paper's Figures 16 and 17 as curves instead."""

    if args.seeds < 1:
        raise UsageError(f"--seeds: must be >= 1, got {args.seeds}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers: must be >= 1, got {args.workers}")
    if args.figures:
        return _cmd_paper_figures(args)
    chosen = paper.select(args.only)
    keep = prepare_out(args.out)
    with tempfile.TemporaryDirectory(prefix="openmrc-paper-") as scratch:
        out = keep if keep is not None else Path(scratch)

        def on_job(job: Any, verdict: Any, done: int, total: int) -> None:
            seed = f" seed {job.seed}" if args.seeds > 1 else ""
            print(
                f"[{done}/{total}] {job.experiment.name}{seed}: {paper.shape_word(verdict.holds)}",
                file=sys.stderr,
                flush=True,
            )

        session = paper_run.Session(chosen, out, quick=args.quick, seeds=args.seeds, on_job=on_job)
        with paper_run.executor_for(args.workers, args.dask, len(session.todo)) as (ex, what):
            print(
                f"openmrc paper: {len(session.plan.points)} scenario runs for "
                f"{len(chosen)} experiment{'s' if len(chosen) != 1 else ''} x {args.seeds} "
                f"seed{'s' if args.seeds != 1 else ''}; {session.skipped} already in "
                f"{out if keep is not None else 'no --out'}, {len(session.todo)} to run: {what}",
                file=sys.stderr,
                flush=True,
            )
            result = session.execute(ex, stop_children=not args.dask)
        outcomes = result.outcomes
        if outcomes:
            print(paper.format_text(outcomes))
            if result.interrupted:
                print(paper.PARTIAL)
        if keep is not None and outcomes:
            written = paper.write(keep, outcomes, args.quick, partial=result.interrupted)
            print(f"  wrote {', '.join(str(p) for p in written)}")
    if result.interrupted:
        print(
            f"openmrc paper: interrupted: {result.jobs_done} of {result.jobs_total} experiment "
            "runs checked"
            + (
                "; run the same command again to resume"
                if keep is not None
                else " (nothing kept: give --out DIR to resume)"
            ),
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return EXIT_OK if all(o.holds for o in outcomes) else EXIT_FLOW_FAILED


def _cmd_paper_figures(args: argparse.Namespace) -> int:
    """``openmrc paper --figures``: Figures 16 and 17 (busbw against message size)."""

    if args.only is not None:
        raise UsageError("--only: not with --figures (the figures are all their runs)")
    if args.out is None:
        raise UsageError("--figures: give --out DIR (where the plots and their data go)")
    out = prepare_out(args.out)
    assert out is not None
    points = paper_figures.points(args.quick, args.seeds)
    todo = [p for p in points if not paper_figures.finished(out, p)]
    with paper_run.executor_for(args.workers, args.dask, len(todo)) as (ex, what):
        print(
            f"openmrc paper --figures: {len(points)} scenario runs; "
            f"{len(points) - len(todo)} already in {out}, {len(todo)} to run: {what}",
            file=sys.stderr,
            flush=True,
        )
        outcome = paper_figures.run(points, out, ex, stop_children=not args.dask)
    if outcome.interrupted:
        print(
            "openmrc paper --figures: interrupted; run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    doc = paper_figures.collect(out, points, args.quick)  # (read once: every run's file)
    written = paper_figures.write(out, doc)
    print(paper_figures.format_text(doc))
    print(f"  wrote {', '.join(str(p) for p in written)}")
    # as the table: 1 when a run failed or a published shape does not hold
    ok = outcome.failed == 0 and paper_figures.shapes_hold(doc)
    return EXIT_OK if ok else EXIT_FLOW_FAILED


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``paper`` to the ``openmrc`` parser."""
    pp = sub.add_parser(
        "paper",
        help="run the paper's published experiments: published, openmrc, shape holds",
        description="Every bundled published experiment (scenarios/paper/): a table of what "
        "the paper published, what openmrc measured, and whether the shape holds.",
    )
    pp.add_argument("--quick", action="store_true", help="reduced sizes (the tests' reductions)")
    pp.add_argument("--only", metavar="NAME[,NAME]", help="only these experiments")
    pp.add_argument(
        "--out",
        help="directory for paper.md, paper.json, report.html and each run as it finishes "
        "(points/, experiments/); a rerun resumes from it (created first)",
    )
    pp.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="run every experiment at N seeds (each file's seed and the N-1 next); the "
        "table says for how many each shape holds",
    )
    pp.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="runs in parallel on a local process pool (default: the CPU count; 1: in this "
        "process, one after the other)",
    )
    pp.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run on Dask distributed: 'local' or a scheduler address (openmrc[cluster])",
    )
    pp.add_argument(
        "--figures",
        action="store_true",
        help="the paper's Figures 16 and 17 instead of the table: busbw against message "
        "size, MRC / RoCE 1 QP / RoCE 16 QPs at 0, 0.1 and 1 %% loss (needs --out)",
    )
    pp.set_defaults(func=_cmd_paper)
