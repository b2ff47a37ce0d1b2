"""Fault localisation by self-probes, as the paper's Clustermapper does (section 3).

Every host runs an agent that, every ``interval_ps`` and in every plane, sends
probes by source route (SRv6 uSIDs) *to itself*: up to its T0 and straight
back down (``T0(p,a) | DOWN(p,d)``), and through a subset of the T1s and
back (``T0(p,a) | T1(p,k) | T0(p,a) | DOWN(p,d)``).  The subsets are chosen so
that the hosts of each T0 together cover every T1, so every T0-T1 link is
probed.  A probe not back within ``interval_ps`` is lost.  There is no
ambiguity about the path a probe took (no ECMP, no dynamic routing) and no
remote node has to be up, so which probes fail says where the fault is:

================================  =================================================
what fails (per plane)            element named
================================  =================================================
one host's T0 probes              its NIC-T0 link (``h3-p1t0x0``)
every host's T0 probes under a T0 the T0 switch (``p1t0x0``)
T1 ``k`` probes from one T0 only   the T0-T1 link (``p1t0x0-p1t1x2``)
T1 ``k`` probes from every T0      the T1 switch (``p1t1x2``): down or up-but-silent
some (not most) of a host's T0     a lossy NIC-T0 link (kind ``lossy_nic_t0_link``);
probes                            with ``deny_lossy`` the host's controller denies
                                  that plane (MRC itself cannot tell whether loss
                                  on a plane is at its end or the far end: paper 4)
================================  =================================================

Verdicts use the last ``window`` rounds per probe target: it *fails* when
its loss rate is at least ``fail_rate`` (0.5) or the last two rounds lost
every probe (four or more); it is *lossy* when its loss rate is at least ``lossy_rate`` over
two or more rounds without the last round being a total loss (that may be
the start of a failure: the verdict waits a round).  A T0 whose hosts all
fail is named only when it has two or more probing hosts (with one, a NIC-T0
link and a T0 failure look the same; it is then named as the link).  Each
element is reported once, when first localised (``time_ps``), and again with
``cleared_ps`` when its probes succeed again.

The simulator delivers these probes with :class:`~openmrc.wire.packets.ProbePacket`
objects addressed to QPN 0 (no QP): the host hands them to this agent instead of
its transport core.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..topology import KIND_DOWN, Topology, pack_address, usid
from ..wire.packets import ProbePacket

if TYPE_CHECKING:
    from .experiment import Experiment

#: The destination QPN of self-probes (no QP has it: QPNs start at 0x100).
PROBE_QPN = 0


@dataclass(frozen=True)
class ClustermapperConfig:
    """How often and how widely hosts self-probe, and the verdict thresholds."""

    interval_ps: int = 20_000_000
    #: T1s each host probes per plane (None: enough for its T0 to cover all).
    t1_subset: int | None = None
    #: T0 probes per host, plane and round (more samples for lossy-link verdicts).
    t0_probes: int = 4
    #: Probes per host, plane, probed T1 and round.
    t1_probes: int = 2
    window: int = 8
    fail_rate: float = 0.5
    lossy_rate: float = 0.05
    #: Deny a plane (controller, EV profile 0) at a host whose NIC-T0 link is lossy.
    deny_lossy: bool = False
    start_ps: int = 0
    #: Last round at or before this time; None: while the experiment has flows to run.
    stop_ps: int | None = None

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        for name in ("interval_ps", "t0_probes", "t1_probes", "window"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"clustermapper.{name}: must be a positive int, got {v!r}")
        if self.t1_subset is not None and (
            not isinstance(self.t1_subset, int) or self.t1_subset < 1
        ):
            raise ValueError(
                f"clustermapper.t1_subset: must be a positive int, got {self.t1_subset!r}"
            )
        for name in ("fail_rate", "lossy_rate"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v <= 1:
                raise ValueError(f"clustermapper.{name}: must be in (0, 1], got {v!r}")
        if not isinstance(self.deny_lossy, bool):
            raise ValueError(
                f"clustermapper.deny_lossy: must be true or false, got {self.deny_lossy!r}"
            )
        if self.stop_ps is not None and (not isinstance(self.stop_ps, int) or self.stop_ps < 0):
            raise ValueError(
                f"clustermapper.stop_ps: must be a non-negative int, got {self.stop_ps!r}"
            )
        if not isinstance(self.start_ps, int) or self.start_ps < 0:
            raise ValueError(
                f"clustermapper.start_ps: must be a non-negative int, got {self.start_ps!r}"
            )


class Clustermapper:
    """Self-probing agents on every host of an experiment, and the central verdicts."""

    def __init__(self, exp: Experiment, config: ClustermapperConfig | None = None) -> None:
        self.exp = exp
        self.config = config or ClustermapperConfig()
        self.config.validate()
        spec = exp.spec
        self.topology: Topology = exp.fabric.topology
        hpt = spec.hosts_per_t0
        subset = self.config.t1_subset or max(1, -(-spec.t1s // hpt))
        self.subset = min(subset, spec.t1s)
        #: host -> the T1s it probes (the hosts of a T0 cover every T1 together).
        self.t1s_of = {
            h: sorted({((h % hpt) * self.subset + j) % spec.t1s for j in range(self.subset)})
            for h in range(spec.hosts)
        }
        self._seq = 1
        #: seq -> (host, plane, target) for probes in flight; target -1 = T0, else T1 k.
        self._inflight: dict[int, tuple[int, int, int]] = {}
        #: (host, plane, target) -> recent outcomes (True = came back), last ``window`` rounds.
        self._hist: dict[tuple[int, int, int], deque[tuple[int, int]]] = {}
        self._round: dict[tuple[int, int, int], list[int]] = {}
        #: element name -> its report (kind, name, plane, time_ps, cleared_ps).
        self.found: dict[str, dict[str, Any]] = {}
        self.denied: set[tuple[int, int]] = set()
        self.probes_sent = 0
        self.probes_back = 0
        for host in exp.hosts:
            host.probe_sink = self._on_probe
        exp.sim.schedule(self.config.start_ps, self._round_start)

    # -- probing ---------------------------------------------------------------------
    def _route(self, h: int, plane: int, k: int) -> int:
        topo = self.topology
        spec = topo.spec
        a, d = divmod(h, spec.hosts_per_t0)
        t0 = topo.usid_of(topo.t0_name(plane, a))
        down = usid(KIND_DOWN, plane, d)
        if k < 0:
            return pack_address([t0, down])
        return pack_address([t0, topo.usid_of(topo.t1_name(plane, k)), t0, down])

    def _round_start(self) -> None:
        now = self.exp.sim.now
        self._close_round(now)
        cfg = self.config
        spec = self.exp.spec
        for host in self.exp.hosts:
            h = host.index
            for plane in range(spec.planes):
                targets = [-1] * cfg.t0_probes + self.t1s_of[h] * cfg.t1_probes
                for k in targets:
                    seq = self._seq
                    self._seq += 1
                    pkt = ProbePacket(PROBE_QPN, plane, seq, now)
                    pkt.route = self._route(h, plane, k)
                    self._inflight[seq] = (h, plane, k)
                    rnd = self._round.setdefault((h, plane, k), [0, 0])
                    rnd[0] += 1
                    self.probes_sent += 1
                    host.ports[plane].enqueue(pkt)
        nxt = now + cfg.interval_ps
        if cfg.stop_ps is not None:
            if nxt <= cfg.stop_ps:
                self.exp.sim.schedule(nxt, self._round_start)
        elif any(f.status in ("not started", "running") for f in self.exp.flows):
            self.exp.sim.schedule(nxt, self._round_start)

    def _on_probe(self, host: int, pkt: object, now: int) -> None:
        if type(pkt) is not ProbePacket:
            return
        item = self._inflight.pop(pkt.seq, None)
        if item is None or item[0] != host:
            return
        self.probes_back += 1
        self._round[item][1] += 1

    # -- verdicts --------------------------------------------------------------------
    def _close_round(self, now: int) -> None:
        self._inflight.clear()  # whatever is not back after a whole interval is lost
        window = self.config.window
        for key, (sent, back) in self._round.items():
            hist = self._hist.setdefault(key, deque(maxlen=window))
            hist.append((sent, back))
        self._round = {}
        if self._hist:
            self._localise(now)

    def _verdict(self, h: int, plane: int, k: int) -> str | None:
        """ "fail", "lossy", "ok", or None (no data yet) for one probe target."""
        hist = self._hist.get((h, plane, k))
        if not hist:
            return None
        sent = sum(s for s, _ in hist)
        back = sum(b for _, b in hist)
        if not sent:
            return None
        rate = 1 - back / sent
        dead = [s > 0 and b == 0 for s, b in hist]
        recent = sum(s for s, _ in list(hist)[-2:])
        if rate >= self.config.fail_rate or (
            len(dead) >= 2 and dead[-1] and dead[-2] and recent >= 4
        ):
            return "fail"
        if dead[-1]:
            return None  # maybe the start of a failure: wait for the next round
        if rate >= self.config.lossy_rate and sum(1 for s, b in hist if b < s) >= 2:
            return "lossy"
        return "ok"

    def _localise(self, now: int) -> None:
        cfg = self.config
        spec = self.exp.spec
        topo = self.topology
        hpt = spec.hosts_per_t0
        current: dict[str, tuple[str, int, int | None]] = {}  # name -> (kind, plane, host)
        for plane in range(spec.planes):
            t0_ok: dict[int, bool] = {}
            for a in range(spec.t0s):
                hosts = range(a * hpt, (a + 1) * hpt)
                v0 = {h: self._verdict(h, plane, -1) for h in hosts}
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
                failing_t0s, probed_t0s = set(), set()
                for h in range(spec.hosts):
                    if k not in self.t1s_of[h] or not t0_ok.get(h):
                        continue
                    v = self._verdict(h, plane, k)
                    if v is None:
                        continue
                    a = h // hpt
                    probed_t0s.add(a)
                    if v == "fail":
                        failing_t0s.add(a)
                if not failing_t0s:
                    continue
                if failing_t0s == probed_t0s and len(probed_t0s) > 1:
                    current[topo.t1_name(plane, k)] = ("t1", plane, None)
                else:
                    for a in sorted(failing_t0s):
                        name = topo.link_between(
                            topo.t0_name(plane, a), topo.t1_name(plane, k)
                        ).name
                        current[name] = ("t0_t1_link", plane, None)
        for name, (kind, plane, host) in current.items():
            rep = self.found.get(name)
            if rep is None or rep["cleared_ps"] is not None:
                self.found[name] = {
                    "kind": kind,
                    "element": name,
                    "plane": plane,
                    "time_ps": now,
                    "cleared_ps": None,
                }
                if kind == "lossy_nic_t0_link" and cfg.deny_lossy and host is not None:
                    self._deny(host, plane, now)
        for name, rep in self.found.items():
            if rep["cleared_ps"] is None and name not in current:
                rep["cleared_ps"] = now

    def _deny(self, host: int, plane: int, now: int) -> None:
        if (host, plane) in self.denied:
            return
        self.denied.add((host, plane))
        self.exp.controller(host).deny_plane(0, plane, now)
        self.exp.fabric.metrics.record_fault("clustermapper_deny_plane", f"h{host}", plane=plane)

    def report(self) -> list[dict[str, Any]]:
        """What was localised, in order of first localisation (times in us and ps)."""
        out = []
        for rep in sorted(self.found.values(), key=lambda r: (r["time_ps"], r["element"])):
            row = dict(rep)
            row["time_us"] = rep["time_ps"] / 1e6
            row["cleared_us"] = None if rep["cleared_ps"] is None else rep["cleared_ps"] / 1e6
            out.append(row)
        return out
