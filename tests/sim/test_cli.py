"""``openmrc run`` / ``sim`` / ``compare``: overrides, outputs, errors, Ctrl-C, pipes."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.pipeline.run import RunProgress, apply_override, load_scenario, parse_value
from openmrc.pipeline.scenario import ScenarioError
from openmrc.sim.result import read_series
from tests.tools import sigint_default

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
LINK = str(SCENARIOS / "t0-t1-link-failure.toml")
#: The link-failure scenario cut down to a fraction of a second.
SMALL = [
    "--set",
    "workload.size=512KiB",
    "--set",
    "run.payloads=false",
    "--set",
    "faults[0].at_us=5",
    "--no-progress",
]
#: RoCE/IB timers scaled down as in the demo scenario: a baseline that meets the failed
#: link stalls ~1 ms instead of 4.3 s (the ACK timeout of timeout_exp 20).
FAST_BASELINE = [
    "--set",
    "transport.roce.timeout_exp=7",
    "--set",
    "transport.baseline_fabric.convergence_delay_ps=300000000",
    "--set",
    "transport.baseline_fabric.hold_time_ps=1000000000",
]


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_run_writes_results_with_provenance_and_names_the_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``openmrc run`` writes the results with their provenance, names the transport, and
    builds the scenario's experiment once, after printing what it will cost (building it
    to check it and again to run it doubled a large run's set-up: 463 s instead of about
    230 at 131,072 hosts).  One run checks both: each is a full run of the scenario."""
    from openmrc.pipeline.scenario import Scenario

    built: list[int] = []
    real = Scenario.build

    def build(self: Scenario) -> object:
        built.append(1)
        return real(self)

    monkeypatch.setattr(Scenario, "build", build)
    out = tmp_path / "out" / "deeper"
    assert main(["run", LINK, *SMALL, "--seed", "5", "--out", str(out)]) == 0
    assert len(built) == 1
    text = capsys.readouterr().out
    assert text.startswith("scenario t0-t1-link-failure [transport mrc]:")
    assert "seed 5" in text and "flows completed" in text
    doc = json.loads((out / "results.json").read_text())
    prov = doc["provenance"]
    assert prov["seed"] == 5 and prov["transport"] == "mrc" and not prov["partial"]
    assert prov["overrides"] == ["workload.size=512KiB", "run.payloads=false", "faults[0].at_us=5"]
    assert prov["resolved"]["workload"]["size"] == "512KiB"
    assert prov["resolved"]["fabric"]["planes"] == 8
    assert prov["resolved"]["faults"][0]["at_us"] == 5
    assert prov["scenario_file"] == LINK and prov["openmrc_version"]
    assert doc["schema_version"].startswith("2.") and doc["partial"] is False
    assert doc["summary"]["faults"] == 1 and doc["summary"]["completed"] == 16
    flows = (out / "flows.csv").read_text().splitlines()
    assert "slowdown" in flows[0].split(",") and len(flows) == 17
    for f in doc["flows"]:
        assert f["ideal_fct_us"] > 0
        assert f["slowdown"] == pytest.approx(f["fct_us"] / f["ideal_fct_us"], rel=1e-3)
    assert (out / "goodput.csv").read_text().startswith("time_us,total_gbps,")
    assert (out / "ev_events.csv").read_text().startswith("time_us,host,qpn,ev,old,new,reason")
    assert "link_down" in (out / "faults.csv").read_text()


def test_sim_is_an_alias_of_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", LINK, *SMALL, "--transport", "ib", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["provenance"]["transport"] == "ib" and doc["all_ok"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``openmrc compare`` of MRC, RoCE and IB on the cut-down link failure, once for the
    module: its output directory and what it printed."""
    out = tmp_path_factory.mktemp("compare") / "cmp"
    argv = ["compare", LINK, *SMALL, *FAST_BASELINE, "--transports", "mrc,roce,ib"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*argv, "--out", str(out)]) == 0
    return out, buf.getvalue()


def test_compare_runs_each_transport_on_the_same_scenario(compared: tuple[Path, str]) -> None:
    out, text = compared
    for name in ("mrc", "roce", "ib"):
        assert f"[transport {name}]" in text
        doc = json.loads((out / name / "results.json").read_text())
        assert doc["provenance"]["transport"] == name
        # (striped over every plane, RoCE and IB meet the failed link: their routing's
        # withdrawal of it is recorded as a fault event of their own)
        assert doc["summary"]["flows"] == 16 and doc["summary"]["faults"] >= 1
    table_head = next(line for line in text.splitlines() if line.strip().startswith("mrc"))
    assert table_head.split() == ["mrc", "roce", "ib"]
    assert (out / "summary.csv").read_text().startswith("measure,mrc,roce,ib\n")


def test_compare_gives_every_transport_the_same_nic_bandwidth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scenario that leaves the baselines' QPs unset: RoCE and IB striped over every plane."""
    out = tmp_path / "cmp"
    argv = ["compare", LINK, *SMALL, *FAST_BASELINE, "--transports", "mrc,roce,ib"]
    argv += ["--out", str(out), "--set", "workload.message=64KiB"]  # 8 messages a flow
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "warning" not in text
    rows = {line.split("  ")[1]: line.split()[-3:] for line in text.splitlines() if "  " in line}
    assert rows["QPs per connection"] == ["1", "8", "8"]
    assert text.count(" 8 of 8") == 3  # the planes-used row: every plane, every transport
    docs = {n: json.loads((out / n / "results.json").read_text()) for n in ("mrc", "roce", "ib")}
    assert "transport.roce.qps=8" in docs["roce"]["provenance"]["overrides"]
    assert "transport.roce.qps=8" not in docs["mrc"]["provenance"]["overrides"]
    # the same aggregate NIC bandwidth: each flow's ideal (alone on an idle fabric, at
    # the rate of the NIC ports its QPs use) within the transports' header differences
    for i, mrc_flow in enumerate(docs["mrc"]["flows"]):
        for name in ("roce", "ib"):
            ideal = docs[name]["flows"][i]["ideal_fct_us"]
            assert ideal == pytest.approx(mrc_flow["ideal_fct_us"], rel=0.03), (name, i)
    # and the bytes do cross every plane
    for name, doc in docs.items():
        planes = read_series(doc, "plane_tx_gbps_series")
        assert planes and all(sum(v) > 0 for v in planes.values()), name


