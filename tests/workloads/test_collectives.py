"""Collective graphs: step structure, data dependencies, byte counts, busbw factors."""

from __future__ import annotations

import pytest

from openmrc.workloads import collectives as C


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_allreduce_has_2n_minus_2_steps_and_ring_dependencies(n: int) -> None:
    coll = C.allreduce(n, 1 << 20, channels=2, chunks=3)
    assert coll.steps == 2 * (n - 1)
    ts = coll.transfers
    for ch in range(2):
        for k in range(3):
            mine = [t for t in ts if t.channel == ch and t.chunk == k]
            assert sorted({t.step for t in mine}) == list(range(2 * (n - 1)))
            for r in range(n):
                # every rank sends exactly once per step, to its ring successor
                sends = [t for t in mine if t.src == r]
                assert len(sends) == 2 * (n - 1)
                assert all(t.dst == (r + 1) % n for t in sends)
    for t in ts:
        if t.step == 0:
            assert t.deps == ()
            continue
        # a step forwards what the rank received at the step before
        (d,) = t.deps
        dep = ts[d]
        assert dep.dst == t.src and dep.step == t.step - 1
        assert (dep.channel, dep.chunk) == (t.channel, t.chunk)


def test_ring_bytes_per_rank_match_the_algorithm() -> None:
    n, size = 4, 1_000_003  # not divisible: pieces differ by a byte at most
    ar = C.allreduce(n, size, channels=3)
    sent = [sum(t.size for t in ar.transfers if t.src == r) for r in range(n)]
    # reduce-scatter and all-gather each move (n-1)/n of the buffer out of every rank
    for s in sent:
        assert abs(s - 2 * (n - 1) * size / n) <= 2 * (n - 1) * 3
    ag = C.allgather(n, size)
    assert ag.steps == n - 1
    a2a = C.alltoall(n, size)
    # 250,000 B per peer: two NCCL chunks (128 KiB and the rest), both in flight at once
    assert len(a2a.transfers) == 2 * n * (n - 1) and all(not t.deps for t in a2a.transfers)
    for r in range(n):
        assert sum(t.size for t in a2a.transfers if t.src == r) == (n - 1) * (size // n)
    sr = C.sendrecv(n, size)
    assert [(t.src, t.dst) for t in sr.transfers] == [(r, (r + 1) % n) for r in range(n)]
    assert all(t.size == size for t in sr.transfers)


def test_busbw_factors_are_nccl_tests() -> None:
    assert C.allreduce(8, 1 << 20).busbw_factor == pytest.approx(2 * 7 / 8)
    assert C.allgather(8, 1 << 20).busbw_factor == pytest.approx(7 / 8)
    assert C.reducescatter(8, 1 << 20).busbw_factor == pytest.approx(7 / 8)
    assert C.alltoall(8, 1 << 20).busbw_factor == pytest.approx(7 / 8)
    assert C.sendrecv(8, 1 << 20).busbw_factor == 1.0


def test_training_chains_iterations_and_delays_the_straggler() -> None:
    tr = C.training(
        4, [("allreduce", 1 << 16)], iterations=2, compute_ps=5, straggler=1, straggler_ps=100
    )
    assert len(tr.iterations) == 2
    a, b = tr.iterations[1]
    first = [t for t in tr.transfers[a:b] if t.step == tr.steps // 2 and t.gap_ps]
    # the second iteration's first sends wait for everything the rank received, then compute
    assert {t.src: t.gap_ps for t in first} == {0: 5, 1: 105, 2: 5, 3: 5}
    for t in first:
        assert t.deps and all(tr.transfers[d].dst == t.src for d in t.deps)


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="ranks"):
        C.allreduce(1, 1 << 20)
    with pytest.raises(ValueError, match="size"):
        C.allreduce(4, 3)
    with pytest.raises(ValueError, match="channels"):
        C.allreduce(4, 1 << 20, channels=0)
    with pytest.raises(ValueError, match="kind"):
        C.build("broadcast", 4, 1 << 20)
    with pytest.raises(ValueError, match="placement"):
        C.allreduce(4, 1 << 20).flows([0, 1, 2])
    with pytest.raises(ValueError, match="placement"):
        C.allreduce(4, 1 << 20).flows([0, 1, 2, 2])


def test_p2p_peer_order_is_nccls_quadratic_schedule() -> None:
    # NCCL's own example sequence for 16 ranks (its init.cc), without the rank itself
    assert C.p2p_deltas(16) == [1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
    for n in (2, 3, 5, 12, 64, 100):
        assert sorted(C.p2p_deltas(n)) == list(range(1, n))


def test_alltoall_posts_chunks_per_channel_with_a_bounded_window() -> None:
    n, channels, chunk, slots = 4, 2, 1000, 3
    per_peer = 7_500  # 3,750 per channel: chunks of 1000, 1000, 1000, 750
    a2a = C.alltoall(n, n * per_peer, channels=channels, chunk_bytes=chunk, slots=slots)
    ts = a2a.transfers
    assert len(ts) == n * (n - 1) * channels * 4
    # each rank posts its peers in NCCL's order, each peer's channels in turn
    for r in range(n):
        mine = [t for t in ts if t.src == r]
        order = [t.dst for t in mine if t.channel == 0 and t.chunk == 0]
        assert order == [(r + d) % n for d in C.p2p_deltas(n)]
        assert [t.step for t in mine if t.channel == 0 and t.chunk == 0] == [0, 1, 2]
    by_conn: dict[tuple[int, int, int], list[int]] = {}
    for i, t in enumerate(ts):
        by_conn.setdefault((t.src, t.dst, t.channel), []).append(i)
    assert len(by_conn) == n * (n - 1) * channels
    for idx in by_conn.values():
        assert [ts[i].size for i in idx] == [1000, 1000, 1000, 750]
        assert [ts[i].chunk for i in idx] == [0, 1, 2, 3]
        # the first `slots` chunks go at once; chunk k waits for chunk k - slots to arrive
        assert [ts[i].deps for i in idx] == [(), (), (), (idx[0],)]


def test_alltoall_window_holds_a_connection_to_its_slots() -> None:
    one = C.alltoall(2, 2 * 10_000, chunk_bytes=1000, slots=1)
    assert [t.deps for t in one.transfers[:3]] == [(), (0,), (1,)]
    wide = C.alltoall(2, 2 * 10_000, chunk_bytes=1000)
    assert sum(1 for t in wide.transfers if not t.deps) == 2 * C.P2P_STEPS
    assert C.P2P_NET_CHUNK == 128 << 10 and C.P2P_STEPS == 8


def test_alltoall_refuses_ring_pieces_and_training_keeps_them_for_rings() -> None:
    with pytest.raises(ValueError, match="chunks: the all-to-all cuts"):
        C.alltoall(4, 1 << 20, chunks=2)
    tr = C.training(4, [("allreduce", 1 << 20), ("alltoall", 1 << 20)], chunks=2)
    assert {t.chunk for t in tr.transfers if t.step < 6} == {0, 1}
