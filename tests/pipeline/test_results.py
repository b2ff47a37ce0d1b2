"""results.json: the shipped schema accepts what runs write and rejects what lacks provenance."""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.pipeline.results import SCHEMA_VERSION, _jsonable, schema, validate

LINK = str(Path(__file__).resolve().parents[2] / "scenarios" / "t0-t1-link-failure.toml")


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("results")
    argv = ["run", LINK, "--set", "workload.size=256KiB", "--set", "run.payloads=false"]
    argv += ["--set", "run.queue_sample_us=2", "--set", "faults[0].at_us=3"]
    argv += ["--out", str(out), "--no-progress"]
    assert main(argv) == 0
    return json.loads((out / "results.json").read_text())


def test_schema_ships_with_the_package_and_accepts_a_run(doc: dict) -> None:
    assert schema()["title"] == "openmrc results.json"
    assert doc["schema_version"] == SCHEMA_VERSION
    validate(doc)
    assert doc["fabric"]["queue_samples"] and len(doc["fabric"]["faults"]) == 1


def test_added_metrics_are_allowed_where_metrics_live(doc: dict) -> None:
    more = copy.deepcopy(doc)
    more["collective"] = {"steps": [1.0, 2.0]}
    more["summary"]["fct_p999_us"] = 3.0
    more["flows"][0]["fct_p50_us"] = 1.0
    more["fabric"]["per_plane"] = [1, 2]
    validate(more)


@pytest.mark.parametrize(
    ("damage", "where"),
    [
        (lambda d: d.pop("provenance"), "(top level)"),
        (lambda d: d["provenance"].pop("seed"), "provenance"),
        (lambda d: d["provenance"].update(transport="tcp"), "provenance/transport"),
        (lambda d: d.update(schema_version="3.0"), "schema_version"),
        (lambda d: d["flows"][0].pop("slowdown"), "flows/0"),
        (lambda d: d["flows"][0].update(size=-1), "flows/0/size"),
        (lambda d: d["summary"].update(fct_us={"min": 1}), "summary/fct_us"),
        (lambda d: d["fabric"]["faults"].append({"kind": "x"}), "fabric/faults/1"),
    ],
)
def test_schema_rejects_broken_documents(doc: dict, damage, where: str) -> None:
    bad = copy.deepcopy(doc)
    damage(bad)
    with pytest.raises(ValueError, match=re.escape(f"results.json {where}:")):
        validate(bad)


@pytest.mark.parametrize(
    "values",
    [
        [0.0, 1.5, 2, -0.0, 400.125],  # a goodput series (ints among the floats)
        [1.0, float("nan"), 2.0],
        [float("inf"), 1.0],
        (float("-inf"),),
        [1e308, 1e308],  # finite values whose sum overflows
        [10**400, 1.0],  # an int too large for a float
        [True, 1.0],
        [1.0, None, "x"],
        [Fraction(1, 2), 1.0],  # a number that is neither: written as its str
        [[1.0, float("nan")], [2.0]],
        [],
    ],
)
def test_a_list_of_numbers_is_written_as_value_by_value(values: Any) -> None:
    """The document writer's shortcut for a list of finite numbers (a goodput
    series, taken whole) gives what converting each value gives."""
    got = _jsonable(values)
    want = [_jsonable(v) for v in values]
    assert json.dumps(got) == json.dumps(want)
    assert [type(v) for v in got] == [type(v) for v in want]
