"""The control channel as an attacker sees it (no root needed, ``::1`` only).

A raw TCP client speaks to a :class:`MemoryServer` without the library's
client: unauthenticated hellos, forged fields, oversized requests and
garbage lines must each get an error reply naming the field and leave no
QP, region or traceback behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from openmrc.net.control import (
    ControlAddress,
    ControlError,
    auth_mac,
    ensure_token,
    load_token,
    new_nonce,
    parse_message,
)
from openmrc.net.driver import NetEndpoint, attr_to_json, driver_attr, loop_factory
from openmrc.net.service import MemoryServer, ServerLimits, Session, write_buffer

SECRET = b"control-test-secret-0123456789"


def _run(fn: Callable[[], Awaitable[Any]]) -> Any:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(asyncio.wait_for(fn(), 60))


def _free_tcp() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Raw:
    """A hand-driven control client: read the challenge, send lines, read replies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.nonce = ""

    @classmethod
    async def connect(cls, port: int) -> Raw:
        reader, writer = await asyncio.open_connection("::1", port, limit=1 << 20)
        raw = cls(reader, writer)
        challenge = json.loads(await asyncio.wait_for(reader.readline(), 10))
        assert challenge["op"] == "challenge"
        raw.nonce = challenge["nonce"]
        return raw

    async def send_line(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def reply(self) -> dict[str, Any] | None:
        line = await asyncio.wait_for(self.reader.readline(), 10)
        return json.loads(line) if line else None

    async def closed(self) -> bool:
        """True if the server closed the connection (EOF)."""
        return await asyncio.wait_for(self.reader.read(1), 10) == b""

    def hello(self, secret: bytes = SECRET, **over: Any) -> dict[str, Any]:
        cnonce = new_nonce()
        msg: dict[str, Any] = {
            "op": "hello",
            "version": 1,
            "auth": {"nonce": cnonce, "mac": auth_mac(secret, "client", self.nonce, cnonce)},
            "peer": {"kind": "addr", "addr": None, "port": 4791},
            "qpns": [0x100],
            "attr": attr_to_json(driver_attr(8)),
            "mode": "write",
            "mr": None,
        }
        msg.update(over)
        return msg

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


async def _server(
    limits: ServerLimits | None = None, logs: list[str] | None = None
) -> tuple[NetEndpoint, MemoryServer, int]:
    ep = NetEndpoint("::1", 0)
    ep.start()
    port = _free_tcp()
    server = MemoryServer(
        ep,
        1 << 20,
        secret=SECRET,
        limits=limits,
        on_log=(logs.append if logs is not None else None),
    )
    await server.listen(ControlAddress(host="::1", port=port))
    return ep, server, port


def _no_leak(ep: NetEndpoint, server: MemoryServer) -> None:
    assert not ep.connections and not ep.ctx.qps, "a refused hello left QPs behind"
    assert not server.sessions
    assert ep.regions == 0, "a refused hello left a memory region registered"


def test_hello_without_the_secret_is_refused() -> None:
    async def main() -> None:
        logs: list[str] = []
        ep, server, port = await _server(logs=logs)
        try:
            cases = [
                ("no auth", lambda r: {**r.hello(), "auth": None}),
                ("wrong secret", lambda r: r.hello(secret=b"not-the-secret-at-all!")),
                ("replayed mac", lambda r: {**r.hello(), "auth": {"nonce": "00" * 16, "mac": "0" * 64}}),
            ]  # fmt: skip
            for what, make in cases:
                r = await Raw.connect(port)
                await r.send_line(json.dumps(make(r)).encode() + b"\n")
                reply = await r.reply()
                assert reply is not None and reply["op"] == "error", what
                assert reply["field"] == "auth", (what, reply)
                assert await r.closed(), what
                await r.close()
            _no_leak(ep, server)
            # and the library client with the wrong secret gets a clear ControlError
            async with NetEndpoint("::1", 0) as cli:
                with pytest.raises(ControlError, match="auth"):
                    await Session.open(
                        cli, ControlAddress(host="::1", port=port), secret=b"x" * 20, timeout=5
                    )
                assert not cli.connections  # the client's QPs were destroyed too
            # the right secret works
            r = await Raw.connect(port)
            hello = r.hello()
            await r.send_line(json.dumps(hello).encode() + b"\n")
            reply = await r.reply()
            assert reply is not None and reply["op"] == "welcome", reply
            # the server proves it knows the secret too
            assert reply["auth"]["mac"] == auth_mac(
                SECRET, "server", r.nonce, hello["auth"]["nonce"]
            )
            await r.close()
        finally:
            await server.close()
            ep.close()

    _run(main)


def test_a_second_session_cannot_write_the_first_sessions_region() -> None:
    async def main() -> None:
        ep, server, port = await _server()
        ctl = ControlAddress(host="::1", port=port)
        try:
            async with NetEndpoint("::1", 0) as ca, NetEndpoint("::1", 0) as cb:
                a = await Session.open(ca, ctl, secret=SECRET)
                b = await Session.open(cb, ctl, secret=SECRET)
                assert a.remote.rkey != b.remote.rkey and a.remote.addr != b.remote.addr
                data_a = bytearray(os.urandom(200_000))
                res = await write_buffer(a, ca.reg_mr(data_a), len(data_a), imm=1, chunk=50_000)
                assert res.ok
                # b aims its WRITE at a's region (address and rkey as a got them)
                evil = cb.reg_mr(bytearray(b"\xee" * 4096))
                wr = b.conns[0].post_write(evil, 0, 4096, a.remote, 0)
                wc = await asyncio.wait_for(b.conns[0].wait_send(wr), 30)
                assert not wc.ok  # refused by the server: not b's region
                import hashlib

                verdict = await a.verify(1, len(data_a), hashlib.sha256(data_a).hexdigest())
                assert verdict["ok"], "a's region was overwritten by another session"
                await a.close()
                await b.close()
            await asyncio.sleep(0.05)
            _no_leak(ep, server)
        finally:
            await server.close()
            ep.close()

    _run(main)


def test_oversized_hello_is_refused_without_memory_growth() -> None:
    async def main() -> None:
        ep, server, port = await _server()
        try:
            big_attr = {**attr_to_json(driver_attr(8)), "ev_count": 65536, "paths_per_plane": 4096}
            before = _rss_kib()
            for qpns, attr, field in (
                (list(range(0x100, 0x100 + 256)), big_attr, "qpns"),
                ([0x100], big_attr, "attr.ev_count"),
                (list(range(0x100, 0x110)), {**big_attr, "ev_count": 1024}, "attr.ev_count"),
            ):
                r = await Raw.connect(port)
                await r.send_line(json.dumps(r.hello(qpns=qpns, attr=attr)).encode() + b"\n")
                reply = await r.reply()
                assert reply is not None and reply["op"] == "error" and reply["field"] == field
                await r.close()
            grown = _rss_kib() - before
            assert grown < 8 * 1024, f"RSS grew by {grown} KiB"
            _no_leak(ep, server)
        finally:
            await server.close()
            ep.close()

    _run(main)


def test_every_bad_hello_field_is_named_and_leaks_nothing() -> None:
    async def main() -> None:
        ep, server, port = await _server(limits=ServerLimits(max_sessions=1))
        try:
            cases: list[tuple[dict[str, Any], str]] = [
                ({"version": 2}, "version"),
                ({"op": "hullo"}, "op"),
                ({"peer": "x"}, "peer"),
                ({"peer": {"kind": "addr", "addr": "2001:db8::1", "port": 4791}}, "peer.addr"),
                ({"peer": {"kind": "addr", "addr": None, "port": 0}}, "peer.port"),
                ({"peer": {"kind": "lab", "host": 1, "port": 4791}}, "peer.kind"),
                ({"peer": {"kind": "nope"}}, "peer.kind"),
                ({"qpns": []}, "qpns"),
                ({"qpns": [1 << 24]}, "qpns"),
                ({"qpns": [5, 5]}, "qpns"),
                ({"qpns": [True]}, "qpns"),
                ({"psns": [1, 2]}, "psns"),
                ({"psns": [1 << 24]}, "psns"),
                ({"psns": [-1]}, "psns"),
                ({"psns": "0"}, "psns"),
                ({"attr": {"mtu": 100}}, "attr.mtu"),
                ({"attr": {"planes": "8"}}, "attr.planes"),
                ({"attr": {"evil": 1}}, "attr.evil"),
                ({"attr": []}, "attr"),
                ({"mode": "read"}, "mode"),
                ({"mode": "pingpong", "mr": None}, "mr"),
                ({"mr": {"addr": -1, "rkey": 1, "length": 1}}, "mr"),
                ({"extra": 1}, "hello.extra"),
            ]
            for over, field in cases:
                r = await Raw.connect(port)
                await r.send_line(json.dumps(r.hello(**over)).encode() + b"\n")
                reply = await r.reply()
                assert reply is not None and reply["op"] == "error", (over, reply)
                assert reply["field"] == field, (over, reply)
                assert field in reply["message"]
                await r.close()
            _no_leak(ep, server)
            # the session cap: one allowed, the second refused, then the first still works
            r1 = await Raw.connect(port)
            await r1.send_line(json.dumps(r1.hello()).encode() + b"\n")
            assert (await r1.reply() or {}).get("op") == "welcome"
            r2 = await Raw.connect(port)
            await r2.send_line(json.dumps(r2.hello(qpns=[0x200])).encode() + b"\n")
            assert (await r2.reply() or {}).get("field") == "sessions"
            await r2.close()
            await r1.send_line(b'{"op":"verify","qp":0,"imm":1,"length":"x","sha256":"0"}\n')
            assert (await r1.reply() or {}).get("field") == "verify.length"
            await r1.send_line(b'{"op":"bye"}\n')
            assert (await r1.reply() or {}).get("op") == "bye"
            await r1.close()
            await asyncio.sleep(0.05)
            _no_leak(ep, server)
        finally:
            await server.close()
            ep.close()

    _run(main)


def test_malformed_lines_get_an_error_reply_and_no_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    async def main() -> list[str]:
        logs: list[str] = []
        ep, server, port = await _server(logs=logs)
        try:
            cases = [
                (b"{not json\n", "message"),
                (b"\xff\xfe\xfd garbage\n", "message"),
                (b"[1, 2, 3]\n", "message"),
                (b'{"no_op": 1}\n', "op"),
                (b'{"op": 5}\n', "op"),
                (b"[" * 100_000 + b"\n", "message"),  # longer than the line limit too
                (b"x" * (200 << 10) + b"\n", "message"),
            ]
            for line, field in cases:
                r = await Raw.connect(port)
                await r.send_line(line)
                reply = await r.reply()
                assert reply is not None and reply["op"] == "error", (line[:20], reply)
                assert reply["field"] == field, (line[:20], reply)
                assert await r.closed()
                await r.close()
            _no_leak(ep, server)
            return logs
        finally:
            await server.close()
            ep.close()

    logs = _run(main)
    out, err = capfd.readouterr()
    for text in (out, err, *logs):
        assert "Traceback" not in text and "Unhandled" not in text, text


def test_parse_message_never_raises_anything_else() -> None:
    from openmrc.net.control import BadMessage

    for line in (b"", b"\x00", b"null", b'"op"', b"{}", b'{"op":"x"}', b"\xc3\x28", b"1e999999"):
        with contextlib.suppress(BadMessage):
            assert parse_message(line)["op"] == "x"


def test_token_file_is_private_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "d" / "token"
    secret = ensure_token(path)
    assert len(secret) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_token(path) == secret == load_token(path)  # reused, not regenerated
    path.chmod(0o644)
    with pytest.raises(ControlError, match="readable by others"):
        load_token(path)


def test_cli_serve_listens_on_loopback_and_needs_the_token(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    port, ctl = _free_tcp(), _free_tcp()
    cli = [sys.executable, "-m", "openmrc.cli"]
    server = subprocess.Popen(
        [*cli, "serve", "--port", str(port), "--control-port", str(ctl), "--once",
         "--size", "1M", "--token-file", str(token)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        blob = tmp_path / "blob"
        blob.write_bytes(os.urandom(10_000))
        other = tmp_path / "other"
        other.write_text("ab" * 32 + "\n")
        other.chmod(0o600)
        deadline = 50
        while not token.exists() and deadline:
            deadline -= 1
            import time

            time.sleep(0.1)
        # the wrong token: refused, exit 1, one line naming auth
        bad = subprocess.run(
            [*cli, "send", str(blob), "--to", "::1", "--control-port", str(ctl),
             "--token-file", str(other)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert bad.returncode == 1 and "auth" in bad.stderr, bad.stdout + bad.stderr
        assert "Traceback" not in bad.stderr
        good = subprocess.run(
            [*cli, "send", str(blob), "--to", "::1", "--control-port", str(ctl),
             "--token-file", str(token)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert good.returncode == 0, good.stdout + good.stderr
        out, _ = server.communicate(timeout=30)
    finally:
        server.kill()
    assert f"control tcp:[::1]:{ctl}" in out, out
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert "Traceback" not in out
