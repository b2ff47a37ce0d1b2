"""The EV set of one QP: which paths it sprays over, and the state of each.

At QP start the sender draws its active EVs, split equally over the planes,
each a random path of its plane; the plane's other paths are the backup set.
Packets rotate through the active EVs, one EV per packet.  Each EV has a state:

========== ==================================================================
GOOD       in the rotation
SKIP       ECN echoed, or trimmed away from the last hop: skipped for one
           rotation, then GOOD again (a load-balancing signal, not a failure)
ASSUMED_BAD a packet was lost without a trim, or timed out: out of the
           rotation at once, replaced by a backup EV of the same plane, and
           probed in the background until enough probes come back
DENIED     administratively removed (controller deny list); an active EV's slot
           is refilled from a backup of its plane, as for ASSUMED_BAD
========== ==================================================================

Port status: when a NIC port goes down (here, or at the peer as the ports-down
bitmap of its SACKs says), every EV of that plane leaves the rotation at once,
without being blamed; the rotation spreads over the other planes.  The plane
returns when its port does (:meth:`PathSet.set_ports_down`).

ECN rebalancing: a single ECN echo only SKIPs its EV for one rotation (the
mark is a load-balancing hint: ECN is off on the last hop).  A flow moves off
a path only when that path is *worse than the QP's others*: an EV whose ACKs
echo ECN ``k`` times in a row (no clean ACK for it between) is *mapped out*,
where ``k`` is ``ECN_REMAP_RUN`` when the QP's other EVs draw no marks and
grows with their mean ECN rate ``p`` so that ``p ** k <= ECN_CHANCE`` (a run
an EV marked at the QP's average would reach only by rare chance; see
:func:`ecn_remap_run`).  At ``p >= ECN_OTHERS_MAX`` nothing is mapped out: the
congestion is shared (an incast), remapping would not help, NSCC handles it.
A backup of the same plane takes the slot and the EV goes back to the end of
the plane's backup pool, still GOOD (it is congested, not broken): the move is
logged as an :class:`EVRemap`, not as a state transition, so the controller's
EV event queue does not see it.  Per-EV ECN rates are EWMAs over that EV's
ACKs with gain ``ECN_RATE_GAIN``.

Flap hold-down: an ASSUMED_BAD EV comes back after ``probe_successes``
answered probes in a row the first time; each further failure soon after it
came back doubles that (``FLAP_MAX_DOUBLINGS``), and each stable period
(``FLAP_DECAY_INTERVALS`` probe intervals GOOD) forgives one failure.  So a
flapping path is kept out while it flaps and returns once it holds.

Failure-proportional plane shares (a documented departure, docs/paths.md):
slots stay split equally over the planes (paper 4: a replacement comes from
the failed EV's plane), but while some of a plane's paths (plane, uplink)
have an ASSUMED_BAD EV, and the plane's EVs show congestion (an ECN echo or a
trim within the last ``HOT_ROTATIONS`` rotations' worth of packets), the
plane sends only in proportion to its paths still working: with ``U`` uplink
values and ``k`` of them failed, ``(U - k) / U`` of a full plane's packets.
So a plane that lost a quarter of its T0-T1 paths and is the bottleneck
carries a quarter less, and a failure costs the capacity it removes rather
than a quarter of every plane; a plane with room left is not held back.
When an EV is blamed its siblings in the rotation (same plane and uplink,
other spare entropy: the same physical path) are blamed with it, and
backups drawn for slots pass over EVs on a failed path while the plane has
others.

A floor of usable EVs stops a storm from disabling them all, and a plane whose
active EVs are mostly bad stops consuming its backups (the plane is presumed
down; its EVs are probed and come back when it does).

Memory: a QP's EV state is a handful of flat arrays, not an object per EV (a
simulated fabric holds tens of thousands of QPs, each with hundreds of EVs).
Every EV the QP has ever known (its active EVs, backups drawn since, explicit
backups, denied ones) gets a small integer *id*; per-id arrays hold the EV
number, its state, whether it is in a slot and (once the QP gets feedback) its
ECN rate and run.  A dict made at the first feedback maps an EV number to its
id (a QP that only receives never makes one).  The rest of each plane's EV
space (the backups not drawn yet) is never listed: it is drawn lazily, as
before.
"""

from __future__ import annotations

import math
import os
import random
import sys
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import chain, repeat
from types import ModuleType
from typing import Final, Protocol, cast, final

from .attrs import EVProfile
from .errors import InvalidArgument
from .ev import PLANE_BITS, ev_path, ev_plane, ev_spare, make_ev
from .txtable import _NATIVE

#: ECN-echoing ACKs in a row on one EV before it is mapped out (ECN rebalancing),
#: when the QP's other EVs draw no marks at all.
ECN_REMAP_RUN: Final = 4
#: ...never when the QP's other EVs' mean ECN rate is this or more (shared
#: congestion: NSCC's business, a remap cannot help).
ECN_OTHERS_MAX: Final = 0.25
#: When the other EVs are marked at a mean rate ``p`` (0 < p < ECN_OTHERS_MAX),
#: an EV is mapped out only after a run of ``k`` marks with ``p ** k`` at most
#: this: a run that an EV marked no more than its QP's average would draw by
#: chance about once in a million ACKs (``k`` = 9 at p = 0.2, 10 at p = 0.24;
#: never fewer than ECN_REMAP_RUN).  So under uniform marking an EV is not
#: worse than the others and stays; a path marked far more often than the
#: QP's average still draws the run within a few of its ACKs.
ECN_CHANCE: Final = 1e-6
#: EWMA gain of the per-EV ECN rate, per ACK of that EV.
ECN_RATE_GAIN: Final = 0.25


def ecn_remap_run(others: float) -> int:
    """The run of ECN marks that maps an EV out when the QP's other EVs are
    marked at the mean rate ``others`` (see :data:`ECN_CHANCE`); a run that
    cannot be reached (65536) when ``others`` is ECN_OTHERS_MAX or more."""
    if others >= ECN_OTHERS_MAX:
        return 1 << 16
    if others <= 0.0:
        return ECN_REMAP_RUN
    return max(ECN_REMAP_RUN, math.ceil(math.log(ECN_CHANCE) / math.log(others)))


class EVState(IntEnum):
    """Per-EV path state."""

    GOOD = 0
    SKIP = 1
    ASSUMED_BAD = 2
    DENIED = 3


GOOD: Final = EVState.GOOD
SKIP: Final = EVState.SKIP
BAD: Final = EVState.ASSUMED_BAD
DENIED: Final = EVState.DENIED

# The states as stored in the per-id state bytearray.
_GOOD: Final = 0
_SKIP: Final = 1
_BAD: Final = 2
_DENIED: Final = 3
_STATES: Final = (GOOD, SKIP, BAD, DENIED)
#: the ECN rate of an EV without one (rates are EWMAs of 0s and 1s).
_NO_RATE: Final = -1.0

#: Flap hold-down.  An EV that fails again soon after its probes brought it back
#: needs twice as many answered probes in a row as the last time, at most
#: ``2 ** FLAP_MAX_DOUBLINGS`` times ``EVProfile.probe_successes`` (96 probe
#: intervals with the defaults, about 3 ms at 32 us): enough that a path which
#: flaps faster than that stays out ("not used when too unreliable", paper 3),
#: while a path that was repaired returns within a few ms at worst.
FLAP_MAX_DOUBLINGS: Final = 5
#: ...and every ``FLAP_DECAY_INTERVALS`` probe intervals an EV stays GOOD forgive
#: it one failure.  Longer than the longest hold-down (96 intervals), so a path
#: failing with any period shorter than its hold-down keeps its count; a path
#: that stays up for 4 ms (defaults) per failure is forgotten step by step.
FLAP_DECAY_INTERVALS: Final = 128

#: How many packets a plane with failed paths may send ahead of its share
#: (failure-proportional plane shares, module docstring).
SHARE_SLACK: Final = 2.0
#: A plane's share is enforced for this many rotations' worth of packets after
#: its paths last showed congestion (an ECN echo or a trim): while the plane's
#: remaining paths are not congested, its lost capacity costs nothing.
HOT_ROTATIONS: Final = 32
#: ...and for this many rotations right after a new failure in the plane (its
#: queues have not had time to mark yet; short: a plane with room left, such as
#: a NIC-bound flow's on a fabric with spare uplinks, is held back only briefly).
HOT_AT_FAILURE: Final = 2
#: Backups on a failed path passed over before one is taken anyway (bounds the
#: work of a draw when most of a plane's paths have failed).
FAILED_PATH_PASSES: Final = 16
#: The EV bits that name its physical path (plane and uplink; not the spare
#: entropy): EVs equal in these bits fail together.
PATH_KEY_MASK: Final = 0xFFFF

#: A plane's backup space up to this many EVs is shuffled once, when its first
#: backup is drawn; a larger one is sampled (rejection sampling).
ENUMERATE_LIMIT: Final = 4096


@dataclass(frozen=True, slots=True)
class EVEvent:
    """An EV state transition, as the controller's EV event queue reports it."""

    time: int
    qpn: int
    ev: int
    old: EVState
    new: EVState
    reason: str


@dataclass(frozen=True, slots=True)
class EVRemap:
    """An active EV left its slot for another EV of its plane without any state
    change (ECN rebalancing; a controller's replace).  Logged on the context's
    event queue for the application and the results, never handed to the
    controller's EV event queue: that reports state transitions only."""

    time: int
    qpn: int
    ev: int
    replacement: int
    reason: str


@dataclass(frozen=True, slots=True)
class PortEvent:
    """A NIC port (one plane) went down or came back, as the context reports it."""

    time: int
    plane: int
    up: bool


