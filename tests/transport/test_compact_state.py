"""The transport's compact records behave as the dicts they replace: the requester's
PSN records (PsnRecords) and a QP's EV ids (EvIds)."""

from __future__ import annotations

import random

import pytest

from openmrc.transport.requester import PsnRecords, SendOp, Tx
from openmrc.wire.packets import Opcode


def test_psn_records_act_as_a_dict_of_the_window() -> None:
    op = SendOp(1, [], 0, 0, None, True, 0, 4096)
    for seed in range(6):
        rng = random.Random(seed)
        recs = PsnRecords()
        ref: dict[int, Tx] = {}
        next_psn = rng.randrange(1 << 20)
        for _ in range(2000):
            if rng.random() < 0.5 or not ref:
                tx = Tx(next_psn, op, 0, 4096, Opcode.WRITE_MIDDLE)
                recs[next_psn] = tx
                ref[next_psn] = tx
                next_psn += 1
            else:
                # acknowledge the oldest mostly (cumulative), any outstanding PSN sometimes
                psn = min(ref) if rng.random() < 0.6 else rng.choice(list(ref))
                del recs[psn]
                del ref[psn]
            assert len(recs) == len(ref) and bool(recs) == bool(ref)
            # every outstanding PSN, and the window's edges
            lo = min(ref, default=next_psn)
            for psn in range(lo - 2, next_psn + 2):
                assert recs.get(psn) is ref.get(psn)
                assert (psn in recs) == (psn in ref)
        with pytest.raises(KeyError):
            del recs[next_psn]
        recs.clear()
        assert next_psn - 1 not in recs
        assert not recs


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
