"""Write the seed corpus (``python -m tests.fuzz.make_corpus``): small, valid inputs.

Seeds are encoded packets of every type (for the live pair: addressed to its
QP numbers, 0x100 on both contexts), length-prefixed sequences of them, and
control lines (a hello, a verify, garbage).  Deterministic: re-running it
rewrites the same files.
"""

from __future__ import annotations

import json

from openmrc.net.driver import attr_to_json, driver_attr
from openmrc.wire.codec import encode
from openmrc.wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)
from tests.fuzz.targets import CORPUS


def packets() -> list[bytes]:
    """One encoded packet of each kind, for QP 0x100."""
    return [
        encode(DataPacket(0x100, 0x10, Opcode.WRITE_ONLY, 0, 0, 0x7F00_0000_0000, 1, 64, bytes(64))),
        encode(DataPacket(0x100, 0x11, Opcode.WRITE_ONLY_IMM, 0, 0, 0x7F00_0001_0000, 2, 16,
                          bytes(16), imm=5, wimm=True)),
        encode(DataPacket(0x100, 0x12, Opcode.WRITE_LAST, 3, 1, 0x7F00_0000_0000, 1, 8,
                          bytes(8), retransmit=True)),
        encode(SackPacket(0x100, 0x10, 1, 2, 0b101, ecn_seen=True)),
        encode(NackPacket(0x100, 0x10, NackReason.REMOTE_ACCESS_ERROR, 0, 0)),
        encode(NackPacket(0x100, 0x11, NackReason.TRIMMED, 1, 0)),
        encode(ProbePacket(0x100, 0x10, 0, 0)),
        encode(ProbeReplyPacket(0x100, 0x10, 0, 0)),
    ]  # fmt: skip


def main() -> None:
    """Write every seed file."""
    for d in ("codec", "receive", "control"):
        (CORPUS / d).mkdir(parents=True, exist_ok=True)
    pk = packets()
    for i, p in enumerate(pk):
        (CORPUS / "codec" / f"pkt{i}").write_bytes(p)
        (CORPUS / "receive" / f"one{i}").write_bytes(len(p).to_bytes(2, "big") + p)
    (CORPUS / "receive" / "all").write_bytes(b"".join(len(p).to_bytes(2, "big") + p for p in pk))
    hello = {"op": "hello", "version": 1, "auth": {"nonce": "00" * 16, "mac": "00"},
             "peer": {"kind": "addr", "addr": None, "port": 4791}, "qpns": [256],
             "attr": attr_to_json(driver_attr(8)), "mode": "write", "mr": None}  # fmt: skip
    lines = {
        "hello": json.dumps(hello).encode(),
        "verify": b'{"op":"verify","qp":0,"imm":1,"length":10,"sha256":"00"}',
        "garbage": b"\xff{[",
        "nested": b"[" * 50,
    }
    for name, data in lines.items():
        (CORPUS / "control" / name).write_bytes(data)


if __name__ == "__main__":
    main()
