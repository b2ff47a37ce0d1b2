"""An egress port: the queues in front of one direction of a link, and that direction's wire.

Every direction of every link is one :class:`EgressPort` (full duplex = two
ports).  A port has a FIFO *data* queue with a byte limit and a strict-priority
*header* queue with its own limit.  Control packets (anything that is not a
:class:`~openmrc.wire.packets.DataPacket`) and trimmed data packets go to the
header queue.  When a data packet finds the data queue full the port trims it
(``pkt.trim(lasthop=port.lasthop)``) and queues the header, or drops it if
trimming is off.  ECN (CE) marks are set on data packets at enqueue with
probability rising linearly from 0 at ``kmin`` queued bytes to 1 at ``kmax``.

Timing without per-packet queue events: a packet that finds the port idle
starts serializing at once and the port schedules only its *arrival* at the far
end (``end of serialization + propagation delay``); only when packets wait does
the port keep one "transmitter free" event pending, at which it picks the next
packet (header queue first).  Transmission is non-preemptive.

Wire state: ``up`` (down: enqueue drops and counts, queues are flushed, packets
in flight are lost -- all counted in ``drops_down``), ``silent`` (every packet
vanishes after being "sent", counted only in the ground-truth ``lost_silent``),
``loss`` (each packet independently lost with this probability, ``lost``).

Byte counts include Ethernet framing (``framing`` bytes per packet).

:class:`EgressPort` is the native port of :mod:`openmrc.sim._kernel` when it is
built (see :mod:`openmrc.sim._native`), :class:`PyEgressPort` otherwise; the
same behaviour and attributes.  The native one needs the native
:class:`~openmrc.sim.engine.Simulator`; its ``data`` / ``prio`` queues read as
lists (copies) and ``txev`` as ``None`` or ``(time, key)``.  On the native
port the state it keeps consistent itself is read-only (``busy_until``,
``data_bytes``, ``prio_bytes``, ``epoch``, ``up``, ``silent``, ``loss``,
``rate_bps``, ``delay``, ``framing``, ``trim``, ``lasthop``, ``ecn``,
``kmin``, ``kmax``; change the wire with :meth:`PyEgressPort.set_up` and
:meth:`PyEgressPort.set_impairment`), while the counters, ``data_limit``,
``prio_limit`` and ``link`` stay writable; the native
:func:`busy_mask` reads its native ports' fields directly (a Python
subclass overriding those attributes is not consulted; one overriding
``drain_time`` is, by :func:`soonest_drain`).  A
:class:`PyEgressPort` (:mod:`openmrc.sim.pyport`, compiled in a compiled build)
runs on either simulator (the baseline fabric's ports subclass it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openmrc.sim._native import kernel
from openmrc.sim.pyport import (
    COUNTERS,
    PyEgressPort,
    Receiver,
    port_counters,
    port_repr,
    port_utilisation,
    py_busy_mask,
    py_post_drain,
    py_send_post,
    py_soonest_drain,
)

__all__ = [
    "COUNTERS",
    "EgressPort",
    "PortReport",
    "PyEgressPort",
    "Receiver",
    "busy_mask",
    "post_drain",
    "py_busy_mask",
    "py_post_drain",
    "py_send_post",
    "py_soonest_drain",
    "send_post",
    "soonest_drain",
]


class PortReport:
    """The reporting half of the native port (:class:`PyEgressPort` has its own)."""

    __slots__ = ()

    name: str
    rate_bps: int
    tx_bytes: int
    data_bytes: int
    prio_bytes: int
    up: bool

    def counters(self) -> dict[str, int]:
        """The port's counters by name (see :data:`COUNTERS`)."""
        return port_counters(self)

    def utilisation(self, elapsed_ps: int) -> float:
        """Fraction of ``elapsed_ps`` this port spent serializing (from bytes sent)."""
        return port_utilisation(self.tx_bytes, self.rate_bps, elapsed_ps)

    def __repr__(self) -> str:
        return port_repr(self)


if TYPE_CHECKING:  # type-checked against the pure-Python API, which the native one mirrors
    EgressPort = PyEgressPort
    busy_mask = py_busy_mask
    soonest_drain = py_soonest_drain
    post_drain = py_post_drain
    send_post = py_send_post
elif kernel is not None:
    busy_mask = kernel.busy_mask
    soonest_drain = kernel.soonest_drain
    post_drain = kernel.post_drain
    send_post = kernel.send_post

    class EgressPort(kernel.EgressPort, PortReport):
        """The native port (:mod:`openmrc.sim._kernel`); the API of :class:`PyEgressPort`."""

        __slots__ = ()

else:
    EgressPort = PyEgressPort
    busy_mask = py_busy_mask
    soonest_drain = py_soonest_drain
    post_drain = py_post_drain
    send_post = py_send_post
