"""``openmrc campaign``: one training job for hours of its own time, failing and repairing at
real rates, per transport (goodput, step times, time lost per failure kind, restarts);
run by :mod:`openmrc.pipeline.campaign` (docs/campaign.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..pipeline import campaign
from ..pipeline.run import EXIT_FLOW_FAILED, EXIT_INTERRUPTED, EXIT_OK, UsageError, prepare_out


def _cmd_campaign(args: argparse.Namespace) -> int:
    """Load the campaign, run every transport, print the summary, write ``--out``."""
    if args.hours is not None and not args.hours > 0:
        raise UsageError(f"--hours: must be > 0, got {args.hours}")
    transports = None
    if args.transports is not None:
        transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if args.seeds < 1:
        raise UsageError(f"--seeds: must be >= 1, got {args.seeds}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers: must be >= 1, got {args.workers}")
    if args.parallel and (args.seeds > 1 or args.dask or args.workers or args.packet_check):
        raise UsageError(
            "--parallel: runs one campaign's transports at once (not with --seeds, --workers, "
            "--dask, --packet-check)"
        )
    if args.packet_check and (args.seeds > 1 or args.dask or args.workers):
        raise UsageError(
            "--packet-check: checks one campaign (not with --seeds, --workers, --dask)"
        )
    if args.seeds > 1 or args.dask or args.workers:
        return _monte_carlo(args, transports)
    setup = campaign.load(
        args.scenario,
        args.set or [],
        hours=args.hours,
        seed=args.seed,
        transports=transports,
    )
    out = prepare_out(args.out)
    if args.packet_check:
        if setup.config.fold:
            raise UsageError(
                "--packet-check: runs every GPU at packet level; not with campaign.fold "
                "(set campaign.fold = false on a job small enough for packets)"
            )
        return _packet_check(setup, out, args.json)
    doc = campaign.run(setup, parallel=args.parallel)
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
    else:
        for line in campaign.summary_lines(doc):
            print(line)
    if out is not None:
        path = out / "campaign.json"
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        written = [str(path)]
        try:
            written.append(str(campaign.plot(doc, out / "campaign.png")))
        except ImportError:
            print(
                "openmrc campaign: note: no campaign.png (pip install 'openmrc[report]')",
                file=sys.stderr,
            )
        if not args.json:
            print(f"  wrote {', '.join(written)}")
    return EXIT_OK


def _packet_check(setup: campaign.CampaignSetup, out: Any, as_json: bool) -> int:
    """``--packet-check``: every iteration the campaign simulated at flow level (each
    state's and each one a change falls into) again at packet level; a line each."""
    from ..pipeline.campaign_check import check

    def show(row: dict[str, Any]) -> None:
        if as_json:
            return
        f, p, d = row["flow_step_us"], row["packet_step_us"], row["diff_pct"]
        fs = "never ends" if f is None else f"{f:,.3f} us"
        ps = "never ends" if p is None else f"{p:,.3f} us"
        ds = "" if d is None else f" ({d:+.2f} %)"
        print(
            f"  {row['transport']} {row['kind']} at {row['campaign_s']:,.6f} s: flow {fs}, "
            f"packet {ps}{ds}  [{row['iteration']}]",
            flush=True,
        )

    if not as_json:
        print(f"campaign {setup.name}: its flow-level iterations at packet level")
    rows = check(setup, on_row=show)
    if as_json:
        print(json.dumps(rows, indent=1, sort_keys=True))
    if out is not None:
        path = out / "packet_check.json"
        path.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
        if not as_json:
            print(f"  wrote {path}")
    return EXIT_OK


def _monte_carlo(args: argparse.Namespace, transports: list[str] | None) -> int:
    """``--seeds N``: a campaign per seed on the sweep machinery, resumable in ``--out``;
    the mean and 95 % confidence interval of each number over the seeds."""
    import tempfile
    from pathlib import Path

    from ..paper.run import executor_for
    from ..sweep import campaign as mc
    from ..sweep.runner import run_sweep

    first = args.seed
    if first is None:
        first = campaign.load(args.scenario, args.set or [], hours=args.hours).seed
    seeds = list(range(first, first + args.seeds))
    pts = mc.points(args.scenario, args.set or [], seeds, hours=args.hours, transports=transports)
    keep = prepare_out(args.out)
    with tempfile.TemporaryDirectory(prefix="openmrc-campaign-") as scratch:
        out = keep if keep is not None else Path(scratch)

        def on_done(point: Any, result: dict[str, Any]) -> None:
            what = "done" if result["status"] == "ok" else f"failed: {result.get('error')}"
            print(f"  seed {point.seed}: {what}", file=sys.stderr, flush=True)

        from ..sweep.runner import pending_points

        todo, done = pending_points(out, pts)
        with executor_for(args.workers, args.dask, len(todo)) as (ex, what):
            print(
                f"openmrc campaign: {len(pts)} seeds ({seeds[0]}..{seeds[-1]}); {done} already "
                f"in {out if keep is not None else 'no --out'}, {len(todo)} to run: {what}",
                file=sys.stderr,
                flush=True,
            )
            outcome = run_sweep(
                pts,
                out,
                ex,
                on_done=on_done,
                stop_children=not args.dask,
                work=mc.run_campaign_point,
            )
        agg = mc.aggregate(out, pts)
        if args.json:
            print(json.dumps(agg, indent=1, sort_keys=True))
        elif agg["seeds"]:
            for line in mc.summary_lines(agg):
                print(line)
        if keep is not None:
            path = keep / "montecarlo.json"
            path.write_text(json.dumps(agg, indent=1, sort_keys=True) + "\n")
            if not args.json:
                print(f"  wrote {path} (each seed's campaign in {keep / 'points'})")
    if outcome.interrupted:
        print(
            "openmrc campaign: interrupted; run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return EXIT_FLOW_FAILED if outcome.failed else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``campaign`` to the ``openmrc`` parser."""
    cp = sub.add_parser(
        "campaign",
        help="a training job for hours with failures at real rates: goodput per transport",
        description="Run a flow-level job scenario for hours of its own time, its fabric "
        "failing and being repaired at real rates, per transport (MRC, RoCE): goodput, step "
        "time p50/p99/max, time lost per failure kind, restarts (docs/campaign.md).",
    )
    cp.add_argument(
        "scenario", help="a flow-level job scenario, e.g. scenarios/training/campaign-16.toml"
    )
    cp.add_argument(
        "--hours", type=float, help="campaign length (default: campaign.hours, else 24)"
    )
    cp.add_argument(
        "--seed",
        type=int,
        help="the failure draws' seed (default: campaign.seed, else the scenario's)",
    )
    cp.add_argument("--transports", metavar="T[,T]", help="mrc, roce or both (default: both)")
    cp.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="override a scenario value (TOML syntax), e.g. --set campaign.restart_s=300; repeatable",
    )
    cp.add_argument("--out", help="directory for campaign.json and campaign.png (created first)")
    cp.add_argument("--json", action="store_true", help="print campaign.json to stdout")
    cp.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="Monte Carlo: N campaigns (seeds --seed .. --seed + N - 1), the mean and 95 %% "
        "confidence interval of each number; resumable in --out",
    )
    cp.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="with --seeds: campaigns in parallel on a local process pool (default: the CPU "
        "count; 1: in this process)",
    )
    cp.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="with --seeds: run on Dask distributed, 'local' or a scheduler address",
    )
    cp.add_argument(
        "--parallel",
        action="store_true",
        help="one campaign: each transport in a worker process of its own, at once (the same "
        "document; the wall time of the slowest transport, on as many cores)",
    )
    cp.add_argument(
        "--packet-check",
        action="store_true",
        help="run every iteration the campaign simulates at flow level (each fabric state's, "
        "each one a failure or repair falls into) again at packet level: flow step, packet "
        "step, difference (a job small enough for packets)",
    )
    cp.set_defaults(func=_cmd_campaign)
