"""The per-node MRC controller: privileged, one per node, over the node's contexts.

MRC splits a QP's attributes in two: the application sets the verbs ones
(MPR, timeouts, retries); a privileged per-node controller owns the *profiles*
(the OCP MRC controller API, ``mrc_ctl.h``: learnt from, not copied).  Here:

* **EV and CC profiles** are objects with ids and a lifecycle: created
  OFFLINE (validated), brought ONLINE (only then can QPs use them, through
  :meth:`Controller.qp_attr`), taken OFFLINE again (new QPs refused, existing
  ones unaffected), destroyed only when no QP of the node uses them.
* **Deny / allow** of single EVs and of whole planes, per EV profile: one deny
  covers every QP of the node using that profile, now and created later.
  A denied plane's EVs leave the rotation as a down port's do.
* **Replace, set state, query** (``mrc_ctl_replace_ev``, ``modify_ev_state``,
  ``query_ev_state`` and the EV array of ``query_ev_profile``):
  :meth:`Controller.replace_ev` puts another EV of the same plane in an EV's
  slot in every QP of the profile (and in QPs made later),
  :meth:`Controller.set_ev_state` sets an EV GOOD (an ASSUMED_BAD one is back
  without probes) or DENIED, :meth:`Controller.query_ev_state` and
  :meth:`Controller.query_ev_array` read the states.  An openmrc QP draws its
  own EVs and keeps per-QP states, so the queries answer per QP.
* **An EV event queue** with a per-profile event mask (which new states are
  reported) and a bounded depth: an event that does not fit is counted in
  :attr:`Controller.events_dropped` and in the next delivered event's
  ``dropped`` field, never discarded silently.
* **Controller probes** to any destination on any EV, returning an RTT or a
  timeout, sans-IO: :meth:`Controller.probe` queues one, the driver sends what
  :meth:`Controller.probes_to_send` returns and reports answers with
  :meth:`Controller.on_probe_reply`; :meth:`Controller.handle_timer` times
  them out.  Results: :meth:`Controller.poll_probe_results`.
* **Port status**: :meth:`Controller.port_status` (the ports-down bitmap of a
  context) and :meth:`Controller.set_port_state` (what a NIC driver reports).

Contexts call :meth:`Controller.qp_ready` when a QP gets its EV set (RTR), so
the deny lists reach new QPs.  A driver that drains the contexts' event
queues itself hands each event to :meth:`Controller.deliver_event`.

``match_equal=True``: a QP whose EV profile object is not registered but
equals a registered one field by field counts as using it.  For drivers whose
QPs take their attributes from a peer's hello (``openmrc serve`` builds an
equal profile object per session): they then reference the node's profile,
as an OCP QP references a profile id.
"""

from __future__ import annotations

from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Final

from .attrs import CCProfile, EVProfile, QPAttr
from .errors import InvalidArgument, InvalidState
from .ev import ev_path, ev_plane, ev_spare
from .paths import EVEvent, EVState

if TYPE_CHECKING:
    from .context import Context
    from .qp import QueuePair

#: Event-mask bits: report transitions *to* this state.
EVENT_GOOD: Final = 1 << EVState.GOOD
EVENT_SKIP: Final = 1 << EVState.SKIP
EVENT_ASSUMED_BAD: Final = 1 << EVState.ASSUMED_BAD
EVENT_DENIED: Final = 1 << EVState.DENIED
#: The default mask: GOOD and ASSUMED_BAD transitions (what the OCP examples ask for).
DEFAULT_EVENT_MASK: Final = EVENT_GOOD | EVENT_ASSUMED_BAD


class ProfileState(Enum):
    """A profile's lifecycle state."""

    OFFLINE = "offline"
    ONLINE = "online"


@dataclass
class _EVEntry:
    profile_id: int
    profile: EVProfile
    state: ProfileState = ProfileState.OFFLINE
    event_mask: int = DEFAULT_EVENT_MASK
    denied_evs: set[int] = field(default_factory=set)
    denied_planes: int = 0
    #: replace_ev's replacements (old EV -> new), applied to QPs made later too.
    replaced: dict[int, int] = field(default_factory=dict)


@dataclass
class _CCEntry:
    profile_id: int
    profile: CCProfile
    state: ProfileState = ProfileState.OFFLINE


