"""Suite-wide checks: every ``results.json`` a test writes follows the shipped schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from openmrc.results import validate

#: results.json files checked so far (tests/test_results.py checks the check ran).
VALIDATED: list[Path] = []


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
