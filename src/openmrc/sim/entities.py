"""The entities of an experiment's simulator: whom each event runs for.

Every event is keyed by the entity that scheduled it and that entity's own
counter (:mod:`openmrc.sim.engine`), so the numbering of entities is part of
the event order: it must be the same in the sequential run and on every rank
of a partitioned one (:mod:`openmrc.sim.partition`), which is why both make
them here, in this order:

* :data:`~openmrc.sim.engine.GLOBAL` (0): set-up, faults, scheduled starts;
* :data:`~openmrc.sim.engine.SAMPLER` (1): the sampler's ticks;
* host ``h`` (``FIRST_ENTITY + h``): its NIC, host ends and NIC ports;
* then each switch with its egress ports, in the fabric's order.
"""

from __future__ import annotations

from typing import Any

from .engine import SAMPLER


def register(sim: Any, fabric: Any, hosts: list[Any], sampler: Any) -> list[int]:
    """Make the entities of ``fabric``'s hosts and switches on ``sim`` (in the order above)
    and bind ``sampler`` to :data:`SAMPLER`; returns each host's entity."""
    host_entity = []
    for h, host in enumerate(hosts):
        # (a host another rank holds is None, with no ends or ports here: its entity
        # is numbered all the same)
        objs = [host, *fabric.host_ends[h], *fabric.host_ports[h]] if host is not None else []
        host_entity.append(sim.add_entity(objs))
    for sw in fabric.switches.values():
        sim.add_entity([sw, *[p for p in sw.ports if p is not None]])
    sim.set_entity(sampler, SAMPLER)
    return host_entity