# -- drawing ----------------------------------------------------------------------------
# A QP draws its EVs from the context's random stream, and results must stay
# the same bit for bit, so the draws are defined by :func:`_draw_plane_stdlib`:
# a random order of the plane's uplinks (``random.shuffle``), then for each
# uplink in that order its share of distinct spare values
# (``random.sample``).  :func:`_draw_plane` makes exactly the same draws
# faster.  Both stdlib calls draw by rejection: ``getrandbits(n.bit_length())``
# until below ``n`` (and, for a set-based sample, not chosen yet); and
# ``getrandbits(k)`` with ``k <= 32`` is the top ``k`` bits of the generator's
# next 32-bit word, while ``getrandbits(32 * m)`` is its next ``m`` words, the
# first one least significant.  So :func:`_draw_plane` takes words in batches
# of as many as the draws still need at least (one word each: never more than
# the stdlib would take) and makes the same choices from them, reading each
# word's top bytes from the batch's bytes, instead of a Python call per draw.  ``_INLINE_DRAWS`` checks
# at import that the two agree; where they do not (another implementation of
# ``random``), the stdlib version is used.  A compiled build also has
# :func:`_shuffle` and :func:`_picks` in C (:mod:`openmrc.transport._draws`, from
# ``_draws.c`` beside this file; a QP of the paper's profile shuffles 8 x 256
# uplinks when it is connected): the same words, read straight from CPython's own
# generator state (else in batches from ``getrandbits``), and a generated profile's
# whole draw in one call (:func:`_draw_planes_native`).  Used when built,
# ``OPENMRC_PURE_PYTHON`` is not set, and they draw as these do (checked at import).

_LITTLE: Final = sys.byteorder == "little"


def _words(getrandbits: Callable[[int], int], m: int) -> array[int]:
    """The generator's next ``m`` 32-bit words, in the order it makes them."""
    words = array("I", getrandbits(32 * m).to_bytes(4 * m, "little"))
    if not _LITTLE:
        words.byteswap()
    return words


def _shuffle(getrandbits: Callable[[int], int], x: list[int]) -> None:
    """Fisher-Yates shuffle of ``x`` in place, drawing as ``random.Random.shuffle``.

    Swap ``i`` (from the last item down) takes words until one gives an index
    ``j`` below ``n = i + 1``: its top ``n.bit_length()`` bits.  For fewer than
    2 ** 16 items (:func:`_draw_plane` sees to it) those bits are in the word's
    top two bytes, read straight from the batch's bytes."""
    i = len(x) - 1
    while i > 0:
        n = i + 1
        bits = n.bit_length()
        raw = getrandbits(32 * i).to_bytes(4 * i, "little")  # word k: bytes 4k..4k+3
        down = 16 - bits
        low = 1 << (bits - 1)  # the least n of this bit length
        for t in range(3, 4 * i, 4):  # t: a word's top byte
            j = ((raw[t] << 8) | raw[t - 1]) >> down
            if j < n:
                n -= 1
                x[n], x[j] = x[j], x[n]
                if n < low:
                    down += 1
                    low >>= 1
        i = n - 1


def _sample_uses_set(n: int, k: int) -> bool:
    """Whether ``random.sample`` of ``k`` from ``n`` tracks selections in a set."""
    setsize = 21
    if k > 5:
        setsize += 4 ** math.ceil(math.log(k * 3, 4))
    return n > setsize


def _sample_seq(
    getrandbits: Callable[[int], int], n: int, ks: list[int], cands: list[int]
) -> list[list[int]]:
    """One sample per entry of ``ks``: that many distinct indices below ``n`` in
    draw order, as consecutive set-based ``random.Random.sample`` calls make
    them.  ``cands``: indices below ``n`` the generator gave already (taken first)."""
    shift = 32 - n.bit_length()
    limit = n << shift  # a word gives an index below n iff it is below this
    need = sum(ks)  # picks still to make: the most words the stdlib could still take
    buf = iter(cands)
    out: list[list[int]] = []
    for k in ks:
        chosen: dict[int, None] = {}  # insertion-ordered: the picks in draw order
        while len(chosen) < k:
            for j in buf:
                if j not in chosen:
                    chosen[j] = None
                    need -= 1
                    if len(chosen) == k:
                        break
            else:
                buf = iter([w >> shift for w in _words(getrandbits, need) if w < limit])
        out.append(list(chosen))
    return out


def _plan(order: list[int], n: int) -> tuple[int, list[int]]:
    """``n`` EVs over the uplinks in ``order``: (rounds, EVs per uplink).
    The first ``extra`` uplinks get one EV more; with fewer EVs than uplinks
    only they get any (``sample(spares, 0)`` draws nothing, so it is skipped)."""
    rounds, extra = divmod(n, len(order))
    return rounds, [rounds + 1] * extra + [rounds] * ((len(order) - extra) if rounds else 0)


def _interleave(cols: list[list[int]]) -> list[int]:
    """Round after round over the uplinks' columns: column ``i``'s ``r``-th EV goes
    to slot ``r * len(cols) + i`` (each column holds ``rounds`` EVs, or one more
    for the first ``extra``, so the last round holds only those)."""
    m = len(cols)
    out = [0] * sum(map(len, cols))
    for i, col in enumerate(cols):
        out[i::m] = col
    return out


def _draw_plane_stdlib(
    plane: int, uplinks: Sequence[int], spares: Sequence[int], n: int, rng: random.Random
) -> list[int]:
    """``n`` distinct random EVs of one plane, spread evenly over its uplinks, in
    slot order: the definition of the draws (see :func:`_draw_plane`)."""
    order = list(uplinks)
    rng.shuffle(order)
    _, ks = _plan(order, n)
    cols = [
        [plane | (u << PLANE_BITS) | (sp << 16) for sp in rng.sample(spares, k)]
        for u, k in zip(order, ks, strict=False)
    ]
    return _interleave(cols)


def _draw_plane_inline(
    plane: int,
    uplinks: Sequence[int],
    spares: Sequence[int],
    n: int,
    rng: random.Random,
    shuffle: Shuffler,
    picks: Picker,
) -> list[int]:
    """The draws of :func:`_draw_plane_stdlib`, without a Python call per draw
    (``shuffle`` and ``picks``: :func:`_shuffle` and :func:`_picks` or the native ones)."""
    order = list(uplinks)
    getrandbits = rng.getrandbits
    shuffle(getrandbits, order)
    rounds, ks = _plan(order, n)
    nsp = len(spares)
    if not _sample_uses_set(nsp, rounds + 1):  # then not for ``rounds`` either
        rng_sample = rng.sample
        cols = [
            [plane | (u << PLANE_BITS) | (sp << 16) for sp in rng_sample(spares, k)]
            for u, k in zip(order, ks, strict=False)
        ]
        return _interleave(cols)
    # Every pick takes the next word giving an index below nsp that its uplink
    # has not picked yet.  First assume no uplink draws a repeat: then the picks
    # are simply the first ``need`` such words, uplink after uplink.
    need = sum(ks)
    idx = picks(getrandbits, nsp, need)
    if len(ks) == need:  # one EV per uplink (``n`` at most the uplinks): no repeat
        return [
            plane | (u << PLANE_BITS) | (spares[j] << 16) for u, j in zip(order, idx, strict=False)
        ]
    offsets = [plane | (u << PLANE_BITS) for u in order[: len(ks)]]  # an EV but its spare
    bases = chain.from_iterable(map(repeat, offsets, ks))
    evs = [(spares[j] << 16) | b for j, b in zip(idx, bases, strict=False)]
    if len(set(evs)) == need:  # no uplink repeated a value (an EV names its uplink)
        cols = []
        at = 0
        for k in ks:
            cols.append(evs[at : at + k])
            at += k
    else:  # a repeat: replay the words one at a time (about 5 % of the all-to-all's QPs)
        samples = _sample_seq(getrandbits, nsp, ks, idx)
        cols = [
            [plane | (u << PLANE_BITS) | (spares[j] << 16) for j in p]
            for u, p in zip(order, samples, strict=False)
        ]
    return _interleave(cols)


def _picks(getrandbits: Callable[[int], int], nsp: int, need: int) -> list[int]:
    """The indices below ``nsp`` (at most 2 ** 16) of the generator's next ``need``
    words that give one: ``getrandbits(nsp.bit_length())`` is a word's top bits,
    read from the top three bytes of each word of a batch."""
    down = 24 - nsp.bit_length()
    out: list[int] = []
    while len(out) < need:
        m = need - len(out)
        raw = getrandbits(32 * m).to_bytes(4 * m, "little")  # word k: bytes 4k..4k+3
        for t in range(3, 4 * m, 4):  # t: a word's top byte
            j = ((raw[t] << 16) | (raw[t - 1] << 8) | raw[t - 2]) >> down
            if j < nsp:
                out.append(j)
    return out


#: ``shuffle(getrandbits, x)`` and ``picks(getrandbits, nsp, need)``: :func:`_shuffle`
#: and :func:`_picks`, or the native ones (:mod:`openmrc.transport._draws`).
Shuffler = Callable[[Callable[[int], int], list[int]], None]
Picker = Callable[[Callable[[int], int], int, int], list[int]]


