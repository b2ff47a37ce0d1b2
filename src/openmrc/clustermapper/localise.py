"""Fault localisation from self-probes: the decision part of the paper's Clustermapper.

Every host probes, by source route, *to itself*: up to its T0 and straight
back down (``T0(p,a) | DOWN(p,d)``), and through a subset of the T1s and back
(``T0(p,a) | T1(p,k) | T0(p,a) | DOWN(p,d)``), in every plane.  The static
uSID tables already carry both shapes (a T0 has a route for each of its
downlink uSIDs, a T1 one for each T0), so no extra route is needed.  The
subsets are chosen so that the hosts of each T0 together cover every T1:
every T0-T1 link is probed.  With no ECMP and no dynamic routing a probe's
path is exact, and no remote node has to be up, so which probes fail says
where the fault is:

================================  =================================================
what fails (per plane)            element named
================================  =================================================
one host's T0 probes              its NIC-T0 link (``h3-p1t0x0``)
every host's T0 probes under a T0 the T0 switch (``p1t0x0``)
T1 ``k`` probes from one T0 only   the T0-T1 link (``p1t0x0-p1t1x2``)
T1 ``k`` probes from every T0      the T1 switch (``p1t1x2``): down or up-but-silent
some (not most) of a host's T0     a lossy NIC-T0 link (kind ``lossy_nic_t0_link``)
probes
some of T1 ``k`` probes from one   a lossy T0-T1 link (kind ``lossy_t0_t1_link``)
T0 only
some of T1 ``k`` probes from every a lossy T1 (kind ``lossy_t1``)
T0
================================  =================================================

Verdicts use the last ``window`` rounds per probe target.  It *fails* when
its loss rate over a whole window is at least ``fail_rate`` (0.9: nearly
nothing gets through), or
when its trailing run of totally lost rounds holds ``n`` probes, at least
:data:`MIN_DEAD_PROBES`, that the target's loss rate ``p`` in the window's
rounds before the run (Laplace's estimate: one loss and one success added)
would explain only by rare chance: ``p ** n`` at most :data:`FAIL_CHANCE`.
So a link clean for five rounds that stops answering fails after four lost
probes (two rounds of two), as before; a link that was already losing some
probes must lose many more in a row; and a target already judged *lossy*
fails only by losing ``fail_rate`` of a whole window (a 20 % lossy link
loses 36 % of its probes, which cross it twice: 15 of 16 lost by chance is
about 2e-6 per round).
A target that never had a probe back (lost since its first round, as in a
one-shot ``lab localise``) fails at once; should it be a lossy link after all,
the next rounds' partial losses change its verdict and its reported kind.
It is *lossy* when its loss rate is at least ``lossy_rate`` and two or more
rounds lost some, not all, of their probes (rounds that lost everything are
a failure's, not a lossy link's: a repaired link is not called lossy while its
dead rounds age out of the window); once lossy it stays lossy until a whole
window comes back clean (no flicker between named and cleared on a lossy
link's quiet rounds).  While the last round is a total loss that is not yet a failure, the
target keeps its previous verdict (it may be the start of a failure, or a
lossy link's bad round: wait and see).  Before, a 20 % lossy T0-T1 link was
named by chance, as failed, after 57 to 95 rounds (8 seeds) when its window's
loss crossed 0.5; and there was no lossy verdict for T0-T1 links at all.

A T0 whose hosts all fail is named only when it has two or more probing
hosts (with one, a NIC-T0 link and a T0 failure look the same; it is then
named as the link).  Each element is reported once, when first localised,
and again with ``cleared_ps`` when its probes succeed again (or anew when its
kind changes, say from failed to lossy).

This module is pure (no clock, no I/O): :class:`Localiser` takes the probe
counts of each round and names elements.  The simulator
(:mod:`openmrc.clustermapper.sim_agent`) and the lab (:mod:`openmrc.clustermapper.lab_agent`)
both send the probes their own way and share this logic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from openmrc.topology import KIND_DOWN, Topology, pack_address, usid

#: Probe target of the "to my T0 and back" probes (T1 probes use the T1's index).
T0_TARGET = -1

#: Element kinds, as reported.
KINDS = (
    "nic_t0_link",
    "t0",
    "t0_t1_link",
    "t1",
    "lossy_nic_t0_link",
    "lossy_t0_t1_link",
    "lossy_t1",
)

#: A trailing run of totally lost rounds names a failure only with at least this
#: many probes (two rounds of two: one unlucky round is not a failure).
MIN_DEAD_PROBES = 4
#: ...and only when the target's loss rate before the run, ``p``, would give a run
#: of ``n`` lost probes with probability ``p ** n`` at most this (1 in 10,000
#: rounds: a lossy link is not named as failed by a run of bad luck).
FAIL_CHANCE = 1e-4


@dataclass(frozen=True)
class Finding:
    """An element newly localised in a round: what, which plane, and the probing host
    whose NIC-T0 link it is (None for switches and T0-T1 links)."""

    kind: str
    element: str
    plane: int
    host: int | None


def t1_subsets(topology: Topology, t1_subset: int | None = None) -> dict[int, list[int]]:
    """Host -> the T1s it probes in every plane.

    Each host probes ``t1_subset`` T1s (default: just enough for the hosts of
    one T0 to cover all T1s together); host ``d`` of a T0 takes T1s
    ``d*subset .. d*subset+subset-1`` (mod ``t1s``).
    """
    spec = topology.spec
    hpt = spec.hosts_per_t0
    subset = min(t1_subset or max(1, -(-spec.t1s // hpt)), spec.t1s)
    return {
        h: sorted({((h % hpt) * subset + j) % spec.t1s for j in range(subset)})
        for h in range(spec.hosts)
    }


def self_probe_usids(topology: Topology, h: int, plane: int, target: int) -> list[int]:
    """The uSIDs of host ``h``'s self-probe in ``plane``: to its T0 and back
    (``target`` :data:`T0_TARGET`) or through T1 ``target`` and back."""
    spec = topology.spec
    a, d = divmod(h, spec.hosts_per_t0)
    t0 = topology.usid_of(topology.t0_name(plane, a))
    down = usid(KIND_DOWN, plane, d)
    if target < 0:
        return [t0, down]
    return [t0, topology.usid_of(topology.t1_name(plane, target)), t0, down]


def self_probe_address(topology: Topology, h: int, plane: int, target: int) -> int:
    """The 128-bit destination of that self-probe (see :func:`self_probe_usids`)."""
    return pack_address(self_probe_usids(topology, h, plane, target))


class Localiser:
    """Per-target probe history over rounds, the verdicts, and the elements named.

    A driver calls :meth:`sent` and :meth:`back` as probes leave and return
    (each probe belongs to ``(host, plane, target)``), then :meth:`close_round`
    once a round's probes have had their time.  :attr:`found` / :meth:`report`
    hold what was localised.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        t1_subset: int | None = None,
        window: int = 8,
        fail_rate: float = 0.9,
        lossy_rate: float = 0.05,
    ) -> None:
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window: must be a positive int, got {window!r}")
        if t1_subset is not None and (
            not isinstance(t1_subset, int) or isinstance(t1_subset, bool) or t1_subset < 1
        ):
            raise ValueError(f"t1_subset: must be a positive int, got {t1_subset!r}")
        for name, v in (("fail_rate", fail_rate), ("lossy_rate", lossy_rate)):
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v <= 1:
                raise ValueError(f"{name}: must be in (0, 1], got {v!r}")
        self.topology = topology
        self.window = window
        self.fail_rate = fail_rate
        self.lossy_rate = lossy_rate
        #: host -> the T1s it probes (the hosts of a T0 cover every T1 together).
        self.t1s_of = t1_subsets(topology, t1_subset)
        self._hist: dict[tuple[int, int, int], deque[tuple[int, int]]] = {}
        self._round: dict[tuple[int, int, int], list[int]] = {}
        #: each target's verdict as of the last closed round.
        self._verdicts: dict[tuple[int, int, int], str | None] = {}
        #: element name -> its report (kind, element, plane, time_ps, cleared_ps).
        self.found: dict[str, dict[str, Any]] = {}
        self.rounds = 0

    def targets(self, h: int, t0_probes: int, t1_probes: int) -> list[int]:
        """One round's probe targets of host ``h`` in a plane (repeats = several probes)."""
        return [T0_TARGET] * t0_probes + self.t1s_of[h] * t1_probes

    # -- counting ------------------------------------------------------------------
    def sent(self, h: int, plane: int, target: int) -> None:
        """A probe of ``(h, plane, target)`` left in the current round."""
        self._round.setdefault((h, plane, target), [0, 0])[0] += 1

    def back(self, h: int, plane: int, target: int) -> None:
        """A probe of ``(h, plane, target)`` sent in the current round came back."""
        rnd = self._round.get((h, plane, target))
        if rnd is not None and rnd[1] < rnd[0]:
            rnd[1] += 1

    def close_round(self, now: int) -> list[Finding]:
        """End the round (whatever is not back is lost), localise; return new findings."""
        for key, (sent, back) in self._round.items():
            self._hist.setdefault(key, deque(maxlen=self.window)).append((sent, back))
        self._round = {}
        self.rounds += 1
        if not self._hist:
            return []
        verdicts = self._verdicts
        for key, hist in self._hist.items():
            v = self._judge(hist, verdicts.get(key))
            if v != "wait":
                verdicts[key] = v
        return self._update(self.current(), now)

    # -- verdicts --------------------------------------------------------------------
    def verdict(self, h: int, plane: int, target: int) -> str | None:
        """ "fail", "lossy", "ok", or None (no data yet) for one target, as of
        the last closed round."""
        return self._verdicts.get((h, plane, target))

    def _clean(self, h: int, plane: int, target: int) -> bool:
        """Whether every probe of the target's window came back."""
        hist = self._hist.get((h, plane, target))
        return hist is not None and len(hist) > 0 and all(s == b for s, b in hist)

    def _judge(self, hist: deque[tuple[int, int]], last: str | None) -> str | None:
        """One target's verdict from its window and its ``last`` verdict (see the
        module docstring): "fail", "lossy", "ok", None (nothing sent), or
        "wait" (keep the last)."""
        sent = sum(s for s, _ in hist)
        back = sum(b for _, b in hist)
        if not sent:
            return None
        if len(hist) == self.window and 1 - back / sent >= self.fail_rate:
            return "fail"
        rounds = list(hist)
        dead = 0  # probes in the trailing run of totally lost rounds
        while rounds and rounds[-1][0] > 0 and rounds[-1][1] == 0:
            dead += rounds.pop()[0]
        if dead:
            before = sum(s for s, _ in rounds)
            if not before:
                return "fail"  # nothing ever came back (a one-shot ``lab localise``)
            if last == "lossy":
                return "wait"  # a lossy link fails only by losing nearly a whole window
            # The loss rate before the run, a little pessimistic on few probes
            # (Laplace's rule: one loss and one success more than seen).
            p = (before - sum(b for _, b in rounds) + 1) / (before + 2)
            if dead >= MIN_DEAD_PROBES and p**dead <= FAIL_CHANCE * (1 + 1e-9):
                return "fail"
            return "wait"  # the start of a failure, or a lossy link's bad round
        partial = sum(1 for s, b in hist if 0 < b < s)
        if partial >= 2 and 1 - back / sent >= self.lossy_rate:
            return "lossy"
        if last == "lossy" and back < sent:
            return "lossy"  # until a whole window comes back clean
        return "ok"

    def current(self) -> dict[str, tuple[str, int, int | None]]:
        """What the verdicts name now: element -> (kind, plane, host of a NIC-T0 link)."""
        topo = self.topology
        spec = topo.spec
        hpt = spec.hosts_per_t0
        current: dict[str, tuple[str, int, int | None]] = {}
        for plane in range(spec.planes):
            t0_ok: dict[int, bool] = {}
            for a in range(spec.t0s):
                hosts = range(a * hpt, (a + 1) * hpt)
                v0 = {h: self.verdict(h, plane, T0_TARGET) for h in hosts}
                failing = [h for h, v in v0.items() if v == "fail"]
                if len(failing) == len(hosts) and len(hosts) > 1:
                    current[topo.t0_name(plane, a)] = ("t0", plane, None)
                else:
                    for h in failing:
                        current[topo.host_link(h, plane).name] = ("nic_t0_link", plane, h)
                for h, v in v0.items():
                    t0_ok[h] = v == "ok"  # a lossy NIC link would blur its T1 probes
                    if v == "lossy":
                        current[topo.host_link(h, plane).name] = ("lossy_nic_t0_link", plane, h)
            # T1 probes, from hosts whose own NIC-T0 link and T0 are fine.
            for k in range(spec.t1s):
                failing_t0s: set[int] = set()
                lossy_t0s: set[int] = set()
                probed_t0s: set[int] = set()
                for h in range(spec.hosts):
                    if k not in self.t1s_of[h] or not t0_ok.get(h):
                        continue
                    v = self.verdict(h, plane, k)
                    if v is None:
                        continue
                    a = h // hpt
                    probed_t0s.add(a)
                    if v == "fail":
                        failing_t0s.add(a)
                    elif v == "lossy" and self._clean(h, plane, T0_TARGET):
                        # Only a host whose own T0 probes lost nothing in the window
                        # blames a T0-T1 link for partial loss: a lossy NIC-T0 link
                        # loses some T1 probes before its T0 verdict says so.
                        lossy_t0s.add(a)
                lossy_t0s -= failing_t0s
                for kind, t0s in (("", failing_t0s), ("lossy_", lossy_t0s)):
                    if not t0s:
                        continue
                    if t0s == probed_t0s and len(probed_t0s) > 1:
                        current[topo.t1_name(plane, k)] = (kind + "t1", plane, None)
                        continue
                    for a in sorted(t0s):
                        name = topo.link_between(topo.t0_name(plane, a), topo.t1_name(plane, k))
                        current[name.name] = (kind + "t0_t1_link", plane, None)
        return current

    def _update(self, current: dict[str, tuple[str, int, int | None]], now: int) -> list[Finding]:
        new: list[Finding] = []
        for name, (kind, plane, host) in current.items():
            rep = self.found.get(name)
            if rep is None or rep["cleared_ps"] is not None or rep["kind"] != kind:
                self.found[name] = {
                    "kind": kind,
                    "element": name,
                    "plane": plane,
                    "time_ps": now,
                    "cleared_ps": None,
                }
                new.append(Finding(kind, name, plane, host))
        for name, rep in self.found.items():
            if rep["cleared_ps"] is None and name not in current:
                rep["cleared_ps"] = now
        return new

    def report(self) -> list[dict[str, Any]]:
        """What was localised, in order of first localisation (times in us and ps)."""
        out = []
        for rep in sorted(self.found.values(), key=lambda r: (r["time_ps"], r["element"])):
            row = dict(rep)
            row["time_us"] = rep["time_ps"] / 1e6
            row["cleared_us"] = None if rep["cleared_ps"] is None else rep["cleared_ps"] / 1e6
            out.append(row)
        return out
