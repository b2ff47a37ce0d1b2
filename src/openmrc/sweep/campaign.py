"""A training campaign over many seeds (``openmrc campaign --seeds N``): Monte Carlo.

Every seed is one campaign (:mod:`openmrc.pipeline.campaign`: the same job and
fabric, its own failure draws), run as a point of the sweep machinery
(:func:`openmrc.sweep.runner.run_sweep`: a local process pool or Dask), each
written to ``OUT/points/<fingerprint>.json`` as it finishes, so a rerun skips
the seeds already done.  :func:`aggregate` gives, per transport, the mean of
each headline number over the seeds and its 95 % Student-t confidence
interval.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from ..pipeline import campaign as cp
from .aggregate import mean_ci
from .runner import read_point
from .spec import Point, fingerprint


def points(
    scenario_file: str,
    overrides: list[str],
    seeds: list[int],
    *,
    hours: float | None = None,
    transports: list[str] | None = None,
) -> list[Point]:
    """One point per seed (the scenario checked here first: a bad one is one line)."""
    from ..pipeline.run import read_scenario_data

    data = read_scenario_data(scenario_file)
    path = Path(scenario_file)
    cp.load_data(
        data,
        overrides,
        name=path.stem,
        base_dir=path.parent,
        scenario_file=scenario_file,
        hours=hours,
        seed=seeds[0],
        transports=transports,
    )
    params = {"hours": hours, "transports": transports}
    out = []
    for i, seed in enumerate(seeds):
        fp = fingerprint({"campaign": data, **params}, overrides, "campaign", seed)
        out.append(
            Point(
                i,
                dict(params),
                "campaign",
                seed,
                tuple(overrides),
                fp,
                path.stem,
                scenario_file,
                data,
                str(path.parent),
            )
        )
    return out


def run_campaign_point(point: Point) -> dict[str, Any]:
    """One seed's campaign: ``{"status": "ok", "record": campaign document}`` or the error."""
    try:
        setup = cp.load_data(
            point.data,
            list(point.overrides),
            name=point.name,
            base_dir=None if point.base_dir is None else Path(point.base_dir),
            scenario_file=point.scenario_file,
            hours=point.params.get("hours"),
            seed=point.seed,
            transports=point.params.get("transports"),
        )
        return {"status": "ok", "record": cp.run(setup)}
    except Exception as exc:
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}",
            "traceback": traceback.format_exc(),
        }


#: the headline numbers averaged over seeds: name -> how to read it from a transport's part.
MEASURES: dict[str, Any] = {
    "goodput": lambda t: t["goodput"],
    "useful_gpu_hours": lambda t: t["useful_gpu_hours"],
    "step_p50_ms": lambda t: t["step_ms"]["p50"],
    "step_p99_ms": lambda t: t["step_ms"]["p99"],
    "step_max_ms": lambda t: t["step_ms"]["max"],
    "restarts": lambda t: len(t["restarts"]),
}


def aggregate(out: Path, pts: list[Point]) -> dict[str, Any]:
    """Mean and 95 % confidence half-width of every headline number, per transport, over
    the seeds finished in ``out`` (and the seeds, and how many failures each drew)."""
    docs = []
    for p in pts:
        stored = read_point(out, p)
        if stored is not None and stored.get("status") == "ok":
            docs.append(stored["record"])
    result: dict[str, Any] = {
        "campaign": docs[0]["campaign"] if docs else None,
        "hours": docs[0]["hours"] if docs else None,
        "seeds": [d["seed"] for d in docs],
        "failures_per_seed": [len(d["failures"]) for d in docs],
        "transports": {},
    }
    if not docs:
        return result
    for name in docs[0]["transports"]:
        parts = [d["transports"][name] for d in docs]
        row: dict[str, Any] = {}
        for measure, read in MEASURES.items():
            values = [float(read(t)) for t in parts if read(t) is not None]
            if values:
                mean, half = mean_ci(values)
                row[measure] = {"mean": mean, "ci95": half, "n": len(values)}
        kinds = sorted({k for t in parts for k in t["lost_s_by_kind"]})
        row["lost_s_by_kind"] = {}
        for kind in kinds:
            mean, half = mean_ci([t["lost_s_by_kind"].get(kind, 0.0) for t in parts])
            row["lost_s_by_kind"][kind] = {"mean": mean, "ci95": half, "n": len(parts)}
        result["transports"][name] = row
    return result


def summary_lines(agg: dict[str, Any]) -> list[str]:
    """The printed Monte Carlo summary: per transport, mean +- 95 % CI of each number."""

    def cell(v: dict[str, Any], fmt: str) -> str:
        half = "" if v["ci95"] is None else f" +- {format(v['ci95'], fmt)}"
        return f"{format(v['mean'], fmt)}{half}"

    n = len(agg["seeds"])
    out = [
        f"campaign {agg['campaign']}: {agg['hours']:g} h, {n} seed{'s' if n != 1 else ''} "
        f"(mean +- 95 % CI), {sum(agg['failures_per_seed'])} failures in all"
    ]
    for name, row in agg["transports"].items():
        out.append(
            f"  {name}: goodput {cell(row['goodput'], '.6f')}, step p99 "
            f"{cell(row['step_p99_ms'], '.3f')} ms, max {cell(row['step_max_ms'], '.3f')} ms, "
            f"restarts {cell(row['restarts'], '.2f')}"
        )
        if row["lost_s_by_kind"]:
            lost = ", ".join(f"{k} {cell(v, ',.1f')} s" for k, v in row["lost_s_by_kind"].items())
            out.append(f"    time lost per seed: {lost}")
    return out


__all__ = ["MEASURES", "aggregate", "points", "run_campaign_point", "summary_lines"]
