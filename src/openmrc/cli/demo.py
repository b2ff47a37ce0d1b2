"""``openmrc demo``: MRC against RoCE on a small 8-plane fabric, and ``openmrc demo loopback``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from ..units import parse_size
from .common import progress_enabled


def _ranged(
    kind: Callable[[str], float], lo: float, hi: float, name: str
) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"{name}: must be between {lo:g} and {hi:g}, got {text}"
            )
        return value

    return parse


def _size(text: str) -> int:
    try:
        return parse_size(text, "size")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _plane(text: str) -> int | None:
    if text.lower() in ("none", "off", "-1"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"blackhole-plane: {text!r} is not a plane number or 'none'"
        ) from None


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo.fabric import run

    return run(
        out=args.out,
        quick=args.quick,
        overrides=args.set or [],
        seed=args.seed,
        progress=progress_enabled(args),
    )


def _cmd_demo_loopback(args: argparse.Namespace) -> int:
    from ..demo.transfer import DemoConfig, format_report, run_demo

    cfg = DemoConfig(
        size=args.size,
        message=min(args.message, args.size),
        planes=args.planes,
        rate_gbps=args.rate,
        loss=args.loss,
        reorder=args.reorder,
        trim=args.trim,
        ecn=args.ecn,
        blackhole_plane=args.blackhole_plane,
        seed=args.seed,
        wire=args.wire,
    )
    report = run_demo(cfg)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_report(report))
    return 0 if report["ok"] else 1


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``demo`` (and ``demo loopback``) to the ``openmrc`` parser."""
    from ..demo.fabric import DEFAULT_OUT

    demo = sub.add_parser(
        "demo",
        help="MRC against RoCE on an 8-plane fabric while a link and a switch fail (report.html)",
        description="A ring all-reduce on a small 8-plane fabric with a T0-T1 link failure "
        "and a silent T1 mid-run, with MRC and with RoCEv2: the table, results and report.html "
        "(the bundled scenario openmrc/scenarios/demo.toml run as openmrc compare does). "
        "'openmrc demo loopback' is the two-endpoint transfer over a lossy channel.",
    )
    demo.add_argument(
        "--out",
        help=f"directory for report.html, results and the scenario copy (default ./{DEFAULT_OUT})",
    )
    demo.add_argument(
        "--quick", action="store_true", help="a much smaller run (seconds; what the tests run)"
    )
    demo.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="override a value of the demo scenario, as openmrc compare --set does; repeatable",
    )
    demo.add_argument("--seed", type=int, help="override the scenario's seed")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.set_defaults(func=_cmd_demo)
    demo_sub = demo.add_subparsers(dest="demo_mode", metavar="loopback")
    loop = demo_sub.add_parser(
        "loopback",
        help="one MRC transfer between two endpoints over a lossy, reordering multipath channel",
        description="A transfer between two endpoints over an in-memory channel with loss, "
        "reordering, trimming, ECN and a blackholed plane; checked byte for byte.",
    )
    loop.add_argument("--size", type=_size, default=64 << 20, help="bytes to write (default 64M)")
    loop.add_argument("--message", type=_size, default=1 << 20, help="bytes per WRITE (default 1M)")
    loop.add_argument("--planes", type=int, choices=range(1, 17), default=8, metavar="1..16")
    loop.add_argument("--rate", type=_ranged(float, 1, 10_000, "rate"), default=800.0, help="Gb/s")
    loop.add_argument("--loss", type=_ranged(float, 0, 0.99, "loss"), default=0.01)
    loop.add_argument("--reorder", type=_ranged(float, 0, 0.99, "reorder"), default=0.2)
    loop.add_argument("--trim", type=_ranged(float, 0, 0.99, "trim"), default=0.01)
    loop.add_argument("--ecn", type=_ranged(float, 0, 0.99, "ecn"), default=0.02)
    loop.add_argument(
        "--blackhole-plane", type=_plane, default=3, help="plane to blackhole mid-run, or 'none'"
    )
    loop.add_argument("--seed", type=int, default=1)
    loop.add_argument("--wire", action="store_true", help="encode every packet to bytes and back")
    loop.add_argument("--json", action="store_true", help="print the full report as JSON")
    loop.set_defaults(func=_cmd_demo_loopback)
