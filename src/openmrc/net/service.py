"""Connection set-up and the small services the CLI runs over a :class:`NetEndpoint`.

The control protocol (one JSON object per line, see :mod:`openmrc.net.control`):

``hello`` (client -> server)
    ``{"op": "hello", "version": 1, "peer": {...}, "qpns": [..], "attr": {...},
    "mode": "write" | "pingpong", "mr": {...} | null}``: the client's identity
    (a lab host index or a UDP port; a plain peer's address defaults to the
    TCP source address), its QP numbers, the QP attributes both ends use (EV
    profile planes, MTU...), and, for ``pingpong``, the client region the
    server writes back into.
``welcome`` (server -> client)
    ``{"op": "welcome", "qpns": [..], "mr": {"addr", "rkey", "length"},
    "peer": {...}}``: one server QP per client QP, already connected, with
    receives posted for WRITE_WITH_IMMs.
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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openmrc.net.control import (
    ControlAddress,
    ControlChannel,
    ControlError,
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
from openmrc.transport.errors import InvalidArgument, MrcError
from openmrc.transport.ev import ev_path, ev_plane

PROTOCOL_VERSION = 1
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


class _ServerSession:
    """One client's QPs on the server and the tasks that serve their receives."""

    def __init__(self, server: MemoryServer, mode: str, client_mr: RemoteMR | None) -> None:
        self.server = server
        self.mode = mode
        self.client_mr = client_mr
        self.conns: list[Connection] = []
        self.imms: list[dict[int, Any]] = []
        self.events: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.started = time.monotonic()
        self.rx0 = dict(server.ep.rx_by_ev)
        self.tx0 = dict(server.ep.tx_by_ev)

    async def _serve_recvs(self, i: int) -> None:
        conn = self.conns[i]
        seen, event = self.imms[i], self.events[i]
        mr = self.server.mr
        n = 0
        while True:
            wc = await conn.wait_recv()
            n += 1
            conn.post_recv(RECV_DEPTH + n)
            if self.mode == "pingpong" and self.client_mr is not None and wc.ok:
                conn.post_write(
                    mr, 0, wc.byte_len, self.client_mr, 0, imm=wc.imm_data, signaled=False
                )
            else:
                seen[wc.imm_data] = wc
                event.set()

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
        for t in self.tasks:
            t.cancel()
        for conn in self.conns:
            self.server.ep.destroy_connection(conn)


