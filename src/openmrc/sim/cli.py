"""``openmrc sim`` (run a scenario file) and ``openmrc topology`` (address plan, tables)."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from ..topology import ClosSpec, Topology


def _cmd_sim(args: argparse.Namespace) -> int:
    from ..scenario import ScenarioError, load

    try:
        scenario = load(args.scenario)
        if args.seed is not None:
            scenario.seed = args.seed
        if args.transport is not None:
            scenario.transport.name = args.transport
        exp = scenario.build()
        if args.pcap:
            try:
                exp.capture(args.pcap, _host_list(args.pcap_hosts, exp.spec.hosts))
            except ScenarioError:
                raise
            except ValueError as exc:
                raise ScenarioError(str(exc)) from None
        result = exp.run(None if scenario.until_us is None else int(scenario.until_us * 1_000_000))
    except ScenarioError as exc:
        print(f"openmrc sim: {args.scenario}: {exc}")
        return 2
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result.to_json(out / "result.json")
        result.to_csv(out)
    if args.json:
        print(json.dumps(result.as_dict(), indent=1, sort_keys=True))
        return 0 if result.all_ok else 1
    flows = result.flows
    done = [f for f in flows if f.fct_ps is not None]
    fcts = [f.fct_ps / 1e6 for f in done]
    gps = [f.goodput_gbps for f in done]
    bad = [e for e in result.ev_events if e["new"] == "ASSUMED_BAD"]
    back = [e for e in result.ev_events if e["new"] == "GOOD"]
    spec = scenario.spec
    print(
        f"scenario {scenario.name or args.scenario}: {spec.hosts} hosts, {spec.planes} planes, "
        f"{spec.t0s} T0 x {spec.t1s} T1 per plane, {len(flows)} flows, seed {scenario.seed}"
    )
    print(
        f"  completed: {len(done)}/{len(flows)} flows, all ok: {result.all_ok}"
        + ("" if result.verified is None else f", payloads verified: {result.verified}")
    )
    if done:
        print(
            f"  FCT us: min {min(fcts):.1f}  median {statistics.median(fcts):.1f}  max {max(fcts):.1f}"
        )
        print(
            f"  goodput Gb/s per flow: min {min(gps):.1f}  median {statistics.median(gps):.1f}  max {max(gps):.1f}"
        )
    print(
        f"  retransmits {sum(f.retransmits for f in flows)}, trims {sum(f.trims for f in flows)}, "
        f"NACKs {sum(f.nacks for f in flows)}, timeouts {sum(f.timeouts for f in flows)}"
    )
    print(
        f"  EVs ASSUMED_BAD {len(bad)}"
        + (f" (first at {bad[0]['time_us']:.1f} us)" if bad else "")
        + f", recovered {len(back)}; faults {len(result.fabric.get('faults', []))}"
    )
    print(
        f"  simulated {result.sim_end_ps / 1e6:.1f} us in {result.wall_seconds:.2f} s wall, {result.events} events"
    )
    for c in result.collectives:
        t = c["time_us"]
        print(
            f"  collective {c['kind']} x{c['ranks']} ranks, {c['size']} B: "
            + (
                f"{t:.1f} us, algbw {c['algbw_gbps']:.1f} Gb/s, busbw {c['busbw_gbps']:.1f} Gb/s"
                if t is not None
                else "did not complete"
            )
        )
    for w in result.warnings:
        print(f"  warning: {w}")
    if args.pcap:
        print(f"  wrote {args.pcap}")
    if args.out:
        print(f"  wrote {args.out}/result.json, flows.csv, goodput.csv, ev_events.csv")
    return 0 if result.all_ok else 1


def _host_list(text: str | None, hosts: int) -> list[int] | None:
    from ..scenario import ScenarioError

    if not text:
        return None
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ScenarioError(
            f"--pcap-hosts: {text!r} is not a comma-separated list of host numbers"
        ) from None
    bad = [h for h in out if not 0 <= h < hosts]
    if bad:
        raise ScenarioError(f"--pcap-hosts: host {bad[0]} is not in 0..{hosts - 1}")
    return out


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
    from ..scenario import ScenarioError

    try:
        spec = _spec_from_text(args.spec)
    except ScenarioError as exc:
        print(f"openmrc topology: {exc}")
        return 2
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
        plan = topo.address_plan()
        print(
            f"{spec.hosts} hosts, {spec.planes} planes, {len(topo.switches)} switches, {len(topo.links)} links"
        )
        for sw in topo.switches[: args.limit]:
            print(f"  {sw.name:14} tier T{sw.tier}  plane {sw.plane}  uSID {sw.usid:#06x}")
        if len(topo.switches) > args.limit:
            print(f"  ... {len(topo.switches) - args.limit} more (--limit, --json, --tables)")
        del plan
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sim`` and ``topology`` to the ``openmrc`` command line."""
    p = sub.add_parser("sim", help="run a simulation scenario file (TOML or JSON)")
    p.add_argument("scenario", help="scenario file, e.g. scenarios/permutation-64.toml")
    p.add_argument("--out", help="directory for result.json and CSV files")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument(
        "--transport",
        choices=["mrc", "roce", "ib"],
        help="override the scenario's transport (MRC, RoCEv2 with ECMP/PFC/DCQCN, IB-style)",
    )
    p.add_argument("--pcap", help="write a pcap of the hosts' traffic (tshark/Wireshark read it)")
    p.add_argument("--pcap-hosts", help="comma-separated hosts to capture (default: all)")
    p.set_defaults(func=_cmd_sim)
    t = sub.add_parser("topology", help="print a fabric's address plan or uSID tables")
    t.add_argument(
        "spec", help="key=value list (planes=4,t0s=2,hosts_per_t0=2,t1s=2) or a scenario file"
    )
    t.add_argument("--tables", action="store_true", help="the static uSID forwarding tables")
    t.add_argument(
        "--json", action="store_true", help="JSON (address plan, and tables with --tables)"
    )
    t.add_argument("--limit", type=int, default=40, help="switches to list in the text summary")
    t.set_defaults(func=_cmd_topology)
