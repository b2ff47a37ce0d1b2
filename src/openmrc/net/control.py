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
import hashlib
import hmac
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


class BadMessage(ControlError):
    """A control message that is not a JSON object with an ``op`` (the reply names why)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"control: {field}: {message}")
        self.field = field
        self.reason = message


def parse_message(line: bytes) -> dict[str, Any]:
    """One control line -> a dict with a string ``op``; :class:`BadMessage` otherwise.

    Never raises anything else, whatever the bytes (tested by fuzzing).
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadMessage("message", f"not UTF-8 (byte {exc.start})") from None
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadMessage("message", f"bad JSON: {str(exc)[:80]}") from None
    if not isinstance(msg, dict):
        raise BadMessage("message", f"must be a JSON object, got {type(msg).__name__}")
    if not isinstance(msg.get("op"), str):
        raise BadMessage("op", "missing or not a string")
    return msg


class ControlChannel:
    """One control connection: send and receive JSON messages."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_line: int = MAX_LINE
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.max_line = max_line

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
            raise BadMessage("message", f"longer than {self.max_line} bytes") from None
        if not line:
            raise ControlError("control: the peer closed the connection")
        return parse_message(line)

    async def request(
        self, msg: dict[str, Any], expect: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send ``msg`` and return the reply, which must have op ``expect`` (or ``error``)."""
        await self.send(msg)
        reply = await self.recv(timeout)
        if reply["op"] == "error":
            raise ControlError(
                f"control: the peer refused: {str(reply.get('message', reply))[:200]}"
            )
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

    def abort(self) -> None:
        """Drop the connection at once (the handler reading it sees the end)."""
        with contextlib.suppress(Exception):
            self.writer.transport.abort()

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


# ----- the shared secret ------------------------------------------------------------------

#: Bytes of a generated secret.
TOKEN_BYTES = 32
#: Environment variable naming the default token file.
TOKEN_ENV = "OPENMRC_TOKEN_FILE"


def default_token_path() -> Path:
    """Where ``serve`` keeps its secret unless ``--token-file`` says otherwise.

    ``$OPENMRC_TOKEN_FILE``; else ``/run/openmrc/control.token`` as root, else
    ``$XDG_RUNTIME_DIR/openmrc/control.token`` (or ``~/.openmrc/control.token``).
    """
    env = os.environ.get(TOKEN_ENV)
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/openmrc/control.token")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path.home() / ".openmrc"
    return base / "openmrc" / "control.token" if runtime else base / "control.token"


def load_token(path: str | Path) -> bytes:
    """The secret in ``path`` (hex); :class:`ControlError` naming the file otherwise.

    The file must be a regular file owned by us and readable by nobody else
    (mode 0600 or stricter): a secret others can read is no secret.
    """
    p = Path(path)
    try:
        st = p.stat()
        text = p.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ControlError(f"token file {p}: cannot read it: {exc}") from None
    if st.st_mode & 0o077:
        raise ControlError(
            f"token file {p}: readable by others (mode {st.st_mode & 0o777:o}); chmod 600 it"
        )
    if st.st_uid != os.geteuid():
        raise ControlError(f"token file {p}: owned by uid {st.st_uid}, not by us")
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise ControlError(f"token file {p}: not a hex secret") from None
    if len(secret) < 16:
        raise ControlError(f"token file {p}: the secret is shorter than 16 bytes")
    return secret


def ensure_token(path: str | Path) -> bytes:
    """The secret in ``path``, generating one (mode 0600, atomically) if it is missing."""
    p = Path(path)
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(TOKEN_BYTES).hex().encode() + b"\n")
        finally:
            os.close(fd)
        try:
            os.link(tmp, p)  # fails if another process created it first: use theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return load_token(p)


def auth_mac(secret: bytes, role: str, server_nonce: str, client_nonce: str) -> str:
    """HMAC-SHA256 over the role and both nonces (hex): the proof of knowing the secret.

    ``role`` is ``"client"`` or ``"server"`` so that one side's answer can
    never be replayed as the other's.
    """
    msg = f"openmrc-control-v1|{role}|{server_nonce}|{client_nonce}".encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def check_mac(secret: bytes, role: str, server_nonce: str, client_nonce: str, mac: Any) -> bool:
    """True if ``mac`` is :func:`auth_mac` of these values (constant-time compare)."""
    if not isinstance(mac, str):
        return False
    return hmac.compare_digest(auth_mac(secret, role, server_nonce, client_nonce), mac)


def new_nonce() -> str:
    """A fresh random nonce (hex)."""
    return os.urandom(16).hex()


async def start_control_server(
    addr: ControlAddress,
    handler: Handler,
    *,
    netns: str | None = None,
    max_line: int = MAX_LINE,
    on_error: Callable[[BaseException], None] | None = None,
) -> asyncio.AbstractServer:
    """Listen on ``addr`` and run ``handler(channel)`` for every connection.

    A Unix socket path's directory (mode 0700) is created and the socket made
    0600; a stale socket file is replaced.  The channel is closed when the
    handler returns.  No exception escapes: one the handler lets through is
    given to ``on_error`` (default: ignored) and the connection is closed.
    Lines longer than ``max_line`` bytes are refused.
    """

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channel = ControlChannel(reader, writer, max_line)
        try:
            await handler(channel)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if on_error is not None:
                with contextlib.suppress(Exception):
                    on_error(exc)
        finally:
            await channel.close()

    if addr.path is not None:
        from openmrc.net.lab import ensure_state_dir, private_dir, state_dir

        path = Path(addr.path)
        if path.parent.parent == state_dir():
            ensure_state_dir()  # a lab host's socket: the state directory is 0700 too
        private_dir(path.parent)
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                path.unlink()
        old = os.umask(0o177)
        try:
            return await asyncio.start_unix_server(on_client, str(path), limit=max_line)
        finally:
            os.umask(old)
    assert addr.host is not None
    sock = _in_ns(netns, _tcp_socket, addr.host, addr.port, True)
    return await asyncio.start_server(on_client, sock=sock, limit=max_line)


def remove_control_path(addr: ControlAddress) -> None:
    """Remove a Unix control socket file and its directory when empty."""
    if addr.path is None:
        return
    path = Path(addr.path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    with contextlib.suppress(OSError):
        os.rmdir(path.parent)
