"""SRv6 uSID (micro-SID, "NEXT-CSID") address helpers for openmrc's path plan.

An openmrc path address is one IPv6 address (the outer destination of every
packet) that spells the whole source route:

    bits 127-96   locator block, 32 bits (default 0xFCBB0000, i.e. fcbb:0::/32)
    bits  95-80   uSID 1  (the active uSID: what the next switch acts on)
    bits  79-64   uSID 2
    ...
    bits  15-0    uSID 6
                  unused uSIDs are 0x0000 (end-of-carrier)

A switch whose uSID is active *shifts* the address: it keeps the block, moves
the 96-bit uSID part left by 16 bits and fills the right with zeros, so the
next uSID becomes active (:func:`shift`).

A uSID names a hop: ``kind`` (2 bits: 1 = a T0 switch, 2 = a T1 switch,
3 = a T0's downlink port to a host), ``plane`` (4 bits) and ``index``
(10 bits), see :func:`usid`.  Addresses are plain 128-bit integers here
because the codec and the simulator compare and shift them per packet;
:func:`to_ipv6` converts for display or for the socket API.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Final

__all__ = [
    "DEFAULT_BLOCK",
    "KIND_DOWN",
    "KIND_T0",
    "KIND_T1",
    "MAX_USIDS",
    "active_usid",
    "shift",
    "to_ipv6",
    "usid",
    "usid_address",
    "usids_of",
]

#: Default 32-bit locator block: fcbb:0000::/32.
DEFAULT_BLOCK = 0xFCBB0000
#: uSIDs that fit in one address after a 32-bit block.
MAX_USIDS: Final = 6
#: uSID kinds.
KIND_T0: Final = 1  # a T0 (leaf) switch
KIND_T1: Final = 2  # a T1 (spine) switch
KIND_DOWN: Final = 3  # a T0's downlink port towards a host

_USID_BITS: Final = 16
_USID_PART_BITS: Final = MAX_USIDS * _USID_BITS  # 96
_USID_PART_MASK: Final = (1 << _USID_PART_BITS) - 1
_ADDR_MASK: Final = (1 << 128) - 1


def _check_block(block: int) -> None:
    if not isinstance(block, int) or not 0 <= block <= 0xFFFFFFFF:
        raise ValueError(f"block: {block!r} is not a 32-bit locator block")


def _check_addr(addr: int) -> None:
    if not isinstance(addr, int) or not 0 <= addr <= _ADDR_MASK:
        raise ValueError(f"addr: {addr!r} is not a 128-bit address")


def usid(kind: int, plane: int, index: int) -> int:
    """The 16-bit uSID ``(kind << 14) | (plane << 10) | index`` of one hop.

    ``kind`` is :data:`KIND_T0`, :data:`KIND_T1` or :data:`KIND_DOWN`; ``plane``
    0..15; ``index`` 0..1023 (switch number, or the downlink port number).
    """
    if kind not in (KIND_T0, KIND_T1, KIND_DOWN):
        raise ValueError(f"kind: {kind!r} is not 1 (T0), 2 (T1) or 3 (downlink)")
    if not isinstance(plane, int) or not 0 <= plane <= 15:
        raise ValueError(f"plane: {plane!r} is outside 0..15")
    if not isinstance(index, int) or not 0 <= index <= 1023:
        raise ValueError(f"index: {index!r} is outside 0..1023")
    return (kind << 14) | (plane << 10) | index


def usid_address(usids: Sequence[int], block: int = DEFAULT_BLOCK) -> int:
    """Build the 128-bit path address ``block | usids... | 0 padding``."""
    _check_block(block)
    if len(usids) > MAX_USIDS:
        raise ValueError(f"usids: {len(usids)} uSIDs, at most {MAX_USIDS} fit")
    addr = block << _USID_PART_BITS
    pos = _USID_PART_BITS
    for i, u in enumerate(usids):
        if not isinstance(u, int) or not 1 <= u <= 0xFFFF:
            raise ValueError(f"usids[{i}]: {u!r} is outside 1..0xFFFF")
        pos -= _USID_BITS
        addr |= u << pos
    return addr


def usids_of(addr: int, block: int = DEFAULT_BLOCK) -> list[int]:
    """The uSIDs still to be executed in ``addr``, up to the end-of-carrier (0x0000).

    Raises ValueError if ``addr`` is not in ``block`` or has a uSID after the
    end-of-carrier.
    """
    _check_addr(addr)
    _check_block(block)
    if addr >> _USID_PART_BITS != block:
        raise ValueError(
            f"addr: block 0x{addr >> _USID_PART_BITS:08x} is not the expected 0x{block:08x}"
        )
    out: list[int] = []
    pos = _USID_PART_BITS
    while pos:
        pos -= _USID_BITS
        u = (addr >> pos) & 0xFFFF
        if not u:
            break
        out.append(u)
    if addr & ((1 << pos) - 1):
        raise ValueError(f"addr: 0x{addr:032x} has a uSID after the end-of-carrier")
    return out


def shift(addr: int) -> int:
    """What a uSID switch does: keep the block, shift the uSIDs left by 16, zero-fill."""
    _check_addr(addr)
    return (addr & ~_USID_PART_MASK & _ADDR_MASK) | ((addr << _USID_BITS) & _USID_PART_MASK)


def active_usid(addr: int) -> int:
    """The uSID right after the block (0 once the route is used up)."""
    _check_addr(addr)
    return (addr >> (_USID_PART_BITS - _USID_BITS)) & 0xFFFF


def to_ipv6(addr: int) -> ipaddress.IPv6Address:
    """A 128-bit integer address as an :class:`ipaddress.IPv6Address`."""
    _check_addr(addr)
    return ipaddress.IPv6Address(addr)
