"""``--auth`` over the real namespace SRv6 fabric (root; ``-m lab``).

Two authenticated endpoints (h0, h1 of a 4-plane lab; the lab has the test's
own name and is torn down whatever happens, see tests/net/conftest.py) move
32 MiB h0 -> h1 byte-exact over every plane; then datagrams the sender really
sent are replayed through the fabric from h0's own sockets, and altered
copies of them sent: the server counts and drops each, and a second
transfer in the same session is byte-exact too.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from openmrc.net.control import ControlAddress
from openmrc.net.driver import NetEndpoint, loop_factory
from openmrc.net.lab import Lab
from openmrc.net.service import MemoryServer, Session, by_plane, write_buffer
from openmrc.transport.ev import make_ev

pytestmark = pytest.mark.lab

SPEC = "planes=4,t0s=2,hosts_per_t0=1,t1s=2"
SECRET = b"lab-auth-test-secret-0123456789"
SIZE = 32 << 20


def test_auth_transfer_in_a_lab_counts_replays_and_forgeries(
    make_lab: Callable[..., Lab], tmp_path: Path
) -> None:
    lab = make_lab(SPEC)

    async def main() -> tuple[bool, bool, dict[str, object], dict[int, int], int, int]:
        ctl = ControlAddress(path=str(tmp_path / "h1.sock"))
        h0 = NetEndpoint(netns=lab.host_netns(0), lab=lab, host=0, auth=True)
        h1 = NetEndpoint(netns=lab.host_netns(1), lab=lab, host=1, auth=True)
        async with h0, h1:
            server = MemoryServer(h1, SIZE, secret=SECRET)
            await server.listen(ctl)
            async with await Session.open(h0, ctl, secret=SECRET) as session:
                keys = session.conns[0].auth
                assert keys is not None
                sealed: list[bytes] = []
                seal = keys.seal

                def recording(data: bytes) -> bytes:
                    out = seal(data)
                    if len(sealed) < 300 and data[0] < 0xC0:  # data packets
                        sealed.append(out)
                    return out

                keys.seal = recording  # type: ignore[method-assign]
                first = bytearray(os.urandom(SIZE))
                local = h0.reg_mr(first)
                res = await write_buffer(session, local, SIZE, imm=1)
                v1 = await session.verify(1, SIZE, hashlib.sha256(first).hexdigest())
                rx = {int(k): n for k, n in v1["rx_by_ev"].items()}
                # Through the fabric from h0's own socket and address (plane 0).
                send, dest = h0._route(session.server_peer, make_ev(0, 1))
                for i, raw in enumerate(sealed):
                    send(raw, dest)  # a replay
                    bad = bytearray(raw)
                    bad[40] ^= 1  # altered in flight, under a counter not seen yet
                    bad[-24:-16] = ((1 << 40) + i).to_bytes(8, "big")
                    send(bytes(bad), dest)
                await asyncio.sleep(0.5)
                second = bytearray(os.urandom(SIZE))
                local2 = h0.reg_mr(second)
                res2 = await write_buffer(session, local2, SIZE, imm=2)
                v2 = await session.verify(2, SIZE, hashlib.sha256(second).hexdigest())
                stats = h1.stats()
            await server.close()
        ok = res.ok and res2.ok and bool(v1["ok"]) and bool(v2["ok"])
        return ok, h0.stats()["tx_errors"] == 0, stats, rx, len(sealed), len(sealed)

    # (a stuck run's bound, not a speed: two 32 MiB authenticated WRITEs took 122 s at
    # load 16 on two cores, where 120 s used to fail them)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        ok, no_tx_errors, stats, rx, replayed, altered = runner.run(asyncio.wait_for(main(), 600))
    assert ok, "not byte-exact"
    assert no_tx_errors
    assert set(by_plane(rx)) == {0, 1, 2, 3}, rx
    assert replayed == 300
    assert stats["auth"] is True
    # The veths drop nothing at these rates; allow a little for a busy machine.
    assert 0.9 * replayed <= int(stats["rx_replayed"]) <= replayed, stats["rx_replayed"]  # type: ignore[call-overload]
    assert 0.9 * altered <= int(stats["rx_auth_failed"]) <= altered, stats["rx_auth_failed"]  # type: ignore[call-overload]
