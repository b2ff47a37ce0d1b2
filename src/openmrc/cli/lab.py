"""``openmrc lab ...``: build, break and tear down the network-namespace fabric lab.

The main CLI (``openmrc.cli``) calls :func:`register` to add the ``lab``
command; ``python -m openmrc.cli.lab lab ...`` works on its own too.

Subcommands (``--name`` picks the lab, default ``lab``)::

    lab up TOPOLOGY               TOPOLOGY: file (.json/.toml) or planes=4,t0s=2,...
    lab status [--json]
    lab down [--name N | --all]   without --name: the default lab; --all: every omrc-* namespace
    lab fail LINK|SWITCH [--silent | --loss P]
    lab restore [LINK|SWITCH]     without a target: every fault
    lab exec HOST -- CMD...
    lab capture HOST --plane P -w FILE [--count N | --seconds S]
    lab localise [--rounds N] [--timeout S] [--json]   self-probe fault localisation
    lab ctl HOST status | deny-plane P | allow-plane P | deny-ev EV | allow-ev EV
                 | events [--mask M] | probe DEST --ev EV | ports   (the node controller)

Exit codes: 0 ok, 1 the operation failed, 2 usage errors and not running as root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from openmrc.net.lab import (
    DEFAULT_NAME,
    Lab,
    LabError,
    NotRootError,
    down_lab,
    list_labs,
    parse_spec,
)
from openmrc.net.netns import CommandError
from openmrc.net.wireshark import tshark_hint

_Handler = Callable[[argparse.Namespace], int]


def _err(msg: str) -> None:
    print(f"openmrc lab: {msg}", file=sys.stderr)


def _guard(fn: _Handler) -> _Handler:
    """Wrap a handler: refuse without root (exit 2), report lab errors (exit 1)."""

    def handler(args: argparse.Namespace) -> int:
        if os.geteuid() != 0:
            _err("needs root (it creates network namespaces, veth pairs and routes); use sudo")
            return 2
        try:
            return fn(args)
        except NotRootError as exc:
            _err(str(exc))
            return 2
        except (LabError, CommandError, ValueError, OSError, subprocess.SubprocessError) as exc:
            _err(str(exc))
            return 1

    handler.__doc__ = fn.__doc__
    return handler


def _cmd_up(args: argparse.Namespace) -> int:
    """Build a lab from a topology file or compact spec."""
    try:
        spec = parse_spec(args.topology)
    except ValueError as exc:
        _err(str(exc))
        return 2
    t0 = time.monotonic()
    lab = Lab.up(spec, args.name, strict_checksums=not args.offload_checksums)
    dt = time.monotonic() - t0
    topo = lab.topology
    print(
        f"lab {lab.name} up in {dt:.2f}s: {len(topo.switches)} switches, "
        f"{len(topo.hosts)} hosts, {len(topo.links)} links"
    )
    for h in range(spec.hosts):
        addrs = ", ".join(lab.host_address(h, p) for p in range(spec.planes))
        print(f"  {topo.host_name(h)} ({lab.host_netns(h)}): {addrs}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    """Show namespaces, links and faults of a lab."""
    try:
        lab = Lab.load(args.name)
    except LabError as exc:
        labs = list_labs()
        _err(f"{exc}; labs present: {', '.join(labs) if labs else 'none'}")
        return 1
    if args.json:
        print(json.dumps(lab.status(), indent=1))
    else:
        print(lab.format_status())
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    """Remove a lab (or all labs): namespaces, veths, nft tables, state file."""
    if args.all and args.name is not None:
        _err("down: give --name or --all, not both")
        return 2
    name = None if args.all else (args.name or DEFAULT_NAME)
    removed = down_lab(name)
    what = f"lab {name}" if name else "all labs"
    print(f"{what} down: {len(removed)} namespaces removed")
    return 0


def _cmd_fail(args: argparse.Namespace) -> int:
    """Fail a link or switch."""
    lab = Lab.load(args.name)
    if args.ecn is not None:
        mode = "ecn"
    else:
        mode = "silent" if args.silent else "loss" if args.loss is not None else "down"
    fault = lab.fail(args.target, mode, args.loss, rate=args.ecn)
    print(f"{fault.kind} {fault.target}: {fault.describe()}")
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    """Undo one fault or all faults."""
    lab = Lab.load(args.name)
    undone = lab.restore(args.target)
    for fault in undone:
        print(f"restored {fault.kind} {fault.target} ({fault.describe()})")
    if not undone:
        print("no faults")
    return 0


def _cmd_exec(args: argparse.Namespace) -> int:
    """Run a command in a host's namespace; exit with its code."""
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        _err("exec: give a command after the host, e.g. lab exec h0 -- ip -6 route")
        return 2
    lab = Lab.load(args.name)
    return lab.exec(args.host, cmd)


