"""Every datagram a peer can make ``openmrc serve`` send is rate-limited (``::1``, no root).

The attacker sends from ``::1`` (the client's own address) to the server's data
port with the server QP's number; whatever the server answers goes to the real
client, which counts it:

* a flood of reliability probes (each answered by a SACK) gets at most the
  peer's reply bucket (``REPLY_BURST`` + ``REPLY_RATE`` per second);
* EV probes on one EV that carries no data are answered at most once per half
  probe interval;
* duplicate data packets (PSNs below the cumulative point, the real rkey), each
  answered by a SACK at once, get at most the reply bucket too.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from pathlib import Path
from typing import Any

from openmrc.net.driver import (
    REPLY_BURST,
    REPLY_RATE,
    NetEndpoint,
    RemoteMR,
    driver_attr,
    run,
)
from openmrc.net.service import Session
from openmrc.transport.ev import make_ev
from openmrc.wire.codec import encode
from openmrc.wire.packets import DataPacket, Opcode, ProbePacket

from .live import serve


def _flood(port: int, packets: list[bytes]) -> float:
    """Send ``packets`` to the server's data port as fast as possible; seconds taken."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_UDP, 101, 1)  # zero checksum, like the driver
        t = time.monotonic()
        for data in packets:
            s.sendto(data, ("::1", port))
        return time.monotonic() - t


def _probes_received(stats: dict[str, Any]) -> int:
    """EV probes the client's QPs received: the server's reverse-path probes (each RTT
    it is active inbound without sending data, and at once when a duplicate makes it
    suspect its reverse EV), which are not replies to the flood."""
    return sum(int(q.get("rx_probes", 0)) for q in stats["qps"].values())


def _replies(tmp_path: Path, make: object) -> tuple[int, int, float]:
    """Open a session, flood the server with ``make(server_qpn)``'s probes, and
    return (probes sent, datagrams the client received less the server's own
    reverse-path probes, seconds from the first probe to the last count)."""

    async def main() -> tuple[int, int, float]:
        with serve(tmp_path, size=1 << 20) as srv:
            async with (
                NetEndpoint("::1", 0) as ep,
                await Session.open(ep, srv.control, secret=srv.secret) as session,
            ):
                conn = session.conns[0]
                assert conn.qp.requester is not None
                psn = conn.qp.requester.next_psn  # the server's cumulative point
                packets = make(conn.qp.remote_qpn, psn, session.remote)  # type: ignore[operator]
                await asyncio.sleep(0.3)
                s0 = ep.stats()
                t0 = time.monotonic()
                await asyncio.to_thread(_flood, srv.port, packets)
                await asyncio.sleep(0.5)  # the answers arrive
                s1 = ep.stats()
                got = s1["rx_datagrams"] - s0["rx_datagrams"]
                got -= _probes_received(s1) - _probes_received(s0)
                return len(packets), got, time.monotonic() - t0

    return run(main())


def test_reliability_probes_get_at_most_the_reply_bucket(tmp_path: Path) -> None:
    def make(qpn: int, _psn: int, _mr: object) -> list[bytes]:
        return [encode(ProbePacket(qpn, make_ev(i % 8, i % 64), i, i, True)) for i in range(20_000)]

    sent, got, secs = _replies(tmp_path, make)
    bound = REPLY_BURST + REPLY_RATE * secs
    assert got <= bound, f"{got} SACKs answered {sent} probes in {secs:.2f} s (bucket: {bound:.0f})"


def test_ev_probes_on_an_idle_ev_are_answered_once_per_half_interval(tmp_path: Path) -> None:
    interval_s = driver_attr().ev_profile.probe_interval_ps / 1e12
    rng = random.Random(7)
    ev = make_ev(3, 17)

    def make(qpn: int, _psn: int, _mr: object) -> list[bytes]:
        return [encode(ProbePacket(qpn, ev, rng.getrandbits(16), i, False)) for i in range(2000)]

    sent, got, secs = _replies(tmp_path, make)
    bound = 1 + secs / (interval_s / 2)
    assert got <= bound, f"{got} replies to {sent} probes on one idle EV in {secs:.2f} s"


def test_duplicate_data_gets_at_most_the_reply_bucket(tmp_path: Path) -> None:
    def make(qpn: int, psn: int, mr: RemoteMR) -> list[bytes]:
        return [
            encode(
                DataPacket(
                    qpn,
                    make_ev(i % 8, i % 64),
                    Opcode.WRITE_ONLY,
                    (psn - 1 - i % 2000) & 0xFFFFFFFF,
                    0,
                    mr.addr,
                    mr.rkey,
                    64,
                    bytes(64),
                    ts=i,
                )
            )
            for i in range(20_000)
        ]

    sent, got, secs = _replies(tmp_path, make)
    bound = REPLY_BURST + REPLY_RATE * secs
    assert got <= bound, f"{got} SACKs answered {sent} duplicates in {secs:.2f} s ({bound:.0f})"
