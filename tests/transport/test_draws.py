"""A QP's EV draws in native code (:mod:`openmrc.transport._draws`) draw as the Python
ones (:func:`openmrc.transport.paths._shuffle`, :func:`~openmrc.transport.paths._picks`)
and as the stdlib they stand for: the same choices from the same words, the random
stream left at the same place.

The native tests skip when the extension was not built (fail with
``OPENMRC_REQUIRE_NATIVE=1``) and run also under ``OPENMRC_PURE_PYTHON=1``, which
only decides what :class:`~openmrc.transport.paths.PathSet` uses.
"""

from __future__ import annotations

import importlib
import os
import random
from array import array
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pytest

from openmrc.transport import paths
from openmrc.transport.attrs import EVField, EVProfile
from openmrc.transport.paths import PathSet

REQUIRE_NATIVE = os.environ.get("OPENMRC_REQUIRE_NATIVE") == "1"


def _find_native() -> tuple[ModuleType | None, str]:
    """The native module (also when OPENMRC_PURE_PYTHON=1 keeps the draws off it)."""
    try:
        return importlib.import_module("openmrc.transport._draws"), ""
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"


_native, _NATIVE_ERROR = _find_native()


def _native_module() -> ModuleType:
    """The native module; skips (fails with OPENMRC_REQUIRE_NATIVE=1) when not built."""
    if _native is None:
        if REQUIRE_NATIVE:
            pytest.fail(f"OPENMRC_REQUIRE_NATIVE=1 but openmrc.transport._draws: {_NATIVE_ERROR}")
        pytest.skip("openmrc.transport._draws is not built")
    return _native


def test_pathset_draws_natively_exactly_when_built_and_not_pure_python() -> None:
    pure = os.environ.get("OPENMRC_PURE_PYTHON", "") not in ("", "0")
    assert paths.NATIVE_DRAWS is (_native is not None and not pure)
    if paths.NATIVE_DRAWS:
        assert _native is not None
        assert paths._SHUFFLE is _native.shuffle and paths._PICKS is _native.picks
    else:
        assert paths._SHUFFLE is paths._shuffle and paths._PICKS is paths._picks


def _words(rng: random.Random, direct: bool) -> Callable[[int], int]:
    """``rng.getrandbits``: itself (the native draws read its generator's state) or
    behind a wrapper (the native draws call it for a batch of words at a time)."""
    return rng.getrandbits if direct else (lambda bits: rng.getrandbits(bits))


def test_the_native_draws_read_cpythons_generator_directly() -> None:
    # CPython's _random.Random has the layout _draws.c reads (else it only calls
    # getrandbits: the same draws, slower)
    native = _native_module()
    assert native.DIRECT == 1


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "batches"])
@pytest.mark.parametrize("size", [0, 1, 2, 3, 8, 100, 255, 256, 257, 1000, 65535])
def test_native_shuffle_is_random_shuffle(size: int, direct: bool) -> None:
    native = _native_module()
    for seed in range(20 if size < 1000 else 3):
        ref, py, own = random.Random(seed), random.Random(seed), random.Random(seed)
        a, b, c = list(range(size)), list(range(size)), list(range(size))
        ref.shuffle(a)
        paths._shuffle(py.getrandbits, b)
        native.shuffle(_words(own, direct), c)
        assert c == b == a
        # the streams are in step: the same words taken, not one more
        assert own.getrandbits(64) == py.getrandbits(64) == ref.getrandbits(64)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "batches"])
@pytest.mark.parametrize("nsp", [1, 2, 3, 255, 256, 300, 512, 4097, 65535, 65536])
def test_native_picks_are_the_python_picks(nsp: int, direct: bool) -> None:
    native = _native_module()
    for seed in range(12):
        for need in (0, 1, 7, 32, 257):
            py, own = random.Random(seed), random.Random(seed)
            got = native.picks(_words(own, direct), nsp, need)
            assert got == paths._picks(py.getrandbits, nsp, need)
            assert len(got) == need and all(0 <= j < nsp for j in got)
            assert own.getrandbits(64) == py.getrandbits(64)


