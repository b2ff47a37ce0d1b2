"""QPQueue: the context's ordered QP sets behave as the dicts they replaced."""

from __future__ import annotations

import random

import pytest

from openmrc.transport import Context
from openmrc.transport.qp import QueuePair
from openmrc.transport.qpbase import IN_CONTROL, IN_READY, QPQueue


def _qps(n: int) -> list[QueuePair]:
    ctx = Context(random.Random(1))
    pd = ctx.alloc_pd()
    cq = ctx.create_cq()
    return [pd.create_qp(cq) for _ in range(n)]


def test_add_keeps_place_and_retaken_goes_last() -> None:
    a, b, c = _qps(3)
    q = QPQueue(IN_READY)
    q.add(a)
    q.add(b)
    q.add(a)  # a member keeps its place
    q.add(c)
    assert list(q) == [a, b, c] and len(q) == 3
    assert q.pop_first() is a
    assert a not in q and b in q
    q.add(a)  # taken, added again: last
    assert list(q) == [b, c, a]
    q.discard(c)  # from the middle
    q.discard(c)  # not a member: nothing
    assert list(q) == [b, a] and c not in q
    assert q.first() is b


def test_two_sets_keep_separate_membership() -> None:
    (a,) = _qps(1)
    ready, control = QPQueue(IN_READY), QPQueue(IN_CONTROL)
    ready.add(a)
    assert a in ready and a not in control
    control.add(a)
    assert ready.pop_first() is a
    assert a not in ready and a in control and len(control) == 1


def test_one_qp_taken_and_added_back_keeps_the_list() -> None:
    """A context with one QP sending takes it and adds it back per packet: the list
    under the set is not emptied by the take (nor grown again by the add), and the
    order and membership stay a set's."""
    a, b = _qps(2)
    q = QPQueue(IN_READY)
    q.add(a)
    for _ in range(100):
        assert q.pop_first() is a
        assert len(q) == 0 and a not in q and len(q._items) == 1
        q.add(a)
        assert list(q) == [a] and len(q._items) == 1
    q.add(b)
    assert q.pop_first() is a and list(q) == [b]


@pytest.mark.parametrize("seed", range(8))
def test_matches_an_ordered_dict_and_stays_bounded(seed: int) -> None:
    """Random adds, takes and removals give the order a dict used as an ordered set
    gives; the list under the set never holds more than twice the QPs (plus the
    slack before it drops the taken prefix)."""
    rng = random.Random(seed)
    qps = _qps(12)
    q = QPQueue(IN_READY)
    model: dict[QueuePair, None] = {}
    for _ in range(4000):
        r = rng.random()
        if r < 0.5:
            qp = rng.choice(qps)
            q.add(qp)
            model[qp] = None
        elif r < 0.9:
            if model:
                first = next(iter(model))
                assert q.first() is first
                assert q.pop_first() is first
                del model[first]
        else:
            qp = rng.choice(qps)
            q.discard(qp)
            model.pop(qp, None)
        assert list(q) == list(model)
        assert len(q) == len(model)
        assert all((qp in q) == (qp in model) for qp in qps)
        assert len(q._items) <= 2 * len(qps) + 16


@pytest.mark.parametrize("seed", range(4))
def test_fifo_is_a_deque_and_stays_bounded(seed: int) -> None:
    """A QP's control queue (and its messages, its PSNs to resend) gives its items back in the
    order queued, as the deque it replaced, its oldest by ``first()`` after every change;
    the list under it is dropped as it empties or its taken half goes."""
    from collections import deque

    from openmrc.transport.qpbase import Fifo
    from openmrc.wire.packets import ProbePacket

    rng = random.Random(seed)
    q: Fifo[ProbePacket] = Fifo()
    model: deque[ProbePacket] = deque()
    seq = 0
    for _ in range(3000):
        r = rng.random()
        if r < 0.45:
            pkt = ProbePacket(1, 0, seq, 0)
            seq += 1
            q.append(pkt)
            model.append(pkt)
        elif r < 0.55:
            pkt = ProbePacket(1, 0, seq, 0)
            seq += 1
            q.appendleft(pkt)
            model.appendleft(pkt)
        elif r < 0.98:
            if model:
                assert q.first() is model[0]
                assert q.popleft() is model.popleft()
            else:
                with pytest.raises(IndexError):
                    q.popleft()
        else:
            q.clear()
            model.clear()
        assert len(q) == len(model) and list(q) == list(model)
        # first() (kept in a field of its own) is the oldest after every change
        if model:
            assert q.first() is model[0]
        else:
            with pytest.raises(IndexError):
                q.first()
        # count (what the send path reads for len) is the items from the head on
        assert q.count == len(model) == len(q._items) - q._head
        assert len(q._items) <= 2 * len(model) + 16
