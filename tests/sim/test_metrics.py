"""Result metrics: idle-free sampling, steady-state and partial goodput, FCT percentiles, slowdown,
per-plane and per-EV activity."""

from __future__ import annotations

from pathlib import Path

import pytest

from openmrc.sim.experiment import Experiment, TransportConfig
from openmrc.sim.factory import make_experiment
from openmrc.sim.metrics import percentile, write_csv_rows
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec
from tests.narrow import known

SPEC = ClosSpec(planes=2, t0s=2, hosts_per_t0=2, t1s=2)
MS = 1_000_000_000


def test_sampler_does_not_tick_through_idle_time() -> None:
    exp = Experiment(SPEC)
    exp.add_flows([FlowSpec(0, 3, 1 << 20), FlowSpec(1, 2, 1 << 20, start_ps=50 * MS)])
    res = exp.run()
    assert res.all_ok
    # 50 ms at 10 us is 5000 intervals; only those with traffic (and one after) run
    assert res.sampling["ticks"] < 60
    assert res.sampling["ticks"] + res.sampling["skipped"] == len(res.goodput_series["0->3"])
    assert len(res.goodput_series["1->2"]) == len(res.goodput_series["0->3"]) > 5000
    for f in res.flows:
        # the series still accounts for every byte, at the right time
        series = res.goodput_series[f.name]
        assert sum(series) * 10 / 8 * 1000 == pytest.approx(f.size, rel=1e-3)
        first = next(i for i, v in enumerate(series) if v)
        assert first * 10_000_000 <= known(f.started_ps) < (first + 1) * 10_000_000
    assert sum(res.plane_series["plane0"]) > 0 and len(res.plane_series["plane1"]) > 5000


def test_steady_state_goodput_leaves_out_start_up_and_records_its_window() -> None:
    exp = Experiment(SPEC, sample_interval_ps=2_000_000)
    exp.add_flow(FlowSpec(0, 3, 4 << 20))
    res = exp.run()
    (f,) = res.flows
    lo, hi = known(f.steady_window_us)
    start, end = known(f.started_ps) / 1e6, known(f.finish_ps) / 1e6
    assert start + 0.1 * (end - start) <= lo < hi <= end
    series = res.goodput_series[f.name]
    i0, i1 = round(lo / 2), round(hi / 2)
    assert f.steady_goodput_gbps == pytest.approx(sum(series[i0:i1]) / (i1 - i0), rel=1e-3)
    # no start-up in the window: at least the whole-flow goodput, at most two 100G ports
    assert f.goodput_gbps <= known(f.steady_goodput_gbps) <= 200


def test_unfinished_flows_report_partial_bytes() -> None:
    exp = make_experiment(SPEC, transport=TransportConfig(name="roce"))
    exp.add_flow(FlowSpec(0, 3, 64 << 20))
    res = exp.run(300_000_000)
    (f,) = res.flows
    assert f.finish_ps is None and f.goodput_gbps == 0.0
    assert 0 < f.bytes_received < f.size
    assert f.partial_goodput_gbps == pytest.approx(f.bytes_received * 8 / 300_000, rel=1e-6)
    assert 80 < f.partial_goodput_gbps <= 100
    assert f.steady_goodput_gbps is not None and f.steady_goodput_gbps > 80
    assert f.as_dict()["partial_goodput_gbps"] > 0


def test_fct_percentiles_and_slowdown() -> None:
    exp = Experiment(SPEC)
    # 0->3 alone at first; 1->3 and 2->3 then share 3's NIC
    exp.add_flows(
        [
            FlowSpec(0, 3, 1 << 20),
            FlowSpec(1, 3, 1 << 20, start_ps=200_000_000),
            FlowSpec(2, 3, 1 << 20, start_ps=200_000_000),
        ]
    )
    res = exp.run()
    alone, a, b = res.flows
    assert alone.slowdown == pytest.approx(1.0, abs=0.1)
    sa, sb = known(a.slowdown), known(b.slowdown)
    assert min(sa, sb) > 1.2 and max(sa, sb) > 1.6
    s = res.fct_summary
    fcts = sorted(known(f.fct_ps) / 1e6 for f in res.flows)
    assert s["finished"] == 3 and s["fct_us"] == {"p50": fcts[1], "p99": fcts[2], "max": fcts[2]}
    assert s["slowdown"]["max"] == max(known(f.slowdown) for f in res.flows)
    assert res.as_dict()["fct_summary"] == s
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([], 99) is None


def test_per_plane_and_per_ev_activity() -> None:
    exp = Experiment(SPEC)
    exp.track_ev_activity()
    exp.add_flow(FlowSpec(0, 3, 1 << 20))
    res = exp.run()
    planes = [sum(res.plane_series[f"plane{p}"]) for p in range(2)]
    assert planes[0] == pytest.approx(planes[1], rel=0.2)  # MRC sprays both planes
    evs = {k: sum(v) for k, v in res.ev_series.items()}
    assert len(evs) >= 4 and all(k.startswith("h0:ev") for k in evs)
    # every payload byte sent was on some EV (retransmissions would only add)
    assert sum(evs.values()) * 10 / 8 * 1000 >= (1 << 20) * 0.999
    roce = make_experiment(SPEC, transport=TransportConfig(name="roce"))
    roce.add_flow(FlowSpec(0, 3, 1 << 20))
    res = roce.run()
    assert sum(res.plane_series["plane1"]) == 0 < sum(res.plane_series["plane0"])


def test_a_large_fabric_lists_only_its_active_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    from openmrc.sim import metrics

    exp = Experiment(ClosSpec(planes=2, t0s=2, hosts_per_t0=2, t1s=2), seed=1)
    exp.add_flows([FlowSpec(0, 3, 64 << 10)])
    exp.run()
    full = exp.fabric.metrics.snapshot()
    monkeypatch.setattr(metrics, "FULL_ROWS_LIMIT", 0)  # as if it had a million ports
    small = exp.fabric.metrics.snapshot()
    active = [row for row in full["ports"] if row["tx_pkts"] or not row["up"]]
    assert 0 < len(active) < len(full["ports"])
    assert small["ports"] == active
    assert small["port_rows"] == "active"
    assert small["totals"] == full["totals"]
    assert small["hosts"] == []
    assert small["host_totals"]["received"] == sum(r["received"] for r in full["hosts"]) > 0
    # the native totals (when built) and the Python ones agree
    monkeypatch.setattr(metrics, "kernel", None)
    assert exp.fabric.metrics.snapshot() == small


def test_csv_columns_are_every_rows_keys_in_first_seen_order(tmp_path: Path) -> None:
    """write_csv_rows: the header is the union of the rows' keys in the order first
    seen (a goodput.csv has one column per flow: 16,128 in a 64-rank ring)."""
    rows = [{"t": 1, "b": 2}, {"a": 3, "t": 4}, {"c": 5, "b": 6}]
    path = write_csv_rows(tmp_path / "x.csv", rows)
    lines = path.read_text().splitlines()
    assert lines == ["t,b,a,c", "1,2,,", "4,,3,", ",6,,5"]
