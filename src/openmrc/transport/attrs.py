"""Queue pair attributes: the EV profile, the congestion-control profile, and the rest.

In MRC a per-node controller sets the EV and CC profiles; the application sets
the verbs attributes (MPR, timeout exponent, retry counts).  Every field is
validated with an error that names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgument
from .ev import MAX_PATHS, MAX_PLANES

#: Local ACK timeout unit: 1.024 us, in picoseconds.
TIMEOUT_UNIT_PS = 1_024_000
#: An exponential retry count of 25 means "retry forever".
RETRY_INFINITE = 25


def _check_int(owner: str, name: str, value: Any, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(f"{owner}.{name}: must be an int in {lo}..{hi}, got {value!r}")


@dataclass
class EVProfile:
    """How a QP chooses and manages its entropy values (paths).

    ``planes`` x ``paths_per_plane`` candidate EVs exist; a QP uses
    ``ev_count`` of them (split equally over planes, a random subset of each
    plane's paths); the rest of each plane's paths are the backup set.
    ``floor`` is the fewest usable EVs kept: below it, losses no longer disable
    EVs.  An ASSUMED_BAD EV is probed every ``probe_interval_ps`` and is GOOD
    again after ``probe_successes`` answered probes in a row.  ``explicit``
    (optional) lists the EVs to use instead of generating them.
    """

    planes: int = 8
    paths_per_plane: int = 64
    ev_count: int = 256
    floor: int = 8
    probe_interval_ps: int = 32_000_000
    probe_successes: int = 3
    explicit: list[int] | None = None
    #: Stop replacing a plane's bad EVs from its backups once this fraction of
    #: the plane's active EVs is bad: the plane is then presumed down, and
    #: burning its backups would only lose more packets.
    plane_down_fraction: float = 0.5

    def validate(self) -> None:
        """Raise :class:`InvalidArgument` naming the first bad field."""
        _check_int("EVProfile", "planes", self.planes, 1, MAX_PLANES)
        _check_int("EVProfile", "paths_per_plane", self.paths_per_plane, 1, MAX_PATHS)
        _check_int("EVProfile", "ev_count", self.ev_count, 1, 65536)
        _check_int("EVProfile", "floor", self.floor, 0, 65536)
        _check_int("EVProfile", "probe_interval_ps", self.probe_interval_ps, 1, 10**15)
        _check_int("EVProfile", "probe_successes", self.probe_successes, 1, 1000)
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


@dataclass
class CCProfile:
    """Which congestion control a QP runs, and the network it is tuned for.

    ``name`` selects from the registry (``nscc`` by default, ``fixed`` for
    tests); ``link_bps`` is the NIC's total rate and ``base_rtt_ps`` the
    unloaded round trip, from which NSCC derives its BDP-scaled constants;
    ``params`` overrides algorithm-specific constants by name.
    """

    name: str = "nscc"
    link_bps: float = 800e9
    base_rtt_ps: int = 12_000_000
    params: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise :class:`InvalidArgument` naming the first bad field."""
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument(f"CCProfile.name: must be a non-empty string, got {self.name!r}")
        from .cc import available  # the registry imports this module

        if self.name not in available():
            raise InvalidArgument(
                f"CCProfile.name: unknown congestion control {self.name!r} "
                f"(available: {', '.join(available())})"
            )
        if not isinstance(self.link_bps, int | float) or not 1e6 <= self.link_bps <= 1e14:
            raise InvalidArgument(
                f"CCProfile.link_bps: must be in 1e6..1e14, got {self.link_bps!r}"
            )
        _check_int("CCProfile", "base_rtt_ps", self.base_rtt_ps, 1, 10**13)


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