def _cmd_capture(args: argparse.Namespace) -> int:
    """Capture a host's plane interface into a pcap file (foreground)."""
    lab = Lab.load(args.name)
    if not 0 <= args.plane < lab.topology.spec.planes:
        _err(f"--plane: must be between 0 and {lab.topology.spec.planes - 1}")
        return 2
    proc = lab.capture(args.host, args.plane, args.write, count=args.count, seconds=args.seconds)
    try:
        _, err = proc.communicate()
    except KeyboardInterrupt:
        proc.terminate()
        _, err = proc.communicate()
    if proc.returncode not in (0, -2, -15):
        _err(f"capture failed ({proc.returncode}): {err.decode(errors='replace').strip()}")
        return 1
    print(f"wrote {args.write}; read it with openmrc's dissector:")
    print(f"  {tshark_hint(str(args.write))}")
    return 0


def _cmd_localise(args: argparse.Namespace) -> int:
    """Self-probe from every host (the paper's Clustermapper); name the broken element."""
    from openmrc.clustermapper.lab_agent import SelfProber, deny_lossy_planes, format_result

    lab = Lab.load(args.name)
    try:
        prober = SelfProber(
            lab,
            t0_probes=args.t0_probes,
            t1_probes=args.t1_probes,
            timeout=args.timeout,
            t1_subset=args.t1_subset,
        )
        if not 1 <= args.rounds <= 1000:
            raise ValueError(f"--rounds: must be 1..1000, got {args.rounds}")
    except ValueError as exc:
        msg = str(exc)
        _err(msg if msg.startswith("--") else f"--{msg.replace('_', '-')}")
        return 2
    res = prober.run(args.rounds)
    denials = deny_lossy_planes(lab, res) if args.deny_lossy else []
    if args.json:
        print(json.dumps({"lab": lab.name, **res.to_json(), "denials": denials}, indent=1))
    else:
        print(format_result(res, lab))
        for d in denials:
            if d["ok"]:
                print(f"denied plane {d['plane']} on {d['host']} (its controller, EV profile 0)")
            else:
                print(f"could not deny plane {d['plane']} on {d['host']}: {d['message']}")
    return 0


def _ctl_int(flag: str, text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"{flag}: must be an integer (0x.. for hex), got {text!r}") from None


def _ctl_request(args: argparse.Namespace) -> dict[str, object]:
    """The controller request of ``lab ctl HOST CMD ...`` (ValueError names a bad flag)."""
    from openmrc.net.ctl import parse_mask

    cmd = args.ctl_command
    op = cmd.replace("-", "_")
    msg: dict[str, object] = {"op": op}
    if cmd in ("deny-plane", "allow-plane", "deny-ev", "allow-ev", "events"):
        msg["profile"] = _ctl_int("--profile", args.profile)
    if cmd in ("deny-plane", "allow-plane"):
        msg["plane"] = _ctl_int("PLANE", args.plane)
    elif cmd in ("deny-ev", "allow-ev"):
        msg["ev"] = _ctl_int("EV", args.ev)
    elif cmd == "events":
        msg["max"] = args.max
        if args.mask is not None:
            try:
                msg["mask"] = parse_mask(args.mask)
            except ValueError as exc:
                raise ValueError(f"--{exc}") from None
    elif cmd == "probe":
        msg["dest"] = args.dest
        msg["ev"] = _ctl_int("--ev", args.ev)
        msg["timeout"] = args.timeout
    return msg


