"""Scenario files: they run, and every mistake is named."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.pipeline import campaign
from openmrc.pipeline.scenario import ScenarioError, load, parse, parse_size

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

SMALL = {
    "seed": 3,
    "fabric": {"planes": 2, "t0s": 2, "hosts_per_t0": 2, "t1s": 2},
    "workload": {"kind": "permutation", "size": "256KiB"},
}


def test_every_shipped_scenario_parses() -> None:
    # scenarios/sweeps/ holds sweep files, not scenarios (tests/sweep/test_sweep.py checks them);
    # scenarios/scale/ holds the paper-size fabrics, checked below at a reduced size;
    # scenarios/paper/ is loaded file by file in tests/paper/test_scenarios.py (the same
    # load, on its own parametrized tests: the 64-rank all-to-alls are the costliest here).
    files = sorted(
        p
        for p in SCENARIOS.glob("**/*.toml")
        if p.relative_to(SCENARIOS).parts[0] not in ("sweeps", "scale", "paper")
    )
    assert files
    for path in files:
        if "campaign" in tomllib.loads(path.read_text()):
            setup = campaign.load(str(path))  # checks every key, the [campaign] table too
            assert setup.scenarios
            with pytest.raises(ScenarioError, match="openmrc campaign"):
                load(path)
            continue
        scenario = load(path)
        assert scenario.flows or scenario.collectives or scenario.jobs


def test_scale_scenarios_parse_with_a_small_fabric() -> None:
    """Every key of the paper-size scenarios is checked, on a small fabric of the same
    kind: parsing builds the experiment to check fault targets, and at 131,072 hosts
    that build alone costs about 20 CPU s and 4 GB compiled (17 GB interpreted).  The
    full-size build is what ``benchmarks/sim_speed.py --case sendrecv-131072`` runs and
    tests/sim/test_budget.py measures at 16,384 x 8."""
    from openmrc.pipeline.scenario import read_data

    files = sorted((SCENARIOS / "scale").glob("*.toml"))
    assert files
    for path in files:
        data = read_data(path)
        fabric = data["fabric"]
        assert fabric["t0s"] * fabric["hosts_per_t0"] >= 40_000, path
        data["fabric"] = {**fabric, "t0s": 4, "hosts_per_t0": 4, "t1s": 4}
        scenario = parse(data, name=path.stem, base_dir=path.parent)
        assert len(scenario.flows) == 16, path


def test_small_scenario_runs_and_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.json"
    data = dict(
        SMALL,
        faults=[{"at_us": 2, "kind": "link_down", "target": "p1t0x0-p1t1x1"}],
        run={"payloads": True, "queue_sample_us": 1},
    )
    path.write_text(json.dumps(data))
    assert main(["sim", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "all ok: True" in out and "payloads verified: True" in out
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["all_ok"] and len(result["flows"]) == 4
    assert (tmp_path / "out" / "flows.csv").read_text().startswith("name,")
    assert (tmp_path / "out" / "goodput.csv").exists()
    assert result["fabric"]["ports"][0]["utilisation"] >= 0
    assert result["fabric"]["queue_samples"], "queue depths were not sampled"


def test_same_scenario_same_seed_same_result() -> None:
    a = parse(SMALL).run().as_dict()
    b = parse(SMALL).run().as_dict()
    a.pop("wall_seconds")
    b.pop("wall_seconds")
    assert a == b


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"colour": 1}, "colour: unknown top-level key"),
        ({"fabric": {"planes": 0}}, "fabric.planes: must be between 1 and 16"),
        ({"fabric": {"planes": "two"}}, "fabric.planes: expected int"),
        ({"fabric": {"wheels": 4}}, "fabric.wheels: unknown key"),
        ({"workload": {"kind": "broadcast"}}, "workload.kind: 'broadcast'"),
        (
            {"workload": {"kind": "permutation", "size": "lots"}},
            "workload.size: 'lots' is not a size",
        ),
        ({"workload": {"kind": "single", "src": 0, "dst": 99, "size": 10}}, "flow.dst"),
        (
            {"workload": {"kind": "incast", "senders": [1, 2], "target": 1}},
            "target 1 is also a sender",
        ),
        ({"transport": {"mtu": 10}}, "transport.mtu: must be an int in 256..9000"),
        ({"transport": {"cc": "reno"}}, "transport.cc: unknown congestion control 'reno'"),
        # the scenario's keys, not the classes behind them (EVProfile.ev_count, RoceConfig.qps)
        ({"transport": {"ev_count": 0}}, "transport.ev_count: must be an int in 1..65536"),
        ({"transport": {"retry_exp": 99}}, "transport.retry_exp: must be an int in 0..25"),
        (
            {"transport": {"name": "roce", "roce": {"qps": 0}}},
            "transport.roce.qps: must be an integer >= 1",
        ),
        ({"fabric": {"host_gbps": 0}}, "fabric.host_gbps: must be positive"),
        ({"switches": {"trimming": "yes"}}, "switches"),
        ({"switches": {"fast": True}}, "switches.fast: unknown key"),
        (
            {"faults": [{"at_us": 1, "kind": "link_down", "target": "nope"}]},
            "faults[0].target: no link 'nope'",
        ),
        ({"faults": [{"at_us": 1, "kind": "meteor"}]}, "faults[0].kind: 'meteor'"),
        ({"faults": [{"kind": "link_down"}]}, "faults[0]: needs at_us and kind"),
        ({"run": {"payloads": "maybe"}}, "run.payloads"),
        ({"run": {"speed": 2}}, "run.speed: unknown key"),
    ],
)
def test_mistakes_name_the_key(patch: dict, message: str) -> None:
    data = {**SMALL, **patch}
    with pytest.raises(ScenarioError) as exc:
        parse(data)
    assert message in str(exc.value)


def test_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[fabric\nplanes = 2")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load(bad)
    assert main(["sim", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_sizes() -> None:
    assert parse_size("8MiB", "k") == 8 << 20
    assert parse_size("1.5k", "k") == 1536
    assert parse_size(4096, "k") == 4096
    for bad in ("", "MiB", -1, 0, True, "3 parsecs"):
        with pytest.raises(ScenarioError):
            parse_size(bad, "k")


def test_topology_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "planes=2,t0s=2,hosts_per_t0=1,t1s=2", "--tables"]) == 0
    out = capsys.readouterr().out
    assert "p0t0x0" in out and "-> port" in out
    assert main(["topology", "planes=2,t0s=2,hosts_per_t0=1,t1s=2", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan
    assert main(["topology", "planes=0"]) == 2
    assert "fabric.planes" in capsys.readouterr().err


@pytest.mark.parametrize("transport", ["roce", "ib", "mrc"])
def test_transport_selected_by_name(
    transport: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps({**SMALL, "fabric": {"planes": 1, "t0s": 2, "hosts_per_t0": 2, "t1s": 2}})
    )
    assert main(["sim", str(path), "--transport", transport, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["all_ok"] and len(result["flows"]) == 4


def test_unknown_transport_is_named() -> None:
    with pytest.raises(ScenarioError, match="transport"):
        parse({**SMALL, "transport": {"name": "tcp"}})


def test_deeply_nested_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 100,000-deep nested array is refused in one line (a depth limit), not a
    RecursionError; in a file and in a --set value."""
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "nested 100000 deep; at most 64 levels" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    deep = "[" * 5000 + "]" * 5000
    assert main(["run", "scenarios/incast-7to1.toml", "--set", f"workload.size={deep}"]) == 2
    err = capsys.readouterr().err
    assert "workload.size" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_overflowing_size_is_refused_before_any_estimate_and_leaves_no_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    size = 'workload.size="99999999999999999999999PiB"'
    assert main(["run", "scenarios/incast-7to1.toml", "--set", size, "--out", str(out)]) == 2
    cap = capsys.readouterr()
    assert "workload.size" in cap.err and "256 TiB" in cap.err
    assert "events" not in cap.out + cap.err  # no estimate printed first
    assert not out.exists()
