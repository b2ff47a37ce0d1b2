"""The flags of ``openmrc run`` / ``compare`` (``sim`` is an alias of ``run``)
and ``openmrc topology``: parsed here, run by the pipeline in
:mod:`openmrc.pipeline.run` (which writes ``results.json``, CSVs and ``report.html`` into
``--out``).  Exit codes are in ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..pipeline.run import (
    TRANSPORTS,
    compare_scenario,
    run_file,
)
from ..topology import ClosSpec, Topology
from ..units import plural
from .common import progress_enabled


# ----- commands ------------------------------------------------------------------
def _cmd_run(args: argparse.Namespace) -> int:
    if args.estimate:
        from ..pipeline.estimate import estimate_file

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
        progress=progress_enabled(args),
        partitioned=args.partitioned,
    )


def _cmd_compare(args: argparse.Namespace) -> int:
    if args.estimate:
        from ..pipeline.estimate import estimate_file
        from ..pipeline.run import transport_names

        names: list[str | None] = list(transport_names(args.transports.split(",")))
        return estimate_file(args.scenario, names, overrides=args.set, seed=args.seed, compare=True)
    return compare_scenario(
        args.scenario,
        args.transports.split(","),
        overrides=args.set or [],
        seed=args.seed,
        out=args.out,
        progress=progress_enabled(args),
    )


def _spec_from_text(text: str) -> ClosSpec:
    from ..pipeline.scenario import ScenarioError, _fill

    if "=" not in text and Path(text).exists():
        from ..pipeline.scenario import load

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
