"""openmrc's packet-level discrete-event simulator: event loop and network fabric.

* :mod:`~openmrc.sim.engine` -- :class:`Simulator`, the heap of timed events (ps);
* :mod:`~openmrc.sim.config` -- :class:`FabricConfig`, queue/ECN/trim parameters;
* :mod:`~openmrc.sim.port` -- :class:`EgressPort`, queues + serializer + wire state;
* :mod:`~openmrc.sim.link` -- :class:`Link`, a full-duplex pair of ports;
* :mod:`~openmrc.sim.switch` -- :class:`Switch` (SRv6 uSID forwarding), :class:`HostEnd`;
* :mod:`~openmrc.sim.fabric` -- :class:`Fabric`, built from a topology; the NIC API;
* :mod:`~openmrc.sim.faults` -- :class:`FaultInjector`;
* :mod:`~openmrc.sim.metrics` -- :class:`Metrics`, counters, samples, JSON/CSV.
"""

from openmrc.sim.config import FabricConfig
from openmrc.sim.engine import MS, NS, US, Simulator
from openmrc.sim.fabric import Fabric
from openmrc.sim.faults import FaultInjector
from openmrc.sim.link import Link
from openmrc.sim.metrics import Metrics
from openmrc.sim.port import EgressPort
from openmrc.sim.switch import HostEnd, Switch

__all__ = [
    "MS",
    "NS",
    "US",
    "EgressPort",
    "Fabric",
    "FabricConfig",
    "FaultInjector",
    "HostEnd",
    "Link",
    "Metrics",
    "Simulator",
    "Switch",
]