def _load_native_draws() -> ModuleType | None:
    """The native draws (:mod:`openmrc.transport._draws`), or None when not built,
    an older build lacking a name, or ``OPENMRC_PURE_PYTHON`` is set."""
    if os.environ.get("OPENMRC_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from . import _draws
    except ImportError:
        return None
    if not all(hasattr(_draws, name) for name in ("shuffle", "picks")):
        return None
    return _draws


def _inline_draws_match(shuffle: Shuffler = _shuffle, picks: Picker = _picks) -> bool:
    """Whether :func:`_draw_plane` with ``shuffle`` and ``picks`` draws as
    :func:`_draw_plane_stdlib` with this Python's ``random`` (checked once, at import)."""
    if array("I").itemsize != 4:
        return False
    if not _sample_uses_set(65536, 1) or _sample_uses_set(20, 1):
        return False
    cases = (
        (range(4), range(65536), 64),  # several per uplink, a whole field
        (range(256), range(65536), 32),  # the paper's planes: 256 uplinks, 32 EVs each
        (range(600), range(65536), 600),  # one EV on each of many uplinks
        (range(32), range(65536), 16),  # fewer EVs than uplinks
        (range(2), range(512), 2 * 60),  # a whole field, repeats within an uplink likely
        (range(3), range(300), 3 * 41 + 1),  # the same, not a power of two
        (range(3), range(4, 40), 7),
        (range(2), [1, 5, 9, 200, 201, 202, 300], 4),  # small: the stdlib's pool-based sample
    )
    for seed in (1, 7):
        ref = random.Random(seed)
        own = random.Random(seed)
        for size in (2, 3, 8, 100):
            a = list(range(size))
            b = list(range(size))
            ref.shuffle(a)
            shuffle(own.getrandbits, b)
            if a != b:
                return False
        for uplinks, spares, n in cases:
            want = _draw_plane_stdlib(3, uplinks, spares, n, ref)
            if want != _draw_plane_inline(3, uplinks, spares, n, own, shuffle, picks):
                return False
        if ref.getrandbits(64) != own.getrandbits(64):  # the streams are in step
            return False
    return True


def _pick_draws() -> tuple[Shuffler, Picker, bool]:
    """The shuffle and picks :func:`_draw_plane` uses, and whether its inline draws
    with them draw as the stdlib does: the native ones when built
    (:func:`_load_native_draws`) and they do, else :func:`_shuffle` and :func:`_picks`."""
    native = _load_native_draws()
    if native is not None and _inline_draws_match(native.shuffle, native.picks):
        return native.shuffle, native.picks, True
    return _shuffle, _picks, _inline_draws_match()


_DRAWS: Final = _pick_draws()
_SHUFFLE: Final = _DRAWS[0]
_PICKS: Final = _DRAWS[1]
_INLINE_DRAWS: Final = _DRAWS[2]
#: Whether the draws' loops run native (:mod:`openmrc.transport._draws`).
NATIVE_DRAWS: Final = _SHUFFLE is not _shuffle

#: ``draw_planes(getrandbits, planes, uplinks, spares, n, seeds)``: a whole generated
#: profile's draws in one native call (see :func:`_draw_planes_native`).
PlanesDrawer = Callable[
    [Callable[[int], int], Sequence[int], Sequence[int], Sequence[int], int, "array[int]"],
    "bytes | None",
]


def _planes_match(draw_planes: PlanesDrawer) -> bool:
    """Whether ``draw_planes`` gives what :func:`_draw_plane` and ``getrandbits(64)``
    plane after plane, interleaved, give, and leaves the stream at the same place
    (checked once, at import, after :func:`_draw_plane`'s own check against the
    stdlib)."""
    cases = (
        (range(8), range(256), range(65536), 32),  # the paper's planes
        (range(2), range(32), range(65536), 16),  # fewer EVs than uplinks
        (range(1), range(600), range(65536), 600),  # one EV on each of many uplinks
        ([1, 2], range(3, 40), list(range(30, 4000, 3)), 20),  # listed values
        (range(1), range(128), range(65536), 256),  # two EVs per uplink
        (range(2), range(32), range(65536), 200),  # several per uplink, some one more
        (range(2), range(2), range(512), 2 * 60),  # repeats within an uplink likely
        ([0, 3], range(3), list(range(7, 307)), 3 * 41 + 1),  # the same, listed values
    )
    for seed in (1, 7):
        for planes, uplinks, spares, n in cases:
            ref, own = random.Random(seed), random.Random(seed)
            want_seeds = array("Q", bytes(8 << PLANE_BITS))
            seeds = array("Q", bytes(8 << PLANE_BITS))
            cols = []
            for plane in planes:
                cols.append(_draw_plane(plane, uplinks, spares, n, ref))
                want_seeds[plane] = ref.getrandbits(64)
            try:
                raw = draw_planes(own.getrandbits, planes, uplinks, spares, n, seeds)
            except ValueError:  # a build that refuses a case (an older one: fewer cases)
                return False
            if raw is None:
                return False
            got = array("I")
            got.frombytes(raw)
            if got.tolist() != _interleave(cols) or seeds != want_seeds:
                return False
            if ref.getrandbits(64) != own.getrandbits(64):
                return False
    return True


def _pick_draw_planes() -> PlanesDrawer | None:
    """The native ``draw_planes`` when the native draws are in use, it reads CPython's
    generator directly and it draws as the stdlib does; else None."""
    native = _load_native_draws() if NATIVE_DRAWS else None
    if native is None or not getattr(native, "DIRECT", 0) or not hasattr(native, "draw_planes"):
        return None
    return native.draw_planes if _planes_match(native.draw_planes) else None


def _draw_plane(
    plane: int, uplinks: Sequence[int], spares: Sequence[int], n: int, rng: random.Random
) -> list[int]:
    """``n`` distinct random EVs of one plane, spread evenly over its uplinks.

    Uplinks are visited in a random order, round after round, so no uplink
    carries more than one EV more than another; each uplink's EVs get
    distinct random spare values (several EVs on one physical path).
    """
    if (
        _INLINE_DRAWS
        and type(rng) is random.Random
        and len(uplinks) < 1 << 16
        and len(spares) <= 1 << 16
    ):
        return _draw_plane_inline(plane, uplinks, spares, n, rng, _SHUFFLE, _PICKS)
    return _draw_plane_stdlib(plane, uplinks, spares, n, rng)


_DRAW_PLANES: Final = _pick_draw_planes()


def _draw_planes_native(
    rng: random.Random,
    planes: Sequence[int],
    uplinks: Sequence[int],
    spares: Sequence[int],
    n: int,
    seeds: array[int],
) -> bytes | None:
    """A generated profile's EVs, interleaved over the planes, as the bytes of an
    ``array('I')``, with each plane's backup seed written to ``seeds``, in one native
    call (:func:`openmrc.transport._draws.draw_planes`): the draws of :func:`_draw_plane`
    and ``rng.getrandbits(64)`` plane after plane, then :func:`_interleave`.  None
    (nothing drawn) where that call does not serve: not built, ``rng`` not CPython's
    own generator, or a spare space ``random.sample`` would draw the most EVs an
    uplink gets from otherwise than through a set."""
    if (
        _DRAW_PLANES is None
        or type(rng) is not random.Random
        or not uplinks
        or len(uplinks) >= 1 << 16
        or len(spares) > 1 << 16
        or not _sample_uses_set(len(spares), max(1, -(-n // len(uplinks))))
        or len(planes) > 1 << PLANE_BITS
    ):
        return None
    assert _DRAW_PLANES is not None
    return _DRAW_PLANES(rng.getrandbits, planes, uplinks, spares, n, seeds)


#: A QP's per-plane shares and counts before its first failure (never written).
_NO_WEIGHTS: Final[array[float]] = array("d")
_NO_COUNTS: Final[array[int]] = array("q")

#: ``list(range(n))`` by ``n``: every QP's rotation starts as ids 0 .. n-1 in
#: order, one list shared by all until a QP first changes its own (about 2 KB
#: a QP of a fabric's tens of thousands; read-only while shared).
_FIRST_IDS: Final[dict[int, list[int]]] = {}


def _first_ids(n: int) -> list[int]:
    """The shared ``list(range(n))`` (see :data:`_FIRST_IDS`): never to be changed."""
    ids = _FIRST_IDS.get(n)
    if ids is None:
        ids = _FIRST_IDS[n] = list(range(n))
    return ids


@final
class _StateView:
    """A read-only mapping view of a :class:`PathSet`'s EV states: EV -> EVState
    for every EV the QP knows (active, drawn backups, explicit backups, denied)."""

    __slots__ = ("_paths",)

    def __init__(self, paths: PathSet) -> None:
        self._paths = paths

    def get(self, ev: object, default: EVState | None = None) -> EVState | None:
        """The state of ``ev``, or ``default`` if the QP does not know it."""
        st = self._paths.state_of(ev) if isinstance(ev, int) else None
        return default if st is None else st

    def __getitem__(self, ev: int) -> EVState:
        st = self._paths.state_of(ev)
        if st is None:
            raise KeyError(ev)
        return st

    def __contains__(self, ev: object) -> bool:
        return isinstance(ev, int) and self._paths.state_of(ev) is not None

    def __iter__(self) -> Iterator[int]:
        return iter(self._paths.known_evs())

    def __len__(self) -> int:
        return len(self._paths.known_evs())

    def keys(self) -> list[int]:
        """Every EV the QP knows."""
        return self._paths.known_evs()

    def items(self) -> list[tuple[int, EVState]]:
        """(EV, state) for every EV the QP knows."""
        return list(zip(self._paths.known_evs(), self._paths.known_states(), strict=True))


@final
class EvIds:
    """EV -> id (its index in the QP's EV array), as the dict it replaces: ``get``,
    and item assignment of the next id; a later id for the same EV replaces the
    earlier one.

    A QP knows hundreds of EVs: a dict of them with a boxed key each is about 17 KB
    per QP, this open-addressing table over two arrays about 3 KB
    (docs/performance.md, the memory budget).  It is the readable reference and
    the pure-Python fallback of the native ``openmrc.transport._txtable.EvIds``
    (:func:`new_ev_ids` picks one), which keeps the same two arrays in C.
    """

    __slots__ = ("_keys", "_mask", "_tab", "_used")

    def __init__(self, evs: Sequence[int]) -> None:
        #: the EV of each id (ids are its positions).
        self._keys: array[int] = array("I")
        #: slots of the table: an id, -1 when free; at most half are used.
        self._tab: array[int] = array("i", [-1]) * 16
        self._mask = 15
        self._used = 0
        for i, ev in enumerate(evs):
            self[ev] = i

    def _find(self, ev: int) -> int:
        """The slot of ``ev`` in the table, or the free slot where it would go."""
        mask = self._mask
        h = (ev ^ (ev >> 16) ^ (ev >> 7)) & mask
        tab = self._tab
        keys = self._keys
        while True:
            j = tab[h]
            if j < 0 or keys[j] == ev:
                return h
            h = (h + 1) & mask

    def get(self, ev: int, default: int = -1) -> int:
        """The id of ``ev``, or ``default`` when it has none."""
        if not 0 <= ev < 1 << 32:
            return default
        j = self._tab[self._find(ev)]
        return default if j < 0 else j

    def __setitem__(self, ev: int, i: int) -> None:
        keys = self._keys
        if i != len(keys):
            raise ValueError(f"EvIds: ids come in order, {len(keys)} next, not {i}")
        keys.append(ev)
        h = self._find(ev)
        if self._tab[h] < 0:
            self._used += 1
        self._tab[h] = i
        if 2 * self._used > self._mask + 1:
            self._grow()

    def _grow(self) -> None:
        """Double the table and put every EV back, the later id of an EV last."""
        self._mask = 2 * self._mask + 1
        self._tab = array("i", [-1]) * (self._mask + 1)
        self._used = 0
        for i, ev in enumerate(self._keys):
            h = self._find(ev)
            if self._tab[h] < 0:
                self._used += 1
            self._tab[h] = i


#: ``_txtable.good_evs`` when the transport's C extension is in use (see
#: :func:`new_ev_ids`), else None: :meth:`PathSet.good_evs` in one call that reads the
#: EV and state arrays through the buffer protocol.  It runs once per reverse-EV probe
#: and per suspect, over every active EV of the QP (hundreds), each read otherwise an
#: item through CPython's generic protocol and a boxed int.
_native_good_evs: Final[
    Callable[[array[int], bytearray, list[int], int, int], list[int]] | None
] = _NATIVE.good_evs if _NATIVE is not None else None


def good_after(
    evs: array[int], st: bytearray, slots: list[int], plane: int, bad: int, ev: int
) -> int:
    """The GOOD EV of ``plane`` after ``ev`` in rotation order: with ``good`` the list
    :meth:`PathSet.good_evs` makes, the item after the first equal to ``ev`` (after the
    last, the first), ``good[0]`` when none equals it, -1 when ``good`` is empty.

    A receive-only QP moves its SACKs' stand-in reverse EV on by one for each SACK
    while no reverse EV is confirmed (:meth:`ReversePaths.route
    <openmrc.transport.reverse.ReversePaths.route>`): one pass, no list made.  It is the
    readable reference of ``_txtable.good_after`` (:data:`_good_after`).
    """
    first = -1
    found = False
    for i in slots:
        e = evs[i]
        if e & 15 == plane and st[i] < bad:
            if found:
                return int(e)
            if first < 0:
                first = int(e)
            if e == ev:
                found = True
    return first


def good_pick(
    evs: array[int], st: bytearray, slots: list[int], plane: int, bad: int, k: int
) -> int:
    """With ``good`` the list :meth:`PathSet.good_evs` makes and ``n`` its length,
    ``(n << 32) | good[k % n]``, or 0 when ``n`` is 0 (``k >= 0``): a reverse-EV probe's
    EV picked without the list made.  The readable reference of ``_txtable.good_pick``
    (:data:`_good_pick`)."""
    n = 0
    for i in slots:
        if evs[i] & 15 == plane and st[i] < bad:
            n += 1
    if n == 0:
        return 0
    m = k % n
    for i in slots:
        e = evs[i]
        if e & 15 == plane and st[i] < bad:
            if m == 0:
                return n << 32 | e
            m -= 1
    raise AssertionError("unreachable: the second pass finds the k-th of n")


#: ``_txtable.good_after`` when the transport's C extension is in use, else
#: :func:`good_after`: the same result reading the EV array through the buffer protocol.
_good_after: Final[Callable[[array[int], bytearray, list[int], int, int, int], int]] = (
    _NATIVE.good_after if _NATIVE is not None else good_after
)
#: ``_txtable.good_pick`` when the transport's C extension is in use, else
#: :func:`good_pick`.
_good_pick: Final[Callable[[array[int], bytearray, list[int], int, int, int], int]] = (
    _NATIVE.good_pick if _NATIVE is not None else good_pick
)


def rotate(slots: list[int], st: bytearray, evs: array[int], i: int) -> int:
    """One step of a QP's plain rotation (no plane passed over, none weighed): the EV
    for the next packet and where the rotation goes on, as ``(next slot << 32) | EV``.

    From slot ``i`` on, the first id in ``slots`` whose state in ``st`` is GOOD gives
    the EV (``evs``); a SKIP passed over becomes GOOD (it sat out its one rotation).
    When no slot is GOOD (all bad or denied and the floor is 0), it is the EV in slot
    ``i`` anyway and the slot after it: sending on rather than stalling, the RTO
    bounds the damage.  :meth:`PathSet.next_ev` takes this path for nearly every
    packet; it is the readable reference of ``_txtable.rotate`` (:data:`_rotate`).
    """
    n = len(slots)
    for _ in range(n):
        k = slots[i]
        i += 1
        if i == n:
            i = 0
        s = st[k]
        if s == _GOOD:
            return i << 32 | evs[k]
        if s == _SKIP:
            st[k] = _GOOD
    j = i + 1 if i + 1 < n else 0
    return j << 32 | evs[slots[i]]


#: ``_txtable.rotate`` when the transport's C extension is in use, else :func:`rotate`:
#: the same results in one call that reads the state and EV arrays directly (compiled
#: Python reads each item through CPython's generic protocol, boxing it), once per
#: data packet sent.
_rotate: Final[Callable[[list[int], bytearray, array[int], int], int]] = (
    _NATIVE.rotate if _NATIVE is not None else rotate
)


def plane_runs(evs: array[int], slots: list[int]) -> tuple[list[int], list[int]]:
    """The layout of a plane rotation index (:meth:`PathSet._plane_index`): the 17
    offsets of each plane's run, and every slot position grouped by plane (in slot
    order within a plane)."""
    order = sorted(range(len(slots)), key=lambda j: (evs[slots[j]] & 15, j))
    offs = [0] * 17
    for j in order:
        offs[(evs[slots[j]] & 15) + 1] += 1
    for p in range(16):
        offs[p + 1] += offs[p]
    return offs, order


def _plane_next(
    slots: list[int], st: bytearray, evs: array[int], pcur: array[int], plane: int, ev: int
) -> int:
    """The next GOOD EV of ``plane`` in its own rotation (``pcur``, made by
    :meth:`PathSet._plane_index`), moving that plane's cursor on; ``ev`` when the plane
    has none."""
    lo = pcur[plane]
    m = pcur[plane + 1] - lo
    c = pcur[17 + plane]
    for _ in range(m):
        kk = slots[pcur[lo + 33 + c]]
        c += 1
        if c == m:
            c = 0
        if st[kk] == _GOOD:
            pcur[17 + plane] = c
            return int(evs[kk])
    return ev


def rotate_busy(
    slots: list[int], st: bytearray, evs: array[int], pcur: array[int], i: int, skip: int
) -> int | None:
    """One step of a QP's rotation past the planes in ``skip`` (busy or down ports; no
    plane weighed): the EV for the next packet and where the rotation goes on, as
    ``(next slot << 32) | EV``, or None when no slot qualifies (the rotation is then
    back at ``i``).

    From slot ``i`` on, the first id whose state is GOOD and whose EV's plane is not in
    ``skip`` picks the plane; the EV sent is that plane's next GOOD one in its own
    rotation (``pcur``, :meth:`PathSet._plane_index`; its cursor moves on).  A SKIP
    passed over becomes GOOD.  :meth:`PathSet.next_ev` takes this path for a packet
    sent while a port is busy (a multi-port NIC: nearly every packet); it is the
    readable reference of ``_txtable.rotate_busy`` (:data:`_rotate_busy`).
    """
    n = len(slots)
    for _ in range(n):
        k = slots[i]
        i += 1
        if i == n:
            i = 0
        s = st[k]
        if s == _GOOD:
            ev = evs[k]
            plane = ev & 15
            if skip >> plane & 1:
                continue
            return i << 32 | _plane_next(slots, st, evs, pcur, plane, ev)
        if s == _SKIP:
            st[k] = _GOOD
    return None


#: ``_txtable.rotate_busy`` when the transport's C extension is in use, else
#: :func:`rotate_busy`: the same results in one call that reads the state, EV and
#: position arrays directly, once per data packet sent while some port is busy.
_rotate_busy: Final[
    Callable[[list[int], bytearray, array[int], array[int], int, int], int | None]
] = _NATIVE.rotate_busy if _NATIVE is not None else rotate_busy


class EvIdsLike(Protocol):
    """What a :class:`PathSet` uses of its EV ids: :class:`EvIds`, or the native
    one (``_txtable.EvIds``, the same methods and results; :func:`new_ev_ids`)."""

    def get(self, ev: int, default: int = -1) -> int: ...
    def __setitem__(self, ev: int, i: int) -> None: ...


def new_ev_ids(evs: Sequence[int]) -> EvIdsLike:
    """EV ids for ``evs`` (id i for the i-th): the native table when the transport's
    C extension was built and ``OPENMRC_PURE_PYTHON`` is not set, else :class:`EvIds`.

    The native one is looked up once per ACK (:meth:`PathSet.on_clean_ack`) without
    CPython's generic item protocol per table probe (what a compiled ``array`` read
    costs)."""
    if _NATIVE is not None:
        ids: EvIdsLike = _NATIVE.EvIds(evs)
        return ids
    return EvIds(evs)


#: ``EvIds.get`` of the class :func:`new_ev_ids` makes, unbound (a C static when
#: compiled): ``_ids_get(ids, ev, -1)`` is ``ids.get(ev, -1)`` without looking ``get``
#: up by name on every call (once per ACK and per control packet sent).
_ids_get: Final = cast(
    "Callable[[EvIdsLike, int, int], int]", (_NATIVE.EvIds if _NATIVE is not None else EvIds).get
)


def ecn_clean(
    ids: EvIdsLike, rate: array[float], run: array[int], inslot: bytearray, ev: int, keep: float
) -> float:
    """An ACK without an ECN echo for ``ev`` (:meth:`PathSet.on_clean_ack`), on a path
    set's EV ids and ECN state (``rate``, ``run`` and ``inslot`` per id): an EV with a
    positive rate has its run of marks ended and its rate decayed by ``keep``, and
    the change of the rate (<= 0.0) is returned, what the set's ECN sum changes by;
    an EV in a slot with no rate yet gets a rate of 0.0, and 1.0 is returned (one
    more EV with a rate); else 0.0 (an EV the set does not know, a rate of 0.0, no
    rate out of slot), nothing written.  One native call per ACK when compiled,
    where each array read or write costs the generic item protocol."""
    i = ids.get(ev, -1)
    if i < 0:
        return 0.0
    old = rate[i]
    if old <= 0.0:
        if old < 0.0 and inslot[i]:
            rate[i] = 0.0
            return 1.0
        return 0.0
    run[i] = 0
    new = old * keep
    rate[i] = new
    return new - old


#: ecn_clean of the native module when it is in use (a C function), else the one above.
_ecn_clean: Final[Callable[[EvIdsLike, array[float], array[int], bytearray, int, float], float]] = (
    _NATIVE.ecn_clean if _NATIVE is not None else ecn_clean
)
#: What a rate keeps on a clean ACK.
_ECN_KEEP: Final = 1.0 - ECN_RATE_GAIN


class PathSet:
    """Active EVs, backups, states, rotation and probing for one QP."""

    __slots__ = (
        "_active",
        "_ecn_n",
        "_ecn_sum",
        "_evs",
        "_failed",
        "_fresh",
        "_gen_planes",
        "_hot",
        "_ids",
        "_idx",
        "_inslot",
        "_known",
        "_nref",
        "_pcur",
        "_pool_rngs",
        "_rate",
        "_returned",
        "_run",
        "_seeds",
        "_sent",
        "_slots",
        "_spares",
        "_sref",
        "_st",
        "_tx",
        "_uplinks",
        "_weight",
        "_wmask",
        "denied_planes",
        "down",
        "events",
        "flap_good_since",
        "flaps",
        "local_down",
        "next_probe_at",
        "probe_backoff",
        "probe_due",
        "probe_wait",
        "probing",
        "profile",
        "qpn",
        "remote_down",
        "stats_bad",
        "stats_ecn_remaps",
        "stats_floor_hits",
        "stats_port_changes",
        "stats_probes",
        "stats_recovered",
        "stats_replacements",
        "stats_skips",
        "usable",
    )

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    _idx: int
    _st: bytearray
    _evs: array[int]
    down: int
    _slots: list[int]
    _nref: int
    _ids: EvIdsLike | None
    next_probe_at: int | None
    _rate: array[float]
    _ecn_n: int
    remote_down: int
    _inslot: bytearray
    _run: array[int]
    profile: EVProfile
    qpn: int
    _pcur: array[int] | None
    _known: array[int]
    _active: array[int]
    _returned: array[int]
    _gen_planes: int
    _uplinks: Sequence[int]
    _spares: Sequence[int]
    _seeds: array[int]
    _pool_rngs: dict[int, random.Random]
    _fresh: dict[int, array[int]]
    events: deque[object]
    probing: dict[int, int]
    probe_wait: dict[int, int]
    probe_due: dict[int, int]
    probe_backoff: dict[int, int]
    flaps: dict[int, int]
    flap_good_since: dict[int, int]
    stats_probes: int
    usable: int
    stats_skips: int
    stats_bad: int
    stats_recovered: int
    stats_floor_hits: int
    stats_replacements: int
    stats_ecn_remaps: int
    stats_port_changes: int
    local_down: int
    denied_planes: int
    _ecn_sum: float
    _weight: array[float]
    _sent: array[int]
    _sref: int
    _tx: int
    _hot: array[int]
    _wmask: int
    _failed: set[int]

    def __init__(
        self,
        profile: EVProfile,
        rng: random.Random,
        qpn: int,
        events: deque[object] | None = None,
    ) -> None:
        self.profile: EVProfile = profile
        self.qpn: int = qpn
        # Per-id arrays (an id per EV the QP knows, in the order it got to know them).
        #: id -> EV number.
        self._evs: array[int] = array("I")
        #: id -> state (``_GOOD`` ... ``_DENIED``).
        self._st: bytearray = bytearray()
        #: id -> 1 while the EV is in a slot.
        self._inslot: bytearray = bytearray()
        #: EV -> id, made at the first feedback (a QP that never sends never needs
        #: it): a lookup runs for every ACK, so the compiled build keeps the table
        #: in C (:func:`new_ev_ids`); compiled Python reading its arrays item by
        #: item cost twice a dict's instructions.
        self._ids: EvIdsLike | None = None
        #: the rotation: the id in each slot (a list: it is read for every packet, and
        #: ids below 256 are shared small ints).
        self._slots: list[int] = []
        self._idx: int = 0
        #: per plane, its slots and where its own rotation is (see
        #: :meth:`_plane_index`; made when first needed).
        self._pcur: array[int] | None = None
        #: per plane (0..15): how many EVs of the plane the QP knows.
        self._known: array[int] = array("I", bytes(4 << PLANE_BITS))
        #: per plane: how many slots hold an EV of the plane (fixed: a slot's EV is
        #: only ever replaced by one of the same plane).
        self._active: array[int] = array("I", bytes(4 << PLANE_BITS))
        # Backups: EVs given back (recovered, mapped out; an explicit list's
        # backups), FIFO per plane, then the generated space of the plane drawn
        # lazily by the plane's own generator (made from its seed when first needed).
        self._returned: array[int] = array("I")
        #: bitmask of the planes with a generated backup space.
        self._gen_planes: int = 0
        self._uplinks: Sequence[int] = ()
        self._spares: Sequence[int] = ()
        self._seeds: array[int] = array("Q")
        self._pool_rngs: dict[int, random.Random] = {}
        #: plane -> the rest of a small space, shuffled, next backup last.
        self._fresh: dict[int, array[int]] = {}
        #: where EV transitions are reported (the context's event queue).
        self.events: deque[object] = events if events is not None else deque()
        #: EV -> consecutive answered probes, for EVs currently ASSUMED_BAD.
        self.probing: dict[int, int] = {}
        #: EV -> seq of the probe awaiting an answer.
        self.probe_wait: dict[int, int] = {}
        self.next_probe_at: int | None = None
        #: EV -> when it is next probed, and how many times its interval has doubled.
        self.probe_due: dict[int, int] = {}
        self.probe_backoff: dict[int, int] = {}
        #: flap hold-down: EV -> its recent failures (decayed at its next one),
        #: and EV -> when its probes last brought it back.
        self.flaps: dict[int, int] = {}
        self.flap_good_since: dict[int, int] = {}
        self.stats_probes: int = 0
        self.usable: int = 0
        self.stats_skips: int = 0
        self.stats_bad: int = 0
        self.stats_recovered: int = 0
        self.stats_floor_hits: int = 0
        self.stats_replacements: int = 0
        self.stats_ecn_remaps: int = 0
        self.stats_port_changes: int = 0
        #: port status: planes down here, at the peer, and either (bitmasks).
        self.local_down: int = 0
        self.remote_down: int = 0
        self.denied_planes: int = 0
        self.down: int = 0
        # ECN rebalancing, per id, allocated with the EV -> id map (at the first
        # feedback): the EWMA of ECN echoes among the EV's ACKs (``_NO_RATE``
        # until it has one), and the count of ECN-echoing ACKs since its last
        # clean one; the sum and number of the rates.
        self._rate: array[float] = array("d")
        self._run: array[int] = array("H")
        self._ecn_sum: float = 0.0
        self._ecn_n: int = 0
        # Failure-proportional plane shares (module docstring): per plane, the
        # share of a full plane's packets it sends (1.0 unless some of its paths
        # failed); the bitmask of planes below 1.0; the failed path keys.  The
        # three per-plane arrays are made at the first failure (:meth:`_reweigh`;
        # until then empty and shared, and read only while a plane is weighted).
        self._weight: array[float] = _NO_WEIGHTS
        #: packets sent per weighted plane, and on the full planes (``_nref`` of
        #: them), since the shares last changed.
        self._sent: array[int] = _NO_COUNTS
        self._sref: int = 0
        self._nref: int = 0
        #: packets sent while some plane is weighted; per plane, the count up to
        #: which its share is enforced (it showed congestion: ECN or a trim).
        self._tx: int = 0
        self._hot: array[int] = _NO_COUNTS
        self._wmask: int = 0
        self._failed: set[int] = set()
        self._build(rng)

    # -- construction -----------------------------------------------------------------
    def _build(self, rng: random.Random) -> None:
        prof = self.profile
        prof.validate()  # a profile that cannot give what it asks for names the field
        if prof.explicit is not None:
            # The first ev_count listed EVs are active, the rest are their planes' backups.
            slots = list(prof.explicit[: prof.ev_count])
            backups = list(prof.explicit[prof.ev_count :])
            self._returned = array("I", backups)
            self._evs = array("I", slots + backups)
            nslots = len(slots)
        else:
            planes = prof.plane_values()
            uplinks = prof.uplink_values()
            spares = prof.spare_values()
            self._uplinks = uplinks
            self._spares = spares
            self._seeds = array("Q", bytes(8 << PLANE_BITS))
            per_plane = prof.ev_count // len(planes)
            # EVs are composed without make_ev's range checks: the profile was
            # validated, so every plane, uplink and spare value fits its field
            # (checked once here; field values ascend).
            make_ev(planes[-1], uplinks[-1], spares[-1])
            raw = _draw_planes_native(rng, planes, uplinks, spares, per_plane, self._seeds)
            if raw is not None:  # the same draws as below, in one native call
                self._evs = array("I")
                self._evs.frombytes(raw)
            else:
                columns = []
                for plane in planes:
                    columns.append(_draw_plane(plane, uplinks, spares, per_plane, rng))
                    self._seeds[plane] = rng.getrandbits(64)
                # Interleave planes so consecutive packets go to different planes (ports).
                self._evs = array("I", _interleave(columns))
            nslots = len(self._evs)
            for plane in planes:
                self._gen_planes |= 1 << plane
                self._known[plane] = self._active[plane] = per_plane
        n = len(self._evs)
        self._st = bytearray(n)
        self._inslot = bytearray(b"\x01") * nslots + bytearray(n - nslots)
        self._slots = _first_ids(nslots)
        if prof.explicit is not None:
            for ev in self._evs:
                self._known[ev & 15] += 1
            for ev in slots:
                self._active[ev & 15] += 1
        self.usable = nslots

    # -- EV ids -------------------------------------------------------------------------
    def _lookup(self) -> EvIdsLike:
        """The EV -> id map, made (with the ECN state) at the first feedback."""
        ids = self._ids
        if ids is None:
            n = len(self._evs)
            ids = self._ids = new_ev_ids(self._evs)
            self._rate = array("d", [_NO_RATE]) * n
            self._run = array("H", bytes(2 * n))
        return ids

    def _id(self, ev: int) -> int:
        """The id of ``ev``, or -1 when the QP does not know it."""
        ids = self._ids
        if ids is None:
            ids = self._lookup()
        return _ids_get(ids, ev, -1)

    def _add(self, ev: int) -> int:
        """Get to know ``ev`` (GOOD, not in a slot); its id."""
        i = len(self._evs)
        self._evs.append(ev)
        self._st.append(_GOOD)
        self._inslot.append(0)
        self._known[ev & 15] += 1
        ids = self._ids
        if ids is not None:
            ids[ev] = i
            self._rate.append(_NO_RATE)
            self._run.append(0)
        return i

    # -- what the QP knows (read-only views) -------------------------------------------
    @property
    def slots(self) -> list[int]:
        """The active EVs in rotation order (a copy)."""
        evs = self._evs
        return [evs[i] for i in self._slots]

    @property
    def state(self) -> _StateView:
        """EV -> :class:`EVState` for every EV the QP knows (a read-only view)."""
        return _StateView(self)

    def state_of(self, ev: int) -> EVState | None:
        """The state of ``ev``, or None when it is not one of this QP's known EVs."""
        i = self._id(ev)
        return None if i < 0 else _STATES[self._st[i]]

    def knows(self, ev: int) -> bool:
        """Whether ``ev`` is one of this QP's known EVs (:meth:`state_of` is not None)."""
        return self._id(ev) >= 0

    def known_evs(self) -> list[int]:
        """Every EV the QP knows (active, drawn or listed backups, denied)."""
        return self._evs.tolist()

    def known_states(self) -> list[EVState]:
        """The states of :meth:`known_evs`, in the same order."""
        return [_STATES[s] for s in list(self._st)]

    def in_slot(self, ev: int) -> bool:
        """Whether ``ev`` is in a slot of the rotation now."""
        i = self._id(ev)
        return i >= 0 and self._inslot[i] == 1

    def planes(self) -> list[int]:
        """The planes the QP has active EVs in, ascending."""
        return [p for p in range(1 << PLANE_BITS) if self._active[p]]

    def usable_ev(self, ev: int) -> bool:
        """Whether ``ev`` is neither ASSUMED_BAD nor DENIED here (unknown: usable).
        Never makes the EV -> id map: without it no EV has left GOOD yet (a QP
        that only receives asks this for every control packet it sends)."""
        ids = self._ids
        if ids is None:
            return True
        i = _ids_get(ids, ev, -1)
        return i < 0 or self._st[i] < _BAD

    def good_evs(self, plane: int) -> list[int]:
        """The plane's active EVs that are GOOD (or SKIP), in rotation order."""
        evs = self._evs
        st = self._st
        if _native_good_evs is not None:
            return _native_good_evs(evs, st, self._slots, plane, _BAD)
        return [evs[i] for i in self._slots if evs[i] & 15 == plane and st[i] < _BAD]

    def good_after(self, plane: int, ev: int) -> int:
        """The plane's GOOD (or SKIP) EV after ``ev`` in :meth:`good_evs`'s order (after
        the last, the first; the first when ``ev`` is not one of them), or -1 when the
        plane has none (:func:`good_after`)."""
        return _good_after(self._evs, self._st, self._slots, plane, _BAD, ev)

    def good_pick(self, plane: int, k: int) -> int:
        """``(n << 32) | good[k % n]`` for ``good = good_evs(plane)`` and ``n`` its
        length, or 0 when ``n`` is 0 (``k >= 0``; :func:`good_pick`)."""
        return _good_pick(self._evs, self._st, self._slots, plane, _BAD, k)

    def first_good(self, plane: int) -> int:
        """The plane's first active EV that is GOOD (or SKIP), or -1."""
        evs = self._evs
        st = self._st
        for i in self._slots:
            if evs[i] & 15 == plane and st[i] < _BAD:
                return int(evs[i])
        return -1

    def backup_count(self, plane: int) -> int:
        """How many backups ``plane`` holds (given back, listed, and never drawn;
        an EV given back twice counts twice)."""
        n = sum(1 for ev in self._returned if ev & 15 == plane)
        if self._gen_planes >> plane & 1:
            n += len(self._uplinks) * len(self._spares) - self._known[plane]
        return n

    # -- spraying -----------------------------------------------------------------
    def next_ev(self, busy: int = 0) -> int:
        """The EV for the next packet: the next usable one in the rotation.

        ``busy`` is a bitmask of planes whose NIC port cannot take a packet now;
        EVs of those planes are passed over (they keep their state).  Returns
        -1 when every usable EV is on a busy plane.

        While some planes are passed over (busy, or down), the rotation picks
        the plane and the EV sent is that plane's next in its own rotation
        (the index :meth:`_plane_index` makes), not simply the first one reached: ports that
        free up one at a time in a steady pattern would otherwise reach the
        same EV of a plane every time and leave the plane's others unused
        (seen: 8 of 16 EVs unused for 45 us in the paper's 16-EV drop scenario).
        """
        skip = busy | self.down
        # Failure-proportional shares, while some full plane is in use to weigh against.
        wmask = self._wmask if self._nref else 0
        if not wmask:
            if not skip:
                r = _rotate(self._slots, self._st, self._evs, self._idx)
                self._idx = r >> 32
                return r & 0xFFFFFFFF
            pcur = self._pcur
            if pcur is not None:  # (made by the loop below at the first plane picked)
                rb = _rotate_busy(self._slots, self._st, self._evs, pcur, self._idx, skip)
                if rb is not None:
                    self._idx = rb >> 32
                    return rb & 0xFFFFFFFF
                # nothing usable off the skipped planes: as the loop below ends
                if busy and self.usable:
                    return -1
                i = self._idx
                slots = self._slots
                self._idx = i + 1 if i + 1 < len(slots) else 0
                return int(self._evs[slots[i]])
        slots = self._slots
        st = self._st
        n = len(slots)
        i = self._idx
        gated = -1  # the first EV passed over for its plane's share
        for _ in range(n):
            k = slots[i]
            i += 1
            if i == n:
                i = 0
            s = st[k]
            if s == _GOOD:
                ev: int = self._evs[k]
                if skip:
                    plane = ev & 15
                    if skip >> plane & 1:
                        continue
                    # The plane's next GOOD EV in its own rotation (_plane_index).
                    pcur = self._pcur
                    if pcur is None:
                        pcur = self._plane_index()
                    ev = _plane_next(slots, st, self._evs, pcur, plane, ev)
                if wmask:
                    plane = ev & 15
                    self._tx += 1
                    if wmask >> plane & 1 and self._tx <= self._hot[plane]:
                        # A weighted plane that shows congestion sends only while
                        # it lags the full planes' mean by its share (a burst of
                        # SHARE_SLACK).
                        sent = self._sent[plane]
                        if sent >= self._weight[plane] * self._sref / self._nref + SHARE_SLACK:
                            if gated < 0:
                                gated = ev
                            self._tx -= 1
                            continue
                        self._sent[plane] = sent + 1
                    elif not wmask >> plane & 1:
                        self._sref += 1
                self._idx = i
                return ev
            if s == _SKIP:
                st[k] = _GOOD
        if gated >= 0 and not busy:
            return gated  # no full plane had a usable EV: never stall on a share
        if busy and self.usable:
            return -1
        # Nothing usable (everything denied or bad and the floor is 0): keep sending
        # on the rotation anyway rather than stall; the RTO bounds the damage.
        self._idx = i + 1 if i + 1 < n else 0
        return int(self._evs[slots[i]])

    def _plane_index(self) -> array[int]:
        """The per-plane rotation index of :meth:`next_ev` (made when first
        needed, 4 bytes per slot): the offsets of each plane's run ([0..16]),
        each plane's cursor into its run ([17..32]), then every slot position
        grouped by plane (a slot keeps its plane: replacements come from it)."""
        offs, order = plane_runs(self._evs, self._slots)
        pcur = self._pcur = array("I", offs + [0] * 16 + order)
        return pcur

    def other_ev(self, avoid: int, busy: int = 0) -> int:
        """A usable EV different from ``avoid`` when one exists (for retransmissions)."""
        ev = self.next_ev(busy)
        if ev == avoid and self.usable > 1:
            ev = self.next_ev(busy)
        return ev

    # -- feedback -----------------------------------------------------------------
    def on_ecn(self, ev: int, now: int = 0) -> None:
        """An ACK echoed ECN for ``ev``: skip it for one rotation; and if ``ev``
        keeps drawing marks while the QP's other EVs do not, map it out (ECN
        rebalancing, see the module docstring)."""
        i = self._id(ev)
        if i < 0:
            return
        if self._wmask >> (ev & 15) & 1:
            self._congested(ev & 15)
        st = self._st[i]
        if st == _GOOD:
            self._st[i] = _SKIP
            self.stats_skips += 1
        old = self._rate[i]
        if old < 0.0:  # the EV's first rate
            old = 0.0
            self._ecn_n += 1
        rate = old + (1.0 - old) * ECN_RATE_GAIN
        self._ecn_sum += rate - old
        self._rate[i] = rate
        run = self._run[i]
        if run < 0xFFFF:  # saturates: it is only compared with ECN_REMAP_RUN
            run += 1
            self._run[i] = run
        if run < ECN_REMAP_RUN or not self._inslot[i] or st in (_BAD, _DENIED):
            return
        n = self._ecn_n - 1
        others = (self._ecn_sum - rate) / n if n > 0 else 0.0
        if run < ecn_remap_run(others):
            return  # not clearly worse than the QP's other EVs (or all are marked)
        self._run[i] = 0
        self._remap_ecn(i, now)

    def on_clean_ack(self, ev: int) -> None:
        """An ACK for ``ev`` without an ECN echo: its run of marks is over (and its
        ECN rate decays; see :func:`ecn_clean`)."""
        ids = self._ids
        if ids is None:
            ids = self._lookup()
        change = _ecn_clean(ids, self._rate, self._run, self._inslot, ev, _ECN_KEEP)
        if change > 0.0:
            self._ecn_n += 1  # the EV's first rate (0.0)
        else:
            # (0.0 mostly: nothing changed; adding it changes no sum, which is never
            # -0.0)
            self._ecn_sum += change

    def on_trim(self, ev: int) -> None:
        """A trim away from the last hop: skip ``ev`` for one rotation."""
        if self._wmask >> (ev & 15) & 1:
            self._congested(ev & 15)
        i = self._id(ev)
        if i >= 0 and self._st[i] == _GOOD:
            self._st[i] = _SKIP
            self.stats_skips += 1

    def _forget_ecn(self, i: int) -> None:
        if self._ids is None:
            return  # no feedback yet: no ECN state
        rate = self._rate[i]
        if rate >= 0.0:
            self._ecn_sum -= rate
            self._rate[i] = _NO_RATE
            self._ecn_n -= 1
        self._run[i] = 0

    def _put_in_slot(self, old: int, new: int) -> None:
        """The first slot holding id ``old`` now holds id ``new``."""
        slots = self._slots
        if slots is _FIRST_IDS.get(len(slots)):  # shared until the first change
            slots = self._slots = list(slots)
        slots[slots.index(old)] = new
        self._inslot[old] = 0
        self._inslot[new] = 1

    def _remap_ecn(self, i: int, now: int) -> None:
        """Swap EV ``i`` for a backup of its plane; it stays GOOD, back in the pool."""
        ev = self._evs[i]
        plane = ev & 15
        while True:
            c = self._pop_backup(plane)
            if c < 0:
                return
            if not self._take_backup(c):
                continue
            self._put_in_slot(i, c)
            if self._st[i] == _SKIP:
                self._st[i] = _GOOD
            self._returned.append(ev)
            self._forget_ecn(i)
            self.stats_ecn_remaps += 1
            self.events.append(EVRemap(now, self.qpn, ev, self._evs[c], "mapped out: ECN"))
            return

    def on_loss(self, ev: int, now: int, reason: str) -> None:
        """A packet on ``ev`` was lost without a trim (or timed out): ASSUMED_BAD.

        Not when ``ev``'s plane has a port down (here or at the peer): the port
        status explains the loss, and the plane's EVs are out of use already."""
        i = self._id(ev)
        if i < 0:
            return
        st = self._st[i]
        if st in (_BAD, _DENIED) or self.down >> (ev & 15) & 1:
            return
        if not self._fail(i, now, reason):
            return
        # The EV's siblings (EVs on the same physical path: equal plane and
        # uplink bits, other spare entropy) lose their packets too: they are
        # out of the rotation at once rather than one lost packet each, and
        # probed back like it (module docstring).
        key = ev & PATH_KEY_MASK
        evs = self._evs
        states = self._st
        failed = [i] if self._inslot[i] else []
        for j in self._slots:
            if (
                j != i
                and evs[j] & PATH_KEY_MASK == key
                and states[j] < _BAD
                and self._fail(j, now, "path failed: sibling EV lost")
            ):
                failed.append(j)
        self._reweigh(ev & 15)
        for j in failed:
            self._replace(j)

    def _fail(self, i: int, now: int, reason: str) -> bool:
        """Make id ``i`` ASSUMED_BAD and schedule its probes (not past the floor);
        whether it was done.  The caller refills its slot."""
        ev = self._evs[i]
        in_slot = self._inslot[i] == 1
        if in_slot and self.usable <= self.profile.floor:
            self.stats_floor_hits += 1
            return False
        self._set(i, _BAD, now, reason)
        self.stats_bad += 1
        self._note_failure(ev, now)
        self.probing[ev] = 0
        due = now + self.profile.probe_interval_ps
        self.probe_due[ev] = due
        self.probe_backoff[ev] = 0
        if self.next_probe_at is None or due < self.next_probe_at:
            self.next_probe_at = due
        if in_slot:
            self.usable -= 1
        return True

    def _note_failure(self, ev: int, now: int) -> None:
        """Flap hold-down: count ``ev``'s failure, after forgiving one per
        ``FLAP_DECAY_INTERVALS`` probe intervals it stayed GOOD since it came back."""
        n = self.flaps.get(ev, 0)
        since = self.flap_good_since.pop(ev, None)
        if n and since is not None:
            n = max(0, n - (now - since) // (self.profile.probe_interval_ps * FLAP_DECAY_INTERVALS))
        self.flaps[ev] = n + 1

    def probes_needed(self, ev: int) -> int:
        """Answered probes in a row that bring ASSUMED_BAD ``ev`` back: the
        profile's ``probe_successes``, doubled per earlier failure still
        remembered (flap hold-down, at most ``2 ** FLAP_MAX_DOUBLINGS`` times)."""
        n = self.flaps.get(ev, 1)
        return self.profile.probe_successes << min(max(n - 1, 0), FLAP_MAX_DOUBLINGS)

    def _replace(self, bad: int) -> None:
        plane = self._evs[bad] & 15
        if not self._pool_any(plane) or self.plane_looks_down(plane):
            return  # keep its backups for when it returns
        while True:
            c = self._pop_backup(plane)
            if c < 0:
                return
            if self._take_backup(c):
                self._forget_ecn(bad)
                self._put_in_slot(bad, c)
                self.usable += 1
                self.stats_replacements += 1
                return

    def _take_backup(self, c: int) -> bool:
        """Whether the backup ``c`` just popped from the pool can fill a slot (then
        it is GOOD).  One that cannot is left out of the pool without being lost:
        a DENIED one comes back to it when allowed, an ASSUMED_BAD one when its
        probes bring it back; a SKIP one (a late ECN echo after it left its slot)
        is usable."""
        st = self._st[c]
        if self._inslot[c] or st in (_BAD, _DENIED):
            return False
        self._st[c] = _GOOD
        return True

    def _pop_backup(self, plane: int) -> int:
        """The plane's next backup (as :meth:`_pool_pop`), passing over those on
        a failed path while the plane has others: the first one given back on a
        working path, else a fresh draw (one on a failed path joins the given
        back, at most ``FAILED_PATH_PASSES`` times), else a failed-path one; -1
        when the plane has none."""
        failed = self._failed
        if not failed:
            return self._pool_pop(plane)
        returned = self._returned
        for j in range(len(returned)):
            ev = returned[j]
            if ev & 15 == plane and ev & PATH_KEY_MASK not in failed:
                del returned[j]
                i = self._id(ev)
                return self._add(ev) if i < 0 else i
        for _ in range(FAILED_PATH_PASSES):
            c = self._draw_fresh(plane)
            if c < 0:
                break
            if self._evs[c] & PATH_KEY_MASK not in failed:
                return c
            returned.append(self._evs[c])
        return self._pool_pop(plane)  # only failed paths left: take one anyway

    def _reweigh(self, plane: int) -> None:
        """Recompute ``plane``'s share of its turns from its failed paths: the
        paths (plane, uplink) with an ASSUMED_BAD EV (the EVs being probed), out
        of the profile's uplink values (module docstring).  An explicit EV list
        names no uplink space: its planes keep equal shares."""
        if not self._weight:  # the first failure: the per-plane share arrays
            self._weight = array("d", [1.0]) * (1 << PLANE_BITS)
            self._sent = array("q", bytes(8 << PLANE_BITS))
            self._hot = array("q", bytes(8 << PLANE_BITS))
        failed = self._failed
        for key in [k for k in failed if k & 15 == plane]:
            failed.discard(key)
        keys = {ev & PATH_KEY_MASK for ev in self.probing if ev & 15 == plane}
        failed |= keys
        total = len(self._uplinks)
        weight = 1.0 if total == 0 else max(0.0, (total - len(keys)) / total)
        if weight < self._weight[plane]:
            # a new failure: enforce the share at once, for HOT_AT_FAILURE
            # rotations unless the plane shows congestion meanwhile
            hot = self._tx + HOT_AT_FAILURE * len(self._slots)
            self._hot[plane] = max(self._hot[plane], hot)
        self._weight[plane] = weight
        if weight < 1.0:
            self._wmask |= 1 << plane
        else:
            self._wmask &= ~(1 << plane)
        self._restart_shares()

    def _congested(self, plane: int) -> None:
        """A plane with failed paths drew a congestion signal: enforce its share
        for the next ``HOT_ROTATIONS`` rotations' worth of packets (counted
        afresh if it was not enforced)."""
        if self._tx > self._hot[plane]:
            self._restart_shares()
        self._hot[plane] = self._tx + HOT_ROTATIONS * len(self._slots)

    def _restart_shares(self) -> None:
        """Start counting the planes' sends afresh (the shares or the planes in
        use changed); no weighting while no full plane is in use."""
        wmask = self._wmask
        full = 0
        for plane in range(1 << PLANE_BITS):
            if self._active[plane] and not (wmask | self.down) >> plane & 1:
                full += 1
        self._nref = full
        for plane in range(1 << PLANE_BITS):
            self._sent[plane] = 0
        self._sref = 0

    def plane_shares(self) -> list[float]:
        """Per plane (0..15), the share of its turns in the rotation it takes:
        1.0, or less while some of its paths have failed (module docstring)."""
        return self._weight.tolist() if self._weight else [1.0] * (1 << PLANE_BITS)

    def _pool_any(self, plane: int) -> bool:
        """Whether the plane has a backup left (given back, or never drawn)."""
        if self._gen_planes >> plane & 1 and self._known[plane] < len(self._uplinks) * len(
            self._spares
        ):
            return True
        return any(ev & 15 == plane for ev in self._returned)

    def _pool_pop(self, plane: int) -> int:
        """The id of the plane's next backup (given back first, then a fresh draw
        from the plane's space), or -1 when the plane has none left."""
        returned = self._returned
        for j in range(len(returned)):
            ev = returned[j]
            if ev & 15 == plane:
                del returned[j]
                i = self._id(ev)
                return self._add(ev) if i < 0 else i
        return self._draw_fresh(plane)

    def _draw_fresh(self, plane: int) -> int:
        """The id of a backup of the plane never known before, drawn from its
        space, or -1 when it has none left."""
        if not self._gen_planes >> plane & 1:
            return -1
        uplinks = self._uplinks
        spares = self._spares
        size = len(uplinks) * len(spares)
        if self._known[plane] >= size:
            return -1
        if size <= ENUMERATE_LIMIT:
            fresh = self._fresh.get(plane)
            if fresh is None:
                every = [make_ev(plane, u, s) for u in uplinks for s in spares]
                self._pool_rng(plane).shuffle(every)
                every.reverse()
                fresh = self._fresh[plane] = array("I", every)
            while fresh:
                ev = fresh.pop()
                if self._id(ev) < 0:
                    return self._add(ev)
            return -1
        rng = self._pool_rng(plane)
        while True:  # the space is large and mostly unused: rejection sampling
            ev = make_ev(plane, rng.choice(uplinks), rng.choice(spares))
            if self._id(ev) < 0:
                return self._add(ev)

    def _pool_rng(self, plane: int) -> random.Random:
        """The plane's backup generator, made from its seed when first needed (most
        planes never hand out a backup: a generator costs ~2.5 KiB and a seeding)."""
        rng = self._pool_rngs.get(plane)
        if rng is None:
            rng = self._pool_rngs[plane] = random.Random(self._seeds[plane])
        return rng

    # -- port status ---------------------------------------------------------------
    def set_ports_down(
        self, local: int | None = None, remote: int | None = None, denied: int | None = None
    ) -> bool:
        """Port status: planes whose NIC port is down here (``local``) or at the
        peer (``remote``, from the ports-down bitmap of its SACKs), and planes the
        controller denied (``denied``), as bitmasks.

        EVs of a down plane leave the rotation at once (they keep their state,
        are not blamed for losses and are not probed); the rotation spreads over
        the other planes.  When the bit clears, the plane is used again.
        Returns whether anything changed.
        """
        old = self.down
        if local is not None:
            self.local_down = local & 0xFFFF
        if remote is not None:
            self.remote_down = remote & 0xFFFF
        if denied is not None:
            self.denied_planes = denied & 0xFFFF
        self.down = self.local_down | self.remote_down | self.denied_planes
        if self.down != old:
            self.stats_port_changes += 1
            if self._failed:
                self._restart_shares()
            return True
        return False

    def plane_looks_down(self, plane: int) -> bool:
        """True once the plane has as many ASSUMED_BAD EVs (active or replaced,
        not yet recovered) as ``plane_down_fraction`` of its active EVs: then
        its bad EVs are no longer replaced, since with a plane-wide failure
        every backup drawn would only lose another packet."""
        bad = sum(1 for ev in self.probing if ev_plane(ev) == plane)
        return bad > 1 and bad >= self.profile.plane_down_fraction * self._active[plane]

    def _set(self, i: int, new: int, now: int, reason: str) -> None:
        old = self._st[i]
        self._st[i] = new
        self.events.append(EVEvent(now, self.qpn, self._evs[i], _STATES[old], _STATES[new], reason))

    # -- probing ------------------------------------------------------------------
    def due_probes(self, now: int, next_seq: int) -> list[tuple[int, int]]:
        """EVs to probe now, as (ev, seq) pairs; reschedules the next round.

        Each ASSUMED_BAD EV is probed ``probe_interval_ps`` after it went bad,
        then at an interval that doubles with every unanswered probe, up to
        ``2 ** probe_backoff_max`` intervals (an answer resets it).  At most
        ``probe_budget`` probes leave per interval, the longest-waiting first:
        a QP whose peer is dead probes at a bounded rate.
        """
        if self.next_probe_at is None or now < self.next_probe_at:
            return []
        prof = self.profile
        interval = prof.probe_interval_ps
        out = []
        seq = next_seq
        down = self.down
        due = self.probe_due
        ready = [ev for ev in self.probing if due[ev] <= now and not down >> (ev & 15) & 1]
        if len(ready) > prof.probe_budget:
            ready.sort(key=due.__getitem__)
            del ready[prof.probe_budget :]
        for ev in ready:
            if ev in self.probe_wait:
                self.probing[ev] = 0  # the previous probe went unanswered: back off
                self.probe_backoff[ev] = min(self.probe_backoff[ev] + 1, prof.probe_backoff_max)
            self.probe_wait[ev] = seq
            due[ev] = now + (interval << self.probe_backoff[ev])
            out.append((ev, seq))
            seq += 1
        self.stats_probes += len(out)
        pending = [t for ev, t in due.items() if not down >> (ev & 15) & 1]
        if not self.probing:
            self.next_probe_at = None
        elif not pending:
            self.next_probe_at = now + interval  # every probed plane is down: look again later
        else:
            # The budget spreads what is left over later intervals.
            self.next_probe_at = max(min(pending), now + interval if out else now + 1)
        return out

    def on_probe_reply(self, ev: int, seq: int, now: int) -> None:
        """A probe on ``ev`` came back: after enough in a row (:meth:`probes_needed`:
        more for an EV that keeps failing), the EV is GOOD again."""
        if self.probe_wait.get(ev) != seq:
            return
        del self.probe_wait[ev]
        count = self.probing.get(ev)
        if count is None:
            return
        self.probe_backoff[ev] = 0
        count += 1
        if count < self.probes_needed(ev):
            self.probing[ev] = count
            return
        del self.probing[ev]
        del self.probe_due[ev], self.probe_backoff[ev]
        self._reweigh(ev & 15)
        self.flap_good_since[ev] = now
        i = self._id(ev)
        self._set(i, _GOOD, now, "probes answered")
        self.stats_recovered += 1
        if self._inslot[i]:
            self.usable += 1
        else:
            self._returned.append(ev)
        if not self.probing:
            self.next_probe_at = None

    # -- administration -----------------------------------------------------------
    def _in_space(self, ev: int) -> bool:
        """Whether ``ev`` lies in the generated backup space of its plane."""
        plane = ev_plane(ev)
        return (
            self._gen_planes >> plane & 1 == 1
            and ev_path(ev) in self._uplinks
            and ev_spare(ev) in self._spares
            and make_ev(plane, ev_path(ev), ev_spare(ev)) == ev
        )

    def deny(self, ev: int, now: int) -> None:
        """Take ``ev`` out of use (controller deny list).  An active EV's slot is
        refilled at once from its plane's backups (as for a failed EV, and not
        when the plane looks down); a backup is skipped by replacements while
        denied and rejoins the pool when allowed (:meth:`allow`)."""
        if not isinstance(ev, int):
            raise InvalidArgument(f"ev: {ev!r} is not in this QP's EV set")
        i = self._id(ev)
        if i < 0:
            if not self._in_space(ev):
                raise InvalidArgument(f"ev: {ev:#x} is not in this QP's EV set")
            i = self._add(ev)  # a backup not drawn yet: it never will be
        st = self._st[i]
        if st == _DENIED:
            return
        if st != _BAD and self._inslot[i]:
            self.usable -= 1
        self.probing.pop(ev, None)
        self.probe_wait.pop(ev, None)
        self.probe_due.pop(ev, None)
        self.probe_backoff.pop(ev, None)
        if st == _BAD:
            self._reweigh(ev & 15)
        self._set(i, _DENIED, now, "denied")
        if self._inslot[i]:
            self._replace(i)  # a backup of the plane takes the denied EV's slot

    def allow(self, ev: int, now: int) -> None:
        """Return a denied ``ev`` to use: to its slot if it still holds one (none
        was free to refill it), else to its plane's backups."""
        i = self._id(ev) if isinstance(ev, int) else -1
        if i < 0 or self._st[i] != _DENIED:
            shown = f"{ev:#x}" if isinstance(ev, int) else repr(ev)
            raise InvalidArgument(f"ev: {shown} is not denied")
        self._set(i, _GOOD, now, "allowed")
        if self._inslot[i]:
            self.usable += 1  # its slot found no backup while it was denied
        elif ev not in self._returned:
            self._returned.append(ev)  # back among its plane's backups

    def replace(self, old: int, new: int, now: int) -> None:
        """Put ``new`` in the slot of the active EV ``old`` (the controller's
        replace).  ``new`` must be of the same plane (planes stay equally
        loaded, paper 4), not active and not denied; it starts GOOD (an
        ASSUMED_BAD one stops being probed and forgets its flaps).  ``old``
        keeps its state: a GOOD one becomes a backup of its plane.  Logged as
        an :class:`EVRemap`; only a real state change of ``new`` is an event."""
        i = self._id(old) if isinstance(old, int) else -1
        if i < 0 or not self._inslot[i]:
            shown = f"{old:#x}" if isinstance(old, int) else repr(old)
            raise InvalidArgument(f"ev: {shown} is not an active EV of this QP")
        if not isinstance(new, int) or isinstance(new, bool) or not 0 <= new <= 0xFFFFFFFF:
            raise InvalidArgument(f"new_ev: must be a 32-bit EV, got {new!r}")
        if new & 15 != old & 15:
            raise InvalidArgument(f"new_ev: {new:#x} is not in the plane of {old:#x}")
        j = self._id(new)
        if j >= 0 and self._inslot[j]:
            raise InvalidArgument(f"new_ev: {new:#x} is already active")
        if j >= 0 and self._st[j] == _DENIED:
            raise InvalidArgument(f"new_ev: {new:#x} is denied")
        if j < 0:
            j = self._add(new)
        else:
            self._drop_backup(new)
            if self._st[j] == _BAD:
                self._stop_probing(new)
                self._set(j, _GOOD, now, "replaced by controller")
            self._st[j] = _GOOD
        old_usable = self._st[i] in (_GOOD, _SKIP)
        self._forget_ecn(i)
        self._put_in_slot(i, j)
        if not old_usable:
            self.usable += 1
        if old_usable:
            self._st[i] = _GOOD
            self._returned.append(old)
        self.events.append(EVRemap(now, self.qpn, old, new, "replaced by controller"))

    def force_good(self, ev: int, now: int) -> bool:
        """The controller sets ``ev`` GOOD: a denied EV is allowed, an ASSUMED_BAD
        one is back at once (no probes needed) with its flap history forgotten.
        Returns whether the state changed."""
        i = self._id(ev) if isinstance(ev, int) else -1
        if i < 0:
            shown = f"{ev:#x}" if isinstance(ev, int) else repr(ev)
            raise InvalidArgument(f"ev: {shown} is not in this QP's EV set")
        st = self._st[i]
        if st == _DENIED:
            self.allow(ev, now)
            return True
        self.flaps.pop(ev, None)
        self.flap_good_since.pop(ev, None)
        if st != _BAD:
            return False
        self._stop_probing(ev)
        self._set(i, _GOOD, now, "set GOOD by controller")
        if self._inslot[i]:
            self.usable += 1
        else:
            self._returned.append(ev)
        return True

    def _stop_probing(self, ev: int) -> None:
        """Forget ``ev``'s probing and flap history (it is GOOD by decree)."""
        self.probing.pop(ev, None)
        self.probe_wait.pop(ev, None)
        self.probe_due.pop(ev, None)
        self.probe_backoff.pop(ev, None)
        self.flaps.pop(ev, None)
        self.flap_good_since.pop(ev, None)
        self._reweigh(ev & 15)
        if not self.probing:
            self.next_probe_at = None

    def _drop_backup(self, ev: int) -> None:
        """Take ``ev`` out of the backups given back (every copy)."""
        returned = self._returned
        while ev in returned:
            returned.remove(ev)

    def ev_array(self) -> list[tuple[int, EVState]]:
        """(EV, state) of every slot, in rotation order."""
        evs = self._evs
        st = self._st
        return [(evs[i], _STATES[st[i]]) for i in self._slots]

    def counts(self) -> dict[str, int]:
        """How many active EVs are in each state."""
        out = {s.name: 0 for s in EVState}
        st = self._st
        for i in self._slots:
            out[_STATES[st[i]].name] += 1
        return out