def test_native_draws_refuse_what_the_python_ones_cannot_draw() -> None:
    native = _native_module()
    rng = random.Random(1)
    with pytest.raises(TypeError):
        native.shuffle(rng.getrandbits, (1, 2, 3))  # not a list
    with pytest.raises(ValueError):
        native.shuffle(rng.getrandbits, list(range(1 << 16)))  # its 16-bit reads
    with pytest.raises(ValueError):
        native.picks(rng.getrandbits, 0, 3)
    with pytest.raises(ValueError):
        native.picks(rng.getrandbits, (1 << 16) + 1, 3)
    with pytest.raises(TypeError):
        native.shuffle(lambda bits: 1.5, [1, 2, 3])  # words that are not an int
    with pytest.raises(ZeroDivisionError):
        native.picks(lambda bits: 1 // 0, 10, 3)  # the generator's error goes through
    with pytest.raises(TypeError):
        native.picks(rng.getrandbits, 10)


def test_pathset_of_the_paper_profile_draws_the_same_both_ways() -> None:
    # The whole cluster's profile (8 planes x 256 uplinks, 32 EVs each): the native
    # draws and the Python ones give every QP the same EVs and leave the stream alike.
    native = _native_module()
    prof = EVProfile(planes=8, paths_per_plane=256, ev_count=256)
    uplinks, spares = prof.uplink_values(), prof.spare_values()
    for seed in range(6):
        py, own = random.Random(seed), random.Random(seed)
        for plane in range(8):
            want = paths._draw_plane_inline(
                plane, uplinks, spares, 32, py, paths._shuffle, paths._picks
            )
            got = paths._draw_plane_inline(
                plane, uplinks, spares, 32, own, native.shuffle, native.picks
            )
            assert got == want
        assert own.getrandbits(64) == py.getrandbits(64)
    a, b = random.Random(9), random.Random(9)
    assert PathSet(prof, a, qpn=1).slots == PathSet(prof, b, qpn=1).slots


def test_native_draws_keep_the_generator_in_step_across_refills() -> None:
    # Many draws in a row, interleaved with the generator's own calls: the state the
    # native draws advance is the one random.Random goes on from (624-word refills
    # crossed many times, in both directions).
    native = _native_module()
    ref, own = random.Random(3), random.Random(3)
    for size in range(2, 700, 37):
        a, b = list(range(size)), list(range(size))
        ref.shuffle(a)
        native.shuffle(own.getrandbits, b)
        assert a == b
        assert ref.random() == own.random()
        assert paths._picks(ref.getrandbits, 65536, size) == native.picks(
            own.getrandbits, 65536, size
        )
        assert ref.getrandbits(5) == own.getrandbits(5)
    assert ref.getstate() == own.getstate()


def _per_plane(
    rng: random.Random, planes: Sequence[int], uplinks: Sequence[int], spares: Sequence[int], n: int
) -> tuple[list[int], array[int]]:
    """What draw_planes stands for: each plane's draws and its backup seed, in Python."""
    cols, seeds = [], array("Q", bytes(128))
    for plane in planes:
        cols.append(paths._draw_plane_stdlib(plane, uplinks, spares, n, rng))
        seeds[plane] = rng.getrandbits(64)
    return paths._interleave(cols), seeds


@pytest.mark.parametrize(
    "prof",
    [
        EVProfile(planes=8, paths_per_plane=256, ev_count=256),  # the paper's cluster
        EVProfile(),  # 8 planes of 64 uplinks, 32 EVs each
        EVProfile(planes=2, paths_per_plane=32, ev_count=32),  # fewer EVs than uplinks
        EVProfile(planes=1, paths_per_plane=600, ev_count=600),
        EVProfile(planes=16, paths_per_plane=4095, ev_count=16),
        EVProfile(plane_field=EVField(4, mask=0b0110), uplink_field=EVField(5, min=3), ev_count=4),
        EVProfile(planes=3, paths_per_plane=20, ev_count=60, spare_field=EVField(5, min=7)),
        EVProfile(planes=1, paths_per_plane=128, ev_count=256),  # perm-8192: two per uplink
        EVProfile(planes=1, paths_per_plane=32, ev_count=256),  # perm-1024: eight per uplink
        EVProfile(planes=2, paths_per_plane=24, ev_count=2 * 100),  # some uplinks one more
        # a small spare space: an uplink's picks repeat, and are drawn again
        EVProfile(planes=2, paths_per_plane=3, ev_count=2 * 101, spare_field=EVField(9)),
        EVProfile(planes=1, paths_per_plane=2, ev_count=120, spare_field=EVField(9, min=100)),
    ],
)
def test_native_draw_planes_is_each_planes_draws_and_seed(prof: EVProfile) -> None:
    native = _native_module()
    planes, uplinks, spares = prof.plane_values(), prof.uplink_values(), prof.spare_values()
    n = prof.ev_count // len(planes)
    for seed in range(8):
        ref, own = random.Random(seed), random.Random(seed)
        want, want_seeds = _per_plane(ref, planes, uplinks, spares, n)
        seeds = array("Q", bytes(128))
        raw = native.draw_planes(own.getrandbits, planes, uplinks, spares, n, seeds)
        assert raw is not None
        got = array("I")
        got.frombytes(raw)
        assert got.tolist() == want
        assert seeds == want_seeds
        assert own.getstate() == ref.getstate()


def test_native_draw_planes_draws_nothing_from_another_generator() -> None:
    native = _native_module()
    rng = random.Random(4)
    state = rng.getstate()
    seeds = array("Q", bytes(128))
    args = (range(8), range(256), range(65536), 32, seeds)
    assert native.draw_planes(lambda bits: rng.getrandbits(bits), *args) is None
    assert rng.getstate() == state and seeds == array("Q", bytes(128))


def test_native_draw_planes_refuses_what_it_cannot_draw() -> None:
    native = _native_module()
    g = random.Random(1).getrandbits
    seeds = array("Q", bytes(128))
    with pytest.raises(ValueError):  # a spare space the stdlib samples from a pool
        native.draw_planes(g, range(2), range(4), range(21), 2, seeds)
    with pytest.raises(ValueError):  # the same for six EVs on an uplink (21 + 64 or fewer)
        native.draw_planes(g, range(2), range(4), range(85), 4 * 5 + 1, seeds)
    assert native.draw_planes(g, range(2), range(4), range(86), 4 * 5 + 1, seeds) is not None
    with pytest.raises(ValueError):  # no uplink to put an EV on
        native.draw_planes(g, range(2), [], range(65536), 1, seeds)
    with pytest.raises(ValueError):  # more EVs on an uplink than any spares give (no overflow)
        native.draw_planes(g, range(1), range(1), range(65536), 1 << 62, seeds)
    with pytest.raises(ValueError):
        native.draw_planes(g, [16], range(4), range(65536), 2, seeds)
    with pytest.raises(ValueError):
        native.draw_planes(g, [0], [4096], range(65536), 1, seeds)
    with pytest.raises(ValueError):
        native.draw_planes(g, [0], range(4), list(range(65536, 65600)), 2, seeds)
    with pytest.raises(TypeError):
        native.draw_planes(g, range(2), range(4), range(65536), 2, array("I", bytes(64)))
    with pytest.raises(ValueError):  # room for 16 planes' seeds
        native.draw_planes(g, range(2), range(4), range(65536), 2, array("Q", bytes(64)))


def test_pathset_draws_its_planes_in_one_native_call_when_it_can() -> None:
    # with the native draws reading CPython's generator: one call per PathSet, the
    # same EVs, backup seeds and stream as drawing plane by plane (a subclass of
    # random.Random is drawn in Python: the stdlib's own calls)
    if paths.NATIVE_DRAWS:
        assert _native is not None
        assert paths._DRAW_PLANES is (_native.draw_planes if _native.DIRECT else None)
    else:
        assert paths._DRAW_PLANES is None

    class Other(random.Random):
        pass

    prof = EVProfile(planes=8, paths_per_plane=256, ev_count=256)
    for seed in range(4):
        a, b = random.Random(seed), Other(seed)
        pa, pb = PathSet(prof, a, qpn=1), PathSet(prof, b, qpn=1)
        assert pa.slots == pb.slots and pa._seeds == pb._seeds
        assert a.getstate() == b.getstate()


def test_native_draws_that_draw_otherwise_are_refused_at_import() -> None:
    # paths takes the native draws only after checking them against its own: one
    # word taken too many, or nothing drawn, and it keeps the Python draws
    native = _native_module()

    def one_more(g: Callable[[int], int], *rest: Any) -> bytes | None:
        g(32)
        return native.draw_planes(g, *rest)

    def shuffle_one_more(g: Callable[[int], int], x: list[int]) -> None:
        native.shuffle(g, x)
        g(32)

    assert paths._planes_match(native.draw_planes) is bool(native.DIRECT)
    assert not paths._planes_match(one_more)
    assert not paths._planes_match(lambda *args: None)
    assert paths._inline_draws_match(native.shuffle, native.picks)
    assert not paths._inline_draws_match(shuffle_one_more, native.picks)
