"""``openmrc campaign``: one training job for hours of its own time, failing and repairing at
real rates, per transport (goodput, step times, time lost per failure kind, restarts);
run by :mod:`openmrc.pipeline.campaign` (docs/campaign.md)."""

from __future__ import annotations

import argparse
import json
import sys

from ..pipeline import campaign
from ..pipeline.run import EXIT_OK, UsageError, prepare_out


def _cmd_campaign(args: argparse.Namespace) -> int:
    """Load the campaign, run every transport, print the summary, write ``--out``."""
    if args.hours is not None and not args.hours > 0:
        raise UsageError(f"--hours: must be > 0, got {args.hours}")
    transports = None
    if args.transports is not None:
        transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    setup = campaign.load(
        args.scenario,
        args.set or [],
        hours=args.hours,
        seed=args.seed,
        transports=transports,
    )
    out = prepare_out(args.out)
    doc = campaign.run(setup)
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
    cp.set_defaults(func=_cmd_campaign)
