"""report.html: a self-contained page whose images load and whose table is there,
checked in headless Chromium; plots appear when their data does."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.report import (
    have_plots,
    plot_collectives,
    plot_plane_series,
    render_html,
    render_plots,
    write_report,
)
from tests.browser import CHROMIUM, chromium, probe_page

needs_mpl = pytest.mark.skipif(not have_plots(), reason="matplotlib (openmrc[report]) missing")

LINK = str(Path(__file__).resolve().parent.parent / "scenarios" / "t0-t1-link-failure.toml")
SMALL = ["--set", "workload.size=512KiB", "--set", "run.payloads=false"]
SMALL += ["--set", "faults[0].at_us=4", "--no-progress"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cmp")
    assert main(["compare", LINK, *SMALL, "--transports", "mrc,roce", "--out", str(out)]) == 0
    return out


@needs_mpl
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(compared: Path, tmp_path: Path) -> None:
    report = compared / "report.html"
    probe = probe_page(report, tmp_path, "summary")
    ids = [img[0] for img in probe["images"]]
    # goodput, CDFs, EV timeline (MRC blamed EVs after the link failure), planes, queues
    expected = ["img-goodput", "img-fct", "img-ev", "img-planes", "img-queues"]
    assert [i for i in ids if i in expected] == expected  # (and any the data adds)
    for img_id, complete, width, height in probe["images"]:
        assert complete and width >= 400 and height >= 200, img_id
    assert probe["rows"] >= 15  # header + the summary measures
    shot = tmp_path / "shot.png"
    chromium(
        "--window-size=1000,2400", "--hide-scrollbars", f"--screenshot={shot}", report.as_uri()
    )
    assert shot.stat().st_size > 20_000
    from matplotlib.image import imread

    pixels = imread(str(shot))
    assert pixels.shape[0] == 2400 and pixels.std() > 0.05, "the screenshot is blank"


@needs_mpl
def test_run_writes_a_report_with_the_table(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", LINK, *SMALL, "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert '<table id="summary">' in page and "<th>mrc</th>" in page
    assert page.count("data:image/png;base64,") >= 4


@needs_mpl
def test_plots_follow_the_data(compared: Path) -> None:
    mrc = json.loads((compared / "mrc" / "results.json").read_text())
    roce = json.loads((compared / "roce" / "results.json").read_text())
    ids = [p[0] for p in render_plots([roce])]
    assert "ev" not in ids and "collectives" not in ids  # RoCE has no EVs
    assert "ev" in [p[0] for p in render_plots([mrc])]
    # a collective's flows (named ...:s<step>c<channel>...) and iteration times
    coll = copy.deepcopy(mrc)
    for i, f in enumerate(coll["flows"]):
        f["name"] = f"ring#0:r{i}->r{i + 1}:s{i % 4}c0k0"
    coll["collectives"] = [{"kind": "allreduce", "iteration_us": [10.0, 11.0]}]
    import matplotlib.pyplot as plt

    plot = plot_collectives([coll], plt)
    assert plot is not None and plot[0] == "collectives" and plot[2].startswith(b"\x89PNG")
    assert plot_collectives([mrc], plt) is None
    page = render_html([coll], [plot])
    assert "img-collectives" in page
    # per-plane series over time, when the simulator records them
    bare = copy.deepcopy(mrc)
    bare.pop("plane_tx_gbps_series", None)
    assert plot_plane_series([bare], plt) is None
    coll["plane_tx_gbps_series"] = {f"plane{p}": [90.0, 95.0, 0.0] for p in range(8)}
    assert "plane-series" in [p[0] for p in render_plots([coll])]


def test_interrupted_results_are_flagged_in_the_report(compared: Path) -> None:
    mrc = json.loads((compared / "mrc" / "results.json").read_text())
    mrc["partial"] = True
    assert "partial results" in render_html([mrc], [])


def test_without_matplotlib_the_report_has_the_table_and_says_why(
    compared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openmrc.report as report

    def missing() -> None:
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(report, "_pyplot", missing)
    mrc = json.loads((compared / "mrc" / "results.json").read_text())
    page = write_report(tmp_path, [mrc]).read_text()
    assert '<table id="summary">' in page and "data:image/png" not in page
    assert "pip install &#x27;openmrc[report]&#x27;" in page
