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
some of T1 ``k`` probes from one   a lossy T0-T1 link (``lossy_t0_t1_link``)
T0 only
some of T1 ``k`` probes from every a lossy T1 (``lossy_t1``)
T0
================================  =================================================

Verdicts (fail, lossy, ok) use the last ``window`` rounds per probe target;
the rule and its constants are :mod:`openmrc.clustermapper.localise`'s: a failure is
a run of lost rounds the target's earlier loss cannot explain (four probes
after clean rounds), or ``fail_rate`` (0.9) of a whole window; lossy is
``lossy_rate`` with two or more rounds losing some, not all, probes.  A T0
whose hosts all fail is named only when it has two or more probing hosts
(with one, a NIC-T0 link and a T0 failure look the same; it is then named as
the link).  Each element is reported once, when first localised
(``time_ps``), and again with ``cleared_ps`` when its probes succeed again.

The verdicts and the naming live in :mod:`openmrc.clustermapper.localise` (shared
with the lab's :mod:`openmrc.clustermapper.lab_agent`); this module sends the probes.  The
simulator delivers them with :class:`~openmrc.wire.packets.ProbePacket`
objects addressed to QPN 0 (no QP): the host hands them to this agent instead of
its transport core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..topology import Topology
from ..transport.controller import Controller
from ..wire.packets import ProbePacket
from .localise import Localiser, self_probe_address


class ProbedExperiment(Protocol):
    """What :class:`Clustermapper` uses of the experiment it runs in
    (:class:`openmrc.sim.experiment.Experiment`, which owns it): a protocol, so the
    two modules do not import each other."""

    sim: Any
    spec: Any
    fabric: Any
    hosts: Any
    flows: Any
    clustermapper: Any

    def controller(self, host: int) -> Controller:
        """The per-node controller of ``host``."""
        ...

    def folded_open(self) -> bool:
        """Whether a folded collective still has a transfer that is not over."""
        ...


#: The destination QPN of self-probes (no QP has it: QPNs start at FIRST_QPN, 0x100).
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
    fail_rate: float = 0.9
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
    """Self-probing agents on every host of an experiment, and the central verdicts.

    The verdicts and the naming are :class:`openmrc.clustermapper.localise.Localiser`'s
    (shared with the lab's :mod:`openmrc.clustermapper.lab_agent`); this class sends the
    probes through the simulated fabric and counts what comes back.
    """

    def __init__(self, exp: ProbedExperiment, config: ClustermapperConfig | None = None) -> None:
        self.exp = exp
        self.config = config or ClustermapperConfig()
        self.config.validate()
        cfg = self.config
        self.topology: Topology = exp.fabric.topology
        self.localiser = Localiser(
            self.topology,
            t1_subset=cfg.t1_subset,
            window=cfg.window,
            fail_rate=cfg.fail_rate,
            lossy_rate=cfg.lossy_rate,
        )
        #: host -> the T1s it probes (the hosts of a T0 cover every T1 together).
        self.t1s_of = self.localiser.t1s_of
        self._seq = 1
        #: seq -> (host, plane, target) for probes in flight; target -1 = T0, else T1 k.
        self._inflight: dict[int, tuple[int, int, int]] = {}
        #: element name -> its report (kind, name, plane, time_ps, cleared_ps).
        self.found: dict[str, dict[str, Any]] = self.localiser.found
        self.denied: set[tuple[int, int]] = set()
        self.probes_sent = 0
        self.probes_back = 0
        for host in exp.hosts:
            host.probe_sink = self._on_probe
        exp.sim.schedule(self.config.start_ps, self._round_start)

    # -- probing ---------------------------------------------------------------------
    def _round_start(self) -> None:
        now = self.exp.sim.now
        self._close_round(now)
        cfg = self.config
        spec = self.exp.spec
        loc = self.localiser
        for host in self.exp.hosts:
            h = host.index
            for plane in range(spec.planes):
                for k in loc.targets(h, cfg.t0_probes, cfg.t1_probes):
                    seq = self._seq
                    self._seq += 1
                    pkt = ProbePacket(PROBE_QPN, plane, seq, now)
                    pkt.route = self_probe_address(self.topology, h, plane, k)
                    self._inflight[seq] = (h, plane, k)
                    loc.sent(h, plane, k)
                    self.probes_sent += 1
                    host.ports[plane].enqueue(pkt)
        nxt = now + cfg.interval_ps
        if cfg.stop_ps is not None:
            if nxt <= cfg.stop_ps:
                self.exp.sim.schedule(nxt, self._round_start)
        elif (
            any(f.status in ("not started", "running") for f in self.exp.flows)
            or self.exp.folded_open()
        ):
            self.exp.sim.schedule(nxt, self._round_start)

    def _on_probe(self, host: int, pkt: object, now: int) -> None:
        if type(pkt) is not ProbePacket:
            return
        item = self._inflight.pop(pkt.seq, None)
        if item is None or item[0] != host:
            return
        self.probes_back += 1
        self.localiser.back(*item)

    # -- verdicts --------------------------------------------------------------------
    def _close_round(self, now: int) -> None:
        self._inflight.clear()  # whatever is not back after a whole interval is lost
        for f in self.localiser.close_round(now):
            if f.kind == "lossy_nic_t0_link" and self.config.deny_lossy and f.host is not None:
                self._deny(f.host, f.plane, now)

    def _deny(self, host: int, plane: int, now: int) -> None:
        if (host, plane) in self.denied:
            return
        self.denied.add((host, plane))
        self.exp.controller(host).deny_plane(0, plane, now)
        self.exp.fabric.metrics.record_fault("clustermapper_deny_plane", f"h{host}", plane=plane)

    def report(self) -> list[dict[str, Any]]:
        """What was localised, in order of first localisation (times in us and ps)."""
        return self.localiser.report()


def enable_clustermapper(
    exp: ProbedExperiment, config: ClustermapperConfig | None = None
) -> Clustermapper:
    """Self-probe fault localisation on every host of ``exp`` (reported in its
    ``Result.localised``): the agents, attached as ``exp.clustermapper``."""
    exp.clustermapper = Clustermapper(exp, config)
    return exp.clustermapper
