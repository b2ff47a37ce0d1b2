"""openmrc.net.auth: per-session keys, the trailer, and the replay window (no sockets)."""

from __future__ import annotations

import random

from openmrc.net.auth import REPLAY_WINDOW, TRAILER, DatagramAuth, derive_keys

SECRET = b"k" * 32


def _pair(sn: str = "s" * 32, cn: str = "c" * 32) -> tuple[DatagramAuth, DatagramAuth]:
    return DatagramAuth.for_client(SECRET, sn, cn), DatagramAuth.for_server(SECRET, sn, cn)


def _check(auth: DatagramAuth, data: bytes) -> int:
    return auth.check(memoryview(data), len(data))


def test_keys_differ_per_session_and_direction() -> None:
    a = derive_keys(SECRET, "s1", "c1")
    b = derive_keys(SECRET, "s1", "c2")
    assert a[0] != a[1] and a != b and len(a[0]) == 32
    assert derive_keys(SECRET, "s1", "c1") == a  # both ends derive the same


def test_seal_check_replay_and_reflection() -> None:
    client, server = _pair()
    d = client.seal(b"x" * 100)
    assert len(d) == 100 + TRAILER
    assert _check(server, d) == 0
    assert _check(server, d) == 2  # the same datagram again: a replay
    assert _check(client, client.seal(b"y" * 100)) == 1  # reflected: the other key
    _, other_server = _pair(cn="d" * 32)
    assert _check(other_server, client.seal(b"z" * 100)) == 1  # another session's key


def test_any_changed_byte_fails_and_does_not_move_the_window() -> None:
    client, server = _pair()
    d = bytearray(client.seal(bytes(range(64))))
    for i in range(len(d)):
        bad = bytearray(d)
        bad[i] ^= 0x10
        assert _check(server, bytes(bad)) == 1, i  # counter, tag or body: refused
    assert server.top == 0 and server.seen == 0
    assert _check(server, bytes(d)) == 0


def test_the_window_accepts_reordering_once_and_refuses_the_too_old() -> None:
    client, server = _pair()
    sealed = [client.seal(bytes([i % 256]) * 20) for i in range(REPLAY_WINDOW + 10)]
    head = list(range(500))
    random.Random(1).shuffle(head)  # reordered among the first 500
    order = head + list(range(500, len(sealed)))
    late = [*order[:5], 1]  # delivered last: 1 is older than the window by then
    for i in order:
        if i not in late:
            assert _check(server, sealed[i]) == 0
    for i in late:  # within the window if not too far behind, else refused
        expect = 0 if server.top - (i + 1) < REPLAY_WINDOW else 2
        assert _check(server, sealed[i]) == expect
    for i in order:
        assert _check(server, sealed[i]) == 2  # each accepted once


def test_garbage_never_raises() -> None:
    _client, server = _pair()
    rng = random.Random(2)
    for n in (0, 1, 12, 35, 36, 37, 64, 1500):
        data = rng.randbytes(n)
        assert _check(server, data) in (1, 2)
