"""Tests of openmrc.wire.pcap: file format, and tshark reading our frames back."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from openmrc.wire.codec import encode_frame
from openmrc.wire.packets import DataPacket, NackPacket, NackReason, Opcode, SackPacket
from openmrc.wire.pcap import LINKTYPE_RAW, PCAP_NS_MAGIC, PcapWriter
from openmrc.wire.srv6 import to_ipv6, usid, usid_address

SRC = 0xFD00 << 112 | 1
DST = 0xFD00 << 112 | 2
PATH = usid_address([usid(1, 0, 3), usid(2, 0, 4), usid(1, 0, 5), usid(3, 0, 1)])


def sample_frames() -> list[tuple[bytes, int, int]]:
    """(frame, opcode, 24-bit BTH PSN) for a data packet, a SACK and a NACK."""
    data = DataPacket(
        0x123, 0xABCDE, Opcode.WRITE_FIRST, 0x1ABCDEF, 4, 0x1000, 7, 64, bytes(range(64))
    )
    sack = SackPacket(0x123, 0xABCDE, 0x2000005, 0x2000009, 0b101, ecn_seen=True)
    nack = NackPacket(0x123, 0xABCDE, NackReason.TRIMMED, 77, 70)
    return [
        (encode_frame(data, SRC, DST, PATH), 0x06, 0xABCDEF),
        (encode_frame(sack, DST, SRC, PATH), 0xC0, 0x000005),
        (encode_frame(nack, DST, SRC, PATH), 0xC1, 77),
    ]


def test_file_format() -> None:
    buf = io.BytesIO()
    frames = sample_frames()
    with PcapWriter(buf) as w:
        for i, (frame, _, _) in enumerate(frames):
            w.write(frame, 1_500_000_000_123_456 * (i + 1))
    raw = buf.getvalue()  # the writer does not close a file object it was given
    magic, major, minor, _, _, snaplen, linktype = struct.unpack_from("<IHHiIII", raw)
    assert (magic, major, minor, linktype) == (PCAP_NS_MAGIC, 2, 4, LINKTYPE_RAW)
    assert snaplen >= 9000 + 200
    off = 24
    for i, (frame, _, _) in enumerate(frames):
        sec, nsec, incl, orig = struct.unpack_from("<IIII", raw, off)
        ns = 1_500_000_000_123_456 * (i + 1) // 1000
        assert (sec, nsec) == divmod(ns, 10**9)
        assert incl == orig == len(frame)
        assert raw[off + 16 : off + 16 + incl] == frame
        off += 16 + incl
    assert off == len(raw)


def test_writer_errors(tmp_path: Path) -> None:
    w = PcapWriter(tmp_path / "x.pcap")
    with pytest.raises(ValueError, match="ts_ps"):
        w.write(b"x", -1)
    with pytest.raises(ValueError, match="ts_ps"):
        w.write(b"x", (1 << 32) * 10**12)
    w.close()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x", 0)
    with pytest.raises(ValueError, match="linktype"):
        PcapWriter(io.BytesIO(), linktype=-1)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_reads_opcodes_and_psns(tmp_path: Path) -> None:
    path = tmp_path / "mrc.pcap"
    frames = sample_frames()
    with PcapWriter(path) as w:
        for i, (frame, _, _) in enumerate(frames):
            w.write(frame, i * 1_000_000)
    out = subprocess.run(
        [
            "tshark", "-n", "-r", str(path),
            "-o", "udp.check_checksum:TRUE",
            "-d", "udp.port==4791,infiniband",
            "-T", "fields", "-E", "separator=,", "-E", "aggregator=;",
            "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
            "-e", "udp.checksum.status", "-e", "ipv6.dst", "-e", "ipv6.flow",
        ],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    rows = [line.split(",") for line in out.splitlines() if line.strip()]
    assert len(rows) == len(frames)
    for row, (_, opcode, psn) in zip(rows, frames, strict=True):
        assert int(row[0], 0) == opcode
        assert int(row[1], 0) == psn
        assert row[2] == "1"  # checksum status: good
        outer_dst, inner_dst = row[3].split(";")
        assert outer_dst == str(to_ipv6(PATH))
        assert inner_dst in (str(to_ipv6(SRC)), str(to_ipv6(DST)))
        assert [int(x, 0) for x in row[4].split(";")] == [0xABCDE, 0xABCDE]