def test_compare_says_when_a_baselines_qps_cannot_all_carry_a_message(
    compared: tuple[Path, str],
) -> None:
    # one message a flow: RoCE's 8 QPs cannot all carry it, and the table says so
    text = compared[1]
    assert "1 of 8" in text and "warning [roce]: its QPs have 8 planes but only 1" in text


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["fabric.wheels=4"], "fabric.wheels: unknown key"),
        (["workload.size=lots"], "workload.size: 'lots' is not a size"),
        (["fabric.planes=two"], "fabric.planes: expected int, got str 'two'"),
        (["transport.mtu=10"], "transport.mtu: must be an int in 256..9000"),
        (["seed.x=1"], "--set seed.x: seed is not a table"),
        (["faults[3].at_us=1"], "--set faults[3].at_us: faults[3] does not exist"),
        (["nothing"], "--set nothing: expected key.path=value"),
        (["fabric.9x=1"], "--set fabric.9x: '9x' is not a key"),
        (["faults[0].kind=meteor"], "faults[0].kind: 'meteor' is not one of"),
        (["faults[0].target=nowhere"], "faults[0].target: no link 'nowhere'"),
    ],
)
def test_bad_set_names_the_key_on_stderr(
    sets: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", LINK, "--out", str(tmp_path / "o")]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    captured = capsys.readouterr()
    line = _one_error_line(captured.err)
    assert line.startswith("openmrc run: error: ") and message in line, line
    assert captured.out == ""
    assert not (tmp_path / "o").exists(), "--out is created only once the input is valid"


def test_set_values_are_toml(tmp_path: Path) -> None:
    assert parse_value("8") == 8 and parse_value("1.5") == 1.5
    assert parse_value("true") is True and parse_value('"x y"') == "x y"
    assert parse_value("[1, 2]") == [1, 2] and parse_value("permutation") == "permutation"
    data: dict = {"faults": [{"at_us": 1, "kind": "link_down"}]}
    apply_override(data, "faults[0].at_us=7")
    apply_override(data, "run.sample_us=2.5")
    apply_override(data, "workload.senders=[1, 2, 3]")
    assert data == {
        "faults": [{"at_us": 7, "kind": "link_down"}],
        "run": {"sample_us": 2.5},
        "workload": {"senders": [1, 2, 3]},
    }
    scenario, workload = load_scenario(LINK, ["workload.kind=shift", "workload.shift=3"], seed=9)
    assert scenario.seed == 9 and workload["kind"] == "shift"
    assert all(f.dst == (f.src + 3) % 16 for f in scenario.flows)
    with pytest.raises(ScenarioError, match=r"transport: .*'tcp'"):
        load_scenario(LINK, [], transport="tcp")


def test_unwritable_out_is_an_error_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import openmrc.pipeline.run as sim_cli

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the scenario ran although --out is unusable")

    monkeypatch.setattr(sim_cli, "execute", no_run)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for bad in (blocker / "out", "/proc/openmrc-cannot-write-here"):
        for argv in (["run", LINK], ["compare", LINK, "--transports", "mrc,roce"]):
            assert main([*argv, "--out", str(bad), "--no-progress"]) == 2
            captured = capsys.readouterr()
            line = _one_error_line(captured.err)
            assert line.startswith(f"openmrc {argv[0]}: error: --out: cannot write to {bad} (")
            assert captured.out == ""


def test_errors_of_sim_and_topology_go_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", str(tmp_path / "missing.toml")]) == 2
    captured = capsys.readouterr()
    assert "cannot read" in _one_error_line(captured.err) and captured.out == ""
    assert main(["topology", "planes=0"]) == 2
    captured = capsys.readouterr()
    assert "fabric.planes" in _one_error_line(captured.err) and captured.out == ""


def test_bad_flags_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", LINK, "--seed", "many"])
    assert exc.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--seed: invalid int value: 'many'" in line
    assert main(["compare", LINK, "--transports", "mrc,tcp"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--transports: 'tcp' is not one of mrc, roce, ib" in line


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("openmrc ")


def test_progress_bar_reads_the_run_without_changing_it() -> None:
    from rich.console import Console

    def run(progress: bool) -> tuple[dict, str]:
        scenario, _ = load_scenario(LINK, SMALL[1:6:2])
        exp = scenario.build()
        buf = io.StringIO()
        console = Console(file=buf, force_terminal=True, width=120)
        with RunProgress(exp, "test", progress, delay_s=0.0, console=console) as bar:
            # a slow run: let the bar's thread see the simulation move
            while exp.sim.pending() and exp.sim.now < 30_000_000:
                exp.sim.run(exp.sim.now + 1_000_000)
                time.sleep(0.05)
            result = exp.run()
        assert bar.shown is progress
        d = result.as_dict()
        d.pop("wall_seconds")
        return d, buf.getvalue()

    with_bar, shown = run(True)
    without, silent = run(False)
    assert "flows" in shown and "us simulated" in shown and silent == ""
    assert with_bar == without


def test_progress_bar_shows_the_set_up_before_the_run() -> None:
    # the CLI starts the bar before it builds the experiment (issue 20: progress
    # from the first second, set-up included) and hands it the experiment once built
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with RunProgress(None, "test", True, delay_s=0.0, console=console) as bar:
        deadline = time.monotonic() + 30
        while "setting up" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "setting up" in buf.getvalue()
        scenario, _ = load_scenario(LINK, SMALL[1:6:2])
        exp = scenario.build()
        bar.exp = exp
        exp.sim.run(5_000_000)
        deadline = time.monotonic() + 30
        while "5.0 us simulated" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert bar.shown
    assert "5.0 us simulated" in buf.getvalue()


def _cli(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from openmrc.cli import main; sys.exit(main())",
        *args,
    ]


def test_closed_pipe_is_not_a_traceback() -> None:
    proc = subprocess.Popen(
        _cli("topology", "planes=8,t0s=32,hosts_per_t0=16,t1s=16", "--tables"),  # 400+ KB
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_writes_partial_valid_results(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C, and SIGTERM as a scheduler or ``timeout`` sends it, keep what was measured."""
    out = tmp_path / "partial"
    # 1 GiB per flow without payloads: about 30 s of simulation compiled on an idle
    # machine (the bundled 16 MiB ran in 1.6 s once compiled, and CI once saw all 16
    # flows finish inside the 1.5 s this test waits), so the SIGINT lands mid-run
    proc = subprocess.Popen(
        _cli(
            "run",
            LINK,
            "--set",
            "workload.size=1GiB",
            "--set",
            "run.payloads=false",
            "--out",
            str(out),
        ),
        preexec_fn=sigint_default,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # SIGINT once the simulation is under way: --out is created after the scenario
    # is validated, just before the run starts
    deadline = time.monotonic() + 120
    while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr
    assert "INTERRUPTED, partial results" in stdout
    doc = json.loads((out / "results.json").read_text())  # validated by conftest too
    assert doc["partial"] is True and doc["provenance"]["partial"] is True
    assert any("interrupted" in w for w in doc["provenance"]["warnings"])
    assert doc["summary"]["completed"] < doc["summary"]["flows"]
    assert (out / "flows.csv").exists()


def test_collectives_are_printed_when_the_results_have_them() -> None:
    from openmrc.pipeline.run import _collective_lines

    assert _collective_lines({"flows": []}) == []
    doc = {
        "collectives": [
            {"kind": "allreduce", "ranks": 4, "size": 1024, "time_us": 10.0},
            {"kind": "alltoall", "ranks": 4, "size": 1024, "time_us": None},
        ]
    }
    doc["collectives"][0].update(algbw_gbps=1.0, busbw_gbps=1.5)
    assert _collective_lines(doc) == [
        "  collective allreduce x4 ranks, 1024 B: 10.0 us, algbw 1.0 Gb/s, busbw 1.5 Gb/s",
        "  collective alltoall x4 ranks, 1024 B: did not complete",
    ]


def test_run_finds_a_cm_file_beside_the_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scenario's relative `workload.file` is relative to the scenario, not the cwd."""
    d = tmp_path / "scen"
    d.mkdir()
    (d / "t.cm").write_text("Nodes 2\nConnections 1\n0->1 id 1 start 0 size 65536\n")
    (d / "s.toml").write_text(
        "[fabric]\nplanes = 1\nt0s = 1\nhosts_per_t0 = 2\nt1s = 1\n"
        '[workload]\nkind = "htsim"\nfile = "t.cm"\n'
    )
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    assert main(["run", "scen/s.toml"]) == 0, capsys.readouterr().err


def test_counts_are_plural_only_when_more_than_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "planes=1,t0s=1,hosts_per_t0=1,t1s=1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 host, 1 plane, 2 switches, ") and "1 planes" not in out
