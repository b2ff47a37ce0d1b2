"""The transport's compact records behave as the dicts and lists they replace: the
requester's PSN slots and flight order (TxTable), its per-EV send order (EvOrder) and
a QP's EV ids (EvIds)."""

from __future__ import annotations

import random

import pytest

from openmrc.transport.sendop import SendOp
from openmrc.transport.txtable import IN_FLIGHT, EvOrder, TxTable


def test_tx_table_acts_as_a_dict_of_the_window_with_an_ordered_flight() -> None:
    """TxTable against a reference: a dict of the PSNs outstanding (their EV, send
    time, flags) and the PSNs in flight as an insertion-ordered dict."""
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    for seed in range(6):
        rng = random.Random(seed)
        table = TxTable()
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


def test_ev_order_acts_as_a_list_of_pairs_per_ev() -> None:
    """EvOrder against a reference: per EV, a list of (PSN, send time) in send order."""
    for seed in range(6):
        rng = random.Random(seed)
        order = EvOrder()
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
                    assert got is not None
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


def test_ev_ids_act_as_the_dict_of_ev_ids() -> None:
    from openmrc.transport.ev import make_ev
    from openmrc.transport.paths import EvIds

    rng = random.Random(3)
    # EVs of 8 planes with random paths and spare bits, some drawn twice (a later id
    # replaces the earlier one, as in a dict), and some never known

    def draw(n: int) -> list[int]:
        return [
            make_ev(rng.randrange(8), rng.randrange(4096), rng.randrange(1 << 16)) for _ in range(n)
        ]

    first = draw(300)
    evs = first + first[:50] + draw(400)  # the table grows after the repeats
    ids = EvIds(evs[:256])
    ref = dict(zip(evs[:256], range(256), strict=True))
    for i in range(256, len(evs)):
        ids[evs[i]] = i
        ref[evs[i]] = i
    for ev in [*evs, make_ev(1, 5, 7), -1, 1 << 40]:
        assert ids.get(ev, -1) == ref.get(ev, -1)
    with pytest.raises(ValueError):
        ids[evs[0]] = 3  # ids come in order
