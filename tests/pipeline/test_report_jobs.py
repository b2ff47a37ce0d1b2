"""report.html of a job run: a job section (step time per transport, the breakdown bar,
the per-rank timeline, step time per iteration and its CSV) that passes the same
headless-Chromium and figure-layout checks as the other report views."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.pipeline.report import have_plots
from openmrc.pipeline.report_jobs import STEPS_CSV, spans
from tests.browser import chromium, probe_page
from tests.figures import layout, page_images, problems
from tests.tools import needs_tool

needs_mpl = pytest.mark.skipif(not have_plots(), reason="matplotlib (openmrc[report]) missing")

CHAKRA = str(Path(__file__).resolve().parents[2] / "scenarios" / "training" / "chakra-8.toml")
# three iterations at flow level (a fraction of a second), a T0-T1 link failing in the
# second: each transport's timeline marks it
RUN = ["--set", "run.mode=flow", "--set", "workload.iterations=3", "--no-progress"]
RUN += ["--set", 'faults=[{at_us = 2500, kind = "link_down", target = "p0t0x0-p0t1x0"}]']
JOB_FIGURES = ["img-job-breakdown", "img-job-timeline", "img-job-iterations"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("jobs")
    assert main(["compare", CHAKRA, *RUN, "--transports", "mrc,roce", "--out", str(out)]) == 0
    return out


@needs_mpl
def test_the_job_section_has_its_figures_and_csv(compared: Path) -> None:
    page = (compared / "report.html").read_text()
    section = page[page.index("<section id='jobs'>") : page.index("</section>")]
    for img in JOB_FIGURES:
        assert f"id='{img}'" in section, img
    # the headline is the step time, not flow counters of a run with no flows
    story = page[page.index('<div id="headline"') : page.index("</div>")]
    assert "step time" in story and "slowdown" in story and "flows finished" not in story
    assert "Outcome: mrc had the shortest step of job gpt-small-8-et" in story
    # the summary table is the job's rows; no table of zeros
    table = page[page.index('<table id="summary">') : page.index("</table>")]
    assert "step time ms" in table and "aggregate Gb/s" not in table
    assert "<table id='network'>" not in page  # flow level: no flows
    # step time per iteration: the CSV beside the page, the same numbers as results.json
    rows = list(csv.DictReader((compared / STEPS_CSV).open()))
    assert [(r["transport"], r["iteration"]) for r in rows] == [
        (t, str(i)) for t in ("mrc", "roce") for i in (1, 2, 3)
    ]
    for t in ("mrc", "roce"):
        doc = json.loads((compared / t / "results.json").read_text())
        got = [float(r["step_time_us"]) for r in rows if r["transport"] == t]
        assert got == doc["jobs"][0]["step_times_us"]
    assert f"href='{STEPS_CSV}'" in section


@needs_mpl
def test_the_timeline_is_the_trace_with_faults_marked(compared: Path) -> None:
    page = (compared / "report.html").read_text()
    panels = layout(page_images(page)["job-timeline"])["axes"]
    assert [ax["label"].split("\n")[0] for ax in panels] == ["mrc", "roce"]
    trace = json.loads((compared / "mrc" / "trace.json").read_text())
    compute, comm, ranks = spans(trace)
    assert ranks == 8 and len(compute) == 8 and comm
    drawn = sum(len(v) for v in compute.values()) + sum(
        len(v) for per_rank in comm.values() for v in per_rank.values()
    )
    assert panels[0]["points"] == drawn  # every compute span and collective, one bar each
    for ax in panels:  # the link failure at 2.5 ms (then when it was seen), labelled
        assert [t["text"].strip() for t in ax["texts"]][:1] == ["F1"]
    breakdown = layout(page_images(page)["job-breakdown"])["axes"]
    assert len(breakdown) == 1 and breakdown[0]["label"] == "job gpt-small-8-et"


@needs_mpl
@needs_tool("chromium")
def test_the_job_report_renders_in_headless_chromium(compared: Path, tmp_path: Path) -> None:
    report = compared / "report.html"
    probe = probe_page(report, tmp_path, "summary")
    ids = [img[0] for img in probe["images"]]
    assert ids[:3] == JOB_FIGURES  # the job section leads the page
    for img_id, complete, width, height in probe["images"]:
        assert complete and width >= 400 and height >= 200, img_id
    assert probe["rows"] >= 8  # header, the job's measures, wall s
    shot = tmp_path / "shot.png"
    chromium(
        "--window-size=1000,2400", "--hide-scrollbars", f"--screenshot={shot}", report.as_uri()
    )
    from matplotlib.image import imread

    pixels = imread(str(shot))
    assert pixels.shape[0] == 2400 and pixels.std() > 0.05, "the screenshot is blank"
    # the figure checks of every other report view: no overlapping, empty or one-point
    # axes, no legend on the data, no label outside its axes
    images = page_images(report.read_text())
    assert {f"img-{pid}" for pid in images} >= set(JOB_FIGURES)
    for pid, data in images.items():
        assert problems(layout(data)) == [], pid


@needs_mpl
def test_a_packet_level_job_report_leads_with_step_time(tmp_path: Path) -> None:
    """At packet level the page keeps the network's table and plots, after the job's."""
    out = tmp_path / "run"
    assert main(["run", CHAKRA, "--no-progress", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    story = page[page.index('<div id="headline"') : page.index("</div>")]
    assert story.count("<p>") == 1 and "mrc: job gpt-small-8-et (8 GPUs): step time" in story
    assert page.index("<section id='jobs'>") < page.index("<table id='network'>")
    assert page.index("<table id='network'>") < page.index("id='img-goodput'")
    for pid, data in page_images(page).items():
        assert problems(layout(data)) == [], pid
    assert (out / STEPS_CSV).read_text().count("\n") == 2  # header and the one iteration


def test_a_big_job_shows_ranks_spread_over_its_stages() -> None:
    from openmrc.pipeline.report_jobs import TIMELINE_RANKS, timeline_ranks

    assert timeline_ranks(8) == list(range(8))
    assert timeline_ranks(64) == list(range(0, 64, 4)) and TIMELINE_RANKS == 16
    assert timeline_ranks(1024)[-1] == 960 and len(timeline_ranks(1000)) <= TIMELINE_RANKS
