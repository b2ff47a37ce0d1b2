"""Cache misses per event of the simulator's event loop, by function; and a census of
what a run holds.

``--case perm-N --until-us T`` runs the case under ``valgrind --tool=callgrind
--cache-sim=yes`` with the set-up uninstrumented (fast) and instrumentation switched on
just before the run (a client request, through a small helper built with the C
compiler); costs are kept for the kernel's ``Sim_run`` and what it calls.  It prints
the loop's instructions and D1/LL read and write misses per event, in total and for
the functions with the most LL misses.  ``--ll`` is the last level's size (the
machine's L3, 32 MiB, or one core's L2, 2 MiB).  Deterministic: the counts repeat.
``--fabric-only`` runs ``perm-N``'s fabric with ``sim_growth.py --fabric-only``'s native
reflectors in place of the hosts' transport (``--window`` packets a host, each host
touching ``--host-bytes`` of its own a packet), so that the counts are the kernel's own
events' (and such hosts').

``--census`` instead runs the case (compiled or not, as the interpreter imports it) up
to ``--until-us`` and prints what it holds: per type, count and bytes of every object
the collector tracks and of the untracked ones they refer to; per QP, the bytes of each
object reachable from it (a shared one counted at the first QP that reaches it).
Packets are untracked (acyclic): only those a tracked object refers to are seen.

    python benchmarks/sim_misses.py --case perm-8192 --until-us 30 --ll 33554432
    python benchmarks/sim_misses.py --case perm-8192 --until-us 30 --fabric-only
    python benchmarks/sim_misses.py --case perm-8192 --until-us 15 --census
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_growth
import sim_speed

_HELPER = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
"""
#: the events shown per function, in callgrind's names
SHOW = ("Ir", "D1mr", "D1mw", "DLmr", "DLmw")


def child(case: str, until_us: float, helper: str, fabric: sim_growth.FabricOnly | None) -> None:
    """Build the case, switch instrumentation on, run it; print its events
    (``fabric``: the fabric alone, as ``sim_growth.py --fabric-only`` runs it)."""
    start = ctypes.CDLL(helper).cg_start
    if fabric is None:
        exp, _, _ = sim_speed.build(case, 2_000_000, 1, 1)
        start()
        result = exp.run(int(until_us * sim_speed.US))
        print(json.dumps({"events": result.events}))
        return
    exp, _ = sim_growth.fabric_only_experiment(fabric_only_hosts(case), fabric)
    exp.sampler.start()
    start()
    exp.sim.run(int(until_us * sim_speed.US))
    print(json.dumps({"events": exp.sim.events_run}))


def fabric_only_hosts(case: str) -> int:
    """``--fabric-only``'s hosts: the N of ``perm-N`` (ValueError otherwise)."""
    m = re.fullmatch(r"perm-(\d+)", case)
    if m is None or int(m.group(1)) < 2:
        raise ValueError(f"--fabric-only runs perm-N's fabric (N 2 or more), not {case!r}")
    return int(m.group(1))


def load(path: Path) -> dict[str, list[int]]:
    """Exclusive costs per function (``SHOW``) from a callgrind output file."""
    names: dict[str, str] = {}
    rows: dict[str, list[int]] = collections.defaultdict(lambda: [0] * len(SHOW))
    idx: list[int] = []
    fn, skip = "", False
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            idx = [events.index(e) for e in SHOW]
        elif line[:1].isdigit() or line[:1] in "+-*":
            if skip:  # the inclusive cost of a call, not the caller's own
                skip = False
                continue
            cols = line.split()[1:]
            row = rows[fn]
            for k, i in enumerate(idx):
                if i < len(cols):
                    row[k] += int(cols[i])
        elif line.startswith(("fn=", "cfn=")):
            m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
            if m is not None:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("fn="):
                    fn = names[m.group(1)]
        elif line.startswith("calls="):
            skip = True
    merged: dict[str, list[int]] = {}
    for name, vals in rows.items():
        key = re.sub(r"'\d+$", "", name.replace("CPyDef_", "").replace("___", "."))
        acc = merged.setdefault(key, [0] * len(SHOW))
        for i, v in enumerate(vals):
            acc[i] += v
    return merged