@dataclass(frozen=True, slots=True)
class ControllerEvent:
    """An EV event delivered by the controller: the profile it concerns, the
    transition, and how many events were dropped (queue full) just before it."""

    profile_id: int | None
    event: EVEvent
    dropped: int


@dataclass(frozen=True, slots=True)
class EVEntry:
    """One EV of one QP, as the controller's queries report it: the QP (its
    context's index in :attr:`Controller.contexts` and its QPN), its slot in
    the rotation (None: a backup or a denied EV out of the rotation), the EV
    and its state."""

    context: int
    qpn: int
    slot: int | None
    ev: int
    state: EVState


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """A controller probe for the driver to send: to ``dest`` on ``ev``."""

    probe_id: int
    dest: Any
    ev: int
    sent_at: int


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """A controller probe's outcome: ``rtt_ps`` or, on timeout, None."""

    probe_id: int
    dest: Any
    ev: int
    rtt_ps: int | None


class Controller:
    """The node's controller over ``contexts`` (see the module docstring)."""

    def __init__(
        self,
        contexts: list[Context] | tuple[Context, ...] = (),
        event_depth: int = 1024,
        *,
        match_equal: bool = False,
    ) -> None:
        if not isinstance(event_depth, int) or event_depth < 1:
            raise InvalidArgument(f"event_depth: must be a positive int, got {event_depth!r}")
        self.contexts: list[Context] = []
        self.match_equal = bool(match_equal)
        self._ev: dict[int, _EVEntry] = {}
        self._cc: dict[int, _CCEntry] = {}
        self.event_depth = event_depth
        self._events: deque[ControllerEvent] = deque()
        self._pending_drops = 0
        #: events that did not fit in the queue, in total.
        self.events_dropped = 0
        self._next_probe = 1
        self._outbox: list[ProbeRequest] = []
        self._probes: dict[int, tuple[ProbeRequest, int]] = {}  # id -> (request, deadline)
        self._results: deque[ProbeResult] = deque()
        for ctx in contexts:
            self.add_context(ctx)

    # -- contexts ------------------------------------------------------------------
    def add_context(self, ctx: Context) -> None:
        """Take charge of ``ctx`` (its QPs will report to this controller)."""
        if getattr(ctx, "controller", None) not in (None, self):
            raise InvalidState("context: already has another controller")
        ctx.controller = self
        if ctx not in self.contexts:
            self.contexts.append(ctx)
        for qp in ctx.qps.values():
            if qp.paths is not None:
                self.qp_ready(qp)

    # -- EV profiles ---------------------------------------------------------------
    def create_ev_profile(
        self, profile_id: int, profile: EVProfile, event_mask: int = DEFAULT_EVENT_MASK
    ) -> EVProfile:
        """Register ``profile`` under ``profile_id`` (OFFLINE until :meth:`set_ev_profile_online`)."""
        self._check_id("profile_id", profile_id)
        if profile_id in self._ev:
            raise InvalidArgument(f"profile_id: EV profile {profile_id} already exists")
        if not isinstance(profile, EVProfile):
            raise InvalidArgument("profile: must be an EVProfile")
        if any(e.profile is profile for e in self._ev.values()):
            raise InvalidArgument("profile: this EVProfile object is already registered")
        profile.validate()
        self._check_mask(event_mask)
        self._ev[profile_id] = _EVEntry(profile_id, profile, event_mask=event_mask)
        return profile

    def set_ev_profile_online(self, profile_id: int, online: bool = True) -> None:
        """ONLINE: QPs may use the profile; OFFLINE: no new QP may (existing ones keep it)."""
        self._ev_entry(profile_id).state = ProfileState.ONLINE if online else ProfileState.OFFLINE

    def ev_profile_state(self, profile_id: int) -> ProfileState:
        """The lifecycle state of an EV profile."""
        return self._ev_entry(profile_id).state

    def destroy_ev_profile(self, profile_id: int) -> None:
        """Forget an EV profile; refused while a QP of the node uses it."""
        entry = self._ev_entry(profile_id)
        if self.qps_using(profile_id):
            raise InvalidState(f"profile_id: EV profile {profile_id} is in use by QPs")
        del self._ev[entry.profile_id]

    def set_event_mask(self, profile_id: int, mask: int) -> None:
        """Which transitions (bits ``1 << EVState``) of this profile's EVs are reported."""
        self._check_mask(mask)
        self._ev_entry(profile_id).event_mask = mask

    # -- CC profiles ---------------------------------------------------------------
    def create_cc_profile(self, profile_id: int, profile: CCProfile) -> CCProfile:
        """Register a CC profile under ``profile_id`` (OFFLINE until brought online)."""
        self._check_id("profile_id", profile_id)
        if profile_id in self._cc:
            raise InvalidArgument(f"profile_id: CC profile {profile_id} already exists")
        if not isinstance(profile, CCProfile):
            raise InvalidArgument("profile: must be a CCProfile")
        profile.validate()
        self._cc[profile_id] = _CCEntry(profile_id, profile)
        return profile

    def set_cc_profile_online(self, profile_id: int, online: bool = True) -> None:
        """ONLINE: QPs may use the CC profile; OFFLINE: no new QP may."""
        self._cc_entry(profile_id).state = ProfileState.ONLINE if online else ProfileState.OFFLINE

    def destroy_cc_profile(self, profile_id: int) -> None:
        """Forget a CC profile; refused while a QP of the node uses it."""
        entry = self._cc_entry(profile_id)
        for ctx in self.contexts:
            for qp in ctx.qps.values():
                if qp.attr is not None and qp.attr.cc_profile is entry.profile:
                    raise InvalidState(f"profile_id: CC profile {profile_id} is in use by QPs")
        del self._cc[profile_id]

    def qp_attr(self, ev_profile_id: int, cc_profile_id: int, **verbs: Any) -> QPAttr:
        """QP attributes referencing two ONLINE profiles, plus verbs fields (mpr, timeout...)."""
        ev = self._ev_entry(ev_profile_id)
        cc = self._cc_entry(cc_profile_id)
        if ev.state is not ProfileState.ONLINE:
            raise InvalidState(f"ev_profile_id: EV profile {ev_profile_id} is not ONLINE")
        if cc.state is not ProfileState.ONLINE:
            raise InvalidState(f"cc_profile_id: CC profile {cc_profile_id} is not ONLINE")
        try:
            attr = QPAttr(ev_profile=ev.profile, cc_profile=cc.profile, **verbs)
        except TypeError as exc:
            raise InvalidArgument(f"verbs: {exc}") from None
        attr.validate()
        return attr

    def qps_using(self, profile_id: int) -> list[QueuePair]:
        """The node's QPs (with an EV set) that use this EV profile."""
        entry = self._ev_entry(profile_id)
        return [
            qp
            for ctx in self.contexts
            for qp in ctx.qps.values()
            if qp.paths is not None and self._entry_for(qp.paths.profile) is entry
        ]

    # -- deny / allow --------------------------------------------------------------
    def deny_ev(self, profile_id: int, ev: int, now: int = 0) -> None:
        """DENY ``ev`` for every QP using the profile (and those created later)."""
        entry = self._ev_entry(profile_id)
        self._check_ev_in_profile(entry, ev)
        entry.denied_evs.add(ev)
        for qp in self.qps_using(profile_id):
            self._deny_on(qp, ev, now)

    def allow_ev(self, profile_id: int, ev: int, now: int = 0) -> None:
        """Undo :meth:`deny_ev`."""
        entry = self._ev_entry(profile_id)
        if ev not in entry.denied_evs:
            raise InvalidArgument(f"ev: {ev:#x} is not denied in EV profile {profile_id}")
        entry.denied_evs.discard(ev)
        for qp in self.qps_using(profile_id):
            paths = qp.paths
            assert paths is not None
            if paths.state.get(ev) is EVState.DENIED:
                paths.allow(ev, now)

    def deny_plane(self, profile_id: int, plane: int, now: int = 0) -> None:
        """Take a whole plane out of use for every QP using the profile."""
        entry = self._ev_entry(profile_id)
        self._check_plane(entry, plane)
        entry.denied_planes |= 1 << plane
        for qp in self.qps_using(profile_id):
            assert qp.paths is not None
            qp.paths.set_ports_down(denied=entry.denied_planes)

    def allow_plane(self, profile_id: int, plane: int, now: int = 0) -> None:
        """Undo :meth:`deny_plane`."""
        entry = self._ev_entry(profile_id)
        self._check_plane(entry, plane)
        if not entry.denied_planes >> plane & 1:
            raise InvalidArgument(f"plane: {plane} is not denied in EV profile {profile_id}")
        entry.denied_planes &= ~(1 << plane)
        for qp in self.qps_using(profile_id):
            assert qp.paths is not None
            qp.paths.set_ports_down(denied=entry.denied_planes)

    # -- replace / set state / query (OCP: replace_ev, modify_ev_state, queries) ------
    def replace_ev(self, profile_id: int, ev: int, new_ev: int, now: int = 0) -> int:
        """In every QP of the profile whose active EVs include ``ev``, put
        ``new_ev`` in its slot (GOOD; ``ev`` keeps its state and, if GOOD,
        becomes a backup); QPs made later get the same replacement.  ``new_ev``
        must be in the profile (any 32-bit EV for an explicit one) and in the
        same plane as ``ev``.  Returns how many QPs changed."""
        entry = self._ev_entry(profile_id)
        self._check_ev_in_profile(entry, ev)
        if not isinstance(new_ev, int) or isinstance(new_ev, bool) or not 0 <= new_ev <= 0xFFFFFFFF:
            raise InvalidArgument(f"new_ev: must be a 32-bit EV, got {new_ev!r}")
        if entry.profile.explicit is None:
            try:
                self._check_ev_in_profile(entry, new_ev)
            except InvalidArgument as exc:
                raise InvalidArgument(f"new_{exc}") from None
        if ev_plane(new_ev) != ev_plane(ev):
            raise InvalidArgument(f"new_ev: {new_ev:#x} is not in the plane of {ev:#x}")
        if new_ev in entry.denied_evs:
            raise InvalidArgument(f"new_ev: {new_ev:#x} is denied in EV profile {profile_id}")
        for old, new in list(entry.replaced.items()):
            if new == ev:  # a chain: old -> ev -> new_ev
                entry.replaced[old] = new_ev
        entry.replaced[ev] = new_ev
        entry.replaced.pop(new_ev, None)
        changed = 0
        for qp in self.qps_using(profile_id):
            if self._replace_on(qp, ev, new_ev, now):
                changed += 1
        return changed

    def set_ev_state(self, profile_id: int, ev: int, state: EVState, now: int = 0) -> None:
        """Set ``ev``'s state in every QP of the profile: DENIED (as
        :meth:`deny_ev`) or GOOD (undoes a deny; an ASSUMED_BAD EV is back at
        once, without waiting for its probes, its flap history forgotten).  As
        OCP's ``modify_ev_state``, only those two states can be set."""
        entry = self._ev_entry(profile_id)
        self._check_ev_in_profile(entry, ev)
        if state is EVState.DENIED:
            self.deny_ev(profile_id, ev, now)
            return
        if state is not EVState.GOOD:
            raise InvalidArgument(f"state: only GOOD or DENIED can be set, got {state!r}")
        entry.denied_evs.discard(ev)
        for qp in self.qps_using(profile_id):
            assert qp.paths is not None
            if qp.paths.state.get(ev) is not None:
                qp.paths.force_good(ev, now)

    def query_ev_state(self, profile_id: int, ev: int) -> list[EVEntry]:
        """``ev``'s state in each QP of the profile that knows it (active, a
        backup drawn or listed, or denied)."""
        entry = self._ev_entry(profile_id)
        self._check_ev_in_profile(entry, ev)
        out = []
        for c, qp in self._qps_of(profile_id):
            assert qp.paths is not None
            st = qp.paths.state.get(ev)
            if st is not None:
                slots = qp.paths.slots
                slot = slots.index(ev) if ev in slots else None
                out.append(EVEntry(c, qp.qpn, slot, ev, st))
        return out

    def query_ev_array(self, profile_id: int) -> list[EVEntry]:
        """The active EVs and their states of every QP of the profile, slot by
        slot (QPs in context, then QPN order)."""
        out = []
        for c, qp in self._qps_of(profile_id):
            assert qp.paths is not None
            for slot, (ev, st) in enumerate(qp.paths.ev_array()):
                out.append(EVEntry(c, qp.qpn, slot, ev, st))
        return out

    def _qps_of(self, profile_id: int) -> list[tuple[int, QueuePair]]:
        """(context index, QP) of the profile's QPs, in context then QPN order."""
        qps = {id(qp) for qp in self.qps_using(profile_id)}
        return [
            (c, qp)
            for c, ctx in enumerate(self.contexts)
            for qp in sorted(ctx.qps.values(), key=lambda q: q.qpn)
            if id(qp) in qps
        ]

    @staticmethod
    def _replace_on(qp: QueuePair, ev: int, new_ev: int, now: int) -> bool:
        paths = qp.paths
        assert paths is not None
        if not paths.in_slot(ev) or paths.in_slot(new_ev):
            return False
        if paths.state.get(new_ev) is EVState.DENIED:
            return False
        paths.replace(ev, new_ev, now)
        return True

    def denied(self, profile_id: int) -> tuple[set[int], int]:
        """(denied EVs, denied-planes bitmask) of an EV profile."""
        entry = self._ev_entry(profile_id)
        return set(entry.denied_evs), entry.denied_planes

    def check_ev(self, profile_id: int, ev: int) -> None:
        """Raise :class:`InvalidArgument` unless ``ev`` belongs to the EV profile."""
        self._check_ev_in_profile(self._ev_entry(profile_id), ev)

    def check_plane(self, profile_id: int, plane: int) -> None:
        """Raise :class:`InvalidArgument` unless ``plane`` is one of the EV profile's."""
        self._check_plane(self._ev_entry(profile_id), plane)

    def has_ev_profile(self, profile: EVProfile) -> bool:
        """Whether this EVProfile object is registered here."""
        return self._entry_for(profile) is not None

    def qp_ready(self, qp: QueuePair) -> None:
        """A QP of one of the contexts got its EV set: apply its profile's deny lists."""
        entry = self._entry_for(qp.paths.profile if qp.paths is not None else None)
        if entry is None or qp.paths is None:
            return
        for ev, new_ev in entry.replaced.items():
            self._replace_on(qp, ev, new_ev, 0)
        for ev in entry.denied_evs:
            self._deny_on(qp, ev, 0)
        if entry.denied_planes:
            qp.paths.set_ports_down(denied=entry.denied_planes)

    # -- events ----------------------------------------------------------------------
    def collect_events(self) -> None:
        """Move the contexts' EV events into the controller's queue (mask, depth)."""
        for ctx in self.contexts:
            while (item := ctx.next_event()) is not None:
                self.deliver_event(ctx, item)

    def deliver_event(self, ctx: Context, item: object) -> None:
        """Queue one event taken from ``ctx``'s queue (EV events only; mask, depth).

        For drivers that drain ``ctx.events`` themselves; :meth:`collect_events`
        does the same for every context.
        """
        if not isinstance(item, EVEvent):
            return  # QP and port events are the application's
        qp = ctx.qps.get(item.qpn)
        entry = self._entry_for(qp.paths.profile if qp and qp.paths else None)
        mask = entry.event_mask if entry is not None else DEFAULT_EVENT_MASK
        if not mask >> item.new & 1:
            return
        if len(self._events) >= self.event_depth:
            self._pending_drops += 1
            self.events_dropped += 1
            return
        pid = entry.profile_id if entry is not None else None
        self._events.append(ControllerEvent(pid, item, self._pending_drops))
        self._pending_drops = 0

    def queued_events(self) -> int:
        """Events waiting in the queue."""
        return len(self._events)

    def event_mask(self, profile_id: int) -> int:
        """The event mask of an EV profile."""
        return self._ev_entry(profile_id).event_mask

    def ev_profile_ids(self) -> list[int]:
        """The ids of the registered EV profiles."""
        return sorted(self._ev)

    def poll_events(self, max_events: int = 64) -> list[ControllerEvent]:
        """Up to ``max_events`` queued EV events, oldest first (collects first)."""
        self.collect_events()
        out: list[ControllerEvent] = []
        while self._events and len(out) < max_events:
            out.append(self._events.popleft())
        return out

    # -- probes ----------------------------------------------------------------------
    def probe(self, dest: Any, ev: int, now: int, timeout_ps: int) -> int:
        """Queue a probe to ``dest`` on ``ev``; returns its id (result: RTT or timeout)."""
        if not isinstance(ev, int) or not 0 <= ev <= 0xFFFFFFFF:
            raise InvalidArgument(f"ev: must be a 32-bit EV, got {ev!r}")
        if not isinstance(timeout_ps, int) or timeout_ps <= 0:
            raise InvalidArgument(f"timeout_ps: must be a positive int, got {timeout_ps!r}")
        pid = self._next_probe
        self._next_probe += 1
        req = ProbeRequest(pid, dest, ev, now)
        self._outbox.append(req)
        self._probes[pid] = (req, now + timeout_ps)
        return pid

    def probes_to_send(self) -> list[ProbeRequest]:
        """The probes queued since the last call (the driver sends them)."""
        out, self._outbox = self._outbox, []
        return out

    def on_probe_reply(self, probe_id: int, now: int) -> None:
        """A probe's answer arrived (unknown or late ids are ignored)."""
        item = self._probes.pop(probe_id, None)
        if item is None:
            return
        req, _ = item
        self._results.append(ProbeResult(req.probe_id, req.dest, req.ev, now - req.sent_at))

    def get_timer(self) -> int | None:
        """The earliest probe deadline, or None."""
        return min((d for _, d in self._probes.values()), default=None)

    def handle_timer(self, now: int) -> None:
        """Time out the probes whose deadline passed."""
        for pid, (req, deadline) in list(self._probes.items()):
            if deadline <= now:
                del self._probes[pid]
                self._results.append(ProbeResult(pid, req.dest, req.ev, None))

    def poll_probe_results(self) -> list[ProbeResult]:
        """Every probe result not read yet, in completion order."""
        out = list(self._results)
        self._results.clear()
        return out

    # -- port status ---------------------------------------------------------------
    def port_status(self, ctx: Context) -> int:
        """The context's ports-down bitmap (bit p = plane p's port is down)."""
        self._check_ctx(ctx)
        return ctx.ports_down

    def set_port_state(self, ctx: Context, plane: int, up: bool, now: int = 0) -> None:
        """Report a port change of ``ctx`` (its QPs remap; its SACKs tell the peers)."""
        self._check_ctx(ctx)
        ctx.set_port_state(plane, up, now)

    # -- helpers -------------------------------------------------------------------
    @staticmethod
    def _check_id(name: str, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
            raise InvalidArgument(f"{name}: must be an int in 0..2^32-1, got {value!r}")

    @staticmethod
    def _check_mask(mask: Any) -> None:
        if not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < 1 << 4:
            raise InvalidArgument(f"event_mask: must be a bitmask of 1 << EVState, got {mask!r}")

    def _check_ctx(self, ctx: Context) -> None:
        if ctx not in self.contexts:
            raise InvalidArgument("ctx: not a context of this controller")

    def _ev_entry(self, profile_id: int) -> _EVEntry:
        entry = self._ev.get(profile_id)
        if entry is None:
            raise InvalidArgument(f"profile_id: no EV profile {profile_id!r}")
        return entry

    def _cc_entry(self, profile_id: int) -> _CCEntry:
        entry = self._cc.get(profile_id)
        if entry is None:
            raise InvalidArgument(f"profile_id: no CC profile {profile_id!r}")
        return entry

    def _entry_for(self, profile: EVProfile | None) -> _EVEntry | None:
        if profile is None:
            return None
        for entry in self._ev.values():
            if entry.profile is profile:
                return entry
        if self.match_equal:
            for entry in self._ev.values():
                if entry.profile == profile:
                    return entry
        return None

    @staticmethod
    def _check_plane(entry: _EVEntry, plane: Any) -> None:
        if not isinstance(plane, int) or isinstance(plane, bool):
            raise InvalidArgument(f"plane: must be an int, got {plane!r}")
        prof = entry.profile
        planes = (
            {ev_plane(ev) for ev in prof.explicit}
            if prof.explicit is not None
            else set(prof.plane_values())
        )
        if plane not in planes:
            raise InvalidArgument(f"plane: {plane} is not a plane of EV profile {entry.profile_id}")

    @staticmethod
    def _check_ev_in_profile(entry: _EVEntry, ev: Any) -> None:
        if not isinstance(ev, int) or isinstance(ev, bool) or not 0 <= ev <= 0xFFFFFFFF:
            raise InvalidArgument(f"ev: must be a 32-bit EV, got {ev!r}")
        prof = entry.profile
        if prof.explicit is not None:
            ok = ev in prof.explicit or ev in entry.replaced.values()
        else:
            ok = (
                ev_plane(ev) in prof.plane_values()
                and ev_path(ev) in prof.uplink_values()
                and ev_spare(ev) in prof.spare_values()
            )
        if not ok:
            raise InvalidArgument(f"ev: {ev:#x} is not in EV profile {entry.profile_id}")

    @staticmethod
    def _deny_on(qp: QueuePair, ev: int, now: int) -> None:
        paths = qp.paths
        assert paths is not None
        # An explicit profile's EV this QP has no slot or backup for: nothing to deny.
        with suppress(InvalidArgument):
            paths.deny(ev, now)
