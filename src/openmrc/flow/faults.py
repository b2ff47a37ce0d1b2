"""A scenario's ``[[faults]]`` entry as the flow-level model's single-target faults.

The packet simulator applies a fault entry to one ``target`` or to a group
(``links = "host" | "fabric" | "all"``, ``switches = "t0" | "t1" | "all"``,
``hosts`` / ``planes`` lists of NIC ports, with the ``planes``, ``hosts``,
``t0s``, ``t1s`` filters of :mod:`openmrc.sim.fault_select`), and expands a
``flap`` into its downs and ups.  :func:`expand` does the same from the
fabric's shape alone (no packet fabric is built), so every fault the packet
mode accepts for jobs runs at flow level, in the same order, or is one
:class:`ValueError` naming the field and the reason.

Not modelled at flow level (a clear error): ``link_loss`` and ``ev_loss``
(random per-packet loss has no fluid equivalent) and one-direction
``link_silent``.
"""

from __future__ import annotations

from typing import Any

from ..sim.fault_select import link_names, switch_names
from ..topology import ClosSpec
from .model import FluidFault

US = 1_000_000

#: what the flow-level model refuses, and why (the error names the kind).
NOT_AT_FLOW_LEVEL = {
    "link_loss": "random per-packet loss has no fluid equivalent",
    "ev_loss": "per-EV packet loss has no fluid equivalent",
}


def _in_range(values: list[int] | None, hi: int, key: str) -> list[int] | None:
    if values is None:
        return None
    if not isinstance(values, list):
        raise ValueError(f"{key}: must be a list of integers")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
            raise ValueError(f"{key}: {v!r} is out of range (0..{hi - 1})")
    return values


def _flap_times(f: Any) -> list[tuple[int, bool]]:
    """(time, up) of a flap's toggles, as FaultInjector.flap / flap_schedule schedule them."""
    at = int(f.at_us * US)
    period = int(f.period_us * US)
    out: list[tuple[int, bool]] = []
    if f.count:
        down = int(f.down_us * US)
        if period <= 0 or not 0 < down < period:
            raise ValueError("a flap with count needs period_us > 0 and 0 < down_us < period_us")
        for k in range(int(f.count)):
            out += [(at + k * period, False), (at + k * period + down, True)]
        return out
    until = int(f.until_us * US)
    if period <= 0 or not 0 < f.duty < 1 or until <= at:
        raise ValueError(
            "flap needs period_us > 0, 0 < duty < 1 and until_us > at_us "
            "(or period_us, down_us and count)"
        )
    down = round(period * (1.0 - f.duty))
    t = at
    while t + down <= until:
        out += [(t, False), (t + down, True)]
        t += period
    return out


def expand(f: Any, spec: ClosSpec, key: str) -> list[FluidFault]:
    """The single-target flow-level faults of one ``[[faults]]`` entry ``f`` (a FaultSpec).

    ``key`` names the entry in errors (``faults[2]``); a ValueError's text starts with it.
    """
    kind = f.kind
    at = int(f.at_us * US)
    if kind in NOT_AT_FLOW_LEVEL:
        raise ValueError(
            f"{key}.kind: {kind} is not modelled at flow level ({NOT_AT_FLOW_LEVEL[kind]}); "
            'run it with run.mode = "packet"'
        )
    try:
        planes = _in_range(f.planes, spec.planes, f"{key}.planes")
        hosts = _in_range(f.hosts, spec.hosts, f"{key}.hosts")
        t0s = _in_range(f.t0s, spec.t0s, f"{key}.t0s")
        t1s = _in_range(f.t1s, spec.t1s, f"{key}.t1s")
        if kind.startswith("link") or kind == "flap":
            if f.switches:
                raise ValueError(f"{key}.switches: a {kind} acts on links (use links = ...)")
            if kind == "link_silent" and f.direction != "both":
                raise ValueError(
                    f"{key}.direction: the flow-level model silences a whole link "
                    f"(direction = 'both'), not {f.direction!r}"
                )
            if f.links:
                if f.target:
                    raise ValueError(f"{key}: give either target or links, not both")
                names = link_names(spec, f.links, planes, hosts, t0s, t1s)
                if not names:
                    raise ValueError(f"{key}: the selection matches no link")
            else:
                names = [f.target]
            if kind == "flap":
                toggles = _flap_times(f)
                return [
                    FluidFault(t, "link_up" if up else "link_down", n)
                    for t, up in toggles
                    for n in names
                ]
            return [FluidFault(at, kind, n) for n in names]
        if kind.startswith("switch"):
            if f.links:
                raise ValueError(f"{key}.links: a {kind} acts on switches (use switches = ...)")
            if f.switches:
                if f.target:
                    raise ValueError(f"{key}: give either target or switches, not both")
                if hosts is not None:
                    raise ValueError(f"{key}.hosts: not a switch filter (planes, t0s, t1s)")
                index = t0s if f.switches == "t0" else t1s if f.switches == "t1" else None
                names = switch_names(spec, f.switches, planes, index)
                if not names:
                    raise ValueError(f"{key}: the selection matches no switch")
            else:
                names = [f.target]
            return [FluidFault(at, kind, n) for n in names]
        if kind.startswith("nic_port"):
            if f.host >= 0 or f.plane >= 0:
                pairs = [(f.host, f.plane)]
            elif hosts is not None or planes is not None:
                pairs = [
                    (h, p)
                    for h in (hosts if hosts is not None else range(spec.hosts))
                    for p in (planes if planes is not None else range(spec.planes))
                ]
            else:
                raise ValueError(f"{key}.host: a {kind} needs host and plane (or hosts / planes)")
            return [FluidFault(at, kind, "", h, p) for h, p in pairs]
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(key) else f"{key}.{msg}") from None
    raise ValueError(f"{key}.kind: {kind!r} is not a fault the flow-level model knows")


__all__ = ["NOT_AT_FLOW_LEVEL", "expand", "link_names", "switch_names"]
