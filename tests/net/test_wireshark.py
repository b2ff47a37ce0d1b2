"""openmrc's Wireshark Lua dissector, run by tshark on a pcap the codec writes.

One packet of every type, with known field values, goes through
``encode_frame`` and ``PcapWriter``; tshark with ``-X lua_script:`` must read
every field back (and the WRITE_LAST_IMM's immediate, not its RETH).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from openmrc.net.wireshark import dissector_path, tshark_hint
from openmrc.wire.codec import encode, encode_frame
from openmrc.wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)
from openmrc.wire.pcap import PcapWriter
from tests.tools import needs_tool

pytestmark = needs_tool("tshark")

SRC, DST = 0xFD00 << 112 | 1, 0xFD00 << 112 | 2


def tshark_fields(pcap: Path, fields: list[str]) -> list[list[str]]:
    """Rows of ``fields`` per packet, decoded with openmrc's dissector."""
    argv = ["tshark", "-n", "-r", str(pcap), "-X", f"lua_script:{dissector_path()}",
            "-o", "udp.ignore_ipv6_zero_checksum:TRUE", "-T", "fields", "-E", "separator=;"]  # fmt: skip
    for name in fields:
        argv += ["-e", name]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert "Lua: Error" not in out.stderr and "error" not in out.stderr.lower(), out.stderr
    return [line.split(";") for line in out.stdout.splitlines()]


def _write(path: Path) -> None:
    pkts = [
        DataPacket(0x123, 0x1234_5671, Opcode.WRITE_LAST_IMM, 77, 5, 0x7F00_0000_1000,
                   0xAABBCCDD, 64, bytes(range(64)), imm=0x0102_0304, ts=999, wimm=True,
                   ack_req=True),
        DataPacket(0x123, 0x22, Opcode.WRITE_FIRST, 78, 6, 0x7F00_0000_2000, 0x11, 32,
                   bytes(32), retransmit=True),
        SackPacket(0x456, 0x0000_0A3, 1000, 1005, 0b1011, ecn_seen=True, rcvd_bytes=123456,
                   ooo_count=7, ts_echo=4242, penalty=9),
        NackPacket(0x456, 0x33, NackReason.PSN_OUT_OF_WINDOW, 2000, 1999, ts_echo=5),
        ProbePacket(0x789, 0x44, 31, 777, reliability=True),
        ProbeReplyPacket(0x789, 0x45, 32, 778),
    ]  # fmt: skip
    with PcapWriter(path) as w:
        for i, pkt in enumerate(pkts):
            w.write(encode_frame(pkt, SRC, DST), i * 1000)


def test_dissector_decodes_every_packet_type(tmp_path: Path) -> None:
    pcap = tmp_path / "codec.pcap"
    _write(pcap)
    rows = tshark_fields(pcap, [
        "openmrc.bth.opcode", "openmrc.bth.dqpn", "openmrc.reth.rkey", "openmrc.imm",
        "openmrc.psn", "openmrc.ev", "openmrc.mdh.msn", "openmrc.mdh.wimm",
        "openmrc.mdh.retransmit", "openmrc.payload_len",
        "openmrc.sack.cack", "openmrc.sack.base", "openmrc.sack.bitmap", "openmrc.sack.ecn_seen",
        "openmrc.sack.rcvd_bytes", "openmrc.sack.ooo_count", "openmrc.ts_echo",
        "openmrc.sack.penalty", "openmrc.nack.reason", "openmrc.nack.cack",
        "openmrc.probe.seq", "openmrc.probe.reliability", "openmrc.sack.count",
    ])  # fmt: skip
    assert len(rows) == 6, rows
    keys = ["op", "dqpn", "rkey", "imm", "psn", "ev", "msn", "wimm", "retx", "plen", "cack",
            "base", "bitmap", "ecn", "rcvd", "ooo", "tse", "pen", "reason", "ncack", "seq",
            "rel", "sacked"]  # fmt: skip
    r = [dict(zip(keys, row, strict=True)) for row in rows]
    # WRITE_LAST_IMM: RETH then ImmDt (the built-in RoCE dissector reads the RETH as imm)
    assert int(r[0]["op"], 0) == 0x09 and int(r[0]["dqpn"], 0) == 0x123
    assert int(r[0]["rkey"], 0) == 0xAABBCCDD and int(r[0]["imm"], 0) == 0x01020304
    assert r[0]["psn"] == "77" and int(r[0]["ev"], 0) == 0x12345671 and r[0]["msn"] == "5"
    assert r[0]["wimm"] in ("1", "True") and r[0]["plen"] == "64"
    assert int(r[1]["op"], 0) == 0x06 and r[1]["retx"] in ("1", "True") and r[1]["imm"] == ""
    # SACK: cumulative PSN, base, bitmap, ECN, congestion fields
    s = r[2]
    assert int(s["op"], 0) == 0xC0 and s["cack"] == "1000" and s["base"] == "1005"
    assert int(s["bitmap"], 0) == 0b1011 and s["sacked"] == "3"
    assert s["ecn"] in ("1", "True") and s["rcvd"] == "123456" and s["ooo"] == "7"
    assert s["tse"] == "4242" and s["pen"] == "9" and int(s["ev"], 0) == 0xA3
    n = r[3]
    assert int(n["op"], 0) == 0xC1 and int(n["reason"], 0) == 3 and n["psn"] == "2000"
    assert n["ncack"] == "1999" and int(n["ev"], 0) == 0x33
    assert int(r[4]["op"], 0) == 0xC2 and r[4]["seq"] == "31" and r[4]["rel"] in ("1", "True")
    assert int(r[5]["op"], 0) == 0xC3 and r[5]["seq"] == "32" and int(r[5]["ev"], 0) == 0x45


