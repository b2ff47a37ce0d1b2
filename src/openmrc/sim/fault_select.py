"""Groups of links and switches for faults: "every NIC ingress of every plane" in one call.

    for name in link_names(spec, "host", planes=[0, 1]):     # host-T0 links of planes 0, 1
        exp.faults.link_loss(name, 0.001, at_ps=0, direction="down")   # NIC ingress

A *host* link joins a host's NIC port to its T0 (``direction="down"`` is the
NIC's ingress, ``"up"`` its egress); a *fabric* link joins a T0 to a T1
(``"up"`` is T0 -> T1).  Filters (None: all) narrow the group: ``planes``,
``hosts`` (host links of those hosts), ``t0s`` and ``t1s`` (switch indices
within their plane).  Groups are named from the fabric's shape alone, in the
fabric's order (per plane: host links in host order, then T0-T1 links T0 major;
T0s, then T1s), so a group is deterministic and the same where no fabric is
built (the flow-level model, :mod:`openmrc.flow.faults`) or only part of
one (a rank of a partitioned run).
"""

from __future__ import annotations

from collections.abc import Iterable

from openmrc.topology import ClosSpec

LINK_TIERS = ("host", "fabric", "all")
SWITCH_TIERS = ("t0", "t1", "all")


def _filter(values: Iterable[int] | None) -> set[int] | None:
    return None if values is None else set(values)


def link_names(
    spec: ClosSpec,
    tier: str,
    planes: Iterable[int] | None = None,
    hosts: Iterable[int] | None = None,
    t0s: Iterable[int] | None = None,
    t1s: Iterable[int] | None = None,
) -> list[str]:
    """The names of the links of ``tier`` ("host", "fabric" or "all") that pass every filter."""
    if tier not in LINK_TIERS:
        raise ValueError(f"links: must be one of {', '.join(LINK_TIERS)}, got {tier!r}")
    planes_, hosts_, t0s_, t1s_ = (_filter(x) for x in (planes, hosts, t0s, t1s))
    out = []
    hpt = spec.hosts_per_t0
    for p in range(spec.planes):
        if planes_ is not None and p not in planes_:
            continue
        if tier != "fabric" and t1s_ is None:
            for h in range(spec.hosts):
                if (hosts_ is None or h in hosts_) and (t0s_ is None or h // hpt in t0s_):
                    out.append(f"h{h}-p{p}t0x{h // hpt}")
        if tier != "host" and hosts_ is None:
            for a in range(spec.t0s):
                if t0s_ is not None and a not in t0s_:
                    continue
                for k in range(spec.t1s):
                    if t1s_ is None or k in t1s_:
                        out.append(f"p{p}t0x{a}-p{p}t1x{k}")
    return out


def switch_names(
    spec: ClosSpec,
    tier: str,
    planes: Iterable[int] | None = None,
    index: Iterable[int] | None = None,
) -> list[str]:
    """The names of the switches of ``tier`` ("t0", "t1" or "all") in ``planes`` with an
    index in ``index``."""
    if tier not in SWITCH_TIERS:
        raise ValueError(f"switches: must be one of {', '.join(SWITCH_TIERS)}, got {tier!r}")
    planes_, index_ = _filter(planes), _filter(index)
    out = []
    for p in range(spec.planes):
        if planes_ is not None and p not in planes_:
            continue
        if tier != "t1":
            out += [f"p{p}t0x{a}" for a in range(spec.t0s) if index_ is None or a in index_]
        if tier != "t0":
            out += [f"p{p}t1x{k}" for k in range(spec.t1s) if index_ is None or k in index_]
    return out


__all__ = ["LINK_TIERS", "SWITCH_TIERS", "link_names", "switch_names"]
