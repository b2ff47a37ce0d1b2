"""Random failures drawn from component failure rates: the ``[failures]`` table.

::

    [failures]
    scale = 1e7              # time compression: every rate is multiplied by it
    window_us = 0            # draw over [0, window_us); 0: every job's start plus
                             # its iterations' compute critical path (the latest)
    seed = 1                 # default: the scenario's seed
    repair_us = 0            # > 0: a failed part comes back this long after (scaled
                             # time); 0: it stays down for the run
    link_per_hour = 1.5e-7   # per link (host-T0 and T0-T1 cables)
    optic_per_hour = 1.5e-7  # per optic (two per link); takes its link down
    switch_per_hour = 5.7e-6 # per switch (T0 and T1 of every plane)
    nic_port_per_hour = 3.3e-7  # per NIC port (one per host and plane)

Every component fails as a Poisson process of rate ``per_hour x scale``
(failures per hour of simulated time), independently: the fabric's
``planes x hosts`` host links and ``planes x t0s x t1s`` T0-T1 links, two
optics per link, ``planes x (t0s + t1s)`` switches, ``planes x hosts`` NIC
ports.  The draws are :class:`Drawn` faults (``link_down``, ``switch_down``,
``nic_port_down``; with ``repair_us`` also the matching ``_up``) that the
scenario appends to its ``[[faults]]``, so they run at packet and at flow
level alike.  A part already down is not failed again.  Same table, fabric
and seed: the same draws.

Real rates give almost nothing in a simulated run: a 64-GPU fabric of 8
planes (1,024 links, 128 switches, 512 NIC ports) fails about 1.4e-3 times per
hour with the defaults, so ten 30 ms iterations (0.3 s) expect 1.2e-7
failures.  ``scale`` compresses time: with ``scale = 1e7`` the same ten
iterations expect about 1.2.  The scale multiplies every rate alike, so the
mix of what fails is the real one; only how often changes.  docs/training.md
("Random failures") gives each default's source.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

from ..topology import ClosSpec

US_PER_HOUR = 3_600_000_000.0

#: default failures per component and hour (docs/training.md, "Random failures").
DEFAULT_RATES: dict[str, float] = {
    # Llama 3 (Dubey et al. 2024, Table 5): 35 "network switch and cable" interruptions
    # in 54 days on 16,384 GPUs; less the switches' share at the switch rate below (about
    # 7 on the ~1,000 switches such a 400G three-tier fabric has) leaves ~28 on cables and
    # optics, over ~3 links per GPU: 28 / (3 x 16,384 x 1,296 h) = 4.4e-7 per link-hour,
    # split evenly between the cable and its two optics (our choice; no source splits it).
    "link": 1.5e-7,
    "optic": 1.5e-7,
    # Gill, Jain, Nagappan, SIGCOMM 2011: ToRs fail with a probability of about 5 % a
    # year: 0.05 / 8,766 h.  (Singh et al., CCR 2021: 2 % of switches fail within 3 months.)
    "switch": 5.7e-6,
    # Llama 3, Table 5: 7 NIC interruptions in 54 days on 16,384 GPUs (one NIC each):
    # 7 / (16,384 x 1,296 h).  Applied per NIC port.
    "nic_port": 3.3e-7,
}

KEYS = (
    "scale",
    "window_us",
    "seed",
    "repair_us",
    "link_per_hour",
    "optic_per_hour",
    "switch_per_hour",
    "nic_port_per_hour",
)


class FailureError(ValueError):
    """A bad ``[failures]`` table (the message names the field)."""


@dataclass(frozen=True)
class FailureRates:
    """The parsed ``[failures]`` table (module doc)."""

    scale: float = 1.0
    window_us: float = 0.0
    seed: int | None = None
    repair_us: float = 0.0
    link_per_hour: float = DEFAULT_RATES["link"]
    optic_per_hour: float = DEFAULT_RATES["optic"]
    switch_per_hour: float = DEFAULT_RATES["switch"]
    nic_port_per_hour: float = DEFAULT_RATES["nic_port"]


@dataclass(frozen=True)
class Drawn:
    """One drawn fault: a ``[[faults]]`` entry (``at_us``, ``kind``, target or NIC port)."""

    at_us: float
    kind: str
    target: str = ""
    host: int = -1
    plane: int = -1
    #: what failed: "link", "optic", "switch" or "nic_port" (and which optic: "optic 1 of ...").
    component: str = ""

    def fault(self) -> dict[str, Any]:
        """As a ``[[faults]]`` table."""
        out: dict[str, Any] = {"at_us": self.at_us, "kind": self.kind}
        if self.target:
            out["target"] = self.target
        else:
            out["host"], out["plane"] = self.host, self.plane
        return out


def parse_rates(raw: Any) -> FailureRates:
    """The ``[failures]`` table, checked: one FailureError naming the first bad field."""
    if not isinstance(raw, dict):
        raise FailureError("failures: must be a table")
    for k in raw:
        if k not in KEYS:
            raise FailureError(f"failures.{k}: unknown key (known: {', '.join(KEYS)})")
    vals: dict[str, Any] = {}
    for k, v in raw.items():
        if k == "seed":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise FailureError(f"failures.seed: must be an integer >= 0, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise FailureError(f"failures.{k}: must be a number >= 0, got {v!r}")
        vals[k] = v
    if "scale" in vals and vals["scale"] <= 0:
        raise FailureError(f"failures.scale: must be > 0, got {vals['scale']!r}")
    return FailureRates(**vals)


class Components(Sequence[tuple[str, str, int, int]]):
    """One class of a fabric's components, in :func:`components`' fixed order, made
    when indexed: the whole cluster has millions of links and optics, and a draw
    needs only their count and the few that fail."""

    def __init__(self, spec: ClosSpec, cls: str) -> None:
        self.spec = spec
        self.cls = cls
        p, h, a, k = spec.planes, spec.hosts, spec.t0s, spec.t1s
        links = p * h + p * a * k
        self._n = {
            "link": links,
            "optic": 2 * links,
            "switch": p * a + p * k,
            "nic_port": p * h,
        }[cls]

    def __len__(self) -> int:
        return self._n

    def _link(self, i: int) -> str:
        s = self.spec
        hosts = s.planes * s.hosts
        if i < hosts:
            p, h = divmod(i, s.hosts)
            return f"h{h}-p{p}t0x{h // s.hosts_per_t0}"
        p, rest = divmod(i - hosts, s.t0s * s.t1s)
        a, k = divmod(rest, s.t1s)
        return f"p{p}t0x{a}-p{p}t1x{k}"

    @overload
    def __getitem__(self, i: int) -> tuple[str, str, int, int]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, str, int, int]]: ...
    def __getitem__(
        self, i: int | slice
    ) -> tuple[str, str, int, int] | list[tuple[str, str, int, int]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        s = self.spec
        if self.cls == "link":
            n = self._link(i)
            return (n, n, -1, -1)
        if self.cls == "optic":
            n = self._link(i // 2)
            return (f"optic {i % 2} of {n}", n, -1, -1)
        if self.cls == "switch":
            if i < s.planes * s.t0s:
                p, a = divmod(i, s.t0s)
                n = f"p{p}t0x{a}"
            else:
                p, k = divmod(i - s.planes * s.t0s, s.t1s)
                n = f"p{p}t1x{k}"
            return (n, n, -1, -1)
        p, h = divmod(i, s.hosts)
        return (f"h{h}/p{p}", "", h, p)


def components(spec: ClosSpec) -> dict[str, Components]:
    """Every component per class: (name, fault target, host, plane), in a fixed order:
    links (every plane's host links, host by host, then every plane's T0-T1 links, T0
    by T0 and T1 by T1), optics (two per link), switches (the T0s of every plane, then
    the T1s), NIC ports (plane by plane, host by host)."""
    return {c: Components(spec, c) for c in ("link", "optic", "switch", "nic_port")}


def expected(rates: FailureRates, spec: ClosSpec, window_us: float) -> float:
    """The expected number of failures in ``window_us`` (before skipping parts already down)."""
    per_us = 0.0
    for cls, items in components(spec).items():
        per_us += len(items) * getattr(rates, f"{cls}_per_hour") * rates.scale / US_PER_HOUR
    return per_us * window_us


def draw(rates: FailureRates, spec: ClosSpec, window_us: float, seed: int) -> list[Drawn]:
    """The failures (and repairs) in ``[0, window_us)``, in time order (module doc)."""
    rng = random.Random(f"openmrc-failures:{rates.seed if rates.seed is not None else seed}")
    events: list[tuple[float, int, str, tuple[str, str, int, int]]] = []
    order = 0
    for cls, items in components(spec).items():
        rate = len(items) * getattr(rates, f"{cls}_per_hour") * rates.scale / US_PER_HOUR
        if rate <= 0 or not items:
            continue
        t = rng.expovariate(rate)
        while t < window_us:
            events.append((t, order, cls, items[rng.randrange(len(items))]))
            order += 1
            t += rng.expovariate(rate)
    events.sort()
    down_until: dict[str, float] = {}  # element (link, switch, port) -> when it is back
    out: list[Drawn] = []
    for t, _o, cls, (name, target, host, plane) in events:
        element = target or name
        if down_until.get(element, -1.0) > t:
            continue  # already down
        at = round(t, 6)
        kind = {"switch": "switch", "nic_port": "nic_port"}.get(cls, "link")
        out.append(Drawn(at, f"{kind}_down", target, host, plane, f"{cls}: {name}"))
        if rates.repair_us > 0:
            back = round(t + rates.repair_us, 6)
            down_until[element] = back
            out.append(Drawn(back, f"{kind}_up", target, host, plane, f"{cls}: {name}"))
        else:
            down_until[element] = math.inf
    out.sort(key=lambda d: d.at_us)
    return out


__all__ = [
    "DEFAULT_RATES",
    "Components",
    "Drawn",
    "FailureError",
    "FailureRates",
    "components",
    "draw",
    "expected",
    "parse_rates",
]
