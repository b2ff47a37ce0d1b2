"""The ring's loss rows of ``openmrc paper`` at chosen seeds and a chosen message size.

``openmrc paper --seeds N`` always runs seeds 1 to N; this runs the same runs (the
experiments' own scenario files and full-size overrides, through the same sweep
point as ``openmrc paper``) at any seeds, and optionally at another ring size, so
that seeds can be added beside ones already measured and a shape can be measured at
the paper's larger messages without changing what ``openmrc paper`` runs::

    python benchmarks/paper_loss_rows.py --seeds 4,5 --out rows.json
    python benchmarks/paper_loss_rows.py --only ring-mrc-loss0.1 --size 256MiB \
        --seeds 1,2,3 --out rows-256.json

Each run is a fresh niced child process, one at a time; its CPU seconds and peak
memory are the child's own (``os.wait4``).  Finished runs are kept under
``--cache`` (default: next to ``--out``), so a rerun resumes.  The JSON lists every
run (busbw, when the collective ended, timeouts, resends, EVs blamed) and each
experiment's shape at each seed, checked by the experiment's own check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from openmrc.paper.experiments import (
    RING_LOSSY_CAP_US,
    PaperExperiment,
    Run,
    ring_lossy_cap_us,
    select,
)
from openmrc.paper.run import make_point
from openmrc.sweep.runner import run_point

#: The experiments this measures by default: the ring's three loss rows.
DEFAULT_ONLY = "ring-loss1,ring-loss1-roce-16qp,ring-mrc-loss0.1"


def sized(run: Run, size: str | None) -> Run:
    """``run`` with its full-size ``workload.size`` replaced by ``size`` (None: as is).

    A lossy ring's cap is :func:`~openmrc.paper.experiments.ring_lossy_cap_us` of the
    new size (the cap ``openmrc paper`` gives that size), so that a run that finishes at
    the experiment's own size is not cut short at a larger one.  Another capped run is
    refused: this script scales only the rings' cap.
    """
    if size is None:
        return run
    full: list[str] = []
    for s in run.full:
        if s.startswith("workload.size="):
            full.append(f'workload.size="{size}"')
        elif s.startswith("run.until_us="):
            if int(s.split("=", 1)[1]) != RING_LOSSY_CAP_US:
                raise SystemExit(f"--size: {run.file} has a cap other than a lossy ring's")
            full.append(f"run.until_us={ring_lossy_cap_us(_mib(size) << 20)}")
        else:
            full.append(s)
    return dataclasses.replace(run, full=tuple(full))


def _mib(size: str) -> int:
    """``"256MiB"`` -> 256, ``"1GiB"`` -> 1024 (the sizes this script is given)."""
    if size.endswith("GiB"):
        return int(size[:-3]) * 1024
    if size.endswith("MiB"):
        return int(size[:-3])
    raise SystemExit(f"--size: {size!r} is not a whole number of MiB or GiB")


def summary(
    file: str, seed: int, run: Run, doc: dict[str, Any], cpu: float, rss_mib: float
) -> dict[str, Any]:
    """One run's line in the JSON: what the collective did (when it has one) and what
    recovery cost."""
    c = doc["collectives"][0] if doc.get("collectives") else {}
    s = doc["summary"]
    return {
        "run": file,
        "seed": seed,
        "overrides": list(run.overrides(False)),
        "sim_end_us": doc["sim_end_us"],
        "complete": bool(c.get("complete")),
        "busbw_gbps": c.get("busbw_gbps") if c.get("complete") else None,
        "time_us": c.get("time_us"),
        "wall_seconds": doc["wall_seconds"],
        "cpu_seconds": round(cpu, 1),
        "peak_rss_mib": round(rss_mib),
        "timeouts": s["timeouts"],
        "retransmits": s["retransmits"],
        "nacks": s["nacks"],
        "evs_assumed_bad": s["evs_assumed_bad"],
        "evs_recovered": s["evs_recovered"],
        "trims": s["trims"],
    }


def child(spec: str) -> int:
    """Run one point (``--child``) and write its results document."""
    a = json.loads(spec)
    run = Run(a["file"], always=tuple(a["overrides"]))
    point, _ = make_point(run, False, int(a["seed"]))
    out = run_point(point)
    if out["status"] != "ok":
        print(f"{a['file']} seed {a['seed']}: {out.get('error', out['status'])}", file=sys.stderr)
        return 1
    Path(a["dest"]).write_text(json.dumps(out["record"]))
    return 0


def run_one(run: Run, seed: int, cache: Path) -> tuple[dict[str, Any], float, float]:
    """``run`` at ``seed``: its results document, CPU seconds and peak RSS (MiB)."""
    key = "_".join(
        [
            run.file,
            f"s{seed}",
            *(o.replace('"', "").replace("=", "-") for o in run.overrides(False)),
        ]
    )
    dest = cache / f"{key}.json"
    meta = cache / f"{key}.cost.json"
    if dest.exists() and meta.exists():
        m = json.loads(meta.read_text())
        return json.loads(dest.read_text()), m["cpu"], m["rss_mib"]
    spec = json.dumps(
        {"file": run.file, "overrides": run.overrides(False), "seed": seed, "dest": str(dest)}
    )
    t0 = time.time()
    proc = subprocess.Popen(["nice", "-n", "15", sys.executable, __file__, "--child", spec])
    _, status, ru = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{run.file} seed {seed}: the run failed")
    cpu, rss = ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024
    meta.write_text(json.dumps({"cpu": cpu, "rss_mib": rss, "wall": time.time() - t0}))
    print(f"{run.file} seed {seed}: {cpu:.0f} CPU s, {rss:.0f} MiB", flush=True)
    return json.loads(dest.read_text()), cpu, rss


def main(argv: list[str] | None = None) -> int:
    """Run the rows and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=DEFAULT_ONLY, help="experiments (comma-separated)")
    p.add_argument("--seeds", default="4,5", help="seeds (comma-separated)")
    p.add_argument("--size", default=None, help="ring size instead of the experiments' own")
    p.add_argument("--out", type=Path, required=False, help="the JSON to write")
    p.add_argument("--cache", type=Path, default=None, help="finished runs (default: OUT.d)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child is not None:
        return child(a.child)
    if a.out is None:
        p.error("--out is required")
    seeds = [int(s) for s in a.seeds.split(",")]
    experiments: list[PaperExperiment] = select(a.only)
    cache = a.cache or a.out.with_suffix(".d")
    cache.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, tuple[str, ...], int], dict[str, Any]] = {}
    out_exps: list[dict[str, Any]] = []
    for e in experiments:
        seeds_out: list[dict[str, Any]] = []
        for seed in seeds:
            docs = {}
            for role, r in e.runs.items():
                r2 = sized(r, a.size)
                doc, cpu, rss = run_one(r2, seed, cache)
                docs[role] = doc
                runs[(r2.file, tuple(r2.overrides(False)), seed)] = summary(
                    r2.file, seed, r2, doc, cpu, rss
                )
            v = e.check(docs)
            seeds_out.append(
                {"seed": seed, "holds": v.holds, "measured": v.measured, "numbers": v.numbers}
            )
        out_exps.append(
            {
                "name": e.name,
                "shape": e.shape,
                "held": sum(bool(s["holds"]) for s in seeds_out),
                "seeds": seeds_out,
            }
        )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    doc_out = {
        "command": "python benchmarks/paper_loss_rows.py " + " ".join(sys.argv[1:]),
        "commit": commit,
        "size": a.size or "the experiments' own (64MiB)",
        "experiments": out_exps,
        "runs": sorted(runs.values(), key=lambda r: (r["run"], r["seed"])),
    }
    a.out.write_text(json.dumps(doc_out, indent=1) + "\n")
    for x in out_exps:
        print(x["name"], f"{x['held']} of {len(seeds)}", [s["measured"] for s in x["seeds"]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
