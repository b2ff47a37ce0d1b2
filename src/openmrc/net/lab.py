"""A real multi-plane SRv6 uSID Clos fabric built from Linux network namespaces.

One namespace per switch and per host (``omrc-<lab>-<node>``), one veth pair per
:class:`~openmrc.topology.LinkInfo`, static routes only.  See ``docs/lab.md``.

Addressing (the same on every link, link-local addresses are scoped by device):

* lower-tier end (host or T0) of every link: ``fe80::1/64``, upper end
  ``fe80::2/64``; permanent neighbour entries (deterministic MACs
  ``02:0a:<link#>`` / ``02:0b:<link#>``) so no neighbour discovery is needed;
* switch ``S``: ``fcbb:0:<uSID(S)>::/48 encap seg6local action End flavors
  next-csid lblen 32 nflen 16`` (on an internal veth ``srv6``: the kernel turns a
  ``dev lo`` route into a reject route and there is no ``dummy`` module) and
  ``fcbb:0:<next uSID>::/48 via <peer fe80> dev p<port>`` for every entry of
  ``Topology.tables()``;
* host ``h``, plane ``p`` (interface ``plane<p>``): ``host_address(h, p)/128``,
  the *arrival* address ``fcbb:0:<DOWN(p, d)>::/128`` (what a path's
  destination is after the last shift; deprecated so it is never picked as a
  source) and ``fcbb:0:<uSID(T0)>::/48 via fe80::2 dev plane<p>``.

Switch ports are ``p<port>`` (topology port numbers), host ports ``plane<p>``.

State (namespaces, links, faults, nft tables) is kept in
``/run/openmrc-lab/<lab>.json`` (``$OPENMRC_LAB_STATE_DIR`` overrides), written
before anything is created so :func:`down_lab` works after a crash.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from openmrc.net import netns as nsmod
from openmrc.net.sockets import ROCE_PORT, udp_socket_nocheck
from openmrc.topology import (
    KIND_DOWN,
    ClosSpec,
    LinkInfo,
    Topology,
    format_address,
    pack_address,
    usid,
)

_T = TypeVar("_T")

#: Every namespace the lab creates starts with this (cleanup sweeps it).
NS_PREFIX = "omrc-"
#: Default lab name.
DEFAULT_NAME = "lab"
#: Link-local address of the lower-tier (host or T0) end of every link.
LLA_LOWER = "fe80::1"
#: Link-local address of the upper-tier (T0 or T1) end of every link.
LLA_UPPER = "fe80::2"
#: Internal veth pair in every switch that anchors the seg6local End route.
ANCHOR_IF = "srv6"
ANCHOR_PEER = "srv6p"
#: The uSID behaviour every switch applies to its own locator.
CSID_BEHAVIOUR = "action End flavors next-csid lblen 32 nflen 16"
#: Policy-routing table on hosts holding the End.DT6 decapsulation routes.
DECAP_TABLE = 100
#: Fault modes.
MODES = ("down", "silent", "loss", "ecn")
#: MTU of every veth (jumbo): an MRC data packet (4096-byte payload + 108 bytes of
#: headers) crosses the fabric unfragmented, as RoCE requires.
VETH_MTU = 9000

_NAME_RE = re.compile(r"^[A-Za-z0-9]{1,24}$")


class LabError(RuntimeError):
    """A lab operation cannot be done (bad name, lab missing or already up...)."""


class NotRootError(LabError):
    """The lab needs root (network namespaces, veth, routes, nftables)."""


def require_root() -> None:
    """Raise :class:`NotRootError` unless running as root."""
    if os.geteuid() != 0:
        raise NotRootError("the openmrc lab needs root (network namespaces); run it with sudo")


def state_dir() -> Path:
    """Directory of the lab state files (``$OPENMRC_LAB_STATE_DIR`` or ``/run/openmrc-lab``)."""
    return Path(os.environ.get("OPENMRC_LAB_STATE_DIR", "/run/openmrc-lab"))


def ensure_state_dir() -> Path:
    """Create the state directory (and any missing parent) mode 0700 and return it.

    An existing state directory is made 0700 too (docs/security.md): the state
    files name every namespace, link and fault of the labs, and the control
    sockets live below it.
    """
    path = private_dir(state_dir())
    with contextlib.suppress(PermissionError):
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)
    return path


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents, each mode 0700 (whatever the umask;
    directories that already exist are left as they are); return it."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)
            d.chmod(0o700)
    return path


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as a new file of mode 0600 (whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fd, 0o600)
        fh.write(text)


def state_path(name: str) -> Path:
    """The state file of lab ``name``."""
    return state_dir() / f"{name}.json"


def check_name(name: str) -> str:
    """Validate a lab name (letters and digits, at most 24); return it."""
    if not _NAME_RE.match(name):
        raise LabError(f"lab name: must be 1-24 letters or digits, got {name!r}")
    return name


def ns_prefix(name: str) -> str:
    """Prefix of every namespace of lab ``name`` (``omrc-<name>-``)."""
    return f"{NS_PREFIX}{name}-"


# ----- topology spec parsing ------------------------------------------------------

_SPEC_DEFAULTS = ClosSpec()
_SPEC_FIELDS = [f.name for f in fields(ClosSpec)]


def _convert_field(name: str, value: Any) -> int | float:
    want = type(getattr(_SPEC_DEFAULTS, name))
    if isinstance(value, bool):
        raise ValueError(f"topology field {name!r}: expected a number, got {value!r}")
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text) if want is int else float(text)
        except ValueError:
            kind = "an integer" if want is int else "a number"
            raise ValueError(f"topology field {name!r}: expected {kind}, got {value!r}") from None
    if want is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int):
            raise ValueError(f"topology field {name!r}: expected an integer, got {value!r}")
        return value
    if not isinstance(value, int | float):
        raise ValueError(f"topology field {name!r}: expected a number, got {value!r}")
    return float(value)


def spec_from_mapping(values: dict[str, Any]) -> ClosSpec:
    """Build and validate a :class:`ClosSpec` from a dict; errors name the field."""
    if "spec" in values and isinstance(values["spec"], dict):
        values = values["spec"]
    unknown = sorted(set(values) - set(_SPEC_FIELDS))
    if unknown:
        raise ValueError(
            f"topology field {unknown[0]!r}: unknown (fields: {', '.join(_SPEC_FIELDS)})"
        )
    spec = ClosSpec(**{k: _convert_field(k, v) for k, v in values.items()})  # type: ignore[arg-type]
    spec.validate()
    return spec


def parse_spec(text: str) -> ClosSpec:
    """A :class:`ClosSpec` from a JSON/TOML file path or a compact ``k=v,k=v`` string.

    Example compact form: ``planes=4,t0s=2,hosts_per_t0=1,t1s=2`` (unspecified
    fields keep the :class:`ClosSpec` defaults).  Raises ``ValueError`` naming
    the offending field.
    """
    path = Path(text)
    if "=" not in text or path.is_file():
        if not path.is_file():
            raise ValueError(f"topology: {text!r} is neither a file nor k=v,... text")
        raw = path.read_text()
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(raw)
        else:
            try:
                data = json.loads(raw)
            except json.JSONDecodeError:
                data = tomllib.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"topology: {text} must hold a table/object of ClosSpec fields")
        return spec_from_mapping(data)
    values: dict[str, Any] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"topology field {key!r}: missing '=value'")
        values[key] = value
    return spec_from_mapping(values)


# ----- address helpers ------------------------------------------------------------


def arrival_address(topo: Topology, h: int, plane: int) -> int:
    """The destination a datagram to host ``h`` in ``plane`` has when it reaches the host.

    Every switch shifts the uSID carrier, so after the last switch only the
    downlink uSID is left: ``fcbb:0:<DOWN(plane, h % hosts_per_t0)>::``.  (This
    differs from ``Topology.host_address``, which appends the host's T0 uSID;
    the lab host answers to both.)
    """
    topo.host_address(h, plane)  # validates h and plane
    return pack_address([usid(KIND_DOWN, plane, h % topo.spec.hosts_per_t0)])


def locator(u: int) -> str:
    """The /48 locator prefix of uSID ``u``: ``fcbb:0:<u>::/48``."""
    return f"{format_address(pack_address([u]))}/48"


def _mac(link_index: int, upper: bool) -> str:
    b = link_index.to_bytes(4, "big")
    return ":".join(f"{x:02x}" for x in (0x02, 0x0B if upper else 0x0A, *b))


# ----- the plan: names, interfaces and ip commands (pure) --------------------------


@dataclass(frozen=True)
class LinkEnd:
    """One end of a lab link: node, its namespace, interface, MAC and link-local address."""

    node: str
    netns: str
    ifname: str
    mac: str
    lla: str


@dataclass(frozen=True)
class LabLink:
    """A topology link as built in the lab; ``a`` is the lower-tier end."""

    name: str
    a: LinkEnd
    b: LinkEnd
    info: LinkInfo

    def end(self, node: str) -> LinkEnd:
        """The end of this link on ``node``."""
        if node == self.a.node:
            return self.a
        if node == self.b.node:
            return self.b
        raise KeyError(f"{node} is not an end of link {self.name}")

    def peer(self, node: str) -> LinkEnd:
        """The end of this link opposite ``node``."""
        return self.b if node == self.a.node else self.a


class LabPlan:
    """Every name, interface, address and ``ip`` command of a lab (no side effects)."""

    def __init__(self, spec: ClosSpec, name: str = DEFAULT_NAME) -> None:
        self.name = check_name(name)
        self.spec = spec
        self.topo = Topology(spec)
        self.prefix = ns_prefix(name)
        self.switch_names = [sw.name for sw in self.topo.switches]
        self.nodes: list[str] = [*self.topo.hosts, *self.switch_names]
        self.links: dict[str, LabLink] = {}
        self.ports: dict[str, list[LabLink]] = {n: [] for n in self.nodes}
        for i, info in enumerate(self.topo.links):
            a = LinkEnd(
                info.a, self.netns(info.a), self.ifname(info.a, info.a_port), _mac(i, False),
                LLA_LOWER,
            )  # fmt: skip
            b = LinkEnd(
                info.b, self.netns(info.b), self.ifname(info.b, info.b_port), _mac(i, True),
                LLA_UPPER,
            )  # fmt: skip
            link = LabLink(info.name, a, b, info)
            self.links[info.name] = link
            self.ports[info.a].append(link)
            self.ports[info.b].append(link)
        self._tables = self.topo.tables()

    # names
    def netns(self, node: str) -> str:
        """Namespace of a host or switch (``omrc-<lab>-<node>``)."""
        return f"{self.prefix}{node}"

    def is_host(self, node: str) -> bool:
        """Whether ``node`` names a host."""
        return node in self.topo.hosts

    def ifname(self, node: str, port: int) -> str:
        """Interface name of ``node``'s port: ``plane<p>`` on hosts, ``p<port>`` on switches."""
        return f"plane{port}" if self.is_host(node) else f"p{port}"

    @property
    def namespaces(self) -> list[str]:
        """All namespaces of the lab, hosts first."""
        return [self.netns(n) for n in self.nodes]

    def resolve_link(self, text: str) -> LabLink:
        """The link named ``text`` (``a-b`` in either order)."""
        if text in self.links:
            return self.links[text]
        a, sep, b = text.partition("-")
        if sep and f"{b}-{a}" in self.links:
            return self.links[f"{b}-{a}"]
        raise LabError(
            f"unknown link or switch {text!r} (links look like {next(iter(self.links))})"
        )

    # commands
    def create_lines(self) -> list[str]:
        """Root-namespace ``ip -batch`` lines creating every veth pair (directly in place)."""
        lines = []
        for link in self.links.values():
            a, b = link.a, link.b
            lines.append(
                f"link add name {a.ifname} address {a.mac} netns {a.netns} mtu {VETH_MTU} "
                f"type veth peer name {b.ifname} address {b.mac} netns {b.netns} mtu {VETH_MTU}"
            )
        for sw in self.switch_names:
            ns = self.netns(sw)
            lines.append(
                f"link add name {ANCHOR_IF} netns {ns} mtu {VETH_MTU} type veth "
                f"peer name {ANCHOR_PEER} netns {ns} mtu {VETH_MTU}"
            )
        return lines

    def sysctls(self, node: str) -> dict[str, int]:
        """Sysctls of ``node``'s namespace, set before its interfaces exist."""
        switch = not self.is_host(node)
        out: dict[str, int] = {}
        for scope in ("all", "default"):
            base = f"net.ipv6.conf.{scope}"
            out[f"{base}.keep_addr_on_down"] = 1
            out[f"{base}.accept_dad"] = 0
            out[f"{base}.dad_transmits"] = 0
            out[f"{base}.accept_ra"] = 0
            out[f"{base}.addr_gen_mode"] = 1  # no automatic link-local addresses
            out[f"{base}.seg6_enabled"] = 1 if switch else 0
            out[f"{base}.forwarding"] = 1 if switch else 0
        return out

    def init_lines(self, node: str) -> list[str]:
        """One-time ``ip -batch`` lines for ``node`` (run before :meth:`config_lines`).

        Hosts: IPv6-in-IPv6 packets (next header 41) are looked up in table
        :data:`DECAP_TABLE` before the local table, where an ``End.DT6`` route
        on each arrival address decapsulates them (inner destination: the
        host address); everything else (plain UDP) is delivered as usual.
        """
        if not self.is_host(node):
            return []
        return [
            "rule add pref 100 lookup local",
            "rule del pref 0 lookup local",
            f"rule add pref 10 ipproto 41 lookup {DECAP_TABLE}",
        ]

    def config_lines(self, node: str, down: set[tuple[str, str]] | None = None) -> list[str]:
        """Idempotent ``ip -batch`` lines configuring ``node`` (run inside its namespace).

        ``down``: ``(netns, ifname)`` pairs held down by faults; they are left
        alone (not raised, no routes through them).  Re-running the lines after
        an interface came back restores what the kernel flushed on admin-down
        (link-local address, neighbours, routes).
        """
        down = down or set()
        ns = self.netns(node)
        lines = ["link set lo up"]
        if not self.is_host(node):
            lines += [f"link set {ANCHOR_IF} up", f"link set {ANCHOR_PEER} up"]
        up_ports: dict[int, LabLink] = {}
        for link in self.ports[node]:
            me, peer = link.end(node), link.peer(node)
            if (ns, me.ifname) in down:
                continue
            port = link.info.a_port if link.a.node == node else link.info.b_port
            up_ports[port] = link
            lines += [
                f"link set {me.ifname} up",
                f"addr replace {me.lla}/64 dev {me.ifname} nodad",
                f"neigh replace {peer.lla} lladdr {peer.mac} dev {me.ifname} nud permanent",
            ]
        if self.is_host(node):
            h = self.topo.hosts.index(node)
            for plane, link in sorted(up_ports.items()):
                me, peer = link.end(node), link.peer(node)
                addr = format_address(self.topo.host_address(h, plane))
                arrival = format_address(arrival_address(self.topo, h, plane))
                t0 = self.topo.usid_of(link.b.node)
                lines += [
                    f"addr replace {addr}/128 dev {me.ifname} nodad",
                    f"addr replace {arrival}/128 dev {me.ifname} nodad preferred_lft 0",
                    f"route replace {locator(t0)} via {peer.lla} dev {me.ifname}",
                    f"route replace {arrival}/128 encap seg6local action End.DT6 table local "
                    f"dev {me.ifname} table {DECAP_TABLE}",
                ]
            return lines
        own = self.topo.usid_of(node)
        lines.append(
            f"route replace {locator(own)} encap seg6local {CSID_BEHAVIOUR} dev {ANCHOR_IF}"
        )
        for next_usid, port in sorted(self._tables[node].items()):
            next_link = up_ports.get(port)
            if next_link is None:
                continue
            me, peer = next_link.end(node), next_link.peer(node)
            lines.append(f"route replace {locator(next_usid)} via {peer.lla} dev {me.ifname}")
        return lines


