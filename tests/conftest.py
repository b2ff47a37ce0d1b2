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
    """Register the ``needs_tool`` marker."""
    config.addinivalue_line(
        "markers", "needs_tool(name): needs executable NAME on PATH (skipped, named, without it)"
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (its hook has no order)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip each test whose ``needs_tool`` names a tool missing from PATH; and, when the
    suite runs on several workers (pytest-xdist, ``--dist loadgroup``), keep each test
    file on one worker (its module fixtures are built once) and every lab test on the
    same worker (one real fabric at a time)."""
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if grouped:
            group = "lab" if item.get_closest_marker("lab") else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))
        for mark in item.iter_markers("needs_tool"):
            reason = skip_reason(str(mark.args[0]))
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


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
