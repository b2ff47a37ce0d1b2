"""The transport's compact records behave as the dicts and lists they replace: the
requester's PSN slots and flight order (TxTable), its per-EV send order (EvOrder) and
a QP's EV ids (EvIds).

Each is tested in both implementations: the Python classes and the native ones
(:mod:`openmrc.transport._txtable`).  The native half is skipped when
the extension was not built (a failure with ``OPENMRC_REQUIRE_NATIVE=1``), and runs
also under ``OPENMRC_PURE_PYTHON=1``, which only decides what the requester uses.
"""

from __future__ import annotations

import ast
import gc
import importlib
import os
import random
import sys
from array import array
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from openmrc.transport import paths, txtable
from openmrc.transport.ev import make_ev
from openmrc.transport.paths import EvIds, new_ev_ids
from openmrc.transport.sendop import SendOp
from openmrc.transport.txtable import (
    ACK_REQ,
    DUP_RISK,
    GROW_BATCH,
    IN_FLIGHT,
    NAMED,
    OOW,
    ORDERED,
    PROBED,
    RESENT,
    TRIM_BATCH,
    EvOrder,
    TxTable,
)


def _find_native() -> tuple[ModuleType | None, str]:
    """The native module (also when OPENMRC_PURE_PYTHON=1 keeps the requester off it)."""
    try:
        return importlib.import_module("openmrc.transport._txtable"), ""
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"


_native, _NATIVE_ERROR = _find_native()
REQUIRE_NATIVE = os.environ.get("OPENMRC_REQUIRE_NATIVE") == "1"


def _impls() -> list[Any]:
    mark = pytest.mark.skipif(
        _native is None and not REQUIRE_NATIVE, reason="openmrc.transport._txtable is not built"
    )
    return [pytest.param("python", id="python"), pytest.param("native", id="native", marks=mark)]


def _classes(impl: str) -> tuple[Any, Any]:
    """(TxTable, EvOrder) of implementation ``impl``."""
    if impl == "python":
        return TxTable, EvOrder
    if _native is None:
        pytest.fail(f"OPENMRC_REQUIRE_NATIVE=1 but openmrc.transport._txtable: {_NATIVE_ERROR}")
    return _native.TxTable, _native.EvOrder


def _ev_ids_class(impl: str) -> Any:
    """EvIds of implementation ``impl``."""
    if impl == "python":
        return EvIds
    if _native is None:
        pytest.fail(f"OPENMRC_REQUIRE_NATIVE=1 but openmrc.transport._txtable: {_NATIVE_ERROR}")
    return _native.EvIds


IMPLS = _impls()


def test_the_requester_gets_the_native_records_unless_pure_python() -> None:
    """The factories pick the native classes exactly when built and not switched off."""
    pure = os.environ.get("OPENMRC_PURE_PYTHON", "") not in ("", "0")
    assert txtable.NATIVE is (_native is not None and not pure)
    if _native is not None and not pure:
        assert isinstance(txtable.new_tx_table(), _native.TxTable)
        assert isinstance(txtable.new_ev_order(), _native.EvOrder)
    else:
        assert isinstance(txtable.new_tx_table(), TxTable)
        assert isinstance(txtable.new_ev_order(), EvOrder)


def test_a_path_set_gets_the_native_ev_ids_unless_pure_python() -> None:
    """new_ev_ids picks the native EvIds exactly when the requester's records are native."""
    ids = new_ev_ids([5, 7])
    assert isinstance(ids, _native.EvIds if txtable.NATIVE and _native else EvIds)
    assert (ids.get(5, -1), ids.get(7, -1), ids.get(6, -1)) == (0, 1, -1)


@pytest.mark.parametrize("impl", IMPLS)
def test_tx_table_acts_as_a_dict_of_the_window_with_an_ordered_flight(impl: str) -> None:
    """TxTable against a reference: a dict of the PSNs outstanding (their EV, send
    time, flags) and the PSNs in flight as an insertion-ordered dict."""
    tx_table, _ = _classes(impl)
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    for seed in range(6):
        rng = random.Random(seed)
        table = tx_table()
        ref: dict[int, tuple[int, int, int]] = {}
        flight: dict[int, None] = {}
        next_psn = rng.randrange(1 << 20)
        for clock in range(1, 3001):
            r = rng.random()
            if r < 0.3 or not ref:
                table.add(next_psn, op)
                ref[next_psn] = (0, 0, 0)
                next_psn += 1
            elif r < 0.55:
                # (re)send an outstanding PSN not in flight: last in flight
                psn = rng.choice(list(ref))
                if psn not in flight:
                    ev = rng.randrange(1 << 32)
                    table.launch(psn, ev, clock, 2)
                    ref[psn] = (ev, clock, 2 | IN_FLIGHT)
                    flight[psn] = None
            elif r < 0.7 and flight:
                psn = rng.choice(list(flight))
                assert table.land(psn) == ref[psn][2]
                ev, sent, f = ref[psn]
                ref[psn] = (ev, sent, f & ~IN_FLIGHT)
                del flight[psn]
            else:
                # acknowledge the oldest mostly (cumulative), any outstanding PSN sometimes
                psn = min(ref) if rng.random() < 0.6 else rng.choice(list(ref))
                table.remove(psn, psn in flight)
                del ref[psn]
                flight.pop(psn, None)
            assert len(table) == len(ref)
            lo = min(ref, default=next_psn)
            # lowest(): no outstanding PSN below it (what on_sack skips), -1 when none
            low = table.lowest()
            assert (low < 0) == (not ref) and (not ref or low <= lo)
            for psn in range(lo - 2, next_psn + 2):
                assert (table.op(psn) is op) == (psn in ref)
                assert (psn in table) == (psn in ref)
                if psn in ref:
                    assert (table.ev(psn), table.sent(psn), table.flags(psn)) == ref[psn]
            order = []
            psn = table.oldest()
            while psn >= 0:
                order.append(psn)
                psn = table.after(psn)
            assert order == list(flight)
            assert table.flying() == bool(flight)
        table.add(next_psn, op)
        with pytest.raises(ValueError):
            table.add(next_psn, op)  # PSNs come in order
        table.clear()
        assert next_psn not in table
        assert not table and table.oldest() < 0


