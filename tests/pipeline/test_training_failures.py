"""Several iterations of a job, and random failures drawn from component failure rates."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from openmrc.pipeline.failures import FailureRates, components, draw, expected
from openmrc.pipeline.jobrun import packet_rows, run_flow
from openmrc.pipeline.scenario import ScenarioError, parse
from openmrc.topology import ClosSpec
from openmrc.workloads.jobs.examples import CALIBRATION_SCENARIO
from openmrc.workloads.jobs.iterations import percentile

SPEC = ClosSpec(planes=8, t0s=8, hosts_per_t0=8, t1s=8)  # the 64-GPU job's fabric


def _data(iterations: int, **extra: Any) -> dict[str, Any]:
    d = copy.deepcopy(CALIBRATION_SCENARIO)
    d["job"]["iterations"] = iterations
    d.update(extra)
    return d


def _flow_row(d: dict[str, Any]) -> dict[str, Any]:
    d = {**d, "run": {"mode": "flow"}}
    sc = parse(d)
    _res, rows, _wall = run_flow(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults)
    return rows[0]


def test_real_rates_give_almost_no_failure_and_the_scale_compresses_time() -> None:
    real = FailureRates()
    window = 10 * 31_000.0  # ten 31 ms iterations of the 64-GPU job
    assert expected(real, SPEC, window) < 1e-6
    assert draw(real, SPEC, window, seed=1) == []
    fast = FailureRates(scale=1e7)
    assert expected(fast, SPEC, window) == pytest.approx(1e7 * expected(real, SPEC, window))
    # the draws follow the rates: the mean count over seeds is the expected count
    counts = [len(draw(FailureRates(scale=1e8), SPEC, window, seed=s)) for s in range(300)]
    mean = sum(counts) / len(counts)
    assert mean == pytest.approx(expected(FailureRates(scale=1e8), SPEC, window), rel=0.1)


def test_draws_are_deterministic_and_follow_each_class() -> None:
    rates = FailureRates(scale=1e9)
    a = draw(rates, SPEC, 100_000.0, seed=3)
    assert a == draw(rates, SPEC, 100_000.0, seed=3)
    assert a != draw(rates, SPEC, 100_000.0, seed=4)
    assert [d.at_us for d in a] == sorted(d.at_us for d in a)
    # only switches fail when only switches have a rate
    only = FailureRates(scale=1e9, link_per_hour=0, optic_per_hour=0, nic_port_per_hour=0)
    kinds = {d.kind for d in draw(only, SPEC, 100_000.0, seed=3)}
    assert kinds == {"switch_down"}
    n = components(SPEC)
    assert len(n["link"]) == 8 * 64 + 8 * 8 * 8 and len(n["optic"]) == 2 * len(n["link"])
    assert len(n["switch"]) == 8 * 16 and len(n["nic_port"]) == 8 * 64


def test_components_are_made_when_indexed_in_their_fixed_order() -> None:
    """The lazy classes (a draw on the whole cluster names only what fails) list every
    component once, in the documented order."""
    spec = ClosSpec(planes=2, t0s=3, hosts_per_t0=2, t1s=2)
    hpt = spec.hosts_per_t0
    host_links = [f"h{h}-p{p}t0x{h // hpt}" for p in range(2) for h in range(6)]
    fab = [f"p{p}t0x{a}-p{p}t1x{k}" for p in range(2) for a in range(3) for k in range(2)]
    links = host_links + fab
    want = {
        "link": [(n, n, -1, -1) for n in links],
        "optic": [(f"optic {i} of {n}", n, -1, -1) for n in links for i in (0, 1)],
        "switch": [(n, n, -1, -1) for n in [f"p{p}t0x{a}" for p in range(2) for a in range(3)]]
        + [(n, n, -1, -1) for n in [f"p{p}t1x{k}" for p in range(2) for k in range(2)]],
        "nic_port": [(f"h{h}/p{p}", "", h, p) for p in range(2) for h in range(6)],
    }
    got = components(spec)
    assert {c: list(v) for c, v in got.items()} == want
    assert got["optic"][-1] == want["optic"][-1] and got["link"][1:3] == want["link"][1:3]
    with pytest.raises(IndexError):
        got["switch"][len(want["switch"])]
    # repairs: every failure comes back repair_us later
    rep = draw(FailureRates(scale=1e9, repair_us=500.0), SPEC, 100_000.0, seed=3)
    downs = [d for d in rep if d.kind.endswith("_down")]
    ups = [d for d in rep if d.kind.endswith("_up")]
    assert len(downs) == len(ups) > 0
    assert {(round(d.at_us + 500.0, 6), d.component) for d in downs} == {
        (u.at_us, u.component) for u in ups
    }


def test_iterations_report_each_step_and_the_headline() -> None:
    base = _flow_row(_data(1))["step_time_us"]
    # a NIC port of host 0 fails during the third of four iterations, for good
    fault = {"at_us": 2.5 * base, "kind": "nic_port_down", "host": 0, "plane": 1}
    row = _flow_row(_data(4, faults=[fault]))
    steps = row["step_times_us"]
    assert row["iterations"] == 4 and len(steps) == 4
    assert steps[0] == pytest.approx(base, abs=0.01) and steps[1] == pytest.approx(base, abs=0.01)
    assert steps[2] > 1.02 * base and steps[3] > 1.02 * base  # one plane fewer for host 0
    assert row["step_time_us"] == pytest.approx(sum(steps) / 4, abs=0.01)
    assert row["p99_step_us"] == max(steps)
    ideal = row["ideal_step_us"]  # a lower bound: below the failure-free step
    assert 0 < ideal <= base
    assert row["slowdown"] == pytest.approx(row["step_time_us"] / ideal, rel=1e-3)
    assert row["p99_slowdown"] == pytest.approx(max(steps) / ideal, rel=1e-3)


def test_packet_level_runs_iterations_back_to_back() -> None:
    sc = parse(_data(2))
    result = sc.build().run()
    (row,) = packet_rows(sc.spec, sc.jobs, sc.job_state, result)
    one = parse(_data(1))
    (single,) = packet_rows(one.spec, one.jobs, one.job_state, one.build().run())
    steps = row["step_times_us"]
    assert row["complete"] and len(steps) == 2
    for s in steps:
        assert s == pytest.approx(single["step_time_us"], rel=0.02)


def test_failures_table_draws_into_the_faults_and_the_results() -> None:
    from openmrc.pipeline.results import validate
    from openmrc.pipeline.run import execute

    d = _data(4, failures={"scale": 2e11, "seed": 3})
    d["run"] = {"mode": "flow"}
    sc = parse(copy.deepcopy(d), name="t")
    assert sc.failures is not None and sc.failures["drawn"]
    assert len(sc.faults) == len(sc.failures["drawn"])
    assert sc.failures["window_us"] == pytest.approx(
        sc.jobs[0].graph.critical_compute_ps() / 1e6, abs=1e-3
    )
    again = parse(copy.deepcopy(d), name="t")
    assert again.failures == sc.failures
    out = execute(sc, scenario_file="t.toml", overrides=[], workload={})
    validate(out.doc)
    assert out.doc["failures"]["drawn"] == sc.failures["drawn"]
    assert out.doc["jobs"][0]["iterations"] == 4


@pytest.mark.parametrize(
    ("failures", "message"),
    [
        ({"scael": 1}, r"failures\.scael: unknown key"),
        ({"scale": 0}, r"failures\.scale: must be > 0"),
        ({"switch_per_hour": -1}, r"failures\.switch_per_hour: must be a number >= 0"),
        ({"seed": "x"}, r"failures\.seed"),
    ],
)
def test_bad_failures_tables_name_the_field(failures: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse(_data(1, failures=failures))


def test_bad_iterations_name_the_field() -> None:
    with pytest.raises(ScenarioError, match=r"job\.iterations: must be a positive integer"):
        parse(_data(0))


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0], 99) == 3.0
    assert percentile(list(map(float, range(1, 201))), 99) == 198.0
    assert percentile([5.0], 50) == 5.0
