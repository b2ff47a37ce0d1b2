"""The experiment module does not import the baselines built on it (no import cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import openmrc.sim.experiment as experiment
from openmrc.sim.baseline import BaselineExperiment
from openmrc.topology import ClosSpec


def _imports(module: object) -> set[str]:
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    out = set()
    for node in ast.walk(tree):  # imports inside functions count too
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_experiment_does_not_import_the_baseline_experiment() -> None:
    found = _imports(experiment)
    assert "baseline" not in found and "openmrc.sim.baseline" not in found
    # ... and still builds one by name, through the registry
    exp = experiment.Experiment(
        ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2), transport_name="ib"
    )
    assert isinstance(exp, BaselineExperiment)
