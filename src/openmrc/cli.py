"""The ``openmrc`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from .transport.errors import MrcError
from .units import parse_size

#: Exit code when stdout is closed before everything was printed (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors on stderr (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: The simulator's hand-written C event kernel (not a mypyc module).
NATIVE_KERNEL = "openmrc.sim._kernel"


def _version() -> str:
    from . import compiled_modules
    from .version import openmrc_version

    compiled = compiled_modules()
    parts = []
    n = sum(1 for m in compiled if m != NATIVE_KERNEL)
    if n:
        parts.append(f"{n} modules compiled by mypyc")
    if NATIVE_KERNEL in compiled:
        parts.append("native event kernel")
    return f"{openmrc_version()} ({', '.join(parts) or 'pure Python'})"


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
    from .demo.fabric import run

    return run(
        out=args.out,
        quick=args.quick,
        overrides=args.set or [],
        seed=args.seed,
        progress=not args.no_progress and _stderr_is_tty(),
    )


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _cmd_demo_loopback(args: argparse.Namespace) -> int:
    from .demo.loopback import DemoConfig, format_report, run_demo

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


def _cmd_topo(args: argparse.Namespace) -> int:
    from .topocalc import (
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = _Parser(prog="openmrc", description="Open MRC: transport, simulator, lab.")
    parser.add_argument("--version", action="version", version=f"openmrc {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    from .demo.fabric import DEFAULT_OUT

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

    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Subcommands that live in other packages (simulator, real network)."""
    out: list[Callable[[argparse._SubParsersAction], None]] = []
    try:
        from .sim.cli import register as sim_register
    except ImportError:
        pass
    else:
        out.append(sim_register)
    try:
        from .sweep.cli import register as sweep_register
    except ImportError:
        pass
    else:
        out.append(sweep_register)
    try:
        from .net.lab_cli import register as lab_register
    except ImportError:
        pass
    else:
        out.append(lab_register)
    try:
        from .net.cli import register as net_register
    except ImportError:
        pass
    else:
        out.append(net_register)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``openmrc`` console script (exit codes: docs/cli.md)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # stdout was closed early (``| head``): not an error of the run.  Point
        # stdout at /dev/null so that the interpreter's last flush is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"openmrc {args.command}: interrupted", file=sys.stderr)
        return 130
    except (MrcError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split())
        print(f"openmrc {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
