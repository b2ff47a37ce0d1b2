"""Entropy values (EVs): how a 32-bit EV names a path.

openmrc's EV layout (the MRC 1.0 layout is not public; this one follows the
notes' algorithmic EV -> address scheme):

    bits 0-3    plane number (up to 16 planes); copied into every uSID
    bits 4-15   path number within the plane; the T0 uplink (i.e. the T1)
                is ``path % uplinks``, copied into the T1 uSID
    bits 16-31  spare entropy: does not change the route; tells apart several
                EVs on one physical path (a generated profile draws it)

The transport core only needs :func:`ev_plane` (to keep the EV set split over
planes and to pick replacements from the same plane); the drivers map an EV to a
route with the same functions.
"""

from __future__ import annotations

from typing import Final

PLANE_BITS: Final = 4
PATH_BITS: Final = 12
SPARE_BITS: Final = 16
MAX_PLANES: Final = 1 << PLANE_BITS
MAX_PATHS: Final = 1 << PATH_BITS
EV_MASK: Final = 0xFFFFFFFF


def make_ev(plane: int, path: int, spare: int = 0) -> int:
    """Build an EV from a plane number, a path number and optional spare entropy."""
    if not 0 <= plane < MAX_PLANES:
        raise ValueError(f"plane: {plane} is outside 0..{MAX_PLANES - 1}")
    if not 0 <= path < MAX_PATHS:
        raise ValueError(f"path: {path} is outside 0..{MAX_PATHS - 1}")
    if not 0 <= spare < 1 << 16:
        raise ValueError(f"spare: {spare} is outside 0..65535")
    return plane | (path << PLANE_BITS) | (spare << 16)


def ev_plane(ev: int) -> int:
    """The plane an EV travels in."""
    return ev & (MAX_PLANES - 1)


def ev_path(ev: int) -> int:
    """The path number of an EV within its plane."""
    return (ev >> PLANE_BITS) & (MAX_PATHS - 1)


def ev_spare(ev: int) -> int:
    """The spare-entropy bits of an EV (they do not change its route)."""
    return ev >> (PLANE_BITS + PATH_BITS) & ((1 << SPARE_BITS) - 1)
