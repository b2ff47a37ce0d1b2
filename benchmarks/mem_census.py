"""Memory census of a sendrecv run: the transport's structures, in bytes per host.

Runs ``--case sendrecv-N`` of ``benchmarks/sim_speed.py`` (every host sends 4 MiB to
host + 1) up to ``--until-us`` of simulated time, then walks every host's route cache
and every QP's requester, responder, EV set and congestion state with
``sys.getsizeof`` and prints the resident memory and bytes per host of each
structure.  Ints that a compiled (mypyc) class holds as attributes are unboxed and
not counted; those in dicts, lists and tuples are.  What it does not see: packets
in flight, the event heap, the fabric's native ports, allocator slack.  The memory
budget's census in docs/performance.md was taken with it:

    python benchmarks/mem_census.py --hosts 1024 --until-us 25
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_speed

#: Attributes that point back to shared or owning objects (counted once elsewhere).
SKIP = {"qp", "op", "stats", "context", "paths", "cc", "pd", "rkeys", "attr", "profile", "events"}


def status(key: str) -> int:
    """A ``/proc/self/status`` figure in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Census:
    """Deep sizes, each object counted once across the whole census."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def size(self, o: Any) -> int:
        """Bytes of ``o`` and what it holds, not yet counted."""
        if id(o) in self.seen or isinstance(o, type):
            return 0
        if callable(o) and not isinstance(o, (dict, list, tuple, deque, set)):
            return 0
        self.seen.add(id(o))
        total = sys.getsizeof(o)
        if isinstance(o, dict):
            for k, v in o.items():
                total += self.size(k) + self.size(v)
        elif isinstance(o, (list, tuple, deque, set, frozenset)):
            for v in o:
                total += self.size(v)
        else:
            compiled = hasattr(type(o), "__mypyc_attrs__")
            names = getattr(type(o), "__mypyc_attrs__", None) or [
                n for c in type(o).__mro__ for n in getattr(c, "__slots__", ())
            ]
            for n in names:
                if n in SKIP:
                    continue
                try:
                    v = getattr(o, n)
                except AttributeError:
                    continue
                if compiled and type(v) in (int, float, bool):
                    continue  # unboxed in the compiled class
                total += self.size(v)
            if not names and hasattr(o, "__dict__"):
                total += self.size(o.__dict__)
        return total


def main() -> None:
    """Run, take the census, print it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1024, help="sendrecv-N's N (default 1024)")
    ap.add_argument("--until-us", type=float, default=25.0, help="simulated us (default 25)")
    args = ap.parse_args()
    n = args.hosts
    base = status("VmRSS")
    exp, _, _ = sim_speed.build(f"sendrecv-{n}", 0, 1, 8)
    built = status("VmRSS")
    exp.sampler.start()
    exp.sim.run(int(args.until_us * 1e6))
    rss = status("VmRSS")
    print(
        f"sendrecv-{n} x 8 at {args.until_us:g} us: RSS {(rss - base) / n:,.0f} B per host "
        f"(fabric and hosts {(built - base) / n:,.0f}, the run {(rss - built) / n:,.0f})"
    )
    census = Census()
    cat: Counter[str] = Counter()
    for h in exp.hosts:
        cat["route cache"] += census.size(h._routes)
        for qp in h.ctx.qps.values():
            rq = qp.requester
            if rq is not None:
                cat["requester.unacked (TxTable: PSN slots, flight)"] += census.size(rq.unacked)
                cat["requester.ev_sent (EvOrder)"] += census.size(rq.ev_sent)
                cat["requester, the rest"] += census.size(rq)
            if qp.responder is not None:
                cat["responder"] += census.size(qp.responder)
            if qp.paths is not None:
                cat["EV set: EV -> id map"] += census.size(qp.paths._ids)
                cat["EV set, the rest"] += census.size(qp.paths)
            if qp.cc is not None:
                cat["congestion control"] += census.size(qp.cc)
            cat["QP, the rest"] += census.size(qp)
        cat["transport context"] += census.size(h.ctx)
    for what, b in cat.most_common():
        print(f"{what:42s} {b / n:10,.0f} B per host")
    print(f"{'counted':42s} {sum(cat.values()) / n:10,.0f} B per host")


if __name__ == "__main__":
    main()