# ----- faults and state ------------------------------------------------------------


@dataclass
class Fault:
    """A fault applied to a link or switch, with what was done so it can be undone.

    ``mode``: ``down`` (clean: interfaces admin-down, carriers drop), ``silent``
    (black hole, every interface keeps carrier: nftables drops everything) or
    ``loss`` (nftables drops ``percent`` % at random, both directions) or
    ``ecn`` (nftables marks ECN CE on every packet above ``rate`` packets/s,
    both directions: ``limit rate over N/second ip6 ecn set ce``; this kernel
    has no RED qdisc, so marking is by rate, not by queue length).
    ``down``: the ``[netns, ifname]`` pairs set down; ``nft``: the
    ``[netns, table]`` nftables tables (family ``inet``) created.
    """

    target: str
    kind: str
    mode: str
    percent: float | None = None
    down: list[list[str]] = field(default_factory=list)
    rate: int | None = None
    nft: list[list[str]] = field(default_factory=list)

    def describe(self) -> str:
        """Short text, e.g. ``loss 50%`` or ``silent``."""
        if self.mode == "loss":
            return f"loss {self.percent:g}%"
        if self.mode == "ecn":
            return f"ECN CE above {self.rate} packets/s"
        return self.mode


def _nft_table(name: str, chains: list[str]) -> str:
    body = "\n".join(f"  {c}" for c in chains)
    return f"add table inet {name}\ndelete table inet {name}\ntable inet {name} {{\n{body}\n}}\n"


