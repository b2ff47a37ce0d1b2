"""``--auth``: every MRC datagram authenticated, against a live ``openmrc serve`` on ``::1``.

* a transfer through an on-path relay (the client's datagrams go to the
  attacker, who passes them on) stays byte-exact while the relay also sends a
  corrupted copy of some, replays others and injects forged ones: the server
  counts each (``rx_auth_failed``, ``rx_replayed``) and drops it;
* the in-window forged WRITE with the real rkey, which corrupts the region
  while the sender sees SUCCESS without ``--auth`` (shown too), is refused;
* a client and a server that disagree about ``--auth`` are refused with one
  line, either way round.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

from openmrc.net.driver import AUTH_TRAILER, NetEndpoint, run
from openmrc.net.service import Session, write_buffer
from openmrc.net.sockets import UDP_NO_CHECK6_RX
from openmrc.transport.ev import make_ev
from openmrc.wire.codec import encode
from openmrc.wire.packets import DataPacket, Opcode

from .live import serve

SIZE = 2 << 20


def _udp() -> socket.socket:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_UDP, 101, 1)  # zero checksum, like the driver
    s.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("::1", 0))
    s.setblocking(False)
    return s


def test_relayed_transfer_is_exact_and_tampering_is_counted(tmp_path: Path) -> None:
    """Every 7th datagram is first sent corrupted (one payload byte flipped),
    every 11th is sent twice (a replay), and every 13th is preceded by a forged
    one (random trailer): all counted by the server and none harms the data."""

    async def main() -> tuple[bool, dict[str, object], int, int, int]:
        data = bytearray(random.Random(3).randbytes(SIZE))
        corrupted = replayed = forged = 0
        with serve(tmp_path, "--auth", size=SIZE) as srv:
            async with (
                NetEndpoint("::1", 0, auth=True) as ep,
                await Session.open(ep, srv.control, secret=srv.secret) as session,
            ):
                loop = asyncio.get_running_loop()
                dest = ("::1", srv.port)
                with _udp() as relay:
                    route = ep._route

                    def routed(peer: object, ev: int) -> tuple[object, tuple[str, int, int, int]]:
                        send, to = route(peer, ev)  # type: ignore[arg-type]
                        entry = (send, ("::1", relay.getsockname()[1], to[2], 0))
                        ep._routes[(peer, ev)] = entry  # type: ignore[index]
                        return entry

                    ep._route = routed  # type: ignore[method-assign,assignment]
                    ep._routes.clear()
                    seen = 0

                    def forward() -> None:
                        nonlocal seen, corrupted, replayed, forged
                        while True:
                            try:
                                raw = relay.recv(65536)
                            except BlockingIOError:
                                return
                            seen += 1
                            if seen % 7 == 0:
                                bad = bytearray(raw)
                                bad[len(bad) // 2] ^= 0x40
                                relay.sendto(bad, dest)
                                corrupted += 1
                            if seen % 13 == 0:
                                fake = raw[:-AUTH_TRAILER] + os.urandom(AUTH_TRAILER)
                                relay.sendto(fake, dest)
                                forged += 1
                            relay.sendto(raw, dest)
                            if seen % 11 == 0:
                                relay.sendto(raw, dest)
                                replayed += 1

                    loop.add_reader(relay.fileno(), forward)
                    try:
                        local = ep.reg_mr(data)
                        res = await write_buffer(session, local, SIZE, imm=5, chunk=1 << 18)
                        assert res.ok, res.failed
                        verdict = await session.verify(
                            5, SIZE, hashlib.sha256(data).hexdigest(), timeout=60
                        )
                        stats = await session.server_stats()
                    finally:
                        loop.remove_reader(relay.fileno())
                return bool(verdict["ok"]), stats, corrupted, replayed, forged

    ok, stats, corrupted, replayed, forged = run(main())
    assert ok, "the relayed transfer is not byte-exact"
    assert stats["auth"] is True
    assert corrupted > 10 and replayed > 10 and forged > 10, (corrupted, replayed, forged)
    # Loopback may drop a datagram under load, never invent one: at most what was sent.
    bad = corrupted + forged
    assert 0.8 * bad <= int(stats["rx_auth_failed"]) <= bad, (stats["rx_auth_failed"], bad)  # type: ignore[call-overload]
    assert 0.8 * replayed <= int(stats["rx_replayed"]) <= replayed, (stats["rx_replayed"], replayed)  # type: ignore[call-overload]


def _forged_write(tmp_path: Path, auth: bool) -> tuple[bool, bool, int]:
    """An on-path attacker who saw the rkey and the PSNs writes its own bytes at the
    PSN of the client's next WRITE before it arrives.  Returns (the sender's
    WRITEs succeeded, the server's region is byte-exact, datagrams the server
    refused for authentication)."""
    chunk = 1024

    async def main() -> tuple[bool, bool, int]:
        data = bytearray(random.Random(4).randbytes(2 * chunk))
        extra = ("--auth",) if auth else ()
        with serve(tmp_path, *extra, size=1 << 20) as srv:
            async with (
                NetEndpoint("::1", 0, auth=auth) as ep,
                await Session.open(ep, srv.control, secret=srv.secret) as session,
            ):
                conn = session.conns[0]
                req = conn.qp.requester
                assert req is not None
                mr = session.remote
                forged = DataPacket(
                    conn.qp.remote_qpn, make_ev(0, 1), Opcode.WRITE_ONLY, req.next_psn,
                    req.next_msn, mr.addr, mr.rkey, chunk, bytes(chunk), ts=1,
                )  # fmt: skip
                raw = encode(forged)
                if auth:  # the best it can do: a trailer it cannot compute
                    raw += os.urandom(AUTH_TRAILER)
                with _udp() as s:
                    s.sendto(raw, ("::1", srv.port))
                await asyncio.sleep(0.3)
                local = ep.reg_mr(data)
                res = await write_buffer(session, local, len(data), imm=9, chunk=chunk)
                verdict = await session.verify(
                    9, len(data), hashlib.sha256(data).hexdigest(), timeout=20
                )
                stats = await session.server_stats()
                return res.ok, bool(verdict["ok"]), int(stats["rx_auth_failed"])

    return run(main())


def test_without_auth_an_in_window_forged_write_corrupts_the_region(tmp_path: Path) -> None:
    """What --auth is for: MRC alone cannot tell the forgery from the real WRITE."""
    sent_ok, exact, _ = _forged_write(tmp_path, auth=False)
    assert sent_ok and not exact


def test_with_auth_the_in_window_forged_write_is_refused(tmp_path: Path) -> None:
    sent_ok, exact, refused = _forged_write(tmp_path, auth=True)
    assert sent_ok and exact
    assert refused == 1


def _send(tmp_path: Path, server_auth: bool, client_auth: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "f").write_bytes(bytes(4096))
    extra = ("--auth",) if server_auth else ()
    with serve(tmp_path, *extra, size=1 << 20) as srv:
        return subprocess.run(
            [sys.executable, "-m", "openmrc.cli", "send", str(tmp_path / "f"), "--to", "::1",
             "--control-port", str(srv.control.port), "--token-file", str(tmp_path / "token"),
             "--timeout", "5", *(("--auth",) if client_auth else ())],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip


def test_a_client_without_auth_is_refused_by_an_auth_server(tmp_path: Path) -> None:
    r = _send(tmp_path, server_auth=True, client_auth=False)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "auth.datagrams" in lines[0] and "--auth" in lines[0], r.stderr


def test_a_client_with_auth_is_refused_by_a_server_without(tmp_path: Path) -> None:
    r = _send(tmp_path, server_auth=False, client_auth=True)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not authenticate datagrams" in lines[0], r.stderr


def test_both_with_auth_send_byte_exact(tmp_path: Path) -> None:
    r = _send(tmp_path, server_auth=True, client_auth=True)
    assert r.returncode == 0 and "hash OK" in r.stdout, (r.stdout, r.stderr)