def measure(
    case: str, until_us: float, ll: int, top: int, fabric: sim_growth.FabricOnly | None = None
) -> dict[str, Any]:
    """Run the child under callgrind; the loop's costs per event, total and by function
    (``fabric``: the fabric alone with those reflecting hosts, their module built here)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        src, helper, out = Path(tmp, "cg.c"), Path(tmp, "cg.so"), Path(tmp, "cg.out")
        src.write_text(_HELPER)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(helper), str(src)], check=True)
        argv = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--I1=32768,8,64",
                "--D1=32768,8,64", f"--LL={ll},16,64", "--instr-atstart=no",
                "--collect-atstart=no", "--toggle-collect=Sim_run",
                f"--callgrind-out-file={out}", sys.executable, __file__, "--child", case,
                "--until-us", str(until_us), "--helper", str(helper)]  # fmt: skip
        if fabric is not None:
            reflector = str(sim_growth.build_reflector(Path(tmp)))
            argv += fabric._replace(reflector=reflector).child_argv()
        proc = subprocess.run(argv, capture_output=True, text=True, check=True)
        events = int(json.loads(proc.stdout.strip().splitlines()[-1])["events"])
        rows = load(out)
    total = [sum(r[i] for r in rows.values()) for i in range(len(SHOW))]
    worst = sorted(rows.items(), key=lambda kv: -(kv[1][3] + kv[1][4]))[:top]
    return {
        "case": fabric.label().format(fabric_only_hosts(case)) if fabric is not None else case,
        "until_us": until_us,
        "LL": f"{ll},16,64", "events": events,
        "per_event": {k: round(v / events, 3) for k, v in zip(SHOW, total, strict=True)},
        "by_function": {name: {k: round(v / events, 3) for k, v in zip(SHOW, vals, strict=True)}
                        for name, vals in worst},
    }  # fmt: skip


def census(case: str, until_us: float, top: int) -> None:
    """Print what a run holds at ``until_us``: per type, and per QP."""
    from openmrc.transport.qp import QueuePair

    exp, _, _ = sim_speed.build(case, 2_000_000, 1, 1)
    exp.run(int(until_us * sim_speed.US))
    gc.unfreeze()
    tracked = gc.get_objects()
    seen = {id(o) for o in tracked}
    found = list(tracked)
    for o in tracked:
        for r in gc.get_referents(o):
            if id(r) not in seen:
                seen.add(id(r))
                found.append(r)
    by_type: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for o in found:
        row = by_type[f"{type(o).__module__}.{type(o).__qualname__}"]
        row[0] += 1
        row[1] += sys.getsizeof(o)
    print(f"{len(found)} objects, {sum(v[1] for v in by_type.values()) / 1e6:.1f} MB")
    for name, (n, size) in sorted(by_type.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{size / 1e6:9.2f} MB {n:9d} {size / n:8.1f} B each  {name}")
    qps = [o for o in tracked if type(o) is QueuePair]
    per: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    counted: set[int] = set()
    owners = ("QueuePair", "Context", "SimHost", "Requester", "Responder", "PathSet")

    def walk(path: str, o: object, depth: int) -> None:
        if o is None or isinstance(o, int | float | str) or depth > 3 or id(o) in counted:
            return
        counted.add(id(o))
        per[path][0] += 1
        per[path][1] += sys.getsizeof(o)
        names = [a for a in getattr(type(o), "__mypyc_attrs__", ()) if a != "__dict__"]
        for klass in type(o).__mro__:
            names += [a for a in getattr(klass, "__slots__", ()) if a != "__dict__"]
        if hasattr(o, "__dict__") and not isinstance(o, type):
            names += list(vars(o))
        for name in dict.fromkeys(names):
            try:
                value = getattr(o, name)
            except AttributeError:
                continue
            if depth > 0 and type(value).__name__ in owners:
                continue
            walk(f"{path}.{name}", value, depth + 1)

    for qp in qps:
        walk("qp", qp, 0)
    print(f"{len(qps)} QPs; bytes per QP by what holds them")
    for path, (n, size) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{size / len(qps):8.1f} B {n / len(qps):5.2f} objects  {path}")


def main() -> int:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="perm-1024")
    ap.add_argument("--until-us", type=float, default=30.0)
    ap.add_argument("--ll", type=int, default=32 << 20, help="last-level cache bytes")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--census", action="store_true")
    ap.add_argument("--json", help="also write the figures here")
    sim_growth.add_fabric_only_options(ap)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--helper", help=argparse.SUPPRESS)
    ap.add_argument("--reflector", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.until_us, args.helper, sim_growth.FabricOnly.of_child(args))
        return 0
    bad = sim_growth.fabric_options_error(args)
    if bad is not None:
        print(f"sim_misses: {bad}", file=sys.stderr)
        return 2
    if args.fabric_only:
        try:
            fabric_only_hosts(args.case)
        except ValueError as e:
            print(f"sim_misses: --case: {e}", file=sys.stderr)
            return 2
        if args.window < 1 or args.census:
            print("sim_misses: --fabric-only: needs --window 1 or more, and no --census",
                  file=sys.stderr)  # fmt: skip
            return 2
    if args.census:
        census(args.case, args.until_us, args.top)
        return 0
    fabric = sim_growth.FabricOnly.of_options(args) if args.fabric_only else None
    got = measure(args.case, args.until_us, args.ll, args.top, fabric)
    if args.json:
        Path(args.json).write_text(json.dumps(got, indent=1) + "\n")
    print(f"{got['case']} --until-us {got['until_us']:g}, LL {got['LL']}: {got['events']:,} events")
    print(f"{'per event':44}" + "".join(f"{k:>8}" for k in SHOW))
    rows = [("loop", got["per_event"]), *got["by_function"].items()]
    for name, vals in rows:
        print(f"{name[:44]:44}" + "".join(f"{vals[k]:8.2f}" for k in SHOW))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
