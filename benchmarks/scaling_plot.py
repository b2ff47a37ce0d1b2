"""Scaling curves of the sendrecv cases: time and memory against hosts (8 planes).

Reads the JSON that ``benchmarks/sim_speed.py --out FILE`` writes (one or more
``sendrecv-N`` results per file), prints a Markdown table and, with ``--png``,
draws two panels (CPU and wall seconds; peak RSS and the memory budget) on
log-log axes with matplotlib:

    python benchmarks/sim_speed.py --case sendrecv-1024 --out a.json
    python benchmarks/sim_speed.py --case sendrecv-8192 --out b.json
    python benchmarks/scaling_plot.py a.json b.json --png docs/img/scaling.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The sendrecv results of ``paths``, by host count, with ``budget_mib`` worked out
    again from the budget as it is now (a file may come from an older budget)."""
    from sim_speed import SENDRECV_BYTES, sendrecv_fabric

    from openmrc.sim.budget import estimate

    rows: dict[int, dict[str, Any]] = {}
    for path in paths:
        doc = json.loads(path.read_text())
        for row in doc if isinstance(doc, list) else [doc]:
            if str(row.get("case", "")).startswith("sendrecv-"):
                hosts = int(row["hosts"])
                est = estimate(
                    sendrecv_fabric(hosts), [SENDRECV_BYTES] * hosts, hosts, int(row["qps"])
                )
                rows[hosts] = {**row, "budget_mib": round(est.memory_bytes / 2**20, 1)}
    return [rows[h] for h in sorted(rows)]


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the runs."""
    out = [
        "| hosts x 8 planes | events | CPU s (build + run) | wall s (shared machine) | peak RSS | budget "
        "| per NIC, median (min) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['hosts']:,} | {r['events']:,} | {r['cpu_seconds']:.1f} | "
            f"{r['total_seconds']:.0f} | {r['peak_rss_mib']:,.0f} MiB | "
            f"{r['budget_mib']:,.0f} MiB | {r['per_nic_gbps']} ({r['min_nic_gbps']}) Gb/s |"
        )
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], png: Path) -> None:
    """Two panels, log-log: seconds against hosts, and MiB against hosts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hosts = [r["hosts"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.loglog(hosts, [r["cpu_seconds"] for r in rows], "o-", label="CPU s (build + run)")
    ax1.loglog(hosts, [r["total_seconds"] for r in rows], "s--", label="wall s (shared machine)")
    ax1.set_xlabel("hosts (8 planes)")
    ax1.set_ylabel("seconds")
    ax1.set_title("sendrecv, 4 MiB per host: time")
    ax2.loglog(hosts, [r["peak_rss_mib"] for r in rows], "o-", label="peak RSS")
    ax2.loglog(hosts, [r["budget_mib"] for r in rows], "s--", label="budget (openmrc.sim.budget)")
    ax2.set_xlabel("hosts (8 planes)")
    ax2.set_ylabel("MiB")
    ax2.set_title("memory")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)


def main(argv: list[str] | None = None) -> int:
    """Print the table; draw the PNG when asked."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results", nargs="+", type=Path, help="sim_speed.py --out files")
    ap.add_argument("--png", type=Path, help="write the curves here")
    args = ap.parse_args(argv)
    rows = load(args.results)
    if not rows:
        print("no sendrecv-N results in those files", file=sys.stderr)
        return 1
    print(table(rows))
    if args.png:
        plot(rows, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