def _format_ctl(reply: dict[str, object], host: str) -> list[str]:
    """``lab ctl`` replies as text."""
    r: dict[str, object] = reply
    op = r["op"]
    if op in ("deny_plane", "allow_plane"):
        verb = "denied" if op == "deny_plane" else "allowed"
        return [
            f"{host}: plane {r['plane']} {verb} in EV profile {r['profile']} "
            f"(denied planes now {r['denied_planes']}; {r['qps']} QPs use the profile)"
        ]
    if op in ("deny_ev", "allow_ev"):
        verb = "denied" if op == "deny_ev" else "allowed"
        denied = ", ".join(f"{e:#x}" for e in r["denied_evs"])  # type: ignore[attr-defined]
        return [
            f"{host}: EV {r['ev']:#x} {verb} in EV profile {r['profile']} "
            f"(denied EVs now [{denied}]; {r['qps']} QPs use the profile)"
        ]
    if op == "events":
        lines = []
        for e in r["events"]:  # type: ignore[attr-defined]
            lines.append(
                f"  qp {e['qpn']:#x} ev {e['ev']:#010x} (plane {e['plane']}, path {e['path']}) "
                f"{e['old']} -> {e['new']} ({e['reason']})"
                + (f" [{e['dropped_before']} dropped before]" if e["dropped_before"] else "")
            )
        lines.append(
            f"{host}: {len(r['events'])} EV events (profile {r['profile']}, mask "  # type: ignore[arg-type]
            f"{'|'.join(r['mask_states']) or 'none'}, depth {r['depth']}, "  # type: ignore[arg-type]
            f"{r['still_queued']} still queued, {r['dropped_total']} dropped in total)"
        )
        return lines
    if op == "probe":
        where = f"{host} -> {r['dest']} on EV {r['ev']:#x} (plane {r['plane']}, path {r['path']})"
        if r["timed_out"]:
            return [
                f"probe {where}: timeout (the path is broken, or no endpoint runs on "
                f"{r['dest']}: its node controller answers probes)"
            ]
        return [f"probe {where}: rtt {r['rtt_us']:.1f} us"]
    if op == "ports":
        lines = [f"{host}: ports-down bitmap {r['ports_down']:#x}"]
        for p in r["ports"]:  # type: ignore[attr-defined]
            denied = p["denied_in_profiles"]
            lines.append(
                f"  plane {p['plane']} ({p['interface']}): {'up' if p['up'] else 'DOWN'}"
                + (f", denied in profiles {denied}" if denied else "")
            )
        return lines
    lines = [f"{host} (lab {r['lab']}): QPs {r['qps']}, probes {r['probes']}"]
    for p in r["profiles"]:  # type: ignore[attr-defined]
        evs = ", ".join(f"{e:#x}" for e in p["denied_evs"])
        lines.append(
            f"  EV profile {p['profile']} {p['state']}: {len(p['qps'])} QPs, denied planes "
            f"{p['denied_planes']}, denied EVs [{evs}], event mask {p['event_mask']:#x}"
        )
    lines.append(f"  events queued {r['events_queued']}, dropped {r['events_dropped']}")
    return lines


