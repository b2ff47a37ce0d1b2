"""RoCE's first retransmission timeout against the 1 % loss ring: how the shape depends on it.

NVIDIA does not publish the initial range of ConnectX's adaptive retransmission
(docs/baselines.md), so this sweeps it: the ring all-reduce at 1 % random loss at
every NIC ingress, RoCE with 1 QP, each QP's first timeout fixed at
``4.096 us x 2^k`` (``adp_init_range = 1``) for k = 5..10 (131 us to 4.2 ms), run to
the end of the collective, against MRC at the same loss (MRC has no such timer: one
run per seed).  The ring is the paper experiments' quick ring (16 ranks on 4 T0s x 4
hosts, 4 T1s, every hop across the T0-T1 tier, 400 Gb/s) at ``--size`` (16 MiB), the
largest that runs to completion on a shared 2-core machine in minutes per point.
Prints a Markdown table (busbw and the ratio RoCE / MRC, the paper's shape is a ratio
below 0.2) and, with ``--png``, draws it::

    python benchmarks/roce_timeout_sweep.py --seeds 1 2 --cache /tmp/sweep \
        --png docs/img/roce-timeout.png

``--only mrc`` / ``--only roce`` with ``--cache`` run a part (MRC's points do not
depend on the RoCE model, so they may come from another installed tree).

A run that does not finish within ``--until-us`` is reported as not finished, never as
a rate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the paper experiments' quick ring (openmrc.paper.experiments.QUICK_RING)
QUICK_RING = (
    "fabric.t0s=4",
    "fabric.hosts_per_t0=4",
    "fabric.t1s=4",
    "workload.placement=[0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15]",
)
#: first timeouts swept: 4.096 us x 2^k
EXPONENTS = (5, 6, 7, 8, 9, 10)
#: the default profile's first timeouts (adp_init_exp = 7, adp_init_range = 2)
DEFAULT_EXPONENTS = (7, 8)
#: the point run with the default profile (each QP draws 524 us or 1.05 ms)
DEFAULT = -1


def first_timeout_us(k: int) -> float:
    """The first timeout ``4.096 us x 2^k`` in microseconds."""
    return 4.096 * (1 << k)


def run_point(scenario: str, sets: list[str], seed: int, cache: Path | None) -> dict[str, Any]:
    """Run one scenario file with ``sets`` at ``seed``; its busbw, completion and counters.

    With ``cache``, a point's results.json is kept there under a name made of its
    arguments and read back instead of run again (so MRC's points, the same whichever
    RoCE model is on the path, can come from another run of this script)."""
    key = hashlib.sha256(json.dumps([scenario, sets, seed]).encode()).hexdigest()[:16]
    kept = cache / f"{Path(scenario).stem}-s{seed}-{key}.json" if cache else None
    if kept is not None and kept.exists():
        doc = json.loads(kept.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="roce-sweep-") as out:
            cmd = [sys.executable, "-m", "openmrc.cli", "run"]
            cmd.append(str(ROOT / "scenarios/paper" / scenario))
            for s in sets:
                cmd += ["--set", s]
            cmd += ["--seed", str(seed), "--no-progress", "--out", out]
            subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ.copy())
            text = (Path(out) / "results.json").read_text()
        doc = json.loads(text)
        if kept is not None:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(text)
    (c,) = doc["collectives"]
    s = doc["summary"]
    return {
        "complete": bool(c.get("complete")),
        "busbw_gbps": float(c.get("busbw_gbps") or 0.0) if c.get("complete") else None,
        "time_us": c.get("time_us"),
        "timeouts": s["timeouts"],
        "retransmits": s["retransmits"],
    }


def sweep(
    seeds: list[int],
    size: str,
    until_us: int,
    workers: int,
    only: str | None = None,
    cache: Path | None = None,
) -> dict[str, Any]:
    """Every point: MRC once per seed, RoCE 1 QP per seed and first-timeout exponent
    (``only``: just the ``"mrc"`` or the ``"roce"`` ones)."""
    base = [*QUICK_RING, f'workload.size="{size}"', f"run.until_us={until_us}"]
    jobs: list[tuple[str, int, int | None]] = []
    for seed in seeds:
        if only != "roce":
            jobs.append(("ring-allreduce-64-mrc-loss1.toml", seed, None))
        if only != "mrc":
            jobs += [
                ("ring-allreduce-64-roce-1qp-loss1.toml", seed, k) for k in (*EXPONENTS, DEFAULT)
            ]

    def one(job: tuple[str, int, int | None]) -> dict[str, Any]:
        scenario, seed, k = job
        sets = list(base)
        if k is not None and k != DEFAULT:
            sets.append(f"transport.roce={{adp_init_exp = {k}, adp_init_range = 1}}")
        r = run_point(scenario, sets, seed, cache)
        print(f"  seed {seed} {'mrc' if k is None else f'k={k}'}: {r}", file=sys.stderr)
        return {"seed": seed, "k": k, **r}

    with ThreadPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(one, jobs))
    return {"size": size, "until_us": until_us, "rows": rows}


def table(doc: dict[str, Any]) -> str:
    """Markdown: one row per first timeout, busbw and RoCE / MRC per seed."""
    rows = doc["rows"]
    seeds = sorted({r["seed"] for r in rows})
    mrc = {r["seed"]: r for r in rows if r["k"] is None}

    def cell(r: dict[str, Any]) -> str:
        if not r["complete"]:
            return f"not finished ({r['timeouts']} timeouts)"
        ratio = (
            r["busbw_gbps"] / mrc[r["seed"]]["busbw_gbps"] if mrc[r["seed"]]["complete"] else None
        )
        q = f"{ratio:.3f}" if ratio is not None else "-"
        return f"{r['busbw_gbps']:.1f} ({q}; {r['timeouts']} to)"

    out = [
        "| first timeout | "
        + " | ".join(f"seed {s}: RoCE busbw Gb/s (/ MRC; timeouts)" for s in seeds)
        + " |",
        "|---|" + "---|" * len(seeds),
        "| MRC | "
        + " | ".join(
            f"{mrc[s]['busbw_gbps']:.1f}" if mrc[s]["complete"] else "not finished" for s in seeds
        )
        + " |",
    ]
    for k in (*EXPONENTS, DEFAULT):
        by_seed = {r["seed"]: r for r in rows if r["k"] == k}
        if not by_seed:
            continue
        label = (
            "default: 524 us or 1,049 us per QP"
            if k == DEFAULT
            else f"{first_timeout_us(k):,.0f} us"
        )
        out.append(f"| {label} | " + " | ".join(cell(by_seed[s]) for s in seeds) + " |")
    return "\n".join(out)


def plot(doc: dict[str, Any], png: Path) -> None:
    """RoCE 1 QP / MRC busbw against the first timeout (log x), one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["rows"]
    mrc = {r["seed"]: r for r in rows if r["k"] is None}
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for seed in sorted(mrc):
        xs, ys = [], []
        for k in EXPONENTS:
            (r,) = [r for r in rows if r["seed"] == seed and r["k"] == k]
            if r["complete"] and mrc[seed]["complete"]:
                xs.append(first_timeout_us(k))
                ys.append(r["busbw_gbps"] / mrc[seed]["busbw_gbps"])
        line = ax.plot(xs, ys, marker="o", label=f"seed {seed}")
        dflt = [r for r in rows if r["seed"] == seed and r["k"] == DEFAULT and r["complete"]]
        if dflt and mrc[seed]["complete"]:
            ratio = dflt[0]["busbw_gbps"] / mrc[seed]["busbw_gbps"]
            ax.plot([741.5], [ratio], marker="*", markersize=13, color=line[0].get_color())
    ax.axhline(0.2, color="grey", linestyle="--", label="paper's shape: below 0.2")
    lo, hi = first_timeout_us(DEFAULT_EXPONENTS[0]), first_timeout_us(DEFAULT_EXPONENTS[-1])
    ax.axvspan(lo, hi, color="tab:green", alpha=0.12, label="openmrc default (524 us - 1 ms)")
    ax.set_xscale("log")
    ticks = [first_timeout_us(k) for k in EXPONENTS]
    ax.set_xticks(ticks, [f"{t:,.0f}" for t in ticks])
    ax.minorticks_off()
    ax.plot([], [], marker="*", linestyle="", color="grey", label="default profile (star)")
    ax.set_xlabel("RoCE first retransmission timeout (us)")
    ax.set_ylabel("busbw RoCE 1 QP / MRC")
    ax.set_ylim(bottom=0)
    ax.set_title(f"ring all-reduce, 16 ranks, {doc['size']}, 1 % loss at every NIC ingress")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--size", default="16MiB", help="all-reduce size (default 16MiB)")
    ap.add_argument("--until-us", type=int, default=200_000, help="time cap per run")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the runs here")
    ap.add_argument("--from-json", type=Path, help="read the runs from here instead of running")
    ap.add_argument("--png", type=Path, help="draw the figure here")
    ap.add_argument("--only", choices=("mrc", "roce"), help="run only these points (no table)")
    ap.add_argument("--cache", type=Path, help="keep each point's results.json here, reuse them")
    a = ap.parse_args()
    if a.from_json:
        doc = json.loads(a.from_json.read_text())
    else:
        doc = sweep(a.seeds, a.size, a.until_us, a.workers, a.only, a.cache)
    if a.only:
        return 0
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1))
    print(table(doc))
    if a.png:
        plot(doc, a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
