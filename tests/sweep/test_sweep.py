"""``openmrc sweep``: value lists, validation before anything runs, identical records on
a process pool and on Dask, resuming after Ctrl-C, failed points, aggregation."""

from __future__ import annotations

import csv
import json
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from openmrc.cli import main
from openmrc.pipeline.results import validate
from openmrc.pipeline.run import parse_value
from openmrc.sweep import build_points, run_sweep, split_values, toml_value
from openmrc.sweep.aggregate import aggregate, mean_ci, summary_table, t975
from openmrc.sweep.runner import read_point
from openmrc.sweep.spec import load_spec
from tests.browser import probe_page
from tests.tools import needs_tool, sigint_default

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "scenarios" / "sweeps"

#: A fabric small enough that a point takes a fraction of a second.
TINY = """
seed = 1
[fabric]
planes = 2
t0s = 2
hosts_per_t0 = 2
t1s = 2
[workload]
kind = "permutation"
size = "{size}"
[[faults]]
at_us = 2
kind = "link_loss"
links = "host"
direction = "down"
probability = 0.0
"""


def _scenario(tmp_path: Path, size: str = "128KiB") -> str:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(size=size))
    return str(path)


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _timeless(record: dict[str, Any]) -> dict[str, Any]:
    """A results record without its wall-clock fields."""
    out = json.loads(json.dumps(record))
    out.pop("wall_seconds", None)
    out["provenance"].pop("wall_seconds")
    out["provenance"].pop("start_time")
    return out


# ----- value lists -----------------------------------------------------------------
def test_value_lists_split_at_top_level_commas_only() -> None:
    assert split_values("1, 2.5,true") == ["1", "2.5", "true"]
    assert split_values("[0,1],[2, 3],{a = 1, b = 2},\"x,y\",'p,q',bare") == [
        "[0,1]",
        "[2, 3]",
        "{a = 1, b = 2}",
        '"x,y"',
        "'p,q'",
        "bare",
    ]
    assert split_values(r'"a\",b",c') == [r'"a\",b"', "c"]
    for value in [0.005, 3, True, "a,b", [1, 2], {"x": [1.5, "q"]}, -1e-9, "permutation"]:
        assert parse_value(toml_value(value)) == value


