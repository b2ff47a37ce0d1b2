"""A 64 MiB WRITE to a live ``openmrc serve`` on ``::1`` while invalid datagrams flood it.

``python benchmarks/net_flood.py [--size 64M] [--rate 20000] [--kind probes --kind sacks ...]``
starts ``openmrc serve`` (the same interpreter and ``PYTHONPATH``), opens a
session, and WRITEs ``--size`` bytes once clean, then once per flood kind while
another process sends ``--rate`` datagrams per second from ``::1`` (the peers'
own address) for as long as the WRITE runs:

* ``probes``: to the server, reliability and EV probes on random EVs (each one
  a reply it could be made to send);
* ``sacks``: to the client, SACKs echoing the attacker's best guess of a stamp
  (the same machine's clock) and sweeping the cumulative ACK;
* ``data``: to the server, data packets with the session's real rkey at random
  PSNs (most far outside the window, some in it) and random MSNs.

Every run is checked byte-exact (the server's SHA-256).  Prints one JSON object:
per kind the seconds, the ratio to clean, the datagrams the flooder sent and
the client's and server's drop counters.  A benchmark, not a test: the ratio
depends on how many cores the flooder, the server and the client share.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from openmrc.net.control import ControlAddress, ensure_token
from openmrc.net.driver import NetEndpoint, run
from openmrc.net.service import Session, write_buffer
from openmrc.transport.ev import make_ev
from openmrc.wire.codec import encode
from openmrc.wire.packets import DataPacket, Opcode, ProbePacket, SackPacket

KINDS = ("probes", "sacks", "data")


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET6, kind) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


def _packets(kind: str, target: dict[str, int], count: int = 4096) -> list[bytes]:
    """``count`` distinct datagrams of ``kind`` for ``target`` (QPN, rkey, ...)."""
    rng = random.Random(1)
    out = []
    for i in range(count):
        ev = make_ev(rng.randrange(8), rng.randrange(64), rng.randrange(16))
        if kind == "probes":
            pkt: Any = ProbePacket(target["qpn"], ev, i, rng.getrandbits(48), i % 2 == 0)
        elif kind == "sacks":
            cack = (target["psn"] + 64 * (i % 64)) & 0xFFFFFFFF
            ts = time.monotonic_ns() * 1000 - rng.randrange(10**9)
            pkt = SackPacket(target["qpn"], ev, cack, cack, (1 << 64) - 1, ts_echo=ts)
        else:
            psn = rng.getrandbits(24) if i % 4 else (target["psn"] + rng.randrange(4096))
            pkt = DataPacket(
                target["qpn"], ev, Opcode.WRITE_ONLY, psn, rng.getrandbits(32),
                target["addr"], target["rkey"], 1024, rng.randbytes(1024), ts=i,
            )  # fmt: skip
        out.append(encode(pkt))
    return out


def _flood(kind: str, port: int, target: dict[str, int], rate: int, stop: Any, sent: Any) -> None:
    """Send ``kind`` datagrams to ``[::1]:port`` at ``rate`` per second until ``stop``."""
    packets = _packets(kind, target)
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_UDP, 101, 1)  # zero checksum, as the driver sends
        s.setblocking(False)
        t0 = time.monotonic()
        n = 0
        while not stop.is_set():
            due = int((time.monotonic() - t0) * rate)
            while n < due:
                with contextlib.suppress(BlockingIOError):
                    s.sendto(packets[n % len(packets)], ("::1", port))
                n += 1
            time.sleep(0.001)
    sent.value = n


async def _write(ep: NetEndpoint, session: Session, data: bytearray, imm: int) -> float:
    local = ep.reg_mr(data)
    try:
        res = await write_buffer(session, local, len(data), imm=imm, chunk=1 << 20)
        verdict = await session.verify(
            imm, len(data), hashlib.sha256(data).hexdigest(), timeout=120
        )
        if not (res.ok and verdict["ok"]):
            why = (
                res.failed[:2] or f"server: ok={verdict.get('ok')} arrived={verdict.get('arrived')}"
            )
            raise SystemExit(f"net_flood: WRITE {imm} failed or not byte-exact: {why}")
        return res.seconds
    finally:
        ep.dereg_mr(local)


async def bench(size: int, rate: int, kinds: list[str], tmp: Path) -> dict[str, Any]:
    """Run the clean WRITE and one per flood kind; the JSON-able results."""
    token = tmp / "token"
    secret = ensure_token(token)
    port, ctl = _free_port(socket.SOCK_DGRAM), _free_port(socket.SOCK_STREAM)
    log = (tmp / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "openmrc.cli", "serve", "--bind", "::1", "--port", str(port),
         "--control-port", str(ctl), "--size", str(size), "--token-file", str(token)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out: dict[str, Any] = {"size": size, "rate": rate, "cpus": os.cpu_count()}
    try:
        for _ in range(300):
            try:
                socket.create_connection(("::1", ctl), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        data = bytearray(random.Random(3).randbytes(size))
        async with (
            NetEndpoint("::1", 0) as ep,
            await Session.open(ep, ControlAddress(host="::1", port=ctl), secret=secret) as session,
        ):
            conn = session.conns[0]
            req = conn.qp.requester
            assert req is not None
            clean = await _write(ep, session, data, 1)
            out["clean_s"] = round(clean, 2)
            for i, kind in enumerate(kinds):
                to_server = kind != "sacks"
                target = {
                    "qpn": conn.qp.remote_qpn if to_server else conn.qpn,
                    "psn": req.next_psn,
                    "addr": session.remote.addr,
                    "rkey": session.remote.rkey,
                }
                stop, sent = mp.Event(), mp.Value("q", 0)
                timeouts = conn.qp.stats.timeouts
                flooder = mp.Process(
                    target=_flood,
                    args=(kind, port if to_server else ep.port, target, rate, stop, sent),
                )
                before, s_before = ep.stats(), await session.server_stats()
                flooder.start()
                await asyncio.sleep(0.2)
                try:
                    secs = await _write(ep, session, data, 2 + i)
                finally:
                    stop.set()
                    flooder.join()
                after, s_after = ep.stats(), await session.server_stats()
                counters = ("rx_psn_far", "rx_replies_limited", "tx_replies_limited",
                            "rx_bad_msn", "rx_dropped", "rx_foreign", "tx_datagrams")  # fmt: skip
                out[kind] = {
                    "seconds": round(secs, 2),
                    "ratio": round(secs / clean, 2),
                    "flood_sent": sent.value,
                    "client_timeouts": conn.qp.stats.timeouts - timeouts,
                    "client_rx_unproven": after.get("rx_unproven", 0)
                    - before.get("rx_unproven", 0),
                    "server": {k: s_after.get(k, 0) - s_before.get(k, 0) for k in counters},
                }
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
    return out


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(text[:-1]) * units[text[-1:].upper()]
    return int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=_size, default=64 << 20, help="bytes per WRITE (64M)")
    ap.add_argument("--rate", type=int, default=20_000, help="flood datagrams per second")
    ap.add_argument("--kind", action="append", choices=KINDS, help="flood kinds (all)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        res = run(bench(args.size, args.rate, args.kind or list(KINDS), Path(tmp)))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
