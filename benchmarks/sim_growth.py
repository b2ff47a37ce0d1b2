"""How the simulator's cost per event grows with the fabric (1,024 against 8,192 hosts).

Each run is a fresh interpreter that builds ``perm-N`` (``sim_speed.py``'s case) and
times the event loop's CPU in two windows of simulated time: from the start to
``--first-us`` (the flows ramping up: the window ``sim_speed.py --until-us`` measures)
and from there to ``--steady-us`` (their windows full).  Sizes alternate, their order
reversed every other round, and the smallest size runs ``--small-runs`` times a round
(its loop is short).  A shared machine's neighbours move a single run by tens of
percent, so each size is summed up by its minimum (the quietest run) and its median.

At 1,024 hosts the lines an event touches are largely still in the last-level cache
at the host's next event; at 8,192 hosts they are not.  The smaller size's cost thus
moves with what the machine's other work leaves of that cache (its spread over a day
is wide on a shared machine), the larger's hardly (docs/performance.md, "Where the
time goes").

    python benchmarks/sim_growth.py                          # 1024 and 8192 hosts, 6 rounds
    python benchmarks/sim_growth.py --sizes 1024,2048,8192 --rounds 4 --out g.json
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(hosts: int, first_us: float, steady_us: float) -> dict[str, Any]:
    """One run in this process: loop CPU and events in each window."""
    import sim_speed

    exp, _, _ = sim_speed.build(f"perm-{hosts}", 2_000_000, 1, 1)
    sim = exp.sim

    def cpu() -> float:
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    exp.sampler.start()
    c0 = cpu()
    sim.run(int(first_us * sim_speed.US))
    c1, e1 = cpu(), sim.events_run
    row: dict[str, Any] = {"hosts": hosts, "first_events": e1, "first_cpu": round(c1 - c0, 4)}
    if steady_us:
        sim.run(int(steady_us * sim_speed.US))
        c2, e2 = cpu(), sim.events_run
        row.update(steady_events=e2 - e1, steady_cpu=round(c2 - c1, 4))
    exp.sampler.stop()
    row["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return row


def ns_per_event(row: dict[str, Any], window: str) -> float | None:
    """A run's loop CPU per event in ``window`` (``first`` or ``steady``), ns."""
    events = row.get(f"{window}_events")
    if not events:
        return None
    return float(row[f"{window}_cpu"]) / int(events) * 1e9


def run_child(hosts: int, first_us: float, steady_us: float) -> dict[str, Any]:
    """One run in a fresh interpreter."""
    argv = [sys.executable, __file__, "--child", str(hosts), "--first-us", str(first_us),
            "--steady-us", str(steady_us)]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"sim_growth: perm-{hosts} failed: {out.stderr.strip()[-400:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def summarise(rows: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Per size: runs, and the minimum and median ns per event of each window; then the
    growth of each from the smallest size to the largest."""
    out: dict[str, Any] = {"sizes": {}, "growth": {}}
    for n in sizes:
        mine = [r for r in rows if r["hosts"] == n]
        cell: dict[str, Any] = {"runs": len(mine)}
        for window in ("first", "steady"):
            vals = [v for v in (ns_per_event(r, window) for r in mine) if v is not None]
            if vals:
                cell[window] = {"min": round(min(vals), 1),
                                "median": round(statistics.median(vals), 1)}  # fmt: skip
        out["sizes"][str(n)] = cell
    lo, hi = out["sizes"][str(sizes[0])], out["sizes"][str(sizes[-1])]
    for window in ("first", "steady"):
        if window in lo and window in hi:
            out["growth"][window] = {k: round(hi[window][k] / lo[window][k] - 1, 4)
                                     for k in ("min", "median")}  # fmt: skip
    return out


def parse_sizes(text: str) -> list[int]:
    """``--sizes``: two or more host counts, ascending (ValueError with the reason)."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"not a comma-separated list of host counts: {text!r}") from None
    if len(sizes) < 2 or sizes != sorted(set(sizes)) or sizes[0] < 2:
        raise ValueError(f"two or more host counts, ascending, each 2 or more: {text!r}")
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,8192", help="hosts of perm-N, ascending")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--small-runs", type=int, default=2, help="runs of the smallest size a round")
    ap.add_argument("--first-us", type=float, default=30.0, help="the first window's end")
    ap.add_argument("--steady-us", type=float, default=60.0, help="the second's (0: none)")
    ap.add_argument("--out", help="also write every run and the summary here (JSON)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.first_us, args.steady_us)))
        return 0
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as e:
        print(f"sim_growth: --sizes: {e}", file=sys.stderr)
        return 2
    for name in ("rounds", "small_runs"):
        if getattr(args, name) < 1:
            print(f"sim_growth: --{name.replace('_', '-')}: must be 1 or more", file=sys.stderr)
            return 2
    if not args.first_us > 0 or (args.steady_us and not args.steady_us > args.first_us):
        print("sim_growth: --steady-us: must be 0 or past --first-us (> 0)", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for n in sizes if r % 2 == 0 else sizes[::-1]:
            for _ in range(args.small_runs if n == sizes[0] else 1):
                row = run_child(n, args.first_us, args.steady_us)
                row["round"] = r + 1
                rows.append(row)
                steady = ns_per_event(row, "steady")
                print(f"round {r + 1} perm-{n}: {ns_per_event(row, 'first'):.0f} ns/event to"
                      f" {args.first_us:g} us"
                      + (f", {steady:.0f} from there to {args.steady_us:g} us"
                         if steady is not None else ""), flush=True)  # fmt: skip
    summary = summarise(rows, sizes)
    for window, title in (("first", f"0-{args.first_us:g} us"),
                          ("steady", f"{args.first_us:g}-{args.steady_us:g} us")):  # fmt: skip
        if window not in summary["growth"]:
            continue
        cells = ", ".join(f"perm-{n} {summary['sizes'][str(n)][window]['min']:.0f}/"
                          f"{summary['sizes'][str(n)][window]['median']:.0f}" for n in sizes)  # fmt: skip
        g = summary["growth"][window]
        print(f"{title}: {cells} ns/event (min/median); growth {g['min']:+.0%} by min,"
              f" {g['median']:+.0%} by median")  # fmt: skip
    if args.out:
        doc = {"command": " ".join(["python", "benchmarks/sim_growth.py", *sys.argv[1:]]),
               "summary": summary, "runs": rows}  # fmt: skip
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
