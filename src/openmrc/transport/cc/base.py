"""The congestion-control interface and its registry, selected by name.

A congestion controller owns the sender's window (``cwnd``, in payload bytes)
and is told about every acknowledgement, NACK and timeout.  Algorithms register
themselves with :func:`register` and QPs create them with :func:`create` from
their :class:`~openmrc.transport.attrs.CCProfile`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from ..errors import InvalidArgument


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
        if self.name not in available():
            raise InvalidArgument(
                f"CCProfile.name: unknown congestion control {self.name!r} "
                f"(available: {', '.join(available())})"
            )
        if not isinstance(self.link_bps, int | float) or not 1e6 <= self.link_bps <= 1e14:
            raise InvalidArgument(
                f"CCProfile.link_bps: must be in 1e6..1e14, got {self.link_bps!r}"
            )
        rtt = self.base_rtt_ps
        if not isinstance(rtt, int) or isinstance(rtt, bool) or not 1 <= rtt <= 10**13:
            raise InvalidArgument(
                f"CCProfile.base_rtt_ps: must be an int in 1..{10**13}, got {rtt!r}"
            )


@mypyc_attr(allow_interpreted_subclasses=True)  # users register their own algorithms
class CongestionControl(ABC):
    """Sender-side window algorithm.  ``cwnd`` is in payload bytes."""

    #: the name the algorithm is registered under (set by :func:`register`)
    name: ClassVar[str] = ""
    cwnd: int

    def __init__(self, profile: CCProfile, mtu: int) -> None:
        self.profile = profile
        self.mtu = mtu

    @abstractmethod
    def on_ack(
        self, acked_bytes: int, rtt_ps: int | None, ecn: bool, inflight: int, now: int
    ) -> None:
        """One ACK event: ``acked_bytes`` newly acknowledged; ``rtt_ps`` its RTT
        sample, or None when it carries none (the rest of a multi-SACK group)."""

    @abstractmethod
    def on_nack(
        self, nacked_bytes: int, now: int, rtt_ps: int | None = None, inflight: int = 0
    ) -> None:
        """A packet of ``nacked_bytes`` was trimmed (congestion); ``rtt_ps`` the
        NACK's round trip when known, ``inflight`` the bytes still in flight."""

    @abstractmethod
    def on_loss(self, lost_bytes: int, now: int) -> None:
        """A packet was lost without a trim (a path failure signal)."""

    def on_timeout(self, lost_bytes: int, now: int) -> None:
        """A packet's retransmission timer expired; default: as :meth:`on_loss`."""
        self.on_loss(lost_bytes, now)

    def on_penalty(self, penalty: int, acked_bytes: int, now: int) -> None:  # noqa: B027
        """The receiver's window penalty (7 bits, 0 = none) on an ACK of
        ``acked_bytes``; default: ignore."""

    def describe(self) -> dict[str, Any]:
        """A snapshot of the controller's state, for reports."""
        return {"name": self.name, "cwnd": self.cwnd}


_REGISTRY: dict[str, type[CongestionControl]] = {}


def register(name: str) -> Callable[[type[CongestionControl]], type[CongestionControl]]:
    """Class decorator: make an algorithm available under ``name``."""

    def deco(cls: type[CongestionControl]) -> type[CongestionControl]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def register_builtin(cls: type[CongestionControl]) -> None:
    """Make a built-in algorithm available under its ``name``.

    The built-in classes set ``name`` in their body and are added with this
    call rather than the :func:`register` decorator: a decorated class cannot be
    compiled to a native class by mypyc (user algorithms use :func:`register`).
    """
    _REGISTRY[cls.name] = cls


def available() -> list[str]:
    """Names of the registered algorithms."""
    return sorted(_REGISTRY)


def create(profile: CCProfile, mtu: int) -> CongestionControl:
    """Instantiate the algorithm ``profile.name`` names."""
    cls = _REGISTRY.get(profile.name)
    if cls is None:
        raise InvalidArgument(
            f"CCProfile.name: unknown congestion control {profile.name!r} "
            f"(available: {', '.join(available())})"
        )
    return cls(profile, mtu)


def param(profile: CCProfile, key: str, default: float, lo: float, hi: float) -> float:
    """Read an override from ``profile.params`` with range checking."""
    value = profile.params.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(
            f"CCProfile.params[{key!r}]: must be a number in {lo}..{hi}, got {value!r}"
        )
    return value
