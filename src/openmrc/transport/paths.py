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
DENIED     administratively removed (controller deny list)
========== ==================================================================

Port status: when a NIC port goes down (here, or at the peer as the ports-down
bitmap of its SACKs says), every EV of that plane leaves the rotation at once,
without being blamed; the rotation spreads over the other planes.  The plane
returns when its port does (:meth:`PathSet.set_ports_down`).

ECN rebalancing: a single ECN echo only SKIPs its EV for one rotation (the
mark is a load-balancing hint: ECN is off on the last hop).  An EV whose
ACKs echo ECN ``ECN_REMAP_RUN`` times in a row (no clean ACK for it between)
while the mean ECN rate of the QP's other EVs stays below ``ECN_OTHERS_MAX``
(or the QP has no other EV with ACKs) is *mapped out*: a backup of the same
plane takes its slot and the EV goes back to the end of the plane's backup pool,
still GOOD (it is congested, not broken).  Per-EV ECN rates are EWMAs over that
EV's ACKs with gain ``ECN_RATE_GAIN``.  When every EV is marked, the congestion
is shared (an incast): remapping would not help, NSCC handles it.

A floor of usable EVs stops a storm from disabling them all, and a plane whose
active EVs are mostly bad stops consuming its backups (the plane is presumed
down; its EVs are probed and come back when it does).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from .attrs import EVProfile
from .errors import InvalidArgument
from .ev import PLANE_BITS, ev_path, ev_plane, ev_spare, make_ev

#: ECN-echoing ACKs in a row on one EV before it is mapped out (ECN rebalancing).
ECN_REMAP_RUN = 4
#: ...provided the QP's other EVs' mean ECN rate is below this.
ECN_OTHERS_MAX = 0.25
#: EWMA gain of the per-EV ECN rate, per ACK of that EV.
ECN_RATE_GAIN = 0.25


class EVState(IntEnum):
    """Per-EV path state."""

    GOOD = 0
    SKIP = 1
    ASSUMED_BAD = 2
    DENIED = 3


GOOD = EVState.GOOD
SKIP = EVState.SKIP
BAD = EVState.ASSUMED_BAD
DENIED = EVState.DENIED


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
class PortEvent:
    """A NIC port (one plane) went down or came back, as the context reports it."""

    time: int
    plane: int
    up: bool


class BackupPool:
    """One plane's backup EVs: the rest of the plane's EV space, drawn lazily.

    A plane's space (uplink values x spare values) can hold millions of EVs, so
    the pool is not listed: :meth:`popleft` hands out EVs that were given back
    (:meth:`append`, e.g. recovered by probes) first, then a random EV of the
    space never handed out before.  Small spaces (up to ``ENUMERATE_LIMIT``)
    are shuffled once instead of sampled.  Deterministic for a given ``rng``.
    """

    ENUMERATE_LIMIT = 4096

    def __init__(
        self,
        plane: int,
        uplinks: Sequence[int],
        spares: Sequence[int],
        used: set[int],
        rng: random.Random | int,
    ) -> None:
        self.plane = plane
        self.uplinks = uplinks
        self.spares = spares
        #: EVs of this space ever handed out (active at start, or drawn since).
        self.used = used
        self.returned: deque[int] = deque()
        #: the pool's generator, or the seed it is made from when first needed
        #: (most pools never hand out an EV: making a generator for each costs
        #: ~2.5 KiB and a seeding per plane per QP).
        self._rng = rng
        self._fresh: deque[int] | None = None

    @property
    def size(self) -> int:
        """How many EVs the plane's space holds."""
        return len(self.uplinks) * len(self.spares)

    def __len__(self) -> int:
        return len(self.returned) + self.size - len(self.used)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __contains__(self, ev: object) -> bool:
        return (
            isinstance(ev, int)
            and ev_plane(ev) == self.plane
            and ev_path(ev) in self.uplinks
            and ev_spare(ev) in self.spares
            and make_ev(self.plane, ev_path(ev), ev_spare(ev)) == ev
        )

    def append(self, ev: int) -> None:
        """Give ``ev`` back (it may be handed out again)."""
        self.returned.append(ev)

    def reserve(self, ev: int) -> None:
        """Never hand out ``ev`` as a fresh EV (it is denied or already in use)."""
        self.used.add(ev)

    def _generator(self) -> random.Random:
        rng = self._rng
        if isinstance(rng, int):
            rng = self._rng = random.Random(rng)
        return rng

    def popleft(self) -> int:
        """The next backup EV; IndexError when the pool is empty."""
        if self.returned:
            return self.returned.popleft()
        if len(self.used) >= self.size:
            raise IndexError("backup pool is empty")
        if self.size <= self.ENUMERATE_LIMIT:
            if self._fresh is None:
                every = [make_ev(self.plane, u, s) for u in self.uplinks for s in self.spares]
                self._generator().shuffle(every)
                self._fresh = deque(every)
            while self._fresh:
                ev = self._fresh.popleft()
                if ev not in self.used:
                    self.used.add(ev)
                    return ev
            raise IndexError("backup pool is empty")
        rng = self._generator()
        while True:  # the space is large and mostly unused: rejection sampling
            ev = make_ev(self.plane, rng.choice(self.uplinks), rng.choice(self.spares))
            if ev not in self.used:
                self.used.add(ev)
                return ev


