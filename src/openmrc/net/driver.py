"""The real-network driver: the unchanged sans-IO MRC core over UDP/IPv6 sockets.

A :class:`NetEndpoint` owns one :class:`~openmrc.transport.Context` (one "NIC")
and runs it on an asyncio event loop:

* **receive**: one non-blocking UDP socket bound to ``[addr]:4791`` with
  ``UDP_NO_CHECK6_RX``; ``loop.add_reader`` drains it with ``recv_into`` into
  one preallocated buffer until ``BlockingIOError`` (or a batch limit), feeding
  every datagram to ``Context.receive_datagram(data, now)``;
* **send**: after every receive batch, timer and post, the datagrams of
  ``Context.datagrams_to_send(now)`` go out with ``sendto``.  Each datagram's
  destination comes from ``route(peer, ev)``: for a lab peer the SRv6 uSID path
  address of that EV (``Lab.path_address``), for a plain peer its address.
  The EV also rides in the UDP source port (``codec.udp_sport(ev)``: a small
  pool of send sockets, one per source port, created on first use, all with
  ``UDP_NO_CHECK6_TX``) and in the IPv6 flow label (``IPV6_FLOWINFO_SEND`` and
  ``sendto((addr, port, ev & 0xFFFFF, 0))``, automatic flow labels off so that an EV
  whose label is 0 keeps it).  When a socket buffer is full
  (``BlockingIOError``) the rest waits for writability (``loop.add_writer``):
  nothing is dropped silently and nothing spins;
* **timers**: after every batch of input the core's earliest deadline
  (``get_timer()``, picoseconds) is (re)armed with ``loop.call_later``; when
  it fires, ``handle_timer(now)`` runs and output is flushed.

Time inside the core is ``time.monotonic_ns() * 1000`` (integer picoseconds).

Python API (all inside a running event loop; :func:`run` picks uvloop when it
is importable)::

    async with NetEndpoint(bind="::1", port=0) as a, NetEndpoint(bind="::1", port=0) as b:
        ca, cb = a.create_connection(), b.create_connection()
        ca.connect(cb.qpn, b.local_peer)          # remote QPN + where it lives
        cb.connect(ca.qpn, a.local_peer)          # (normally exchanged out of band:
        src = a.reg_mr(bytearray(data))           #  see openmrc.net.control/service)
        dst = b.reg_mr(bytearray(len(data)))
        cb.post_recv(1)
        wr = ca.post_write(src, 0, len(data), dst.remote(), imm=7)
        wc = await ca.wait_send(wr)               # a WorkCompletion; wc.ok
        rwc = await cb.wait_recv()                # the WRITE_IMM's receive completion
        print(a.stats()["tx_by_plane"], ca.ev_table())

Peers are :class:`PlainPeer` (an IPv6 address and UDP port) or :class:`LabPeer`
(a lab host index); an endpoint given ``lab=`` and ``host=`` routes lab peers
over SRv6 paths.  ``tx_drop_every`` (tests only) drops every Nth datagram in
the send path, counted in ``stats()["tx_dropped_test"]``.  ``auth=True``
authenticates every datagram with its session's keys (:mod:`openmrc.net.auth`,
installed by :class:`~openmrc.net.service.MemoryServer` and ``Session.open``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import random
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from openmrc.net.sockets import (
    ROCE_PORT,
    UDP_NO_CHECK6_RX,
    UDP_NO_CHECK6_TX,
    send_flow_labels,
)
from openmrc.transport import (
    SGE,
    CCProfile,
    Context,
    EVField,
    EVProfile,
    MemoryRegion,
    ProtectionDomain,
    QPAttr,
    QPCap,
    QueuePair,
    RecvWR,
    SendWR,
    WCOpcode,
    WorkCompletion,
    WROpcode,
)
from openmrc.transport.errors import InvalidArgument, InvalidState
from openmrc.transport.ev import ev_path, ev_plane, make_ev
from openmrc.wire.codec import udp_sport

if TYPE_CHECKING:
    from openmrc.net.auth import DatagramAuth
    from openmrc.net.lab import Lab

_T = TypeVar("_T")

#: The out-of-band control channel's TCP port (plain IPv6 peers).
CONTROL_PORT = 4792
#: Socket buffer size asked for (SO_RCVBUFFORCE/SO_SNDBUFFORCE as root).
DEFAULT_SOCKBUF = 32 << 20
#: Largest datagram the receive buffer holds.
_RX_BUF = 65536
#: Datagrams handled per reader callback before output is flushed.
_RX_BATCH = 64
#: Most distinct EVs the per-EV counters keep (more are only counted in
#: ``rx_ev_overflow`` / ``tx_ev_overflow``): memory stays bounded whatever arrives.
MAX_EV_COUNTERS = 4096
#: Most send sockets an endpoint holds, whatever arrives (one per UDP source
#: port in use; the default EV set needs about 256 per peer).  Beyond it, or when
#: a socket cannot be opened (the process's file limit), an EV's datagrams go
#: out on a socket of the pool picked by its port (counted in ``sport_shared``),
#: so their source port is not ``udp_sport(ev)``; the flow label still carries
#: the EV.  Sockets no live connection's routes use are closed when a
#: connection is destroyed.
MAX_SEND_SOCKETS = 512
#: Most cached routes (peer, EV) -> (send socket, destination) an endpoint keeps;
#: the oldest go first (a route is cheap to resolve again).  Replies go out on
#: the EV of what they answer, so without a cap a peer choosing EVs would grow
#: it without bound.  4 sessions x 4096 EVs is the most a server's own QPs use.
MAX_ROUTES = 16384
#: NACKs and probe replies to one peer: a token bucket refilled at this many
#: per second, holding at most :data:`REPLY_BURST`; the rest are not sent
#: (``tx_replies_limited``).  A flood of forged data or probes cannot make the
#: endpoint answer each one.
REPLY_RATE = 2000
REPLY_BURST = 256
#: Every datagram a peer can make the endpoint send comes out of that bucket:
#: a reliability probe (answered by a SACK) and a duplicate data packet
#: (answered by a SACK at once) take their token when they arrive, and are
#: dropped unanswered without one (``rx_replies_limited``).  An EV probe on an
#: EV that carried no data from the peer since its last answer is answered at
#: most once per half the QP's probe interval (the sender probes an EV at most
#: once per interval; half leaves room for jitter), remembered for at most
#: :data:`MAX_PROBE_MEMO` (QP, EV) pairs.
MAX_PROBE_MEMO = 4096
#: A data packet whose PSN is more than one receive window below the QP's
#: cumulative point, or more than this many windows above it, is dropped
#: silently before the core (``rx_psn_far``): no sender that is in step with
#: the QP sends such a PSN, and answering it (a duplicate's SACK, an
#: out-of-window NACK) would let a random-PSN flood make the endpoint reply to
#: every datagram.
PSN_FAR_WINDOWS = 4
#: Bytes a datagram adds to its payload: BTH, RETH, ImmDt, MDH, ICRC (60), UDP (8), IPv6 (40).
PACKET_OVERHEAD = 108
#: Bytes an authenticated endpoint's trailer adds (:mod:`openmrc.net.auth`: counter + tag).
AUTH_TRAILER = 24
#: ``IPV6_MTU`` / ``IPV6_DONTFRAG`` (linux/in6.h).
_IPV6_MTU = getattr(socket, "IPV6_MTU", 24)
_IPV6_DONTFRAG = getattr(socket, "IPV6_DONTFRAG", 62)
#: ``IPV6_TCLASS`` / ``IPV6_RECVTCLASS`` (linux/in6.h).
_IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)
_IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
#: ECN codepoints in the traffic class's low two bits.
ECN_ECT0 = 0b10
_ECN_CE = 0b11
#: Ancillary buffer for one traffic-class cmsg (with room to spare).
_ANC_SIZE = socket.CMSG_SPACE(4) * 4


def _norm6(addr: str) -> str:
    """``addr`` in canonical compressed IPv6 form (unchanged if it is not IPv6)."""
    try:
        return ipaddress.IPv6Address(addr.split("%")[0]).compressed
    except ValueError:
        return addr


def now_ps() -> int:
    """The driver's clock: ``time.monotonic_ns()`` in integer picoseconds."""
    return time.monotonic_ns() * 1000


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``uvloop.new_event_loop`` when uvloop is importable, else None (asyncio's default)."""
    if os.environ.get("OPENMRC_NO_UVLOOP"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` to completion on uvloop when available (else asyncio's loop)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


# ----- peers and routes ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlainPeer:
    """A peer reached at one IPv6 address (loopback, or a network without SRv6)."""

    addr: str
    port: int = ROCE_PORT

    def to_json(self) -> dict[str, Any]:
        """The peer as a JSON-able dict (for the control channel)."""
        return {"kind": "addr", "addr": self.addr, "port": self.port}


@dataclass(frozen=True, slots=True)
class LabPeer:
    """A lab host (by index): each EV is routed over its own SRv6 uSID path."""

    host: int
    port: int = ROCE_PORT

    def to_json(self) -> dict[str, Any]:
        """The peer as a JSON-able dict (for the control channel)."""
        return {"kind": "lab", "host": self.host, "port": self.port}


Peer = PlainPeer | LabPeer


def peer_from_json(data: Any) -> Peer:
    """The inverse of ``to_json``; raises :class:`InvalidArgument` naming the bad field."""
    if not isinstance(data, dict):
        raise InvalidArgument(f"peer: must be an object, got {data!r}")
    port = data.get("port", ROCE_PORT)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidArgument(f"peer.port: must be 1..65535, got {port!r}")
    kind = data.get("kind")
    if kind == "addr":
        addr = data.get("addr")
        if not isinstance(addr, str):
            raise InvalidArgument(f"peer.addr: must be an IPv6 address, got {addr!r}")
        return PlainPeer(addr, port)
    if kind == "lab":
        host = data.get("host")
        if not isinstance(host, int) or host < 0:
            raise InvalidArgument(f"peer.host: must be a host index, got {host!r}")
        return LabPeer(host, port)
    raise InvalidArgument(f"peer.kind: must be 'addr' or 'lab', got {kind!r}")


@dataclass(frozen=True, slots=True)
class RemoteMR:
    """A remote memory region as the far end announced it (address, rkey, length)."""

    addr: int
    rkey: int
    length: int

    def to_json(self) -> dict[str, int]:
        """The region as a JSON-able dict."""
        return {"addr": self.addr, "rkey": self.rkey, "length": self.length}

    @classmethod
    def from_json(cls, data: Any) -> RemoteMR:
        """Parse ``to_json`` output; raises :class:`InvalidArgument` naming the bad field."""
        if not isinstance(data, dict):
            raise InvalidArgument(f"mr: must be an object, got {data!r}")
        vals = []
        for key in ("addr", "rkey", "length"):
            v = data.get(key)
            if not isinstance(v, int) or v < 0:
                raise InvalidArgument(f"mr.{key}: must be a non-negative int, got {v!r}")
            vals.append(v)
        return cls(*vals)


#: How often a lab endpoint reads its plane interfaces' state (port status).
PORT_POLL_S = 0.2


def plane_ports_down(netns: str, planes: int) -> int | None:
    """Port status of a lab host: bit p set = interface ``plane{p}`` is not up.

    Reads ``ip -j -n NETNS link show`` (operstate DOWN or LOWERLAYERDOWN: the
    interface or its veth peer is down, as ``openmrc lab fail`` of a host link
    leaves it).  None when it cannot be read.
    """
    import json
    import subprocess

    try:
        out = subprocess.run(
            ["ip", "-j", "-n", netns, "link", "show"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        links = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    mask = 0
    for link in links if isinstance(links, list) else []:
        name = link.get("ifname", "") if isinstance(link, dict) else ""
        if (
            name.startswith("plane")
            and name[5:].isdigit()
            and int(name[5:]) < planes
            and link.get("operstate") in ("DOWN", "LOWERLAYERDOWN")
        ):
            mask |= 1 << int(name[5:])
    return mask


def driver_attr(
    planes: int = 8,
    *,
    ev_count: int | None = None,
    paths_per_plane: int = 64,
    mtu: int = 4096,
    link_bps: float = 10e9,
    base_rtt_ps: int = 200_000_000,
) -> QPAttr:
    """QP attributes for a Python endpoint on real sockets.

    The core's defaults target an 800G NIC with a 12 us RTT; a Python endpoint
    moves ~100k packets/s and sees RTTs of one to a few milliseconds (socket
    buffers, the event loop), so the timers are scaled up: local ACK timeout
    2^16 x 1.024 us (67 ms: shorter ones fired spuriously under load in the
    lab), 7 linear + 6 doubling retries (~9 s before the QP gives up), a 1 ms
    reordering floor, EV probes every 25 ms.  NSCC is tuned for 10 Gb/s x
    200 us (a ~375 KB window; larger windows only add queueing delay in the
    receiver's socket buffer).  ``ev_count`` defaults to MRC's 256 EVs (rounded
    down to split equally over the planes); beyond one EV per path they differ in
    their spare-entropy bits (:class:`openmrc.transport.EVProfile`), here only
    bits 16-19 (``spare_field`` width 4), which ride in the flow label: the
    driver opens one send socket per UDP source port, and EV bits 20-31 pick it.
    """
    count = ev_count if ev_count is not None else (256 // planes) * planes
    return QPAttr(
        ev_profile=EVProfile(
            planes=planes,
            paths_per_plane=paths_per_plane,
            ev_count=count,
            spare_field=EVField(4),
            floor=max(1, min(8, count // 2)),
            probe_interval_ps=25_000_000_000,
            probe_successes=3,
        ),
        cc_profile=CCProfile(name="nscc", link_bps=link_bps, base_rtt_ps=base_rtt_ps),
        mpr=32,
        timeout=16,
        retry_linear=7,
        retry_exp=6,
        mtu=mtu,
        reorder_window_ps=1_000_000_000,
    )


def attr_to_json(attr: QPAttr) -> dict[str, Any]:
    """The fields of ``attr`` both ends must agree on, as JSON (for the hello)."""
    ev, cc = attr.ev_profile, attr.cc_profile
    return {
        "planes": ev.planes,
        "paths_per_plane": ev.paths_per_plane,
        "ev_count": ev.ev_count,
        "mtu": attr.mtu,
        "mpr": attr.mpr,
        "timeout": attr.timeout,
        "link_bps": cc.link_bps,
        "base_rtt_ps": cc.base_rtt_ps,
    }


#: Bounds of the hello's attribute fields: (type, low, high).  Anything else is refused.
ATTR_FIELDS: dict[str, tuple[type, float, float]] = {
    "planes": (int, 1, 16),
    "paths_per_plane": (int, 1, 4096),
    "ev_count": (int, 1, 65536),
    "mtu": (int, 256, 9000),
    "mpr": (int, 1, 512),
    "timeout": (int, 10, 24),
    "link_bps": (float, 1e6, 1e12),
    "base_rtt_ps": (int, 1_000_000, 10**13),
}


def attr_from_json(data: Any) -> QPAttr:
    """Rebuild driver attributes from :func:`attr_to_json` output, every field checked.

    Raises :class:`InvalidArgument` naming the field (``attr.<name>``): an
    unknown key, a wrong type (``bool`` is not an int) or a value out of
    :data:`ATTR_FIELDS` bounds.
    """
    if not isinstance(data, dict):
        raise InvalidArgument(f"attr: must be an object, got {type(data).__name__}")
    vals: dict[str, Any] = {}
    for key, v in data.items():
        spec = ATTR_FIELDS.get(key) if isinstance(key, str) else None
        if spec is None:
            raise InvalidArgument(f"attr.{str(key)[:40]}: unknown field")
        kind, lo, hi = spec
        ok_type = isinstance(v, int | float) if kind is float else isinstance(v, int)
        if isinstance(v, bool) or not ok_type:
            raise InvalidArgument(f"attr.{key}: must be a number, got {type(v).__name__}")
        if not lo <= v <= hi:
            raise InvalidArgument(f"attr.{key}: must be in {lo:g}..{hi:g}, got {v!r}")
        vals[key] = v
    attr = driver_attr(
        vals.get("planes", 8),
        ev_count=vals.get("ev_count"),
        paths_per_plane=vals.get("paths_per_plane", 64),
        mtu=vals.get("mtu", 4096),
        link_bps=float(vals.get("link_bps", 10e9)),
        base_rtt_ps=vals.get("base_rtt_ps", 200_000_000),
    )
    attr.mpr = vals.get("mpr", attr.mpr)
    attr.timeout = vals.get("timeout", attr.timeout)
    attr.validate()
    return attr


def set_bufsize(sock: socket.socket, size: int) -> None:
    """Ask for ``size``-byte receive and send buffers (SO_*BUFFORCE as root, else capped)."""
    for force, plain in (
        (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF),
        (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF),
    ):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, plain, size)


def _open_udp(
    bind: tuple[str, int], reuse_port: bool, bufsize: int, tclass: int = ECN_ECT0
) -> socket.socket:
    """A non-blocking no-checksum IPv6 UDP socket (created in the caller's namespace)."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_TX, 1)
        sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        send_flow_labels(sock)
        # ECN: send ECT(0) (docs/wire-format.md) and read the traffic class of
        # what arrives, so a CE mark reaches the core.
        sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_TCLASS, tclass)
        # Never fragment: an oversized datagram fails with EMSGSIZE instead.
        sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_DONTFRAG, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_RECVTCLASS, 1)
        set_bufsize(sock, bufsize)
        sock.bind(bind)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def send_socket_cap() -> int:
    """Most send sockets one endpoint opens: :data:`MAX_SEND_SOCKETS`, and at most a
    quarter of the process's open-file limit (at least 8), so that sockets never
    crowd out the control channel's connections."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_SEND_SOCKETS
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_SEND_SOCKETS
    return max(8, min(MAX_SEND_SOCKETS, soft // 4))


def new_psn() -> int:
    """A random initial PSN (24 bits, as RoCE's ``sq_psn``), from the OS."""
    return int.from_bytes(os.urandom(3), "big")


def _path_mtu(addr: str, port: int) -> int:
    """The kernel's path MTU towards ``addr`` (a connected UDP socket's ``IPV6_MTU``)."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.connect((addr, port))
        return int(s.getsockopt(socket.IPPROTO_IPV6, _IPV6_MTU))


def _open_send(sport: int, bufsize: int, tclass: int = ECN_ECT0) -> tuple[socket.socket, bool]:
    """A send socket bound to ``[::]:sport`` (SO_REUSEPORT); any port if taken.

    Returns the socket and whether it got ``sport``.
    """
    try:
        return _open_udp(("::", sport), True, bufsize, tclass), True
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
    return _open_udp(("::", 0), False, bufsize, tclass), False


# ----- connections -----------------------------------------------------------------------


@dataclass
class LocalMR:
    """A registered local region: the core's :class:`MemoryRegion` plus its buffer."""

    mr: MemoryRegion
    buffer: bytearray | memoryview

    @property
    def length(self) -> int:
        """Bytes in the region."""
        return self.mr.length

    def remote(self) -> RemoteMR:
        """What a peer needs to WRITE here (address, rkey, length)."""
        return RemoteMR(self.mr.addr, self.mr.rkey, self.mr.length)


class Connection:
    """One MRC queue pair on an endpoint, with awaitable completions.

    Create with :meth:`NetEndpoint.create_connection`, bring up with
    :meth:`connect` (the remote QPN and peer come from the out-of-band
    exchange), then :meth:`post_write` / :meth:`post_recv` and await
    :meth:`wait_send` / :meth:`wait_recv`.
    """

    def __init__(self, ep: NetEndpoint, qp: QueuePair) -> None:
        self.ep = ep
        self.qp = qp
        self._next_wr = 1
        self._send_done: dict[int, WorkCompletion] = {}
        self._send_waiters: dict[int, asyncio.Future[WorkCompletion]] = {}
        self._outstanding: set[int] = set()
        self._recv_done: deque[WorkCompletion] = deque()
        self._recv_waiter: asyncio.Future[WorkCompletion] | None = None
        self._space_waiter: asyncio.Future[None] | None = None
        #: Source addresses the peer sends from (set by :meth:`connect`).
        self._sources: set[str] = set()
        #: This QP's random initial send PSN, to give the peer (with the QPN)
        #: when the out-of-band exchange carries PSNs; see :meth:`connect`.
        self.initial_psn = new_psn()
        #: The session's datagram keys on an authenticated endpoint (:meth:`set_auth`).
        self.auth: DatagramAuth | None = None

    def set_auth(self, auth: DatagramAuth) -> None:
        """Protect this connected QP's datagrams with ``auth`` (its session's keys).

        On an endpoint made with ``auth=True`` a QP without keys neither sends
        nor accepts anything; call this right after :meth:`connect`.
        """
        if self.qp.peer is None:
            raise InvalidState("set_auth: connect the QP first")
        self.auth = auth
        self.ep._tx_auth[(self.qp.peer, self.qp.remote_qpn)] = auth  # type: ignore[index]

    @property
    def qpn(self) -> int:
        """This QP's number (give it to the peer)."""
        return self.qp.qpn

    @property
    def outstanding(self) -> int:
        """Signaled WRITEs posted and not yet completed."""
        return len(self._outstanding)

    def connect(
        self,
        remote_qpn: int,
        peer: Peer,
        attr: QPAttr | None = None,
        *,
        send_psn: int = 0,
        recv_psn: int = 0,
    ) -> None:
        """RESET -> RTS towards ``remote_qpn`` at ``peer`` (with the endpoint's attributes).

        ``send_psn``: this QP's first PSN (normally :attr:`initial_psn`, told to
        the peer); ``recv_psn``: the peer's.  Both ends must agree; 0 and 0 (the
        default, and the simulator's) when nothing was exchanged.
        """
        for name, psn in (("send_psn", send_psn), ("recv_psn", recv_psn)):
            if isinstance(psn, bool) or not isinstance(psn, int) or not 0 <= psn < 1 << 24:
                raise InvalidArgument(f"{name}: must be an int in 0..2^24-1, got {psn!r}")
        if not isinstance(peer, PlainPeer | LabPeer):
            raise InvalidArgument(f"peer: must be a PlainPeer or LabPeer, got {peer!r}")
        if isinstance(peer, LabPeer) and self.ep.lab is None:
            raise InvalidArgument("peer: a LabPeer needs an endpoint created with lab= and host=")
        attr = attr or self.ep.attr
        self.ep.check_path_mtu(peer, attr.mtu)
        self.qp.connect(remote_qpn, attr, peer=peer, now=now_ps())
        req = self.qp.requester
        if req is not None:
            # A SACK must echo a timestamp this QP sent (docs/security.md); the
            # random sub-nanosecond part comes from the OS, not from the seed.
            req.require_ack_proof(random.Random(os.urandom(32)))
        if send_psn or recv_psn:
            self._start_psns(send_psn, recv_psn)
        self._sources = self.ep.peer_sources(peer)
        self.ep._kick()

    def _start_psns(self, send_psn: int, recv_psn: int) -> None:
        """Start the fresh QP's sequences at ``send_psn`` (what it sends) and
        ``recv_psn`` (what it expects), as RoCE's ``sq_psn``/``rq_psn`` do.

        The core numbers PSNs from 0 and has no such attribute yet, so the
        driver moves the (public) starting points of the just-connected
        requester and responder, before any packet: PSNs are unbounded ints
        inside the core and the wire carries their low bits, so nothing else
        depends on where they start.
        """
        req, rsp = self.qp.requester, self.qp.responder
        if req is not None:
            assert req.next_psn == 0 and not req.unacked, "PSNs move only on a fresh QP"
            req.next_psn = req.snd_una = send_psn
        if rsp is not None:
            assert rsp.base == 0 and rsp.highest < 0, "PSNs move only on a fresh QP"
            rsp.base = recv_psn

    def accepts_source(self, addr: str) -> bool:
        """True if a datagram from ``addr`` may be this QP's peer (its address(es))."""
        sources = self._sources
        if addr in sources:
            return True
        if len(sources) < 64 and _norm6(addr) in sources:
            sources.add(addr)  # another spelling of an accepted address
            return True
        return False

    def post_write(
        self,
        local: LocalMR,
        offset: int,
        length: int,
        remote: RemoteMR,
        remote_offset: int | None = None,
        *,
        imm: int | None = None,
        wr_id: int | None = None,
        signaled: bool = True,
    ) -> int:
        """Post an RDMA WRITE (WRITE_WITH_IMM when ``imm`` is given); return its wr_id.

        Writes ``local[offset:offset+length]`` to ``remote`` at
        ``remote_offset`` (default: the same offset).
        """
        if offset < 0 or length < 0 or offset + length > local.length:
            raise InvalidArgument(
                f"offset/length: [{offset}, +{length}) is outside the local region ({local.length})"
            )
        roff = offset if remote_offset is None else remote_offset
        if wr_id is None:
            wr_id = self._next_wr
            self._next_wr += 1
        opcode = WROpcode.RDMA_WRITE if imm is None else WROpcode.RDMA_WRITE_WITH_IMM
        self.qp.post_send(
            SendWR(
                wr_id,
                opcode,
                [SGE(local.mr.addr + offset, length, local.mr.lkey)],
                remote.addr + roff,
                remote.rkey,
                imm,
                signaled,
            )
        )
        if signaled:
            self._outstanding.add(wr_id)
        self.ep._kick()
        return wr_id

    def post_recv(self, wr_id: int) -> None:
        """Post a receive for one incoming WRITE_WITH_IMM."""
        self.qp.post_recv(RecvWR(wr_id))

    async def wait_send(self, wr_id: int) -> WorkCompletion:
        """The completion of WRITE ``wr_id`` (check ``wc.ok``)."""
        wc = self._send_done.pop(wr_id, None)
        if wc is not None:
            return wc
        fut = self._send_waiters.get(wr_id)
        if fut is None:
            if wr_id not in self._outstanding:
                raise InvalidArgument(f"wr_id: {wr_id} is not an outstanding signaled WRITE")
            fut = self.ep._loop.create_future()
            self._send_waiters[wr_id] = fut
        return await fut

    async def wait_recv(self) -> WorkCompletion:
        """The next receive completion (a WRITE_WITH_IMM arrived), in order."""
        while not self._recv_done:
            if self._recv_waiter is None or self._recv_waiter.done():
                self._recv_waiter = self.ep._loop.create_future()
            await self._recv_waiter
        return self._recv_done.popleft()

    async def wait_space(self, max_outstanding: int) -> None:
        """Wait until fewer than ``max_outstanding`` signaled WRITEs are outstanding."""
        while len(self._outstanding) >= max_outstanding:
            if self._space_waiter is None or self._space_waiter.done():
                self._space_waiter = self.ep._loop.create_future()
            await self._space_waiter

    def take_send_completions(self) -> list[WorkCompletion]:
        """Completions nobody awaited yet (and forget them)."""
        out = list(self._send_done.values())
        self._send_done.clear()
        return out

    def _reap(self) -> None:
        cq = self.qp.send_cq
        if not len(cq):
            return
        got_send = got_recv = False
        for wc in cq.poll(1 << 20):
            if wc.opcode is WCOpcode.RECV_RDMA_WITH_IMM:
                self._recv_done.append(wc)
                got_recv = True
                continue
            got_send = True
            self._outstanding.discard(wc.wr_id)
            fut = self._send_waiters.pop(wc.wr_id, None)
            if fut is not None and not fut.done():
                fut.set_result(wc)
            else:
                self._send_done[wc.wr_id] = wc
        if got_send:
            sw = self._space_waiter
            if sw is not None and not sw.done():
                sw.set_result(None)
        if got_recv:
            rw = self._recv_waiter
            if rw is not None and not rw.done():
                rw.set_result(None)  # type: ignore[arg-type]

    def _abort(self, exc: BaseException) -> None:
        for fut in (*self._send_waiters.values(), self._recv_waiter, self._space_waiter):
            if fut is not None and not fut.done():
                fut.set_exception(exc)
        self._send_waiters.clear()

    # -- statistics ----------------------------------------------------------------
    def ev_table(self) -> list[dict[str, Any]]:
        """One row per EV of this QP's set: ev, plane, path, state, active, tx, rx.

        ``tx``/``rx`` are the endpoint's datagram counters for that EV (all
        QPs of the endpoint together).
        """
        paths = self.qp.paths
        if paths is None:
            return []
        active = set(paths.slots)
        tx, rx = self.ep.tx_by_ev, self.ep.rx_by_ev
        rows = []
        for ev in sorted(paths.state):
            if ev not in active and not tx.get(ev) and not rx.get(ev):
                continue
            rows.append(
                {
                    "ev": ev,
                    "plane": ev_plane(ev),
                    "path": ev_path(ev),
                    "state": paths.state[ev].name,
                    "active": ev in active,
                    "tx": tx.get(ev, 0),
                    "rx": rx.get(ev, 0),
                }
            )
        return rows

    def plane_table(self) -> dict[int, dict[str, int]]:
        """Per plane: datagrams sent/received and how many active EVs are in each state."""
        out: dict[int, dict[str, int]] = {}
        for row in self.ev_table():
            p = out.setdefault(
                row["plane"],
                {"tx": 0, "rx": 0, "GOOD": 0, "SKIP": 0, "ASSUMED_BAD": 0, "DENIED": 0},
            )
            p["tx"] += row["tx"]
            p["rx"] += row["rx"]
            if row["active"]:
                p[row["state"]] += 1
        return dict(sorted(out.items()))


# ----- the endpoint ---------------------------------------------------------------------


@dataclass
class _Counters:
    tx_datagrams: int = 0
    tx_bytes: int = 0
    rx_datagrams: int = 0
    rx_bytes: int = 0
    tx_eagain: int = 0
    tx_errors: int = 0
    tx_dropped_test: int = 0
    rx_errors: int = 0
    #: Datagrams for no live QP of ours, or not from that QP's peer address.
    rx_foreign: int = 0
    #: Datagrams the core dropped (malformed, failed its checks).
    rx_dropped: int = 0
    #: Delivered datagrams that arrived CE-marked.
    rx_ecn_ce: int = 0
    #: Delivered datagrams whose EV found the per-EV counters full.
    rx_ev_overflow: int = 0
    timer_fires: int = 0
    sport_fallbacks: int = 0
    last_tx_error: str = ""
    #: Datagrams sent on a shared socket of the pool (see MAX_SEND_SOCKETS).
    sport_shared: int = 0
    #: Data packets dropped for a PSN far outside the QP's window (PSN_FAR_WINDOWS).
    rx_psn_far: int = 0
    #: NACKs and probe replies not sent: over a peer's rate (REPLY_RATE).
    tx_replies_limited: int = 0
    #: Probes and duplicate data dropped unanswered: over the peer's reply rate,
    #: or an EV probe again too soon (MAX_PROBE_MEMO).
    rx_replies_limited: int = 0
    #: New data packets whose MSN cannot be theirs (more messages past the first
    #: incomplete one than PSNs past the cumulative point): dropped before the core.
    rx_bad_msn: int = 0
    #: SACKs, NACKs and probe replies dropped before the core: an echo the QP
    #: does not remember, or a cumulative ACK outside its send window.
    rx_unproven: int = 0
    #: Authenticated mode: datagrams whose tag is wrong (forged, corrupted, from
    #: a QP with no keys, or too short), and authentic ones seen before (replays).
    rx_auth_failed: int = 0
    rx_replayed: int = 0
    #: Authenticated mode: datagrams not sent because their QP has no keys.
    tx_no_key: int = 0
    #: Exceptions caught in the receive, send or timer path (never fatal).
    internal_errors: int = 0
    last_internal_error: str = ""


class NetEndpoint:
    """One MRC context on real sockets; an async context manager.

    ``bind``/``port``: where the receive socket listens (``"::"`` and 4791 by
    default; port 0 picks a free one, see :attr:`port`).  ``netns``: create
    every socket inside that named network namespace (the event loop can run
    in any namespace).  ``lab``/``host``: this endpoint is that lab host, so
    :class:`LabPeer` peers are routed over SRv6 uSID paths.  ``attr``: QP
    attributes (:func:`driver_attr` by default).  ``tx_drop_every``: test-only
    fault injection (drop every Nth datagram before ``sendto``).  ``tclass``: the IPv6
    traffic class sent (ECT(0) by default; 3 marks every datagram CE, for tests).
    ``auth``: authenticate every datagram (:mod:`openmrc.net.auth`); each
    connection then needs its session's keys (:meth:`Connection.set_auth`).
    """

    def __init__(
        self,
        bind: str = "::",
        port: int = ROCE_PORT,
        *,
        netns: str | None = None,
        lab: Lab | None = None,
        host: int | None = None,
        attr: QPAttr | None = None,
        seed: int | None = None,
        sockbuf: int = DEFAULT_SOCKBUF,
        tx_drop_every: int = 0,
        advertise: str | None = None,
        tclass: int = ECN_ECT0,
        auth: bool = False,
    ) -> None:
        if (lab is None) != (host is None):
            raise InvalidArgument("lab/host: give both (a lab endpoint) or neither")
        if not isinstance(port, int) or not 0 <= port < 65536:
            raise InvalidArgument(f"port: must be 0..65535, got {port!r}")
        if tx_drop_every < 0:
            raise InvalidArgument(f"tx_drop_every: must be >= 0, got {tx_drop_every}")
        self.bind_addr = bind
        self.netns = netns
        self.lab = lab
        self.host = host
        if lab is not None and attr is None:
            attr = driver_attr(lab.topology.spec.planes)
        self.attr = attr or driver_attr()
        self.attr.validate()
        self.ctx = Context(random.Random(seed), name=f"{bind}:{port}")
        self.pd = self.ctx.alloc_pd()
        self.connections: dict[int, Connection] = {}
        #: Regions registered through :meth:`reg_mr` and not deregistered.
        self.regions = 0
        self.tx_by_ev: dict[int, int] = {}
        self.rx_by_ev: dict[int, int] = {}
        #: EV and QP events from the core (the newest 10000).
        self.events: deque[object] = deque(maxlen=10000)
        self.event_counts: dict[str, int] = {}
        self.counters = _Counters()
        self.tx_drop_every = tx_drop_every
        if not 0 <= tclass <= 255:
            raise InvalidArgument(f"tclass: must be 0..255, got {tclass}")
        #: IPv6 traffic class of every datagram sent (ECT(0); tests mark CE with 3).
        self.tclass = tclass
        #: Authenticated mode: every datagram carries a trailer (counter + tag).
        self.auth = auth
        #: (peer, remote QPN) -> the session keys that seal datagrams to it.
        self._tx_auth: dict[tuple[Peer, int], DatagramAuth] = {}
        self._tx_seen = 0
        self._sockbuf = sockbuf
        self._advertise = advertise
        self._port_wanted = port
        self.port = port
        self._rx: socket.socket | None = None
        self._tx: dict[int, socket.socket] = {}
        #: per peer: (tokens, last refill in ns) of the NACK / probe-reply bucket
        self._reply_bucket: dict[Peer, tuple[float, int]] = {}
        #: (QPN, EV) -> (when an EV probe on it was last answered, in ns, and the
        #: EV's delivered-datagram count then); at most MAX_PROBE_MEMO, oldest out.
        self._probe_memo: dict[tuple[int, int], tuple[int, int]] = {}
        self._routes: dict[tuple[Peer, int], tuple[Callable[..., int], tuple[str, int, int, int]]]
        self._routes = {}
        self._pending: deque[tuple[bytes, int, Peer]] = deque()
        self._blocked_fd: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._kicked = False
        self._closed = False
        self._started = False
        self._min_delay = 0.0
        self._buf = bytearray(_RX_BUF)
        self._view = memoryview(self._buf)
        self._loop: asyncio.AbstractEventLoop

    # -- lifecycle -------------------------------------------------------------------
    async def __aenter__(self) -> NetEndpoint:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _in_ns(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self.netns is None:
            return fn(*args)
        from openmrc.net.netns import call_in_netns

        return call_in_netns(self.netns, fn, *args)

    #: A lab endpoint's node controller and its ``.ctl`` socket
    #: (:class:`openmrc.net.ctl.NodeControl`), started by :meth:`start`; None otherwise.
    node_control: Any = None

    def start(self) -> None:
        """Open the receive socket and register it with the running loop.

        A lab endpoint also starts its node controller socket (``openmrc lab ctl``).
        """
        if self._started:
            raise InvalidState("start: the endpoint is already started")
        self._loop = asyncio.get_running_loop()
        # uvloop's timers have millisecond resolution: never re-arm below that.
        self._min_delay = 0.001 if type(self._loop).__module__.startswith("uvloop") else 0.0
        self._rx = self._in_ns(_open_udp, (self.bind_addr, self._port_wanted), False, self._sockbuf)
        self.port = self._rx.getsockname()[1]
        self._loop.add_reader(self._rx.fileno(), self._on_readable)
        self._started = True
        if self.lab is not None and self.host is not None:
            self._loop.call_soon(self._poll_ports)
            from openmrc.net.ctl import start_node_control

            self.node_control = start_node_control(self)

    # -- port status (lab hosts: the plane interfaces' operstate) ---------------------
    def _poll_ports(self) -> None:
        """Read the plane interfaces' state off the loop; act on it; poll again."""
        if self._closed or self.lab is None or self.host is None:
            return
        ns = self.lab.host_netns(self.host)
        planes = self.lab.topology.spec.planes
        fut = self._loop.run_in_executor(None, plane_ports_down, ns, planes)
        fut.add_done_callback(self._on_ports)

    def _on_ports(self, fut: asyncio.Future[int | None]) -> None:
        if self._closed:
            return
        mask = None if fut.cancelled() or fut.exception() else fut.result()
        if mask is not None and mask != self.ctx.ports_down:
            now = now_ps()
            for plane in range(16):
                bit = 1 << plane
                if (mask ^ self.ctx.ports_down) & bit:
                    self.ctx.set_port_state(plane, not mask & bit, now)
            self._kick()
        self._loop.call_later(PORT_POLL_S, self._poll_ports)

    def close(self) -> None:
        """Stop: cancel the timer, unregister and close every socket, fail waiters."""
        if self._closed:
            return
        self._closed = True
        if self.node_control is not None:
            self.node_control.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._started:
            loop = self._loop
            if self._rx is not None:
                loop.remove_reader(self._rx.fileno())
            if self._blocked_fd is not None:
                loop.remove_writer(self._blocked_fd)
                self._blocked_fd = None
        for sock in (self._rx, *self._tx.values()):
            if sock is not None:
                sock.close()
        self._rx = None
        self._tx.clear()
        self._routes.clear()
        exc = ConnectionAbortedError("the endpoint was closed")
        for conn in self.connections.values():
            conn._abort(exc)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    @property
    def local_peer(self) -> Peer:
        """How a peer reaches this endpoint (a :class:`LabPeer` in a lab)."""
        if self.lab is not None and self.host is not None:
            return LabPeer(self.host, self.port)
        addr = self._advertise or self.bind_addr
        if addr in ("::", ""):
            addr = "::1"
        return PlainPeer(addr, self.port)

    def open_sockets(self) -> list[socket.socket]:
        """Every socket the endpoint currently holds (for tests)."""
        return [s for s in (self._rx, *self._tx.values()) if s is not None]

    # -- verbs -------------------------------------------------------------------------
    def alloc_pd(self) -> ProtectionDomain:
        """A new protection domain: its regions are reachable only by its own QPs."""
        return self.ctx.alloc_pd()

    def reg_mr(self, buffer: bytearray | memoryview, pd: ProtectionDomain | None = None) -> LocalMR:
        """Register ``buffer`` (local and remote write access) in ``pd`` (default: the
        endpoint's) and return it."""
        view = memoryview(buffer)
        local = LocalMR((pd or self.pd).reg_mr(view.nbytes, buffer=buffer), buffer)
        self.regions += 1
        return local

    def dereg_mr(self, local: LocalMR) -> None:
        """Deregister a region from :meth:`reg_mr` (its rkey stops working at once)."""
        local.mr.pd.dereg_mr(local.mr)
        self.regions -= 1

    def create_connection(
        self,
        cap: QPCap | None = None,
        cq_depth: int = 1 << 16,
        pd: ProtectionDomain | None = None,
    ) -> Connection:
        """A new QP (in RESET) with its own CQ, in ``pd`` (default: the endpoint's);
        connect it with :meth:`Connection.connect`."""
        # One CQ for both directions; completions are told apart by opcode.
        cq = self.ctx.create_cq(cq_depth)
        qp = (pd or self.pd).create_qp(cq, cq, cap or QPCap(max_send_wr=4096, max_recv_wr=4096))
        conn = Connection(self, qp)
        self.connections[qp.qpn] = conn
        return conn

    def destroy_connection(self, conn: Connection) -> None:
        """Remove a connection's QP (its waiters get ConnectionAbortedError)."""
        if self.connections.pop(conn.qpn, None) is None:
            return
        conn._abort(ConnectionAbortedError(f"QP {conn.qpn} destroyed"))
        peer = conn.qp.peer
        self._tx_auth.pop((peer, conn.qp.remote_qpn), None)  # type: ignore[arg-type]
        memo = self._probe_memo
        for key in [k for k in memo if k[0] == conn.qpn]:
            del memo[key]
        self.ctx.destroy_qp(conn.qp)
        self._forget_peer(peer)
        self._arm_timer()

    def _forget_peer(self, peer: object) -> None:
        """Drop the routes, reply bucket and send sockets only ``peer`` used, once no
        live connection talks to it (file descriptors come back when sessions end)."""
        if peer is None or any(c.qp.peer == peer for c in self.connections.values()):
            return
        self._reply_bucket.pop(peer, None)  # type: ignore[call-overload]
        routes = self._routes
        for key in [k for k in routes if k[0] == peer]:
            del routes[key]
        if any(p == peer for _d, _e, p in self._pending):
            return  # still sending to it: its sockets stay until the next reclaim
        used = {id(entry[0].__self__) for entry in routes.values()}  # type: ignore[attr-defined]
        for sport, sock in list(self._tx.items()):
            if id(sock) in used:
                continue
            if self._blocked_fd == sock.fileno():
                self._loop.remove_writer(sock.fileno())
                self._blocked_fd = None
            del self._tx[sport]
            sock.close()

    def check_path_mtu(self, peer: Peer, mtu: int) -> None:
        """Raise :class:`InvalidArgument` if ``mtu``-byte packets to ``peer`` would fragment.

        The largest datagram (payload + MRC headers + UDP + IPv6, ``mtu`` +
        :data:`PACKET_OVERHEAD`) must fit the path MTU the kernel reports for
        the peer (for a lab peer: one path of every plane).  MRC, like RoCE,
        never fragments; send sockets also set ``IPV6_DONTFRAG``.
        """
        if isinstance(peer, LabPeer):
            assert self.lab is not None and self.host is not None
            addrs = [
                self.lab.path_address(self.host, peer.host, make_ev(p, 0))
                for p in range(self.lab.topology.spec.planes)
            ]
        else:
            addrs = [peer.addr]
        need = mtu + PACKET_OVERHEAD + (AUTH_TRAILER if self.auth else 0)
        for addr in addrs:
            try:
                pmtu = self._in_ns(_path_mtu, addr, peer.port)
            except OSError:
                continue  # no route now (a link is down): nothing to measure
            if need > pmtu:
                raise InvalidArgument(
                    f"mtu: {mtu}-byte packets make {need}-byte datagrams, more than the path "
                    f"MTU {pmtu} towards {addr} (they would fragment); use mtu <= "
                    f"{pmtu - PACKET_OVERHEAD} or jumbo frames"
                )

    def peer_sources(self, peer: Peer) -> set[str]:
        """The addresses datagrams from ``peer`` come from (normalised IPv6 text).

        A lab host sends from its per-plane host addresses; a plain peer from
        its address.
        """
        if isinstance(peer, LabPeer):
            assert self.lab is not None
            return {
                _norm6(self.lab.host_address(peer.host, p))
                for p in range(self.lab.topology.spec.planes)
            }
        return {_norm6(peer.addr)}

    # -- statistics -----------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Datagram counters, per-EV and per-plane counts, core and per-QP statistics."""
        c = self.counters
        tx_plane: dict[int, int] = {}
        rx_plane: dict[int, int] = {}
        for ev, n in self.tx_by_ev.items():
            tx_plane[ev_plane(ev)] = tx_plane.get(ev_plane(ev), 0) + n
        for ev, n in self.rx_by_ev.items():
            rx_plane[ev_plane(ev)] = rx_plane.get(ev_plane(ev), 0) + n
        return {
            "tx_datagrams": c.tx_datagrams,
            "tx_bytes": c.tx_bytes,
            "rx_datagrams": c.rx_datagrams,
            "rx_bytes": c.rx_bytes,
            "tx_eagain": c.tx_eagain,
            "tx_errors": c.tx_errors,
            "last_tx_error": c.last_tx_error,
            "tx_dropped_test": c.tx_dropped_test,
            "rx_errors": c.rx_errors,
            "rx_foreign": c.rx_foreign,
            "rx_dropped": c.rx_dropped,
            "rx_ecn_ce": c.rx_ecn_ce,
            "rx_ev_overflow": c.rx_ev_overflow,
            "timer_fires": c.timer_fires,
            "sport_fallbacks": c.sport_fallbacks,
            "sport_shared": c.sport_shared,
            "rx_psn_far": c.rx_psn_far,
            "tx_replies_limited": c.tx_replies_limited,
            "rx_replies_limited": c.rx_replies_limited,
            "rx_bad_msn": c.rx_bad_msn,
            "rx_unproven": c.rx_unproven,
            "auth": self.auth,
            "rx_auth_failed": c.rx_auth_failed,
            "rx_replayed": c.rx_replayed,
            "tx_no_key": c.tx_no_key,
            "internal_errors": c.internal_errors,
            "last_internal_error": c.last_internal_error,
            "tx_by_plane": dict(sorted(tx_plane.items())),
            "rx_by_plane": dict(sorted(rx_plane.items())),
            "tx_by_ev": dict(sorted(self.tx_by_ev.items())),
            "rx_by_ev": dict(sorted(self.rx_by_ev.items())),
            "events": dict(self.event_counts),
            "context": dict(self.ctx.stats),
            "qps": {
                qpn: {
                    "state": conn.qp.state.value,
                    **conn.qp.stats.as_dict(),
                    "ev_states": conn.qp.paths.counts() if conn.qp.paths else {},
                }
                for qpn, conn in self.connections.items()
            },
        }

    # -- the I/O engine -------------------------------------------------------------------
    def _kick(self) -> None:
        """Schedule one service pass (flush output, reap completions, re-arm the timer)."""
        if not self._kicked and self._started and not self._closed:
            self._kicked = True
            self._loop.call_soon(self._service)

    def _service(self) -> None:
        self._kicked = False
        if not self._closed:
            self._after_input()

    def _on_readable(self) -> None:
        sock = self._rx
        if sock is None:
            return
        recvmsg_into = sock.recvmsg_into
        bufs = [self._buf]
        buf, view = self._buf, self._view
        receive = self.ctx.receive_datagram
        rx_by_ev = self.rx_by_ev
        conns = self.connections
        c = self.counters
        auth = self.auth
        n_pkts = 0
        n_bytes = 0
        while n_pkts < _RX_BATCH:
            try:
                n, anc, _flags, src = recvmsg_into(bufs, _ANC_SIZE)
            except BlockingIOError:
                break
            except OSError:
                c.rx_errors += 1
                break
            n_pkts += 1
            n_bytes += n
            # Only to find the QP: a datagram for no live QP of ours, or from an
            # address that is not that QP's peer, is dropped before the core
            # sees it and before anything it says is counted.
            conn = conns.get(int.from_bytes(buf[5:8], "big")) if n >= 12 else None
            if conn is None or not conn.accepts_source(src[0]):
                c.rx_foreign += 1
                continue
            if auth:  # the tag first: a forged datagram costs one check, nothing more
                keys = conn.auth
                verdict = 1 if keys is None else keys.check(view, n)
                if verdict:
                    if verdict == 1:
                        c.rx_auth_failed += 1
                    else:
                        c.rx_replayed += 1
                    continue
                n -= AUTH_TRAILER
            kind = buf[0]
            if kind < 0xC0:  # a data packet: is its PSN anywhere near the window?
                rsp = conn.qp.responder
                if rsp is not None:
                    off = (int.from_bytes(buf[9:12], "big") - rsp.base) & 0xFFFFFF
                    if off >= 0x800000:
                        off -= 0x1000000
                    if off < -rsp.window or off >= PSN_FAR_WINDOWS * rsp.window:
                        c.rx_psn_far += 1
                        continue
                    if off < 0 or (off < rsp.window and rsp.bits >> off & 1):
                        if not self._reply_allowed(conn.qp.peer):  # type: ignore[arg-type]
                            c.rx_replies_limited += 1  # a duplicate: answered by a SACK
                            continue
                    elif off < rsp.window and n >= 48:
                        # A new PSN's message is at most `off` messages past the
                        # first incomplete one (each message has a PSN in between),
                        # so the responder's per-message maps stay within the window.
                        at = 44 if kind == 0x09 or kind == 0x0B else 40  # MDH msn
                        moff = (int.from_bytes(buf[at : at + 4], "big") - rsp.next_msn) & 0xFFFFFFFF
                        if moff > off:
                            c.rx_bad_msn += 1
                            continue
            elif kind == 0xC2:
                if n >= 24 and not self._probe_allowed(conn, buf):
                    c.rx_replies_limited += 1
                    continue
            elif not self._answer_plausible(conn, kind, buf, n):
                c.rx_unproven += 1  # cannot be valid: dropped before any decoding
                continue
            ce = False
            for level, kind, data in anc:
                if kind == _IPV6_TCLASS and level == socket.IPPROTO_IPV6 and len(data) >= 4:
                    ce = int.from_bytes(data[:4], sys.byteorder) & 3 == _ECN_CE
            try:
                pkt = receive(view[:n], time.monotonic_ns() * 1000, ecn=ce)
            except Exception as exc:  # counted, never fatal to the other sessions
                self._note_error(exc)
                c.rx_dropped += 1
                continue
            if pkt is None:
                c.rx_dropped += 1
                continue
            if ce:
                c.rx_ecn_ce += 1
            ev = pkt.ev
            if ev in rx_by_ev:
                rx_by_ev[ev] += 1
            elif len(rx_by_ev) < MAX_EV_COUNTERS:
                rx_by_ev[ev] = 1
            else:
                c.rx_ev_overflow += 1
        c.rx_datagrams += n_pkts
        c.rx_bytes += n_bytes
        self._after_input()

    def _after_input(self) -> None:
        """After any input: drain events, send, reap completions, re-arm the timer.

        An exception here is counted (``internal_errors``), never raised into the
        event loop: one bad moment must not stop the endpoint for every session.
        """
        try:
            self._after_input_once()
        except Exception as exc:
            self._note_error(exc)

    def _after_input_once(self) -> None:
        ctx = self.ctx
        if ctx.events:
            self._drain_events()
        if not self._pending:
            self._flush()
        for conn in self.connections.values():
            conn._reap()
        self._arm_timer()

    def _drain_events(self) -> None:
        events = self.ctx.events
        counts = self.event_counts
        ctl = self.ctx.controller
        while events:
            ev = events.popleft()
            if ctl is not None:
                ctl.deliver_event(self.ctx, ev)  # the node controller's EV event queue
            self.events.append(ev)
            new = getattr(ev, "new", None)
            key = f"{type(ev).__name__}:{getattr(new, 'name', new)}"
            counts[key] = counts.get(key, 0) + 1

    def _route(self, peer: Peer, ev: int) -> tuple[Callable[..., int], tuple[str, int, int, int]]:
        """Resolve (and cache) the send socket and destination of ``ev`` towards ``peer``."""
        if isinstance(peer, LabPeer):
            assert self.lab is not None and self.host is not None
            addr = self.lab.path_address(self.host, peer.host, ev)
        elif isinstance(peer, PlainPeer):
            addr = peer.addr
        else:
            raise InvalidArgument(f"peer: {peer!r} is not a PlainPeer or LabPeer")
        sport = udp_sport(ev)
        sock = self._tx.get(sport)
        if sock is None:
            sock = self._new_send_socket(sport)
        entry = (sock.sendto, (addr, peer.port, ev & 0xFFFFF, 0))
        routes = self._routes
        routes[(peer, ev)] = entry
        if len(routes) > MAX_ROUTES:
            del routes[next(iter(routes))]  # the oldest route
        return entry

    def _new_send_socket(self, sport: int) -> socket.socket:
        """A send socket for ``sport``: a new one while the pool has room and the
        process can open one, else a socket of the pool (``sport_shared``)."""
        pool = self._tx
        if len(pool) < send_socket_cap():
            try:
                sock, exact = self._in_ns(_open_send, sport, self._sockbuf, self.tclass)
            except OSError as exc:  # e.g. EMFILE: the process's file limit
                self._note_error(exc)
            else:
                if not exact:
                    self.counters.sport_fallbacks += 1
                pool[sport] = sock
                return sock
        self.counters.sport_shared += 1
        if pool:
            socks = list(pool.values())
            return socks[sport % len(socks)]
        assert self._rx is not None
        return self._rx  # nothing else can be opened: the receive socket sends too

    def _note_error(self, exc: BaseException) -> None:
        c = self.counters
        c.internal_errors += 1
        c.last_internal_error = f"{type(exc).__name__}: {exc}"[:200]

    def _reply_tokens(self, peer: Peer) -> bool:
        """Whether ``peer``'s reply bucket holds a token now (none taken)."""
        got = self._reply_bucket.get(peer)
        if got is None:
            return True
        tokens = got[0] + (time.monotonic_ns() - got[1]) * REPLY_RATE / 1e9
        return tokens >= 1.0

    def _reply_allowed(self, peer: Peer) -> bool:
        """Take a token from ``peer``'s NACK / probe-reply bucket (REPLY_RATE)."""
        now = time.monotonic_ns()
        tokens, last = self._reply_bucket.get(peer, (float(REPLY_BURST), now))
        tokens = min(float(REPLY_BURST), tokens + (now - last) * REPLY_RATE / 1e9)
        if tokens < 1.0:
            self._reply_bucket[peer] = (tokens, now)
            return False
        self._reply_bucket[peer] = (tokens - 1.0, now)
        return True

    @staticmethod
    def _answer_plausible(conn: Connection, kind: int, buf: bytearray, n: int) -> bool:
        """Whether a SACK, NACK or probe reply in ``buf`` may be valid, from a
        look-up or two: its echo must be a stamp the QP still remembers (a data
        or reliability-probe stamp; for a probe reply an unanswered EV probe's)
        and a SACK's or NACK's cumulative ACK must lie between one send window
        below the QP's and what it has sent.  The rest is refused as the core
        would refuse it (counted in ``forged_acks`` / ``forged_probe_replies``),
        without decoding, checksumming or delivering it."""
        req = conn.qp.requester
        if req is None or req.sent_ts is None:
            return True
        if kind == 0xC0 and n >= 56:  # SACK: cumulative ACK at 16, echo at 48
            ts, cack = int.from_bytes(buf[48:56], "big"), int.from_bytes(buf[16:20], "big")
        elif kind == 0xC1 and n >= 36:  # NACK: cumulative ACK at 24, echo at 28
            ts, cack = int.from_bytes(buf[28:36], "big"), int.from_bytes(buf[24:28], "big")
        elif kind == 0xC3 and n >= 32:  # PROBE_REPLY: echo at 24
            echo = int.from_bytes(buf[24:32], "big")
            if echo in req.probe_ts:
                return True
            rev = conn.qp.reverse  # or the answer to the reverse set's own probe
            if rev is not None and rev.expects(echo):
                return True
            req.forged_probe_replies += 1
            return False
        else:
            return True  # data, or malformed: the core decides
        off = (cack - req.snd_una) & 0xFFFFFFFF
        if off >= 0x80000000:
            off -= 1 << 32
        if ts in req.sent_ts and -req.window_psns <= off <= req.next_psn - req.snd_una:
            return True
        if kind == 0xC0:
            req.forged_acks += 1
        return False

    def _probe_allowed(self, conn: Connection, buf: bytearray) -> bool:
        """Whether a probe (the datagram in ``buf``) for ``conn`` may be answered.

        A reliability probe takes a token from the peer's reply bucket (its SACK
        is not limited on the way out).  An EV probe's reply is limited on the
        way out; here an EV that carried no data since its last answered probe
        is answered at most once per half the QP's probe interval.
        """
        if buf[13] & 1:  # PROBE_RELIABILITY
            return self._reply_allowed(conn.qp.peer)  # type: ignore[arg-type]
        # An EV probe: its reply is limited when it leaves, but a probe that will
        # find no token is cheaper dropped here, before the core.
        if not self._reply_tokens(conn.qp.peer):  # type: ignore[arg-type]
            return False
        ev = int.from_bytes(buf[20:24], "big")
        key = (conn.qpn, ev)
        memo = self._probe_memo
        now = time.monotonic_ns()
        seen = self.rx_by_ev.get(ev, 0)
        last = memo.pop(key, None)
        if last is not None and last[1] == seen:
            gap = conn.qp.attr.ev_profile.probe_interval_ps // 2000
            if now - last[0] < gap:
                memo[key] = last
                return False
        # (this probe is delivered and counted on its EV too, unless the per-EV
        # counters are full)
        counted = ev in self.rx_by_ev or len(self.rx_by_ev) < MAX_EV_COUNTERS
        memo[key] = (now, seen + 1 if counted else seen)
        if len(memo) > MAX_PROBE_MEMO:
            del memo[next(iter(memo))]
        return True

    def _flush(self) -> None:
        """Send everything the core has now (the pending backlog first)."""
        if self._closed:
            return
        pending = self._pending
        if pending:
            self._send_all(pending)
            if pending:
                return
        dgs = self.ctx.datagrams_to_send(time.monotonic_ns() * 1000)
        if dgs:
            pending.extend((d.data, d.ev, d.peer) for d in dgs)  # type: ignore[misc]
            self._send_all(pending)

    def _send_all(self, pending: deque[tuple[bytes, int, Peer]]) -> None:
        routes = self._routes
        tx_by_ev = self.tx_by_ev
        c = self.counters
        drop_every = self.tx_drop_every
        auth = self.auth
        tx_auth = self._tx_auth
        sent = 0
        nbytes = 0
        while pending:
            data, ev, peer = pending[0]
            if (data[0] == 0xC1 or data[0] == 0xC3) and not self._reply_allowed(peer):
                c.tx_replies_limited += 1  # a NACK or probe reply over the peer's rate
                pending.popleft()
                continue
            if auth:
                keys = tx_auth.get((peer, int.from_bytes(data[5:8], "big")))
                if keys is None:
                    c.tx_no_key += 1
                    pending.popleft()
                    continue
                data = keys.seal(data)
            entry = routes.get((peer, ev))
            if entry is None:
                try:
                    entry = self._route(peer, ev)
                except Exception as exc:  # never stall every session on one datagram
                    self._note_error(exc)
                    c.tx_errors += 1
                    pending.popleft()
                    continue
            if drop_every:
                self._tx_seen += 1
                if self._tx_seen % drop_every == 0:
                    c.tx_dropped_test += 1
                    pending.popleft()
                    continue
            try:
                entry[0](data, entry[1])
            except BlockingIOError:
                c.tx_eagain += 1
                self._wait_writable(entry[0].__self__)  # type: ignore[attr-defined]
                break
            except OSError as exc:
                # No route (a host link is down), unreachable...: the packet is
                # lost like on a wire; the core's loss recovery handles it.
                c.tx_errors += 1
                c.last_tx_error = f"{type(exc).__name__}: {exc}"
            pending.popleft()
            sent += 1
            nbytes += len(data)
            if ev in tx_by_ev:
                tx_by_ev[ev] += 1
            elif len(tx_by_ev) < MAX_EV_COUNTERS:
                tx_by_ev[ev] = 1
        c.tx_datagrams += sent
        c.tx_bytes += nbytes

    def _wait_writable(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if self._blocked_fd == fd:
            return
        if self._blocked_fd is not None:
            self._loop.remove_writer(self._blocked_fd)
        self._blocked_fd = fd
        self._loop.add_writer(fd, self._on_writable)

    def _on_writable(self) -> None:
        if self._blocked_fd is not None:
            self._loop.remove_writer(self._blocked_fd)
            self._blocked_fd = None
        self._flush()
        if not self._pending:
            self._after_input()

    def _arm_timer(self) -> None:
        """(Re)arm the loop timer for the core's earliest deadline."""
        if self._closed:
            return
        at = self.ctx.get_timer()
        if at == self._timer_at and (at is None or self._timer is not None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is None:
            return
        delay = (at - time.monotonic_ns() * 1000) / 1e12
        self._timer = self._loop.call_later(max(delay, 0.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        at = self._timer_at
        now = time.monotonic_ns() * 1000
        if at is not None and now < at:
            # Fired early (timer resolution): wait out the rest, never spin.
            delay = max((at - now) / 1e12, self._min_delay)
            self._timer = self._loop.call_later(delay, self._on_timer)
            return
        self._timer_at = None
        self.counters.timer_fires += 1
        try:
            self.ctx.handle_timer(now)
        except Exception as exc:
            self._note_error(exc)
        self._after_input()
