"""Connection set-up and the small services the CLI runs over a :class:`NetEndpoint`.

The control protocol (one JSON object per line, see :mod:`openmrc.net.control`):

``challenge`` (server -> client, on connect)
    ``{"op": "challenge", "version": 1, "nonce": hex}``.
``hello`` (client -> server)
    ``{"op": "hello", "version": 1, "auth": {"nonce": hex, "mac": hex},
    "peer": {...}, "qpns": [..], "psns": [..], "attr": {...}, "mode": "write" |
    "pingpong", "mr": {...} | null}``: ``auth.mac`` is HMAC-SHA256(secret, role "client",
    both nonces), so the secret never crosses the wire; the client's identity
    (a lab host index, or a UDP port: a plain peer's address is the TCP source
    address), its QP numbers and their random initial PSNs (24 bits, as
    RoCE's ``sq_psn``; absent: 0 both ways), the QP attributes both ends use (EV profile
    planes, MTU...), and, for ``pingpong``, the client region the server
    writes back into.  Every field is checked (:meth:`MemoryServer.check_hello`)
    against :class:`ServerLimits`.
``welcome`` (server -> client)
    ``{"op": "welcome", "qpns": [..], "psns": [..], "mr": {"addr", "rkey",
    "length"}, "peer": {...}, "auth": {"mac": hex}}``: one server QP per client QP
    (with its initial PSN),
    already connected, with receives posted for WRITE_WITH_IMMs, and the
    session's own region (its own rkey); ``auth.mac`` (role "server") proves
    the server knows the secret too.
``error`` (server -> client)
    ``{"op": "error", "field": name, "message": text}`` for every refused
    request (the connection is closed after a refused hello or a malformed
    line).
``verify`` -> ``verified``
    ``{"op": "verify", "qp": i, "imm": seq, "length": n, "sha256": hex}``: the
    server waits for the WRITE_WITH_IMM carrying ``seq`` on QP ``i`` (MRC
    completes it only after every earlier WRITE is placed), hashes the first
    ``n`` bytes of its region and answers ``{"ok", "sha256", "rx_by_ev", ...}``.
``stats`` -> ``stats``; ``bye`` -> ``bye`` (the server destroys the QPs).

:class:`MemoryServer` is the responder side (``openmrc serve``);
:class:`Session` the client side (``openmrc send`` / ``perf``), with
:func:`write_buffer` to push a buffer as several WRITEs, the last one a
WRITE_WITH_IMM.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import mmap
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openmrc.net.control import (
    BadMessage,
    ControlAddress,
    ControlChannel,
    ControlError,
    auth_mac,
    check_mac,
    new_nonce,
    open_control,
    start_control_server,
)
from openmrc.net.driver import (
    Connection,
    LabPeer,
    LocalMR,
    NetEndpoint,
    PlainPeer,
    RemoteMR,
    attr_from_json,
    attr_to_json,
    peer_from_json,
)
from openmrc.transport import QPAttr
from openmrc.transport.errors import InvalidArgument, MrcError
from openmrc.transport.ev import ev_path, ev_plane

PROTOCOL_VERSION = 1
#: Bytes per WRITE the server sends back in ``bidir`` mode.
BIDIR_MESSAGE = 65536
#: Receives kept posted per server QP (for WRITE_WITH_IMMs).
RECV_DEPTH = 64


def _diff(now: dict[int, int], before: dict[int, int]) -> dict[int, int]:
    out = {k: v - before.get(k, 0) for k, v in now.items()}
    return {k: v for k, v in sorted(out.items()) if v}


def by_plane(counts: dict[int, int]) -> dict[int, int]:
    """Sum per-EV counts into per-plane counts."""
    out: dict[int, int] = {}
    for ev, n in counts.items():
        out[ev_plane(ev)] = out.get(ev_plane(ev), 0) + n
    return dict(sorted(out.items()))


def format_ev_counts(rx: dict[int, int], tx: dict[int, int], indent: str = "  ") -> list[str]:
    """Lines of per-plane and per-EV counts (datagrams received / sent)."""
    lines = [f"{indent}per plane (datagrams rx/tx):"]
    rxp, txp = by_plane(rx), by_plane(tx)
    for p in sorted(set(rxp) | set(txp)):
        lines.append(f"{indent}  plane {p}: rx {rxp.get(p, 0):>7}  tx {txp.get(p, 0):>7}")
    evs = sorted(set(rx) | set(tx))
    lines.append(f"{indent}per EV ({len(evs)} EVs; ev plane/path rx/tx):")
    cells = [
        f"{ev:#07x} {ev_plane(ev)}/{ev_path(ev):<3} {rx.get(ev, 0):>5}/{tx.get(ev, 0):<5}"
        for ev in evs
    ]
    for i in range(0, len(cells), 4):
        lines.append(indent + "  " + "   ".join(cells[i : i + 4]))
    return lines


# ----- server ---------------------------------------------------------------------------


@dataclass
class VerifyResult:
    """What one ``verify`` found on the server."""

    ok: bool
    length: int
    sha256: str
    expected: str
    imm: int
    seconds: float
    rx_by_ev: dict[int, int] = field(default_factory=dict)
    tx_by_ev: dict[int, int] = field(default_factory=dict)


@dataclass
class ServerLimits:
    """What one :class:`MemoryServer` grants: caps per session and per server.

    A hello asking for more is refused with an error naming the field.
    """

    max_sessions: int = 4
    #: sessions one source address may hold (None: ``max_sessions``).
    max_sessions_per_source: int | None = None
    max_qps: int = 16
    max_evs_per_qp: int = 1024
    max_evs_per_session: int = 4096
    max_line: int = 64 << 10
    #: the handshake deadline: from accept to a checked hello (challenge sent,
    #: hello received), whatever the client sends meanwhile.
    hello_timeout: float = 10.0
    max_verify_timeout: float = 600.0
    #: connections not yet authenticated, in all and per source address.  A new
    #: connection beyond either evicts the oldest such connection (of that
    #: source, when the source is over its share), so connections held open
    #: without a hello never lock a legitimate client out.
    max_unauthenticated: int = 256
    max_unauthenticated_per_source: int = 128
    #: an authenticated session with no control message and no data on its QPs
    #: for this long is ended (its QPs and region freed).
    idle_timeout: float = 120.0


class HelloError(ValueError):
    """A refused request: ``field`` names what was wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


