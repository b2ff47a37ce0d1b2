"""The host transport's per-QP objects declare the attributes a packet reads first.

Compiled, mypyc lays a native class's attributes out in a C struct in the order
the class declares them (its class-level annotations, then those first assigned in
methods).  At thousands of hosts a host's objects are out of the cache by its next
event, so the fields one packet's host work reads are declared first, where they
share the object's first cache lines (the lines the simulator's hints fetch).
These tests pin the head of each declaration order: compiled the struct's own
order (``__mypyc_attrs__``), interpreted the class body's (``__annotations__``).
"""

from __future__ import annotations

import inspect

import pytest

from openmrc.sim.host import SimHost
from openmrc.transport.cc.nscc import NSCC
from openmrc.transport.context import Context
from openmrc.transport.paths import PathSet
from openmrc.transport.qp import QueuePair
from openmrc.transport.qpbase import ContextBase, QPBase
from openmrc.transport.requester import Requester
from openmrc.transport.responder import Responder
from openmrc.transport.reverse import ReversePaths

from ..compiled import is_compiled

#: each class's attributes that lead its layout: those a packet's host work reads
#: most (counted per attribute over perm-256's first 30 us, interpreted)
HEADS: list[tuple[type, tuple[str, ...]]] = [
    (Requester, ("inflight", "mtu", "retx", "to_segment", "unacked", "cc", "next_psn")),
    (Responder, ("bits", "pending_bytes", "base", "rcvd_bytes", "window", "highest")),
    (PathSet, ("_idx", "_st", "_evs", "down", "_slots", "_nref")),
    (NSCC, ("base_rtt", "_received", "_ignored", "_inc", "maxwnd", "target")),
    (QPBase, ("queued", "state", "control", "remote_qpn", "peer", "stats")),
    (QueuePair, ("requester", "reverse", "responder")),
    (ContextBase, ("ready", "controller", "control_ready")),
    (Context, ("polled_qp", "qps")),
    (ReversePaths, ("last_out", "next_probe_at", "evs", "paths", "confirmed")),
    (SimHost, ("_pump_at", "ctx", "_timer_at", "index", "ports")),
]


def declared(cls: type) -> list[str]:
    """The class's own attributes in the order its layout takes them."""
    if is_compiled(cls.__module__):
        return list(cls.__dict__["__mypyc_attrs__"])  # own first, then its bases'
    notes = inspect.get_annotations(cls)  # the class's own, as strings
    return [name for name, note in notes.items() if not str(note).startswith("ClassVar")]


@pytest.mark.parametrize(("cls", "head"), HEADS, ids=[c.__name__ for c, _ in HEADS])
def test_hot_attributes_lead(cls: type, head: tuple[str, ...]) -> None:
    assert tuple(declared(cls)[: len(head)]) == head


def test_bools_side_by_side() -> None:
    # two bools apart would each take a word (the next field's alignment)
    order = declared(Requester)
    assert order.index("window_probe_out") == order.index("port_blocked") + 1
