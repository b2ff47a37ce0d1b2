"""``openmrc paper --figures`` (openmrc.paper_figures): Figures 16 and 17 as curves, at a
size cut further than ``--quick`` (two message sizes, two loss rates): the plots and
their data are written, sane, and a rerun runs nothing again."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from openmrc import paper_figures
from openmrc.cli import main
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
    assert figures["code"] == 0
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
    assert figures["again"] == 0
    points = list((Path(figures["out"]) / "points").glob("*.json"))
    assert len(points) == 24


def test_loss_overrides_are_the_bundled_loss_files_fault() -> None:
    assert paper_figures.loss_overrides(0.0, False) == ()
    fault, cap = paper_figures.loss_overrides(0.001, False)
    assert "probability = 0.001" in fault and 'links = "host"' in fault
    assert cap == "run.until_us=20000"


def test_full_size_bandwidth_bound_cells_stop_at_the_cap_and_count_bytes_moved() -> None:
    """Full size: from MOVED_FROM on every cell (each transport and loss) stops at the
    same cap and is measured by the bytes moved; smaller ones and the quick size run
    to completion (lossy ones to their loss cap)."""
    big = paper_figures.Cell(16, "RoCE 1 QP", 0.01, "256MiB")
    assert big.moved(False) and not big.moved(True)
    over = big.run(False).overrides(False)
    assert f"run.until_us={paper_figures.MOVED_CAP_US}" in over
    assert not any(o == f"run.until_us={paper_figures.LOSS_CAP_US[False]}" for o in over)
    assert any(o.startswith("faults=") for o in over)
    clean = paper_figures.Cell(17, "MRC 1 QP", 0.0, "64MiB").run(False).overrides(False)
    assert clean == ['workload.size="64MiB"', f"run.until_us={paper_figures.MOVED_CAP_US}"]
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
