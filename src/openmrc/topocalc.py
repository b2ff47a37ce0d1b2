"""Closed-form arithmetic of multi-plane fat-tree (Clos) fabrics: ``openmrc topo``.

Nothing is built: every number is a formula in the switch radix ``P`` (ports
per switch, ``capacity / link speed``), the number of tiers ``T`` and the number
of planes, so it answers instantly at any size (a 131,072-host fabric costs the
same as a 16-host one).  :mod:`openmrc.topology` builds actual fabrics (address
plan, uSID tables); this module only counts.

Each plane is a non-blocking folded Clos: every switch below the top tier has
``P/2`` ports down and ``P/2`` up, the top tier uses all ``P`` ports down.  With
``k = P/2``:

- hosts (NICs) per plane ``2 k^T`` (two tiers ``P^2/2``, three ``P^3/4``); a
  host has one port in every plane, so the fabric has as many hosts as a plane;
- switches per plane ``2 k^(T-1)`` in each tier below the top and ``k^(T-1)``
  at the top, ``(2T - 1) k^(T-1)`` in all (two tiers ``3P/2``, three
  ``5P^2/4``);
- ``T`` link layers (NIC-T0, T0-T1, ...), each with one link per host per plane;
- longest path ``2T - 1`` switches; one-hop reach (hosts under one T0) ``k``.

Capacity a node loses per failure (with MRC spraying over every path; the MRC
notes, section 10, and the paper use these):

- a NIC-T0 link, or the node's T0: one plane, ``1/planes`` of the node (all of
  it with one plane);
- a link between tier ``i-1`` and tier ``i``, or a tier-``i`` switch
  (``i >= 1``): ``1/k^i`` of that plane's capacity through tier ``i`` (the
  paper quotes this figure: 1/256 = 0.4 % at 100G, 1/32 = 3 % at 800G), which is
  ``1/(k^i * planes)`` of the node's total.

Optics: two transceivers per link (one at each end), counted as bandwidth
(transceivers x link speed) so that designs with different link speeds compare
(an 800G module broken out to 8 x 100G is one module either way).  The paper's
"2/3 of the optics" is the ratio of optical bandwidth per host: two link layers
against three.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

_UNITS = {"": 1.0, "K": 1e-6, "M": 1e-3, "G": 1.0, "T": 1e3, "P": 1e6}


def parse_rate_gbps(text: str | float | int, name: str) -> float:
    """Gb/s from ``"100G"``, ``"51.2T"``, ``"400"`` (Gb/s), ``"800Gb/s"``; ValueError naming ``name``."""
    if isinstance(text, bool):
        raise ValueError(f"{name}: {text!r} is not a rate")
    if isinstance(text, int | float):
        value = float(text)
    else:
        raw = text.strip().replace(" ", "")
        low = raw.lower()
        for tail in ("bit/s", "bps", "b/s", "b"):
            if low.endswith(tail) and len(raw) > len(tail):
                raw = raw[: -len(tail)]
                break
        unit = raw[-1:].upper() if raw[-1:].isalpha() else ""
        number = raw[:-1] if unit else raw
        if unit not in _UNITS:
            raise ValueError(f"{name}: {text!r} is not a rate (e.g. 100G, 51.2T)")
        try:
            value = float(number) * _UNITS[unit]
        except ValueError:
            raise ValueError(f"{name}: {text!r} is not a rate (e.g. 100G, 51.2T)") from None
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"{name}: must be a positive rate, got {text!r}")
    return value


def _rate(gbps: float) -> str:
    if gbps >= 1000:
        return f"{gbps / 1000:g}T"
    return f"{gbps:g}G"


def _pct(x: Fraction) -> float:
    return round(float(x) * 100, 4)


@dataclass(frozen=True)
class Design:
    """One fabric design: switch radix, link speed, planes, tiers."""

    radix: int
    speed_gbps: float
    planes: int = 1
    tiers: int = 2

    def validate(self) -> None:
        """ValueError naming the parameter when the design is impossible."""
        if self.radix < 2 or self.radix % 2:
            raise ValueError(f"radix: must be an even number of ports >= 2, got {self.radix}")
        if not self.speed_gbps > 0:
            raise ValueError(f"speed: must be positive, got {self.speed_gbps}")
        if self.planes < 1:
            raise ValueError(f"planes: must be >= 1, got {self.planes}")
        if not 1 <= self.tiers <= 5:
            raise ValueError(f"tiers: must be 1..5, got {self.tiers}")

    @property
    def half(self) -> int:
        """``k = P/2``: ports down (and up) of a switch below the top tier."""
        return self.radix // 2

    @property
    def nic_gbps(self) -> float:
        """A host's total bandwidth: one link per plane."""
        return self.speed_gbps * self.planes

    @property
    def switch_tbps(self) -> float:
        """Switch capacity (radix x link speed), Tb/s."""
        return self.radix * self.speed_gbps / 1000

    @property
    def hosts(self) -> int:
        """Hosts (NICs); each has one port in every plane."""
        if self.tiers == 1:
            return self.radix
        return 2 * self.half**self.tiers

    def switches_per_tier(self) -> list[int]:
        """Switches of one plane, per tier (T0 first)."""
        if self.tiers == 1:
            return [1]
        k = self.half
        return [2 * k ** (self.tiers - 1)] * (self.tiers - 1) + [k ** (self.tiers - 1)]

    @property
    def switches(self) -> int:
        """Switches in all planes."""
        return sum(self.switches_per_tier()) * self.planes

    @property
    def longest_path(self) -> int:
        """Switches on the longest host-to-host path."""
        return 2 * self.tiers - 1

    @property
    def one_hop_reach(self) -> int:
        """Hosts reachable through one switch (those under the same T0)."""
        return self.radix if self.tiers == 1 else self.half

    def layers(self) -> list[dict[str, Any]]:
        """Link layers, NIC-T0 first: links (all planes), transceivers, optical Tb/s."""
        names = ["NIC-T0", *(f"T{i - 1}-T{i}" for i in range(1, self.tiers))]
        out = []
        for name in names:
            links = self.hosts * self.planes
            out.append(
                {
                    "layer": name,
                    "links": links,
                    "link_gbps": self.speed_gbps,
                    "transceivers": 2 * links,
                    "optics_tbps": 2 * links * self.speed_gbps / 1000,
                }
            )
        return out

    def failure_losses(self) -> list[dict[str, Any]]:
        """Capacity a node loses per failure kind (see the module docstring)."""
        one_plane = Fraction(1, self.planes)
        out: list[dict[str, Any]] = [
            {
                "failure": "NIC-T0 link",
                "of_plane_pct": 100.0,
                "of_node_pct": _pct(one_plane),
            },
            {"failure": "T0", "of_plane_pct": 100.0, "of_node_pct": _pct(one_plane)},
        ]
        k = self.half
        for i in range(1, self.tiers):
            share = Fraction(1, k**i)
            out.append(
                {
                    "failure": f"T{i - 1}-T{i} link",
                    "of_plane_pct": _pct(share),
                    "of_node_pct": _pct(share * one_plane),
                }
            )
            out.append(
                {
                    "failure": f"T{i}",
                    "of_plane_pct": _pct(share),
                    "of_node_pct": _pct(share * one_plane),
                }
            )
        order = ["NIC-T0 link", "T0"]
        for i in range(1, self.tiers):
            order += [f"T{i - 1}-T{i} link", f"T{i}"]
        by_name = {row["failure"]: row for row in out}
        return [by_name[name] for name in order]

    def as_dict(self) -> dict[str, Any]:
        """Every figure, JSON-able."""
        per_tier = self.switches_per_tier()
        layers = self.layers()
        optics = sum(layer["optics_tbps"] for layer in layers)
        return {
            "radix": self.radix,
            "link_gbps": self.speed_gbps,
            "switch_tbps": self.switch_tbps,
            "planes": self.planes,
            "tiers": self.tiers,
            "nic_gbps": self.nic_gbps,
            "hosts": self.hosts,
            "switches_per_plane_per_tier": {f"T{i}": n for i, n in enumerate(per_tier)},
            "switches_per_plane": sum(per_tier),
            "switches": self.switches,
            "switches_per_host": self.switches / self.hosts,
            "layers": layers,
            "links": sum(layer["links"] for layer in layers),
            "transceivers": sum(layer["transceivers"] for layer in layers),
            "optics_tbps": optics,
            "optics_gbps_per_host": optics * 1000 / self.hosts,
            "longest_path_switches": self.longest_path,
            "one_hop_reach": self.one_hop_reach,
            "failure_loss": self.failure_losses(),
        }


