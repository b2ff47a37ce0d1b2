"""The experiment module does not import the baselines built on it; the factory picks
the experiment class of each transport explicitly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import openmrc.sim.experiment as experiment
from openmrc.baselines.experiment import BaselineExperiment
from openmrc.sim.experiment import Experiment, TransportConfig
from openmrc.sim.factory import EXPERIMENTS, make_experiment
from openmrc.topology import ClosSpec

SPEC = ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2)


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
    assert not {m for m in found if m.endswith(("baselines.experiment", "sim.factory"))}


def test_the_factory_builds_each_transports_experiment() -> None:
    assert set(EXPERIMENTS) == {"mrc", "roce", "ib"}
    assert type(make_experiment(SPEC)) is Experiment
    assert isinstance(make_experiment(SPEC, transport_name="ib"), BaselineExperiment)
    roce = make_experiment(SPEC, transport=TransportConfig(name="roce"), seed=3)
    assert isinstance(roce, BaselineExperiment) and roce.transport_name == "roce"


def test_an_experiment_class_refuses_a_transport_it_does_not_run() -> None:
    """No silent MRC run of a scenario that asked for RoCE (``__new__`` used to switch)."""
    with pytest.raises(ValueError, match="transport name: Experiment runs mrc, not 'roce'"):
        Experiment(SPEC, transport=TransportConfig(name="roce"))
    with pytest.raises(ValueError, match="transport name: must be one of mrc, roce, ib"):
        make_experiment(SPEC, transport_name="tcp")
