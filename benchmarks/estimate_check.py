"""Check ``openmrc run --estimate`` against measured peaks: the table of docs/results/estimate.md.

Two parts, from recorded measurements only (nothing large is run here):

1. **The per-object costs**, from the small runs of ``benchmarks/mem_costs.py``
   (``benchmarks/results/mem-costs.json``): each run's peak RSS less the
   interpreter and the fabric's budget, split by least squares into a cost per QP
   of a flow under one T0 and per QP of a flow through the T1 tier (and the same
   for events per packet), beside the constants of ``openmrc.sim.budget``; and
   how well those constants predict each small run.
2. **The big runs**: the estimate ``openmrc run --estimate`` prints for
   ``perm-8192 --planes 8``, ``sendrecv-42k`` and ``sendrecv-131072`` (the
   scenarios of ``benchmarks/sim_speed.py``, built from its own shapes) against
   the sequential peak RSS recorded in ``benchmarks/results/``.

    python benchmarks/estimate_check.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: (case, recorded results file, the scenario file and --set that make it a scenario)
BIG = [
    (
        "perm-8192 --planes 8",
        "perm-8192-ranks2.json",
        "scenarios/permutation-64.toml",
        [
            "fabric.t0s=64",
            "fabric.hosts_per_t0=128",
            "fabric.t1s=128",
            "fabric.link_delay_ps=1000000",
            "workload.size=2000000",
        ],
    ),
    ("sendrecv-42k", "sendrecv-42k-ranks2.json", "scenarios/scale/sendrecv-42k.toml", []),
    ("sendrecv-131072", "sendrecv-131072.json", "scenarios/scale/sendrecv-131072.toml", []),
]


def fit(rows: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Least squares over the small runs: (bytes per local QP, per far QP) and (events
    per local packet, per far packet)."""
    import numpy as np

    from openmrc.sim.budget import fabric_bytes
    from openmrc.topology import ClosSpec

    qx, qy, ex, ey = [], [], [], []
    for r in rows:
        spec = ClosSpec(
            planes=r["planes"], t0s=r["t0s"], hosts_per_t0=r["hosts_per_t0"], t1s=r["t1s"]
        )
        local = _local_fraction(r["case"], r["hosts"], r["hosts_per_t0"])
        qx.append([r["qps"] * local, r["qps"] * (1 - local)])
        qy.append(r["peak_rss"] - r["rss_after_imports"] - fabric_bytes(spec))
        packets = r["flow_bytes"] / 4096
        ex.append([packets * local, packets * (1 - local)])
        ey.append(r["events"])
    q = np.linalg.lstsq(np.array(qx), np.array(qy), rcond=None)[0]
    e = np.linalg.lstsq(np.array(ex), np.array(ey), rcond=None)[0]
    return [float(v) for v in q], [float(v) for v in e]


def _local_fraction(case: str, hosts: int, per_t0: int) -> float:
    """Of a case's flows, those between two hosts of one T0: a sendrecv's to host + 1
    all but one per T0; a permutation's (uniform) 1 in (hosts - 1) per other host of
    its T0."""
    if case.startswith("sendrecv"):
        return (per_t0 - 1) / per_t0
    return (per_t0 - 1) / (hosts - 1)


def small_table(rows: list[dict[str, Any]]) -> list[str]:
    """Each small run's peak against what the budget's constants give for it."""
    from openmrc.sim import budget
    from openmrc.topology import ClosSpec

    out = [
        "| small run | hosts x planes | QPs | peak RSS beyond the interpreter | the constants give | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        spec = ClosSpec(
            planes=r["planes"], t0s=r["t0s"], hosts_per_t0=r["hosts_per_t0"], t1s=r["t1s"]
        )
        local = _local_fraction(r["case"], r["hosts"], r["hosts_per_t0"])
        got = r["peak_rss"] - r["rss_after_imports"]
        model = budget.fabric_bytes(spec) + r["qps"] * (
            local * budget.BYTES_PER_QP_LOCAL + (1 - local) * budget.BYTES_PER_QP
        )
        out.append(
            f"| {r['case']} | {r['hosts']:,} x {r['planes']} | {r['qps']:,} | "
            f"{got / 2**20:,.1f} MiB | {model / 2**20:,.1f} MiB | {model / got:.3f} |"
        )
    return out


def big_table() -> list[str]:
    """The three large runs: the estimate against the recorded sequential peak."""
    from openmrc.pipeline.run import load_scenario, run_estimate

    root = HERE.parent
    out = [
        "| case | estimate: memory | measured peak RSS (sequential) | estimate / measured | estimate: events | measured events | estimate: CPU | measured CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, recorded, scenario, sets in BIG:
        rec = json.loads((HERE / "results" / recorded).read_text())[0]
        sc, _ = load_scenario(str(root / scenario), sets, build=False)
        est = run_estimate(sc)
        peak = rec["peak_rss_mib"] * 2**20
        out.append(
            f"| `{case}` | {est.memory_bytes / 2**30:.2f} GiB | {peak / 2**30:.2f} GiB "
            f"(`benchmarks/results/{recorded}`) | {est.memory_bytes / peak:.3f} | "
            f"{est.events:,} | {rec['events']:,} | {est.cpu_seconds:,.0f} s | "
            f"{rec['cpu_seconds']:,.0f} s |"
        )
    return out


def main() -> int:
    """Print the per-object costs and both tables (markdown)."""
    from openmrc.sim import budget

    rows = json.loads((HERE / "results" / "mem-costs.json").read_text())
    (q_local, q_far), (e_local, e_far) = fit(rows)
    print("| per-object cost | least squares over the small runs | openmrc.sim.budget |")
    print("|---|---|---|")
    print(f"| bytes per QP, flow under one T0 | {q_local:,.0f} | {budget.BYTES_PER_QP_LOCAL:,} |")
    print(f"| bytes per QP, flow through a T1 | {q_far:,.0f} | {budget.BYTES_PER_QP:,} |")
    print(f"| events per packet, under one T0 | {e_local:.2f} | {budget.EVENTS_PER_PACKET_LOCAL} |")
    print(f"| events per packet, through a T1 | {e_far:.2f} | {budget.EVENTS_PER_PACKET} |")
    print()
    print("\n".join(small_table(rows)))
    print()
    print("\n".join(big_table()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
