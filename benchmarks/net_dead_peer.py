"""How long a QP takes to fail when its peer is silent (``docs/net.md``).

``python benchmarks/net_dead_peer.py``: one NetEndpoint on ``::1`` WRITEs 64 KiB
to a UDP port whose socket never answers; prints JSON with the seconds until
the WRITE completes with an error, and the datagrams sent meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

from openmrc.net.driver import NetEndpoint, PlainPeer, RemoteMR, run


async def main() -> dict[str, object]:
    sink = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sink.bind(("::1", 0))  # never read: the peer is silent
    async with NetEndpoint("::1", 0) as ep:
        conn = ep.create_connection()
        conn.connect(0x100, PlainPeer("::1", sink.getsockname()[1]))
        src = ep.reg_mr(bytearray(65536))
        t0 = time.perf_counter()
        wr = conn.post_write(src, 0, 65536, RemoteMR(0x1000, 1, 65536))
        wc = await asyncio.wait_for(conn.wait_send(wr), 120)
        dt = time.perf_counter() - t0
        st = ep.stats()
        out = {
            "seconds_to_error": round(dt, 2),
            "status": wc.status.value,
            "datagrams_sent": st["tx_datagrams"],
            "timeouts": conn.qp.stats.timeouts,
            "probes": conn.qp.stats.probes_sent,
        }
    sink.close()
    return out


if __name__ == "__main__":
    print(json.dumps(run(main()), indent=1))
