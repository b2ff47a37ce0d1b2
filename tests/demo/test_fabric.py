"""``openmrc demo``: the bundled 8-plane scenario, MRC against RoCE, the table and
report.html (rendered in headless Chromium), at the reduced ``--quick`` size."""

from __future__ import annotations

import contextlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.demo.fabric import scenario_path
from openmrc.pipeline.report import have_plots
from openmrc.pipeline.scenario import load
from tests.browser import chromium, probe_page
from tests.tools import needs_tool

#: The quick demo, moving and checking real bytes.
DEMO = ["demo", "--quick", "--no-progress", "--set", "run.payloads=true"]

needs_mpl = pytest.mark.skipif(not have_plots(), reason="matplotlib (openmrc[report]) missing")


@dataclass
class DemoRun:
    """One ``openmrc demo --quick`` run: its exit code, stdout and output folder."""

    code: int
    out: str
    folder: Path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    folder = tmp_path_factory.mktemp("demo") / "out"
    capture = tmp_path_factory.mktemp("stdout") / "stdout.txt"
    with capture.open("w") as fh, contextlib.redirect_stdout(fh):
        code = main([*DEMO, "--out", str(folder)])
    return DemoRun(code, capture.read_text(), folder)


def test_the_demo_scenario_is_package_data_and_valid() -> None:
    with scenario_path() as path:
        scenario = load(path)
        data = tomllib.loads(path.read_text())
    assert scenario.spec.planes == 8 and scenario.spec.t1s == 4
    assert data["workload"]["kind"] == "allreduce"
    assert [f.kind for f in scenario.faults] == ["link_down", "switch_blackhole"]
    assert scenario.faults[0].target.startswith("p") and "t0" in scenario.faults[0].target


def test_demo_prints_the_table_and_writes_results_and_the_scenario(demo: DemoRun) -> None:
    assert demo.code == 0, demo.out
    lines = demo.out.splitlines()
    assert lines[0].startswith("openmrc demo: ring all-reduce")
    assert any("link p2t0x0-p2t1x1 goes down" in line for line in lines)
    assert any("switch p5t1x2 stays up but silently drops" in line for line in lines)
    runs = [line for line in lines if line.startswith("scenario demo [transport")]
    # each run's header counts the collective's transfers (8 ranks x 14 ring steps)
    assert [r.split("]")[0] for r in runs] == [
        "scenario demo [transport mrc",
        "scenario demo [transport roce",
    ]
    assert all("8 hosts, 8 planes, 2 T0 x 4 T1 per plane, 112 flows" in r for r in runs), runs
    header = next(line for line in lines if line.split() == ["mrc", "roce"])
    assert header  # the compare table, one column per transport
    assert any(line.split()[:2] == ["flows", "completed"] for line in lines)
    assert lines[-1] == f"report: {demo.folder / 'report.html'}"
    for name in ("mrc", "roce"):
        assert (demo.folder / name / "results.json").exists()
    assert (demo.folder / "summary.csv").exists()
    copy = demo.folder / "demo.toml"
    with scenario_path() as path:
        assert copy.read_text() == path.read_text()


def test_mrc_is_ahead_of_roce_under_the_failures(demo: DemoRun) -> None:
    mrc = json.loads((demo.folder / "mrc" / "results.json").read_text())
    roce = json.loads((demo.folder / "roce" / "results.json").read_text())
    assert mrc["all_ok"] and roce["all_ok"] and mrc["verified"]
    t_mrc = mrc["collectives"][0]["time_us"]
    t_roce = roce["collectives"][0]["time_us"]
    assert t_mrc < t_roce  # MRC finishes the all-reduce first ...
    # ... because the faults cost RoCE ACK timeouts and a wait for routing, and MRC neither
    assert roce["summary"]["timeouts"] > 0 and mrc["summary"]["timeouts"] == 0
    assert any(f["kind"] == "route_withdrawn" for f in roce["fabric"]["faults"])
    assert mrc["summary"]["evs_assumed_bad"] > 0
    m = re.search(
        r"outcome: MRC finished the all-reduce in ([\d,]+) us, RoCE in ([\d,]+) us", demo.out
    )
    assert m, demo.out
    assert float(m.group(1).replace(",", "")) < float(m.group(2).replace(",", ""))


@needs_mpl
def test_demo_report_has_the_table_and_plots(demo: DemoRun) -> None:
    page = (demo.folder / "report.html").read_text()
    assert '<table id="summary">' in page and "<th>mrc</th><th>roce</th>" in page
    for plot in ("goodput", "fct", "ev", "collectives"):
        assert f"id='img-{plot}'" in page, plot
    assert page.count("data:image/png;base64,") >= 5


@needs_mpl
@needs_tool("chromium")
def test_demo_report_renders_in_headless_chromium(demo: DemoRun, tmp_path: Path) -> None:
    probe = probe_page(demo.folder / "report.html", tmp_path, "summary")
    assert len(probe["images"]) >= 5
    for img_id, complete, width, height in probe["images"]:
        assert complete and width >= 400 and height >= 200, img_id
    assert probe["rows"] >= 15  # header + the summary measures
    shot = tmp_path / "shot.png"
    chromium(
        "--window-size=1000,2400",
        "--hide-scrollbars",
        f"--screenshot={shot}",
        (demo.folder / "report.html").as_uri(),
    )
    from matplotlib.image import imread

    pixels = imread(str(shot))
    assert pixels.shape[0] == 2400 and pixels.std() > 0.05, "the screenshot is blank"


def test_bad_override_is_one_line_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    assert main(["demo", "--set", "fabric.wheels=3", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("openmrc demo: error: fabric.wheels: unknown key")
    assert captured.out == "" and not out.exists()


def test_loopback_demo_is_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "loopback", "--size", "1M", "--message", "256K"]) == 0
    assert "result: OK" in capsys.readouterr().out
