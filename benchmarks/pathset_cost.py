"""What one QP's EV set (``PathSet``) costs: bytes and set-up time.

A simulated fabric holds a QP pair per flow, so this is paid per QP: the
64-host all-to-all sets up 8064 of them and the 8192-host permutation 16,384.
For each EV profile (the sim's profiles for those two benchmarks and the
transport's default), prints one JSON object with:

* ``bytes_idle``: traced memory (``tracemalloc``) per ``PathSet`` right after
  set-up, as a QP that never sends keeps it;
* ``bytes_busy``: the same after every active EV had a clean ACK, one an ECN
  echo and one a loss (the EV -> id map and the ECN state exist then);
* ``setup_us``: CPU microseconds per ``PathSet`` set-up (``time.process_time``
  over ``--n`` set-ups; the EV draws are most of it).

    python benchmarks/pathset_cost.py
    python benchmarks/pathset_cost.py --n 2000 --out pathset.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import tracemalloc

from openmrc.transport import EVProfile, PathSet

#: name -> the EV profile (the sim gives each QP ``planes``, its T1s as uplinks, 256 EVs)
PROFILES: dict[str, EVProfile] = {
    "alltoall-64 (1 plane, 8 T1s)": EVProfile(planes=1, paths_per_plane=8, ev_count=256),
    "perm-8192 (1 plane, 128 T1s)": EVProfile(planes=1, paths_per_plane=128, ev_count=256),
    "default (8 planes, 64 paths)": EVProfile(),
}


def measure(name: str, prof: EVProfile, n: int) -> dict[str, object]:
    """The figures of one profile."""
    rng = random.Random(1)
    PathSet(prof, rng, qpn=0)  # warm the field-value caches
    count = 100
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sets = [PathSet(prof, rng, qpn=i) for i in range(count)]
        idle = (tracemalloc.get_traced_memory()[0] - before) / count
        for ps in sets:
            for ev in ps.slots:
                ps.on_clean_ack(ev)
            ps.on_ecn(ps.slots[0], 1)
            ps.on_loss(ps.slots[1], 2, "benchmark")
        busy = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    del sets
    rng = random.Random(2)
    t0 = time.process_time()
    for i in range(n):
        PathSet(prof, rng, qpn=i)
    setup = (time.process_time() - t0) / n
    return {
        "profile": name,
        "ev_count": prof.ev_count,
        "bytes_idle": round(idle),
        "bytes_busy": round(busy),
        "setup_us": round(setup * 1e6, 1),
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> int:
    """Print (and with ``--out`` write) one JSON object per profile."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="set-ups timed per profile")
    parser.add_argument("--out", help="also write the results here (a JSON list)")
    args = parser.parse_args(argv)
    if args.n < 1:
        print("--n: must be at least 1", file=sys.stderr)
        return 2
    results = [measure(name, prof, args.n) for name, prof in PROFILES.items()]
    for r in results:
        print(json.dumps(r))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
