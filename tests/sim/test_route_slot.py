"""The route slot the native kernel's switch-arrival prefetches read.

A switch arrival's loads form a chain (the packet, its route, the switch's table
entry, the out port), each found from the one before.  The kernel's event loop
walks it a step an event for the arrivals a few events ahead, reading a packet's
route straight from the object at the offset where its type keeps it: learned
from the first packet of the type a switch reads a route from (``route_slot``).
Prefetch only: what it reads never decides anything (the parity scenarios check
the results); these tests check that the offset learned is where the route is.
"""

from __future__ import annotations

import ctypes
from typing import Any

from openmrc.wire.packets import DataPacket, Opcode
from tests.sim.test_kernel import (  # noqa: F401 (the fixture `native` names under OPENMRC_REQUIRE_NATIVE=1)
    _data,
    _impls,
    _kernel_required,
    _line,
    _route,
    kernel,
    native,
    sim_run_disassembly,
)


def _native_line() -> tuple[Any, ...]:
    """host -> native switch (uSID 0xE001) -> host end (test_kernel's line)."""
    impl = next(i for i in _impls() if i[0] == "native")
    return _line(impl)


def _slot_value(obj: object, offset: int) -> int | None:
    """The pointer stored ``offset`` bytes into ``obj`` (CPython: id is the address)."""
    return ctypes.c_void_p.from_address(id(obj) + offset).value


@native
def test_switch_learns_where_a_packet_keeps_its_route() -> None:
    """After a switch reads a packet's route, route_slot gives the offset of the
    pointer to that route object in every packet of the type."""
    assert kernel is not None
    _sim, inp, _out, sw, _end, _sink = _native_line()
    first = _data(0, routed=True)
    sw.receive(first, inp, inp.epoch)
    off = kernel.route_slot(DataPacket)
    assert off, "no route slot learned for DataPacket"
    for psn in (1, 2):
        pkt = _data(psn, routed=True)
        assert _slot_value(pkt, off) == id(pkt.route)
    assert _slot_value(first, off) == id(first.route)  # also after its shift


class _TwinRoute(DataPacket):
    """A packet type that keeps its route object in two slots."""

    __slots__ = ("twin",)

    def __init__(self, route: int) -> None:
        super().__init__(5, 0, Opcode.WRITE_ONLY, 0, 0, 0, 0, 1000)
        self.route = route
        self.twin: object = route


@native
def test_a_type_with_the_route_in_two_slots_gets_none() -> None:
    """When two slots hold the route object, which one is the route is unknown: 0."""
    assert kernel is not None
    _sim, inp, _out, sw, _end, _sink = _native_line()
    pkt = _TwinRoute(_route(0xE001, 0xE002))
    assert pkt.twin is pkt.route
    sw.receive(pkt, inp, inp.epoch)
    assert sw.forwarded == 1
    assert kernel.route_slot(_TwinRoute) == 0


@native
def test_unseen_type_has_no_slot() -> None:
    """A type no switch has read a route of: None."""
    assert kernel is not None

    class _Never:
        route = 0

    assert kernel.route_slot(_Never) is None


@native
def test_event_loop_walks_the_switch_chain() -> None:
    """The chain's steps are compiled into ``Sim_run``: the steps that find a route's
    table slot multiply its key by the table's hash constant (0x9e3779b1) there.
    Like the event loop's other prefetches they have no effect a compiler must keep,
    so they are forced inline (x86-64 with objdump; skipped elsewhere)."""
    body = sim_run_disassembly()
    assert body.count("0x9e3779b1") >= 2, "Sim_run lost the switch chain's steps"
