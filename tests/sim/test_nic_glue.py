"""The MRC NIC's per-packet glue (``SimHost.kick``): what it keeps between packets
(the fault injector's per-EV loss table) must follow the host's state as it changes
during a run.  The routes it builds (from the last peer's bases, kept) are checked
in ``test_fabric.py`` (test_a_nic_builds_each_route_from_one_list_per_destination)."""

from __future__ import annotations

from openmrc.sim import FaultInjector
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec

SPEC = ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2)


def test_per_ev_loss_is_read_from_the_injector_the_host_has_now() -> None:
    # kick holds the per-EV loss table of the injector it last saw: an injector given
    # to the host mid-run (after it sent with the first one) is the one that drops
    exp = Experiment(SPEC, seed=3)
    exp.add_flows([FlowSpec(0, 2, 1 << 20)])
    first = exp.faults
    later = FaultInjector(exp.fabric)
    sent_before: list[int] = []

    def swap() -> None:
        host = exp.hosts[0]
        assert host is not None
        sent_before.append(exp.flows[0].qa.stats.tx_data_packets)  # type: ignore[attr-defined]
        later.ev_loss(list(exp.flows[0].qa.paths.slots), 1.0)  # type: ignore[attr-defined]
        host.faults = later

    exp.sim.schedule(20_000_000, swap)
    exp.run(until_ps=60_000_000)
    assert sent_before and sent_before[0] > 0
    assert first.ev_dropped == 0
    assert later.ev_dropped > 0
