"""The multi-plane two-tier Clos fabric MRC runs on, and its SRv6 uSID address plan.

This module is pure arithmetic: it names every switch, link and port of the
fabric, gives every switch its uSID, computes the static forwarding tables and
turns (source host, destination host, EV) into the outer SRv6 destination
address a packet carries.  The packet-level simulator (:mod:`openmrc.sim`) and
the Linux network-namespace lab both build from it, so both agree on names,
port numbers and addresses.  See ``docs/srv6-addressing.md`` for the plan.

Shape (per plane, ``planes`` identical planes):

* ``t0s`` T0 switches, each with ``hosts_per_t0`` downlinks to hosts and one
  uplink to every one of the ``t1s`` T1 switches;
* host ``h`` sits under T0 ``h // hosts_per_t0`` on downlink ``h % hosts_per_t0``
  in *every* plane; its NIC port ``p`` goes to plane ``p``.

Port numbering: host ports ``0..planes-1`` (port ``p`` is in plane ``p``); T0
ports ``0..hosts_per_t0-1`` are downlinks, ``hosts_per_t0 + k`` is the uplink to
T1 ``k``; T1 port ``i`` is the downlink to T0 ``i``.

Addresses: a 32-bit block ``fcbb:0000::/32`` followed by 16-bit uSIDs, one per
switch on the path, zero padded.  A uSID is ``(kind << 14) | (plane << 10) |
index`` with kind 1 = T0, 2 = T1, 3 = host downlink.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, overload

from openmrc.transport.ev import ev_path, ev_plane

#: The 32-bit uSID block (locator prefix) every fabric address starts with.
BLOCK_PREFIX = 0xFCBB0000
#: The block placed in the top 32 bits of a 128-bit address.
BLOCK = BLOCK_PREFIX << 96
#: Mask of the 96 bits after the block (the uSID carrier).
CARRIER_MASK = (1 << 96) - 1
#: Bit position of the active uSID (the one right after the block).
ACTIVE_SHIFT = 80
#: Most uSIDs a 96-bit carrier holds.
MAX_USIDS = 6

#: uSID kinds.
KIND_T0 = 1
KIND_T1 = 2
KIND_DOWN = 3

_KIND_NAMES = {KIND_T0: "T0", KIND_T1: "T1", KIND_DOWN: "DOWN"}

_srv6_usid: Callable[[int, int, int], int] | None
try:  # pragma: no cover - depends on whether the codec engineer's module exists
    from openmrc.wire.srv6 import usid as _srv6_usid
except ImportError:  # pragma: no cover
    _srv6_usid = None


def usid(kind: int, plane: int, index: int) -> int:
    """The 16-bit uSID of a switch (kind 1 = T0, 2 = T1) or a host downlink (kind 3).

    ``(kind << 14) | (plane << 10) | index``: 2 bits of kind, 4 of plane, 10 of index.
    """
    if not 1 <= kind <= 3:
        raise ValueError(f"usid kind: must be 1 (T0), 2 (T1) or 3 (downlink), got {kind}")
    if not 0 <= plane < 16:
        raise ValueError(f"usid plane: must be between 0 and 15, got {plane}")
    if not 0 <= index < 1024:
        raise ValueError(f"usid index: must be between 0 and 1023, got {index}")
    if _srv6_usid is not None:
        return _srv6_usid(kind, plane, index)
    return (kind << 14) | (plane << 10) | index


def usid_fields(value: int) -> tuple[int, int, int]:
    """Split a uSID into (kind, plane, index)."""
    return (value >> 14) & 0x3, (value >> 10) & 0xF, value & 0x3FF


def usid_str(value: int) -> str:
    """Human-readable uSID, e.g. ``T1(p2,5)=0x8805``."""
    kind, plane, index = usid_fields(value)
    return f"{_KIND_NAMES.get(kind, '?')}(p{plane},{index})=0x{value:04x}"


def pack_address(usids: list[int]) -> int:
    """Pack uSIDs into a 128-bit address: block, then uSIDs from bit 95 down, zero padded."""
    if len(usids) > MAX_USIDS:
        raise ValueError(f"pack_address: at most {MAX_USIDS} uSIDs fit, got {len(usids)}")
    addr = BLOCK
    shift = ACTIVE_SHIFT
    for u in usids:
        if not 0 <= u <= 0xFFFF:
            raise ValueError(f"pack_address: uSID {u} is not a 16-bit value")
        addr |= u << shift
        shift -= 16
    return addr


def unpack_address(addr: int) -> list[int]:
    """The non-zero uSIDs of an address after the block, in order."""
    out: list[int] = []
    shift = ACTIVE_SHIFT
    while shift >= 0:
        u = (addr >> shift) & 0xFFFF
        if u == 0:
            break
        out.append(u)
        shift -= 16
    return out


def format_address(addr: int) -> str:
    """An address in compressed IPv6 text form."""
    return str(ipaddress.IPv6Address(addr))


def shift_address(addr: int) -> int:
    """The uSID shift a switch applies after matching its own uSID: carrier moves left 16 bits."""
    return BLOCK | ((addr << 16) & CARRIER_MASK)


def active_usid(addr: int) -> int:
    """The uSID right after the block (the one the next switch matches)."""
    return (addr >> ACTIVE_SHIFT) & 0xFFFF


#: Propagation delay of a link in the deployed latency model: 20 m of fibre at 5 ns/m
#: (docs/latency.md).  ``openmrc.sim.config`` re-exports it beside the NIC and switch
#: constants.
DEPLOYED_LINK_DELAY_PS = 100_000


@dataclass(frozen=True)
class ClosSpec:
    """Dimensions of a multi-plane two-tier Clos fabric.

    ``link_delay_ps`` is the propagation delay of every link (default
    :data:`DEPLOYED_LINK_DELAY_PS`, 20 m of fibre: docs/latency.md).  Rates are per
    link, in Gb/s; host links connect NIC ports to T0s, fabric links T0s to T1s.
    """

    planes: int = 8
    t0s: int = 4
    hosts_per_t0: int = 4
    t1s: int = 4
    host_gbps: float = 100.0
    fabric_gbps: float = 100.0
    link_delay_ps: int = DEPLOYED_LINK_DELAY_PS

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field and why it is bad."""
        ranges = {"planes": 16, "t0s": 1024, "hosts_per_t0": 1024, "t1s": 1024}
        for name, hi in ranges.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"ClosSpec.{name}: must be an integer, got {value!r}")
            if not 1 <= value <= hi:
                raise ValueError(f"ClosSpec.{name}: must be between 1 and {hi}, got {value}")
        for name in ("host_gbps", "fabric_gbps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"ClosSpec.{name}: must be a number, got {value!r}")
            if not value > 0:
                raise ValueError(f"ClosSpec.{name}: must be positive, got {value}")
        d = self.link_delay_ps
        if not isinstance(d, int) or isinstance(d, bool):
            raise ValueError(f"ClosSpec.link_delay_ps: must be an integer, got {d!r}")
        if d < 0:
            raise ValueError(f"ClosSpec.link_delay_ps: must not be negative, got {d}")

    @property
    def hosts(self) -> int:
        """Number of hosts (each has one NIC port in every plane)."""
        return self.t0s * self.hosts_per_t0


@dataclass(frozen=True)
class SwitchInfo:
    """One switch: its name, tier (0 = T0, 1 = T1), plane, index within tier and plane, uSID."""

    name: str
    tier: int
    plane: int
    index: int
    usid: int


@dataclass(frozen=True, slots=True)
class LinkInfo:
    """One full-duplex link; ``a`` is the lower-tier end (host or T0), ``b`` the upper."""

    name: str
    a: str
    a_port: int
    b: str
    b_port: int
    gbps: float
    delay_ps: int


#: ``h<host>-p<plane>t0x<i>`` or ``p<plane>t0x<i>-p<plane>t1x<k>``.
_LINK_NAME = re.compile(
    r"(?:h(0|[1-9][0-9]*)-)?p(0|[1-9][0-9]*)t0x(0|[1-9][0-9]*)(?:-p(0|[1-9][0-9]*)t1x(0|[1-9][0-9]*))?"
)


class LinkList(Sequence[LinkInfo]):
    """The links of a :class:`Topology`, made when read: a list of two million
    :class:`LinkInfo` (131,072 hosts on 8 planes) would be 600 MB.

    Per plane ``p``: the ``hosts`` host links (``h<h>-p<p>t0x<h // hosts_per_t0>``, port
    ``p`` to T0 port ``h % hosts_per_t0``), then the ``t0s * t1s`` T0-T1 links, T0 major.
    """

    __slots__ = ("_topo",)

    def __init__(self, topo: Topology) -> None:
        self._topo = topo

    def __len__(self) -> int:
        spec = self._topo.spec
        return spec.planes * (spec.hosts + spec.t0s * spec.t1s)

    @overload
    def __getitem__(self, index: int) -> LinkInfo: ...
    @overload
    def __getitem__(self, index: slice) -> list[LinkInfo]: ...
    def __getitem__(self, index: int | slice) -> LinkInfo | list[LinkInfo]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("link index out of range")
        topo = self._topo
        spec = topo.spec
        hpt = spec.hosts_per_t0
        p, rest = divmod(index, spec.hosts + spec.t0s * spec.t1s)
        if rest < spec.hosts:
            a, b = topo.host_name(rest), topo.t0_name(p, rest // hpt)
            return LinkInfo(f"{a}-{b}", a, p, b, rest % hpt, spec.host_gbps, spec.link_delay_ps)
        i, k = divmod(rest - spec.hosts, spec.t1s)
        a, b = topo.t0_name(p, i), topo.t1_name(p, k)
        return LinkInfo(f"{a}-{b}", a, hpt + k, b, i, spec.fabric_gbps, spec.link_delay_ps)

    def __iter__(self) -> Iterator[LinkInfo]:
        for i in range(len(self)):
            yield self[i]


class Topology:
    """Names, ports, uSIDs, tables and addresses of a :class:`ClosSpec` fabric."""

    def __init__(self, spec: ClosSpec | None = None) -> None:
        spec = spec if spec is not None else ClosSpec()
        spec.validate()
        self.spec = spec
        self.hosts: list[str] = [self.host_name(h) for h in range(spec.hosts)]
        self.switches: list[SwitchInfo] = []
        self._switch_by_name: dict[str, SwitchInfo] = {}
        hpt = spec.hosts_per_t0
        for p in range(spec.planes):
            for i in range(spec.t0s):
                self._add_switch(SwitchInfo(self.t0_name(p, i), 0, p, i, usid(KIND_T0, p, i)))
            for k in range(spec.t1s):
                self._add_switch(SwitchInfo(self.t1_name(p, k), 1, p, k, usid(KIND_T1, p, k)))
        #: every link, computed from its index when read (a fabric of 131,072 hosts on
        #: 8 planes has 2 million): per plane, the host links (host order), then the
        #: T0-T1 links (T0 major)
        self.links: LinkList = LinkList(self)
        self._tables: dict[tuple[int, int], dict[int, int]] = {}
        # uSIDs per plane, for fast path computation
        self._t0_usids = [
            [usid(KIND_T0, p, i) for i in range(spec.t0s)] for p in range(spec.planes)
        ]
        self._t1_usids = [
            [usid(KIND_T1, p, k) for k in range(spec.t1s)] for p in range(spec.planes)
        ]
        self._down_usids = [[usid(KIND_DOWN, p, d) for d in range(hpt)] for p in range(spec.planes)]

    def _add_switch(self, info: SwitchInfo) -> None:
        self.switches.append(info)
        self._switch_by_name[info.name] = info

    # ----- names -----------------------------------------------------------------
    @staticmethod
    def host_name(h: int) -> str:
        """Name of host ``h``."""
        return f"h{h}"

    @staticmethod
    def t0_name(plane: int, i: int) -> str:
        """Name of T0 ``i`` of ``plane``."""
        return f"p{plane}t0x{i}"

    @staticmethod
    def t1_name(plane: int, k: int) -> str:
        """Name of T1 ``k`` of ``plane``."""
        return f"p{plane}t1x{k}"

    def switch(self, name: str) -> SwitchInfo:
        """The switch called ``name`` (``KeyError`` if there is none)."""
        return self._switch_by_name[name]

    def link(self, name: str) -> LinkInfo:
        """The link called ``name`` (``"<a>-<b>"``, lower tier first; ``KeyError`` if none)."""
        index = self.link_index(name)
        if index is None:
            raise KeyError(name)
        return self.links[index]

    def link_index(self, name: str) -> int | None:
        """The position of the link called ``name`` in :attr:`links`, or None if there is none."""
        m = _LINK_NAME.fullmatch(name) if isinstance(name, str) else None
        if m is None:
            return None
        spec = self.spec
        host, p1, i, p2, k = m.groups()
        p, t0 = int(p1), int(i)
        per_plane = spec.hosts + spec.t0s * spec.t1s
        if not 0 <= p < spec.planes or not 0 <= t0 < spec.t0s:
            return None
        if host is not None:
            h = int(host)
            if not 0 <= h < spec.hosts or h // spec.hosts_per_t0 != t0 or p2 is not None:
                return None
            return p * per_plane + h
        if p2 is None or int(p2) != p or not 0 <= int(k) < spec.t1s:
            return None
        return p * per_plane + spec.hosts + t0 * spec.t1s + int(k)

    def link_between(self, a: str, b: str) -> LinkInfo:
        """The link joining nodes ``a`` and ``b`` (either order)."""
        index = self.link_index(f"{a}-{b}")
        if index is None:
            index = self.link_index(f"{b}-{a}")
        if index is None:
            raise KeyError(f"no link between {a} and {b}")
        return self.links[index]

    def host_link(self, h: int, plane: int) -> LinkInfo:
        """The link from host ``h``'s plane-``plane`` NIC port to its T0."""
        spec = self.spec
        if not isinstance(h, int) or not 0 <= h < spec.hosts:
            raise KeyError(f"host_link: no host {h!r}")
        if not isinstance(plane, int) or not 0 <= plane < spec.planes:
            raise KeyError(f"host_link: no plane {plane!r}")
        return self.links[plane * (spec.hosts + spec.t0s * spec.t1s) + h]

    # ----- uSIDs and addresses ---------------------------------------------------
    def usid_of(self, switch_name: str) -> int:
        """The uSID of a switch, by name."""
        return self._switch_by_name[switch_name].usid

    def _check_host(self, what: str, h: int) -> None:
        if not isinstance(h, int) or not 0 <= h < self.spec.hosts:
            raise ValueError(f"{what}: host must be between 0 and {self.spec.hosts - 1}, got {h}")

    def path_usids(self, src_host: int, dst_host: int, ev: int) -> list[int]:
        """The uSIDs of the path from ``src_host`` to ``dst_host`` for entropy value ``ev``.

        The plane is ``ev_plane(ev)``, the T1 ``ev_path(ev) % t1s``.  Different
        T0s: ``[T0(p,a), T1(p,k), T0(p,b), DOWN(p,d)]``; same T0:
        ``[T0(p,a), DOWN(p,d)]`` where ``d = dst_host % hosts_per_t0``.
        """
        self._check_host("path_usids src_host", src_host)
        self._check_host("path_usids dst_host", dst_host)
        if src_host == dst_host:
            raise ValueError(f"path_usids: source and destination are the same host ({src_host})")
        spec = self.spec
        plane = ev_plane(ev)
        if plane >= spec.planes:
            raise ValueError(
                f"path_usids: EV {ev:#x} is in plane {plane} but the fabric has {spec.planes}"
            )
        hpt = spec.hosts_per_t0
        a, b = src_host // hpt, dst_host // hpt
        t0 = self._t0_usids[plane]
        down = self._down_usids[plane][dst_host % hpt]
        if a == b:
            return [t0[a], down]
        return [t0[a], self._t1_usids[plane][ev_path(ev) % spec.t1s], t0[b], down]

    def path_address(self, src_host: int, dst_host: int, ev: int) -> int:
        """The 128-bit outer destination address of the path (see :meth:`path_usids`)."""
        addr = BLOCK
        shift = ACTIVE_SHIFT
        for u in self.path_usids(src_host, dst_host, ev):
            addr |= u << shift
            shift -= 16
        return addr

    def host_address(self, h: int, plane: int) -> int:
        """The address host ``h``'s plane-``plane`` NIC port answers to.

        ``block | DOWN(p, h % hosts_per_t0) | T0(p, h // hosts_per_t0)``: the
        downlink uSID a path ends with, then the host's T0 so the address is
        unique per host and plane.  It is the inner (decapsulated) destination.
        """
        self._check_host("host_address", h)
        if not 0 <= plane < self.spec.planes:
            raise ValueError(
                f"host_address: plane must be between 0 and {self.spec.planes - 1}, got {plane}"
            )
        hpt = self.spec.hosts_per_t0
        return pack_address([usid(KIND_DOWN, plane, h % hpt), usid(KIND_T0, plane, h // hpt)])

    def tables(self) -> dict[str, dict[int, int]]:
        """Static forwarding table of every switch: next (active) uSID -> egress port.

        T0(p, i): ``T1(p, k) -> hosts_per_t0 + k`` and ``DOWN(p, d) -> d``;
        T1(p, k): ``T0(p, i) -> i``.
        """
        out: dict[str, dict[int, int]] = {}
        for sw in self.switches:
            out[sw.name] = self.table(sw.tier, sw.plane)
        return out

    def table(self, tier: int, plane: int) -> dict[int, int]:
        """The forwarding table every switch of ``tier`` in ``plane`` has (see :meth:`tables`).

        One dict per (tier, plane), shared: all T0s of a plane forward alike, as do its T1s.
        """
        key = (tier, plane)
        table = self._tables.get(key)
        if table is None:
            spec = self.spec
            hpt = spec.hosts_per_t0
            if tier == 0:
                table = {usid(KIND_T1, plane, k): hpt + k for k in range(spec.t1s)}
                table.update({usid(KIND_DOWN, plane, d): d for d in range(hpt)})
            else:
                table = {usid(KIND_T0, plane, i): i for i in range(spec.t0s)}
            self._tables[key] = table
        return dict(table)

    # ----- export ----------------------------------------------------------------
    def address_plan(self) -> dict[str, Any]:
        """The whole plan as a JSON-able dict: spec, block, switches, host addresses, links."""
        spec = self.spec
        return {
            "spec": asdict(spec),
            "block": format_address(BLOCK) + "/32",
            "usid_format": "(kind << 14) | (plane << 10) | index; kind 1=T0, 2=T1, 3=downlink",
            "switches": [
                {
                    "name": sw.name,
                    "tier": sw.tier,
                    "plane": sw.plane,
                    "index": sw.index,
                    "usid": f"0x{sw.usid:04x}",
                    "locator": format_address(pack_address([sw.usid])) + "/48",
                }
                for sw in self.switches
            ],
            "hosts": [
                {
                    "name": self.host_name(h),
                    "t0_index": h // spec.hosts_per_t0,
                    "downlink": h % spec.hosts_per_t0,
                    "addresses": [
                        format_address(self.host_address(h, p)) for p in range(spec.planes)
                    ],
                }
                for h in range(spec.hosts)
            ],
            "links": [
                {f.name: getattr(link, f.name) for f in fields(LinkInfo)} for link in self.links
            ],
        }

    def format_tables(self) -> str:
        """The forwarding tables as text, one block per switch."""
        lines: list[str] = []
        for name, table in self.tables().items():
            sw = self._switch_by_name[name]
            lines.append(f"{name} (T{sw.tier}, uSID {usid_str(sw.usid)})")
            for u, port in sorted(table.items()):
                lines.append(f"  {usid_str(u):<20} -> port {port}")
        return "\n".join(lines) + "\n"