class MemoryServer:
    """The responder: exposes one memory region to clients over the control channel.

    ``on_verify`` is called with every :class:`VerifyResult` (the CLI prints
    statistics and "hash OK" there).
    """

    def __init__(
        self,
        ep: NetEndpoint,
        size: int,
        *,
        on_verify: Callable[[VerifyResult], None] | None = None,
        verify_timeout: float = 60.0,
    ) -> None:
        if size <= 0:
            raise InvalidArgument(f"size: must be positive, got {size}")
        self.ep = ep
        self.buffer = bytearray(size)
        self.mr: LocalMR = ep.reg_mr(self.buffer)
        self.on_verify = on_verify
        self.verify_timeout = verify_timeout
        self.results: list[VerifyResult] = []
        self.sessions_done = 0
        self.session_closed = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None

    async def listen(self, addr: ControlAddress) -> None:
        """Start accepting control connections at ``addr``."""
        self._server = await start_control_server(addr, self.handle, netns=self.ep.netns)

    async def close(self) -> None:
        """Stop accepting control connections."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None

    def _client_peer(self, hello: dict[str, Any], ch: ControlChannel) -> LabPeer | PlainPeer:
        peer = hello.get("peer")
        if isinstance(peer, dict) and peer.get("kind") == "addr":
            addr = peer.get("addr")
            if not addr or addr == "::":
                peer = {**peer, "addr": ch.peer_address() or "::1"}
        return peer_from_json(peer)

    def _my_peer(self, ch: ControlChannel) -> dict[str, Any]:
        peer = self.ep.local_peer
        if isinstance(peer, PlainPeer) and self.ep.bind_addr in ("::", ""):
            peer = PlainPeer(ch.local_address() or peer.addr, peer.port)
        return peer.to_json()

    async def handle(self, ch: ControlChannel) -> None:
        """Serve one control connection (one client session)."""
        session: _ServerSession | None = None
        try:
            hello = await ch.recv(30.0)
            if hello["op"] != "hello" or hello.get("version") != PROTOCOL_VERSION:
                await ch.send({"op": "error", "message": f"expected hello v{PROTOCOL_VERSION}"})
                return
            try:
                peer = self._client_peer(hello, ch)
                attr = attr_from_json(hello.get("attr", {}))
                qpns = hello.get("qpns")
                if not isinstance(qpns, list) or not qpns or len(qpns) > 256:
                    raise InvalidArgument("qpns: must list 1..256 QP numbers")
                mode = hello.get("mode", "write")
                if mode not in ("write", "pingpong"):
                    raise InvalidArgument(f"mode: must be write or pingpong, got {mode!r}")
                client_mr = RemoteMR.from_json(hello["mr"]) if hello.get("mr") else None
                if mode == "pingpong" and client_mr is None:
                    raise InvalidArgument("mr: pingpong needs the client's region")
                if isinstance(peer, LabPeer) and self.ep.lab is None:
                    raise InvalidArgument("peer: a lab client needs a lab server (--lab/--host)")
            except (InvalidArgument, MrcError, KeyError, TypeError, ValueError) as exc:
                await ch.send({"op": "error", "message": str(exc)})
                return
            session = _ServerSession(self, mode, client_mr)
            for i, qpn in enumerate(qpns):
                conn = self.ep.create_connection()
                conn.connect(int(qpn), peer, attr)
                for k in range(RECV_DEPTH):
                    conn.post_recv(k)
                session.conns.append(conn)
                session.imms.append({})
                session.events.append(asyncio.Event())
                session.tasks.append(asyncio.create_task(session._serve_recvs(i)))
            await ch.send(
                {
                    "op": "welcome",
                    "qpns": [c.qpn for c in session.conns],
                    "mr": self.mr.remote().to_json(),
                    "peer": self._my_peer(ch),
                }
            )
            while True:
                msg = await ch.recv()
                op = msg["op"]
                if op == "verify":
                    await ch.send(await self._verify(session, msg))
                elif op == "stats":
                    await ch.send({"op": "stats", "stats": _jsonable(self.ep.stats())})
                elif op == "bye":
                    await ch.send({"op": "bye"})
                    return
                else:
                    await ch.send({"op": "error", "message": f"unknown op {op!r}"})
        except (ControlError, ConnectionError):
            return
        finally:
            if session is not None:
                session.close()
                self.sessions_done += 1
                self.session_closed.set()

    async def _verify(self, session: _ServerSession, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            i, imm, length = int(msg["qp"]), int(msg["imm"]), int(msg["length"])
            expected = str(msg["sha256"])
            if not 0 <= i < len(session.conns):
                raise ValueError(f"qp: must be 0..{len(session.conns) - 1}")
            if not 0 <= length <= len(self.buffer):
                raise ValueError(f"length: must be 0..{len(self.buffer)}")
        except (KeyError, ValueError, TypeError) as exc:
            return {"op": "error", "message": f"verify: {exc}"}
        arrived = await session.wait_imm(i, imm, float(msg.get("timeout", self.verify_timeout)))
        digest = hashlib.sha256(memoryview(self.buffer)[:length]).hexdigest()
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
        qps: int = 1,
        mode: str = "write",
        local: LocalMR | None = None,
        timeout: float = 10.0,
    ) -> Session:
        """Connect to the server at ``addr`` and bring ``qps`` QPs up on both ends.

        ``mode="pingpong"`` makes the server WRITE_WITH_IMM every message
        back into ``local`` (for latency tests).
        """
        if not 1 <= qps <= 256:
            raise InvalidArgument(f"qps: must be 1..256, got {qps}")
        channel = await open_control(addr, netns=ep.netns, timeout=timeout)
        try:
            conns = [ep.create_connection() for _ in range(qps)]
            me = ep.local_peer.to_json()
            if me["kind"] == "addr" and ep.bind_addr in ("::", ""):
                me["addr"] = None  # the server uses our TCP source address
            hello = {
                "op": "hello",
                "version": PROTOCOL_VERSION,
                "peer": me,
                "qpns": [c.qpn for c in conns],
                "attr": attr_to_json(ep.attr),
                "mode": mode,
                "mr": local.remote().to_json() if local is not None else None,
            }
            welcome = await channel.request(hello, "welcome", timeout)
            server_peer = peer_from_json(welcome["peer"])
            if isinstance(server_peer, PlainPeer) and addr.host and server_peer.addr in ("::",):
                server_peer = PlainPeer(addr.host, server_peer.port)
            remote = RemoteMR.from_json(welcome["mr"])
            qpns = welcome["qpns"]
            if not isinstance(qpns, list) or len(qpns) != qps:
                raise ControlError(f"control: asked for {qps} QPs, the server gave {qpns!r}")
            for conn, qpn in zip(conns, qpns, strict=True):
                conn.connect(int(qpn), server_peer)
        except BaseException:
            await channel.close()
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
        while len(pending) >= max_outstanding:
            await reap_one()
        wr = conn.post_write(local, off, n, session.remote, imm=imm if last else None)
        pending.append((wr, n))
        posted.append((wr, n))
        if failed:
            break
    while pending:
        await reap_one()
    dt = time.perf_counter() - t0
    return WriteResult(not failed, length, len(posted), dt, failed)
