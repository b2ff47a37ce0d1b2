"""The reverse-path EV set of one QP: which EV its control packets travel on.

A responder's SACKs, NACKs and probe replies carry the *reflected* EV of the
packet that caused them (the sender learns which of its paths that packet
took), but they need a path of their own back to the sender.  Using the
reflected EV as that path (what openmrc did before) sends every control
packet on a path nobody checked in this direction: a path that forwards one
way only loses the SACKs of the packets sprayed on it.  The paper (2.4,
"Reverse Paths") keeps instead a small reverse EV set for control packets,
at least one EV per plane, made of EVs known to work:

* each RTT that the QP is active inbound but sends no data, it sends an EV
  probe on an EV of its own set (the EVs are random paths of their plane;
  the next plane in turn, the next EV of that plane in its rotation); when
  the probe is acknowledged, that EV becomes the plane's reverse EV;
* when the QP sends data, the SACKs that come back tell which of its EVs
  delivered: the reflected EV of each becomes its plane's reverse EV, with no
  probe needed.

openmrc departs in one point: it probes only while a plane (whose port is
up) has no confirmed reverse EV, not every RTT for ever.  A probe every RTT
per inbound-only QP cost 2 packets per RTT per QP: in the simulator's
64-host all-to-all of 64 KiB messages, 110,000 probe packets on 70,000 data
packets (events 0.86 M -> 1.7 M) for nothing on a healthy fabric.  A reverse
EV stops being trusted, and a probe looks for another at the next data
arrival, when the peer shows it missed SACKs sent on it: a duplicate data
packet arrives on that plane (:meth:`ReversePaths.suspect`).  "Each RTT" is
the RTT these probes measure (smoothed, gain 1/8), never less than the base
RTT; one probe is out at a time, given up as lost after four RTTs or the EV
profile's ``probe_interval_ps``, whichever is longer.

A control packet goes on the confirmed reverse EV of the plane its reflected
EV came in on (that plane's NIC ports are up at both ends), else on the
confirmed one of the first plane whose port is up; before any is confirmed,
the QP's own first active EV of the reflected plane stands in (an EV of its
own, GOOD as far as it knows).  A reverse EV that this QP's own path state
holds ASSUMED_BAD or DENIED is not used.

The probe takes the same :class:`~openmrc.wire.packets.ProbePacket` as the
requester's EV probes, with the top bit of its sequence number set
(:data:`REVERSE_PROBE_SEQ`) so its reply comes back here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from ..wire.packets import ProbePacket
from .ev import MAX_PLANES

if TYPE_CHECKING:
    from .paths import PathSet

#: Sequence numbers of reverse-EV probes have this bit set (a requester's EV
#: probes count up from 0 and never reach it).
REVERSE_PROBE_SEQ: Final = 1 << 31


@final
class ReversePaths:
    """The reverse EV per plane of one QP, and its per-RTT EV probes."""

    __slots__ = (
        "_cursor",
        "_plane_turn",
        "_planes",
        "_wait",
        "confirmed",
        "evs",
        "interval_ps",
        "last_out",
        "next_probe_at",
        "paths",
        "seq",
        "srtt",
        "stats_confirmed",
        "stats_probes",
    )

    def __init__(self, paths: PathSet, interval_ps: int) -> None:
        self.paths = paths
        #: the base RTT: the shortest interval between two probes.
        self.interval_ps = max(1, interval_ps)
        #: the smoothed RTT of the probes (gain 1/8, from the base RTT): an
        #: inbound-only QP probes once per RTT, the RTT it measures (under
        #: congestion far more than the base RTT).
        self.srtt = self.interval_ps
        self._planes = paths.planes()
        #: bitmask of the planes whose reverse EV a SACK or a probe confirmed.
        self.confirmed = 0
        #: plane -> its reverse EV (-1: none): at first the QP's own first EV of
        #: the plane stands in, until a SACK or an answered probe confirms one.
        self.evs: list[int] = [-1] * MAX_PLANES
        for p in self._planes:
            self.evs[p] = paths.first_good(p)
        #: when the QP last sent data (-1: never; the QP sets it as it sends).
        self.last_out = -1
        #: when data arriving may next send a probe (-1: no data arrived yet).
        self.next_probe_at = -1
        self._plane_turn = 0
        self._cursor: dict[int, int] = {}
        #: the outstanding probe: (seq, ev, sent at), or None.
        self._wait: tuple[int, int, int] | None = None
        self.seq = 0
        self.stats_probes = 0
        self.stats_confirmed = 0

    # -- which EV a control packet takes ---------------------------------------------
    def route(self, reflected: int) -> int:
        """The EV a control packet reflecting ``reflected`` travels on."""
        paths = self.paths
        down = paths.down
        plane = reflected & (MAX_PLANES - 1)
        up = self.confirmed & ~down
        if (up >> plane & 1 or not up) and not down >> plane & 1:
            ev = self._usable(plane)
            if ev >= 0:
                return ev
        for p in self._planes:
            if up >> p & 1 or (not up and not down >> p & 1):
                ev = self._usable(p)
                if ev >= 0:
                    return ev
        return reflected

    def _usable(self, plane: int) -> int:
        """The plane's reverse EV (or a stand-in from the QP's own set), or -1."""
        paths = self.paths
        ev = self.evs[plane]
        if ev >= 0 and paths.usable_ev(ev):
            return ev
        self.confirmed &= ~(1 << plane)  # it failed here since: a stand-in until the next
        ev = paths.first_good(plane)
        self.evs[plane] = ev
        return ev

    # -- learning ------------------------------------------------------------------------
    def on_delivered(self, ev: int) -> None:
        """A SACK reflected ``ev``: data this QP sent on it arrived (an EV the
        QP does not know is ignored: nothing from the network is trusted)."""
        if self.paths.state_of(ev) is not None:
            plane = ev & (MAX_PLANES - 1)
            self.evs[plane] = ev
            self.confirmed |= 1 << plane

    def on_probe_reply(self, ev: int, seq: int, now: int) -> bool:
        """A reply to a reverse-EV probe; True if it was one (it is then consumed).
        Only the answer to the outstanding probe counts (its own send time gives
        the RTT sample: nothing in the reply is trusted but its seq and EV)."""
        if not seq & REVERSE_PROBE_SEQ:
            return False
        wait = self._wait
        if wait is not None and wait[0] == seq and wait[1] == ev:
            self._wait = None
            rtt = now - wait[2]
            if rtt >= 0:
                self.srtt += (rtt - self.srtt) // 8
            plane = ev & (MAX_PLANES - 1)
            self.evs[plane] = ev
            self.confirmed |= 1 << plane
            self.stats_confirmed += 1
        return True

    def suspect(self, plane: int, now: int) -> None:
        """The peer resent data that came in on ``plane``: it may have missed the
        SACKs sent on that plane's reverse EV, which is no longer trusted; the
        next data to arrive sends a probe for another."""
        self.confirmed &= ~(1 << plane)
        if self.next_probe_at > now:
            self.next_probe_at = now

    def on_inbound(self, now: int, remote_qpn: int) -> ProbePacket | None:
        """Data arrived: at most once per RTT, while the QP sends no data of its
        own and a plane has no confirmed reverse EV, an EV probe for one."""
        if now < self.next_probe_at:
            return None
        first = self.next_probe_at < 0
        self.next_probe_at = now + max(self.interval_ps, self.srtt)
        if first:
            return None  # active inbound for an RTT first
        if self.last_out >= 0 and now - self.last_out < max(self.interval_ps, self.srtt):
            return None  # sending: SACKs keep the set fresh
        wait = self._wait
        if wait is not None and now - wait[2] < max(
            self.paths.profile.probe_interval_ps, 4 * self.srtt
        ):
            return None  # the last probe may still be answered (one at a time)
        ev = self._candidate()
        if ev < 0:
            return None
        seq = REVERSE_PROBE_SEQ | self.seq
        self.seq = (self.seq + 1) & (REVERSE_PROBE_SEQ - 1)
        self._wait = (seq, ev, now)
        self.stats_probes += 1
        return ProbePacket(remote_qpn, ev, seq, now)

    def _candidate(self) -> int:
        """The next EV to try (-1: none needed): the planes without a confirmed
        reverse EV in turn, each plane's GOOD EVs in turn, never the plane's
        reverse EV of the moment (it is in use already)."""
        paths = self.paths
        todo = ~(self.confirmed | paths.down)
        planes = [p for p in self._planes if todo >> p & 1]
        if not planes:
            return -1
        plane = planes[self._plane_turn % len(planes)]
        self._plane_turn += 1
        evs = paths.good_evs(plane)
        if not evs:
            return -1
        k = self._cursor.get(plane, 0)
        ev = evs[k % len(evs)]
        if ev == self.evs[plane] and len(evs) > 1:
            k += 1
            ev = evs[k % len(evs)]
        self._cursor[plane] = k + 1
        return ev
