"""Cache hints: the lines the native kernel fetches before an entity's events.

``Simulator.set_hints(entity, objects)`` keeps, per entity, the cache-line
addresses of the objects its events read first; the MRC host sets its own
(:meth:`openmrc.sim.host.SimHost._set_hints`).  A hint changes no result (the
parity scenarios check that); these tests check what the kernel keeps, that the
pure-Python loop accepts the same calls, and that a host keeps its row current.
"""

from __future__ import annotations

from typing import Any

import pytest

from openmrc.sim import _native
from openmrc.sim.engine import PySimulator
from tests.sim.test_kernel import _kernel_required, kernel, native  # noqa: F401 (the fixture `native` names under OPENMRC_REQUIRE_NATIVE=1)

#: the line size the kernel's addresses are aligned to
LINE = 64
#: the lines the kernel keeps of one object at most (its PF_OBJ_LINES)
PER = 5
#: the lines of a row at most (its PF_HINTS)
ROW = 96


class _Blob:
    """An object of a known size: ``n`` slots after the header."""

    __slots__ = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o")


def _lines(obj: object, per: int) -> list[int]:
    """The line addresses the kernel should keep for ``obj``: its first ``per`` at most."""
    start = id(obj) & ~(LINE - 1)
    end = id(obj) + type(obj).__basicsize__
    return [a for a in range(start, end, LINE)][:per]


def _once(lines: list[int]) -> list[int]:
    """``lines`` without repeats, in order (a row holds each line once)."""
    return list(dict.fromkeys(lines))


def _item_line(obj: list[Any] | dict[Any, Any]) -> int:
    """The line of a list's first item pointer, or of a dict's keys table."""
    import ctypes

    offset = 24 if isinstance(obj, list) else 32  # ob_item; ma_keys (CPython 3.11, 64-bit)
    address = ctypes.c_void_p.from_address(id(obj) + offset).value
    assert address is not None
    return address & ~(LINE - 1)


@native
def test_native_row_is_each_objects_lines_in_order() -> None:
    """Each object's first lines, in the order given, up to the row's size."""
    assert kernel is not None
    sim = kernel.Simulator()
    e = sim.add_entity([])
    small, big = object(), _Blob()
    kept = sim.set_hints(e, [small, big, small])
    want = _once(_lines(small, PER) + _lines(big, PER))
    assert kept == len(want)
    assert sim.hints_of(e) == want  # each line once (small's again adds none)
    assert len(_lines(big, PER)) >= 2  # (the blob spans lines: more than its start kept)


@native
def test_native_row_adds_a_lists_items_and_a_dicts_keys() -> None:
    """A list's first line of items and a dict's first line of keys follow its own lines
    (what a look at its first item, or a look-up, reads next); an empty list has none."""
    assert kernel is not None
    sim = kernel.Simulator()
    e = sim.add_entity([])
    items, table, empty = [object(), object()], {1: 2, 3: 4}, []  # type: ignore[var-annotated]
    sim.set_hints(e, [items, table, empty])
    want = _once([*_lines(items, PER), _item_line(items), *_lines(table, PER),
                  _item_line(table), *_lines(empty, PER)])  # fmt: skip
    assert sim.hints_of(e) == want


@native
def test_native_row_is_capped_and_replaced() -> None:
    """A long list is cut at the row's size; setting again replaces the row; empty clears it."""
    assert kernel is not None
    sim = kernel.Simulator()
    e = sim.add_entity([])
    many = [_Blob() for _ in range(100)]
    kept = sim.set_hints(e, many)
    assert kept == len(sim.hints_of(e)) == ROW
    one = object()
    assert sim.set_hints(e, [one]) == 1
    assert sim.hints_of(e) == _lines(one, 1)
    assert sim.set_hints(e, []) == 0
    assert sim.hints_of(e) == []
    other = sim.add_entity([])
    assert sim.hints_of(other) == []  # a row of its own, never set


