"""Groups of links and switches for faults: "every NIC ingress of every plane" in one call.

    links = select_links(fabric, "host", planes=[0, 1])     # host-T0 links of planes 0, 1
    for link in links:
        exp.faults.link_loss(link, 0.001, at_ps=0, direction="down")   # NIC ingress

A *host* link joins a host's NIC port to its T0 (``direction="down"`` is the
NIC's ingress, ``"up"`` its egress); a *fabric* link joins a T0 to a T1
(``"up"`` is T0 -> T1).  Filters (None: all) narrow the group: ``planes``,
``hosts`` (host links of those hosts), ``t0s`` and ``t1s`` (switch indices
within their plane).  The order is the fabric's, so a group is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openmrc.sim.fabric import Fabric
    from openmrc.sim.link import Link
    from openmrc.sim.switch import Switch

LINK_TIERS = ("host", "fabric", "all")
SWITCH_TIERS = ("t0", "t1", "all")


def _ok(value: int, allowed: Iterable[int] | None) -> bool:
    return allowed is None or value in allowed


def select_links(
    fabric: Fabric,
    tier: str,
    planes: Iterable[int] | None = None,
    hosts: Iterable[int] | None = None,
    t0s: Iterable[int] | None = None,
    t1s: Iterable[int] | None = None,
) -> list[Link]:
    """The links of ``tier`` ("host", "fabric" or "all") that pass every filter."""
    if tier not in LINK_TIERS:
        raise ValueError(f"links: must be one of {', '.join(LINK_TIERS)}, got {tier!r}")
    planes_, hosts_, t0s_, t1s_ = (None if x is None else set(x) for x in (planes, hosts, t0s, t1s))
    switches = fabric.switches
    out = []
    for link in fabric.links.values():
        info = link.info
        upper = switches[info.b]
        if info.a in switches:  # T0 - T1
            if tier == "host" or hosts_ is not None:
                continue
            lower = switches[info.a]
            if not (_ok(lower.index, t0s_) and _ok(upper.index, t1s_)):
                continue
        else:  # host - T0
            if tier == "fabric" or t1s_ is not None:
                continue
            if not (_ok(int(info.a.lstrip("h")), hosts_) and _ok(upper.index, t0s_)):
                continue
        if _ok(upper.plane, planes_):
            out.append(link)
    return out


def select_switches(
    fabric: Fabric,
    tier: str,
    planes: Iterable[int] | None = None,
    index: Iterable[int] | None = None,
) -> list[Switch]:
    """The switches of ``tier`` ("t0", "t1" or "all") in ``planes`` with an index in ``index``."""
    if tier not in SWITCH_TIERS:
        raise ValueError(f"switches: must be one of {', '.join(SWITCH_TIERS)}, got {tier!r}")
    planes_ = None if planes is None else set(planes)
    index_ = None if index is None else set(index)
    want = {"t0": (0,), "t1": (1,), "all": (0, 1)}[tier]
    return [
        sw
        for sw in fabric.switches.values()
        if sw.tier in want and _ok(sw.plane, planes_) and _ok(sw.index, index_)
    ]


__all__ = ["LINK_TIERS", "SWITCH_TIERS", "select_links", "select_switches"]
