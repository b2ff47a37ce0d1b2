"""``openmrc paper --figures`` (openmrc.paper.figures): Figures 16 and 17 as curves, at a
size cut further than ``--quick`` (two message sizes, two loss rates): the plots and
their data are written, sane, and a rerun runs nothing again."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.paper import figures as paper_figures
from openmrc.sweep import runner


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("figures")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paper_figures, "QUICK_SIZES", ("16KiB", "64KiB"))
        mp.setattr(paper_figures, "LOSSES", (0.0, 0.01))
        code = main(["paper", "--quick", "--figures", "--workers", "1", "--out", str(out)])

        def no_runs(point: Any) -> dict[str, Any]:
            raise AssertionError(f"ran {point.label()} again")

        mp.setattr(runner, "run_point", no_runs)
        again = main(["paper", "--quick", "--figures", "--workers", "1", "--out", str(out)])
    return {"code": code, "again": again, "out": out}


def test_figures_write_both_plots_and_their_points(figures: dict[str, Any]) -> None:
    out = figures["out"]
    doc = json.loads((out / "figures.json").read_text())
    # 1 as the table's: some published shapes do not hold at this cut-down size
    failing = [sh for sh in doc["shapes"] if sh["holds"] is False]
    assert figures["code"] == (1 if failing else 0)
    assert len(doc["shapes"]) == 10
    # no 0.1 % loss panel here: its shapes are not run, the others are checked
    assert {sh["name"] for sh in doc["shapes"] if sh["holds"] is None} == {
        "ring-mrc-loss0.1",
        "a2a-roce-loss0.1-large",
        "a2a-loss-small-sizes",
    }
    for n in (16, 17):
        png = (out / f"figure{n}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    page = (out / "figures.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "Figure 17: all-to-all" in page
    doc = json.loads((out / "figures.json").read_text())
    assert [f["figure"] for f in doc["figures"]] == [16, 17]
    assert doc["missing"] == []
    for fig in doc["figures"]:
        assert fig["sizes"] == ["16KiB", "64KiB"]
        labels = {(c["label"], c["loss"]) for c in fig["curves"]}
        assert labels == {
            (label, loss)
            for label in ("MRC 1 QP", "RoCE 1 QP", "RoCE 16 QPs")
            for loss in (0.0, 0.01)
        }
        for c in fig["curves"]:
            assert len(c["busbw_gbps"]) == 2 and all(y is not None for y in c["busbw_gbps"])
            assert all(y >= 0 for y in c["busbw_gbps"])
            if c["label"] == "MRC 1 QP" or c["loss"] == 0:
                # MRC finishes at every size and loss; everyone finishes without loss
                assert all(c["completed"]) and all(y > 0 for y in c["busbw_gbps"]), c
            if c["loss"] == 0:
                # a larger message is less latency-bound
                assert c["busbw_gbps"][1] > c["busbw_gbps"][0], c
    with (out / "figures.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 3 * 2 * 2
    assert all(float(r["busbw_gbps"]) >= 0 and r["seed"] == "1" for r in rows)
    assert {r["transport"] for r in rows} == {"MRC 1 QP", "RoCE 1 QP", "RoCE 16 QPs"}


def test_a_second_figures_run_resumes(figures: dict[str, Any]) -> None:
    # the fixture's second run has no way to run anything: it found all 24 written
    assert figures["again"] == figures["code"]
    points = list((Path(figures["out"]) / "points").glob("*.json"))
    assert len(points) == 24


def test_loss_overrides_are_the_bundled_loss_files_fault() -> None:
    assert paper_figures.loss_overrides(0.0, False) == ()
    fault, cap = paper_figures.loss_overrides(0.001, False)
    assert "probability = 0.001" in fault and 'links = "host"' in fault
    assert cap == "run.until_us=20000"


def test_full_size_bandwidth_bound_cells_stop_at_the_cap_and_count_bytes_moved() -> None:
    """Full size: from MOVED_FROM on every ring cell (each transport and loss) stops at
    the same cap and is measured by the bytes moved; smaller ones, the all-to-all and
    the quick size run to completion (lossy ones to their loss cap)."""
    big = paper_figures.Cell(16, "RoCE 1 QP", 0.01, "256MiB")
    assert big.moved(False) and not big.moved(True)
    over = big.run(False).overrides(False)
    assert f"run.until_us={paper_figures.MOVED_CAP_US}" in over
    assert not any(o == f"run.until_us={paper_figures.LOSS_CAP_US[False]}" for o in over)
    assert any(o.startswith("faults=") for o in over)
    clean = paper_figures.Cell(16, "MRC 1 QP", 0.0, "64MiB").run(False).overrides(False)
    assert clean == ['workload.size="64MiB"', f"run.until_us={paper_figures.MOVED_CAP_US}"]
    # the all-to-all runs to completion at every size (its busbw is its slowest transfer's)
    a2a = paper_figures.Cell(17, "RoCE 1 QP", 0.0, "256MiB")
    assert not a2a.moved(False)
    assert a2a.run(False).overrides(False) == ['workload.size="256MiB"']
    small = paper_figures.Cell(16, "MRC 1 QP", 0.0, "16MiB")
    assert not small.moved(False)
    assert small.run(False).overrides(False) == ['workload.size="16MiB"']
    assert paper_figures.SIZES[-1] == "256MiB"
    capped = {
        "collectives": [{"kind": "allreduce", "ranks": 2, "complete": False, "busbw_gbps": 0.0}],
        "flows": [{"bytes_received": 500_000}, {"bytes_received": 500_000}],
        "sim_end_us": 100.0,
        "timeouts": 0,
    }
    point = paper_figures.run_summary(capped, True)
    assert point["completed"] and point["moved"] and point["busbw_gbps"] == 40.0
    assert paper_figures.run_summary(capped, False)["busbw_gbps"] == 0.0


SIZES3 = ["4MiB", "64MiB", "256MiB"]

#: Curves (busbw per size, Gb/s) of which every published shape holds, by (figure, label, loss).
HOLDING: dict[tuple[int, str, float], list[float]] = {
    (16, "MRC 1 QP", 0.0): [100, 340, 345],
    (16, "RoCE 1 QP", 0.0): [95, 170, 172],
    (16, "RoCE 16 QPs", 0.0): [98, 260, 265],
    (16, "MRC 1 QP", 0.001): [80, 330, 340],
    (16, "RoCE 1 QP", 0.001): [20, 60, 70],
    (16, "RoCE 16 QPs", 0.001): [25, 80, 90],
    (16, "MRC 1 QP", 0.01): [40, 110, 115],
    (16, "RoCE 1 QP", 0.01): [2, 10, 12],
    (16, "RoCE 16 QPs", 0.01): [3, 15, 20],
    (17, "MRC 1 QP", 0.0): [200, 350, 355],
    (17, "RoCE 1 QP", 0.0): [150, 240, 245],
    (17, "RoCE 16 QPs", 0.0): [140, 225, 230],
    (17, "MRC 1 QP", 0.001): [180, 345, 350],
    (17, "RoCE 1 QP", 0.001): [60, 230, 240],
    (17, "RoCE 16 QPs", 0.001): [50, 215, 220],
    (17, "MRC 1 QP", 0.01): [120, 200, 210],
    (17, "RoCE 1 QP", 0.01): [10, 50, 60],
    (17, "RoCE 16 QPs", 0.01): [8, 45, 50],
}


def _doc(curves: dict[tuple[int, str, float], list[float]]) -> dict[str, Any]:
    figs = []
    for n in (16, 17):
        figs.append(
            {
                "figure": n,
                "sizes": SIZES3,
                "curves": [
                    {"label": label, "loss": loss, "busbw_gbps": ys, "completed": [True] * 3}
                    for (f, label, loss), ys in curves.items()
                    if f == n
                ],
            }
        )
    return {"figures": figs}


def _verdicts(curves: dict[tuple[int, str, float], list[float]]) -> dict[str, bool | None]:
    return {sh.name: sh.holds for sh in paper_figures.figure_shapes(_doc(curves))}


#: For each shape, one change to HOLDING that breaks it (and only it).
BREAKS: dict[str, tuple[tuple[int, str, float], int, float]] = {
    "ring-small-sizes-alike": ((16, "RoCE 1 QP", 0.0), 0, 60),
    "ring-roce-1qp-half": ((16, "RoCE 1 QP", 0.0), 2, 230),
    "ring-qp-scaling-helps": ((16, "RoCE 16 QPs", 0.0), 1, 350),
    "ring-mrc-loss0.1": ((16, "MRC 1 QP", 0.001), 2, 250),
    "ring-roce-unusable-1pct": ((16, "RoCE 16 QPs", 0.01), 1, 30),
    "ring-mrc-third-1pct": ((16, "MRC 1 QP", 0.01), 2, 300),
    "a2a-mrc-ahead": ((17, "RoCE 1 QP", 0.0), 0, 210),
    "a2a-16qp-slightly-worse": ((17, "RoCE 16 QPs", 0.0), 2, 250),
    "a2a-roce-loss0.1-large": ((17, "RoCE 1 QP", 0.001), 1, 150),
    "a2a-loss-small-sizes": ((17, "RoCE 16 QPs", 0.01), 0, 130),
}


def test_figure_shapes_hold_on_holding_curves_and_each_fails_alone() -> None:
    """Each published shape of Figures 16 and 17 holds on curves made to hold them all,
    and fails, alone, when its own statement is broken."""
    assert set(_verdicts(HOLDING).values()) == {True}
    assert set(BREAKS) == set(_verdicts(HOLDING))
    for name, (key, i, value) in BREAKS.items():
        curves = {k: list(v) for k, v in HOLDING.items()}
        curves[key][i] = value
        got = _verdicts(curves)
        assert got[name] is False, name
        assert [n for n, ok in got.items() if not ok] == [name], name


def test_a_run_that_did_not_complete_counts_zero_and_a_missing_curve_is_not_run() -> None:
    doc = _doc(HOLDING)
    ring = doc["figures"][0]
    mrc_lossy = next(c for c in ring["curves"] if c["label"] == "MRC 1 QP" and c["loss"] == 0.01)
    mrc_lossy["completed"] = [True, True, False]  # MRC at 1 % did not finish at 256 MiB
    got = {sh.name: sh.holds for sh in paper_figures.figure_shapes(doc)}
    assert got["ring-roce-unusable-1pct"] is False and got["ring-mrc-third-1pct"] is False
    ring["curves"] = [c for c in ring["curves"] if c["loss"] != 0.001]
    got = {sh.name: sh.holds for sh in paper_figures.figure_shapes(doc)}
    assert got["ring-mrc-loss0.1"] is None and got["ring-roce-1qp-half"] is True
