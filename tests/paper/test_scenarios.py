"""The bundled paper scenarios (scenarios/paper/) at reduced size: ``openmrc paper --quick``
through the CLI entry, and each published shape (the checks of openmrc.paper.experiments) holding."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.paper import experiments as paper
from openmrc.pipeline.scenario import load

PAPER = Path(__file__).resolve().parents[2] / "scenarios" / "paper"

#: Published shapes that do not hold in openmrc today; the table says "does not hold"
#: with the measured numbers.  Each stays here until it holds (the test then passes).
KNOWN_EXCEPTIONS: dict[str, str] = {
    name: (
        "run to the end of the collective, RoCE at 1 % loss keeps 0.22-0.31 of MRC's busbw "
        "(1 QP 43-50 Gb/s, 16 QPs 49-58, MRC 184-193, seeds 1-3; about 1,200 NAKs and "
        "37-54 timeouts per run): each loss costs RoCE a NAK and a rewind, a timeout only for a lost "
        "resend or tail (docs/paper.md); the 2 ms cap used to report both as not finished"
    )
    for name in ("ring-loss1", "ring-loss1-roce-16qp")
}
KNOWN_EXCEPTIONS["alltoall"] = (
    "4 MiB at 16 ranks is an open-loop burst: each of the 480 connections (2 p2p channels "
    "per peer) carries one 128 KiB chunk on one QP, so the fabric's queueing of the burst "
    "decides and MRC's 100G planes and larger headers cost it the last few microseconds: "
    "a near tie at seed 1 (MRC 325, RoCE 16 QPs 327, RoCE 1 QP 309 Gb/s; docs/paper.md); "
    "at 64 ranks and 16 MiB MRC leads (docs/results/paper.md)"
)

#: ``OPENMRC_PAPER_SEEDS=10 pytest tests/paper/test_scenarios.py -k seeds`` runs
#: ``openmrc paper --quick --seeds 10`` (about ten times the quick run) and asserts
#: every shape holds at all but one seed in ten, rounded up (issue 18: 9 of 10, 4 of 5).
#: Not run by default: the quick run alone is the suite's longest.  With
#: ``OPENMRC_PAPER_OUT=DIR`` it runs into DIR and so reuses any run already there.
SEEDS = int(os.environ.get("OPENMRC_PAPER_SEEDS", "0") or 0)
#: Shapes known to hold for fewer seeds than that today, each with why; the test then
#: xfails with the counts, until it holds (and then passes).
KNOWN_SEED_EXCEPTIONS: dict[str, str] = {
    **KNOWN_EXCEPTIONS,
    "incast-victim-dcqcn-1qp": (
        "the victim's one QP shares its spine link with k of the 7 incast QPs, k drawn by "
        "ECMP per seed (P(k <= 1) = 44 %); with k = 0 nothing touches it (1.00), with k = 1 "
        "it loses 7-9 % at 400 G, so some seeds fall outside 0.6-0.9 (docs/baselines.md; "
        "8 of 10 held at the quick size on 2026-11-26 and 2026-11-27)"
    ),
    "alltoall": (
        "4 MiB at 16 ranks is an open-loop burst (docs/loss-recovery.md): each of the 480 "
        "connections (2 p2p channels per peer) carries one 128 KiB chunk, on one QP, so "
        "RoCE 16 QPs differs from 1 QP only by ECMP's draw of that QP's port, which lands "
        "it level with MRC (seeds 1-3 on 2026-11-29: 327.7, 348.0, 319.0 Gb/s against "
        "MRC's 329.0, 333.1, 332.6), above it at seed 2"
    ),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(p.stem, marks=pytest.mark.worker_group("files"))
        for p in sorted(PAPER.glob("*.toml"))
    ],
)
def test_every_paper_scenario_says_what_was_published(name: str) -> None:
    path = PAPER / f"{name}.toml"
    text = path.read_text()
    assert "Published" in text and "Expected shape" in text
    # (the one check of the paper files' every key: tests/pipeline/test_scenario.py leaves
    # scenarios/paper/ to this test)
    scenario = load(path)
    assert scenario.flows or scenario.collectives or scenario.jobs


def test_every_experiment_names_bundled_files_and_the_exceptions_are_experiments() -> None:
    for e in paper.EXPERIMENTS:
        for run in e.runs.values():
            assert run.path().exists(), run.file
    assert set(KNOWN_EXCEPTIONS) <= set(paper.names())
    assert len(set(paper.names())) == len(paper.EXPERIMENTS)


#: ``OPENMRC_PAPER_QUICK_EXCEPT=NAME,...`` leaves those experiments out of the quick run
#: (``--only`` the rest; their shape tests skip, saying so).  Unset: every experiment.
#: .ci/run's interpreted pass leaves out the ring all-reduces (the costliest runs; see there).
QUICK_EXCEPT = [n for n in os.environ.get("OPENMRC_PAPER_QUICK_EXCEPT", "").split(",") if n]


def quick_names() -> list[str]:
    """The experiments the quick run covers: every one but :data:`QUICK_EXCEPT`'s, each
    of which must name an experiment (a renamed one must not leave the rest unchecked)."""
    unknown = sorted(set(QUICK_EXCEPT) - set(paper.names()))
    assert not unknown, f"OPENMRC_PAPER_QUICK_EXCEPT: not experiments: {unknown}"
    return [n for n in paper.names() if n not in QUICK_EXCEPT]


#: The quick run in parts, each ``openmrc paper --quick --only`` its experiments in a
#: worker group of its own (tests/conftest.py), so that on several workers the parts
#: run side by side instead of one worker running the whole quick run alone, the
#: suite's longest fixture.  Experiments that share a run (the same scenario and
#: overrides: it runs once) are in one part; "rest" is every experiment not named.
#: The parts weigh about the same (CPU seconds of each run, compiled).
QUICK_PARTS: dict[str, tuple[str, ...]] = {
    "ring-loss1": ("ring-loss1", "ring-loss1-roce-16qp"),
    "rings": ("ring-roce-1qp-vs-mrc", "ring-mrc-vs-roce-16qp", "ring-mrc-loss0.1"),
    "incast": (
        "incast-victim-mrc",
        "incast-victim-pfc",
        "incast-victim-dcqcn-1qp",
        "incast-victim-dcqcn-8qp",
    ),
    "rest": (),
}


def part_of(name: str) -> str:
    """The part of :data:`QUICK_PARTS` experiment ``name`` runs in."""
    return next((part for part, names in QUICK_PARTS.items() if name in names), "rest")


def part_names(part: str) -> list[str]:
    """The experiments of ``part`` that the quick run covers, in the table's order."""
    return [n for n in quick_names() if part_of(n) == part]


