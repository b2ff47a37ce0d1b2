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
from collections.abc import Callable
from types import ModuleType

import pytest

from openmrc.transport import paths
from openmrc.transport.attrs import EVProfile
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