def single_plane_equivalent(design: Design, tiers: int = 3) -> Design:
    """The single-plane design with the same switch capacity and NIC speed.

    A multi-plane NIC of ``planes x speed`` becomes one link of the full NIC
    speed, so the same switch has ``planes`` times fewer ports.
    """
    capacity = design.radix * design.speed_gbps
    radix = round(capacity / design.nic_gbps)
    if radix < 2 or abs(radix * design.nic_gbps - capacity) > 1e-6 * capacity:
        raise ValueError(
            f"planes: a {_rate(capacity)} switch has no whole number of {_rate(design.nic_gbps)} ports"
        )
    return Design(radix=radix, speed_gbps=design.nic_gbps, planes=1, tiers=tiers)


def compare(multi: Design, single: Design) -> dict[str, Any]:
    """The ``multi`` design against ``single``: per-host ratios and the paper's figures."""
    a, b = multi.as_dict(), single.as_dict()
    sw = Fraction(multi.switches, multi.hosts) / Fraction(single.switches, single.hosts)
    op = Fraction(multi.tiers * multi.planes * 2 * round(multi.speed_gbps * 1000), 1) / Fraction(
        single.tiers * single.planes * 2 * round(single.speed_gbps * 1000), 1
    )
    return {
        "multi": a,
        "single": b,
        "switches_per_host_ratio": float(sw),
        "switches_per_host_ratio_fraction": f"{sw.numerator}/{sw.denominator}",
        "optics_per_host_ratio": float(op),
        "optics_per_host_ratio_fraction": f"{op.numerator}/{op.denominator}",
        "hosts_ratio": multi.hosts / single.hosts,
    }