@native
def test_native_rejects_unknown_entity() -> None:
    """An entity that does not exist is refused, as set_entity refuses it."""
    assert kernel is not None
    sim = kernel.Simulator()
    with pytest.raises(ValueError, match="no entity"):
        sim.set_hints(sim.entities(), [object()])
    with pytest.raises(ValueError, match="no entity"):
        sim.set_hints(-1, [object()])


@native
def test_native_hints_do_not_change_the_run() -> None:
    """Events of an entity with hints (some to objects since freed) run as without."""
    assert kernel is not None
    orders = []
    for hinted in (False, True):
        sim = kernel.Simulator()
        owner = _Blob()
        e = sim.add_entity([owner])
        seen: list[int] = []
        if hinted:
            gone = [_Blob() for _ in range(4)]
            sim.set_hints(e, [owner, *gone])
            del gone
        for t in (5, 1, 3):
            sim.post(t, seen.append, t)
        sim.run()
        orders.append(seen)
    assert orders[0] == orders[1] == [1, 3, 5]


def test_pure_python_accepts_hints_and_keeps_none() -> None:
    """The pure-Python loop takes the same calls and keeps nothing."""
    sim = PySimulator()
    e = sim.add_entity([])
    assert sim.set_hints(e, [object()]) == 0
    assert sim.hints_of(e) == []
    with pytest.raises(ValueError, match="no entity"):
        sim.set_hints(sim.entities(), [])


def _perm_host() -> tuple[Any, Any]:
    """A small permutation run 5 us in, and one of its hosts."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import sim_speed  # type: ignore[import-not-found]

    if not _native.NATIVE:
        pytest.skip("the host sets hints on the native simulator (OPENMRC_PURE_PYTHON=1)")
    exp, _, _ = sim_speed.build("perm-16", 200_000, 1, 1)
    exp.sim.run(until_ps=5_000_000)
    return exp, exp.hosts[3]


@native
def test_host_sets_its_row_from_its_nic_and_qps() -> None:
    """A host's row starts with its own lines, then its context's, its ports', its QPs'."""
    exp, host = _perm_host()
    e = exp.sim.entity_of(host)
    row = exp.sim.hints_of(e)
    assert row[: len(_lines(host, PER))] == _lines(host, PER)
    assert len(set(row)) == len(row)
    assert set(_lines(host.ctx, PER)) <= set(row)
    assert set(_lines(host.ports[0], PER)) <= set(row)
    assert _item_line(host.ctx.qps) in row  # the QP table's keys
    # what every arrival and kick reads in the context: the QP table by QPN (and its
    # items), the QPs whose deadlines changed, the deadline heap
    by_qpn, dirty, heap = host.ctx.cache_objects()
    assert by_qpn is host.ctx._by_qpn and dirty is host.ctx.timer_dirty
    assert {*_lines(by_qpn, 1), _item_line(by_qpn), *_lines(dirty, 1)} <= set(row)
    assert set(_lines(heap, 1)) <= set(row)
    qps = list(host.ctx.qps.values())
    assert qps and all(set(_lines(qp, PER)) <= set(row) for qp in qps)
    for qp in qps:  # the route bases to its peer, the parts of it a packet reads
        bases = host._bases[qp.peer]  # (the list kick reads; route_bases makes a new one)
        assert {*_lines(bases, 1), _item_line(bases), *_lines(bases[0], 1)} <= set(row)
        for part in (qp.requester, qp.responder):
            assert part is None or set(_lines(part, 1)) <= set(row)
    assert host._hint_qps == len(qps)


@native
def test_host_sets_its_row_again_when_its_qps_change() -> None:
    """A QP opened after the row was set is in the row after the host's next kick."""
    exp, host = _perm_host()
    e = exp.sim.entity_of(host)
    exp.sim.set_hints(e, [])  # as if stale
    host._hint_qps = len(host.ctx.qps) - 1  # the QPs changed since
    host.kick(exp.sim.now)
    assert set(_lines(host, PER)) <= set(exp.sim.hints_of(e))
