"""Control-channel exhaustion against a live ``openmrc serve`` on ``::1`` (no root).

The server runs with a 1,024 open-file limit, 4 sessions at most, a 1 s
idle timeout and a 1 s handshake deadline (small timeouts, so the test runs in
seconds).  Four authenticated sessions sit idle and 2,000 TCP connections
trickle one byte every half second without ever sending a hello, each opened
again as soon as the server drops it; a legitimate client must still open a
session, WRITE and verify byte-exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import resource
import socket
import time
from pathlib import Path

from openmrc.net.driver import NetEndpoint, run
from openmrc.net.service import Session, write_buffer

from .live import Server, fds, serve

SLOW = 2000


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


async def _legit(srv: Server) -> bool:
    """Open a session (retrying refusals for up to 20 s), WRITE 1 MiB, verify it."""
    data = bytearray(os.urandom(1 << 20))
    deadline = time.monotonic() + 20
    while True:
        try:
            async with NetEndpoint("::1", 0) as ep:
                session = await Session.open(ep, srv.control, secret=srv.secret, timeout=5)
                async with session:
                    local = ep.reg_mr(data)
                    res = await write_buffer(session, local, len(data), imm=1)
                    h = hashlib.sha256(data).hexdigest()
                    verdict = await session.verify(1, len(data), h, timeout=10)
                    return res.ok and bool(verdict["ok"])
        except (ConnectionError, OSError, TimeoutError):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.5)


def test_slowloris_and_idle_sessions_leave_a_client_served(tmp_path: Path) -> None:
    async def main(srv: Server) -> tuple[bool, int]:
        idle: list[tuple[NetEndpoint, Session]] = []
        slow: list[socket.socket] = []
        try:
            for _ in range(4):  # four sessions that then do nothing
                ep = NetEndpoint("::1", 0)
                ep.start()
                idle.append((ep, await Session.open(ep, srv.control, secret=srv.secret)))
            for _ in range(SLOW):
                s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
                s.setblocking(False)
                with contextlib.suppress(BlockingIOError, OSError):
                    s.connect(("::1", srv.control.port))
                slow.append(s)

            async def trickle() -> None:
                # one byte per connection every half second; a connection the
                # server closed is opened again (as a real slowloris does)
                while True:
                    for i, s in enumerate(slow):
                        try:
                            s.send(b"{")
                        except BlockingIOError:
                            pass
                        except OSError:
                            s.close()
                            slow[i] = s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
                            s.setblocking(False)
                            with contextlib.suppress(BlockingIOError, OSError):
                                s.connect(("::1", srv.control.port))
                    await asyncio.sleep(0.5)

            task = asyncio.create_task(trickle())
            try:
                await asyncio.sleep(1.0)
                ok = await _legit(srv)
                peak = fds(srv.proc.pid)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            return ok, peak
        finally:
            for s in slow:
                s.close()
            for ep, session in idle:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(session.close(), 2)
                ep.close()

    with serve(
        tmp_path,
        "--max-sessions", "4", "--idle-timeout", "1", "--handshake-timeout", "1",
        size=1 << 20, preexec_fn=_low_limit,
    ) as srv:  # fmt: skip
        ok, peak = run(main(srv))
        out = srv.output()
    assert ok, out[-2000:]
    assert peak < 1024
    assert "Traceback" not in out
