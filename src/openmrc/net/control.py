"""The out-of-band control channel: newline-delimited JSON over a stream socket.

MRC, like RoCE, exchanges connection parameters (QP numbers, memory region
address/rkey/length, host identity, EV profile) out of band.  openmrc uses
one JSON object per line over:

* a **Unix domain socket** for lab peers, at ``<lab state dir>/<lab>/<host>.sock``
  (``/run/openmrc-lab/<lab>/h1.sock`` by default).  Lab namespaces share the
  filesystem, and TCP *through the fabric* would not work: its checksum has the
  same problem as UDP's (switches rewrite the destination address);
* **TCP** (port 4792) for plain IPv6 peers such as ``::1``.

:class:`ControlAddress` names either; :func:`open_control` connects (retrying
while the server starts) and :func:`start_control_server` listens.  Messages
are dicts with an ``"op"`` key; see :mod:`openmrc.net.service` for the
protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openmrc.net.driver import CONTROL_PORT

#: Longest control message accepted (bytes, one line).
MAX_LINE = 1 << 20


class ControlError(ConnectionError):
    """The control channel closed, timed out or carried something unexpected."""


@dataclass(frozen=True)
class ControlAddress:
    """Where a control server listens: a Unix socket path, or a TCP address and port."""

    path: str | None = None
    host: str | None = None
    port: int = CONTROL_PORT

    def __str__(self) -> str:
        return f"unix:{self.path}" if self.path else f"tcp:[{self.host}]:{self.port}"


def lab_control_path(lab: str, host: str) -> Path:
    """The control socket of lab host ``host`` (``<state dir>/<lab>/<host>.sock``)."""
    from openmrc.net.lab import state_dir

    return state_dir() / lab / f"{host}.sock"


class ControlChannel:
    """One control connection: send and receive JSON messages."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, msg: dict[str, Any]) -> None:
        """Send one message."""
        self.writer.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        await self.writer.drain()

    async def recv(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message; :class:`ControlError` on EOF, timeout or bad JSON."""
        try:
            line = await asyncio.wait_for(self.reader.readline(), timeout)
        except TimeoutError:
            raise ControlError(f"control: no message within {timeout} s") from None
        except (ValueError, asyncio.LimitOverrunError):
            raise ControlError(f"control: message longer than {MAX_LINE} bytes") from None
        if not line:
            raise ControlError("control: the peer closed the connection")
        try:
            msg = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ControlError(f"control: bad JSON: {exc}") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
            raise ControlError(f"control: expected an object with an 'op', got {line[:80]!r}")
        return msg

    async def request(
        self, msg: dict[str, Any], expect: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send ``msg`` and return the reply, which must have op ``expect`` (or ``error``)."""
        await self.send(msg)
        reply = await self.recv(timeout)
        if reply["op"] == "error":
            raise ControlError(f"control: the peer refused: {reply.get('message', reply)}")
        if reply["op"] != expect:
            raise ControlError(f"control: expected {expect!r}, got {reply['op']!r}")
        return reply

    def local_address(self) -> str | None:
        """This end's IP address on a TCP channel (None on a Unix socket)."""
        name = self.writer.get_extra_info("sockname")
        return name[0] if isinstance(name, tuple) else None

    def peer_address(self) -> str | None:
        """The far end's IP address on a TCP channel (None on a Unix socket)."""
        name = self.writer.get_extra_info("peername")
        return name[0] if isinstance(name, tuple) else None

    async def close(self) -> None:
        """Close the connection (errors while closing are ignored)."""
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


def _tcp_socket(host: str, port: int, listen: bool) -> socket.socket:
    """A TCP socket, connected (blocking) or listening (created in the caller's namespace)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if listen:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(16)
        else:
            sock.settimeout(2.0)
            sock.connect((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _in_ns(netns: str | None, fn: Callable[..., Any], *args: Any) -> Any:
    if netns is None:
        return fn(*args)
    from openmrc.net.netns import call_in_netns

    return call_in_netns(netns, fn, *args)


async def open_control(
    addr: ControlAddress, *, netns: str | None = None, timeout: float = 10.0
) -> ControlChannel:
    """Connect to a control server, retrying until ``timeout`` while it starts.

    ``netns``: make a TCP connection from inside that network namespace.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if addr.path is not None:
                reader, writer = await asyncio.open_unix_connection(addr.path, limit=MAX_LINE)
            else:
                assert addr.host is not None
                sock = _in_ns(netns, _tcp_socket, addr.host, addr.port, False)
                reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_LINE)
            return ControlChannel(reader, writer)
        except (FileNotFoundError, ConnectionRefusedError, TimeoutError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise ControlError(f"control: cannot connect to {addr}: {exc}") from None
            await asyncio.sleep(0.1)


Handler = Callable[[ControlChannel], Awaitable[None]]


async def start_control_server(
    addr: ControlAddress, handler: Handler, *, netns: str | None = None
) -> asyncio.AbstractServer:
    """Listen on ``addr`` and run ``handler(channel)`` for every connection.

    A Unix socket path's directory is created; a stale socket file is
    replaced.  The channel is closed when the handler returns.
    """

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channel = ControlChannel(reader, writer)
        try:
            await handler(channel)
        finally:
            await channel.close()

    if addr.path is not None:
        path = Path(addr.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                path.unlink()
        return await asyncio.start_unix_server(on_client, str(path), limit=MAX_LINE)
    assert addr.host is not None
    sock = _in_ns(netns, _tcp_socket, addr.host, addr.port, True)
    return await asyncio.start_server(on_client, sock=sock, limit=MAX_LINE)


def remove_control_path(addr: ControlAddress) -> None:
    """Remove a Unix control socket file and its directory when empty."""
    if addr.path is None:
        return
    path = Path(addr.path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    with contextlib.suppress(OSError):
        os.rmdir(path.parent)
