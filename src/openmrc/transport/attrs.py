"""Queue pair attributes: the EV profile, the congestion-control profile, and the rest.

In MRC a per-node controller sets the EV and CC profiles; the application sets
the verbs attributes (MPR, timeout exponent, retry counts).  Every field is
validated with an error that names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from .cc.base import CCProfile
from .errors import InvalidArgument
from .ev import MAX_PATHS, MAX_PLANES, PATH_BITS, PLANE_BITS, SPARE_BITS

#: Local ACK timeout unit: 1.024 us, in picoseconds.
TIMEOUT_UNIT_PS: Final = 1_024_000
#: An exponential retry count of 25 means "retry forever".
RETRY_INFINITE: Final = 25


def _check_int(owner: str, name: str, value: Any, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(f"{owner}.{name}: must be an int in {lo}..{hi}, got {value!r}")


@dataclass(frozen=True)
class EVField:
    """One generated field of an EV (the OCP controller API's per-tier field).

    A field is ``width`` bits at a fixed place in openmrc's EV layout (see
    :mod:`openmrc.transport.ev`: plane bits 0-3, uplink bits 4-15, spare
    entropy bits 16-31).  It takes every value ``v`` with ``min <= v <= max``
    whose bits outside ``mask`` equal those of ``init``: ``mask`` says which
    bits are generated, ``init`` gives the fixed ones.  ``max`` defaults to the
    largest ``width``-bit value and ``mask`` to all ``width`` bits.
    """

    width: int
    min: int = 0
    max: int | None = None
    mask: int | None = None
    init: int = 0

    def check(self, owner: str, layout_width: int) -> None:
        """Raise :class:`InvalidArgument` naming ``owner.<key>`` if the field is unusable."""
        _check_int(owner, "width", self.width, 1, layout_width)
        top = (1 << self.width) - 1
        _check_int(owner, "min", self.min, 0, top)
        if self.max is not None:
            _check_int(owner, "max", self.max, self.min, top)
        if self.mask is not None:
            _check_int(owner, "mask", self.mask, 0, top)
        _check_int(owner, "init", self.init, 0, top)
        if not self.values():
            raise InvalidArgument(
                f"{owner}: generates no value (min, max, mask and init exclude all)"
            )

    def values(self) -> Sequence[int]:
        """Every value the field generates, ascending (a ``range`` when contiguous)."""
        top = (1 << self.width) - 1
        hi = top if self.max is None else self.max
        mask = top if self.mask is None else self.mask
        return _field_values(self.min, hi, mask & top, self.init & top & ~mask)


@lru_cache(maxsize=64)
def _field_values(lo: int, hi: int, mask: int, fixed: int) -> Sequence[int]:
    if mask and mask & (mask + 1) == 0 and fixed & mask == 0:
        # Generated bits are the low ones: values are fixed | 0..mask, clipped.
        start, stop = max(lo, fixed), min(hi, fixed | mask)
        return range(start, stop + 1) if start <= stop else range(0)
    out = []
    sub = mask
    while True:  # every subset of the mask's bits
        v = fixed | sub
        if lo <= v <= hi:
            out.append(v)
        if sub == 0:
            break
        sub = (sub - 1) & mask
    return tuple(sorted(out))


#: Widths of the three generated fields in openmrc's EV layout.
PLANE_FIELD_BITS: Final = PLANE_BITS
UPLINK_FIELD_BITS: Final = PATH_BITS
SPARE_FIELD_BITS: Final = SPARE_BITS


@dataclass
class EVProfile:
    """How a QP chooses and manages its entropy values (paths).

    An EV profile is either *generated* or *explicit*.  Generated: the EV space
    is the product of three :class:`EVField` s, ``plane_field`` (which planes),
    ``uplink_field`` (which T0 uplink, i.e. T1, in the plane) and
    ``spare_field`` (extra entropy that makes several EVs on one physical path
    distinct EVs).  Left unset, the plane field is ``0..planes-1``, the uplink
    field ``0..paths_per_plane-1`` and the spare field all 16 bits.  A QP draws
    ``ev_count`` EVs split equally over the planes, a random subset of each
    plane's space spread evenly over its uplinks; the rest of each plane's
    space is its backup set (drawn lazily at random when a backup is needed).
    A profile that cannot give ``ev_count`` EVs that way is an
    :class:`InvalidArgument` naming the field, never a silent cap.
    ``explicit`` lists the EVs to use instead: the first ``ev_count`` of them
    are active (all of them when the list is shorter), the rest are the backups
    of their planes, in list order.

    ``floor`` is the fewest usable EVs kept: below it, losses no longer disable
    EVs.  An ASSUMED_BAD EV is probed every ``probe_interval_ps`` (doubling per
    unanswered probe, up to ``probe_backoff_max``, see :mod:`.paths`) and is
    GOOD again after ``probe_successes`` answered probes in a row (more for an
    EV that keeps failing: the flap hold-down of :mod:`.paths`).
    """

    planes: int = 8
    paths_per_plane: int = 64
    ev_count: int = 256
    floor: int = 8
    probe_interval_ps: int = 32_000_000
    probe_successes: int = 3
    #: An unanswered probe doubles that EV's probe interval, at most this many times.
    probe_backoff_max: int = 6
    #: At most this many EV probes per ``probe_interval_ps`` per QP.
    probe_budget: int = 32
    explicit: list[int] | None = None
    #: Stop replacing a plane's bad EVs from its backups once this fraction of
    #: the plane's active EVs is bad: the plane is then presumed down, and
    #: burning its backups would only lose more packets.
    plane_down_fraction: float = 0.5
    plane_field: EVField | None = None
    uplink_field: EVField | None = None
    spare_field: EVField | None = None

    def plane_values(self) -> Sequence[int]:
        """The planes this profile generates EVs in."""
        if self.plane_field is not None:
            return self.plane_field.values()
        return range(self.planes)

    def uplink_values(self) -> Sequence[int]:
        """The uplink (path) numbers a generated EV may carry."""
        if self.uplink_field is not None:
            return self.uplink_field.values()
        return range(self.paths_per_plane)

    def spare_values(self) -> Sequence[int]:
        """The spare-entropy values a generated EV may carry."""
        if self.spare_field is not None:
            return self.spare_field.values()
        return range(1 << SPARE_FIELD_BITS)

    def validate(self) -> None:
        """Raise :class:`InvalidArgument` naming the first bad field."""
        _check_int("EVProfile", "planes", self.planes, 1, MAX_PLANES)
        _check_int("EVProfile", "paths_per_plane", self.paths_per_plane, 1, MAX_PATHS)
        _check_int("EVProfile", "ev_count", self.ev_count, 1, 65536)
        _check_int("EVProfile", "floor", self.floor, 0, 65536)
        _check_int("EVProfile", "probe_interval_ps", self.probe_interval_ps, 1, 10**15)
        _check_int("EVProfile", "probe_successes", self.probe_successes, 1, 1000)
        _check_int("EVProfile", "probe_backoff_max", self.probe_backoff_max, 0, 20)
        _check_int("EVProfile", "probe_budget", self.probe_budget, 1, 65536)
        if not 0.0 < self.plane_down_fraction <= 1.0:
            raise InvalidArgument(
                f"EVProfile.plane_down_fraction: must be in (0, 1], got {self.plane_down_fraction!r}"
            )
        if self.explicit is not None:
            if not self.explicit:
                raise InvalidArgument("EVProfile.explicit: must list at least one EV")
            for ev in self.explicit:
                _check_int("EVProfile", "explicit[]", ev, 0, 0xFFFFFFFF)
            if len(set(self.explicit)) != len(self.explicit):
                raise InvalidArgument("EVProfile.explicit: EVs must be distinct")
            return
        for name, f, bits in (
            ("plane_field", self.plane_field, PLANE_FIELD_BITS),
            ("uplink_field", self.uplink_field, UPLINK_FIELD_BITS),
            ("spare_field", self.spare_field, SPARE_FIELD_BITS),
        ):
            if f is not None:
                if not isinstance(f, EVField):
                    raise InvalidArgument(f"EVProfile.{name}: must be an EVField")
                f.check(f"EVProfile.{name}", bits)
        planes = len(self.plane_values())
        per_plane, rest = divmod(self.ev_count, planes)
        if per_plane == 0 or rest:
            raise InvalidArgument(
                f"EVProfile.ev_count: {self.ev_count} does not split equally over {planes} planes"
            )
        space = len(self.uplink_values()) * len(self.spare_values())
        if per_plane > space:
            raise InvalidArgument(
                f"EVProfile.ev_count: {per_plane} EVs per plane asked, but the uplink and "
                f"spare fields give only {space} per plane"
            )


@dataclass
class QPAttr:
    """MRC queue pair attributes, staged over the bring-up as the OCP API does.

    Set at INIT (the controller's profiles): ``ev_profile``, ``cc_profile``.

    Set at RTR (destination side, what this QP accepts): ``mpr_recv``, the
    receive PSN window in units of 128 PSNs; ``max_wimm_recv``, the WRITE_IMM
    messages it holds at once; ``mtu``, the payload bytes per packet;
    ``ack_coalesce_bytes``, its ACK coalescing threshold (each packet counting
    at least 1 KiB).

    Set at RTS (sender side, and again at RTS -> RTS): ``mpr_send``, the
    send PSN window (128s); ``max_wimm_send``, the WRITE_IMMs it may have in
    flight; ``timeout``, the local ACK timeout exponent t (1.024 us x 2^t);
    ``retry_linear`` retries at that timeout (0..7), then ``retry_exp``
    doubling ones (0..25, 25 = forever); ``reorder_window_ps``, the least time
    a gap may persist before a packet is declared lost.

    ``mpr`` (optional) sets both windows at once where ``mpr_send`` /
    ``mpr_recv`` are left None.  :data:`STAGES` says which state sets what.
    """

    ev_profile: EVProfile = field(default_factory=EVProfile)
    cc_profile: CCProfile = field(default_factory=CCProfile)
    mpr: int = 32
    mpr_send: int | None = None
    mpr_recv: int | None = None
    timeout: int = 7
    retry_linear: int = 7
    retry_exp: int = 7
    max_wimm_send: int = 64
    max_wimm_recv: int = 64
    mtu: int = 4096
    ack_coalesce_bytes: int = 16384
    reorder_window_ps: int = 2_000_000

    def validate(self) -> None:
        """Raise :class:`InvalidArgument` naming the first bad field."""
        if not isinstance(self.ev_profile, EVProfile):
            raise InvalidArgument("QPAttr.ev_profile: must be an EVProfile")
        if not isinstance(self.cc_profile, CCProfile):
            raise InvalidArgument("QPAttr.cc_profile: must be a CCProfile")
        self.ev_profile.validate()
        self.cc_profile.validate()
        _check_int("QPAttr", "mpr", self.mpr, 1, 512)
        if self.mpr_send is not None:
            _check_int("QPAttr", "mpr_send", self.mpr_send, 1, 512)
        if self.mpr_recv is not None:
            _check_int("QPAttr", "mpr_recv", self.mpr_recv, 1, 512)
        _check_int("QPAttr", "timeout", self.timeout, 0, 24)
        _check_int("QPAttr", "retry_linear", self.retry_linear, 0, 7)
        _check_int("QPAttr", "retry_exp", self.retry_exp, 0, RETRY_INFINITE)
        _check_int("QPAttr", "max_wimm_send", self.max_wimm_send, 1, 1 << 16)
        _check_int("QPAttr", "max_wimm_recv", self.max_wimm_recv, 1, 1 << 16)
        _check_int("QPAttr", "mtu", self.mtu, 256, 9000)
        _check_int("QPAttr", "ack_coalesce_bytes", self.ack_coalesce_bytes, 1, 1 << 24)
        _check_int("QPAttr", "reorder_window_ps", self.reorder_window_ps, 0, 10**13)

    @property
    def window_psns(self) -> int:
        """The receive PSN window size (receive MPR x 128)."""
        return self.recv_window_psns

    @property
    def recv_window_psns(self) -> int:
        """The receive PSN window: ``mpr_recv`` (or ``mpr``) x 128."""
        return (self.mpr_recv if self.mpr_recv is not None else self.mpr) * 128

    @property
    def send_window_psns(self) -> int:
        """The send PSN window: ``mpr_send`` (or ``mpr``) x 128."""
        return (self.mpr_send if self.mpr_send is not None else self.mpr) * 128

    @property
    def timeout_ps(self) -> int:
        """The base local ACK timeout in picoseconds."""
        return TIMEOUT_UNIT_PS << self.timeout

    @property
    def retries_infinite(self) -> bool:
        """True when the exponential retry count means retry forever."""
        return self.retry_exp >= RETRY_INFINITE


#: Which QP state sets each QPAttr field (``QueuePair.modify`` keywords).  ``mpr``
#: sets both windows, so it is taken at RTR and no later.
STAGES: dict[str, str] = {
    "ev_profile": "INIT",
    "cc_profile": "INIT",
    "mpr": "RTR",
    "mpr_recv": "RTR",
    "max_wimm_recv": "RTR",
    "mtu": "RTR",
    "ack_coalesce_bytes": "RTR",
    "mpr_send": "RTS",
    "max_wimm_send": "RTS",
    "timeout": "RTS",
    "retry_linear": "RTS",
    "retry_exp": "RTS",
    "reorder_window_ps": "RTS",
}


_FIELD_KEYS = ("width", "min", "max", "mask", "init")


def ev_profile_from_dict(data: Any, owner: str = "ev_profile") -> EVProfile:
    """An :class:`EVProfile` from a plain mapping (a scenario table), validated.

    Keys are the profile's fields; ``plane_field`` / ``uplink_field`` /
    ``spare_field`` are tables of ``width, min, max, mask, init``; ``explicit``
    is a list of EVs (ints, or strings such as ``"0x10"``).  Errors name
    ``owner.key``.
    """
    if not isinstance(data, dict):
        raise InvalidArgument(f"{owner}: must be a table, got {data!r}")
    known = {f for f in EVProfile.__dataclass_fields__}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise InvalidArgument(f"{owner}.{key}: unknown key (known: {', '.join(sorted(known))})")
        if key in ("plane_field", "uplink_field", "spare_field"):
            if not isinstance(value, dict):
                raise InvalidArgument(f"{owner}.{key}: must be a table of {', '.join(_FIELD_KEYS)}")
            for k in value:
                if k not in _FIELD_KEYS:
                    raise InvalidArgument(f"{owner}.{key}.{k}: unknown key")
            if "width" not in value:
                raise InvalidArgument(f"{owner}.{key}.width: required")
            for k, v in value.items():
                if not isinstance(v, int) or isinstance(v, bool):
                    raise InvalidArgument(f"{owner}.{key}.{k}: must be an int, got {v!r}")
            value = EVField(**value)
        elif key == "explicit":
            if not isinstance(value, list):
                raise InvalidArgument(f"{owner}.explicit: must be a list of EVs")
            evs = []
            for i, ev in enumerate(value):
                if isinstance(ev, str):
                    try:
                        ev = int(ev, 0)
                    except ValueError:
                        raise InvalidArgument(
                            f"{owner}.explicit[{i}]: not a number: {ev!r}"
                        ) from None
                evs.append(ev)
            value = evs
        elif key == "plane_down_fraction" and (
            not isinstance(value, int | float) or isinstance(value, bool)
        ):
            raise InvalidArgument(f"{owner}.{key}: must be a number, got {value!r}")
        kwargs[key] = value
    prof = EVProfile(**kwargs)
    try:
        prof.validate()
    except InvalidArgument as exc:
        raise InvalidArgument(str(exc).replace("EVProfile.", f"{owner}.", 1)) from None
    return prof
