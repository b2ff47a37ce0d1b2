"""Bytes on the wire: the packet model and its IPv6/UDP/BTH/MRC codec."""

from openmrc.wire.codec import (
    FrameInfo,
    WireError,
    decode,
    decode_frame,
    encode,
    encode_frame,
    udp_sport,
)
from openmrc.wire.pcap import LINKTYPE_RAW, PcapWriter
from openmrc.wire.srv6 import (
    DEFAULT_BLOCK,
    KIND_DOWN,
    KIND_T0,
    KIND_T1,
    active_usid,
    shift,
    to_ipv6,
    usid,
    usid_address,
    usids_of,
)

__all__ = [
    "DEFAULT_BLOCK",
    "KIND_DOWN",
    "KIND_T0",
    "KIND_T1",
    "LINKTYPE_RAW",
    "FrameInfo",
    "PcapWriter",
    "WireError",
    "active_usid",
    "decode",
    "decode_frame",
    "encode",
    "encode_frame",
    "shift",
    "to_ipv6",
    "udp_sport",
    "usid",
    "usid_address",
    "usids_of",
]