_HELLO_FIELDS = frozenset({"op", "version", "auth", "peer", "qpns", "psns", "attr", "mode", "mr"})


@dataclass
class Hello:
    """A validated hello: everything the server needs to build a session."""

    peer: LabPeer | PlainPeer
    qpns: list[int]
    attr: QPAttr
    mode: str
    client_mr: RemoteMR | None
    #: the client QPs' initial send PSNs (None: the hello has none, every PSN
    #: starts at 0 both ways).
    psns: list[int] | None = None


def _psn_list(value: Any, n: int, name: str) -> list[int] | None:
    """The ``n`` initial PSNs of a hello or welcome (RoCE-style random 24-bit
    values); None when the message has none (PSNs then start at 0 both ways)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n:
        raise HelloError(name, f"must list {n} initial PSNs, one per QP")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 24:
            raise HelloError(name, f"each must be an int in 0..2^24-1, got {v!r}")
    return list(value)


def _error(field: str, message: str) -> dict[str, Any]:
    return {"op": "error", "field": field, "message": f"{field}: {message}"}


def _same_address(a: str, b: str) -> bool:
    try:
        x, y = ipaddress.ip_address(a.split("%")[0]), ipaddress.ip_address(b.split("%")[0])
    except ValueError:
        return False
    if isinstance(x, ipaddress.IPv6Address) and x.ipv4_mapped is not None:
        x = x.ipv4_mapped
    if isinstance(y, ipaddress.IPv6Address) and y.ipv4_mapped is not None:
        y = y.ipv4_mapped
    return x == y


def _unicast6(text: str) -> bool:
    try:
        a = ipaddress.IPv6Address(text.split("%")[0])
    except ValueError:
        return False
    return not (a.is_multicast or a.is_unspecified)


class _ServerSession:
    """One client's QPs on the server, its own memory region, and the receive tasks."""

    def __init__(self, server: MemoryServer, mode: str, client_mr: RemoteMR | None) -> None:
        self.server = server
        self.mode = mode
        self.client_mr = client_mr
        # A protection domain per session: its rkey works only for its own QPs.
        self.pd = server.ep.alloc_pd()
        # An anonymous mapping of its own, not the heap: unmapped when the session
        # closes, so the memory goes back to the system at once (a freed
        # bytearray of this size can stay in malloc's heap).
        self._map = mmap.mmap(-1, server.size)
        self.buffer = memoryview(self._map)
        self.mr: LocalMR = server.ep.reg_mr(self.buffer, self.pd)
        self.conns: list[Connection] = []
        self.imms: list[dict[int, Any]] = []
        self.events: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.started = time.monotonic()
        self.rx0 = dict(server.ep.rx_by_ev)
        self.tx0 = dict(server.ep.tx_by_ev)
        self.closed = False
        self.tx_bytes = 0
        self.tx_failures = 0

    async def _serve_recvs(self, i: int) -> None:
        conn = self.conns[i]
        seen, event = self.imms[i], self.events[i]
        n = 0
        while True:
            try:
                wc = await conn.wait_recv()
            except ConnectionError:
                return
            n += 1
            conn.post_recv(RECV_DEPTH + n)
            if self.mode == "pingpong" and self.client_mr is not None and wc.ok:
                length = min(wc.byte_len, self.mr.length)
                conn.post_write(
                    self.mr, 0, length, self.client_mr, 0, imm=wc.imm_data, signaled=False
                )
            else:
                if len(seen) >= RECV_DEPTH * 64:
                    seen.pop(next(iter(seen)))  # bounded: the oldest immediates go first
                if wc.imm_data is not None:
                    seen[wc.imm_data] = wc
                event.set()

    async def _write_back(self, i: int) -> None:
        """``bidir``: WRITE the client's region over and over (64 KiB, 32 in flight)."""
        assert self.client_mr is not None
        conn = self.conns[i]
        size = min(BIDIR_MESSAGE, self.client_mr.length, self.mr.length)
        pending: deque[int] = deque()
        try:
            while True:
                if len(pending) >= 32:
                    wc = await conn.wait_send(pending.popleft())
                    if not wc.ok:
                        self.tx_failures += 1
                        return
                    self.tx_bytes += size
                pending.append(conn.post_write(self.mr, 0, size, self.client_mr, 0))
        except (ConnectionError, MrcError):
            return

    async def wait_imm(self, i: int, imm: int, timeout: float) -> bool:
        """Wait until QP ``i`` received the WRITE_WITH_IMM carrying ``imm``."""
        deadline = time.monotonic() + timeout
        while imm not in self.imms[i]:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.events[i].clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.events[i].wait(), left)
        return True

    def close(self) -> None:
        """Destroy the QPs and deregister the region (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for t in self.tasks:
            t.cancel()
        for conn in self.conns:
            self.server.ep.destroy_connection(conn)
        self.server.ep.dereg_mr(self.mr)
        self.conns.clear()
        self.imms.clear()
        # Unmap the region now (its QPs are gone and its rkey no longer works), not
        # whenever the garbage collector finds the session's reference cycles.
        view = self.mr.mr.view
        if view is not None:
            view.release()
        self.buffer.release()
        try:
            self._map.close()
        except BufferError:  # a view still exported somewhere: unmapped with it
            self.server.unmap_late += 1


class MemoryServer:
    """The responder: gives each authenticated client its own memory region.

    Clients prove they know ``secret`` (HMAC-SHA256 challenge-response, the
    secret never crosses the wire); each session gets a fresh region of
    ``size`` bytes with its own rkey, freed when the session ends.
    ``limits`` caps what a hello may ask for.  ``on_verify`` is called with
    every :class:`VerifyResult` (the CLI prints statistics and "hash OK").
    """

    def __init__(
        self,
        ep: NetEndpoint,
        size: int,
        *,
        secret: bytes,
        limits: ServerLimits | None = None,
        on_verify: Callable[[VerifyResult], None] | None = None,
        on_log: Callable[[str], None] | None = None,
        verify_timeout: float = 60.0,
    ) -> None:
        if size <= 0:
            raise InvalidArgument(f"size: must be positive, got {size}")
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise InvalidArgument("secret: must be at least 16 bytes")
        self.ep = ep
        self.size = size
        self.secret = secret
        self.limits = limits or ServerLimits()
        self.on_verify = on_verify
        self.verify_timeout = verify_timeout
        self.results: list[VerifyResult] = []
        self.sessions: set[_ServerSession] = set()
        self.sessions_done = 0
        #: closed sessions whose region could not be unmapped at once (a view of it
        #: was still exported); it goes when that view does.
        self.unmap_late = 0
        self.refused = 0
        self.session_closed = asyncio.Event()
        self._log = RateLimitedLog(on_log)
        self._server: asyncio.AbstractServer | None = None
        #: connections not yet authenticated -> (their source, accept time), oldest first.
        self._unauth: dict[ControlChannel, tuple[str, float]] = {}
        #: sessions per source address.
        self._by_source: dict[str, int] = {}
        #: unauthenticated connections dropped to make room; sessions ended idle.
        self.evicted = 0
        self.idled = 0

    async def listen(self, addr: ControlAddress) -> None:
        """Start accepting control connections at ``addr``."""
        self._server = await start_control_server(
            addr,
            self.handle,
            netns=self.ep.netns,
            max_line=self.limits.max_line,
            on_error=lambda exc: self._log(f"control: internal error: {exc!r}"),
        )

    async def close(self) -> None:
        """Stop accepting control connections and end every session."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None
        for session in list(self.sessions):
            session.close()
        self.sessions.clear()

    def _my_peer(self, ch: ControlChannel) -> dict[str, Any]:
        peer = self.ep.local_peer
        if isinstance(peer, PlainPeer) and self.ep.bind_addr in ("::", ""):
            peer = PlainPeer(ch.local_address() or peer.addr, peer.port)
        return peer.to_json()

    def check_hello(self, hello: dict[str, Any], source: str | None) -> Hello:
        """Validate every field of an (authenticated) hello; :class:`HelloError` names the bad one.

        ``source`` is the control connection's peer address (None on a Unix
        socket): a plain peer's address must be that one.
        """
        lim = self.limits
        for key in hello:
            if key not in _HELLO_FIELDS:
                raise HelloError(f"hello.{str(key)[:40]}", "unknown field")
        # peer
        peer_j = hello.get("peer")
        if not isinstance(peer_j, dict):
            raise HelloError("peer", "must be an object")
        if peer_j.get("kind") == "addr":
            addr = peer_j.get("addr")
            if source is None:
                # A Unix socket (mode 0600): only local root reaches it; the
                # address must still be a real unicast IPv6 address.
                if not isinstance(addr, str) or not _unicast6(addr):
                    raise HelloError("peer.addr", f"must be a unicast IPv6 address, got {addr!r}")
            elif addr is None or addr in ("", "::"):
                peer_j = {**peer_j, "addr": source}
            elif not isinstance(addr, str) or not _same_address(addr, source):
                raise HelloError(
                    "peer.addr", f"must be this connection's address ({source}), got {addr!r}"
                )
            else:
                peer_j = {**peer_j, "addr": source}
        try:
            peer = peer_from_json(peer_j)
        except InvalidArgument as exc:
            raise HelloError(str(exc).split(":")[0], str(exc).split(": ", 1)[-1]) from None
        if isinstance(peer, LabPeer):
            lab = self.ep.lab
            if lab is None or source is not None:
                raise HelloError(
                    "peer.kind", "a lab client needs a lab server over its Unix socket"
                )
            if peer.host >= lab.topology.spec.hosts or peer.host == self.ep.host:
                raise HelloError("peer.host", f"not another host of lab {lab.name}: {peer.host}")
        # qpns
        qpns = hello.get("qpns")
        if not isinstance(qpns, list) or not 1 <= len(qpns) <= lim.max_qps:
            raise HelloError("qpns", f"must list 1..{lim.max_qps} QP numbers")
        for q in qpns:
            if isinstance(q, bool) or not isinstance(q, int) or not 0 < q < 1 << 24:
                raise HelloError("qpns", f"each must be an int in 1..2^24-1, got {q!r}")
        if len(set(qpns)) != len(qpns):
            raise HelloError("qpns", "must be distinct")
        psns = _psn_list(hello.get("psns"), len(qpns), "psns")
        # attr
        try:
            attr = attr_from_json(hello.get("attr", {}))
        except InvalidArgument as exc:
            text = str(exc)
            raise HelloError(text.split(":")[0], text.split(": ", 1)[-1]) from None
        evs = attr.ev_profile.ev_count
        if evs > lim.max_evs_per_qp:
            raise HelloError("attr.ev_count", f"at most {lim.max_evs_per_qp} EVs per QP, got {evs}")
        if evs * len(qpns) > lim.max_evs_per_session:
            raise HelloError(
                "attr.ev_count",
                f"{len(qpns)} QPs x {evs} EVs exceed {lim.max_evs_per_session} per session",
            )
        if attr.mtu > self.ep.attr.mtu:
            raise HelloError(
                "attr.mtu", f"at most this server's {self.ep.attr.mtu}, got {attr.mtu}"
            )
        # mode and region
        mode = hello.get("mode", "write")
        if mode not in ("write", "pingpong", "bidir"):
            raise HelloError("mode", f"must be write, pingpong or bidir, got {str(mode)[:40]!r}")
        mr_j = hello.get("mr")
        client_mr = None
        if mr_j is not None:
            try:
                client_mr = RemoteMR.from_json(mr_j)
            except InvalidArgument as exc:
                raise HelloError("mr", str(exc)) from None
            if (
                client_mr.rkey >= 1 << 32
                or client_mr.addr >= 1 << 64
                or client_mr.length >= 1 << 48
            ):
                raise HelloError("mr", "addr/rkey/length out of range")
        if mode in ("pingpong", "bidir") and client_mr is None:
            raise HelloError("mr", f"{mode} needs the client's region")
        return Hello(peer, list(qpns), attr, mode, client_mr, psns)

    async def _refuse(self, ch: ControlChannel, field: str, message: str) -> None:
        self.refused += 1
        self._log(f"control: refused {ch.peer_address() or 'unix client'}: {field}: {message}")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ch.send(_error(field, message)), 5.0)

    def _admit(self, ch: ControlChannel, source: str) -> None:
        """Count ``ch`` as unauthenticated, within the caps: over one, the oldest
        such connection (of ``ch``'s source when that source is over its share)
        is dropped.  (Refusing the newcomer instead was measured worse: under a
        slowloris that reconnects, every slot is always young and a real client
        never gets one.)"""
        unauth = self._unauth
        now = time.monotonic()
        lim = self.limits
        same = [c for c, (s, _t) in unauth.items() if s == source]
        if len(same) >= lim.max_unauthenticated_per_source:
            victim: ControlChannel | None = same[0]
        elif len(unauth) >= lim.max_unauthenticated:
            victim = next(iter(unauth))
        else:
            victim = None
        if victim is not None:
            self.evicted += 1
            del unauth[victim]
            victim.abort()
        unauth[ch] = (source, now)

    def _activity(self, session: _ServerSession) -> int:
        """Data packets moved so far on ``session``'s QPs (both directions)."""
        return sum(c.qp.stats.rx_data_packets + c.qp.stats.tx_data_packets for c in session.conns)

    async def _next_request(self, ch: ControlChannel, session: _ServerSession) -> dict[str, Any]:
        """The session's next control message; raises :class:`TimeoutError` once the
        session has been idle (no message, no data) for ``limits.idle_timeout``."""
        idle = self.limits.idle_timeout
        seen = self._activity(session)
        while True:
            try:
                return await asyncio.wait_for(ch.recv(), idle)
            except TimeoutError:
                now = self._activity(session)
                if now == seen:
                    raise
                seen = now

    async def handle(self, ch: ControlChannel) -> None:
        """Serve one control connection (one client session); never raises."""
        session: _ServerSession | None = None
        source = ch.peer_address() or "unix"
        self._admit(ch, source)
        counted = False
        try:
            nonce = new_nonce()
            async with asyncio.timeout(self.limits.hello_timeout):
                await ch.send({"op": "challenge", "version": PROTOCOL_VERSION, "nonce": nonce})
                hello = await ch.recv()
            if hello["op"] != "hello":
                return await self._refuse(ch, "op", f"expected hello, got {hello['op'][:40]!r}")
            if hello.get("version") != PROTOCOL_VERSION:
                return await self._refuse(ch, "version", f"must be {PROTOCOL_VERSION}")
            auth = hello.get("auth")
            cnonce = auth.get("nonce") if isinstance(auth, dict) else None
            if not isinstance(cnonce, str) or not 16 <= len(cnonce) <= 128:
                return await self._refuse(ch, "auth", "missing (a nonce and a mac are needed)")
            if not check_mac(self.secret, "client", nonce, cnonce, auth.get("mac")):  # type: ignore[union-attr]
                return await self._refuse(ch, "auth", "wrong mac (the secret does not match)")
            if (auth.get("datagrams") is True) != self.ep.auth:  # type: ignore[union-attr]
                return await self._refuse(
                    ch,
                    "auth.datagrams",
                    "this server authenticates every datagram (serve --auth): "
                    "run the client with --auth too"
                    if self.ep.auth
                    else "this server does not authenticate datagrams: run the client "
                    "without --auth, or the server with --auth",
                )
            keys = None
            if self.ep.auth:
                from openmrc.net.auth import DatagramAuth  # needs the `net` extra

                keys = DatagramAuth.for_server(self.secret, nonce, cnonce)
            try:
                h = self.check_hello(hello, ch.peer_address())
            except HelloError as exc:
                return await self._refuse(ch, exc.field, str(exc).split(": ", 1)[-1])
            self._unauth.pop(ch, None)  # authenticated: no longer evictable
            if len(self.sessions) >= self.limits.max_sessions:
                return await self._refuse(
                    ch, "sessions", f"this server already has {self.limits.max_sessions} sessions"
                )
            per_source = self.limits.max_sessions_per_source
            if per_source is not None and self._by_source.get(source, 0) >= per_source:
                return await self._refuse(
                    ch, "sessions", f"{source} already has {per_source} sessions here"
                )
            self._by_source[source] = self._by_source.get(source, 0) + 1
            counted = True
            try:
                session = _ServerSession(self, h.mode, h.client_mr)
            except (OSError, MemoryError, ValueError) as exc:  # e.g. the region's mmap
                return await self._refuse(
                    ch, "size", f"cannot map a {self.size}-byte region for the session: {exc}"
                )
            self.sessions.add(session)
            for i, qpn in enumerate(h.qpns):
                conn = self.ep.create_connection(pd=session.pd)
                session.conns.append(conn)
                try:
                    conn.connect(
                        qpn,
                        h.peer,
                        h.attr,
                        send_psn=conn.initial_psn if h.psns is not None else 0,
                        recv_psn=h.psns[i] if h.psns is not None else 0,
                    )
                except InvalidArgument as exc:  # e.g. the path MTU is too small
                    field = "attr.mtu" if str(exc).startswith("mtu") else "peer"
                    return await self._refuse(ch, field, str(exc).split(": ", 1)[-1])
                if keys is not None:
                    conn.set_auth(keys)
                for k in range(RECV_DEPTH):
                    conn.post_recv(k)
                session.imms.append({})
                session.events.append(asyncio.Event())
                session.tasks.append(asyncio.create_task(session._serve_recvs(i)))
                if h.mode == "bidir":
                    session.tasks.append(asyncio.create_task(session._write_back(i)))
            await ch.send(
                {
                    "op": "welcome",
                    "qpns": [c.qpn for c in session.conns],
                    "psns": [c.initial_psn if h.psns is not None else 0 for c in session.conns],
                    "mr": session.mr.remote().to_json(),
                    "peer": self._my_peer(ch),
                    "auth": {
                        "mac": auth_mac(self.secret, "server", nonce, cnonce),
                        "datagrams": self.ep.auth,
                    },
                }
            )
            while True:
                try:
                    msg = await self._next_request(ch, session)
                except TimeoutError:
                    self.idled += 1
                    return await self._refuse(
                        ch, "session", f"idle for {self.limits.idle_timeout:g} s: ended"
                    )
                op = msg["op"]
                if op == "verify":
                    await ch.send(await self._verify(session, msg))
                elif op == "perf_stats":
                    dt = time.monotonic() - session.started
                    await ch.send(
                        {
                            "op": "perf_stats",
                            "bytes": session.tx_bytes,
                            "seconds": dt,
                            "gbps": session.tx_bytes * 8 / dt / 1e9 if dt > 0 else 0.0,
                            "failures": session.tx_failures,
                        }
                    )
                elif op == "stats":
                    await ch.send({"op": "stats", "stats": _jsonable(self.ep.stats())})
                elif op == "bye":
                    await ch.send({"op": "bye"})
                    return
                else:
                    await ch.send(_error("op", f"unknown op {op[:40]!r}"))
        except BadMessage as exc:
            await self._refuse(ch, exc.field, exc.reason)
        except (ControlError, ConnectionError, OSError, TimeoutError) as exc:
            if session is not None:  # a session ended without a bye: say why
                self._log(f"control: session of {source} ended: {type(exc).__name__}: {exc}")
            return
        except Exception as exc:  # never let one connection take the server down
            self._log(f"control: internal error: {exc!r}")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ch.send(_error("server", "internal error")), 5.0)
        finally:
            self._unauth.pop(ch, None)
            if counted:
                left = self._by_source.get(source, 1) - 1
                if left > 0:
                    self._by_source[source] = left
                else:
                    self._by_source.pop(source, None)
            if session is not None:
                session.close()
                self.sessions.discard(session)
                self.sessions_done += 1
                self.session_closed.set()

    async def _verify(self, session: _ServerSession, msg: dict[str, Any]) -> dict[str, Any]:
        fields = {}
        for key in ("qp", "imm", "length"):
            v = msg.get(key)
            if isinstance(v, bool) or not isinstance(v, int):
                return _error(f"verify.{key}", "must be an int")
            fields[key] = v
        i, imm, length = fields["qp"], fields["imm"], fields["length"]
        expected = msg.get("sha256")
        if not isinstance(expected, str) or len(expected) != 64:
            return _error("verify.sha256", "must be 64 hex digits")
        if not 0 <= i < len(session.conns):
            return _error("verify.qp", f"must be 0..{len(session.conns) - 1}")
        if not 0 <= imm < 1 << 32:
            return _error("verify.imm", "must be a 32-bit unsigned int")
        if not 0 <= length <= len(session.buffer):
            return _error("verify.length", f"must be 0..{len(session.buffer)}")
        timeout = msg.get("timeout", self.verify_timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            return _error("verify.timeout", "must be a number of seconds")
        if not 0 <= timeout <= self.limits.max_verify_timeout:
            return _error("verify.timeout", f"must be 0..{self.limits.max_verify_timeout:g} s")
        arrived = await session.wait_imm(i, imm, float(timeout))
        digest = hashlib.sha256(memoryview(session.buffer)[:length]).hexdigest()
        ep = self.ep
        result = VerifyResult(
            ok=arrived and digest == expected,
            length=length,
            sha256=digest,
            expected=expected,
            imm=imm,
            seconds=time.monotonic() - session.started,
            rx_by_ev=_diff(ep.rx_by_ev, session.rx0),
            tx_by_ev=_diff(ep.tx_by_ev, session.tx0),
        )
        self.results.append(result)
        if self.on_verify is not None:
            self.on_verify(result)
        return {
            "op": "verified",
            "ok": result.ok,
            "arrived": arrived,
            "sha256": digest,
            "length": length,
            "rx_by_ev": {str(k): v for k, v in result.rx_by_ev.items()},
            "tx_by_ev": {str(k): v for k, v in result.tx_by_ev.items()},
        }


class RateLimitedLog:
    """Log lines through ``sink`` (stderr by default), at most ``burst`` per ``period`` s.

    Suppressed lines are counted and summarised in the next line let through,
    so a flood of bad requests cannot fill a disk.
    """

    def __init__(
        self, sink: Callable[[str], None] | None = None, burst: int = 10, period: float = 10.0
    ) -> None:
        self.sink = sink or (lambda line: print(line, file=sys.stderr, flush=True))
        self.burst = burst
        self.period = period
        self.window_start = time.monotonic()
        self.count = 0
        self.suppressed = 0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self.window_start >= self.period:
            if self.suppressed:
                self.sink(f"({self.suppressed} similar lines suppressed)")
            self.window_start, self.count, self.suppressed = now, 0, 0
        if self.count < self.burst:
            self.count += 1
            self.sink(line[:300])
        else:
            self.suppressed += 1


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


# ----- client ---------------------------------------------------------------------------


class Session:
    """The client side: QPs connected to a :class:`MemoryServer`, and its region."""

    def __init__(
        self,
        ep: NetEndpoint,
        channel: ControlChannel,
        conns: list[Connection],
        remote: RemoteMR,
        server_peer: LabPeer | PlainPeer,
    ) -> None:
        self.ep = ep
        self.channel = channel
        self.conns = conns
        self.remote = remote
        self.server_peer = server_peer

    @classmethod
    async def open(
        cls,
        ep: NetEndpoint,
        addr: ControlAddress,
        *,
        secret: bytes,
        qps: int = 1,
        mode: str = "write",
        local: LocalMR | None = None,
        timeout: float = 10.0,
    ) -> Session:
        """Connect to the server at ``addr`` and bring ``qps`` QPs up on both ends.

        ``secret`` is the server's shared secret (``serve``'s token file):
        the client answers the server's challenge with an HMAC and checks the
        server's own HMAC in the welcome.  ``mode="pingpong"`` makes the
        server WRITE_WITH_IMM every message back into ``local``.
        """
        if not 1 <= qps <= 256:
            raise InvalidArgument(f"qps: must be 1..256, got {qps}")
        channel = await open_control(addr, netns=ep.netns, timeout=timeout)
        conns: list[Connection] = []
        try:
            challenge = await channel.recv(timeout)
            snonce = challenge.get("nonce")
            if challenge["op"] == "error":
                raise ControlError(
                    f"control: the peer refused: {str(challenge.get('message'))[:200]}"
                )
            if challenge["op"] != "challenge" or not isinstance(snonce, str):
                raise ControlError(f"control: expected a challenge, got {challenge['op'][:40]!r}")
            cnonce = new_nonce()
            conns = [ep.create_connection() for _ in range(qps)]
            me = ep.local_peer.to_json()
            if me["kind"] == "addr" and (ep.bind_addr in ("::", "") or addr.path is None):
                me["addr"] = None  # the server uses our TCP source address
            hello = {
                "op": "hello",
                "version": PROTOCOL_VERSION,
                "auth": {
                    "nonce": cnonce,
                    "mac": auth_mac(secret, "client", snonce, cnonce),
                    "datagrams": ep.auth,
                },
                "peer": me,
                "qpns": [c.qpn for c in conns],
                "psns": [c.initial_psn for c in conns],
                "attr": attr_to_json(ep.attr),
                "mode": mode,
                "mr": local.remote().to_json() if local is not None else None,
            }
            welcome = await channel.request(hello, "welcome", timeout)
            auth = welcome.get("auth")
            if not isinstance(auth, dict) or not check_mac(
                secret, "server", snonce, cnonce, auth.get("mac")
            ):
                raise ControlError("control: the server did not prove it knows the secret")
            if ep.auth and auth.get("datagrams") is not True:
                raise ControlError(
                    "control: the server does not authenticate datagrams (it runs without --auth)"
                )
            keys = None
            if ep.auth:
                from openmrc.net.auth import DatagramAuth  # needs the `net` extra

                keys = DatagramAuth.for_client(secret, snonce, cnonce)
            server_peer = peer_from_json(welcome["peer"])
            if isinstance(server_peer, PlainPeer) and addr.host and server_peer.addr in ("::",):
                server_peer = PlainPeer(addr.host, server_peer.port)
            remote = RemoteMR.from_json(welcome["mr"])
            qpns = welcome["qpns"]
            if not isinstance(qpns, list) or len(qpns) != qps:
                raise ControlError(f"control: asked for {qps} QPs, the server gave {qpns!r}")
            try:
                psns = _psn_list(welcome.get("psns"), qps, "psns")
            except HelloError as exc:
                raise ControlError(f"control: welcome {exc}") from None
            for i, (conn, qpn) in enumerate(zip(conns, qpns, strict=True)):
                if psns is None:  # a server that exchanges no PSNs: 0 both ways
                    conn.connect(int(qpn), server_peer)
                else:
                    conn.connect(int(qpn), server_peer, send_psn=conn.initial_psn, recv_psn=psns[i])
                if keys is not None:
                    conn.set_auth(keys)
        except BaseException:
            await channel.close()
            for conn in conns:
                ep.destroy_connection(conn)
            raise
        return cls(ep, channel, conns, remote, server_peer)

    async def verify(
        self, imm: int, length: int, sha256: str, qp: int = 0, timeout: float = 60.0
    ) -> dict[str, Any]:
        """Ask the server to check the first ``length`` bytes against ``sha256``."""
        msg = {
            "op": "verify",
            "qp": qp,
            "imm": imm,
            "length": length,
            "sha256": sha256,
            "timeout": timeout,
        }
        return await self.channel.request(msg, "verified", timeout + 10)

    async def perf_stats(self) -> dict[str, Any]:
        """``bidir`` mode: what the server has written back so far (bytes, seconds, gbps)."""
        return await self.channel.request({"op": "perf_stats"}, "perf_stats", 10.0)

    async def server_stats(self) -> dict[str, Any]:
        """The server endpoint's statistics."""
        return (await self.channel.request({"op": "stats"}, "stats", 10.0))["stats"]

    async def close(self) -> None:
        """Say bye (the server drops its QPs), close the channel, drop our QPs."""
        with contextlib.suppress(ControlError, ConnectionError, OSError):
            await self.channel.request({"op": "bye"}, "bye", 5.0)
        await self.channel.close()
        for conn in self.conns:
            self.ep.destroy_connection(conn)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@dataclass
class WriteResult:
    """The outcome of :func:`write_buffer`."""

    ok: bool
    length: int
    writes: int
    seconds: float
    failed: list[str] = field(default_factory=list)

    @property
    def goodput_bps(self) -> float:
        """Bits of payload per second."""
        return self.length * 8 / self.seconds if self.seconds > 0 else 0.0


async def write_buffer(
    session: Session,
    local: LocalMR,
    length: int,
    *,
    imm: int,
    chunk: int = 1 << 20,
    max_outstanding: int = 64,
    qp: int = 0,
    on_progress: Callable[[int], Any] | None = None,
) -> WriteResult:
    """WRITE ``local[:length]`` to the server's region as ``chunk``-byte WRITEs.

    The last WRITE is a WRITE_WITH_IMM carrying ``imm``.  At most
    ``max_outstanding`` WRITEs are in flight.  ``on_progress(bytes_done)`` is
    awaited (if it returns an awaitable) after each completion.
    """
    if length > session.remote.length:
        raise InvalidArgument(
            f"length: {length} bytes do not fit the server's region ({session.remote.length})"
        )
    if chunk <= 0:
        raise InvalidArgument(f"chunk: must be positive, got {chunk}")
    conn = session.conns[qp]
    t0 = time.perf_counter()
    offsets = list(range(0, length, chunk)) or [0]
    posted: list[tuple[int, int]] = []
    failed: list[str] = []
    done_bytes = 0
    pending: list[tuple[int, int]] = []

    async def reap_one() -> None:
        nonlocal done_bytes
        wr, n = pending.pop(0)
        wc = await conn.wait_send(wr)
        if not wc.ok:
            failed.append(f"WR {wr}: {wc.status.value}")
        done_bytes += n
        if on_progress is not None:
            res = on_progress(done_bytes)
            if asyncio.iscoroutine(res):
                await res

    for i, off in enumerate(offsets):
        n = min(chunk, length - off)
        last = i == len(offsets) - 1
        while len(pending) >= max_outstanding and not failed:
            await reap_one()
        if failed:
            break  # the QP failed: posting more would only raise (the QP is in ERROR)
        wr = conn.post_write(local, off, n, session.remote, imm=imm if last else None)
        pending.append((wr, n))
        posted.append((wr, n))
    while pending:
        await reap_one()
    dt = time.perf_counter() - t0
    return WriteResult(not failed, length, len(posted), dt, failed)
