"""Datagrams that cannot be valid are dropped before the core (``::1``, live ``serve``).

Forged SACKs, NACKs and probe replies to an idle client QP, from ``::1`` (the
server's address), echoing the attacker's best guess of a stamp (the same
machine's clock) or naming a cumulative ACK far outside the window: none is
decoded or delivered to the core (its packet count stays put), each is counted
in ``rx_unproven``, and the forged SACKs and probe replies still count as
refused for lack of proof.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from pathlib import Path

from openmrc.net.driver import NetEndpoint, run
from openmrc.net.service import Session
from openmrc.transport.ev import make_ev
from openmrc.wire.codec import encode
from openmrc.wire.packets import NackPacket, NackReason, ProbeReplyPacket, SackPacket

from .live import serve


def test_unprovable_answers_never_reach_the_core(tmp_path: Path) -> None:
    async def main() -> tuple[int, int, int, int, int]:
        with serve(tmp_path, size=1 << 20) as srv:
            async with (
                NetEndpoint("::1", 0) as ep,
                await Session.open(ep, srv.control, secret=srv.secret) as session,
            ):
                conn = session.conns[0]
                req = conn.qp.requester
                assert req is not None
                rng = random.Random(2)
                una = req.snd_una
                packets = []
                for i in range(3000):
                    ev = make_ev(i % 8, i % 64)
                    ts = time.monotonic_ns() * 1000 - rng.randrange(10**9)
                    cack = una if i % 2 else (una + rng.randrange(1 << 20, 1 << 31)) & 0xFFFFFFFF
                    packets += [
                        encode(SackPacket(conn.qpn, ev, cack, cack, 0, ts_echo=ts)),
                        encode(NackPacket(conn.qpn, ev, NackReason.REMOTE_ACCESS_ERROR,
                                          cack, cack, ts)),
                        encode(ProbeReplyPacket(conn.qpn, ev, i, ts)),
                    ]  # fmt: skip
                before = ep.ctx.stats["rx_packets"]
                with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
                    s.setsockopt(socket.IPPROTO_UDP, 101, 1)
                    for k in range(0, len(packets), 300):
                        for data in packets[k : k + 300]:
                            s.sendto(data, ("::1", ep.port))
                        await asyncio.sleep(0.01)
                await asyncio.sleep(0.3)
                st = ep.stats()
                return (
                    len(packets),
                    ep.ctx.stats["rx_packets"] - before,
                    st.get("rx_unproven", 0),
                    req.forged_acks,
                    req.forged_probe_replies,
                )

    sent, delivered, unproven, forged_acks, forged_replies = run(main())
    assert delivered == 0, f"{delivered} of {sent} forged answers reached the core"
    assert unproven > sent // 2  # (the socket may drop some of a burst)
    assert forged_acks > 0 and forged_replies > 0