class PathSet:
    """Active EVs, backups, states, rotation and probing for one QP."""

    def __init__(
        self,
        profile: EVProfile,
        rng: random.Random,
        qpn: int,
        events: deque[object] | None = None,
    ) -> None:
        self.profile = profile
        self.qpn = qpn
        self.state: dict[int, EVState] = {}
        self.slots: list[int] = []
        #: the EVs now in a slot (kept with ``slots``), for membership tests.
        self.in_slots: set[int] = set()
        self.backups: dict[int, BackupPool | deque[int]] = {}
        self._idx = 0
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
        self.stats_probes = 0
        self.usable = 0
        self.stats_skips = 0
        self.stats_bad = 0
        self.stats_recovered = 0
        self.stats_floor_hits = 0
        self.stats_replacements = 0
        self.stats_ecn_remaps = 0
        self.stats_port_changes = 0
        #: port status: planes down here, at the peer, and either (bitmasks).
        self.local_down = 0
        self.remote_down = 0
        self.denied_planes = 0
        self.down = 0
        #: per-EV EWMA of ECN echoes among its ACKs, and their sum (for the QP mean).
        self.ecn_rate: dict[int, float] = {}
        self._ecn_sum = 0.0
        #: per-EV count of ECN-echoing ACKs since its last clean one.
        self.ecn_run: dict[int, int] = {}
        self._build(rng)

    # -- construction -----------------------------------------------------------------
    def _build(self, rng: random.Random) -> None:
        prof = self.profile
        prof.validate()  # a profile that cannot give what it asks for names the field
        if prof.explicit is not None:
            # The first ev_count listed EVs are active, the rest are their planes' backups.
            self.slots = list(prof.explicit[: prof.ev_count])
            for ev in self.slots:
                self.backups.setdefault(ev_plane(ev), deque())
            for ev in prof.explicit[prof.ev_count :]:
                self.backups.setdefault(ev_plane(ev), deque()).append(ev)
                self.state[ev] = GOOD
        else:
            planes = prof.plane_values()
            uplinks = prof.uplink_values()
            spares = prof.spare_values()
            per_plane = prof.ev_count // len(planes)
            columns = []
            for plane in planes:
                column = self._draw_plane(plane, uplinks, spares, per_plane, rng)
                columns.append(column)
                self.backups[plane] = BackupPool(
                    plane, uplinks, spares, set(column), rng.getrandbits(64)
                )
            # Interleave planes so consecutive packets go to different planes (ports).
            self.slots = [column[i] for i in range(per_plane) for column in columns]
        self.in_slots = set(self.slots)
        self.state.update(dict.fromkeys(self.slots, GOOD))
        self.usable = len(self.slots)

    @staticmethod
    def _draw_plane(
        plane: int, uplinks: Sequence[int], spares: Sequence[int], n: int, rng: random.Random
    ) -> list[int]:
        """``n`` distinct random EVs of one plane, spread evenly over its uplinks.

        Uplinks are visited in a random order, round after round, so no uplink
        carries more than one EV more than another; each uplink's EVs get
        distinct random spare values (several EVs on one physical path).
        """
        order = list(uplinks)
        rng.shuffle(order)
        rounds, extra = divmod(n, len(order))
        sample = rng.sample
        spare_of: dict[int, list[int]] = {}
        for i, u in enumerate(order):
            k = rounds + (1 if i < extra else 0)
            # sample(spares, 0) draws nothing: skipping it leaves every draw the same
            spare_of[u] = sample(spares, k) if k else []
        # make_ev without its range checks: the profile was validated, so every
        # plane, uplink and spare value here fits its field (checked once below).
        make_ev(plane, max(order), spares[-1])  # spare values ascend
        out = []
        for r in range(rounds + (1 if extra else 0)):
            for u in order:
                picks = spare_of[u]
                if r < len(picks):
                    out.append(plane | (u << PLANE_BITS) | (picks[r] << 16))
        return out

    # -- spraying -----------------------------------------------------------------
    def next_ev(self, busy: int = 0) -> int:
        """The EV for the next packet: the next usable one in the rotation.

        ``busy`` is a bitmask of planes whose NIC port cannot take a packet now;
        EVs of those planes are passed over (they keep their state).  Returns
        -1 when every usable EV is on a busy plane.
        """
        slots = self.slots
        state = self.state
        n = len(slots)
        i = self._idx
        skip = busy | self.down
        for _ in range(n):
            ev = slots[i]
            i += 1
            if i == n:
                i = 0
            st = state[ev]
            if st is GOOD:
                if skip and skip >> (ev & 15) & 1:
                    continue
                self._idx = i
                return ev
            if st is SKIP:
                state[ev] = GOOD
        if busy and self.usable:
            return -1
        # Nothing usable (everything denied or bad and the floor is 0): keep sending
        # on the rotation anyway rather than stall; the RTO bounds the damage.
        ev = slots[i]
        self._idx = i + 1 if i + 1 < n else 0
        return ev

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
        st = self.state.get(ev)
        if st is GOOD:
            self.state[ev] = SKIP
            self.stats_skips += 1
        elif st is None:
            return
        rate = self.ecn_rate.get(ev, 0.0)
        rate += (1.0 - rate) * ECN_RATE_GAIN
        self._ecn_sum += rate - self.ecn_rate.get(ev, 0.0)
        self.ecn_rate[ev] = rate
        run = self.ecn_run.get(ev, 0) + 1
        self.ecn_run[ev] = run
        if run < ECN_REMAP_RUN or ev not in self.in_slots or st is BAD or st is DENIED:
            return
        n = len(self.ecn_rate) - 1
        if n > 0 and (self._ecn_sum - rate) / n >= ECN_OTHERS_MAX:
            return  # the whole QP is marked: congestion for NSCC, not an imbalance
        self.ecn_run[ev] = 0
        self._remap_ecn(ev, now)

    def on_clean_ack(self, ev: int) -> None:
        """An ACK for ``ev`` without an ECN echo: its run of marks is over."""
        rate = self.ecn_rate.get(ev)
        if rate is None:
            if ev in self.in_slots:
                self.ecn_rate[ev] = 0.0
            return
        self.ecn_run.pop(ev, None)
        new = rate * (1.0 - ECN_RATE_GAIN)
        self._ecn_sum += new - rate
        self.ecn_rate[ev] = new

    def on_trim(self, ev: int) -> None:
        """A trim away from the last hop: skip ``ev`` for one rotation."""
        if self.state.get(ev) is GOOD:
            self.state[ev] = SKIP
            self.stats_skips += 1

    def _forget_ecn(self, ev: int) -> None:
        rate = self.ecn_rate.pop(ev, None)
        if rate is not None:
            self._ecn_sum -= rate
        self.ecn_run.pop(ev, None)

    def _remap_ecn(self, ev: int, now: int) -> None:
        """Swap ``ev`` for a backup of its plane; ``ev`` stays GOOD, back in the pool."""
        pool = self.backups.get(ev_plane(ev))
        while pool:
            candidate = pool.popleft()
            if self.state.setdefault(candidate, GOOD) is not GOOD or candidate in self.in_slots:
                continue
            self.slots[self.slots.index(ev)] = candidate
            self.in_slots.discard(ev)
            self.in_slots.add(candidate)
            if self.state[ev] is SKIP:
                self.state[ev] = GOOD
            pool.append(ev)
            self._forget_ecn(ev)
            self.stats_ecn_remaps += 1
            self.events.append(EVEvent(now, self.qpn, ev, GOOD, GOOD, "mapped out: ECN"))
            return

    def on_loss(self, ev: int, now: int, reason: str) -> None:
        """A packet on ``ev`` was lost without a trim (or timed out): ASSUMED_BAD.

        Not when ``ev``'s plane has a port down (here or at the peer): the port
        status explains the loss, and the plane's EVs are out of use already."""
        st = self.state.get(ev)
        if st is None or st is BAD or st is DENIED or self.down >> (ev & 15) & 1:
            return
        in_slot = ev in self.in_slots
        if in_slot and self.usable <= self.profile.floor:
            self.stats_floor_hits += 1
            return
        self._set(ev, BAD, now, reason)
        self.stats_bad += 1
        self.probing[ev] = 0
        due = now + self.profile.probe_interval_ps
        self.probe_due[ev] = due
        self.probe_backoff[ev] = 0
        if self.next_probe_at is None or due < self.next_probe_at:
            self.next_probe_at = due
        if in_slot:
            self.usable -= 1
            self._replace(ev, now)

    def _replace(self, bad_ev: int, now: int) -> None:
        plane = ev_plane(bad_ev)
        pool = self.backups.get(plane)
        if not pool:
            return
        if self.plane_looks_down(plane):
            return  # keep its backups for when it returns
        while pool:
            candidate = pool.popleft()
            if self.state.setdefault(candidate, GOOD) is GOOD:
                self._forget_ecn(bad_ev)
                self.slots[self.slots.index(bad_ev)] = candidate
                self.in_slots.discard(bad_ev)
                self.in_slots.add(candidate)
                self.usable += 1
                self.stats_replacements += 1
                return

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
            return True
        return False

    def plane_looks_down(self, plane: int) -> bool:
        """True once the plane has as many ASSUMED_BAD EVs (active or replaced,
        not yet recovered) as ``plane_down_fraction`` of its active EVs: then
        its bad EVs are no longer replaced, since with a plane-wide failure
        every backup drawn would only lose another packet."""
        active = sum(1 for ev in self.slots if ev_plane(ev) == plane)
        bad = sum(1 for ev in self.probing if ev_plane(ev) == plane)
        return bad > 1 and bad >= self.profile.plane_down_fraction * active

    def _set(self, ev: int, new: EVState, now: int, reason: str) -> None:
        old = self.state[ev]
        self.state[ev] = new
        self.events.append(EVEvent(now, self.qpn, ev, old, new, reason))

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
        """A probe on ``ev`` came back: after enough in a row, the EV is GOOD again."""
        if self.probe_wait.get(ev) != seq:
            return
        del self.probe_wait[ev]
        count = self.probing.get(ev)
        if count is None:
            return
        self.probe_backoff[ev] = 0
        count += 1
        if count < self.profile.probe_successes:
            self.probing[ev] = count
            return
        del self.probing[ev]
        del self.probe_due[ev], self.probe_backoff[ev]
        self._set(ev, GOOD, now, "probes answered")
        self.stats_recovered += 1
        if ev in self.in_slots:
            self.usable += 1
        else:
            self.backups.setdefault(ev_plane(ev), deque()).append(ev)
        if not self.probing:
            self.next_probe_at = None

    # -- administration -----------------------------------------------------------
    def deny(self, ev: int, now: int) -> None:
        """Take ``ev`` out of use (controller deny list)."""
        st = self.state.get(ev)
        if st is None:
            pool = self.backups.get(ev_plane(ev))
            if not isinstance(pool, BackupPool) or ev not in pool:
                raise InvalidArgument(f"ev: {ev:#x} is not in this QP's EV set")
            pool.reserve(ev)  # a backup not drawn yet: it never will be
            self.state[ev] = GOOD
            st = GOOD
        if st is DENIED:
            return
        if st is not BAD and ev in self.in_slots:
            self.usable -= 1
        self.probing.pop(ev, None)
        self.probe_wait.pop(ev, None)
        self.probe_due.pop(ev, None)
        self.probe_backoff.pop(ev, None)
        self._set(ev, DENIED, now, "denied")

    def allow(self, ev: int, now: int) -> None:
        """Return a denied ``ev`` to use."""
        if self.state.get(ev) is not DENIED:
            raise InvalidArgument(f"ev: {ev:#x} is not denied")
        self._set(ev, GOOD, now, "allowed")
        if ev in self.in_slots:
            self.usable += 1

    def counts(self) -> dict[str, int]:
        """How many active EVs are in each state."""
        out = {s.name: 0 for s in EVState}
        for ev in self.slots:
            out[self.state[ev].name] += 1
        return out
