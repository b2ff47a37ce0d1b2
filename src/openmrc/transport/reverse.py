"""The reverse-path EV set of one QP: which EV its SACKs and NACKs travel on.

A responder's SACKs and NACKs carry the *reflected* EV of the packet that
caused them (the sender learns which of its paths that packet took), but they
need a path of their own back to the sender.  The paper (2.4, "Reverse
Paths") keeps a small reverse EV set for them, at least one EV per plane,
made of EVs known to work:

* each RTT that the QP is active inbound but sends no data, it sends an EV
  probe on an EV of its own set (the EVs are random paths of their plane:
  the planes in turn, each plane's EVs in its rotation); when the probe is
  answered, that EV becomes the plane's reverse EV;
* when the QP sends data, the SACKs that come back tell which of its EVs
  delivered: the reflected EV of each becomes its plane's reverse EV, with no
  probe needed.

A SACK or NACK goes on the confirmed reverse EV of the plane its reflected EV
came in on, else (failover) on the confirmed reverse EV of the next plane
that has one.  While no plane has one (before the first is confirmed, or
after suspicion took the last), nothing says which path works, so each
control packet of the plane takes the plane's next GOOD EV of the QP's own
set (a stand-in), in turn: pinned to one unconfirmed EV, every SACK would be
lost while that EV's path is down, and the sender, hearing nothing, times
out and blames forward paths that work; spread, the share of SACKs that
arrives is the share of paths that work, and each carries the cumulative
ACK and bitmap.  An EV this QP's own path state holds ASSUMED_BAD or DENIED
is never used, nor a plane whose port is down at either end.

Failover when a reverse path dies: the QP cannot see its SACKs lost, but it
sees the sender's reaction.  A duplicate data packet (the sender resent: it
missed the SACKs) or a reliability probe (the sender heard nothing for two
RTTs) arriving on a plane unconfirms that plane's reverse EV
(:meth:`ReversePaths.suspect`): its control packets move at once to another
plane's confirmed EV, and the next probe, sent without waiting for the RTT,
looks for a new EV in the suspect plane.  The per-RTT probes keep moving each
plane's reverse EV to one just answered, so a reverse EV on a path that died
silently is also replaced once a probe of its plane is answered: a probe goes
every RTT whether or not the last ones were answered, so the planes are
probed at the same rate where most of their paths are dead (the other
planes' SACKs, or the sender's probes, recover what the dead EV's SACKs
carried meanwhile).

EV probe *replies* are not routed here: a probe tests the round trip of one
path, and its answer travels back on that path, as before (unless the
answering QP holds that EV, or its plane, out of use: then on the reverse
set, see :meth:`ReversePaths.may_use`).  A probe reply
sent on the reverse set shares its fate with the reverse EV, not with the
probed path: when that reverse path died, every EV probe of the plane went
unanswered and the sender blamed all its EVs of the plane, the probes that
could have cleared them unanswered too (retries then ran out).

"Each RTT" is the RTT these probes measure (smoothed, gain 1/8), never less
than the base RTT.  Several probes may be out at once, each remembered (its
seq, EV and send time) until answered or given up as lost after four RTTs;
at one per RTT that is at most :data:`MAX_OUTSTANDING` of them, and the table
never holds more (a suspicion's early probe waits while it is full).  A
reply changes nothing unless it answers a probe in the table.  The probe is an ordinary EV probe
(:class:`~openmrc.wire.packets.ProbePacket`, answered by the peer's
responder) whose sequence number has its top bit set
(:data:`REVERSE_PROBE_SEQ`), so the reply comes back here and not to the
requester.
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

#: An unanswered reverse-EV probe is given up after this many RTTs.
PROBE_WAIT_RTTS: Final = 4

#: At most this many reverse-EV probes are remembered at once: one per RTT,
#: each kept for :data:`PROBE_WAIT_RTTS` RTTs, and the one being sent.
MAX_OUTSTANDING: Final = PROBE_WAIT_RTTS + 1


@final
class ReversePaths:
    """The reverse EV per plane of one QP, and its per-RTT EV probes."""

    __slots__ = (
        "_cursor",
        "_out",
        "_plane_turn",
        "_planes",
        "confirmed",
        "evs",
        "interval_ps",
        "last_out",
        "next_probe_at",
        "paths",
        "seq",
        "srtt",
        "stats_confirmed",
        "stats_failovers",
        "stats_probes",
        "stats_suspects",
    )

    # The attributes, most used first: compiled, mypyc lays them out in this order
    # (the fields one packet's host work reads share the object's first cache lines).
    last_out: int
    next_probe_at: int
    evs: list[int]
    paths: PathSet
    confirmed: int
    interval_ps: int
    srtt: int
    _plane_turn: int
    seq: int
    _cursor: list[int]
    stats_probes: int
    _out: list[tuple[int, int, int]]
    _planes: list[int]
    stats_confirmed: int
    stats_failovers: int
    stats_suspects: int

    def __init__(self, paths: PathSet, interval_ps: int) -> None:
        self.paths = paths
        #: the base RTT: the shortest interval between two probes.
        self.interval_ps = max(1, interval_ps)
        #: the smoothed RTT of the probes (gain 1/8, from the base RTT).
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
        #: plane -> where its next probe starts in the plane's GOOD EVs.
        self._cursor: list[int] = [0] * MAX_PLANES
        #: the outstanding probes, oldest first: (seq, ev, sent at), at most
        #: MAX_OUTSTANDING, each dropped when answered or PROBE_WAIT_RTTS RTTs old.
        self._out: list[tuple[int, int, int]] = []
        self.seq = 0
        self.stats_probes = 0
        self.stats_confirmed = 0
        #: control packets sent on another plane's reverse EV (their own unconfirmed).
        self.stats_failovers = 0
        #: planes unconfirmed on a duplicate or a reliability probe.
        self.stats_suspects = 0

    # -- which EV a control packet takes ---------------------------------------------
    def route(self, reflected: int) -> int:
        """The EV a SACK or NACK reflecting ``reflected`` travels on (while no
        plane has a confirmed reverse EV, the next stand-in of the plane: each
        call moves it on)."""
        plane = reflected & (MAX_PLANES - 1)
        q = self._carrier(plane)
        if q < 0:
            return reflected
        if q != plane:
            self.stats_failovers += 1
        if not self.confirmed >> q & 1:
            self._next_standin(q)  # nothing confirmed: the plane's stand-ins in turn
        return self.evs[q]

    def _carrier(self, plane: int) -> int:
        """The plane whose reverse EV carries the control packets of ``plane``:
        itself when confirmed, else (failover) the next plane after it with a
        confirmed reverse EV, so the planes share the load; before any is
        confirmed, the plane's stand-in; -1 when none is usable."""
        down = self.paths.down
        up = self.confirmed & ~down
        if (up >> plane & 1 or (not up and not down >> plane & 1)) and self._usable(plane) >= 0:
            return plane
        planes = self._planes
        n = len(planes)
        start = 0
        while start < n and planes[start] <= plane:
            start += 1
        for k in range(n):
            p = planes[(start + k) % n]
            if (up >> p & 1 or (not up and not down >> p & 1)) and self._usable(p) >= 0:
                return p
        return -1

    def may_use(self, ev: int) -> bool:
        """Whether this QP may send on ``ev``: its plane is up at both ends and
        not denied, and its own path state does not hold it ASSUMED_BAD or DENIED."""
        paths = self.paths
        return not paths.down >> (ev & (MAX_PLANES - 1)) & 1 and paths.usable_ev(ev)

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

    def _next_standin(self, plane: int) -> None:
        """Replace the plane's reverse EV by the next GOOD EV of the plane (the
        stand-in while no probe or SACK has confirmed one)."""
        ev = self.paths.good_after(plane, self.evs[plane])
        if ev >= 0:
            self.evs[plane] = ev

    # -- learning ------------------------------------------------------------------------
    def on_delivered(self, ev: int) -> None:
        """A SACK reflected ``ev``: data this QP sent on it arrived (an EV the
        QP does not know is ignored: nothing from the network is trusted)."""
        if self.paths.knows(ev):
            plane = ev & (MAX_PLANES - 1)
            self.evs[plane] = ev
            self.confirmed |= 1 << plane

    def on_probe_reply(self, ev: int, seq: int, ts_echo: int, now: int) -> bool:
        """A reply to a reverse-EV probe; True if it was one (it is then consumed).
        Only the answer to an outstanding probe counts: its seq, its EV and the
        probe's own timestamp echoed, not yet given up (nothing else in the reply
        is trusted; the RTT sample is measured from the send time kept here)."""
        if not seq & REVERSE_PROBE_SEQ:
            return False
        out = self._out
        for i in range(len(out)):
            sent = out[i]
            if sent[0] == seq and sent[1] == ev and sent[2] == ts_echo:
                del out[i]
                rtt = now - ts_echo
                if rtt >= PROBE_WAIT_RTTS * self._rtt() or rtt < 0:
                    break  # given up on already: it says nothing of the path now
                self.srtt += (rtt - self.srtt) // 8
                plane = ev & (MAX_PLANES - 1)
                self.evs[plane] = ev
                self.confirmed |= 1 << plane
                self.stats_confirmed += 1
                break
        return True

    def expects(self, ts_echo: int) -> bool:
        """Whether a probe reply echoing ``ts_echo`` may answer an outstanding
        reverse-EV probe (a driver's cheap check before decoding it)."""
        return any(sent[2] == ts_echo for sent in self._out)

    def outstanding(self) -> int:
        """How many reverse-EV probes are remembered (sent, not answered, not yet
        given up: at most :data:`MAX_OUTSTANDING`)."""
        return len(self._out)

    def _rtt(self) -> int:
        """The RTT the probes go by: the smoothed one, never less than the base RTT."""
        return self.srtt if self.srtt > self.interval_ps else self.interval_ps

    def suspect(self, plane: int, now: int) -> None:
        """The peer resent data, or asked for a SACK, on ``plane``: it may have
        missed the SACKs of that plane, so the reverse EV that carried them
        (its own or, after a failover, another plane's) is no longer trusted and
        a stand-in replaces it; the next data to arrive sends a probe."""
        q = self._carrier(plane)
        if q >= 0:
            self.confirmed &= ~(1 << q)
            self._next_standin(q)
            self.stats_suspects += 1
        if self.next_probe_at > now:
            self.next_probe_at = now

    def on_inbound(self, now: int, remote_qpn: int) -> ProbePacket | None:
        """Data arrived: once per RTT, while the QP sends no data of its own, an
        EV probe for a plane's reverse EV (whether or not the last ones were
        answered)."""
        if now < self.next_probe_at:
            return None
        first = self.next_probe_at < 0
        rtt = self._rtt()
        self.next_probe_at = now + rtt
        if first:
            return None  # active inbound for an RTT first
        if self.last_out >= 0 and now - self.last_out < rtt:
            return None  # sending: SACKs keep the set fresh
        out = self._out
        stale = now - PROBE_WAIT_RTTS * rtt
        while out and out[0][2] <= stale:
            del out[0]  # unanswered for PROBE_WAIT_RTTS RTTs: lost
        if len(out) >= MAX_OUTSTANDING:
            return None  # the table is full (early probes after suspicions)
        ev = self._candidate()
        if ev < 0:
            return None
        seq = REVERSE_PROBE_SEQ | self.seq
        self.seq = (self.seq + 1) & (REVERSE_PROBE_SEQ - 1)
        out.append((seq, ev, now))
        self.stats_probes += 1
        return ProbePacket(remote_qpn, ev, seq, now)

    def _candidate(self) -> int:
        """The next EV to try (-1: none): a plane without a confirmed reverse EV
        first, else the planes in turn; the plane's GOOD EVs in turn, never its
        reverse EV of the moment (that one is in use already)."""
        paths = self.paths
        down = paths.down
        planes = [p for p in self._planes if not down >> p & 1]
        if not planes:
            return -1
        todo = [p for p in planes if not self.confirmed >> p & 1]
        if todo:
            planes = todo
        plane = planes[self._plane_turn % len(planes)]
        self._plane_turn += 1
        k = self._cursor[plane]
        got = paths.good_pick(plane, k)
        n = got >> 32
        if not n:
            return -1
        ev = got & 0xFFFFFFFF
        if ev == self.evs[plane] and n > 1:
            k += 1
            ev = paths.good_pick(plane, k) & 0xFFFFFFFF
        self._cursor[plane] = (k + 1) % n
        return ev
