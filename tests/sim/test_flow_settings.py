"""Per-connection transport settings: QPs per connection, per-flow and per-collective overrides."""

from __future__ import annotations

import pytest

from openmrc.sim.experiment import Experiment, TransportConfig, flow_settings_keys
from openmrc.sim.factory import make_experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec
from openmrc.workloads import collectives as C
from tests.narrow import mrc_flows, roce_flows

SPEC = ClosSpec(planes=2, t0s=2, hosts_per_t0=2, t1s=2)


def test_mrc_qps_per_connection_stripe_messages() -> None:
    exp = Experiment(SPEC, transport=TransportConfig(qps=2))
    exp.add_flows(
        [FlowSpec(0, 3, 6 * 4096, message=4096), FlowSpec(1, 2, 8192, qps=3, message=4096)]
    )
    res = exp.run()
    assert res.all_ok
    a, b = mrc_flows(exp)
    assert len(a.qas) == 2 and len(b.qas) == 3
    # round-robin striping: 3 messages on each of a's QPs, one message per QP of b's first two
    assert [q.stats.rx_messages for q in a.qbs] == [3, 3]
    assert [q.stats.rx_messages for q in b.qbs] == [1, 1, 0]


def test_roce_qps_and_settings_per_flow() -> None:
    exp = make_experiment(SPEC, transport=TransportConfig(name="roce"))
    exp.add_flows(
        [
            FlowSpec(0, 3, 1 << 16),
            FlowSpec(1, 2, 1 << 16, qps=4),
            FlowSpec(2, 1, 1 << 16, settings={"roce": {"dcqcn": False, "qps": 2}}),
        ]
    )
    res = exp.run()
    assert res.all_ok
    a, b, c = roce_flows(exp)
    assert [len(f.senders) for f in (a, b, c)] == [1, 4, 2]
    assert a.senders[0].cfg.dcqcn.enabled and not c.senders[0].cfg.dcqcn.enabled


def test_transport_qps_sets_the_roce_qp_count() -> None:
    exp = make_experiment(SPEC, transport=TransportConfig(name="roce", qps=3))
    exp.add_flow(FlowSpec(0, 3, 1 << 16))
    assert exp.run().all_ok
    assert len(roce_flows(exp)[0].senders) == 3


def test_a_connection_key_keeps_its_ecmp_paths() -> None:
    exp = make_experiment(SPEC, transport=TransportConfig(name="roce"))
    exp.add_flows(
        [
            FlowSpec(0, 3, 4096, conn="x", qps=2),
            FlowSpec(0, 3, 4096, conn="x", qps=2, deps=(0,)),
            FlowSpec(0, 3, 4096, conn="y", qps=2, deps=(1,)),
        ]
    )
    assert exp.run().all_ok
    a, b, c = ([s.sport for s in f.senders] for f in roce_flows(exp))
    assert a == b and a != c


def test_collective_settings_reach_every_flow() -> None:
    exp = Experiment(SPEC)
    exp.add_collective(C.allgather(4, 1 << 16), settings={"ev_count": 2}, qps=2)
    assert exp.run().all_ok
    for f in mrc_flows(exp):
        assert len(f.qas) == 2
        assert all(q.attr.ev_profile.ev_count == 2 for q in f.qas)


def test_bad_settings_are_named() -> None:
    assert "ev_count" in flow_settings_keys() and "mtu" not in flow_settings_keys()
    exp = Experiment(SPEC)
    with pytest.raises(ValueError, match=r"flow 0\.settings\.mtu: is experiment-wide"):
        exp.add_flow(FlowSpec(0, 1, 10, settings={"mtu": 1024}))
    with pytest.raises(ValueError, match=r"flow 0\.settings\.colour: unknown"):
        exp.add_flow(FlowSpec(0, 1, 10, settings={"colour": 1}))
    with pytest.raises(ValueError, match="cc"):
        exp.add_flow(FlowSpec(0, 1, 10, settings={"cc": "reno"}))
    with pytest.raises(ValueError, match="flow.qps"):
        exp.add_flow(FlowSpec(0, 1, 10, qps=0))
