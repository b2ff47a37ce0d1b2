"""``openmrc topo``: closed-form fabric arithmetic (hosts, switches, optics, failure costs)."""

from __future__ import annotations

import argparse
import json


def _cmd_topo(args: argparse.Namespace) -> int:
    from ..topocalc import (
        Design,
        compare,
        format_compare,
        format_design,
        parse_rate_gbps,
        single_plane_equivalent,
    )

    speed = parse_rate_gbps(args.speed, "--speed")
    if args.radix is not None and args.switch is not None:
        raise ValueError("--radix: give --radix or --switch, not both")
    if args.radix is not None:
        radix = args.radix
    else:
        capacity = parse_rate_gbps(args.switch or "51.2T", "--switch")
        radix = round(capacity / speed)
        if abs(radix * speed - capacity) > 1e-6 * capacity:
            raise ValueError(f"--switch: {args.switch} is not a whole number of {args.speed} ports")
    design = Design(radix=radix, speed_gbps=speed, planes=args.planes, tiers=args.tiers)
    try:
        design.validate()
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    if args.compare:
        single = single_plane_equivalent(design, tiers=3)
        result = compare(design, single)
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print(format_design(design))
            print()
            print(format_design(single))
            print()
            print(
                f"{design.planes}-plane {design.tiers}-tier against single-plane 3-tier, same NIC speed:"
            )
            print(format_compare(result, design, single))
        return 0
    if args.json:
        print(json.dumps(design.as_dict(), indent=1))
    else:
        print(format_design(design))
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``topo`` to the ``openmrc`` parser."""
    topo = sub.add_parser(
        "topo",
        help="closed-form fabric arithmetic: hosts, switches, optics, failure costs (instant)",
        description="Count a multi-plane fat-tree fabric without building it "
        "(openmrc topology builds one and prints its address plan and tables).",
    )
    topo.add_argument("--radix", type=int, help="ports per switch (default: --switch / --speed)")
    topo.add_argument("--switch", help="switch capacity, e.g. 51.2T (default 51.2T)")
    topo.add_argument("--speed", default="100G", help="link (NIC port) speed (default 100G)")
    topo.add_argument("--planes", type=int, default=8, help="planes = NIC ports (default 8)")
    topo.add_argument("--tiers", type=int, default=2, help="switch tiers per plane (default 2)")
    topo.add_argument(
        "--compare",
        action="store_true",
        help="against a single-plane three-tier design of the same NIC speed and switch",
    )
    topo.add_argument("--json", action="store_true", help="print every figure as JSON")
    topo.set_defaults(func=_cmd_topo)
