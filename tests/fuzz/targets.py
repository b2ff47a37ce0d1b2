"""Fuzz targets: the byte codec, ``receive_datagram`` on a live QP pair, the control parser.

Each target takes raw bytes and raises ``AssertionError`` (or any unexpected
exception) only on a real finding.  They run three ways: coverage-guided with
atheris (``python -m tests.fuzz.fuzz_codec``, etc.), replaying the corpus in
``tests/fuzz/corpus/<target>/`` (every test run), and with Hypothesis when
atheris is not installed.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import TYPE_CHECKING

from openmrc.net.control import BadMessage, parse_message
from openmrc.transport import SGE, Context, QPAttr, RecvWR, SendWR, WROpcode
from openmrc.transport.attrs import EVProfile
from openmrc.wire.codec import WireError, decode, decode_frame, encode

if TYPE_CHECKING:
    from openmrc.net.service import MemoryServer

CORPUS = Path(__file__).parent / "corpus"
REGION = 1 << 16
GUARD = 256
_SENTINEL = 0xEE


def fuzz_codec(data: bytes) -> None:
    """decode() either fails with WireError or yields a packet that re-encodes to itself."""
    try:
        pkt = decode(data)
    except WireError:
        pass
    else:
        again = encode(pkt)
        assert decode(again) == pkt, (pkt, again.hex())
    with contextlib.suppress(WireError):
        decode_frame(data)


def _attr() -> QPAttr:
    return QPAttr(ev_profile=EVProfile(planes=2, paths_per_plane=8, ev_count=8, floor=2))


class Pair:
    """Two connected contexts; B's region sits between guard bytes that must never change."""

    def __init__(self) -> None:
        self.a, self.b = Context(random.Random(1)), Context(random.Random(2))
        self.qa = self.a.alloc_pd().create_qp(self.a.create_cq())
        self.qb = self.b.alloc_pd().create_qp(self.b.create_cq())
        self.qa.connect(self.qb.qpn, _attr(), peer="b")
        self.qb.connect(self.qa.qpn, _attr(), peer="a")
        self.backing = bytearray([_SENTINEL]) * (REGION + 2 * GUARD)
        view = memoryview(self.backing)[GUARD : GUARD + REGION]
        view[:] = bytes(REGION)
        self.src = self.qa.pd.reg_mr(REGION, buffer=bytearray(random.Random(3).randbytes(REGION)))
        self.dst = self.qb.pd.reg_mr(REGION, buffer=view)
        self.qb.post_recv(RecvWR(wr_id=1))
        self.qa.post_send(
            SendWR(1, WROpcode.RDMA_WRITE_WITH_IMM, [SGE(self.src.addr, 8192, self.src.lkey)],
                   self.dst.addr, self.dst.rkey, imm_data=9)
        )  # fmt: skip

    def guards_intact(self) -> bool:
        """True while no byte outside B's region was written."""
        b = self.backing
        return b[:GUARD].count(_SENTINEL) == GUARD and b[-GUARD:].count(_SENTINEL) == GUARD


def fuzz_receive(data: bytes) -> None:
    """Datagrams (2-byte length prefixes) into both ends of a live pair, then timers.

    Nothing may raise, no byte outside B's region may change, and every
    completion B reports must be for data that is really there.
    """
    pair = Pair()
    now = 1_000_000
    i = 0
    while i + 2 <= len(data):
        n = int.from_bytes(data[i : i + 2], "big") % 2048
        chunk, i = data[i + 2 : i + 2 + n], i + 2 + n
        target = pair.b if n % 2 == 0 else pair.a
        target.receive_datagram(chunk, now)
        now += 1_000_000
        # let the real traffic flow too, so forged input meets live state
        for _ in range(4):
            item = pair.a.poll_packet(now)
            if item is None:
                break
            pair.b.receive_datagram(encode(item[1]), now)
        for _ in range(4):
            item = pair.b.poll_packet(now)
            if item is None:
                break
            pair.a.receive_datagram(encode(item[1]), now)
    for ctx in (pair.a, pair.b):
        at = ctx.get_timer()
        if at is not None:
            ctx.handle_timer(max(at, now))
    assert pair.guards_intact(), "a byte outside the region was written"
    sent = pair.src.buffer
    assert sent is not None  # a real region (Pair registers it with a buffer)
    for wc in pair.qb.recv_cq.poll(64):
        if wc.ok:
            got = bytes(memoryview(pair.backing)[GUARD : GUARD + 8192])
            assert got == bytes(sent[:8192]), "a completion for unplaced data"


def fuzz_control(data: bytes) -> None:
    """parse_message raises only BadMessage; check_hello only HelloError."""
    from openmrc.net.service import HelloError

    try:
        msg = parse_message(data)
    except BadMessage:
        return
    server = _control_server()
    with contextlib.suppress(HelloError):
        server.check_hello(msg, "::1")


_SERVER: MemoryServer | None = None


def _control_server() -> MemoryServer:
    """One MemoryServer (its endpoint never started: no sockets) for every input."""
    global _SERVER
    if _SERVER is None:
        from openmrc.net.driver import NetEndpoint
        from openmrc.net.service import MemoryServer

        _SERVER = MemoryServer(NetEndpoint("::1", 0), 4096, secret=b"f" * 32)
    return _SERVER


TARGETS = {"codec": fuzz_codec, "receive": fuzz_receive, "control": fuzz_control}