# ----- validation before anything runs -----------------------------------------------
@pytest.mark.parametrize(
    ("param", "named"),
    [
        ("fabric.wheels=1,2", "fabric.wheels"),  # unknown key
        ("fabric.planes=2,1.5", "fabric.planes"),  # the second value has the wrong type
        ("workload.size=64KiB,lots", "workload.size"),
        ("faults[3].at_us=1,2", "faults[3]"),  # no such fault
    ],
)
def test_bad_param_fails_before_any_point_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], param: str, named: str
) -> None:
    out = tmp_path / "out"
    argv = ["sweep", _scenario(tmp_path), "--param", param, "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    line = _one_error_line(captured.err)
    assert line.startswith("openmrc sweep: error:") and named in line
    assert captured.out == ""
    assert not out.exists()  # nothing ran, nothing was written


def test_bad_sweep_options_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = _scenario(tmp_path)
    for extra, named in [
        (["--param", "seed=1,2"], "--seeds"),
        (["--param", "fabric.t1s="], "--param fabric.t1s"),
        (["--param", "fabric.t1s=2,2"], "given twice"),
        (["--transports", "mrc,tcp"], "--transports"),
        (["--param", "fabric.t1s=1,2", "--param", "fabric.t1s=3"], "given twice"),
        (["--metric", "speed"], "--metric speed"),
    ]:
        assert main(["sweep", scenario, *extra, "--out", str(tmp_path / "o")]) == 2
        assert named in _one_error_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", scenario, "--seeds", "0"])
    assert exit_info.value.code == 2
    assert "--seeds: must be >= 1" in _one_error_line(capsys.readouterr().err)
    bad = tmp_path / "bad.toml"
    bad.write_text('scenario = "tiny.toml"\n[sweep]\nseeds = 2\nparams = { "fabric.t1s" = 2 }\n')
    assert main(["sweep", str(bad)]) == 2
    assert "sweep.params.fabric.t1s" in _one_error_line(capsys.readouterr().err)
    bad.write_text('scenario = "tiny.toml"\n[sweep]\nseed = 2\n')
    assert main(["sweep", str(bad)]) == 2
    assert "sweep.seed: unknown key" in _one_error_line(capsys.readouterr().err)


# ----- backends ----------------------------------------------------------------------
def test_process_pool_and_dask_give_identical_records(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    args = ["--param", "faults[0].probability=0.0,0.01", "--seeds", "2", "--no-progress"]
    pool_out = tmp_path / "pool"
    assert main(["sweep", scenario, *args, "--workers", "2", "--out", str(pool_out)]) == 0

    distributed = pytest.importorskip("distributed")
    spec = load_spec(scenario, params=[args[1]], seeds=2)
    points = build_points(spec)
    assert len(points) == 4 and len({p.fingerprint for p in points}) == 4
    dask_out = tmp_path / "dask"
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        outcome = run_sweep(points, dask_out, client.get_executor(pure=False))
    assert outcome.ran == 4 and outcome.failed == 0 and not outcome.interrupted
    losses = set()
    for p in points:
        a, b = read_point(pool_out, p), read_point(dask_out, p)
        assert a is not None and b is not None
        assert a["status"] == b["status"] == "ok"
        assert _timeless(a["record"]) == _timeless(b["record"])
        validate(a["record"])  # each point's record is a results.json document
        losses.add(a["record"]["summary"]["retransmits"] > 0)
        assert a["record"]["provenance"]["seed"] == p.seed
    assert losses == {False, True}  # the swept value reached the runs


# ----- resuming -----------------------------------------------------------------------
def test_interrupted_sweep_reruns_only_the_missing_points(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "4MiB")  # a few tenths of a second per point
    out = tmp_path / "out"
    argv = [
        "sweep",
        scenario,
        "--param",
        "faults[0].probability=0.0,0.005,0.01",
        "--seeds",
        "2",
        "--workers",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "openmrc.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    points = out / "points"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(points.glob("*.json")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    first = {p.name: p.stat().st_mtime_ns for p in points.glob("*.json")}
    assert 1 <= len(first) < 6, "the sweep finished before it was interrupted"
    assert not list(points.glob(".*.tmp"))

    result = subprocess.run(
        [sys.executable, "-m", "openmrc.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert f"skipped {len(first)} finished point" in result.stdout.splitlines()[0]
    assert f"ran {6 - len(first)}, skipped {len(first)} finished" in result.stdout
    after = {p.name: p.stat().st_mtime_ns for p in points.glob("*.json")}
    assert len(after) == 6
    assert all(after[name] == mtime for name, mtime in first.items())  # not run again
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["ran"] == 6 - len(first) and summary["skipped"] == len(first)


def test_failed_point_is_recorded_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openmrc.pipeline.run as sim_cli

    spec = load_spec(_scenario(tmp_path), params=["fabric.t1s=1,2"], seeds=1)
    points = build_points(spec)
    real = sim_cli.execute

    def flaky(scenario: Any, **kwargs: Any) -> Any:
        if scenario.spec.t1s == 1:
            raise RuntimeError("boom")
        return real(scenario, **kwargs)

    monkeypatch.setattr(sim_cli, "execute", flaky)
    with ThreadPoolExecutor(1) as ex:
        outcome = run_sweep(points, tmp_path / "o", ex)
    assert outcome.ran == 2 and outcome.failed == 1 and not outcome.interrupted
    bad = read_point(tmp_path / "o", points[0])
    assert bad is not None and bad["status"] == "error" and "boom" in bad["error"]
    files = aggregate(spec, points, tmp_path / "o").files
    rows = list(csv.DictReader(files[0].open()))
    assert [r["status"] for r in rows] == ["error", "ok"] and "boom" in rows[0]["error"]
    assert "boom" in files[1].read_text()

    monkeypatch.setattr(sim_cli, "execute", real)
    with ThreadPoolExecutor(1) as ex:
        again = run_sweep(points, tmp_path / "o", ex)
    assert again.skipped == 1 and again.ran == 1 and again.failed == 0


# ----- aggregation -------------------------------------------------------------------
def test_student_t_interval() -> None:
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(35) == 2.042 and t975(500) == 1.96
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 * 1.0 / 3**0.5)
    assert mean_ci([5.0]) == (5.0, None)


#: A two-axis sweep over both transports (8 points): ``swept``.
SWEPT = [
    "--param",
    "fabric.t1s=1,2",
    "--param",
    "transport.ev_count=2,4",
    "--transports",
    "mrc,roce",
    "--metric",
    "aggregate_gbps",
    "--metric",
    "summary.fct_us.max",
    "--workers",
    "2",
    "--no-progress",
]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path, str]:
    pytest.importorskip("matplotlib")
    tmp = tmp_path_factory.mktemp("swept")
    out = tmp / "out"
    argv = ["sweep", _scenario(tmp, "64KiB"), *SWEPT, "--out", str(out)]
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(argv) == 0
    return argv, out, text.getvalue()


def test_csv_and_report_have_a_row_per_point_and_a_plot_per_metric_and_axis(
    swept: tuple[list[str], Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv, out, text = swept
    assert "8 points (2 fabric.t1s x 2 transport.ev_count x 2 transports x 1 seed)" in text
    assert "aggregate_gbps  summary.fct_us.max" in text  # the summary table
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert len(rows) == 8
    assert list(rows[0])[:6] == [
        "fabric.t1s",
        "transport.ev_count",
        "transport",
        "seed",
        "status",
        "all_ok",
    ]
    assert {r["transport"] for r in rows} == {"mrc", "roce"}
    assert all(r["status"] == "ok" and float(r["aggregate_gbps"]) > 0 for r in rows)
    assert all(float(r["summary.fct_us.max"]) > 0 for r in rows)
    page = (out / "report.html").read_text()
    assert page.count("<img ") == 4  # 2 metrics x 2 axes
    assert "openmrc sweep: tiny" in page and "sweep-summary" in page
    # nothing new to run the second time; the aggregation is rewritten
    assert main(argv) == 0
    assert "ran 0, skipped 8 finished" in capsys.readouterr().out


@needs_tool("chromium")
def test_sweep_page_renders_in_headless_chromium(
    swept: tuple[list[str], Path, str], tmp_path: Path
) -> None:
    probe = probe_page(swept[1] / "report.html", tmp_path, "sweep-summary")
    assert len(probe["images"]) == 4
    for img_id, complete, width, height in probe["images"]:
        assert complete and width >= 400 and height >= 200, img_id
    assert probe["rows"] == 1 + 8  # header + (2 x 2 values) x 2 transports


def test_fingerprints_follow_the_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = _scenario(tmp_path)
    fps = [p.fingerprint for p in build_points(load_spec(scenario, params=["fabric.t1s=1,2"]))]
    again = [p.fingerprint for p in build_points(load_spec(scenario, params=["fabric.t1s=1,2"]))]
    assert fps == again and len(set(fps)) == 2
    # a value the file sets differently, a fixed override, a seed, the version: all count
    (tmp_path / "tiny.toml").write_text(TINY.format(size="256KiB"))
    changed = build_points(load_spec(scenario, params=["fabric.t1s=1,2"]))
    assert not {p.fingerprint for p in changed} & set(fps)
    (tmp_path / "tiny.toml").write_text(TINY.format(size="128KiB"))
    fixed = build_points(load_spec(scenario, params=["fabric.t1s=1,2"], sets=["run.sample_us=5"]))
    assert not {p.fingerprint for p in fixed} & set(fps)
    seeds = build_points(load_spec(scenario, params=["fabric.t1s=1,2"], seeds=2))
    assert {p.fingerprint for p in seeds if p.seed == 1} == set(fps)
    assert not {p.fingerprint for p in seeds if p.seed == 2} & set(fps)
    import openmrc.version

    monkeypatch.setattr(openmrc.version, "openmrc_version", lambda: "9.9")
    other = build_points(load_spec(scenario, params=["fabric.t1s=1,2"]))
    assert not {p.fingerprint for p in other} & set(fps)


def test_dask_local_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    argv = ["sweep", _scenario(tmp_path, "64KiB"), "--param", "fabric.t1s=1,2"]
    argv += ["--dask", "local", "--workers", "1", "--out", str(out), "--no-progress"]
    result = subprocess.run(
        [sys.executable, "-m", "openmrc.cli", *argv], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr
    assert "2 to run on a Dask LocalCluster of 1 worker" in result.stdout
    assert len(list((out / "points").glob("*.json"))) == 2


@pytest.mark.worker_group("bundled")  # no module fixture: beside the file's others
def test_bundled_sweeps_are_valid() -> None:
    files = sorted(SWEEPS.glob("*.toml"))
    assert len(files) >= 3
    for path in files:
        spec = load_spec(str(path))
        assert spec.axes and spec.seeds
        points = build_points(spec)
        assert len(points) == len({p.fingerprint for p in points})


def test_unknown_scenario_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "/nonexistent/x.toml"]) == 2
    assert "cannot read" in _one_error_line(capsys.readouterr().err)


def test_summary_marks_points_where_some_seeds_had_no_value(tmp_path: Path) -> None:
    spec = load_spec(_scenario(tmp_path), params=["fabric.t1s=1,2"], seeds=2)
    points = build_points(spec)
    stored: dict[str, Any] = {}
    for p in points:
        if p.params["fabric.t1s"] == 2 and p.seed == 2:
            stored[p.fingerprint] = {"status": "ok", "record": {"summary": {"fct_us": None}}}
        else:
            value = 10.0 * p.params["fabric.t1s"] + p.seed
            stored[p.fingerprint] = {
                "status": "ok",
                "record": {"summary": {"fct_us": {"p99": value}}},
            }
    headers, rows = summary_table(spec, points, stored, ["fct_p99_finished_us"])
    assert headers == ["fabric.t1s", "transport", "fct_p99_finished_us"]
    half = t975(1) * statistics.stdev([11.0, 12.0]) / 2**0.5
    assert rows[0] == ["1", "mrc", f"11.5 ± {half:.4g}"]
    assert rows[1] == ["2", "mrc", "21 (1 of 2)"]


def test_tail_percentiles_count_unfinished_flows_and_wide_intervals_say_so(
    tmp_path: Path,
) -> None:
    """fct_p99_us counts a flow that did not finish at its time so far (a lower bound),
    not only the finished ones; an interval wider than its mean is marked."""
    spec = load_spec(_scenario(tmp_path), params=["fabric.t1s=1,2"], seeds=2)
    points = build_points(spec)
    stored: dict[str, Any] = {}
    for p in points:
        # 98 flows finish in 10 us; the last two take 10 + 90 * seed us with one T1, and
        # never finish with two (the run ends at 5000 us)
        flows = [{"start_ps": 0, "fct_us": 10.0, "slowdown": 1.0, "ideal_fct_us": 10.0}] * 98
        tail = {"start_ps": 0, "fct_us": None, "slowdown": None, "ideal_fct_us": 10.0}
        if p.params["fabric.t1s"] == 1:
            tail = {**tail, "fct_us": 10.0 + p.seed * 90, "slowdown": 1.0 + p.seed * 9}
        record = {
            "flows": [*flows, tail, tail],
            "sim_end_us": 5000.0,
            "summary": {"fct_us": {"p99": 10.0}},
        }
        stored[p.fingerprint] = {"status": "ok", "record": record}
    metrics = ["fct_p99_us", "fct_p99_finished_us", "slowdown_p99"]
    _, rows = summary_table(spec, points, stored, metrics)
    # the unfinished flows at 5000 us so far (the finished-only p99 saw 10 us)
    assert rows[1][2:] == ["5,000 ± 0", "10 ± 0", "500 ± 0"]
    assert rows[0][2].startswith("145 ± ") and rows[0][2].endswith(" (wide)")  # 100, 190 us
