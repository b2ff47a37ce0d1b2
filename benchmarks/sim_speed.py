"""Simulator speed: a permutation of 2 MB MRC flows on a two-tier fabric.

Default: the 1024-host single-plane fabric (32 T0 x 32 T1, 100 Gb/s, 1 us
links, 4 KiB MTU) and a 128-host one.  Prints one JSON object per run: wall
seconds, simulated microseconds, packet-link traversals (a packet crossing one
link counts one), traversals per wall second, events, and peak RSS.

    python benchmarks/sim_speed.py                  # 128 then 1024 hosts
    python benchmarks/sim_speed.py --hosts 256 --planes 8
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import resource
import sys
import time

from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import permutation


def fabric_for(hosts: int, planes: int) -> ClosSpec:
    """A non-blocking two-tier plane for ``hosts`` hosts: T0s with sqrt(hosts) ports down."""
    per_t0 = 2 ** math.ceil(math.log2(math.isqrt(hosts)))
    per_t0 = max(1, min(per_t0, hosts))
    t0s = -(-hosts // per_t0)
    if t0s * per_t0 != hosts:
        raise SystemExit(
            f"--hosts {hosts}: pick a number that splits evenly over T0s (e.g. a power of 2)"
        )
    return ClosSpec(
        planes=planes, t0s=t0s, hosts_per_t0=per_t0, t1s=per_t0, link_delay_ps=1_000_000
    )


def run(hosts: int, planes: int, size: int, seed: int) -> dict[str, object]:
    """One benchmark run; returns its figures."""
    spec = fabric_for(hosts, planes)
    t0 = time.perf_counter()
    exp = Experiment(spec, seed=seed, sample_interval_ps=100_000_000)
    exp.add_flows(permutation(hosts, size, random.Random(seed)))
    build = time.perf_counter() - t0
    result = exp.run()
    wall = result.wall_seconds
    traversals = sum(p.tx_pkts for p in exp.fabric.ports)
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fct = sorted(f.fct_ps for f in result.flows if f.fct_ps is not None)
    return {
        "hosts": hosts,
        "planes": planes,
        "fabric": f"{spec.t0s} T0 x {spec.t1s} T1 per plane, {spec.host_gbps:g} Gb/s, 1 us links",
        "flow_bytes": size,
        "all_ok": result.all_ok,
        "build_seconds": round(build, 2),
        "wall_seconds": round(wall, 2),
        "simulated_us": round(result.sim_end_ps / 1e6, 1),
        "packet_link_traversals": traversals,
        "traversals_per_wall_second": round(traversals / wall) if wall else None,
        "events": result.events,
        "median_fct_us": round(fct[len(fct) // 2] / 1e6, 1) if fct else None,
        "peak_rss_mib": round(rss_kb / 1024, 1),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print JSON lines."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--hosts", type=int, action="append", help="hosts (repeatable; default 128 and 1024)"
    )
    parser.add_argument("--planes", type=int, default=1)
    parser.add_argument("--size", type=int, default=2 << 20, help="bytes per flow (default 2 MiB)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for hosts in args.hosts or [128, 1024]:
        if hosts < 2:
            parser.error(f"--hosts: need at least 2, got {hosts}")
        print(json.dumps(run(hosts, args.planes, args.size, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