def _int(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.4g}"


def format_design(design: Design, title: str = "") -> str:
    """A human-readable summary of one design."""
    d = design.as_dict()
    lines = [
        title
        or (
            f"{d['tiers']}-tier, {d['planes']} plane{'s' if d['planes'] > 1 else ''}: "
            f"{_rate(d['switch_tbps'] * 1000)} switches as {d['radix']} x {_rate(d['link_gbps'])}, "
            f"NIC {d['planes']} x {_rate(d['link_gbps'])} = {_rate(d['nic_gbps'])}"
        ),
        f"  hosts (NICs)        {d['hosts']:,}",
        "  switches per plane  "
        + ", ".join(f"{t} {n:,}" for t, n in d["switches_per_plane_per_tier"].items())
        + f" = {d['switches_per_plane']:,}",
        f"  switches in all     {d['switches']:,} ({d['switches_per_host']:.4g} per host)",
    ]
    for layer in d["layers"]:
        lines.append(
            f"  links {layer['layer']:<13} {layer['links']:,} x {_rate(layer['link_gbps'])}, "
            f"{layer['transceivers']:,} transceivers ({layer['optics_tbps']:,.0f} Tb/s)"
        )
    lines += [
        f"  optics per host     {d['optics_gbps_per_host']:,.0f} Gb/s of transceivers",
        f"  longest path        {d['longest_path_switches']} switches",
        f"  one-hop reach       {d['one_hop_reach']:,} hosts",
        "  a node loses, per failure:",
    ]
    for row in d["failure_loss"]:
        lines.append(
            f"    {row['failure']:<13} {row['of_plane_pct']:g} % of that plane, "
            f"{row['of_node_pct']:g} % of the node"
        )
    return "\n".join(lines)


def format_compare(result: dict[str, Any], multi: Design, single: Design) -> str:
    """Both designs and their ratios."""
    a, b = result["multi"], result["single"]
    link_a = next(r for r in a["failure_loss"] if r["failure"] == "T0-T1 link")
    link_b = next(r for r in b["failure_loss"] if r["failure"] == "T0-T1 link")
    nic_a = next(r for r in a["failure_loss"] if r["failure"] == "NIC-T0 link")
    rows = [
        (
            "",
            f"{multi.planes}-plane {multi.tiers}-tier",
            f"{single.planes}-plane {single.tiers}-tier",
        ),
        (
            "switch",
            f"{a['radix']} x {_rate(a['link_gbps'])}",
            f"{b['radix']} x {_rate(b['link_gbps'])}",
        ),
        ("NIC", _rate(a["nic_gbps"]), _rate(b["nic_gbps"])),
        ("hosts", f"{a['hosts']:,}", f"{b['hosts']:,}"),
        ("switches", f"{a['switches']:,}", f"{b['switches']:,}"),
        ("switches per host", f"{a['switches_per_host']:.4g}", f"{b['switches_per_host']:.4g}"),
        ("link layers", str(a["tiers"]), str(b["tiers"])),
        (
            "optics Gb/s per host",
            f"{a['optics_gbps_per_host']:,.0f}",
            f"{b['optics_gbps_per_host']:,.0f}",
        ),
        (
            "longest path",
            f"{a['longest_path_switches']} switches",
            f"{b['longest_path_switches']} switches",
        ),
        ("one-hop reach", f"{a['one_hop_reach']:,}", f"{b['one_hop_reach']:,}"),
        ("T0-T1 link down", f"{link_a['of_plane_pct']:.2g} %", f"{link_b['of_plane_pct']:.2g} %"),
        (
            "NIC-T0 link down",
            f"{nic_a['of_node_pct']:g} %",
            "100 % (node cut off)" if b["planes"] == 1 else "",
        ),
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    lines = [f"  {r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}" for r in rows]
    lines.append(
        f"  ratio: {result['switches_per_host_ratio_fraction']} of the switches and "
        f"{result['optics_per_host_ratio_fraction']} of the optics per host"
    )
    return "\n".join(lines)
