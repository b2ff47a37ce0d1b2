"""The real-socket driver over ::1 (no root needed).

Two :class:`NetEndpoint` objects in one process (and the CLI in subprocesses)
move random bytes over loopback UDP/IPv6 and check them byte for byte.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from openmrc.net.control import ControlAddress
from openmrc.net.driver import (
    Connection,
    LocalMR,
    NetEndpoint,
    PlainPeer,
    RemoteMR,
    driver_attr,
    loop_factory,
    peer_from_json,
)
from openmrc.net.service import MemoryServer, Session, write_buffer
from openmrc.transport.errors import InvalidArgument
from openmrc.wire.codec import decode, udp_sport

SECRET = b"0123456789abcdef-test-secret"


def _run(coro_fn: Callable[[], Awaitable[Any]], uv: bool = True) -> Any:
    factory = loop_factory() if uv else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(asyncio.wait_for(coro_fn(), 60))


def _free_port(kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET6, kind) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


async def _pair(
    a: NetEndpoint, b: NetEndpoint, size: int
) -> tuple[Connection, Connection, LocalMR, LocalMR, bytes]:
    ca, cb = a.create_connection(), b.create_connection()
    ca.connect(cb.qpn, b.local_peer)
    cb.connect(ca.qpn, a.local_peer)
    data = random.Random(size).randbytes(size)
    src = a.reg_mr(bytearray(data))
    dst = b.reg_mr(bytearray(size))
    return ca, cb, src, dst, data


async def _transfer(a: NetEndpoint, b: NetEndpoint, size: int, chunk: int = 256 << 10) -> Any:
    """Write ``size`` random bytes a -> b in chunks, the last a WRITE_IMM; check everything."""
    ca, cb, src, dst, data = await _pair(a, b, size)
    cb.post_recv(99)
    ids = []
    for off in range(0, size, chunk):
        last = off + chunk >= size
        ids.append(
            ca.post_write(src, off, min(chunk, size - off), dst.remote(), imm=77 if last else None)
        )
    for wr in ids:
        wc = await ca.wait_send(wr)
        assert wc.ok, wc
    rwc = await asyncio.wait_for(cb.wait_recv(), 10)
    assert rwc.ok and rwc.imm_data == 77 and rwc.wr_id == 99
    assert bytes(dst.buffer) == data
    return ca


@pytest.mark.parametrize("uv", [True, False], ids=["uvloop", "asyncio"])
def test_transfer_byte_exact(uv: bool) -> None:
    async def main() -> None:
        async with NetEndpoint("::1", 0) as a, NetEndpoint("::1", 0) as b:
            await _transfer(a, b, 3 << 20)
            st = a.stats()
            # Every plane of the EV set carried data, and every datagram was counted.
            # Loopback may still drop datagrams (a full receive buffer while the CPU is
            # busy) and a loaded machine may fire a timer early, so retransmissions are
            # allowed: the transfer itself is what is checked, byte for byte, above.
            assert set(st["tx_by_plane"]) == set(range(8))
            assert st["tx_datagrams"] == sum(st["tx_by_ev"].values()) >= (3 << 20) // 4096
            assert (3 << 20) // 4096 <= b.stats()["rx_datagrams"] <= st["tx_datagrams"]
            assert st["tx_errors"] == 0
            # An EV's source port (0xC000 | hash14(EV)) lies in the ephemeral range: on a
            # shared machine another socket (even b's own) may hold one, and the driver
            # then sends that EV from a fallback port.  Rare, never most of them.
            assert st["sport_fallbacks"] <= 8

    _run(main, uv)


def test_transfer_survives_dropped_datagrams() -> None:
    async def main() -> None:
        async with (
            NetEndpoint("::1", 0, tx_drop_every=13) as a,
            NetEndpoint("::1", 0, tx_drop_every=7) as b,
        ):
            ca = await _transfer(a, b, 2 << 20)
            assert a.counters.tx_dropped_test > 0 and b.counters.tx_dropped_test > 0
            assert ca.qp.stats.retransmits >= a.counters.tx_dropped_test // 2
            assert a.event_counts.get("EVEvent:ASSUMED_BAD", 0) > 0

    _run(main)


def test_full_socket_buffer_waits_for_writability(monkeypatch: pytest.MonkeyPatch) -> None:
    """sendto raising BlockingIOError (buffer full) parks the rest until writable: no loss."""
    import openmrc.net.driver as drv

    class FullEveryFifth:
        """A send socket whose buffer is 'full' on every 5th sendto (counted over
        all sockets: each EV's source port has its own, most send only a few)."""

        calls = 0

        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock
            self.refused = 0

        def sendto(self, data: bytes, addr: Any) -> int:
            FullEveryFifth.calls += 1
            if FullEveryFifth.calls % 5 == 0:
                self.refused += 1
                raise BlockingIOError
            return self.sock.sendto(data, addr)

        def fileno(self) -> int:
            return self.sock.fileno()

        def close(self) -> None:
            self.sock.close()

    made: list[FullEveryFifth] = []
    real = drv._open_send

    def flaky(sport: int, bufsize: int, tclass: int = drv.ECN_ECT0) -> tuple[Any, bool]:
        sock, exact = real(sport, bufsize, tclass)
        made.append(FullEveryFifth(sock))
        return made[-1], exact

    monkeypatch.setattr(drv, "_open_send", flaky)

    async def main() -> None:
        async with NetEndpoint("::1", 0) as a, NetEndpoint("::1", 0) as b:
            ca = await _transfer(a, b, 1 << 20)
            assert a.counters.tx_eagain > 0
            assert a.counters.tx_eagain + b.counters.tx_eagain == sum(m.refused for m in made)
            # Parked, not dropped: a dropped send would cost a retransmission each (a
            # loaded machine may still add a spurious timeout or two).
            assert ca.qp.stats.retransmits < a.counters.tx_eagain // 2
            assert a.counters.tx_errors == 0 and not a._pending

    _run(main)


def test_ev_in_source_port_and_flow_label() -> None:
    """Each datagram's EV is in its UDP source port and IPv6 flow label."""

    async def main() -> None:
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        rx.bind(("::1", 0))
        rx.setsockopt(socket.IPPROTO_IPV6, 11, 1)  # IPV6_FLOWINFO: report it in a cmsg
        rx.setsockopt(socket.IPPROTO_UDP, 102, 1)  # UDP_NO_CHECK6_RX
        rx.settimeout(5)
        try:
            async with NetEndpoint("::1", 0) as a:
                conn = a.create_connection()
                conn.connect(0x123, PlainPeer("::1", rx.getsockname()[1]))
                src = a.reg_mr(bytearray(64 << 10))
                conn.post_write(src, 0, 64 << 10, RemoteMR(0x1000, 5, 64 << 10))
                await asyncio.sleep(0.05)
                seen = 0
                for _ in range(16):
                    data, anc, _flags, addr = rx.recvmsg(9000, 64)
                    pkt = decode(data)
                    flow = [int.from_bytes(d, "big") for lvl, t, d in anc if t == 11]
                    assert addr[1] == udp_sport(pkt.ev)
                    assert flow and flow[0] & 0xFFFFF == pkt.ev & 0xFFFFF
                    seen += 1
                assert seen == 16
        finally:
            rx.close()

    _run(main)


def test_shutdown_leaves_nothing_open() -> None:
    async def main() -> None:
        before = set(os.listdir("/proc/self/fd"))
        tasks_before = asyncio.all_tasks()
        a, b = NetEndpoint("::1", 0), NetEndpoint("::1", 0)
        async with a, b:
            await _transfer(a, b, 256 << 10)
            socks = a.open_sockets() + b.open_sockets()
            assert len(socks) >= 4
            # a pending waiter is failed, not leaked, on close
            conn = a.connections[next(iter(a.connections))]
            waiter = asyncio.ensure_future(conn.wait_recv())
            await asyncio.sleep(0)
        assert a.closed and b.closed
        assert all(s.fileno() == -1 for s in socks)
        assert a.open_sockets() == [] and b.open_sockets() == []
        assert a._timer is None and b._timer is None
        with pytest.raises(ConnectionAbortedError):
            await waiter
        await asyncio.sleep(0.01)
        assert set(os.listdir("/proc/self/fd")) <= before
        assert asyncio.all_tasks() <= tasks_before

    _run(main)


def test_api_errors_name_the_argument() -> None:
    async def main() -> None:
        with pytest.raises(InvalidArgument, match="lab/host"):
            NetEndpoint("::1", 0, host=1)
        with pytest.raises(InvalidArgument, match="port"):
            NetEndpoint("::1", 70000)
        with pytest.raises(InvalidArgument, match=r"peer\.kind"):
            peer_from_json({"kind": "x"})
        async with NetEndpoint("::1", 0) as a:
            conn = a.create_connection()
            with pytest.raises(InvalidArgument, match="LabPeer"):
                from openmrc.net.driver import LabPeer

                conn.connect(5, LabPeer(1))
            conn.connect(5, PlainPeer("::1", 9))
            mr = a.reg_mr(bytearray(100))
            with pytest.raises(InvalidArgument, match="offset/length"):
                conn.post_write(mr, 50, 51, RemoteMR(0, 1, 100))
            with pytest.raises(InvalidArgument, match="wr_id"):
                await conn.wait_send(12345)

    _run(main)


def test_session_verify_detects_mismatch(tmp_path: Path) -> None:
    """The server's SHA-256 check passes on the right bytes and fails on wrong ones."""

    async def main() -> None:
        ctl = ControlAddress(path=str(tmp_path / "s.sock"))
        async with NetEndpoint("::1", 0) as srv_ep, NetEndpoint("::1", 0) as cli_ep:
            server = MemoryServer(srv_ep, 1 << 20, secret=SECRET)
            await server.listen(ctl)
            data = bytearray(os.urandom(300_000))
            local = cli_ep.reg_mr(data)
            async with await Session.open(cli_ep, ctl, secret=SECRET) as session:
                res = await write_buffer(session, local, len(data), imm=5, chunk=64 << 10)
                assert res.ok and res.writes == 5
                good = await session.verify(5, len(data), hashlib.sha256(data).hexdigest())
                assert good["ok"] and good["arrived"]
                bad = await session.verify(5, len(data), hashlib.sha256(b"x").hexdigest())
                assert not bad["ok"] and bad["arrived"]
                missing = await session.verify(6, len(data), good["sha256"], timeout=0.2)
                assert not missing["ok"] and not missing["arrived"]
            await server.close()
            assert [r.ok for r in server.results] == [True, False, False]

    _run(main)


def test_driver_attr_round_trip() -> None:
    from openmrc.net.driver import attr_from_json, attr_to_json

    attr = driver_attr(4, ev_count=32)
    again = attr_from_json(attr_to_json(attr))
    assert attr_to_json(again) == attr_to_json(attr)
    assert again.ev_profile.planes == 4 and again.ev_profile.ev_count == 32


# ----- the CLI over ::1 ------------------------------------------------------------------


_TOKEN = Path(os.environ.get("TMPDIR", "/tmp")) / f"openmrc-test-token-{os.getpid()}"


def _openmrc(*args: str) -> list[str]:
    """The CLI with a per-test-run token file (``serve`` creates it, clients read it)."""
    argv = [sys.executable, "-m", "openmrc.cli", *args]
    if args and args[0] in ("serve", "send", "perf") and "--token-file" not in args:
        argv += ["--token-file", str(_TOKEN)]
    return argv


def _serve(port: int, ctl: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _openmrc(
            "serve", "--bind", "::1", "--port", str(port), "--control-port", str(ctl), "--once",
            "--size", "16M", *extra,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def test_cli_send_serve_verifies_hash(tmp_path: Path) -> None:
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(3_000_000 + 123))
    port, ctl = _free_port(), _free_port(socket.SOCK_STREAM)
    server = _serve(port, ctl)
    try:
        send = subprocess.run(
            _openmrc("send", str(f), "--to", "::1", "--control-port", str(ctl), "--chunk", "512K"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        out, _ = server.communicate(timeout=30)
    finally:
        server.kill()
    assert send.returncode == 0, send.stdout + send.stderr
    assert "server: hash OK" in send.stdout
    assert "in 6 WRITEs" in send.stdout
    assert server.returncode == 0, out
    assert "hash OK" in out and "plane 7" in out


def test_cli_perf_bw_and_lat(tmp_path: Path) -> None:
    for mode, marker in (("bw", "BW average[Gb/sec]"), ("lat", "t_typical[usec]")):
        port, ctl = _free_port(), _free_port(socket.SOCK_STREAM)
        server = _serve(port, ctl)
        try:
            perf = subprocess.run(
                _openmrc(
                    "perf", "--to", "::1", "--control-port", str(ctl), "--mode", mode,
                    "--iters", "40", "--qps", "2" if mode == "bw" else "1",
                ),
                capture_output=True,
                text=True,
                timeout=60,
            )  # fmt: skip
            server.communicate(timeout=30)
        finally:
            server.kill()
        assert perf.returncode == 0, perf.stdout + perf.stderr
        assert marker in perf.stdout
        row = perf.stdout.split(marker)[1].splitlines()[1].split()
        assert row[:2] == (["65536", "40"] if mode == "bw" else ["2", "40"])
        assert all(float(x) > 0 for x in row[2:5])


def test_cli_usage_errors_name_the_flag(tmp_path: Path) -> None:
    cases = [
        (["send", str(tmp_path / "nope"), "--to", "::1"], "FILE"),
        (["send", __file__, "--to", "not-an-address"], "--to"),
        (["send", __file__, "--to", "::1", "--from", "h0"], "--from"),
        (["serve", "--host", "h1"], "--host"),
        (["serve", "--size", "0"], "--size"),
        (["perf", "--to", "::1", "--qps", "0"], "--qps"),
        (["perf", "--to", "::1", "-D", "0"], "--duration"),
        (["perf", "--to", "::1", "--mode", "lat", "--bidir"], "--bidir"),
    ]
    for argv, flag in cases:
        proc = subprocess.run(_openmrc(*argv), capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert flag in proc.stderr, (argv, proc.stderr)


def test_cli_send_fails_without_server(tmp_path: Path) -> None:
    f = tmp_path / "blob"
    f.write_bytes(b"abc")
    ctl = _free_port(socket.SOCK_STREAM)
    proc = subprocess.run(
        _openmrc(
            "send", str(f), "--to", "::1", "--control-port", str(ctl), "--connect-timeout", "0.3"
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "cannot connect" in proc.stderr


#: Receive counters of datagrams the driver drops before the core decodes them.
_DROPPED_BEFORE_CORE = (
    "rx_foreign",
    "rx_dropped",
    "rx_psn_far",
    "rx_replies_limited",
    "rx_bad_msn",
    "rx_unproven",
    "rx_auth_failed",
    "rx_replayed",
)


def test_ect0_sent_and_ce_reaches_the_core() -> None:
    """Datagrams leave ECT(0); a CE-marked arrival is handed to the core as ECN."""

    async def main() -> None:
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        rx.bind(("::1", 0))
        rx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
        rx.setsockopt(socket.IPPROTO_UDP, 102, 1)  # UDP_NO_CHECK6_RX: zero checksums
        rx.settimeout(5)
        async with NetEndpoint("::1", 0) as a:
            conn = a.create_connection()
            conn.connect(0x100, PlainPeer("::1", rx.getsockname()[1]))
            src = a.reg_mr(bytearray(8192))
            conn.post_write(src, 0, 8192, RemoteMR(0x1000, 1, 8192))
            loop = asyncio.get_running_loop()
            _, anc, _, _ = await loop.run_in_executor(None, rx.recvmsg, 65536, 256)
            tclass = [int.from_bytes(d[:4], sys.byteorder) for lv, t, d in anc
                      if lv == socket.IPPROTO_IPV6 and t == socket.IPV6_TCLASS]  # fmt: skip
            assert tclass and tclass[0] & 3 == 0b10, tclass  # ECT(0)
        rx.close()
        # every datagram marked CE by the sender: the receiver's core sees ECN,
        # echoes it, and the sender's core reacts (EVs skipped)
        async with NetEndpoint("::1", 0, tclass=3) as a, NetEndpoint("::1", 0) as b:
            ca = await _transfer(a, b, 2 << 20)
            st = b.stats()
            # every datagram handed to the core was CE (the ones the driver drops
            # before the core, e.g. a rate-limited duplicate, are not counted as ECN)
            dropped = sum(st[k] for k in _DROPPED_BEFORE_CORE)
            assert st["rx_ecn_ce"] == st["rx_datagrams"] - dropped > 0, st
            assert a.stats()["rx_ecn_ce"] == 0
            assert ca.qp.stats.ecn_echoes > 0
            assert ca.qp.paths is not None and ca.qp.paths.stats_skips > 0

    _run(main)


def test_datagrams_from_a_stranger_are_not_delivered() -> None:
    """A datagram for a live QP from an address that is not its peer never reaches the core."""

    async def main() -> None:
        async with NetEndpoint("::1", 0) as b:
            cb = b.create_connection()
            # the peer lives elsewhere (a small MTU: that route may not take 4 KiB)
            cb.connect(0x100, PlainPeer("2001:db8::1", 4791), driver_attr(8, mtu=1024))
            from openmrc.wire.codec import encode
            from openmrc.wire.packets import NackPacket, NackReason

            forged = encode(NackPacket(cb.qpn, 5, NackReason.REMOTE_ACCESS_ERROR, 0, 0))
            with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
                for _ in range(50):
                    s.sendto(forged, ("::1", b.port))
            for _ in range(100):
                await asyncio.sleep(0.01)
                if b.stats()["rx_datagrams"] >= 50:
                    break
            st = b.stats()
            assert st["rx_datagrams"] == 50 and st["rx_foreign"] == 50
            assert b.ctx.stats["rx_packets"] == 0 and not st["rx_by_ev"]
            assert cb.qp.state.value == "RTS"

    _run(main)


def test_cli_perf_duration_intervals_json_bidir_and_sweep() -> None:
    """perf -D/-i/-J/--bidir and -a (no numeric performance assertions)."""
    import json

    port, ctl = _free_port(), _free_port(socket.SOCK_STREAM)
    server = _serve(port, ctl, "--size", "1M")
    try:
        perf = subprocess.run(
            _openmrc("perf", "--to", "::1", "--control-port", str(ctl), "-D", "1.5",
                     "-i", "0.4", "-J", "--bidir", "--qps", "2"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        server.communicate(timeout=30)
    finally:
        server.kill()
    assert perf.returncode == 0, perf.stdout + perf.stderr
    report = json.loads(perf.stdout)
    assert report["ok"] and report["bidir"] and len(report["results"]) == 1
    row = report["results"][0]
    assert row["iterations"] > 0 and row["seconds"] >= 1.5 and row["failures"] == 0
    assert len(row["intervals"]) >= 2 and all(i["end"] > i["start"] for i in row["intervals"])
    assert report["server_tx"]["bytes"] > 0 and report["server_tx"]["failures"] == 0

    port, ctl = _free_port(), _free_port(socket.SOCK_STREAM)
    server = _serve(port, ctl, "--size", "64K")
    try:
        sweep = subprocess.run(
            _openmrc("perf", "--to", "::1", "--control-port", str(ctl), "-a", "--iters", "8"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        server.communicate(timeout=30)
    finally:
        server.kill()
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    sizes = [int(line.split()[0]) for line in sweep.stdout.splitlines()
             if line.strip() and line.split()[0].isdigit()]  # fmt: skip
    assert sizes == [1 << k for k in range(1, 17)], sweep.stdout