def test_the_quick_parts_cover_every_experiment_once_and_split_no_shared_run() -> None:
    named = [n for names in QUICK_PARTS.values() for n in names]
    assert len(named) == len(set(named)) and set(named) <= set(paper.names())
    assert sorted(n for part in QUICK_PARTS for n in part_names(part)) == sorted(quick_names())
    # a run (scenario file and quick overrides) shared by two experiments is in one part
    where: dict[tuple[str, tuple[str, ...]], str] = {}
    for e in paper.EXPERIMENTS:
        for run in e.runs.values():
            key = (run.file, tuple(run.overrides(True)))
            assert where.setdefault(key, part_of(e.name)) == part_of(e.name), (e.name, key)


@pytest.fixture(scope="module")
def quick(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """``openmrc paper --quick --only NAMES --out DIR`` for one part of
    :data:`QUICK_PARTS` (the indirect parameter), once for the module."""
    part = request.param
    names = part_names(part)
    if not names:
        pytest.skip(f"quick part {part}: every experiment left out by OPENMRC_PAPER_QUICK_EXCEPT")
    out = tmp_path_factory.mktemp(f"paper-{part}")
    code = main(["paper", "--quick", "--only", ",".join(names), "--out", str(out)])
    doc = json.loads((out / "paper.json").read_text())
    return {
        "part": part,
        "names": names,
        "code": code,
        "out": out,
        "doc": doc,
        "rows": {row["name"]: row for row in doc["experiments"]},
    }


def _in_part(part: str, *values: object) -> Any:
    """A parameter set run with ``quick`` at ``part``, in the part's worker group."""
    return pytest.param(part, *values, marks=pytest.mark.worker_group(f"quick-{part}"))


@pytest.mark.parametrize("quick", [_in_part(part) for part in QUICK_PARTS], indirect=True)
def test_paper_quick_runs_every_experiment_and_writes_the_table(quick: dict[str, Any]) -> None:
    doc, rows = quick["doc"], quick["rows"]
    assert doc["quick"] is True
    assert list(rows) == quick["names"]
    # exit 0 only when every shape holds
    assert quick["code"] == (0 if all(r["holds"] for r in rows.values()) else 1)
    md = (quick["out"] / "paper.md").read_text()
    assert "| experiment | published | openmrc | shape | command |" in md
    page = (quick["out"] / "report.html").read_text()
    assert '<table id="paper">' in page
    for e in paper.EXPERIMENTS:
        if e.name not in quick["names"]:
            continue
        row = rows[e.name]
        assert e.title in md and e.title in page
        assert row["published"] == e.published and row["measured"]
        assert (f"| **does not hold** ({e.shape}" in md) != row["holds"]
        for run in row["runs"].values():
            assert run["command"].startswith("openmrc run scenarios/paper/")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``openmrc paper --quick --seeds N`` (N: ``OPENMRC_PAPER_SEEDS``), once for the module."""
    if SEEDS < 2:
        pytest.skip("set OPENMRC_PAPER_SEEDS=N (N >= 2) to run the quick size over N seeds")
    # OPENMRC_PAPER_OUT=DIR: run into (and resume from) DIR, e.g. an earlier
    # `openmrc paper --quick --seeds N --out DIR`
    given = os.environ.get("OPENMRC_PAPER_OUT")
    out = Path(given) if given else tmp_path_factory.mktemp("paper-seeds")
    main(["paper", "--quick", "--seeds", str(SEEDS), "--out", str(out)])
    doc = json.loads((out / "paper.json").read_text())
    return {"rows": {row["name"]: row for row in doc["experiments"]}}


@pytest.mark.parametrize("name", paper.names())
def test_published_shape_holds_over_seeds_at_quick_size(name: str, seeded: dict[str, Any]) -> None:
    row = seeded["rows"][name]
    assert row["seed_count"] == SEEDS and [s["seed"] for s in row["seeds"]] == list(
        range(1, SEEDS + 1)
    )
    need = SEEDS - math.ceil(SEEDS / 10)
    misses = [f"seed {s['seed']}: {s['measured']}" for s in row["seeds"] if not s["holds"]]
    if name in KNOWN_SEED_EXCEPTIONS and row["held"] < need:
        pytest.xfail(f"{KNOWN_SEED_EXCEPTIONS[name]}; held {row['held']}/{SEEDS}: {misses}")
    assert row["held"] >= need, f"held {row['held']}/{SEEDS}: {misses}"


@pytest.mark.parametrize(
    ("quick", "name"),
    [_in_part(part_of(n), n) for n in paper.names()],
    indirect=["quick"],
    ids=paper.names(),
)
def test_published_shape_holds_at_quick_size(name: str, quick: dict[str, Any]) -> None:
    if name in QUICK_EXCEPT:
        pytest.skip(f"{name}: left out of the quick run by OPENMRC_PAPER_QUICK_EXCEPT")
    row = quick["rows"][name]
    if name in KNOWN_EXCEPTIONS and not row["holds"]:
        pytest.xfail(f"{KNOWN_EXCEPTIONS[name]}; measured: {row['measured']}")
    assert row["holds"], row["measured"]


def test_only_runs_one_experiment_and_says_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["paper", "--quick", "--only", "latency-p2p", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("latency-p2p: HOLDS")
    assert "1 of 1 published shapes hold" in out
    doc = json.loads((tmp_path / "paper.json").read_text())
    assert [r["name"] for r in doc["experiments"]] == ["latency-p2p"]
    assert doc["experiments"][0]["command"] == "openmrc paper --quick --only latency-p2p"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["paper", "--only", "nosuch"], "--only: 'nosuch' is not an experiment"),
        (["paper", "--only", ","], "--only: give an experiment name"),
        (["paper", "--seeds", "0"], "--seeds: must be >= 1, got 0"),
        (["paper", "--workers", "0"], "--workers: must be >= 1, got 0"),
        (["paper", "--figures"], "--figures: give --out DIR"),
        (["paper", "--figures", "--only", "t0-down"], "--only: not with --figures"),
    ],
)
def test_bad_paper_flags_are_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("openmrc paper: error:")
