"""Where openmrc's Wireshark dissector lives, and the tshark command line that reads a capture.

openmrc sends UDP/IPv6 with a zero UDP checksum on purpose: every switch rewrites
the destination address, which the checksum would cover (RFC 6935/6936, docs/lab.md).
Wireshark marks such frames "Illegal checksum value (0)" unless told to accept zero
checksums over IPv6, so the hint sets ``udp.ignore_ipv6_zero_checksum``.
"""

from __future__ import annotations

from pathlib import Path


def dissector_path() -> Path:
    """The Lua dissector shipped with the package (``openmrc/net/openmrc.lua``)."""
    return Path(__file__).with_name("openmrc.lua")


def tshark_hint(pcap: str = "FILE.pcap") -> str:
    """The tshark command that decodes ``pcap`` with the shipped dissector."""
    return (
        f"tshark -X lua_script:{dissector_path()} -o udp.ignore_ipv6_zero_checksum:TRUE -r {pcap}"
    )
