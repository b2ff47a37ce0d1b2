"""Training jobs end to end: scenarios, packet vs flow level, several jobs, per-dependency gaps."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from openmrc.pipeline.jobrun import packet_rows, run_flow
from openmrc.pipeline.scenario import ScenarioError, parse
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec
from openmrc.workloads.jobs.examples import CALIBRATION_SCENARIO

SMALL: dict[str, Any] = CALIBRATION_SCENARIO


def _packet_step(data: dict[str, Any]) -> float:
    sc = parse(copy.deepcopy(data))
    exp = sc.build()
    result = exp.run()
    rows = packet_rows(sc.spec, sc.jobs, sc.job_state, result)
    assert rows[0]["complete"]
    return float(rows[0]["step_time_us"])


def _flow_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    d = copy.deepcopy(data)
    d.setdefault("run", {})["mode"] = "flow"
    sc = parse(d)
    _res, rows, _wall = run_flow(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults)
    return rows


def test_flow_level_agrees_with_packet_level() -> None:
    """Calibration: the same iteration, packet by packet and as fluid flows: within 10 %."""
    packet = _packet_step(SMALL)
    flow = float(_flow_rows(SMALL)[0]["step_time_us"])
    assert abs(flow - packet) / packet < 0.10, (packet, flow)
    # and the network matters here: the step is longer than the compute critical path
    row = _flow_rows(SMALL)[0]
    assert row["exposed_comm_us"] > 0.05 * row["step_time_us"]


def test_dep_gaps_start_a_flow_after_its_dependency_plus_its_gap() -> None:
    spec = ClosSpec(planes=1, t0s=1, hosts_per_t0=4, t1s=1)
    exp = Experiment(spec)
    exp.add_flows(
        [
            FlowSpec(0, 1, 64 * 1024),
            FlowSpec(2, 3, 64 * 1024),
            FlowSpec(1, 2, 64 * 1024, deps=(0, 1), dep_gaps=(50_000_000, 0)),
        ],
        watch=True,
    )
    r = exp.run()
    a, b, c = r.flows
    assert a.rx_finish_ps is not None and b.rx_finish_ps is not None
    # ready 50 us after flow 0 arrived (flow 1 arrived about when flow 0 did)
    assert c.started_ps == max(a.rx_finish_ps + 50_000_000, b.rx_finish_ps)


def _two_jobs(second: list[int] | None) -> dict[str, Any]:
    model = {"layers": 2, "hidden": 512, "heads": 4, "seq_len": 256, "vocab": 4096}
    job2 = {
        "name": "victim",
        "model": {**model, "global_batch": 4},
        "parallel": {"dp": 4},
        "gpu": {"gpus_per_server": 1},
        "placement": [0, 4, 8, 12],
    }
    data: dict[str, Any] = {
        "seed": 1,
        "fabric": {"planes": 1, "t0s": 4, "hosts_per_t0": 4, "t1s": 1},
        "jobs": [job2],
    }
    if second is not None:
        data["jobs"].append(
            {
                "name": "neighbour",
                "model": {**model, "global_batch": len(second)},
                "parallel": {"dp": len(second)},
                "gpu": {"gpus_per_server": 1},
                "placement": second,
            }
        )
    return data


def test_second_job_moves_only_when_links_are_shared() -> None:
    alone = _flow_rows(_two_jobs(None))[0]["step_time_us"]
    # the neighbour's ring stays inside T0 0 on other hosts: no link in common
    apart = _flow_rows(_two_jobs([1, 2, 3]))[0]["step_time_us"]
    # the neighbour's ring crosses the same T0 uplinks (one T1 per plane)
    shared = _flow_rows(_two_jobs([1, 5, 9, 13]))[0]["step_time_us"]
    assert apart == alone
    assert shared > 1.05 * alone


def test_mrc_rides_out_a_t1_link_failure_roce_waits_for_routing() -> None:
    data = copy.deepcopy(SMALL)
    data["faults"] = [{"at_us": 200, "kind": "link_down", "target": "p0t0x0-p0t1x0"}]
    base = _flow_rows(SMALL)[0]["step_time_us"]
    mrc = _flow_rows(data)[0]["step_time_us"]
    data["transport"] = {"name": "roce", "baseline_fabric": {"convergence_delay_ps": 2_000_000_000}}
    roce = _flow_rows(data)[0]["step_time_us"]
    assert mrc < 1.1 * base
    assert roce > mrc + 1000  # a QP on the dead link waits for the 2 ms convergence


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"job": {"name": "x", "modle": {}}}, r"job.modle: unknown key"),
        ({"job": {"model": {"layers": 3}, "parallel": {"pp": 2}}}, r"job.parallel.pp"),
        ({"job": {"placement": [0, 1]}}, r"job.placement: 2 hosts for 1 ranks"),
        (
            {"job": {"model": {"global_batch": 64}, "parallel": {"dp": 64}}},
            r"job: needs 64 servers",
        ),
        ({"run": {"mode": "fluid"}}, r"run.mode: must be 'packet' or 'flow'"),
        (
            {"run": {"mode": "flow"}, "faults": [{"at_us": 1, "kind": "link_down", "target": "x"}]},
            r"faults\[0\].target",
        ),
    ],
)
def test_bad_jobs_name_the_field(patch: dict[str, Any], message: str) -> None:
    data: dict[str, Any] = {"fabric": {"planes": 1, "t0s": 2, "hosts_per_t0": 4, "t1s": 1}}
    data["job"] = {"model": {"layers": 2, "hidden": 64, "heads": 4, "global_batch": 1}}
    data["job"]["gpu"] = {"gpus_per_server": 1}
    for key, value in patch.items():
        if key == "job":
            data["job"] = {**data["job"], **value}
            for sub in ("model", "parallel"):
                if sub in value and isinstance(value[sub], dict):
                    data["job"][sub] = {
                        "layers": 2, "hidden": 64, "heads": 4, "global_batch": 2,
                        **value[sub],
                    } if sub == "model" else value[sub]  # fmt: skip
        else:
            data[key] = value
    with pytest.raises(ScenarioError, match=message):
        parse(data)


def _execute(data: dict[str, Any]) -> Any:
    from openmrc.pipeline.run import execute

    sc = parse(copy.deepcopy(data), name="t")
    return execute(sc, scenario_file="t.toml", overrides=[], workload={})


@pytest.mark.parametrize("mode", ["flow", "packet"])
def test_results_carry_jobs_and_a_valid_trace(mode: str) -> None:
    from openmrc.pipeline.results import validate

    data = copy.deepcopy(SMALL)
    data["run"] = {"mode": mode}
    data["faults"] = [{"at_us": 100, "kind": "link_down", "target": "p1t0x1-p1t1x0"}]
    out = _execute(data)
    validate(out.doc)
    (job,) = out.doc["jobs"]
    assert job["name"] == "small" and job["complete"] and job["step_time_us"] > 0
    assert job["compute_us"] <= job["step_time_us"]
    trace = out.trace
    events = trace["traceEvents"]
    assert {e["ph"] for e in events} <= {"M", "X", "b", "e", "i"}
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert sorted(names) == list(range(8))  # one track per rank
    spans: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] in ("X", "b", "e", "i"):
            assert isinstance(e["ts"], float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
            spans.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    # microseconds: the last compute span ends at the step time
    last = max(end for v in spans.values() for _s, end in v)
    assert abs(last - job["step_time_us"]) < 0.01
    for v in spans.values():  # a GPU computes one thing at a time
        v.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in itertools.pairwise(v))
    begins = sum(1 for e in events if e["ph"] == "b")
    assert begins == sum(1 for e in events if e["ph"] == "e") > 0
    assert any(e["ph"] == "i" and e["cat"] == "fault" for e in events)