def _fault_rule(fault: Fault) -> str:
    """The nftables statement a ``silent``/``loss``/``ecn`` fault applies to each packet."""
    if fault.mode == "ecn":
        return f"limit rate over {fault.rate}/second ip6 ecn set ce"
    return _drop_rule(fault.percent)


def _drop_rule(percent: float | None) -> str:
    if percent is None or percent >= 100:
        return "drop"
    return f"numgen random mod 10000 < {round(percent * 100)} drop"


class Lab:
    """A running lab: build it with :meth:`up`, reopen it with :meth:`load`.

    The real-network driver needs :meth:`host_netns`, :meth:`host_ifname`,
    :meth:`host_address`, :meth:`path_address`, :meth:`udp_socket`,
    :meth:`call` and :meth:`exec`; tests and the CLI use :meth:`fail`,
    :meth:`restore`, :meth:`counters`, :meth:`status` and :meth:`down`.
    """

    def __init__(self, plan: LabPlan, faults: list[Fault] | None = None) -> None:
        self.plan = plan
        self.faults: list[Fault] = faults or []
        self._lock_depth = 0

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lab's lock file; on the outermost entry re-read the faults from state.

        So two processes (say a test and ``openmrc lab fail`` in a shell) that
        change faults of the same lab do not overwrite each other's records.
        """
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        path = state_path(self.plan.name).with_suffix(".lock")
        ensure_state_dir()
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, KeyError):
                data = json.loads(state_path(self.plan.name).read_text())
                self.faults = [Fault(**f) for f in data["faults"]]
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0

    # ----- lifecycle ---------------------------------------------------------------
    @classmethod
    def up(
        cls, spec: ClosSpec | str, name: str = DEFAULT_NAME, *, strict_checksums: bool = True
    ) -> Lab:
        """Build lab ``name`` for ``spec`` (a :class:`ClosSpec` or text for :func:`parse_spec`).

        ``strict_checksums``: turn TX checksum offload off on host interfaces so
        a checksummed UDP datagram to a path address is dropped at the receiver,
        exactly as with real NICs (see :mod:`openmrc.net.sockets`).  On any
        error everything built so far is torn down and the error re-raised.
        """
        require_root()
        if isinstance(spec, str):
            spec = parse_spec(spec)
        plan = LabPlan(spec, name)
        for tool in ("ip",):
            if not nsmod.have_tool(tool):
                raise LabError(f"the lab needs the {tool!r} command")
        if state_path(name).exists() or any(
            ns.startswith(plan.prefix) for ns in nsmod.list_netns()
        ):
            raise LabError(f"lab {name!r} is already up (run 'openmrc lab down --name {name}')")
        lab = cls(plan)
        lab._save(status="building")
        try:
            lab._build(strict_checksums)
        except BaseException:
            with contextlib.suppress(Exception):
                down_lab(name)
            raise
        lab._save(status="up")
        return lab

    def _build(self, strict_checksums: bool) -> None:
        plan = self.plan
        nsmod.ip_batch(f"netns add {ns}" for ns in plan.namespaces)
        for node in plan.nodes:
            nsmod.write_sysctls(plan.netns(node), plan.sysctls(node))
        nsmod.ip_batch(plan.create_lines())
        if strict_checksums:
            for h in plan.topo.hosts:
                nsmod.set_tx_checksum(
                    plan.netns(h), [lk.end(h).ifname for lk in plan.ports[h]], False
                )
        nsmod.ip_batches(
            {plan.netns(n): plan.init_lines(n) + plan.config_lines(n) for n in plan.nodes},
            ipv6=True,
        )

    @classmethod
    def load(cls, name: str = DEFAULT_NAME) -> Lab:
        """Reopen a lab that is up, from its state file."""
        require_root()
        path = state_path(check_name(name))
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise LabError(f"lab {name!r} is not up (no {path})") from None
        spec = spec_from_mapping(data["spec"])
        faults = [Fault(**f) for f in data.get("faults", [])]
        return cls(LabPlan(spec, name), faults)

    def down(self) -> list[str]:
        """Tear the lab down (see :func:`down_lab`); return the namespaces removed."""
        return down_lab(self.plan.name)

    def _save(self, status: str = "up") -> None:
        plan = self.plan
        data = {
            "version": 1,
            "name": plan.name,
            "status": status,
            "updated": time.time(),
            "spec": asdict(plan.spec),
            "namespaces": plan.namespaces,
            "links": {
                name: {"a": [lk.a.netns, lk.a.ifname], "b": [lk.b.netns, lk.b.ifname]}
                for name, lk in plan.links.items()
            },
            "faults": [asdict(f) for f in self.faults],
            "nft_tables": [t for f in self.faults for t in f.nft],
        }
        path = state_path(plan.name)
        ensure_state_dir()
        tmp = path.with_suffix(".tmp")
        _write_private(tmp, json.dumps(data, indent=1))
        tmp.replace(path)

    # ----- names and addresses -----------------------------------------------------
    @property
    def name(self) -> str:
        """The lab name."""
        return self.plan.name

    @property
    def topology(self) -> Topology:
        """The :class:`~openmrc.topology.Topology` the lab was built from."""
        return self.plan.topo

    def host_node(self, host: int | str) -> str:
        """Host node name from an index (``0``), ``"0"`` or a name (``"h0"``)."""
        if isinstance(host, int) or (isinstance(host, str) and host.isdigit()):
            h = int(host)
            if not 0 <= h < self.plan.spec.hosts:
                raise LabError(f"host: must be between 0 and {self.plan.spec.hosts - 1}, got {h}")
            return self.plan.topo.host_name(h)
        if host not in self.plan.topo.hosts:
            raise LabError(f"unknown host {host!r} (hosts: {', '.join(self.plan.topo.hosts)})")
        return host

    def host_index(self, host: int | str) -> int:
        """Host index from an index, ``"0"`` or ``"h0"``."""
        return self.plan.topo.hosts.index(self.host_node(host))

    def host_netns(self, host: int | str) -> str:
        """Namespace of a host (for ``ip netns exec`` or :func:`~openmrc.net.netns.enter_netns`)."""
        return self.plan.netns(self.host_node(host))

    def switch_netns(self, switch: str) -> str:
        """Namespace of a switch, by topology name (e.g. ``p0t1x1``)."""
        if switch not in self.plan.switch_names:
            raise LabError(f"unknown switch {switch!r}")
        return self.plan.netns(switch)

    @staticmethod
    def host_ifname(plane: int) -> str:
        """Interface of a host's plane-``plane`` NIC port (``plane<p>``)."""
        return f"plane{plane}"

    def host_address(self, host: int | str, plane: int) -> str:
        """``Topology.host_address`` as text: bind here to send from host, plane."""
        return format_address(self.plan.topo.host_address(self.host_index(host), plane))

    def arrival_address(self, host: int | str, plane: int) -> str:
        """The destination datagrams to the host in ``plane`` arrive with (see :func:`arrival_address`)."""
        return format_address(arrival_address(self.plan.topo, self.host_index(host), plane))

    def path_address(self, src: int | str, dst: int | str, ev: int) -> str:
        """``Topology.path_address`` as text: send here to reach ``dst`` along EV ``ev``."""
        return format_address(
            self.plan.topo.path_address(self.host_index(src), self.host_index(dst), ev)
        )

    # ----- running things in hosts -------------------------------------------------
    def exec(self, host: int | str, argv: list[str], **kwargs: Any) -> int:
        """Run ``argv`` in the host's namespace (``ip netns exec``); return its exit code."""
        proc = subprocess.run(["ip", "netns", "exec", self.host_netns(host), *argv], **kwargs)
        return proc.returncode

    def popen(self, host: int | str, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in the host's namespace; return the :class:`subprocess.Popen`."""
        return subprocess.Popen(["ip", "netns", "exec", self.host_netns(host), *argv], **kwargs)

    def call(self, host: int | str, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Call a Python function inside the host's namespace (helper thread) and return its result."""
        return nsmod.call_in_netns(self.host_netns(host), fn, *args, **kwargs)

    def udp_socket(
        self,
        host: int | str,
        port: int = ROCE_PORT,
        *,
        plane: int | None = None,
        blocking: bool = True,
        flow_labels: bool = False,
    ) -> socket.socket:
        """A no-checksum IPv6 UDP socket in the host's namespace, bound to ``port``.

        ``plane=None`` binds ``::`` (receives on every plane; the kernel picks
        the source address of the plane it sends on); ``plane=p`` binds that
        plane's :meth:`host_address`.  ``port=0``: any free port.
        ``flow_labels``: send the flow label each ``sendto`` address gives (an EV's).
        """
        addr = "::" if plane is None else self.host_address(host, plane)
        return udp_socket_nocheck(
            (addr, port), netns=self.host_netns(host), blocking=blocking, flow_labels=flow_labels
        )

    def capture(
        self,
        host: int | str,
        plane: int,
        path: str | os.PathLike[str],
        *,
        count: int | None = None,
        seconds: float | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start capturing the host's plane interface into a pcap file; return the process.

        Uses ``dumpcap`` (or ``tcpdump``); stops after ``count`` packets or
        ``seconds`` seconds (else when terminated).  Allow ~0.5 s for it to
        start before sending.
        """
        argv = capture_argv(self.host_ifname(plane), Path(path).resolve(), count, seconds)
        return subprocess.Popen(
            ["ip", "netns", "exec", self.host_netns(host), *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    # ----- counters ------------------------------------------------------------------
    def counters(self, node: str) -> dict[str, dict[str, Any]]:
        """Interface state and counters of a host or switch (see :func:`~openmrc.net.netns.link_stats`)."""
        ns = self.plan.netns(node) if node in self.plan.nodes else self.host_netns(node)
        return nsmod.link_stats(ns)

    def rx_packets(self, node: str) -> dict[str, int]:
        """Received-packet counter of every port of ``node`` (``{ifname: packets}``)."""
        return {
            ifname: int(v["rx"].get("packets", 0))
            for ifname, v in self.counters(node).items()
            if ifname not in ("lo", ANCHOR_IF, ANCHOR_PEER)
        }

    # ----- faults ----------------------------------------------------------------------
    def _down_set(self, exclude: Fault | None = None) -> set[tuple[str, str]]:
        return {(ns, ifn) for f in self.faults if f is not exclude for ns, ifn in f.down}

    def _canonical(self, target: str) -> tuple[str, str]:
        if target in self.plan.switch_names:
            return "switch", target
        return "link", self.plan.resolve_link(target).name

    def fault(self, target: str) -> Fault | None:
        """The fault applied to ``target`` (a link or switch), if any."""
        _, name = self._canonical(target)
        return next((f for f in self.faults if f.target == name), None)

    def fail(
        self, target: str, mode: str = "down", percent: float | None = None, rate: int | None = None
    ) -> Fault:
        """Fail a link (``h0-p0t0x0``, ``p0t0x0-p0t1x1``) or a switch (``p0t1x1``).

        Links: ``down`` sets both ends down (both see carrier loss);
        ``silent`` drops everything with nftables in the upper-tier end's
        namespace (no end loses carrier: a black hole nobody notices);
        ``loss`` drops ``percent`` % at random there, both directions.
        Switches: ``down`` sets all its ports down; ``silent`` keeps them up and
        drops every packet (prerouting and output); ``loss`` drops ``percent`` %
        of all packets it receives.  ``ecn`` (links and switches) marks CE on
        every packet above ``rate`` packets/s.  A target already failed is
        restored first.
        """
        if mode not in MODES:
            raise LabError(f"fault mode: must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "loss":
            if percent is None or not 0 <= percent <= 100:
                raise LabError(f"loss percent: must be between 0 and 100, got {percent}")
        else:
            percent = None
        if mode == "ecn":
            if not isinstance(rate, int) or isinstance(rate, bool) or not 0 < rate <= 10**9:
                raise LabError(f"ecn rate: must be 1..10^9 packets/s, got {rate!r}")
        else:
            rate = None
        if mode != "down" and not nsmod.have_tool("nft"):
            raise LabError(f"fault mode {mode}: needs nft (package nftables), not found on PATH")
        with self._locked():
            kind, name = self._canonical(target)
            if self.fault(name) is not None:
                self.restore(name)
            fault = Fault(name, kind, mode, percent, rate=rate)
            if kind == "link":
                link = self.plan.links[name]
                far = link.b
                if mode == "down":
                    fault.down = [[link.a.netns, link.a.ifname], [far.netns, far.ifname]]
                else:
                    table = f"omrc_{mode}_{far.ifname}"
                    fault.nft = [[far.netns, table]]
            else:
                ns = self.plan.netns(name)
                if mode == "down":
                    fault.down = [[ns, lk.end(name).ifname] for lk in self.plan.ports[name]]
                else:
                    fault.nft = [[ns, f"omrc_{mode}_switch"]]
            # Record first, then act: a crash in between still leaves a restorable state.
            self.faults.append(fault)
            self._save()
            self._apply(fault)
            return fault

    def _apply(self, fault: Fault) -> None:
        by_ns: dict[str | None, list[str]] = {}
        for ns, ifname in fault.down:
            by_ns.setdefault(ns, []).append(f"link set {ifname} down")
        nsmod.ip_batches(by_ns)
        rule = _fault_rule(fault)
        for ns, table in fault.nft:
            if fault.kind == "link":
                ifname = self.plan.links[fault.target].b.ifname
                chains = [
                    "chain pre { type filter hook prerouting priority -300; policy accept; "
                    f'iifname "{ifname}" {rule}; }}',
                    "chain post { type filter hook postrouting priority 300; policy accept; "
                    f'oifname "{ifname}" {rule}; }}',
                ]
            elif fault.mode == "silent":
                chains = [
                    "chain pre { type filter hook prerouting priority -300; policy drop; }",
                    "chain out { type filter hook output priority -300; policy drop; }",
                ]
            else:
                chains = [
                    f"chain pre {{ type filter hook prerouting priority -300; policy accept; {rule}; }}"
                ]
            nsmod.nft(_nft_table(table, chains), ns)

    def restore(self, target: str | None = None) -> list[Fault]:
        """Undo the fault on ``target`` (or every fault); return what was undone.

        Brings interfaces back up, removes nftables tables, and re-applies the
        static configuration of every namespace involved (admin-down flushes
        link-local addresses, neighbours and routes).
        """
        with self._locked():
            if target is None:
                undo = list(self.faults)
            else:
                fault = self.fault(target)
                if fault is None:
                    raise LabError(f"{target} has no fault to restore")
                undo = [fault]
            touched: set[str] = set()
            for fault in undo:
                self.faults.remove(fault)
            down_now = self._down_set()
            for fault in undo:
                for ns, table in fault.nft:
                    if nsmod.netns_exists(ns):
                        nsmod.nft(f"add table inet {table}\ndelete table inet {table}\n", ns)
                for ns, ifname in fault.down:
                    node = ns[len(self.plan.prefix) :]
                    touched.add(node)
                    for lk in self.plan.ports[node]:
                        if lk.end(node).ifname == ifname:
                            touched.add(lk.peer(node).node)
            nsmod.ip_batches(
                {self.plan.netns(n): self.plan.config_lines(n, down_now) for n in sorted(touched)},
                ipv6=True,
            )
            self._save()
            return undo

    # ----- status ------------------------------------------------------------------------
    def link_state(self, name: str) -> str:
        """Fault state of a link: ``up``, ``down``, ``silent``, ``loss P%`` or ``switch <S> ...``."""
        link = self.plan.links[name]
        fault = next((f for f in self.faults if f.target == name), None)
        if fault is not None:
            return fault.describe()
        for f in self.faults:
            if f.kind == "switch" and f.target in (link.a.node, link.b.node):
                return f"switch {f.target} {f.describe()}"
        return "up"

    def status(self) -> dict[str, Any]:
        """Namespaces (and whether each exists), links with their state, faults."""
        present = set(nsmod.list_netns())
        return {
            "name": self.name,
            "spec": asdict(self.plan.spec),
            "namespaces": {ns: ns in present for ns in self.plan.namespaces},
            "links": {name: self.link_state(name) for name in self.plan.links},
            "faults": [asdict(f) for f in self.faults],
        }

    def format_status(self) -> str:
        """:meth:`status` as text for people."""
        st = self.status()
        spec = st["spec"]
        missing = [ns for ns, ok in st["namespaces"].items() if not ok]
        lines = [
            f"lab {self.name}: planes={spec['planes']} t0s={spec['t0s']} "
            f"hosts_per_t0={spec['hosts_per_t0']} t1s={spec['t1s']}",
            f"namespaces: {len(st['namespaces'])} ({len(missing)} missing)",
        ]
        lines += [f"  {ns}" + ("" if ok else "  MISSING") for ns, ok in st["namespaces"].items()]
        lines.append(f"links: {len(st['links'])}")
        for name, state in st["links"].items():
            lk = self.plan.links[name]
            ends = f"{lk.a.ifname}<->{lk.b.ifname}"
            lines.append(f"  {name:<24} {ends:<16} {state}")
        lines.append(f"faults: {len(self.faults)}")
        lines += [f"  {f.kind} {f.target}: {f.describe()}" for f in self.faults]
        return "\n".join(lines)


# ----- module-level helpers ------------------------------------------------------------


def capture_argv(
    ifname: str, path: Path, count: int | None = None, seconds: float | None = None
) -> list[str]:
    """Command capturing ``ifname`` into pcap file ``path`` (dumpcap, else tcpdump)."""
    if nsmod.have_tool("dumpcap"):
        argv = ["dumpcap", "-q", "-P", "-i", ifname, "-w", str(path)]
        if count is not None:
            argv += ["-c", str(count)]
        if seconds is not None:
            argv += ["-a", f"duration:{max(1, round(seconds))}"]
        return argv
    if nsmod.have_tool("tcpdump"):
        argv = ["tcpdump", "-n", "-U", "-i", ifname, "-w", str(path)]
        if count is not None:
            argv += ["-c", str(count)]
        if seconds is not None:
            argv = ["timeout", "-s", "INT", str(seconds), *argv]
        return argv
    raise LabError("capture needs dumpcap (wireshark-common/tshark) or tcpdump")


def list_labs() -> list[str]:
    """Names of labs with a state file or with namespaces present."""
    names = {p.stem for p in state_dir().glob("*.json")} if state_dir().is_dir() else set()
    for ns in nsmod.list_netns():
        if ns.startswith(NS_PREFIX):
            rest = ns[len(NS_PREFIX) :]
            if "-" in rest:
                names.add(rest.split("-", 1)[0])
    return sorted(names)


def down_lab(name: str | None = None) -> list[str]:
    """Remove lab ``name`` -- or, with ``None``, every ``omrc-*`` namespace and state file.

    Works from the state file and also sweeps namespaces by prefix, so it
    cleans up after a crash or a half-built lab.  Deleting a namespace
    deletes its veth ends, their peers and its nftables tables; nothing is
    ever created in the root namespace.  Returns the namespaces removed.
    """
    require_root()
    prefix = NS_PREFIX if name is None else ns_prefix(check_name(name))
    paths = sorted(state_dir().glob("*.json")) if name is None else [state_path(name)]
    wanted: set[str] = set()
    for path in paths:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
            wanted.update(json.loads(path.read_text())["namespaces"])
    present = set(nsmod.list_netns())
    wanted = {ns for ns in wanted if ns in present}
    wanted.update(ns for ns in present if ns.startswith(prefix))
    if wanted:
        nsmod.ip_batch((f"netns del {ns}" for ns in sorted(wanted)), check=False, force=True)
        left = [ns for ns in sorted(wanted) if nsmod.netns_exists(ns)]
        if left:
            raise LabError(f"could not delete namespaces: {', '.join(left)}")
    for path in paths:
        path.unlink(missing_ok=True)
        path.with_suffix(".tmp").unlink(missing_ok=True)
        path.with_suffix(".lock").unlink(missing_ok=True)
        # The lab's control sockets (openmrc serve) live in <state dir>/<lab>/.
        sockets = path.with_suffix("")
        if sockets.is_dir():
            shutil.rmtree(sockets, ignore_errors=True)
    return sorted(wanted)


def wait_for(predicate: Callable[[], bool], timeout: float = 2.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
