"""Every map keyed by what a packet carries stays bounded (real sockets on ``::1``).

Two endpoints in this process (so their maps can be read); an attacker sends
from ``::1``, the client's own address, with the server QP's number:

* EV probes on ever new EVs: each answer goes out on the probe's EV, and the
  route cache keeps at most ``MAX_ROUTES`` of them (the oldest go);
* data with the real rkey at new in-window PSNs naming far-away messages: the
  responder's per-message maps never hold more than the PSN window allows
  (``rx_bad_msn``).
"""

from __future__ import annotations

import asyncio
import random
import socket

import pytest

from openmrc.net import driver
from openmrc.net.driver import NetEndpoint, run
from openmrc.transport.ev import make_ev
from openmrc.wire.codec import encode
from openmrc.wire.packets import DataPacket, Opcode, ProbePacket


def _send(port: int, packets: list[bytes]) -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_UDP, 101, 1)  # zero checksum, like the driver
        for data in packets:
            s.sendto(data, ("::1", port))


def test_route_cache_is_capped_whatever_evs_probes_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "MAX_ROUTES", 64)

    async def main() -> tuple[int, int]:
        async with NetEndpoint("::1", 0) as a, NetEndpoint("::1", 0) as b:
            ca, cb = a.create_connection(), b.create_connection()
            ca.connect(cb.qpn, b.local_peer)
            cb.connect(ca.qpn, a.local_peer)
            rng = random.Random(1)
            probes = [
                encode(ProbePacket(cb.qpn, make_ev(rng.randrange(8), rng.randrange(64),
                                                   rng.randrange(16)), i, i))
                for i in range(400)
            ]  # fmt: skip
            for k in range(0, len(probes), 100):
                _send(b.port, probes[k : k + 100])
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            return len(b._routes), b.stats()["tx_datagrams"]

    routes, answered = run(main())
    assert answered > 64  # enough answers went out to overflow the cache
    assert routes <= 64, routes


def test_far_messages_in_window_grow_no_responder_state() -> None:
    async def main() -> tuple[int, int, int]:
        async with NetEndpoint("::1", 0) as a, NetEndpoint("::1", 0) as b:
            ca, cb = a.create_connection(), b.create_connection()
            ca.connect(cb.qpn, b.local_peer)
            cb.connect(ca.qpn, a.local_peer)
            dst = b.reg_mr(bytearray(1 << 20))
            rsp = cb.qp.responder
            assert rsp is not None
            forged = [
                encode(DataPacket(cb.qpn, make_ev(i % 8, i % 64), Opcode.WRITE_ONLY,
                                  rsp.base + 1 + i, rsp.next_msn + 100_000 + i,
                                  dst.mr.addr, dst.mr.rkey, 64, bytes(64), ts=i))
                for i in range(1000)
            ]  # fmt: skip
            for k in range(0, len(forged), 100):
                _send(b.port, forged[k : k + 100])
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            return len(rsp.last_of), len(rsp.msg_bytes), b.stats()["rx_bad_msn"]

    last_of, msg_bytes, bad = run(main())
    assert last_of == 0 and msg_bytes == 0, (last_of, msg_bytes)
    assert bad > 0