def test_cli_wireshark_install(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "openmrc.cli", "wireshark"]
    shown = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=True)
    assert str(dissector_path()) in shown.stdout and dissector_path().is_file()
    done = subprocess.run([*cli, "--install", "--dir", str(tmp_path / "plugins")],
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert (tmp_path / "plugins" / "openmrc.lua").read_bytes() == dissector_path().read_bytes()
    assert "installed" in done.stdout


def test_the_printed_hint_decodes_with_the_dissector_and_accepts_zero_checksums(
    tmp_path: Path,
) -> None:
    """``openmrc wireshark``'s tshark line: openmrc's dissector, no "Illegal checksum" (0)."""
    pcap = tmp_path / "zero.pcap"
    frame = bytearray(encode_frame(ProbePacket(0x789, 0x44, 31, 777), SRC, DST))
    frame[86:88] = bytes(2)  # the UDP checksum, zero as the real network sends it
    with PcapWriter(pcap) as w:
        w.write(bytes(frame), 0)
    shown = subprocess.run([sys.executable, "-m", "openmrc.cli", "wireshark"],
                           capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert tshark_hint() in shown.stdout and "zero UDP checksum" in shown.stdout
    argv = shlex.split(tshark_hint(str(pcap)))
    out = subprocess.run([*argv, "-V"], capture_output=True, text=True, timeout=120, check=True)
    assert "Illegal checksum" not in out.stdout
    assert "openmrc" in out.stdout.lower() and "777" in out.stdout, out.stdout


def test_the_auth_preference_shows_the_trailer_and_skips_it(tmp_path: Path) -> None:
    """With ``-o openmrc.auth:TRUE`` a ``--auth`` datagram's trailer (counter, tag)
    is shown apart and the MRC packet before it decodes as without it."""
    pcap = tmp_path / "auth.pcap"
    pkt = ProbeReplyPacket(0x789, 0x45, 32, 778)
    frame = bytearray(encode_frame(pkt, SRC, DST)) + (5).to_bytes(8, "big") + bytes(range(16))
    for at, length in ((4, len(frame) - 40), (44, len(frame) - 80), (84, len(frame) - 80)):
        frame[at : at + 2] = length.to_bytes(2, "big")  # outer, inner IPv6 and UDP lengths
    frame[86:88] = bytes(2)  # zero UDP checksum, as the driver sends
    with PcapWriter(pcap) as w:
        w.write(bytes(frame), 0)
    argv = ["tshark", "-n", "-r", str(pcap), "-X", f"lua_script:{dissector_path()}",
            "-o", "udp.ignore_ipv6_zero_checksum:TRUE", "-o", "openmrc.auth:TRUE",
            "-T", "fields", "-E", "separator=;", "-e", "openmrc.bth.opcode",
            "-e", "openmrc.probe.seq", "-e", "openmrc.auth.counter", "-e", "openmrc.icrc"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert "Lua: Error" not in out.stderr and "error" not in out.stderr.lower(), out.stderr
    op, seq, counter, icrc = out.stdout.strip().split(";")
    body = encode(pkt)
    assert int(op, 0) == 0xC3 and seq == "32" and counter == "5"
    assert int(icrc, 0) == int.from_bytes(body[-4:], "big")
