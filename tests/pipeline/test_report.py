"""report.html: a self-contained page whose images load and whose table is there,
checked in headless Chromium; plots appear when their data does."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.pipeline.report import (
    SHARED_X_RATIO,
    have_plots,
    headline,
    plot_collectives,
    plot_plane_series,
    render_html,
    render_plots,
    write_report,
)
from tests.browser import chromium, probe_page
from tests.figures import layout, page_images, problems
from tests.tools import needs_tool

needs_mpl = pytest.mark.skipif(not have_plots(), reason="matplotlib (openmrc[report]) missing")

LINK = str(Path(__file__).resolve().parents[2] / "scenarios" / "t0-t1-link-failure.toml")
SMALL = ["--set", "workload.size=512KiB", "--set", "run.payloads=false"]
SMALL += ["--set", "faults[0].at_us=4", "--no-progress"]
# eight messages a flow (one per RoCE QP: compare stripes RoCE over the 8 planes) and
# RoCE's timers scaled down as in the demo, so that its stall ends within a millisecond
SMALL += ["--set", "workload.message=64KiB", "--set", "transport.roce.timeout_exp=7"]
SMALL += ["--set", "transport.baseline_fabric.convergence_delay_ps=300000000"]
SMALL += ["--set", "transport.baseline_fabric.hold_time_ps=1000000000"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cmp")
    assert main(["compare", LINK, *SMALL, "--transports", "mrc,roce", "--out", str(out)]) == 0
    return out


@needs_mpl
@needs_tool("chromium")
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
    # every figure on the page, read back from its PNG: no overlapping, empty or
    # one-point axes, no legend on the data, no label outside its axes
    images = page_images(report.read_text())
    assert {f"img-{pid}" for pid in images} >= set(expected)
    for pid, data in images.items():
        assert problems(layout(data)) == [], pid


def _axes(page: str, pid: str) -> list[dict[str, Any]]:
    axes: list[dict[str, Any]] = layout(page_images(page)[pid])["axes"]
    return axes


@needs_mpl
def test_the_report_tells_the_story(compared: Path) -> None:
    """Headline, each transport's own faults, shared scales, x to the run's end, the
    scenario copy."""
    page = (compared / "report.html").read_text()
    docs = {n: json.loads((compared / n / "results.json").read_text()) for n in ("mrc", "roce")}
    story = page[page.index('<div id="headline"') : page.index("</div>")]
    assert "Outcome: mrc was fastest; roce took" in story and "x as long" in story
    assert "mrc: all 16 flows finished in" in story
    assert "first blame: a path (EV) marked ASSUMED_BAD at" in story
    assert "after the first fault (link_down p2t0x1-p2t1x3 at 4.0 us)" in story
    assert "roce: all 16 flows finished" in story and "routes withdrawn" in story
    # the copy of the scenario in the output folder, not the file the run read
    copy = compared / "t0-t1-link-failure.toml"
    assert copy.is_file() and f"scenario file {copy} (a copy of {LINK})" in page
    # each transport's panels carry its own faults only: RoCE's route withdrawal
    # is a fault of its own, MRC never sees it
    goodput = _axes(page, "goodput")
    own = {
        n: len({(f["kind"], f["time_ps"]) for f in d["fabric"]["faults"]}) for n, d in docs.items()
    }
    assert own["roce"] > own["mrc"] >= 1
    for ax in goodput:
        name = ax["label"].split("\n")[0]
        assert len(ax["texts"]) == own[name], (name, ax["texts"])
    # one Gb/s scale for every transport; time to the end of the run
    assert goodput[0]["ylim"] == goodput[1]["ylim"]
    ends = {n: d["sim_end_us"] for n, d in docs.items()}
    # one time axis when the runs are of similar length, else each to its own end
    shared = max(ends.values()) <= SHARED_X_RATIO * min(ends.values())
    for ax in goodput:
        name = ax["label"].split("\n")[0]
        end = max(ends.values()) if shared else ends[name]
        assert ax["xlim"][0] == 0 and ax["xlim"][1] == pytest.approx(end)
    for ax in _axes(page, "ev"):  # only MRC has EVs: its run's end, not RoCE's
        assert ax["xlim"][1] == pytest.approx(ends["mrc"])
    heat = [ax for ax in _axes(page, "plane-series") if not ax["colorbar"]]
    assert [ax["label"].split("\n")[0] for ax in heat] == ["mrc", "roce"]


@needs_mpl
@pytest.mark.filterwarnings("ignore:There are no gridspecs")
def test_the_layout_check_finds_each_defect() -> None:
    """The figure check fails on overlapping, empty and one-point axes, a legend on the
    data and a label outside its axes (so the report test above can fail)."""
    from openmrc.pipeline.report import png, pyplot

    plt = pyplot()

    def check(build: Any) -> list[str]:
        fig = plt.figure(figsize=(6, 4))
        build(fig)
        return problems(layout(png(fig, plt)))

    def good(fig: Any) -> None:
        fig.add_subplot(2, 1, 1).plot([0, 1, 2], [1, 2, 3])
        fig.add_subplot(2, 1, 2).plot([0, 1, 2], [3, 2, 1])

    def overlapping(fig: Any) -> None:
        fig.add_axes((0.1, 0.1, 0.6, 0.6)).plot([0, 1], [0, 1])
        fig.add_axes((0.4, 0.4, 0.5, 0.5)).plot([0, 1], [0, 1])

    def empty(fig: Any) -> None:
        good(fig)
        fig.add_subplot(2, 2, 4)

    def one_point(fig: Any) -> None:
        fig.add_subplot(1, 1, 1).plot([0], [5.0], marker="o")

    def legend_on_data(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.scatter(
            [i / 10 for i in range(11)] * 11,
            [j / 10 for j in range(11) for _ in range(11)],
            label="grid",
        )
        ax.legend(loc="center")

    def label_outside(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([0, 1], [0, 1])
        ax.annotate("a fault label", (1.0, 1.0), xytext=(10, 10), textcoords="offset points")

    assert check(good) == []
    assert any("overlaps" in p for p in check(overlapping))
    assert any("empty" in p for p in check(empty))
    assert any("single point" in p for p in check(one_point))
    assert any("legend covers" in p for p in check(legend_on_data))
    assert any("outside the axes" in p for p in check(label_outside))


@needs_mpl
def test_plots_raise_no_warnings_and_skip_single_points(compared: Path) -> None:
    import warnings

    docs = [json.loads((compared / n / "results.json").read_text()) for n in ("mrc", "roce")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "Tight layout not applied"
        plots = render_plots(docs)
    assert plots
    one = copy.deepcopy(docs[0])
    one["collectives"] = [
        {
            "kind": "allreduce",
            "ranks": 16,
            "time_us": 12.5,
            "busbw_gbps": 321.0,
            "iteration_us": [12.5],
        }
    ]
    import matplotlib.pyplot as plt

    assert plot_collectives([one], plt) is None  # one iteration: a number, not a plot
    lines = headline([one])
    assert "allreduce over 16 ranks took 12.5 us, busbw 321.0 Gb/s" in lines[0]


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
    import openmrc.pipeline.report as report

    def missing() -> None:
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(report, "_pyplot", missing)
    mrc = json.loads((compared / "mrc" / "results.json").read_text())
    page = write_report(tmp_path, [mrc]).read_text()
    assert '<table id="summary">' in page and "data:image/png" not in page
    assert "pip install &#x27;openmrc[report]&#x27;" in page


def test_table_tails_count_unfinished_flows(compared: Path) -> None:
    """FCT/slowdown percentiles over all flows: an unfinished flow at its time so far."""
    from openmrc.pipeline.results import summary_rows

    doc = json.loads((compared / "roce" / "results.json").read_text())
    rows = dict(summary_rows([doc]))
    assert not rows["FCT p99 us"][0].startswith(">=")  # everything finished
    for f in doc["flows"][:2]:  # two of 16 never finish: the p99 falls on one of them
        f["fct_us"] = f["slowdown"] = None
    rows = dict(summary_rows([doc]))
    so_far = doc["sim_end_us"] - min(f["start_ps"] for f in doc["flows"][:2]) / 1e6
    assert rows["FCT p99 us"][0] == f">={so_far:,.1f}"
    assert not rows["FCT median us"][0].startswith(">=")
