"""Parameter sweeps: ``openmrc sweep`` (docs/sweeps.md).

A sweep is the cross product of swept scenario values (``--param
key.path=v1,v2``), transports and seeds.  Each point is a pure function of
(scenario, overrides, transport, seed) returning the run's results record
(:mod:`openmrc.pipeline.results`); points run on any ``concurrent.futures.Executor``
(a local process pool, or Dask distributed), are written as they finish
under a fingerprint of their inputs (so a rerun skips finished points), and
are aggregated into one CSV and an HTML page of plots.

- :mod:`.spec`: sweep files, ``--param`` value lists, the points and their fingerprints;
- :mod:`.runner`: running points on an executor, resumably;
- :mod:`.aggregate`: metrics, the CSV, mean and confidence interval, plots, the page;
- :mod:`.cli`: the ``openmrc sweep`` command.
"""

from __future__ import annotations

from .aggregate import METRICS, aggregate
from .runner import SweepOutcome, run_point, run_sweep
from .spec import Axis, Point, SweepSpec, build_points, parse_param, split_values, toml_value

__all__ = [
    "METRICS",
    "Axis",
    "Point",
    "SweepOutcome",
    "SweepSpec",
    "aggregate",
    "build_points",
    "parse_param",
    "run_point",
    "run_sweep",
    "split_values",
    "toml_value",
]