def _cmd_ctl(args: argparse.Namespace) -> int:
    """Talk to the node controller of a running lab endpoint on HOST."""
    from openmrc.net.ctl import CtlError, ctl_request

    lab = Lab.load(args.name)
    host = lab.host_node(args.host)
    try:
        msg = _ctl_request(args)
        if args.ctl_command == "probe" and not 0 < args.timeout <= 30:
            raise ValueError(f"--timeout: must be in (0, 30] s, got {args.timeout}")
    except ValueError as exc:
        _err(f"ctl {exc}")
        return 2
    wait = float(args.timeout) + 5 if args.ctl_command == "probe" else 10.0
    try:
        reply = ctl_request(lab.name, host, msg, timeout=wait)
    except CtlError as exc:
        _err(f"ctl {exc}")
        return 1
    if reply.get("op") == "error":
        _err(f"ctl {host}: {reply.get('message')}")
        return 1
    if args.json:
        print(json.dumps(reply, indent=1))
    else:
        print("\n".join(_format_ctl(reply, host)))
    return 1 if reply.get("op") == "probe" and reply.get("timed_out") else 0


def _add_ctl(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    ctl = sub.add_parser(
        "ctl",
        help="the node controller of a running endpoint on a lab host",
        description="Reach the MRC node controller of the 'openmrc serve/send' endpoint "
        "running on HOST (its root-only socket <state dir>/<lab>/<host>.ctl): deny or "
        "allow planes and EVs per EV profile, read the EV event queue, probe a path.",
    )
    ctl.add_argument("host", metavar="HOST", help="the lab host whose controller (h0, h1, ...)")
    _add_name(ctl)
    ctl.add_argument("--json", action="store_true", help="print the controller's JSON reply")
    cs = ctl.add_subparsers(dest="ctl_command", metavar="COMMAND", required=True)
    cs.add_parser("status", help="profiles, deny lists, event masks, QPs")
    for verb in ("deny", "allow"):
        p = cs.add_parser(f"{verb}-plane", help=f"{verb} a whole plane for the profile's QPs")
        p.add_argument("plane", metavar="PLANE")
        p.add_argument("--profile", default="0", help="EV profile id (0: the endpoint's)")
        p = cs.add_parser(f"{verb}-ev", help=f"{verb} one EV for the profile's QPs")
        p.add_argument("ev", metavar="EV", help="e.g. 0x00410002")
        p.add_argument("--profile", default="0", help="EV profile id (0: the endpoint's)")
    p = cs.add_parser("events", help="read (and empty) the EV event queue")
    p.add_argument("--profile", default="0", help="EV profile id (0: the endpoint's)")
    p.add_argument(
        "--mask", metavar="M", help="set the event mask first: good,skip,assumed_bad,denied or 0x5"
    )
    p.add_argument("--max", type=int, default=256, metavar="N", help="events at most (256)")
    p = cs.add_parser("probe", help="a controller probe on one EV: an RTT or a timeout")
    p.add_argument("dest", metavar="DEST", help="destination host (h1 or 1)")
    p.add_argument("--ev", required=True, help="the EV (its plane and path), e.g. 0x00100000")
    p.add_argument("--timeout", type=float, default=1.0, metavar="S", help="seconds (1)")
    cs.add_parser("ports", help="port status: which planes' NIC ports are down")
    for child in cs.choices.values():  # --name and --json after COMMAND too
        child.add_argument("--name", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        child.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    ctl.set_defaults(func=_guard(_cmd_ctl))


def _add_name(p: argparse.ArgumentParser, default: str | None = DEFAULT_NAME) -> None:
    p.add_argument(
        "--name",
        default=default,
        help=f"lab name (default: {default or 'all labs'})",
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``lab`` command and its subcommands; each sets ``func`` returning an exit code."""
    lab = subparsers.add_parser(
        "lab",
        help="real SRv6 uSID fabric in network namespaces (root)",
        description="Build a multi-plane SRv6 uSID Clos fabric from Linux network "
        "namespaces and veth pairs, inject link/switch faults, run things in hosts.",
    )
    sub = lab.add_subparsers(dest="lab_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser("up", help="build a lab")
    p.add_argument("topology", metavar="TOPOLOGY", help="JSON/TOML file or planes=4,t0s=2,...")
    p.add_argument(
        "--offload-checksums",
        action="store_true",
        help="keep veth TX checksum offload on hosts (hides UDP checksum errors)",
    )
    _add_name(p)
    p.set_defaults(func=_guard(_cmd_up))

    p = sub.add_parser("status", help="show namespaces, links and faults")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_name(p)
    p.set_defaults(func=_guard(_cmd_status))

    p = sub.add_parser("down", help=f"remove a lab (default: {DEFAULT_NAME!r}; --all: every lab)")
    p.add_argument("--name", default=None, help=f"lab name (default: {DEFAULT_NAME})")
    p.add_argument("--all", action="store_true", help="remove every lab (every omrc-* namespace)")
    p.set_defaults(func=_guard(_cmd_down))

    p = sub.add_parser("fail", help="fail a link or a switch")
    p.add_argument("target", metavar="LINK|SWITCH", help="e.g. p0t0x0-p0t1x1, h0-p0t0x0, p0t1x1")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--silent", action="store_true", help="black hole, carriers stay up")
    g.add_argument("--loss", type=float, metavar="P", help="drop P percent at random")
    g.add_argument(
        "--ecn",
        type=int,
        metavar="RATE",
        help="mark ECN CE on every packet above RATE packets/s (nftables)",
    )
    _add_name(p)
    p.set_defaults(func=_guard(_cmd_fail))

    p = sub.add_parser("restore", help="undo one fault (or all)")
    p.add_argument("target", metavar="LINK|SWITCH", nargs="?", help="default: every fault")
    _add_name(p)
    p.set_defaults(func=_guard(_cmd_restore))

    p = sub.add_parser("exec", help="run a command in a host's namespace")
    p.add_argument("host", metavar="HOST", help="h0, h1, ... (or 0, 1, ...)")
    p.add_argument("cmd", metavar="CMD", nargs=argparse.REMAINDER, help="-- command and args")
    _add_name(p)
    p.set_defaults(func=_guard(_cmd_exec))

    p = sub.add_parser("capture", help="capture a host plane interface to a pcap file")
    p.add_argument("host", metavar="HOST")
    p.add_argument("--plane", type=int, required=True, metavar="P")
    p.add_argument("-w", "--write", required=True, metavar="FILE")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--count", type=int, metavar="N", help="stop after N packets")
    g.add_argument("--seconds", type=float, metavar="S", help="stop after S seconds")
    _add_name(p)
    p.set_defaults(func=_guard(_cmd_capture))

    _add_localise(sub)
    _add_ctl(sub)


def _add_localise(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "localise",
        aliases=["localize"],
        help="self-probe from every host and name the broken link or switch",
        description="Every host sends probes to itself by source route, to its T0 and back "
        "and through T1s and back, in every plane; which probes fail names the broken "
        "NIC-T0 link, T0, T0-T1 link or T1 (openmrc.clustermapper.localise).",
    )
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="probe rounds (3)")
    p.add_argument(
        "--timeout", type=float, default=0.5, metavar="S", help="wait per round, s (0.5)"
    )
    p.add_argument("--t0-probes", type=int, default=4, metavar="N", help="per host/plane (4)")
    p.add_argument("--t1-probes", type=int, default=2, metavar="N", help="per T1 probed (2)")
    p.add_argument(
        "--t1-subset", type=int, metavar="N", help="T1s per host (default: cover every T1)"
    )
    p.add_argument(
        "--deny-lossy",
        action="store_true",
        help="deny the plane of a lossy NIC-T0 link at that host's controller (openmrc lab ctl)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_name(p)
    p.set_defaults(func=_guard(_cmd_localise))


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m openmrc.cli.lab lab ...``."""
    parser = argparse.ArgumentParser(prog="openmrc")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