@pytest.mark.parametrize("impl", IMPLS)
def test_ev_order_acts_as_a_list_of_pairs_per_ev(impl: str) -> None:
    """EvOrder against a reference: per EV, a list of (PSN, send time) in send order."""
    _, ev_order = _classes(impl)
    for seed in range(6):
        rng = random.Random(seed)
        order = ev_order()
        ref: dict[int, list[tuple[int, int]]] = {}
        evs = [rng.randrange(1 << 32) for _ in range(300)] + [0]
        psn = 0
        for t in range(6000):
            r = rng.random()
            ev = rng.choice(evs)
            pairs = ref.setdefault(ev, [])
            if r < 0.45:
                pair = (psn, t) if rng.random() < 0.8 or not pairs else rng.choice(pairs)
                psn += 1
                order.append(ev, *pair)
                pairs.append(pair)
            elif r < 0.65:
                pair = pairs[0] if pairs and rng.random() < 0.7 else (psn, t)
                assert order.pop_first(ev, *pair) == (bool(pairs) and pairs[0] == pair)
                if pairs and pairs[0] == pair:
                    del pairs[0]
            elif r < 0.85:
                pair = rng.choice(pairs) if pairs and rng.random() < 0.8 else (psn, t)
                got = order.take_through(ev, *pair)
                if pair in pairs:
                    k = pairs.index(pair)
                    assert isinstance(got, list)
                    assert list(zip(got[::2], got[1::2], strict=True)) == pairs[:k]
                    del pairs[: k + 1]
                else:
                    assert got is None
            else:
                pair = rng.choice(pairs) if pairs and rng.random() < 0.8 else (psn, t)
                order.remove(ev, *pair)
                if pair in pairs:
                    pairs.remove(pair)
            assert order.pairs(ev) == pairs
        for ev, pairs in ref.items():
            assert order.pairs(ev) == pairs
        # an EV from the network may be any integer
        for bad in (-1, 1 << 32, 1 << 70):
            assert order.take_through(bad, 0, 0) is None
            assert not order.pop_first(bad, 0, 0)
            order.remove(bad, 0, 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_tx_table_edges(impl: str) -> None:
    """Growth past a batch, front cuts (also of a window emptied out of order), the
    flag bits, retries, a wide jump, and PSNs no window holds (any integer)."""
    tx_table, _ = _classes(impl)
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    table = tx_table()
    base = (1 << 24) - 5  # a PSN near the 24-bit wrap: the table does not care
    n = 3 * TRIM_BATCH + GROW_BATCH + 3
    for k in range(n):
        table.add(base + k, op)
        table.launch(base + k, (0xFFFFFFFF - k) & 0xFFFFFFFF, (1 << 63) + k, PROBED)
    assert len(table) == n and table.lowest() == base
    assert table.flags(base + 7) == PROBED | IN_FLIGHT
    assert table.ev(base + 3) == 0xFFFFFFFC and table.sent(base + 3) == (1 << 63) + 3
    assert table.ev_flags(base + 1) == 0xFFFFFFFE | (PROBED | IN_FLIGHT) << 32
    table.set_bits(base + 2, NAMED | OOW)
    table.clear_bits(base + 2, PROBED)
    assert table.flags(base + 2) == NAMED | OOW | IN_FLIGHT
    table.count_retry(base + 9)
    table.count_retry(base + 9)
    assert table.retries(base + 9) == 2 and table.retries(base + 10) == 0
    # land every other one, then acknowledge the front in pieces: the cuts keep
    # every field of what stays
    for k in range(0, n, 2):
        assert table.land(base + k) == PROBED | IN_FLIGHT or k == 2
    for k in range(2 * TRIM_BATCH + 1):
        if k != 9:
            table.remove(base + k, k % 2 == 1)
    assert table.lowest() == base + 9 and base + 9 in table and base + 8 not in table
    assert table.retries(base + 9) == 2 and table.sent(base + 9) == (1 << 63) + 9
    table.remove(base + 9, True)
    flight = []
    psn = table.oldest()
    while psn >= 0:
        flight.append(psn)
        psn = table.after(psn)
    assert flight == [base + k for k in range(2 * TRIM_BATCH + 1, n) if k % 2 == 1]
    assert table.lowest() == base + 2 * TRIM_BATCH + 1
    # a new PSN after the cut starts with no retries and no flags
    table.add(base + n, op)
    assert table.retries(base + n) == 0 and table.flags(base + n) == 0
    # a wide jump: the slots grow to reach it
    far = base + n + 5000
    table.add(far, op)
    assert far in table and base + n + 1 not in table and table.op(far) is op
    # any integer as a PSN: not outstanding, never a crash
    for bad in (-1, -(1 << 70), 1 << 63, 1 << 70, base - 1, far + 1):
        assert bad not in table and table.op(bad) is None
    # acknowledged entirely: empty, the window starts again anywhere
    for psn in range(base, far + 1):
        if psn in table:
            table.remove(psn, bool(table.flags(psn) & IN_FLIGHT))
    assert not table and table.lowest() == -1 and table.oldest() == -1 and not table.flying()
    table.add(7, op)
    assert table.lowest() == 7 and len(table) == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_settle_reads_and_takes_the_oldest_pair_of_its_ev(impl: str) -> None:
    """settle: the word and send time; the EV's oldest pair dropped (ORDERED) only
    when the PSN is in flight without DUP_RISK and its pair is first on its EV."""
    tx_table, ev_order = _classes(impl)
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    table, order = tx_table(), ev_order()
    ev = 0xFFFFFFF0
    for psn in range(100, 104):
        table.add(psn, op)
        table.launch(psn, ev, 10 * psn, 0)
        order.append(ev, psn, 10 * psn)
    # not first on its EV: nothing dropped
    assert table.settle(101, order) == (ev | IN_FLIGHT << 32, 1010)
    assert order.pairs(ev) == [(100, 1000), (101, 1010), (102, 1020), (103, 1030)]
    # first: dropped, ORDERED returned (not stored)
    assert table.settle(100, order) == (ev | (IN_FLIGHT | ORDERED) << 32, 1000)
    assert order.pairs(ev) == [(101, 1010), (102, 1020), (103, 1030)]
    assert table.flags(100) == IN_FLIGHT
    # first but at risk of a duplicate, or not in flight: not dropped
    table.set_bits(101, DUP_RISK)
    assert table.settle(101, order) == (ev | (IN_FLIGHT | DUP_RISK) << 32, 1010)
    table.clear_bits(101, DUP_RISK)
    table.land(101)
    assert table.settle(101, order) == (ev, 1010)
    assert order.pairs(ev) == [(101, 1010), (102, 1020), (103, 1030)]
    # a later send time of the PSN (a retransmission) does not match the old pair
    table.launch(101, ev, 5000, RESENT)
    assert table.settle(101, order)[0] == ev | (IN_FLIGHT | RESENT) << 32
    assert order.pairs(ev)[0] == (101, 1010)


@pytest.mark.parametrize("impl", IMPLS)
def test_send_is_launch_and_append_in_one_call(impl: str) -> None:
    """send(psn, ev, sent, flags, order) leaves the table and the order as launch and
    order.append do, over random sends, resends and acknowledgements; and the Python
    reference's records equal them."""
    tx_table, ev_order = _classes(impl)
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    for seed in range(4):
        rng = random.Random(seed)
        one, one_order = tx_table(), ev_order()  # send
        two, two_order = tx_table(), ev_order()  # launch + append
        ref, ref_order = TxTable(), EvOrder()  # the Python reference, send
        evs = [rng.getrandbits(32) for _ in range(5)]
        sent: dict[int, int] = {}
        now = 0
        for psn in range(400):
            for table in (one, two, ref):
                table.add(psn, op)
            now += rng.randrange(1, 1 << 40)
            ev, flags = rng.choice(evs), rng.choice([0, ACK_REQ, RESENT | ACK_REQ])
            one.send(psn, ev, now, flags, one_order)
            two_order.append(ev, psn, now)
            two.launch(psn, ev, now, flags)
            ref.send(psn, ev, now, flags, ref_order)
            sent[psn] = now
            if rng.random() < 0.3:  # one acknowledged: out of flight and forgotten
                gone = rng.choice(sorted(sent))
                for table in (one, two, ref):
                    table.remove(gone, True)
                del sent[gone]
        for table in (one, two, ref):
            assert [(p, table.ev_flags(p), table.sent(p)) for p in sent] == [
                (p, one.ev_flags(p), one.sent(p)) for p in sent
            ]
            flight = []
            p = table.oldest()
            while p >= 0:
                flight.append(p)
                p = table.after(p)
            assert flight == sorted(sent)
        for ev in evs:
            assert one_order.pairs(ev) == two_order.pairs(ev) == ref_order.pairs(ev)
            assert len(one_order.pairs(ev)) > 0


def test_native_send_edges() -> None:
    """The native send takes only a native EvOrder and an EV of 32 bits, and on
    refusing changes neither record."""
    native = _native_module()
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    table, order = native.TxTable(), native.EvOrder()
    table.add(5, op)
    with pytest.raises(TypeError):
        table.send(5, 3, 100, 0, EvOrder())  # the Python class
    with pytest.raises(OverflowError):
        table.send(5, 1 << 32, 100, 0, order)
    with pytest.raises(IndexError):
        table.send(4, 3, 100, 0, order)  # below the window
    assert not table.flying() and order.pairs(3) == []
    table.send(5, 3, 100, ACK_REQ, order)
    assert (table.ev(5), table.sent(5), table.flags(5)) == (3, 100, IN_FLIGHT | ACK_REQ)
    assert order.pairs(3) == [(5, 100)] and table.oldest() == 5


@pytest.mark.parametrize("impl", IMPLS)
def test_add_send_is_add_then_send(impl: str) -> None:
    """add_send(psn, op, ev, sent, flags, order), a new PSN's first transmission in
    one call, leaves the table and the order as add then send do, over random first
    sends, resends and acknowledgements, send times past 2**30 (several digits)."""
    tx_table, ev_order = _classes(impl)
    ops = [SendOp(i, [], 0, 0, None, True, 0, 4096) for i in range(3)]
    for seed in range(4):
        rng = random.Random(seed)
        one, one_order = tx_table(), ev_order()  # add_send
        two, two_order = tx_table(), ev_order()  # add + send
        evs = [rng.getrandbits(32) for _ in range(5)]
        sent: dict[int, int] = {}
        now = 1 << 30
        for psn in range(300):
            op = rng.choice(ops)
            now += rng.randrange(1, 1 << 40)
            ev, flags = rng.choice(evs), rng.choice([0, ACK_REQ])
            one.add_send(psn, op, ev, now, flags, one_order)
            two.add(psn, op)
            two.send(psn, ev, now, flags, two_order)
            sent[psn] = now
            if rng.random() < 0.2:  # a resend of one outstanding
                again, on = rng.choice(sorted(sent)), rng.choice(evs)
                now += 1
                for table, order in ((one, one_order), (two, two_order)):
                    table.land(again)
                    table.send(again, on, now, RESENT, order)
                sent[again] = now
            if rng.random() < 0.3:  # one acknowledged: out of flight and forgotten
                gone = rng.choice(sorted(sent))
                for table in (one, two):
                    table.remove(gone, True)
                del sent[gone]
        assert len(one) == len(two) == len(sent)
        assert [(p, one.op(p), one.ev_flags(p), one.sent(p)) for p in sent] == [
            (p, two.op(p), two.ev_flags(p), two.sent(p)) for p in sent
        ]
        flight_one, flight_two = [], []
        p = one.oldest()
        while p >= 0:
            flight_one.append(p)
            p = one.after(p)
        p = two.oldest()
        while p >= 0:
            flight_two.append(p)
            p = two.after(p)
        assert flight_one == flight_two
        for ev in evs:
            assert one_order.pairs(ev) == two_order.pairs(ev)


def test_native_add_send_edges() -> None:
    """The native add_send refuses what add or send refuses (a PSN not past the
    newest, no message, a Python EvOrder, an EV past 32 bits, a send time outside
    64 unsigned bits) and then changes neither record; send times up to 2**64 - 1
    are kept as array('Q') keeps them."""
    native = _native_module()
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    table, order = native.TxTable(), native.EvOrder()
    table.add_send(5, op, 3, 100, 0, order)
    with pytest.raises(ValueError):
        table.add_send(5, op, 3, 200, 0, order)  # not past the newest
    with pytest.raises(TypeError):
        table.add_send(6, None, 3, 200, 0, order)
    with pytest.raises(TypeError):
        table.add_send(6, op, 3, 200, 0, EvOrder())  # the Python class
    with pytest.raises(OverflowError):
        table.add_send(6, op, 1 << 32, 200, 0, order)
    for bad in (-1, 1 << 64):
        with pytest.raises(OverflowError):
            table.add_send(6, op, 3, bad, 0, order)
    assert len(table) == 1 and 6 not in table and order.pairs(3) == [(5, 100)]
    for psn, when in ((6, (1 << 63) - 1), (7, 1 << 63), (8, (1 << 64) - 1)):
        table.add_send(psn, op, 3, when, ACK_REQ, order)
        assert (table.op(psn), table.sent(psn), table.flags(psn)) == (
            op,
            when,
            IN_FLIGHT | ACK_REQ,
        )
    assert [p for p, _ in order.pairs(3)] == [5, 6, 7, 8]


@pytest.mark.parametrize("impl", IMPLS)
def test_take_is_op_then_settle(impl: str) -> None:
    """take(psn, order): None for a PSN not outstanding (never sent, acknowledged,
    outside the window), else (op, word, sent) equal to op(psn) and then
    settle(psn, order) on a twin table and order, over random sends and takes."""
    tx_table, ev_order = _classes(impl)
    ops = [SendOp(i, [], 0, 0, None, True, 0, 4096) for i in range(3)]
    for seed in range(4):
        rng = random.Random(seed)
        one, one_order = tx_table(), ev_order()  # take
        two, two_order = tx_table(), ev_order()  # op + settle
        evs = [rng.getrandbits(32) for _ in range(4)]
        live: list[int] = []
        now = 0
        for psn in range(300):
            op = rng.choice(ops)
            for table in (one, two):
                table.add(psn, op)
            now += rng.randrange(1, 1 << 36)
            ev, flags = rng.choice(evs), rng.choice([0, DUP_RISK, RESENT])
            one.send(psn, ev, now, flags, one_order)
            two.send(psn, ev, now, flags, two_order)
            if rng.random() < 0.2:
                one.land(psn)
                two.land(psn)
            live.append(psn)
            if rng.random() < 0.4:
                pick = rng.choice([*live, -1, psn + 1, 1 << 70])
                got = one.take(pick, one_order)
                op_two = two.op(pick)
                if op_two is None:
                    assert got is None
                    continue
                assert got == (op_two, *two.settle(pick, two_order))
                assert got[0] is op_two
                for table in (one, two):
                    table.remove(pick, bool(table.flags(pick) & IN_FLIGHT))
                live.remove(pick)
                assert one.take(pick, one_order) is None
        for ev in evs:
            assert one_order.pairs(ev) == two_order.pairs(ev)


def test_native_take_wants_a_native_order() -> None:
    """The native take refuses the Python EvOrder (TypeError), as settle does."""
    native = _native_module()
    table = native.TxTable()
    table.add(1, SendOp(1, [], 0, 0, None, True, 0, 4096))
    with pytest.raises(TypeError):
        table.take(1, EvOrder())


def test_native_tx_table_holds_its_messages() -> None:
    """The native table owns a reference to each message it holds and drops it when
    the PSN is acknowledged, cleared or the table is freed."""
    if _native is None:
        pytest.skip("openmrc.transport._txtable is not built")
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    before = sys.getrefcount(op)
    table = _native.TxTable()
    for psn in range(100):
        table.add(psn, op)
    assert sys.getrefcount(op) == before + 100
    for psn in range(40):
        table.remove(psn, False)
    assert sys.getrefcount(op) == before + 60
    table.clear()
    assert sys.getrefcount(op) == before
    for psn in range(10):
        table.add(psn, op)
    del table
    gc.collect()
    assert sys.getrefcount(op) == before
    with pytest.raises(IndexError):
        _native.TxTable().ev(0)  # a field of a PSN outside the window: an error, no read


@pytest.mark.parametrize("impl", IMPLS)
def test_ev_order_table_wraps_and_grows(impl: str) -> None:
    """EVs whose home slots collide at the end of the open-addressing table probe
    round to its start; the table grows past three quarters; 0 and 2**32-1 are EVs."""
    _, ev_order = _classes(impl)
    order = ev_order()
    # (ev ^ ev >> 16 ^ ev >> 7) & 15 == 15 for each: all want the last slot of 16
    evs = [ev for ev in range(1 << 12) if (ev ^ (ev >> 16) ^ (ev >> 7)) & 15 == 15][:11]
    evs += [0, 0xFFFFFFFF]
    for t, ev in enumerate(evs):
        order.append(ev, t, 1000 + t)
        order.append(ev, t + 100, 2000 + t)
    for t, ev in enumerate(evs):
        assert order.pairs(ev) == [(t, 1000 + t), (t + 100, 2000 + t)]
    more = [((k * 2654435761) & 0xFFFFFFFF) for k in range(1, 200)]
    for k, ev in enumerate(more):
        order.append(ev, k, k)
    for t, ev in enumerate(evs):
        assert order.pop_first(ev, t, 1000 + t)
        assert order.take_through(ev, t + 100, 2000 + t) == []
        assert order.pairs(ev) == []
    for k, ev in enumerate(more):
        assert order.pairs(ev) == [(k, k)]
    # freed pool entries are reused, chains stay right
    order.append(evs[0], 1, 2)
    order.append(evs[0], 3, 4)
    order.append(evs[0], 5, 6)
    order.remove(evs[0], 5, 6)
    order.append(evs[0], 7, 8)
    assert order.take_through(evs[0], 7, 8) == [1, 2, 3, 4]
    assert order.pairs(evs[0]) == []


@pytest.mark.parametrize("impl", IMPLS)
def test_ev_ids_act_as_the_dict_of_ev_ids(impl: str) -> None:
    ev_ids = _ev_ids_class(impl)
    rng = random.Random(3)
    # EVs of 8 planes with random paths and spare bits, some drawn twice (a later id
    # replaces the earlier one, as in a dict), and some never known

    def draw(n: int) -> list[int]:
        return [
            make_ev(rng.randrange(8), rng.randrange(4096), rng.randrange(1 << 16)) for _ in range(n)
        ]

    first = draw(300)
    evs = first + first[:50] + draw(400)  # the table grows after the repeats
    ids = ev_ids(evs[:256])
    ref = dict(zip(evs[:256], range(256), strict=True))
    for i in range(256, len(evs)):
        ids[evs[i]] = i
        ref[evs[i]] = i
    for ev in [*evs, make_ev(1, 5, 7), -1, 1 << 40]:
        assert ids.get(ev, -1) == ref.get(ev, -1)
    with pytest.raises(ValueError):
        ids[evs[0]] = 3  # ids come in order


@pytest.mark.parametrize("impl", IMPLS)
def test_ev_ids_edges(impl: str) -> None:
    """EVs from the network are any integer: absent unless known, never a crash; a bad
    assignment raises and changes nothing; the table grows and keeps every id."""
    ev_ids = _ev_ids_class(impl)
    ids = ev_ids([])
    for ev in (0, 1, -1, 1 << 32, (1 << 32) - 1, 1 << 64, -(1 << 70)):
        assert ids.get(ev, -1) == -1
        assert ids.get(ev, 9) == 9
    ids[0] = 0
    ids[(1 << 32) - 1] = 1
    assert (ids.get(0, -1), ids.get((1 << 32) - 1, -1), ids.get(1 << 32, -1)) == (0, 1, -1)
    for bad in (-1, 1 << 32, 1 << 64):
        with pytest.raises(OverflowError):
            ids[bad] = 2
    with pytest.raises(ValueError):
        ids[5] = 1  # not the next id
    with pytest.raises(TypeError):
        ids["x"] = 2
    with pytest.raises(TypeError):
        ids.get("x", -1)
    ids[5] = 2  # nothing the refusals did moved the next id
    assert ids.get(5, -1) == 2
    # EVs whose low 20 bits are all zero (they crowd the hash), past several growths
    evs = [k << 20 for k in range(2000)]
    big = ev_ids(evs)
    assert [big.get(ev, -1) for ev in evs] == list(range(2000))
    assert big.get(2000 << 20, -1) == -1
    big[evs[7]] = 2000  # a later id of an EV replaces the earlier one
    assert big.get(evs[7], -1) == 2000
    with pytest.raises(TypeError):
        ev_ids([1, "x"])


def _native_module() -> Any:
    """The native module; skips (fails with OPENMRC_REQUIRE_NATIVE=1) when not built."""
    if _native is None:
        if REQUIRE_NATIVE:
            pytest.fail(f"OPENMRC_REQUIRE_NATIVE=1 but openmrc.transport._txtable: {_NATIVE_ERROR}")
        pytest.skip("openmrc.transport._txtable is not built")
    return _native


def test_native_good_evs_is_the_comprehension() -> None:
    """_txtable.good_evs gives PathSet.good_evs's list (every plane, random states, ids
    repeated and in any order), and a PathSet uses it exactly when the native records
    are in use."""
    native = _native_module()
    from openmrc.transport import paths

    assert paths._native_good_evs is (native.good_evs if txtable.NATIVE else None)
    rng = random.Random(5)
    for n in (0, 1, 17, 300):
        evs = array("I", [rng.getrandbits(32) for _ in range(n)])
        st = bytearray(rng.randrange(4) for _ in range(n))
        slots = [rng.randrange(n) for _ in range(2 * n)] if n else []
        for plane in range(16):
            for bad in (0, 2, 4):
                want = [evs[i] for i in slots if evs[i] & 15 == plane and st[i] < bad]
                assert native.good_evs(evs, st, slots, plane, bad) == want


def test_native_good_evs_edges() -> None:
    """An id outside the arrays raises IndexError, wrong types TypeError (never a read
    out of bounds), and the EV array is released (it can grow after)."""
    native = _native_module()
    evs = array("I", [16, 17, 33])
    st = bytearray([0, 0])
    assert native.good_evs(evs, st, [0, 1], 1, 2) == [17]
    assert native.good_evs(evs, st, [2], 0, 2) == []  # plane 1: the state is not read
    with pytest.raises(IndexError):
        native.good_evs(evs, st, [2], 1, 2)  # the EV's plane matches, its state is missing
    for slots in ([3], [-1]):
        with pytest.raises(IndexError):
            native.good_evs(evs, st, slots, 0, 2)
    for args in (
        (array("i", [1]), st, [0], 0, 2),
        (list(evs), st, [0], 0, 2),
        (evs, bytes(st), [0], 0, 2),
        (evs, st, (0,), 0, 2),
        (evs, st, ["x"], 0, 2),
        (evs, st, [0], "x", 2),
    ):
        with pytest.raises(TypeError):
            native.good_evs(*args)
    evs.append(48)  # no buffer left exported
    assert native.good_evs(evs, bytearray(4), [3, 0], 0, 2) == [48, 16]


def _after_in(good: list[int], ev: int) -> int:
    """What good_after must give: the item after ``ev``'s first place in ``good``."""
    if not good:
        return -1
    k = good.index(ev) + 1 if ev in good else 0
    return good[k % len(good)]


def _pick_in(good: list[int], k: int) -> int:
    """What good_pick must give: the count and the (k mod count)-th item, packed."""
    return len(good) << 32 | good[k % len(good)] if good else 0


def test_good_after_and_pick_walk_the_good_list() -> None:
    """paths.good_after and good_pick (and their native twins when built) give what
    indexing good_evs's list gives: the GOOD EV after a given one (wrapping; the first
    when the given one is not GOOD) and the k-th modulo the count, with ids repeated,
    EVs repeated and states mixed; PathSet uses the native ones exactly when in use."""
    used = _native if txtable.NATIVE else None
    assert paths._good_after is (used.good_after if used else paths.good_after)
    assert paths._good_pick is (used.good_pick if used else paths.good_pick)
    impls = [(paths.good_after, paths.good_pick)]
    if _native is not None:
        impls.append((_native.good_after, _native.good_pick))
    rng = random.Random(11)
    for n in (0, 1, 2, 17, 300):
        evs = array("I", [rng.choice((rng.getrandbits(32), 16 * rng.randrange(4) + 3))
                          for _ in range(n)])  # fmt: skip
        st = bytearray(rng.randrange(4) for _ in range(n))
        slots = [rng.randrange(n) for _ in range(2 * n)] if n else []
        for plane in (0, 3, 7):
            for bad in (0, 2, 4):
                good = [evs[i] for i in slots if evs[i] & 15 == plane and st[i] < bad]
                probes = [*good[:5], *(evs[i] for i in slots[:5]), 3, 2**32 - 1, -1]
                for after, pick in impls:
                    for ev in probes:
                        assert after(evs, st, slots, plane, bad, ev) == _after_in(good, ev)
                    for k in (0, 1, 2, 5, 299, 1 << 40):
                        assert pick(evs, st, slots, plane, bad, k) == _pick_in(good, k)


def test_native_good_after_and_pick_edges() -> None:
    """The native good_after and good_pick refuse what good_evs refuses (an id outside
    the arrays: IndexError; wrong types: TypeError), good_pick a negative k, and leave
    the EV array growable."""
    native = _native_module()
    evs = array("I", [16, 17, 33])
    st = bytearray([0, 0])
    assert native.good_after(evs, st, [0, 1], 1, 2, 17) == 17
    assert native.good_pick(evs, st, [0, 1], 1, 2, 3) == 1 << 32 | 17
    for fn in (native.good_after, native.good_pick):
        with pytest.raises(IndexError):
            fn(evs, st, [2], 1, 2, 0)
        for slots in ([3], [-1]):
            with pytest.raises(IndexError):
                fn(evs, st, slots, 0, 2, 0)
        for args in (
            (array("i", [1]), st, [0], 0, 2, 0),
            (evs, bytes(st), [0], 0, 2, 0),
            (evs, st, (0,), 0, 2, 0),
            (evs, st, [0], "x", 2, 0),
            (evs, st, [0], 0, 2, "x"),
        ):
            with pytest.raises(TypeError):
                fn(*args)
    with pytest.raises(ValueError):
        native.good_pick(evs, st, [0], 0, 2, -1)
    # ids read in place or converted: past one digit, a bool, an id bad after the pick
    for fn in (native.good_after, native.good_pick):
        with pytest.raises(IndexError):
            fn(evs, st, [1, 2**30 + 1], 1, 2, 17)
        with pytest.raises(IndexError):
            fn(evs, st, [1, 0, 3], 0, 2, 16)  # (good_after reads on for 16's successor)
    assert native.good_after(evs, st, [True, 0], 1, 2, 16) == 17
    assert native.good_pick(evs, st, [0, True, 1], 1, 2, 1) == 2 << 32 | 17
    evs.append(48)  # no buffer left exported
    assert native.good_after(evs, bytearray(4), [3, 0], 0, 2, 16) == 48


def _rto_for(timeout: int, linear: int, cap: int, retries: int) -> int:
    """Requester.rto_for's timeout after ``retries`` timeouts (linear, then doubling)."""
    extra = retries - linear
    if extra < 0:
        return timeout
    return min(timeout << min(extra + 1, 30), cap)


@pytest.mark.parametrize("impl", IMPLS)
def test_rto_at_is_the_oldest_in_flights_timeout(impl: str) -> None:
    """rto_at is sent(oldest) + the timeout after retries(oldest) (Requester.rto_for),
    -1 with nothing in flight, over flights, retries and landings; the doubling stops
    at << 30 and at the cap; a linear count beyond 64 bits works as Python's ints do."""
    tx_table, _ = _classes(impl)
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    cap = 1_024_000 << 24
    table = tx_table()
    assert table.rto_at(10, 3, cap) == -1
    rng = random.Random(3)
    base = rng.randrange(1 << 40)
    for psn in range(base, base + 40):
        table.add(psn, op)
    for clock in range(1, 400):
        psn = base + rng.randrange(40)
        r = rng.random()
        if r < 0.5:
            if table.flags(psn) & IN_FLIGHT:
                table.land(psn)
            table.launch(psn, 7, clock << 20, 0)
        elif r < 0.8:
            table.count_retry(psn)
        elif table.flags(psn) & IN_FLIGHT:
            table.land(psn)
        oldest = table.oldest()
        for timeout, linear in ((1 << 30, 2), (1 << 40, 0), (5, 7), (1 << 62, 1), (0, 0)):
            for lin in (linear, 1 << 70, -(1 << 70), -(1 << 62)):
                want = -1
                if oldest >= 0:
                    want = table.sent(oldest) + _rto_for(timeout, lin, cap, table.retries(oldest))
                assert table.rto_at(timeout, lin, cap) == want
                assert table.rto_at(timeout, lin, (1 << 63) - 1) == (
                    -1
                    if oldest < 0
                    else table.sent(oldest)
                    + _rto_for(timeout, lin, (1 << 63) - 1, table.retries(oldest))
                )


@pytest.mark.parametrize("impl", IMPLS)
def test_rto_at_edges(impl: str) -> None:
    """A timeout or cap below 0 or from 2**63 raises ValueError, a non-int TypeError,
    in both implementations; a send time near 2**64 gives the exact sum."""
    tx_table, _ = _classes(impl)
    table = tx_table()
    table.add(5, SendOp(1, [], 0, 0, None, True, 0, 4096))
    table.launch(5, 1, (1 << 64) - 2, 0)
    assert table.rto_at(1 << 40, 0, 1 << 62) == (1 << 64) - 2 + (1 << 41)
    assert table.rto_at(1 << 62, 0, (1 << 63) - 1) == (1 << 64) - 2 + (1 << 63) - 1  # capped
    for args in ((-1, 0, 5), (1, 0, -1), (1 << 63, 0, 5), (1, 0, 1 << 63)):
        with pytest.raises(ValueError):
            table.rto_at(*args)
    for bad in (("x", 0, 5), (1, "x", 5), (1, 0, "x")):
        with pytest.raises(TypeError):
            table.rto_at(*bad)


@pytest.mark.parametrize("impl", IMPLS)
def test_rto_at_reads_the_oldest_retries_after_removes_and_cuts(impl: str) -> None:
    """rto_at takes the oldest's retries also when other PSNs, with and without
    retries, were acknowledged before it and the front was cut (the native table reads
    retries only while some PSN it holds has had a timeout)."""
    tx_table, _ = _classes(impl)
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    table = tx_table()
    n = 3 * TRIM_BATCH
    for psn in range(n):
        table.add(psn, op)
        table.launch(psn, 1, 1000 + psn, 0)
    table.count_retry(5)
    for psn in (2 * TRIM_BATCH, 2 * TRIM_BATCH, 2 * TRIM_BATCH + 3):
        table.count_retry(psn)
    for psn in range(2 * TRIM_BATCH):  # past a cut; PSN 5's retry goes with it
        table.remove(psn, True)
    oldest = 2 * TRIM_BATCH
    assert table.oldest() == oldest and table.retries(oldest) == 2
    assert table.rto_at(10, 1, 1 << 40) == 1000 + oldest + (10 << 2)
    table.remove(oldest, True)
    assert table.rto_at(10, 1, 1 << 40) == 1000 + oldest + 1 + 10
    table.remove(oldest + 1, True)
    table.remove(oldest + 2, True)
    assert table.rto_at(10, 1, 1 << 40) == 1000 + oldest + 3 + (10 << 1)
    table.count_retry(oldest + 4)
    table.remove(oldest + 3, True)
    assert table.rto_at(10, 1, 1 << 40) == 1000 + oldest + 4 + (10 << 1)


def test_native_tx_table_refuses_a_window_of_2_31_psns() -> None:
    """The native table links the PSNs in flight by 32-bit slot distances: a PSN
    2**31 or more past the oldest outstanding one is refused (MemoryError, as a window
    that memory cannot hold is) and the table is unchanged."""
    native = _native_module()
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    table, order = native.TxTable(), native.EvOrder()
    table.add(7, op)
    for far in (7 + (1 << 31), 7 + (1 << 31) - GROW_BATCH, 7 + (1 << 40)):
        with pytest.raises(MemoryError, match="2\\*\\*31"):
            table.add(far, op)
        with pytest.raises(MemoryError, match="2\\*\\*31"):
            table.add_send(far, op, 1, 2, 0, order)
    assert len(table) == 1 and far not in table and order.pairs(1) == []
    table.add(8, op)
    table.add_send(9, op, 1, 2, 0, order)
    assert len(table) == 3 and table.oldest() == 9 and order.pairs(1) == [(9, 2)]


def _rotate_impl(impl: str) -> Any:
    """The rotation step of implementation ``impl``: paths.rotate or _txtable.rotate."""
    if impl == "python":
        return paths.rotate
    return _native_module().rotate


def test_a_path_set_rotates_natively_unless_pure_python() -> None:
    """PathSet.next_ev's rotation step is the native one exactly when the requester's
    records are."""
    native = _native.rotate if txtable.NATIVE and _native is not None else paths.rotate
    assert paths._rotate is native


@pytest.mark.parametrize("impl", IMPLS)
def test_rotate_is_the_rotation(impl: str) -> None:
    """rotate gives next_ev's answer for every start, state mix and repeated ids: the
    first GOOD id's EV from slot i on, the SKIPs passed over made GOOD (and nothing
    else written), or the EV at slot i when none is GOOD; the result is
    (next slot << 32) | EV, a negative start counting from the end as a list does."""
    rot = _rotate_impl(impl)
    rng = random.Random(9)
    for n in (1, 2, 5, 16, 64):
        for _ in range(40):
            m = n + rng.randrange(3)
            evs = array("I", [rng.getrandbits(32) for _ in range(m)])
            st = bytearray(rng.choice((0, 1, 1, 2, 3)) for _ in range(m))
            slots = [rng.randrange(m) for _ in range(n)]
            for i in range(-n, n):
                want_st = bytearray(st)
                j = i
                want = None
                for _step in range(n):
                    k = slots[j]
                    j = j + 1 if j + 1 != n else 0
                    if want_st[k] == 0:
                        want = (j, evs[k])
                        break
                    if want_st[k] == 1:
                        want_st[k] = 0
                if want is None:
                    want = (j + 1 if j + 1 < n else 0, evs[slots[j]])
                got_st = bytearray(st)
                r = rot(slots, got_st, evs, i)
                assert (r >> 32, r & 0xFFFFFFFF) == want
                assert got_st == want_st


@pytest.mark.parametrize("impl", IMPLS)
def test_rotate_edges(impl: str) -> None:
    """Ids or a start outside their arrays raise IndexError (a huge start may raise
    OverflowError in the compiled Python instead), a non-int
    TypeError, in both implementations alike: never a read or write out of bounds; the
    EV array is released (it can grow after)."""
    rot = _rotate_impl(impl)
    evs = array("I", [16, 17, 33])
    st = bytearray([2, 1, 0])
    assert rot([0, 1, 2], st, evs, 0) == 33  # the last slot: the next is slot 0
    assert st == bytearray([2, 0, 0])
    assert rot([0], bytearray([3]), evs, 0) == 16  # nothing GOOD: slot 0 anyway
    for slots, i in (([], 0), ([0], 1), ([0], -2), ([1 << 70], 0), ([-4], 0)):
        with pytest.raises(IndexError):
            rot(slots, bytearray(3), evs, i)
    # a start too large for an index: IndexError, or OverflowError where mypyc's
    # compiled list indexing converts it first (the compiled Python reference)
    with pytest.raises((IndexError, OverflowError)):
        rot([0], bytearray(3), evs, 1 << 70)
    with pytest.raises(IndexError):
        rot([2], bytearray(2), evs, 0)  # the state is missing
    with pytest.raises(IndexError):
        rot([3], bytearray(4), evs, 0)  # GOOD, the EV is missing
    bad: tuple[tuple[Any, Any], ...] = ((["x"], 0), ([0], "x"), ([0.0], 0))
    for slots, i in bad:
        with pytest.raises(TypeError):
            rot(slots, bytearray(3), evs, i)
    evs.append(48)  # no buffer left exported
    assert rot([3], bytearray(4), evs, 0) == 48


def _rotate_busy_impl(impl: str) -> Any:
    """The busy-plane rotation step of ``impl``: paths.rotate_busy or _txtable's."""
    if impl == "python":
        return paths.rotate_busy
    return _native_module().rotate_busy


def test_a_path_set_rotates_past_busy_planes_natively_unless_pure_python() -> None:
    """PathSet.next_ev's step past busy planes is the native one exactly when its plain
    rotation is."""
    native = _native.rotate_busy if txtable.NATIVE and _native is not None else paths.rotate_busy
    assert paths._rotate_busy is native


def _plane_runs(evs: array[int], slots: list[int], rng: random.Random) -> array[int]:
    """A plane index as PathSet._plane_index lays it out (offsets, cursors, positions
    grouped by plane), with the cursors at random places in their runs."""
    offs, order = paths.plane_runs(evs, slots)
    cur = [rng.randrange(offs[p + 1] - offs[p]) if offs[p + 1] > offs[p] else 0 for p in range(16)]
    return array("I", offs + cur + order)


@pytest.mark.parametrize("impl", IMPLS)
def test_rotate_busy_is_the_rotation_past_busy_planes(impl: str) -> None:
    """rotate_busy gives next_ev's answer while planes are passed over, for every start,
    state mix, skip mask and plane cursor: the first GOOD slot from i on whose plane is
    not skipped picks the plane, the EV is that plane's next GOOD one from its cursor
    (the cursor moves past it), SKIPs passed over become GOOD (nothing else written);
    None, with only the SKIPs written, when no slot qualifies; a negative start counts
    from the end as a list does."""
    rot = _rotate_busy_impl(impl)
    rng = random.Random(11)
    for n in (1, 2, 5, 16, 64):
        for _ in range(30):
            m = n + rng.randrange(3)
            planes = rng.choice((1, 2, 4, 8))
            evs = array("I", [rng.getrandbits(28) << 4 | rng.randrange(planes) for _ in range(m)])
            st = bytearray(rng.choice((0, 0, 1, 2, 3)) for _ in range(m))
            slots = [rng.randrange(m) for _ in range(n)]
            pcur = _plane_runs(evs, slots, rng)
            for i in range(-n, n):
                skip = rng.getrandbits(planes)
                want_st = bytearray(st)
                want_pcur = array("I", pcur)
                j = i
                want = None
                for _step in range(n):
                    k = slots[j]
                    j = j + 1 if j + 1 != n else 0
                    if want_st[k] == 0 and not skip >> (evs[k] & 15) & 1:
                        p = evs[k] & 15
                        run = [slots[q] for q in pcur[33 + pcur[p] : 33 + pcur[p + 1]]]
                        c = pcur[17 + p]
                        ev = evs[k]
                        for t in range(len(run)):
                            kk = run[(c + t) % len(run)]
                            if want_st[kk] == 0:
                                want_pcur[17 + p] = (c + t + 1) % len(run)
                                ev = evs[kk]
                                break
                        want = j << 32 | ev
                        break
                    if want_st[k] == 1:
                        want_st[k] = 0
                got_st = bytearray(st)
                got_pcur = array("I", pcur)
                assert rot(slots, got_st, evs, got_pcur, i, skip) == want
                assert got_st == want_st
                assert got_pcur == want_pcur


@pytest.mark.parametrize("impl", IMPLS)
def test_rotate_busy_edges(impl: str) -> None:
    """Ids or positions outside their arrays raise IndexError, a non-int TypeError, in
    both implementations alike: never a read or write out of bounds; both arrays are
    released (they can grow after)."""
    rot = _rotate_busy_impl(impl)
    evs = array("I", [0x10, 0x21, 0x30])  # planes 0, 1, 0
    slots = [0, 1, 2]
    pcur = array("I", [0, 2, 3] + [3] * 14 + [1] + [0] * 15 + [0, 2, 1])
    st = bytearray([1, 0, 0])
    # plane 0 busy: slot 0 is a SKIP (made GOOD), slot 1 is plane 1's only EV
    assert rot(slots, st, evs, pcur, 0, 1) == 2 << 32 | 0x21
    assert st == bytearray([0, 0, 0])
    # plane 1 busy: slot 2 picks plane 0, whose cursor (1) names slot 2 first
    assert rot(slots, st, evs, pcur, 2, 2) == 0 << 32 | 0x30
    assert pcur[17] == 0
    assert rot(slots, bytearray([2, 2, 2]), evs, pcur, 0, 0) is None  # none GOOD
    assert rot(slots, bytearray(3), evs, pcur, 0, 3) is None  # every plane busy
    for args in (
        ([3], bytearray(4), evs, pcur, 0, 0),  # GOOD, the EV is missing
        ([2], bytearray(2), evs, pcur, 0, 0),  # the state is missing
        # a plane's run past the index, a position past the slots
        ([0], bytearray(3), evs, array("I", [0, 9] + [9] * 15 + [3] + [0] * 15 + [0]), 0, 0),
        ([0], bytearray(3), evs, array("I", [0, 1] + [1] * 15 + [0] * 16 + [5]), 0, 0),
        ([0], bytearray(3), evs, array("I", [0] * 8), 0, 0),  # no plane index
        ([0], bytearray(3), evs, pcur, 1, 0),  # the start is past the slots
        ([0], bytearray(3), evs, pcur, -2, 0),  # or before them
    ):
        with pytest.raises(IndexError):
            rot(*args)
    bad: tuple[tuple[Any, ...], ...] = (
        (["x"], bytearray(3), evs, pcur, 0, 0),
        ([0], bytearray(3), evs, pcur, "x", 0),
        ([0], bytearray(3), evs, pcur, 0, "x"),
    )
    for args in bad:
        with pytest.raises(TypeError):
            rot(*args)
    evs.append(0x40)  # no buffer left exported
    pcur.append(0)
    assert rot([3], bytearray(4), evs, pcur, 0, 2) == 0x40


def _methods(path: Path, cls: str) -> dict[str, list[str]]:
    """Class ``cls`` of source or stub file ``path``: each method's parameter names
    (without ``self``), read from the file's syntax tree (so the answer is the same
    whether the module is compiled or not)."""
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {
        f.name: [a.arg for a in f.args.args[1:]]
        for f in node.body
        if isinstance(f, ast.FunctionDef) and f.name != "__init__"
    }


_TRANSPORT = Path(txtable.__file__).resolve().parent


@pytest.mark.parametrize(
    ("native", "protocol", "home"),
    [
        ("TxTable", "TxTableLike", "txtable.py"),
        ("EvOrder", "EvOrderLike", "txtable.py"),
        ("EvIds", "EvIdsLike", "paths.py"),
    ],
)
def test_the_native_stub_declares_what_the_protocol_does(
    native: str, protocol: str, home: str
) -> None:
    """_txtable.pyi's classes list the methods (names and parameters) of the protocols
    the requester holds them as (txtable.TxTableLike, EvOrderLike): the protocol is the
    one home of the list, the stub a copy for type checkers that must not drift; and
    the native classes, when built, have each method."""
    stub = _methods(_TRANSPORT / "_txtable.pyi", native)
    wanted = _methods(_TRANSPORT / home, protocol)
    assert stub == wanted, (
        f"_txtable.pyi's {native} differs from {home[:-3]}.{protocol}: "
        f"missing {sorted(set(wanted) - set(stub))}, extra {sorted(set(stub) - set(wanted))}, "
        f"parameters differ for {sorted(m for m in set(stub) & set(wanted) if stub[m] != wanted[m])}"
    )
    if _native is not None:
        cls = getattr(_native, native)
        assert [m for m in wanted if not hasattr(cls, m)] == []


def test_an_older_native_build_is_used_whole_or_not_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``_txtable`` build that predates one of the names the Python side uses (its
    optional rebuild failed and left it beside newer sources) gives the pure-Python
    classes, not an AttributeError at the first QP."""
    import sys
    import types

    import openmrc.transport as transport_pkg
    from openmrc.transport import txtable

    monkeypatch.delenv("OPENMRC_PURE_PYTHON", raising=False)
    old = types.ModuleType("openmrc.transport._txtable")
    for name in txtable.NATIVE_NAMES[:-1]:
        setattr(old, name, object())
    monkeypatch.setitem(sys.modules, "openmrc.transport._txtable", old)
    monkeypatch.setattr(transport_pkg, "_txtable", old, raising=False)
    assert txtable._load_native() is None
    setattr(old, txtable.NATIVE_NAMES[-1], object())
    assert txtable._load_native() is None  # its TxTable lacks the newest method
    methods: dict[str, dict[str, None]] = {}  # (a class may have several)
    for cls, name in txtable.NATIVE_METHODS:
        methods.setdefault(cls, {})[name] = None
    for cls, names in methods.items():
        setattr(old, cls, type(cls, (), names))
    assert txtable._load_native() is old


def _ack_model(table: Any, stop: int, base: int, bits: int, limit: int, order: Any) -> tuple:
    """What TxTable.ack does, out of op, ev_flags, settle and remove: the outstanding
    PSNs below ``stop`` and then at ``bits``' set bits above ``base`` below ``limit``,
    in order, taken while each is plain (in flight, no QUICK_STOP flag, the oldest
    pair on its EV) and of the first one's message."""
    psns = [p for p in range(stop) if p in table]
    psns += [base + k for k in range(64) if bits >> k & 1 and base + k < limit]
    run = None
    n = last = last_sent = min_sent = reqs = 0
    for psn in psns:
        op = table.op(psn)
        if op is None:
            continue
        flags = table.flags(psn)
        # (the flags spelled out, not QUICK_STOP: the model is the definition)
        plain = flags & (IN_FLIGHT | OOW | RESENT | DUP_RISK | NAMED) == IN_FLIGHT
        if (run is not None and op is not run) or not plain:
            return run, n, last, last_sent, min_sent, reqs, psn
        word, sent = table.settle(psn, order)
        if not word >> 32 & ORDERED:
            return run, n, last, last_sent, min_sent, reqs, psn
        table.remove(psn, True)
        min_sent = sent if run is None else min(min_sent, sent)
        run, n, last, last_sent = op, n + 1, psn, sent
        reqs += flags & ACK_REQ != 0
    return run, n, last, last_sent, min_sent, reqs, -1


def _flight(table: Any) -> list[int]:
    out = []
    psn = table.oldest()
    while psn >= 0:
        out.append(psn)
        psn = table.after(psn)
    return out


@pytest.mark.parametrize("impl", IMPLS)
def test_ack_takes_the_plain_psns_of_one_message_in_order(impl: str) -> None:
    """ack(stop, base, bits, limit, order) returns and leaves what the model (op,
    ev_flags, settle and remove per PSN) does, over random sends, landings, flags,
    resends on other EVs and ACKs; called again after the PSN it stopped at is
    taken, it goes on."""
    tx_table, ev_order = _classes(impl)
    ops = [SendOp(i, [], 0, 0, None, True, 0, 4096) for i in range(3)]
    stops = 0
    for seed in range(6):
        rng = random.Random(seed)
        one, one_order = tx_table(), ev_order()  # ack
        two, two_order = tx_table(), ev_order()  # the model
        evs = [rng.getrandbits(32) for _ in range(3)]
        now = 0
        una = 0
        op = ops[0]
        for psn in range(400):
            if rng.random() < 0.1:
                op = rng.choice(ops)
            now += rng.randrange(1, 1 << 36)
            ev = rng.choice(evs)
            flags = rng.choice([0, 0, 0, ACK_REQ, RESENT, DUP_RISK, OOW, NAMED, PROBED])
            for table, order in ((one, one_order), (two, two_order)):
                table.add_send(psn, op, ev, now, flags, order)
            if rng.random() < 0.1:
                for table in (one, two):
                    table.land(psn)
            if rng.random() < 0.05 and psn:
                # a resend of an older outstanding PSN, last in flight and on its new EV
                old = rng.randrange(una, psn)
                if old in one and not one.flags(old) & IN_FLIGHT:
                    ev = rng.choice(evs)
                    for table, order in ((one, one_order), (two, two_order)):
                        table.send(old, ev, now, RESENT, order)
            if rng.random() < 0.3:
                stop = min(psn + 1, una + rng.randrange(0, 6))
                base = max(stop, psn - rng.randrange(0, 70))
                # (any int: its low 64 bits are the bitmap)
                bits = (
                    rng.getrandbits(64) if rng.random() < 0.8 else rng.getrandbits(70) - (1 << 69)
                )
                limit = psn + 1 - rng.randrange(0, 3)
                while True:
                    got = one.ack(stop, base, bits, limit, one_order)
                    assert got == _ack_model(two, stop, base, bits, limit, two_order)
                    assert got[0] is None or got[0] in ops
                    if got[6] < 0:
                        break
                    if got[0] is None:
                        stops += 1
                        for table in (one, two):  # the requester's own take
                            table.remove(got[6], bool(table.flags(got[6]) & IN_FLIGHT))
                una = max(una, stop)
                assert len(one) == len(two) and one.lowest() == two.lowest()
                assert _flight(one) == _flight(two)
                for p in range(max(0, psn - 80), psn + 1):
                    assert one.op(p) is two.op(p)
                for ev in evs:
                    assert one_order.pairs(ev) == two_order.pairs(ev)
    assert stops > 100  # the stops were exercised


def test_native_ack_edges() -> None:
    """The native ack takes only a native EvOrder, PSNs in (-2**62, 2**62) (a
    negative one, which a SACK from the network can carry, is not outstanding, as in
    the Python class) and an int bitmap (its low 64 bits), and changes nothing when
    it refuses; on an empty table it takes nothing."""
    native = _native_module()
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    table, order = native.TxTable(), native.EvOrder()
    assert table.ack(10, 0, 1, 10, order) == (None, 0, 0, 0, 0, 0, -1)
    table.add_send(5, op, 3, 100, 0, order)
    with pytest.raises(TypeError):
        table.ack(6, 0, 0, 0, EvOrder())
    for args in ((1 << 62, 0, 0, 0), (0, -(1 << 62), 1, 0), (0, 1 << 62, 1, 0), (0, 0, 0, 1 << 62)):
        with pytest.raises(OverflowError):
            table.ack(*args, order)
    with pytest.raises(TypeError):
        table.ack(0, 0, 1.0, 10, order)
    assert 5 in table and order.pairs(3) == [(5, 100)]
    assert table.ack(0, 5, 2 << 64, 6, order) == (None, 0, 0, 0, 0, 0, -1)  # bits 0-63 only
    python, python_order = TxTable(), EvOrder()
    python.add_send(5, op, 3, 100, 0, python_order)
    for args in ((-3, -(1 << 31), 1, 6), (0, -4, 1 << 63, 6), (0, -64, 1 << 63, -1)):
        # below the table: nothing outstanding, as the Python class says
        got = table.ack(*args, order)
        assert got == python.ack(*args, python_order) == (None, 0, 0, 0, 0, 0, -1)
    got = table.ack(0, -4, 1 << 9, 6, order)  # a negative base whose bit 9 is PSN 5
    assert got == python.ack(0, -4, 1 << 9, 6, python_order) == (op, 1, 5, 100, 100, 0, -1)
    assert 5 not in table
    assert len(table) == 0 and order.pairs(3) == [] and not table.flying()


def _ecn_clean_of(impl: str) -> Any:
    """paths.ecn_clean of implementation ``impl`` (the native one wants native EvIds)."""
    if impl == "python":
        return paths.ecn_clean
    return _native_module().ecn_clean


@pytest.mark.parametrize("impl", IMPLS)
def test_ecn_clean_decays_a_positive_rate_and_starts_a_slot_evs(impl: str) -> None:
    """ecn_clean(ids, rate, run, inslot, ev, keep): for an EV with a positive rate, the
    rate times keep and the run 0, returning the rate's change; for an EV in a slot
    with no rate (-1.0), a rate of 0.0, returning 1.0; else 0.0 and nothing written
    (an EV not known, a rate of 0.0, no rate out of slot)."""
    clean = _ecn_clean_of(impl)
    ids_class = _ev_ids_class(impl)
    rng = random.Random(7)
    evs = [rng.getrandbits(32) for _ in range(40)]
    ids = ids_class(evs)
    rate = array("d", [rng.choice([-1.0, 0.0, rng.random(), 5e-324]) for _ in evs])
    run = array("H", [rng.randrange(0, 1 << 16) for _ in evs])
    inslot = bytearray(rng.getrandbits(1) for _ in evs)
    seen = {"none": 0, "first": 0, "decay": 0}
    for _ in range(600):
        ev = rng.choice([*evs, rng.getrandbits(32), -1, 1 << 40])
        keep = rng.choice([0.75, rng.random()])
        i = evs.index(ev) if ev in evs else -1
        old_rate, old_run = array("d", rate), array("H", run)
        got = clean(ids, rate, run, inslot, ev, keep)
        assert type(got) is float
        if i >= 0 and old_rate[i] < 0.0 and inslot[i]:
            assert got == 1.0 and rate[i] == 0.0
            old_rate[i] = 0.0
            assert rate == old_rate and run == old_run
            seen["first"] += 1
        elif i < 0 or old_rate[i] <= 0.0:
            assert got == 0.0 and rate == old_rate and run == old_run
            seen["none"] += 1
        else:
            new = old_rate[i] * keep
            assert got == new - old_rate[i] and rate[i] == new and run[i] == 0
            old_rate[i], old_run[i] = new, 0
            assert rate == old_rate and run == old_run
            seen["decay"] += 1
        if rng.random() < 0.2 and i >= 0:
            rate[i] = rng.choice([-1.0, rng.random()])  # a mark again, or forgotten
            run[i] = rng.randrange(1, 100)
    assert min(seen.values()) > 20


def test_native_ecn_clean_edges() -> None:
    """The native ecn_clean takes only native EvIds, an int EV, an array('d') rate, an
    array('H') run and a bytearray inslot at least as long as the ids."""
    native = _native_module()
    ids = native.EvIds([5, 9])
    rate, run, inslot = array("d", [0.5, -1.0]), array("H", [3, 3]), bytearray(b"\x01\x01")
    with pytest.raises(TypeError):
        native.ecn_clean(EvIds([5, 9]), rate, run, inslot, 5, 0.75)
    with pytest.raises(TypeError):
        native.ecn_clean(ids, rate, run, inslot, 5.0, 0.75)
    with pytest.raises(TypeError):
        native.ecn_clean(ids, array("f", [0.5, 0.5]), run, inslot, 5, 0.75)
    with pytest.raises(TypeError):
        native.ecn_clean(ids, rate, array("I", [3, 3]), inslot, 5, 0.75)
    with pytest.raises(TypeError):
        native.ecn_clean(ids, rate, run, b"\x01\x01", 9, 0.75)
    with pytest.raises(IndexError):
        native.ecn_clean(ids, array("d", [0.5]), run, inslot, 9, 0.75)
    with pytest.raises(IndexError):
        native.ecn_clean(ids, rate, run, bytearray(b"\x01"), 9, 0.75)
    assert rate == array("d", [0.5, -1.0]) and run == array("H", [3, 3])
    assert native.ecn_clean(ids, rate, run, inslot, 5, 0.75) == -0.125
    assert native.ecn_clean(ids, rate, run, inslot, 9, 0.75) == 1.0
    assert rate == array("d", [0.375, 0.0]) and run == array("H", [0, 3])


def test_native_ev_ids_from_an_array_are_the_ones_from_a_list() -> None:
    """The native EvIds of an array('I') (read through the buffer protocol, the table
    sized once) is the one item assignments build from the same EVs in a list: the same
    bytes held (key capacity and table size, repeated EVs included), the same ``get``
    as each other and as the Python class, and the same again after more ids are
    assigned (growing as before).  Other buffers keep the item-by-item path."""
    native = _native_module()
    rng = random.Random(40)
    for _ in range(400):
        n = rng.choice([0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, rng.randrange(1, 1500)])
        pool = rng.choice([3, 40, n + 1, 1 << 32])  # small pools: many repeats
        evs = [rng.randrange(pool) for _ in range(n)]
        fast, slow, ref = native.EvIds(array("I", evs)), native.EvIds(evs), EvIds(evs)
        for step in range(2):
            assert sys.getsizeof(fast) == sys.getsizeof(slow)
            probes = evs + [rng.randrange(1 << 32) for _ in range(20)] + [-1, 1 << 32, pool]
            for ev in probes:
                assert fast.get(ev) == slow.get(ev) == ref.get(ev, -1), (n, pool, step, ev)
            if step == 0:
                for i in range(n, n + rng.randrange(1, 40)):
                    ev = rng.randrange(pool)
                    fast[ev] = slow[ev] = ref[ev] = i
                    evs.append(ev)
    view = memoryview(array("I", [5, 7, 5]))
    assert [native.EvIds(view).get(ev) for ev in (5, 7, 6)] == [2, 1, -1]
    assert [native.EvIds(b"\x05\x07").get(ev) for ev in (5, 7)] == [0, 1]
    with pytest.raises(OverflowError):
        native.EvIds(array("i", [3, -1]))
