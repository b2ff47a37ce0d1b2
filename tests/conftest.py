"""Suite-wide checks: every ``results.json`` a test writes follows the shipped schema; a
test marked ``needs_tool(NAME)`` skips, naming the tool, when NAME is not on PATH."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from openmrc.pipeline.results import validate
from tests.tools import skip_reason

#: results.json files checked so far (tests/pipeline/test_results.py checks the check ran).
VALIDATED: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``needs_tool`` and ``worker_group`` markers."""
    config.addinivalue_line(
        "markers", "needs_tool(name): needs executable NAME on PATH (skipped, named, without it)"
    )
    config.addinivalue_line(
        "markers",
        "worker_group(name): on several workers, these tests of the file are a group of their "
        "own (FILE::NAME), which may run beside the file's other groups",
    )


#: The groups (test files, a file's ``worker_group`` parts; "lab": every lab test) that
#: take longest, longest first, from a suite run's per-file times.  On several workers
#: they are handed out first, so that no long file starts last and keeps one worker busy
#: while the others idle; the rest follow, the files with more tests first
#: (pytest-xdist's own order).  A stale entry only costs some balance, never a result.
LONGEST_FIRST = (
    "tests/paper/test_scenarios.py::quick-ring-loss1",
    "tests/paper/test_scenarios.py::quick-rings",
    "tests/paper/test_figures.py",
    "tests/paper/test_scenarios.py::quick-rest",
    "tests/paper/test_scenarios.py::quick-incast",
    "tests/sim/test_partition.py",
    "tests/sweep/test_sweep.py",
    "tests/sweep/test_sweep.py::bundled",
    "tests/sim/test_partition.py::mpirun",
    "tests/paper/test_scenarios.py::files",
    "tests/paper/test_scenarios.py",
    "tests/sim/test_dcqcn_permutation.py::seed1",
    "tests/sim/test_dcqcn_permutation.py::seed2",
    "tests/sim/test_dcqcn_permutation.py::seed3",
    "tests/wire/test_fuzz.py",
    "tests/wire/test_fuzz.py::frames",
    "tests/sim/test_budget.py",
    "lab",
    "tests/sim/test_mrc.py",
    "tests/sim/test_interrupt.py",
    "tests/sim/test_dcqcn_calibration.py",
    "tests/pipeline/test_report.py",
    "tests/sim/test_ecmp_seeds.py",
    "tests/test_compiled.py",
    "tests/net/test_driver.py",
    "tests/net/test_cli_refusals.py",
    "tests/net/test_auth.py",
    "tests/net/test_forged_acks.py",
    "tests/pipeline/test_campaign_check.py",
    "tests/net/test_resources.py",
    "tests/pipeline/test_report_jobs.py",
    "tests/pipeline/test_scenario.py",
    "tests/sim/test_cli.py",
    "tests/paper/test_run.py",
    "tests/sim/test_baselines.py",
    "tests/demo/test_fabric.py",
    "tests/fuzz/test_fuzz.py",
    "tests/net/test_cli_output.py",
    "tests/flow/test_model.py",
    "tests/net/test_wireshark.py",
    "tests/test_layers.py",
    "tests/net/test_hostile.py",
    "tests/sim/test_loss_blame.py",
)


def _group(item: pytest.Item) -> str:
    """The worker group of ``item``: "lab" for a lab test, else its file, or
    ``FILE::NAME`` for a test marked ``worker_group(NAME)`` (a long file's parts that
    share no module fixture, split so that several workers can run them at once)."""
    if item.get_closest_marker("lab"):
        return "lab"
    file = item.nodeid.split("::")[0]
    mark = item.get_closest_marker("worker_group")
    return file if mark is None else f"{file}::{mark.args[0]}"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (its hook has no order)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip each test whose ``needs_tool`` names a tool missing from PATH; and, when the
    suite runs on several workers (pytest-xdist, ``--dist loadgroup``), keep each test
    file on one worker (its module fixtures are built once) and every lab test on the
    same worker (one real fabric at a time), the :data:`LONGEST_FIRST` groups first."""
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if grouped:
            item.add_marker(pytest.mark.xdist_group(_group(item)))
        for mark in item.iter_markers("needs_tool"):
            reason = skip_reason(str(mark.args[0]))
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
                break
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its order is the schedule's
        items[:] = _longest_first(items)


def _longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` by group, :data:`LONGEST_FIRST` first, then the groups with more tests;
    each group's tests in their own order (a file's module fixtures are built once)."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(_group(item), []).append(item)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    order = sorted(
        groups, key=lambda g: (rank.get(g, len(rank)), -len(groups[g]) if g not in rank else 0)
    )
    return [item for g in order for item in groups[g]]


@pytest.fixture(autouse=True)
def _results_json_follow_the_schema(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used ``tmp_path``, validate every results.json under it."""
    root: Path | None = None
    if "tmp_path" in request.fixturenames:
        root = request.getfixturevalue("tmp_path")
    yield
    if root is None:
        return
    for path in sorted(root.rglob("results.json")):
        try:
            validate(json.loads(path.read_text()))
        except ValueError as exc:
            pytest.fail(f"{path}: {exc}")
        VALIDATED.append(path)
