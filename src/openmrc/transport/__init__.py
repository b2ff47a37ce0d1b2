"""The sans-IO MRC transport core.

No sockets, no clocks, no global randomness: time (integer picoseconds) and a
``random.Random`` are passed in.  Start from :class:`Context`.
"""

from . import cc
from .attrs import RETRY_INFINITE, TIMEOUT_UNIT_PS, CCProfile, EVField, EVProfile, QPAttr
from .context import Context, Datagram, ProtectionDomain
from .errors import InvalidArgument, InvalidState, MrcError, ResourceExhausted
from .ev import ev_path, ev_plane, make_ev
from .paths import EVEvent, EVRemap, EVState, PathSet, PortEvent
from .qp import QPEvent, QueuePair
from .qpbase import QPStats
from .state import QPState
from .verbs import (
    SGE,
    Access,
    CompletionQueue,
    MemoryRegion,
    QPCap,
    RecvWR,
    SendWR,
    WCOpcode,
    WCStatus,
    WorkCompletion,
    WROpcode,
)

__all__ = [
    "RETRY_INFINITE",
    "SGE",
    "TIMEOUT_UNIT_PS",
    "Access",
    "CCProfile",
    "CompletionQueue",
    "Context",
    "Datagram",
    "EVEvent",
    "EVField",
    "EVProfile",
    "EVRemap",
    "EVState",
    "InvalidArgument",
    "InvalidState",
    "MemoryRegion",
    "MrcError",
    "PathSet",
    "PortEvent",
    "ProtectionDomain",
    "QPAttr",
    "QPCap",
    "QPEvent",
    "QPState",
    "QPStats",
    "QueuePair",
    "RecvWR",
    "ResourceExhausted",
    "SendWR",
    "WCOpcode",
    "WCStatus",
    "WROpcode",
    "WorkCompletion",
    "cc",
    "ev_path",
    "ev_plane",
    "make_ev",
]
