"""Latency model: NIC transmit/receive processing and switch forwarding, apart from the links."""

from __future__ import annotations

from pathlib import Path

import pytest

from openmrc.pipeline.scenario import load
from openmrc.sim.config import (
    DEPLOYED_LINK_DELAY_PS,
    DEPLOYED_NIC_LATENCY_PS,
    DEPLOYED_SWITCH_LATENCY_PS,
    FabricConfig,
)
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec
from tests.narrow import known

PAPER = Path(__file__).resolve().parents[2] / "scenarios" / "paper" / "latency-p2p.toml"
SPEC = ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=1, link_delay_ps=100_000)


def _half_rtts(cfg: FabricConfig) -> tuple[float, float]:
    """Half the post-to-completion time (us) of a 2 B write within a T0 and across T1."""
    exp = Experiment(SPEC, fabric_config=cfg)
    exp.add_flows([FlowSpec(0, 1, 2, message=2), FlowSpec(0, 2, 2, message=2, deps=(0,))])
    res = exp.run()
    assert res.all_ok
    local, cross = (known(f.fct_ps) / 2e6 for f in res.flows)
    return local, cross


def test_paper_point_to_point_latency_within_ten_percent() -> None:
    res = load(PAPER).run()
    assert res.all_ok
    local, cross = (known(f.fct_ps) / 2e6 for f in res.flows)
    assert local == pytest.approx(5.09, rel=0.10)
    assert cross == pytest.approx(6.54, rel=0.10)


def test_the_defaults_are_the_sourced_constants() -> None:
    """The simulator's defaults are the deployed latency model (docs/latency.md)."""
    cfg = FabricConfig()
    assert ClosSpec().link_delay_ps == DEPLOYED_LINK_DELAY_PS == 100_000
    assert cfg.switch_latency_ps == DEPLOYED_SWITCH_LATENCY_PS == 600_000
    assert cfg.nic_tx_latency_ps == cfg.nic_rx_latency_ps == DEPLOYED_NIC_LATENCY_PS == 2_100_000
    assert FabricConfig.deployed_latency() == cfg


def test_paper_latency_comes_from_the_defaults() -> None:
    """The paper's 5.09 / 6.54 us from the simulator's defaults (the sourced
    constants), and the bundled scenario sets no latency of its own."""
    spec = ClosSpec(planes=8, t0s=2, hosts_per_t0=2, t1s=2)
    exp = Experiment(spec)
    exp.add_flows([FlowSpec(0, 1, 2, message=2), FlowSpec(0, 2, 2, message=2, deps=(0,))])
    res = exp.run()
    assert res.all_ok
    local, cross = (known(f.fct_ps) / 2e6 for f in res.flows)
    assert local == pytest.approx(5.09, rel=0.05)
    assert cross == pytest.approx(6.54, rel=0.05)
    sc = load(PAPER)
    assert sc.spec.link_delay_ps == DEPLOYED_LINK_DELAY_PS
    assert not {"switch_latency_ps", "nic_tx_latency_ps", "nic_rx_latency_ps"} & set(sc.switches)
    assert "link_delay_ps" not in PAPER.read_text()


def test_each_latency_adds_where_it_should() -> None:
    base_local, base_cross = _half_rtts(FabricConfig.ideal_latency())
    # NIC processing: once per packet leaving (tx) or reaching (rx) a host, data and ACK
    local, cross = _half_rtts(FabricConfig.ideal_latency(nic_tx_latency_ps=1_000_000))
    assert local - base_local == pytest.approx(1.0, abs=1e-6)
    assert cross - base_cross == pytest.approx(1.0, abs=1e-6)
    local, cross = _half_rtts(FabricConfig.ideal_latency(nic_rx_latency_ps=500_000))
    assert local - base_local == pytest.approx(0.5, abs=1e-6)
    # a switch: one on the way within a T0, three across T1
    local, cross = _half_rtts(FabricConfig.ideal_latency(switch_latency_ps=200_000))
    assert local - base_local == pytest.approx(0.2, abs=1e-6)
    assert cross - base_cross == pytest.approx(0.6, abs=1e-6)


def test_latencies_enter_the_base_rtt() -> None:
    plain = Experiment(SPEC, fabric_config=FabricConfig.ideal_latency()).base_rtt_ps
    slow = Experiment(
        SPEC,
        fabric_config=FabricConfig(
            nic_tx_latency_ps=1_000, nic_rx_latency_ps=2_000, switch_latency_ps=10
        ),
    ).base_rtt_ps
    assert slow - plain == 2 * (1_000 + 2_000 + 3 * 10)


def test_negative_latency_is_refused() -> None:
    with pytest.raises(ValueError, match="nic_rx_latency_ps"):
        FabricConfig(nic_rx_latency_ps=-1).validate()


def test_resolved_base_rtt_is_the_one_the_run_used() -> None:
    """The provenance's ``switches.base_rtt_ps`` (which `openmrc paper` reads for its
    "within 4 base RTTs" checks) counts the NIC and switch latencies, as the run does."""
    from openmrc.pipeline.results import resolved

    sc = load(PAPER)
    exp = sc.build()
    rtt = resolved(sc, {})["switches"]["base_rtt_ps"]
    assert rtt == exp.fabric.config.base_rtt_ps == exp.base_rtt_ps
    assert rtt > 2 * FabricConfig().path_latency_ps()


def test_flow_level_one_way_latency_matches_the_packet_fabric() -> None:
    """The flow-level model's per-step latency is what one MTU packet takes across T1
    in the packet simulator at its defaults (NICs and switches included)."""
    from openmrc.flow.model import one_way_ps
    from openmrc.sim import Fabric, Simulator
    from openmrc.topology import Topology
    from openmrc.transport.ev import make_ev
    from openmrc.wire.packets import DataPacket, Opcode

    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2)
    sim = Simulator(1)
    fabric = Fabric(sim, Topology(spec))
    got: list[int] = []
    for h in range(spec.hosts):
        fabric.attach_host(h, lambda pkt, plane, now: got.append(now))
    fabric.send(0, DataPacket(1, make_ev(0, 1), Opcode.WRITE_MIDDLE, 0, 0, 0, 0, 4096), dst=3)
    sim.run()
    (arrival,) = got
    assert one_way_ps(spec) == pytest.approx(arrival, rel=0.05)
