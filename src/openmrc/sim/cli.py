"""The flags of ``openmrc run`` / ``compare`` (``sim`` is an alias of ``run``),
``openmrc paper`` and ``openmrc topology``: parsed here, run by the pipeline in
:mod:`openmrc.run` (which writes ``results.json``, CSVs and ``report.html`` into
``--out``).  Exit codes are in ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..run import (
    EXIT_FLOW_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    TRANSPORTS,
    UsageError,
    compare_scenario,
    prepare_out,
    run_file,
)
from ..topology import ClosSpec, Topology
from ..units import plural


def _progress_enabled(args: argparse.Namespace) -> bool:
    if getattr(args, "no_progress", False):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# ----- commands ------------------------------------------------------------------
def _cmd_run(args: argparse.Namespace) -> int:
    if args.estimate:
        from ..estimate import estimate_file

        return estimate_file(args.scenario, [args.transport], overrides=args.set, seed=args.seed)
    return run_file(
        args.scenario,
        overrides=args.set or [],
        seed=args.seed,
        transport=args.transport,
        out=args.out,
        pcap=args.pcap,
        pcap_hosts=args.pcap_hosts,
        as_json=args.json,
        progress=_progress_enabled(args),
        partitioned=args.partitioned,
    )


def _cmd_compare(args: argparse.Namespace) -> int:
    if args.estimate:
        from ..estimate import estimate_file
        from ..run import transport_names

        names: list[str | None] = list(transport_names(args.transports.split(",")))
        return estimate_file(args.scenario, names, overrides=args.set, seed=args.seed, compare=True)
    return compare_scenario(
        args.scenario,
        args.transports.split(","),
        overrides=args.set or [],
        seed=args.seed,
        out=args.out,
        progress=_progress_enabled(args),
    )


def _spec_from_text(text: str) -> ClosSpec:
    from ..scenario import ScenarioError, _fill

    if "=" not in text and Path(text).exists():
        from ..scenario import load

        return load(text).spec
    values: dict[str, object] = {}
    for part in filter(None, text.split(",")):
        key, sep, raw = part.partition("=")
        if not sep:
            raise ScenarioError(f"topology: {part!r} is not key=value")
        try:
            values[key.strip()] = int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
        except ValueError:
            raise ScenarioError(f"fabric.{key.strip()}: {raw!r} is not a number") from None
    spec = _fill(ClosSpec, values, "fabric")
    try:
        spec.validate()
    except ValueError as exc:
        raise ScenarioError(f"fabric: {exc}") from None
    return spec


def _cmd_topology(args: argparse.Namespace) -> int:
    spec = _spec_from_text(args.spec)
    topo = Topology(spec)
    if args.json:
        plan = topo.address_plan()
        if args.tables:
            plan["tables"] = {
                name: {f"{k:#06x}": v for k, v in t.items()} for name, t in topo.tables().items()
            }
        print(json.dumps(plan, indent=1))
    elif args.tables:
        print(topo.format_tables())
    else:
        print(
            f"{plural(spec.hosts, 'host')}, {plural(spec.planes, 'plane')}, "
            f"{plural(len(topo.switches), 'switch', 'switches')}, {plural(len(topo.links), 'link')}"
        )
        for sw in topo.switches[: args.limit]:
            print(f"  {sw.name:14} tier T{sw.tier}  plane {sw.plane}  uSID {sw.usid:#06x}")
        if len(topo.switches) > args.limit:
            print(f"  ... {len(topo.switches) - args.limit} more (--limit, --json, --tables)")
    return 0


def _cmd_paper(args: argparse.Namespace) -> int:
    """``openmrc paper``: every bundled published experiment over ``--seeds`` seeds, in
    parallel and resumably (openmrc.paper_run); the table, paper.md/json, report;
    with ``--figures``, the paper's Figures 16 and 17 as curves instead."""
    from .. import paper, paper_run

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
    from .. import paper_figures, paper_run

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


def _common_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario file, e.g. scenarios/t0-t1-link-failure.toml")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="override a scenario value (TOML syntax), e.g. --set workload.size=1MiB "
        "--set faults[0].at_us=20; repeatable",
    )
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--out", help="directory for results.json, CSVs and report.html (created first)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="print what the run would cost (hosts, flows, events, memory, time) and exit "
        "without building or running it (nothing is written)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` (alias ``sim``), ``compare`` and ``topology`` to the command line."""
    for name, text in (
        ("run", "run a simulation scenario file (TOML or JSON)"),
        ("sim", "the same as run (kept for old scripts)"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        _common_run_flags(p)
        p.add_argument(
            "--transport",
            choices=list(TRANSPORTS),
            help="override the scenario's transport (MRC, RoCEv2 with ECMP/PFC/DCQCN, IB-style)",
        )
        p.add_argument("--json", action="store_true", help="print results.json to stdout")
        p.add_argument(
            "--pcap", help="write a pcap of the hosts' traffic (tshark/Wireshark read it)"
        )
        p.add_argument("--pcap-hosts", help="comma-separated hosts to capture (default: all)")
        p.add_argument(
            "--partitioned",
            action="store_true",
            help="run as a partitioned simulation (the event order of mpirun -n K, here on "
            "one process; implied under mpirun with several ranks): docs/parallel.md",
        )
        p.set_defaults(func=_cmd_run)
    c = sub.add_parser(
        "compare",
        help="run one scenario with several transports: one table, one report",
        description="The same fabric, workload and faults with each transport.",
    )
    _common_run_flags(c)
    c.add_argument(
        "--transports",
        default="mrc,roce",
        help="comma-separated, of mrc, roce, ib (default mrc,roce)",
    )
    c.set_defaults(func=_cmd_compare)
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
    t = sub.add_parser("topology", help="print a built fabric's address plan or uSID tables")
    t.add_argument(
        "spec", help="key=value list (planes=4,t0s=2,hosts_per_t0=2,t1s=2) or a scenario file"
    )
    t.add_argument("--tables", action="store_true", help="the static uSID forwarding tables")
    t.add_argument(
        "--json", action="store_true", help="JSON (address plan, and tables with --tables)"
    )
    t.add_argument("--limit", type=int, default=40, help="switches to list in the text summary")
    t.set_defaults(func=_cmd_topology)
