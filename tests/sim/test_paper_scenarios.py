"""The bundled paper scenarios (scenarios/paper/): the shapes the paper published."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from openmrc.pipeline.scenario import load
from openmrc.wire.packets import DATA_HEADER_BYTES

US = 1_000_000
PAPER = Path(__file__).resolve().parents[2] / "scenarios" / "paper"
PAYLOAD_SHARE = 4096 / (4096 + DATA_HEADER_BYTES + 38)


def test_ecn_two_flows_moves_flow_one_to_its_backup_and_both_run_near_peak() -> None:
    sc = load(PAPER / "ecn-two-flows.toml")
    exp = sc.build()
    r = exp.run()
    assert r.all_ok
    one, two = exp.flows
    assert one.qa.paths.slots == [0x10]  # type: ignore[attr-defined]  # flow 1 ended on EV-B
    assert two.qa.paths.slots == [0x00]  # type: ignore[attr-defined]  # flow 2 stayed on EV-A
    moved = [e for e in r.ev_events if e["reason"] == "mapped out: ECN"]
    assert [(e["host"], e["ev"]) for e in moved] == [(0, 0x00)]
    join = sc.flows[1].start_ps
    assert join < moved[0]["time_us"] * US <= join + 50 * US
    # After the move (and flow 2's ramp) both flows run within 10 % of their peak.
    peak = sc.spec.host_gbps * PAYLOAD_SHARE
    k = r.sample_interval_ps
    end = min(f.finish_ps for f in r.flows if f.finish_ps is not None) // k - 1
    for name, series in r.goodput_series.items():
        window = series[(join + 150 * US) // k : end]
        assert len(window) >= 5
        mean = sum(window) / len(window)
        assert mean >= 0.9 * peak, (name, mean, peak)


def test_20pct_drop_on_one_of_16_evs_replaces_it_and_goodput_holds() -> None:
    sc = load(PAPER / "drop-20pct-one-ev.toml")
    flow = replace(sc.flows[0], size=16 << 20)  # reduced size
    sc.flows = [flow]
    exp = sc.build()
    r = exp.run()
    assert r.all_ok
    assert exp.faults.ev_dropped > 0
    paths = exp.flows[0].qa.paths  # type: ignore[attr-defined]
    assert len(paths.slots) == 16
    assert 0x13 not in paths.slots
    assert {0x10003, 0x10013} & set(paths.slots)  # a plane-3 backup took its place
    bad = [e for e in r.ev_events if e["new"] == "ASSUMED_BAD"]
    assert [e["ev"] for e in bad] == [0x13]
    rtt = exp.base_rtt_ps  # the run's own (NIC and switch latencies included)
    fault_at = int(sc.faults[0].at_us * US)
    assert bad[0]["time_us"] * US - fault_at <= 4 * rtt
    # Goodput within 2 % of the same run without the fault.
    sc.faults = []
    clean = sc.build().run()
    assert clean.all_ok
    g, g0 = r.flows[0].goodput_gbps, clean.flows[0].goodput_gbps
    assert g >= 0.98 * g0, (g, g0)
