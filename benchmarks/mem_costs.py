"""Measure what the memory estimate's per-object costs are made of, on small runs.

Each case of ``benchmarks/sim_speed.py`` (``perm-N`` with ``--planes``,
``sendrecv-N``) runs in a fresh process, which records its resident memory
three times: after the imports (the interpreter), after the experiment is
built (fabric, hosts, QPs and flows) and at the run's peak (``VmHWM``), with
the counts the estimate is made of (hosts, ports, links, QPs, flows,
packets).  Printed as JSON lines (``--out`` writes them as a list);
``benchmarks/estimate_check.py`` derives the per-object costs from them and
compares the estimate with the big runs' recorded peaks.

    python benchmarks/mem_costs.py --case sendrecv-512 --case sendrecv-1024 \\
        --case perm-256 --case perm-512 --planes 8 --out benchmarks/results/mem-costs.json

Run it on the compiled build (the installed package), as the big runs were.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def status(key: str) -> int:
    """A ``/proc/self/status`` figure in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def child(case: str, planes: int) -> dict[str, Any]:
    """One case in this process: its counts and its memory at three points."""
    import sim_speed

    from openmrc.sim import _native
    from openmrc.sim.budget import links_of

    base = status("VmRSS")
    exp, _workload, coll = sim_speed.build(case, 2_000_000, 1, planes)
    built = status("VmRSS")
    result = exp.run(None)
    peak = status("VmHWM")
    spec = exp.spec
    sizes = [f.size for f in result.flows]
    if coll is not None:
        sizes += [t.size for t in coll.transfers]
    return {
        "case": case,
        "native": bool(_native.NATIVE),
        "hosts": spec.hosts,
        "planes": spec.planes,
        "t0s": spec.t0s,
        "t1s": spec.t1s,
        "hosts_per_t0": spec.hosts_per_t0,
        "links": links_of(spec),
        "qps": sum(len(h.ctx.qps) for h in exp.hosts),
        "flows": len(result.flows),
        "flow_bytes": sum(sizes),
        "events": result.events,
        "all_ok": result.all_ok,
        "rss_after_imports": base,
        "rss_built": built,
        "peak_rss": peak,
    }


def main() -> int:
    """Run each ``--case`` in its own process and print (and write) the measurements."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", default=[], help="perm-N or sendrecv-N")
    p.add_argument("--planes", type=int, default=8, help="planes of the perm-N cases")
    p.add_argument("--out", help="write the measurements here (JSON list)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.planes)))
        return 0
    rows = []
    for case in args.case:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", case, "--planes", str(args.planes)],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
