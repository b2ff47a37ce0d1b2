"""Flow-level (fluid, max-min fair) model of the multi-plane Clos fabric, for training jobs.

The packet simulator moves every packet; one iteration of a large model moves
gigabytes per GPU, which is hours packet by packet.  This model moves rates
instead: every transfer is one or more *fluid flows* with fixed shares on the
fabric's resources, the rates are the max-min fair allocation (weighted
progressive filling) recomputed whenever the set of flows or a capacity
changes, and a flow's bytes drain at its rate.  It runs the task graphs of
:mod:`openmrc.workloads.jobs.graph` (compute spans take their time, transfers take what
the network gives them), several jobs at once, and faults as capacity changes.

Transports (docs/training.md, "Flow-level model"):

* ``mrc``: a flow sprays over all usable planes evenly and, in a plane, over
  all usable T1s.  The T0-T1 links of one T0 and one plane are one pooled
  resource (up and down separately): MRC's load-aware EV choice uses them as
  one pool.  A failure is seen ``detect_ps`` later (MRC's loss detection); in
  between, the share of a flow sprayed onto dead paths is lost.
* ``roce`` / ``ib``: a flow is ``qps`` QPs, each ECMP-hashed onto one path
  (QP ``i`` in plane ``i % planes``, a T1 by a hash of the connection), each
  carrying ``1/qps`` of the bytes.  A QP on a dead path keeps sending and
  everything it sends is lost; when routing converges (``convergence_ps``
  after the failure) the hash picks again among the live T1s and go-back-N
  resends what was lost; a QP that sent all its bytes before that waits for
  its retransmission timeout to rewind: NVIDIA's adaptive retransmission
  (first timeout 524 us or 1 ms, doubling up to the ACK timeout ``rto_ps``)
  as the packet baseline, or the fixed ``rto_ps`` up to ``retries`` times.
  Only its timeout wakes it: at packet level every transfer is a message on
  QPs of its own, so a later message NAKs nothing of it.  A ring's steps
  lost whole stall the ring until their timeout (``_stall_ring``).  QPs
  that meet in a congested switch queue get the mean share DCQCN leaves them over
  their transfer's length (:mod:`openmrc.flow.dcqcn`: cut at the first CNPs,
  stalled until the byte counter or the timer lifts the rate, then the fair share).
  A QP's ACKs, NAKs and CNPs take a reverse path of their own (``ack_hash``: the
  receiver's T0 hashes them): while it crosses a dead link DCQCN never cuts the QP
  (its CNPs are lost), and when routing brings it back the QP gets the DCQCN
  episode it missed on the bytes it has left.
* Scale-up: a transfer between two GPUs of one server moves over NVLink (a
  per-GPU out and in resource), never the fabric.

Capacities are payload rates (headers and framing off, as at packet level).
A ring collective's flow is paced by its chain of steps (``pace``) and ends
one one-way latency after its last byte drained; other transfers end one
latency after theirs.  With ``ring_messages`` (RoCE / IB; off by default) a
ring's steps are messages of their own instead, each released by the arrival
of the step before it, so a NIC port is shared per message as the packet
level's NIC shares it (round-robin over its ready QPs); with ``ring_weights``
(off by default) a ring's hop flow weighs as many flows as it has messages ready.  Rates are
computed by bottleneck rounds (``maxmin``) only for the flows a change reaches: those
connected to it through shared resources (``FluidModel.refill``); an instant's cost is
then that of the flows it touches, not of every flow in flight.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..baselines.roce import ROCE_DATA_HEADER_BYTES, DcqcnConfig, default_pfc_xoff_bytes
from ..sim.config import FabricConfig
from ..topology import ClosSpec
from ..wire.packets import DATA_HEADER_BYTES
from ..workloads.jobs.graph import JobGraph, Task
from .dcqcn import cnp_delay_ps, dcqcn_share

#: fault kinds the flow-level model applies.
FLUID_FAULTS = (
    "link_down",
    "link_up",
    "link_silent",
    "switch_down",
    "switch_up",
    "switch_blackhole",
    "nic_port_down",
    "nic_port_up",
)

#: silent failures: the wires drop everything but no link goes down, so routing (RoCE / IB)
#: withdraws a fabric link only at its hold timer and never sees a host link's.
SILENT_FAULTS = ("link_silent", "switch_blackhole")


@dataclass
class FluidJob:
    """A job graph on the fabric: rank ``r`` on host ``hosts[r]``, starting at ``start_ps``."""

    graph: JobGraph
    hosts: list[int]
    start_ps: int = 0
    #: a folded job (openmrc.flow.fold): task index -> ranks of the whole ring a ring
    #: collective stands for (its steps and each hop's bytes are the whole ring's; its
    #: hops are those of its own ranks).  Empty: every ring is its own ranks.
    ring_ranks: dict[int, int] = field(default_factory=dict)


@dataclass
class FluidFault:
    """A fault at ``at_ps``: a link (``target`` 'h5-p0t0x1' or 'p0t0x1-p0t1x3'),
    a switch (``target`` 'p0t1x3'), or a NIC port (``host``, ``plane``)."""

    at_ps: int
    kind: str
    target: str = ""
    host: int = -1
    plane: int = -1


@dataclass
class JobTimes:
    """When each task of a job started and ended (ps; None: never)."""

    start: list[float | None]
    end: list[float | None]


@dataclass
class FluidResult:
    """The outcome of a flow-level run."""

    jobs: list[JobTimes]
    end_ps: float
    events: int
    recomputes: int
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: flows whose rates the run computed, summed over its refills (the refills' work)
    refilled: int = 0
    #: when the first QP's retries ran out (its transfer never ends; None: none did)
    error_ps: float | None = None
    #: refill "component": the walks that found what a change reaches, and the flows
    #: they reached (the refills that reused the last component walked none)
    walks: int = 0
    walked: int = 0


#: a flow's resources and weights before it is routed (shared: never written in place)
_NO_RES = np.zeros(0, dtype=np.int64)
_NO_W = np.zeros(0)


class _Flow:
    __slots__ = (
        "buf",
        "conn",
        "cut",
        "dead",
        "dst",
        "eff",
        "episode",
        "gap",
        "grp",
        "held",
        "hold",
        "hop",
        "job",
        "lost",
        "missed",
        "msg",
        "mute",
        "oid",
        "path",
        "qp",
        "redo",
        "rem",
        "res",
        "ri",
        "rl",
        "rto",
        "src",
        "steps",
        "total",
        "transfer",
        "tries",
        "w",
        "waited",
        "wl",
        "wt",
    )

    def __init__(self, transfer: int, src: int, dst: int, size: float, job: int, qp: int) -> None:
        self.transfer = transfer
        self.src = src
        self.dst = dst
        self.rem = float(size)
        #: the job's index in the model: one connection per job and host pair (``conn``,
        #: its name in the ECMP draws), QP ``qp`` of it
        self.job = job
        self.conn = str(job)
        self.qp = qp
        self.eff = 1.0
        #: the rate the flow gets with its path to itself (bytes/ps; FluidModel._path_rate)
        self.path = 0.0
        #: a ring collective's flow moves its bytes in ``steps`` steps, each waiting ``gap``
        #: (one fabric latency) for the previous rank's step to arrive (FluidModel.pace)
        self.total = float(size)
        self.steps = 1
        self.gap = 0.0
        #: the resource group: flows of two groups never share a resource (FluidModel._group)
        self.grp = 0
        #: a ring's hop (rank ``hop`` to ``hop + 1``); bytes it may not send yet (the ring
        #: is stalled behind a lost step); whether it resends a ring's lost steps
        self.hop = 0
        #: a ring's step sent as a message of its own (``FluidModel.ring_messages``): its
        #: step index, else -1 (the flow stands for every step of its hop)
        self.msg = -1
        #: RoCE / IB: a ring hop flow's shares at its NIC port, its messages ready there
        #: (FluidModel.ring_weights); its index in the run's ring-hop state, else -1
        self.wt = 1.0
        self.ri = -1
        self.held = 0.0
        self.redo = False
        #: RoCE / IB: a dead QP whose packets die past a T0 uplink whose queue still has
        #: room for them (FluidModel._route_new): that uplink's resource, else -1
        self.buf = -1
        #: RoCE: DCQCN held the QP below its share at its last rate computation
        self.cut = False
        #: RoCE: a QP DCQCN had cut when its path died sends nothing until then (ps)
        self.hold = -math.inf
        #: RoCE / IB: the QP's path is dead; what it sent since is lost (go-back-N resends it).
        self.dead = False
        self.lost = 0.0
        self.tries = 0
        #: RoCE: the QP's reverse path (its ACKs, NAKs and CNPs) is dead, so DCQCN never
        #: hears of congestion; the cut it missed, (QPs, capacity, offer) of the queue
        #: (FluidModel._fill); and the episode it replays once its CNPs get through again:
        #: (QPs, capacity, offer, bytes left then), for the rest of the transfer.
        self.mute = False
        self.missed: tuple[int, float, float] | None = None
        self.episode: tuple[int, float, float, float] | None = None
        #: the QP's current retransmission timeout and how long it has waited without progress
        self.rto = 0
        self.waited = 0
        #: its place in the order flows were put in flight (FluidModel._run: a refill
        #: takes its flows in that order, as a refill of every flow does)
        self.oid = -1
        # no route yet: shared empty arrays (a route replaces them, never fills them)
        self.res: np.ndarray = _NO_RES
        self.w: np.ndarray = _NO_W
        #: ``res`` and ``w`` as Python lists (FluidModel._route; never changed in place):
        #: the run's bookkeeping and small fills read them without a numpy call
        self.rl: list[int] = []
        self.wl: list[float] = []


class _RingHops:
    """The RoCE / IB ring hop flows of a run, for their shares at their NIC ports
    (``FluidModel.ring_weights``): per hop flow (``_Flow.ri``) the bytes it sent,
    its rate, its step's bytes, its steps and the hop flow before it in its ring.

    At packet level rank ``r`` sends step ``k + 1`` when step ``k`` arrived from
    rank ``r - 1`` (``collectives._ring``), every step a message on QPs of its own,
    and the NIC serves its ready QPs round-robin, a packet each.  So a hop has
    ``1 + (steps the hop before it sent) - (steps it sent)`` messages ready (at
    most its steps left, at least 1), whole steps counted.  A hop flow sends its
    steps' bytes as one fluid, so the fluid count is ``1 + (a - b) / c`` with
    ``a``, ``b`` the two hops' bytes sent and ``c`` a step's bytes: the mean over
    the step phases of the whole-step count.  A flow's shares move to that count,
    rounded, when it has moved a whole message from them (so they do not flip at
    every step's edge nor chatter about a half).  Lockstep hops (the ring alone,
    or every hop as slow) stay at 1: the weights change nothing there.
    """

    def __init__(self, nvl0: int) -> None:
        #: the first NVLink resource: a hop inside a server has no NIC port, and at packet
        #: level it is NVLink time, not a flow; it is tracked (the hop after it follows
        #: it) but never weighted
        self.nvl0 = nvl0
        self.n = 0
        self.nic = np.zeros(64, dtype=bool)
        self.sent = np.zeros(64)
        self.rate = np.zeros(64)
        self.step = np.ones(64)
        self.steps = np.ones(64)
        self.prev = np.full(64, -1, dtype=np.int64)

    def add_ring(self, hops: dict[tuple[int, int], _Flow], n: int) -> None:
        """Track a ring's hop flows, keyed (hop, QP); hop ``h``'s QP ``q`` follows hop
        ``h - 1``'s QP ``q`` (the same share of every step)."""
        need = self.n + len(hops)
        if need > len(self.sent):
            grow = max(need, 2 * len(self.sent)) - len(self.sent)
            self.sent = np.concatenate((self.sent, np.zeros(grow)))
            self.rate = np.concatenate((self.rate, np.zeros(grow)))
            self.step = np.concatenate((self.step, np.ones(grow)))
            self.steps = np.concatenate((self.steps, np.ones(grow)))
            self.prev = np.concatenate((self.prev, np.full(grow, -1, dtype=np.int64)))
            self.nic = np.concatenate((self.nic, np.zeros(grow, dtype=bool)))
        for fl in hops.values():
            fl.ri = self.n
            self.nic[fl.ri] = bool(len(fl.res)) and int(fl.res[0]) < self.nvl0
            self.sent[fl.ri] = 0.0
            self.rate[fl.ri] = 0.0
            self.step[fl.ri] = fl.total / fl.steps
            self.steps[fl.ri] = fl.steps
            self.n += 1
        for (hop, q), fl in hops.items():
            before = hops.get(((hop - 1) % n, q))
            self.prev[fl.ri] = -1 if before is None or before is fl else before.ri

    def leave(self, ri: int, sent: float) -> None:
        """A hop flow left the flows in flight (done, parked or stalled) with ``sent``."""
        self.sent[ri] = sent
        self.rate[ri] = 0.0

    def _targets(
        self, ri_a: np.ndarray, top_a: np.ndarray, rem_a: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(slots, indices, lag term, lag's predecessor index or -1, steps-left term,
        step bytes) of the tracked flows in flight, their sent bytes recorded."""
        idx = np.flatnonzero(ri_a >= 0)
        r = ri_a[idx]
        sent = top_a[idx] - rem_a[idx]
        self.sent[r] = sent
        p = self.prev[r]
        c = self.step[r]
        ahead = np.where(p >= 0, self.sent[np.maximum(p, 0)], sent)
        return idx, r, 1.0 + (ahead - sent) / c, p, self.steps[r] - sent / c, c

    def retarget(
        self, ri_a: np.ndarray, top_a: np.ndarray, rem_a: np.ndarray, wt_a: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(slots, new shares) of the hop flows whose messages ready moved a whole one."""
        idx, r, lag, _p, left, _c = self._targets(ri_a, top_a, rem_a)
        tgt = np.where(self.nic[r], np.minimum(lag, left), 1.0)
        w = wt_a[idx]
        nw = np.maximum(1.0, np.round(tgt))
        chg = (np.abs(tgt - w) >= 1.0 - 1e-9) & (nw != w)
        return idx[chg], nw[chg]

    def next_change(
        self,
        ri_a: np.ndarray,
        top_a: np.ndarray,
        rem_a: np.ndarray,
        wt_a: np.ndarray,
        eff_rate: np.ndarray,
    ) -> float:
        """How long (ps) until a hop flow's messages ready move a whole one from its
        shares at the current rates (inf: never)."""
        if not bool((ri_a >= 0).any()):
            return math.inf
        idx, r, lag, p, left, c = self._targets(ri_a, top_a, rem_a)
        er = eff_rate[idx]
        self.rate[r] = er
        rp = np.where(p >= 0, self.rate[np.maximum(p, 0)], er)
        s1 = (rp - er) / c  # d lag / dt
        s2 = -er / c  # d left / dt
        w = wt_a[idx]
        up, dn = w + 1.0, w - 1.0
        # up: both terms reach w + 1; down (w >= 2): either reaches w - 1
        t1u = np.where(lag >= up, 0.0, np.where(s1 > 0, (up - lag) / s1, math.inf))
        t2u = np.where(left >= up, 0.0, math.inf)  # left only falls
        t_up = np.maximum(t1u, t2u)
        t1d = np.where(s1 < 0, (lag - dn) / -s1, math.inf)
        t2d = np.where(s2 < 0, (left - dn) / -s2, math.inf)
        t_dn = np.where(w >= 2.0, np.minimum(t1d, t2d), math.inf)
        t = np.where(self.nic[r], np.minimum(t_up, t_dn), math.inf)
        t = t[t > 0]
        return float(t.min()) if len(t) else math.inf


def ecmp_hash(seed: int, src: int, dst: int, conn: str, qp: int) -> int:
    """A QP's ECMP hash: 64 well-mixed bits of (seed, hosts, connection, QP).

    Not CRC32: CRC is linear, so which of two connections' hashes differ in
    their low bits would not depend on the seed, and every seed would give the
    same collisions.
    """
    key = f"{seed}:{src}:{dst}:{conn}:{qp}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def one_way_ps(spec: ClosSpec, mtu: int = 4096) -> int:
    """One-way latency across the fabric: 4 links' propagation and one MTU's serialisation
    each, plus the NIC and switch processing of the packet simulator's default latency
    model (both NICs and three switches; docs/latency.md)."""
    ser = mtu * 8 * (2 * 1000 / spec.host_gbps + 2 * 1000 / spec.fabric_gbps)
    return int(4 * spec.link_delay_ps + ser + FabricConfig().path_latency_ps(3))


def steps_of(task: Task, ring: int = 0) -> int:
    """Latency steps of a transfer: ring collectives step ``n-1`` or ``2(n-1)`` times
    (``n``: ``ring`` when given, a folded ring's whole size, else its ranks)."""
    n = ring or len(task.ranks)
    if task.kind == "allreduce":
        return 2 * (n - 1)
    if task.kind in ("allgather", "reducescatter"):
        return n - 1
    return 1


def flows_of(task: Task, hosts: list[int], ring: int = 0) -> list[tuple[int, int, float]]:
    """(src host, dst host, bytes) of the fluid flows of a transfer: rings as NCCL runs them
    (``ring``: a folded ring's whole size, which sets each hop's bytes; its hops are its
    own ranks')."""
    h = [hosts[r] for r in task.ranks]
    n = len(h)
    if task.kind == "p2p":
        return [(h[0], h[1], float(task.size))]
    if task.kind == "alltoall":
        per = task.size / n
        return [(h[i], h[j], per) for i in range(n) for j in range(n) if i != j]
    w = ring or n
    factor = 2 * (w - 1) / w if task.kind == "allreduce" else (w - 1) / w
    return [(h[i], h[(i + 1) % n], task.size * factor) for i in range(n)]


#: FluidModel._run's per-slot tables: rows of floats (pace, rem, lost, rate, eff, total,
#: top, wt), of integers (oid, grp, buf, ri, lab), of booleans (dead, cut, mute, ep, gone)
_F_ROWS = 8
_I_ROWS = 5
_B_ROWS = 5
#: an ended flow's slot until the tables are compacted (``FluidModel.compact_dead``): no
#: rate and infinite bytes left (it never ends again and moves nothing), efficiency 1,
#: weight 1; buf, ri and lab -1 (no queue, no ring hop, no kept set); not dead, gone
_F_GONE = np.array([[0.0], [math.inf], [0.0], [0.0], [1.0], [0.0], [0.0], [1.0]])
_B_GONE = np.array([[False], [False], [False], [False], [True]])
#: the least of an array, NaNs passed over (``np.nanmin`` without its wrappers)
_np_fmin = np.fmin.reduce
_np_fmax = np.fmax
#: 1e-3 as a 0-d array: a ufunc takes it without converting a Python scalar per call
_THOUSANDTH = np.array(1e-3)


def _ended(rem: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Which flows of a run's turn end: at most 1e-3 bytes or 1 ps left at their rate,
    ``(rem <= 1e-3) | (rem / rate <= 1.0)``, slot for slot, in two numpy calls.

    IEEE division is correctly rounded, so for a rate above 0 the quotient is at most
    1.0 exactly when ``rem <= rate`` (a ``rem`` above the rate is above it by at least
    one ulp of the rate, and the quotient then rounds to more than 1.0); a rate of 0
    gives inf or NaN, never at most 1.0, but for ``rem <= 0``, within 1e-3 anyway.  So
    the test is ``rem <= max(rate, 1e-3)``, with ``fmax`` taking 1e-3 for a NaN rate
    (where only the first test can hold).
    """
    return rem <= _np_fmax(rate, _THOUSANDTH)


def maxmin(
    n: int, fe: np.ndarray, inv: np.ndarray, vals: np.ndarray, cap: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted max-min fair rates of ``n`` flows on ``len(cap)`` resources.

    Entry ``e`` says flow ``fe[e]`` puts weight ``vals[e] > 0`` on resource
    ``inv[e]`` (a flow at rate ``x`` uses ``vals[e] x`` of it); ``cap`` the
    resources' capacities.  Returns every flow's rate (0 for a flow without
    entries) and what the flows use of every resource.

    A resource's *level* is the rate its unfrozen flows reach when it saturates.
    Levels only rise as flows freeze (a flow frozen at or below a level frees
    what it would have taken), so a resource whose level none of its unfrozen
    flows sees undercut on another of their resources is their bottleneck: they
    freeze at that level.  Every such resource is settled in the same round, so
    the rounds follow the chain of bottlenecks, not one round per distinct level
    as in progressive filling; the rates are progressive filling's.
    """
    m = len(cap)
    rate = np.zeros(n)
    used = np.zeros(m)  # what the frozen flows use
    active = np.bincount(fe, minlength=n) > 0
    act_e = active[fe]
    weight = np.bincount(inv, weights=vals, minlength=m)  # the unfrozen flows' weight
    for _ in range(m + 1):
        if not act_e.any():
            break
        level = np.full(m, math.inf)
        np.divide(np.maximum(cap - used, 0.0), weight, out=level, where=weight > 1e-12)
        # an unfrozen flow's lowest level, and the lowest of those among a resource's flows
        fa, ia = fe[act_e], inv[act_e]
        low = np.full(n, math.inf)
        np.minimum.at(low, fa, level[ia])
        low_r = np.full(m, math.inf)
        np.minimum.at(low_r, ia, low[fa])
        ready = level <= low_r * (1.0 + 1e-9)
        frz = np.zeros(n, dtype=bool)
        frz[fe[act_e & ready[inv]]] = True
        if not frz.any():
            break
        rate[frz] = low[frz]
        fz = frz[fe]
        used += np.bincount(inv[fz], weights=vals[fz] * rate[fe[fz]], minlength=m)
        weight -= np.bincount(inv[fz], weights=vals[fz], minlength=m)
        active &= ~frz
        act_e = active[fe]
    return rate, used


class FluidModel:
    """The fabric of ``spec`` carrying jobs' task graphs as fluid flows (see the module doc)."""

    def __init__(
        self,
        spec: ClosSpec,
        transport: str = "mrc",
        *,
        qps: int = 1,
        detect_ps: int = 47_000_000,
        convergence_ps: int = 200_000_000_000,
        mtu: int = 4096,
        seed: int = 1,
        gpus_per_server: int = 8,
        nvlink_bytes_per_ps: float = 0.45,
        rto_ps: int = 4_294_967_296_000,
        retries: int = 7,
        hold_ps: int = 3_000_000_000_000,
        dcqcn: DcqcnConfig | None = None,
        ecn_profile: str = "nvidia",
        adp_base_ps: int | None = None,
        adp_init_exp: int = 7,
        adp_init_range: int = 2,
        pace_rings: bool = True,
        pfc_xoff_bytes: float | None = None,
        header_bytes: int | None = None,
        path_hash: Callable[[int, int, str, int], int] | None = None,
        ack_hash: Callable[[int, int, str, int], int] | None = None,
        rto_draw: Callable[[int, int, int, int, int], int | None] | None = None,
        ring_messages: bool = False,
        ring_weights: bool = False,
    ) -> None:
        if transport not in ("mrc", "roce", "ib"):
            raise ValueError(f"transport: {transport!r} is not one of mrc, roce, ib")
        self.spec = spec
        self.transport = transport
        self.qps = qps
        self.detect_ps = detect_ps
        self.convergence_ps = convergence_ps
        #: RoCE / IB: when routing withdraws a silently failed fabric link (hold timer).
        self.hold_ps = hold_ps
        #: RoCE: the DCQCN parameters of its QPs (the packet baseline's default; None
        #: with MRC).  QPs that meet in a congested switch queue get the mean share
        #: DCQCN leaves them over their transfer (openmrc.flow.dcqcn).
        self.dcqcn: DcqcnConfig | None = (
            (DcqcnConfig() if dcqcn is None else dcqcn) if transport == "roce" else None
        )
        if self.dcqcn is not None and not self.dcqcn.enabled:
            self.dcqcn = None
        #: RoCE: the switches' ECN ramp (openmrc.baselines.fabric.ECN_PROFILES)
        self.ecn_profile = ecn_profile
        self._cnp_delay_ps = cnp_delay_ps(spec, mtu)
        self._dcqcn_memo: dict[tuple[int, float, float, float], float] = {}
        #: RoCE / IB local ACK timeout (4.096 us x 2^timeout_exp; NCCL's default 20) and retries.
        self.rto_ps = rto_ps
        self.retries = retries
        #: NVIDIA's adaptive retransmission (the packet baseline's default): a QP's first
        #: timeout is ``adp_base_ps x 2^k``, k in adp_init_exp + [0, adp_init_range) per
        #: QP, doubling on each expiry without progress up to ``rto_ps``; the QP errors
        #: after ``retries x rto_ps`` without progress.  None: the fixed ``rto_ps``.
        self.adp_base_ps = adp_base_ps
        self.adp_init_exp = adp_init_exp
        self.adp_init_range = adp_init_range
        self.seed = seed
        #: RoCE / IB: a QP's ECMP hash from (src, dst, connection, QP); its T1 is the hash
        #: modulo the live T1s, in T1 order (as the packet level's T0 picks among its next
        #: hops).  None: ``ecmp_hash`` of the seed.  A calibration run gives the packet
        #: run's own draws here to compare the two models' mechanisms on the same paths.
        self.path_hash = path_hash
        #: RoCE: the ECMP hash of a QP's reverse path, from (src, dst, connection, QP) of
        #: its data: the receiver's T0 hashes the ACK's 5-tuple (the receiver, the
        #: sender, the QP's source port) with its own seed, so the ACKs, NAKs and CNPs
        #: of a QP take their own T1.  None: ``ecmp_hash`` of the seed (a draw of its own).
        self.ack_hash = ack_hash
        #: RoCE / IB with adaptive retransmission: a lost message's first timeout (ps)
        #: from (src, dst, transfer, step, QP), or None for the model's own draw
        #: (``_first_rto``).  A calibration run gives the packet run's own draws here,
        #: as ``path_hash``.
        self.rto_draw = rto_draw
        #: ring collectives' flows are paced by their step chain (``pace``) and end one
        #: latency after draining; False: unpaced, ending ``steps`` latencies after it.
        self.pace_rings = pace_rings
        #: RoCE / IB: a ring collective's steps are messages of their own, as at packet
        #: level (rank ``r`` sends step ``k + 1`` when step ``k`` from ``r - 1`` arrived;
        #: every message on QPs of its own, which the NIC serves round-robin, one packet
        #: per ready QP, so a port is shared per message), instead of one flow per hop
        #: paced by its step chain.  Off by default: over 12 seeds it brought aicb-16
        #: with the failure closer to the packet level and chakra-8 further from it
        #: (docs/training.md).  MRC keeps the paced hop flows.
        self.ring_messages = ring_messages and transport != "mrc"
        #: RoCE / IB: a ring's hop flow counts as many flows in the max-min filling as the
        #: packet level has messages of it ready at its NIC port (steps whose block arrived
        #: from the rank before and that have not gone; at least 1; ``_RingHops``): the
        #: NIC serves its ready QPs round-robin and every ring step is a message on QPs
        #: of its own (weighted max-min; the QPs are QPs of their own at the switch queues
        #: too).  MRC posts a hop's steps in order on its connection's QPs, one turn per
        #: hop, so it is never weighted; nor with ``ring_messages``.  Off by default: over
        #: 12 seeds it moved aicb-16 a little further from the packet level and nothing
        #: else (docs/training.md).
        self.ring_weights = ring_weights
        #: how a change's rates are recomputed: "component" (the flows connected to what
        #: changed through shared resources, the default), "group" (every flow of the
        #: changed flows' resource groups, ``_group``) or "all" (every flow in flight).
        #: Max-min rates of flows that share no resource, directly or through other
        #: flows, are independent, so the three give the same rates; "group" and "all"
        #: are the references the tests hold "component" to.
        self.refill = "component"
        #: refill "component": keep each connected set of flows a walk found, labelled on
        #: its resources, while it stays closed (every flow in flight on its resources is
        #: in it and uses none outside it: a flow put in flight across its edge dissolves
        #: it).  A change on a kept set's resources refills that set again instead of
        #: walking: it holds every flow the change reaches, and filling flows that share
        #: no resource together gives each the rates it gets alone (``maxmin``), so the
        #: rates are the walk's.  Off: walk at every refill (the reference the tests
        #: hold it to).
        self.reuse_component = True
        #: a kept set may refill ``reuse_budget`` times the flows its walk found before
        #: it is dissolved and walked again: flows that end split a component, and a kept
        #: set holds its pieces together, so without a bound a small change would go on
        #: refilling the whole (math.inf: no bound).
        self.reuse_budget = 4.0
        #: only sets of at least this many flows are kept: walking a small one again
        #: costs less than keeping its labels (checking every flow put in flight)
        self.reuse_min_flows = 64
        #: a refill whose flows have at most this many (flow, resource) entries is
        #: computed one float at a time (``_fill_lists``: the same rates, bit for bit,
        #: without numpy's cost per call, most of a small fill's); larger ones by
        #: ``_fill``'s arrays.  0: always ``_fill``.
        self.small_fill = 96
        #: skip the run's per-turn steps for dead QPs (their lost bytes), QPs filling an
        #: uplink's queue and flows of efficiency below 1 while no flow in flight is one
        #: (the same floats: the steps change nothing then).  False: every turn takes
        #: them (the reference the tests hold the skipping to).
        self.skip_idle_steps = True
        #: a flow that ends keeps its slot in the run's per-slot tables, marked gone (no
        #: rate, nothing left to send: ``_F_GONE``), and the tables drop their gone slots
        #: only when more than this share of them is gone (or every one is), instead of
        #: taking the live slots out at every end.  The live slots keep their order, so
        #: every fill sees its flows in the same order and the rates are the same floats.
        #: 0: compact at every end.
        self.compact_dead = 0.5
        #: MRC: per host, how many hosts alike it stands for (a folded job's representative
        #: replica, openmrc.flow.fold): its fabric flows weigh that many on the T0 pools,
        #: the only resources MRC's hosts share, so the pools carry every replica it
        #: stands for.  None: every host stands for itself.
        self.host_weight: np.ndarray | None = None
        #: RoCE: the switch buffer a sending host port may fill before PFC pauses it (wire
        #: bytes; None: the packet baseline's default, 512 KB at 100 Gb/s scaled by the
        #: port's rate; inf: no flow control, 0: none absorbed).  A dead QP whose packets
        #: die past a T0 uplink sends into that uplink's queue at its share of its NIC
        #: until its hosts' budgets are full, and only then at the uplink's share.
        if pfc_xoff_bytes is None:
            pfc_xoff_bytes = (
                default_pfc_xoff_bytes(spec.host_gbps * 1e9) if transport == "roce" else 0.0
            )
        self.pfc_xoff_bytes = float(pfc_xoff_bytes)
        #: T0 uplinks whose queue (of dead QPs' packets) reached the PFC budget
        self._buf_full: set[int] = set()
        self.gpus_per_server = gpus_per_server
        self.latency_ps = one_way_ps(spec, mtu)
        P, A, K, H = spec.planes, spec.t0s, spec.t1s, spec.hosts
        self.P, self.A, self.K, self.H = P, A, K, H
        # resource layout
        self._up0 = 0  # host_up[h, p]
        self._down0 = H * P  # host_down[h, p]
        self._pool_up0 = 2 * H * P  # pool_up[p, a]
        self._pool_down0 = self._pool_up0 + P * A
        self._link_up0 = self._pool_down0 + P * A  # link_up[p, a, k]
        self._link_down0 = self._link_up0 + P * A * K  # link_down[p, k, b]
        self._nvl_out0 = self._link_down0 + P * A * K
        self._nvl_in0 = self._nvl_out0 + H
        self.R = self._nvl_in0 + H
        #: the share of a link's bits that is payload: every packet of ``mtu`` payload
        #: bytes carries the transport's headers (MRC: DATA_HEADER_BYTES; RoCE:
        #: ROCE_DATA_HEADER_BYTES) and the Ethernet framing, as at packet level
        hdr = header_bytes
        if hdr is None:
            hdr = DATA_HEADER_BYTES if transport == "mrc" else ROCE_DATA_HEADER_BYTES
        self.payload_share = mtu / (mtu + hdr + FabricConfig().framing_bytes)
        self._wire_packet = mtu + hdr + FabricConfig().framing_bytes
        host_c = spec.host_gbps / 8000 * self.payload_share  # payload bytes per ps
        fab_c = spec.fabric_gbps / 8000 * self.payload_share
        self._host_c = host_c
        self._fab_c = fab_c
        self.cap = np.zeros(self.R)
        self.cap[: 2 * H * P] = host_c
        self.cap[self._link_up0 : self._nvl_out0] = fab_c
        self.cap[self._nvl_out0 :] = nvlink_bytes_per_ps
        # alive state: true (what the wires do) and known (what the transport acts on)
        self.host_true = np.ones((H, P), dtype=bool)
        self.fab_true = np.ones((P, A, K), dtype=bool)
        self.host_known = self.host_true.copy()
        self.fab_known = self.fab_true.copy()
        self._update_caps()
        self.jobs: list[FluidJob] = []
        self._faults: list[FluidFault] = []
        #: _fill's scratch: a resource's index among the resources a fill uses
        self._where = np.zeros(0, dtype=np.int64)
        #: routes by flow key (``_route``)
        self._route_cache: dict[
            int,
            tuple[
                np.ndarray, np.ndarray, float, bool, int, float, bool, int, list[int], list[float]
            ],
        ] = {}
        #: MRC: per (T0, T0) pair and plane, whether a T1 path is known alive, and the
        #: known-alive T1 paths that are truly dead and their count (cleared with
        #: ``_route_cache``: every route between two T0s reads the same)
        self._pairs: dict[tuple[int, int], tuple[list[bool], list[int], list[int]]] = {}
        #: RoCE / IB: per (plane, T0, T0) the T1s known alive from both (cleared with
        #: ``_pairs``)
        self._live: dict[tuple[int, int, int], list[int]] = {}

    # ----- set-up -------------------------------------------------------------------
    def add_job(self, job: FluidJob) -> int:
        """Add a job (its ranks' hosts must be distinct hosts of the fabric); return its index."""
        g = job.graph
        if len(job.hosts) != g.ranks:
            raise ValueError(
                f"job {g.name}: placement has {len(job.hosts)} hosts for {g.ranks} ranks"
            )
        if len(set(job.hosts)) != len(job.hosts):
            raise ValueError(f"job {g.name}: two ranks on one host (one NIC per GPU)")
        for h in job.hosts:
            if not 0 <= h < self.H:
                raise ValueError(f"job {g.name}: host {h} is not in 0..{self.H - 1}")
        self.jobs.append(job)
        return len(self.jobs) - 1

    def add_fault(self, fault: FluidFault) -> None:
        """Schedule a fault (checked now: an unknown target is a ValueError naming it)."""
        if fault.kind not in FLUID_FAULTS:
            raise ValueError(
                f"kind: the flow-level model applies {', '.join(FLUID_FAULTS)}, not {fault.kind!r}"
            )
        self._targets(fault)
        self._faults.append(fault)

    def parts(self, fault: FluidFault) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
        """(host links (h, p), fabric links (p, a, k)) a fault acts on (ValueError: no such part)."""
        return self._targets(fault)

    def start_down(
        self, host_links: list[tuple[int, int]], fabric_links: list[tuple[int, int, int]]
    ) -> None:
        """Begin the run with these parts down and known down: a fabric that failed long
        enough ago that the transport and routing act on it (a campaign's state)."""
        for h, p in host_links:
            self.host_true[h, p] = self.host_known[h, p] = False
        for p, a, k in fabric_links:
            self.fab_true[p, a, k] = self.fab_known[p, a, k] = False
        self._update_caps()
        self._route_cache.clear()
        self._pairs.clear()
        self._live.clear()

    def _targets(self, f: FluidFault) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
        """(host links (h, p), fabric links (p, a, k)) a fault acts on."""
        if f.kind.startswith("nic_port"):
            if not (0 <= f.host < self.H and 0 <= f.plane < self.P):
                raise ValueError(f"host/plane: no NIC port h{f.host} plane {f.plane}")
            return [(f.host, f.plane)], []
        name = f.target
        try:
            if f.kind.startswith("switch"):
                p_s, rest = name[1:].split("t", 1)
                tier, idx = rest.split("x")
                p, i = int(p_s), int(idx)
                if tier == "1" and 0 <= p < self.P and 0 <= i < self.K:
                    return [], [(p, a, i) for a in range(self.A)]
                if tier == "0" and 0 <= p < self.P and 0 <= i < self.A:
                    hpt = self.spec.hosts_per_t0
                    hl = [(h, p) for h in range(i * hpt, (i + 1) * hpt)]
                    return hl, [(p, i, k) for k in range(self.K)]
                raise ValueError
            a_s, b_s = name.split("-")
            if a_s.startswith("h"):
                h = int(a_s[1:])
                p = int(b_s[1:].split("t")[0])
                if (
                    0 <= h < self.H
                    and 0 <= p < self.P
                    and b_s == f"p{p}t0x{h // self.spec.hosts_per_t0}"
                ):
                    return [(h, p)], []
                raise ValueError
            p = int(a_s[1:].split("t")[0])
            a = int(a_s.split("x")[1])
            k = int(b_s.split("x")[1])
            if (
                a_s == f"p{p}t0x{a}"
                and b_s == f"p{p}t1x{k}"
                and 0 <= p < self.P
                and 0 <= a < self.A
                and 0 <= k < self.K
            ):
                return [], [(p, a, k)]
            raise ValueError
        except (ValueError, IndexError):
            what = (
                "switch ('p0t1x3')"
                if f.kind.startswith("switch")
                else "link ('p0t0x1-p0t1x3' or 'h5-p0t0x1')"
            )
            raise ValueError(f"target: no {what} {name!r} in this fabric") from None

    # ----- capacities and paths ------------------------------------------------------
    def _update_caps(self) -> None:
        """Capacities from the *known* state (pools: live links x link rate)."""
        P, A = self.P, self.A
        hk = self.host_known
        host_c = self._host_c
        self.cap[self._up0 : self._up0 + self.H * P] = np.where(hk.reshape(-1), host_c, 0.0)
        self.cap[self._down0 : self._down0 + self.H * P] = np.where(hk.reshape(-1), host_c, 0.0)
        fk = self.fab_known
        self.cap[self._pool_up0 : self._pool_up0 + P * A] = fk.sum(axis=2).reshape(-1) * self._fab_c
        self.cap[self._pool_down0 : self._pool_down0 + P * A] = (
            fk.sum(axis=2).reshape(-1) * self._fab_c
        )
        self.cap[self._link_up0 : self._link_down0] = np.where(fk.reshape(-1), self._fab_c, 0.0)
        self.cap[self._link_down0 : self._nvl_out0] = np.where(
            fk.transpose(0, 2, 1).reshape(-1), self._fab_c, 0.0
        )
        #: ``cap`` as a list, for the fills one float at a time (``_fill_lists``)
        self._cap_l: list[float] = self.cap.tolist()

    def _route(self, fl: _Flow) -> None:
        """Set a flow's resources, weights and efficiency (cached until the state changes)."""
        # one int per (src, dst) (MRC) or (job, src, dst, QP) (RoCE / IB), each below its
        # bound (hosts H, QPs qps): hashed and compared without a tuple
        H = self.H
        if self.transport == "mrc":
            key = fl.src * H + fl.dst
        else:
            key = ((fl.job * H + fl.src) * H + fl.dst) * self.qps + fl.qp
        hit = self._route_cache.get(key)
        if hit is None:
            self._route_new(fl)
            fl.grp = self._group(fl)
            fl.path = self._path_rate(fl)
            fl.rl = fl.res.tolist()
            fl.wl = fl.w.tolist()
            self._route_cache[key] = (
                fl.res,
                fl.w,
                fl.eff,
                fl.dead,
                fl.grp,
                fl.path,
                fl.mute,
                fl.buf,
                fl.rl,
                fl.wl,
            )
        else:
            fl.res, fl.w, fl.eff, fl.dead, fl.grp, fl.path, fl.mute, fl.buf, fl.rl, fl.wl = hit

    def _path_rate(self, fl: _Flow) -> float:
        """The rate a flow gets alone on its route: its tightest resource (bytes/ps)."""
        if not len(fl.res):
            return 0.0
        return float((self.cap[fl.res] / fl.w).min())

    @staticmethod
    def pace(fl: _Flow) -> float:
        """The rate a ring collective's flow cannot exceed: its step chain's (bytes/ps).

        A ring of ``S`` steps sends ``c = total / S`` bytes per step, and each step
        but the first waits for the previous rank's step to arrive: one fabric
        latency ``gap``.  Alone on its path (rate ``B``) the flow takes
        ``S c / B + (S - 1) gap`` to send everything, and its last step arrives one
        ``gap`` later: ``S (c / B + gap)``, as the packet level's chain of step flows.
        So its average rate is at most ``S c / (S c / B + (S - 1) gap)``: when the
        flow has its path to itself it drains at that rate; when it shares a
        bottleneck and its max-min share is lower, the other flows' bytes fill its
        waits (the packet level's links are work-conserving) and only the share
        counts.  1-step transfers (point to point, all-to-all) and transfers inside a
        server (no fabric latency) are not paced (inf).
        """
        if fl.steps <= 1 or fl.gap <= 0.0 or fl.path <= 0.0:
            return math.inf
        return fl.total / (fl.total / fl.path + (fl.steps - 1) * fl.gap)

    def _group(self, fl: _Flow) -> int:
        """The flow's resource group: groups share no resource, so their max-min rates
        are independent and a change in one leaves the others' rates as they are.

        A RoCE / IB QP uses only resources of its plane (group = plane); an MRC flow
        sprays over the planes (one group, ``P``, for every fabric flow); a transfer
        inside a server uses its NVLink only (one group per server, ``P + 1 + server``).
        """
        if not len(fl.res):
            return self.P
        r0 = int(fl.res[0])
        if r0 >= self._nvl_out0:
            return self.P + 1 + fl.src // self.gpus_per_server
        if self.transport == "mrc":
            return self.P
        return fl.qp % self.P

    def _route_new(self, fl: _Flow) -> None:
        """Compute a flow's resources, weights and efficiency from the known and true states."""
        spec, P, K = self.spec, self.P, self.K
        s, d = fl.src, fl.dst
        G = self.gpus_per_server
        if s // G == d // G:
            fl.res = np.array([self._nvl_out0 + s, self._nvl_in0 + d], dtype=np.int64)
            fl.w = np.ones(2)
            fl.eff = 1.0
            return
        a, b = s // spec.hosts_per_t0, d // spec.hosts_per_t0
        res: list[int] = []
        w: list[float] = []
        if self.transport == "mrc":
            hk_s, hk_d = self.host_known[s].tolist(), self.host_known[d].tolist()
            ht_s, ht_d = self.host_true[s].tolist(), self.host_true[d].tolist()
            pair = self._pairs.get((a, b)) if a != b else None
            if a != b and pair is None:
                kk = self.fab_known[:, a] & self.fab_known[:, b]
                tt = self.fab_true[:, a] & self.fab_true[:, b]
                p_dead: list[int] = (kk & ~tt).sum(axis=1).tolist()
                p_count: list[int] = kk.sum(axis=1).tolist()
                p_ok = [c > 0 for c in p_count]
                pair = self._pairs[a, b] = (p_ok, p_dead, p_count)
            planes = [p for p in range(P) if hk_s[p] and hk_d[p] and (pair is None or pair[0][p])]
            if not planes:
                fl.res, fl.w, fl.eff = np.zeros(0, dtype=np.int64), np.zeros(0), 0.0
                return
            share = 1.0 / len(planes)
            many = share if self.host_weight is None else share * float(self.host_weight[s])
            lost = 0.0
            for p in planes:
                res += [self._up0 + s * P + p, self._down0 + d * P + p]
                w += [share, share]
                if not (ht_s[p] and ht_d[p]):
                    lost += share
                    continue
                if pair is not None:
                    res += [self._pool_up0 + p * self.A + a, self._pool_down0 + p * self.A + b]
                    w += [many, many]
                    lost += share * pair[1][p] / pair[2][p]
            fl.res, fl.w, fl.eff = np.array(res, dtype=np.int64), np.array(w), max(0.0, 1.0 - lost)
            return
        # RoCE / IB: one QP, one path.
        fl.mute = False
        p = fl.qp % P
        res = [self._up0 + s * P + p, self._down0 + d * P + p]
        ok = bool(self.host_true[s, p] and self.host_true[d, p])
        if a != b:
            live = self._live.get((p, a, b))
            if live is None:
                live = np.flatnonzero(self.fab_known[p, a] & self.fab_known[p, b]).tolist()
                self._live[p, a, b] = live
            if not live:
                fl.res, fl.w, fl.eff, fl.dead = np.array(res, dtype=np.int64), np.ones(2), 1.0, True
                return
            if self.path_hash is None:
                h = ecmp_hash(self.seed, s, d, fl.conn, fl.qp)
            else:
                h = self.path_hash(s, d, fl.conn, fl.qp)
            k = live[h % len(live)]
            res += [
                self._link_up0 + (p * self.A + a) * K + k,
                self._link_down0 + (p * K + k) * self.A + b,
            ]
            ok = ok and bool(self.fab_true[p, a, k] and self.fab_true[p, b, k])
            # the reverse path: the receiver's T0 hashes the ACK's 5-tuple among the
            # same live T1s (routing is symmetric); only CNPs lost on it matter here
            if self.dcqcn is not None:
                if self.ack_hash is None:
                    hr = ecmp_hash(self.seed, d, s, fl.conn + "/ack", fl.qp)
                else:
                    hr = self.ack_hash(s, d, fl.conn, fl.qp)
                kr = live[hr % len(live)]
                fl.mute = not bool(self.fab_true[p, b, kr] and self.fab_true[p, a, kr])
        # A QP on a dead path keeps sending at its rate; what it sends is lost where the
        # path dies: the packet level's down port drops it unsent, so the links past it
        # (and the receiver's port) carry none of it.  Dropped at the T1 (its downlink
        # is dead), it crosses the T0's uplink, whose queue takes it at the QP's share of
        # its NIC until the PFC budget of the sending ports is full (_run).  A QP that
        # DCQCN had cut when its path died first waits for DCQCN's timer (_run).
        fl.buf = -1
        if not ok:
            if not self.host_true[s, p] or a == b or not self.fab_true[p, a, k]:
                res = res[:1]
            elif self.fab_true[p, b, k]:
                res = res[:1] + res[2:]  # dies on the receiver's link: not its port
            else:
                res = res[:1]
                r_up = self._link_up0 + (p * self.A + a) * K + k
                if r_up in self._buf_full or self.pfc_xoff_bytes <= 0:
                    res.append(r_up)
                else:
                    fl.buf = r_up
        fl.res, fl.w, fl.eff, fl.dead = (
            np.array(res, dtype=np.int64),
            np.ones(len(res)),
            1.0,
            not ok,
        )

    # ----- max-min fair rates -----------------------------------------------------------
    def _fill(
        self,
        n: int,
        fe: np.ndarray,
        cols: np.ndarray,
        vals: np.ndarray,
        pace: np.ndarray,
        size: np.ndarray | None = None,
        mute: np.ndarray | None = None,
        episode: list[tuple[int, float, float, float] | None] | None = None,
        missed: dict[int, tuple[int, float, float]] | None = None,
        cuts: np.ndarray | None = None,
        shares: np.ndarray | None = None,
    ) -> np.ndarray:
        """Max-min fair rates (bytes/ps) of one resource group's ``n`` flows.

        ``fe``, ``cols``, ``vals``: the flows' (flow, resource, weight) entries, flow
        by flow in their order; ``pace``: each flow's pace (inf: none); ``size``:
        each flow's bytes (RoCE: how long DCQCN's cuts weigh on it; None: 1 MiB);
        ``mute``: RoCE flows whose CNPs are lost on a dead reverse path (never cut: the
        cut each misses, (QPs, capacity, offer) of its queue, is put in ``missed`` by its
        index among the ``n``); ``episode``: a flow's DCQCN episode replayed on its
        remaining bytes (``_Flow.episode``) or None; ``shares``: each flow's shares
        (None: 1 each; weighted max-min: a flow of ``w`` shares stands for ``w`` flows
        of its route, each of rate ``x / w``, so its entries weigh ``w`` times in the
        filling and its rate is ``w`` times the level it freezes at).  Groups
        share no resource, so a group's rates depend only on its own flows and
        capacities: the run refills only the groups whose flows or capacities
        changed and gets the rates a full recomputation gives.

        Weighted max-min fairness: a resource's level is the rate its unfrozen
        flows reach when it saturates; levels only rise as flows freeze, so a
        resource whose level none of its flows sees undercut on another resource is
        a bottleneck, and its flows freeze at that level, every such resource in one
        round (the progressive filling's result in a few rounds, not one per level).
        """
        rate = np.zeros(n)
        lens = np.bincount(fe, minlength=n)
        if not len(fe):
            return rate
        paced = np.flatnonzero(np.isfinite(pace) & (lens > 0))
        if len(paced):
            # a paced flow's own resource (id R + its index), of capacity its pace
            cols = np.concatenate((cols, self.R + paced))
            vals = np.concatenate((vals, np.ones(len(paced))))
            fe = np.concatenate((fe, paced))
        # the resources used, ascending, and each entry's index among them (what
        # np.unique(cols, return_inverse=True) gives, with fewer steps: a fill has a
        # few hundred entries, so numpy's per-call cost is most of its time)
        srt = np.sort(cols)
        first = np.empty(len(srt), dtype=bool)
        first[0] = True
        np.not_equal(srt[1:], srt[:-1], out=first[1:])
        used_res = srt[first]
        m = len(used_res)
        if len(self._where) < self.R + n:
            self._where = np.empty(2 * (self.R + n), dtype=np.int64)
        where = self._where
        where[used_res] = np.arange(m)
        inv = where[cols]
        own = used_res >= self.R
        cap = np.where(
            own, pace[np.maximum(used_res - self.R, 0)], self.cap[np.minimum(used_res, self.R - 1)]
        )
        tol = 1e-9 * np.maximum(cap, 1e-12)
        if shares is None:
            rate, used = maxmin(n, fe, inv, vals, cap)
        else:
            rate, used = maxmin(n, fe, inv, vals * shares[fe], cap)
            rate *= shares
        # the share DCQCN leaves each flow: a QP whose CNPs came through again after
        # its reverse path revived is in the episode it missed, from then on (on its
        # bytes left then); one DCQCN state per QP, so the deeper of that and a cut now
        fac = np.ones(n)
        if episode is not None:
            for i, ep in enumerate(episode):
                if ep is not None:
                    fac[i] = self._dcqcn_factor(*ep)
        if self.dcqcn is not None:
            # DCQCN on a congested switch queue: the QPs that share it use only part of
            # it.  A queue is congested when the QPs offer it more than it carries: each
            # QP offers its sending NIC's share of the port (the NIC divides its line
            # among its QPs without marks; DCQCN starts every QP at line rate), so
            # QPs that their own NIC already holds to what the queue drains do not
            # congest it and are not cut.
            up = (used_res >= self._up0) & (used_res < self._down0)
            switch = (used_res < self._nvl_out0) & ~up & (used_res < self.R)
            count = np.bincount(inv, weights=vals > 0, minlength=m)
            full = switch & (count >= 2) & (cap - used <= tol)
            if not full.any():
                if cuts is not None:
                    cuts[:] = fac < 1.0
                return rate * fac  # no saturated switch queue shared by two QPs
            whole = np.bincount(inv, weights=vals, minlength=m)  # every flow's weight
            per_w = np.where(up & (whole > 0), cap / whole, math.inf)
            offer = np.full(n, math.inf)
            np.minimum.at(offer, fe, per_w[inv] / np.where(vals > 0, 1.0, math.inf))
            offer[np.isinf(offer)] = 0.0  # no NIC port (inside a server): offers nothing
            offered = np.bincount(inv, weights=vals * offer[fe], minlength=m)
            shared = full & (offered > cap + tol)
            # each slowed QP's busiest shared queue: how many QPs meet there, its capacity
            on = shared[inv]
            nq = np.zeros(n)
            np.maximum.at(nq, fe[on], count[inv[on]])
            capq = np.full(n, math.inf)
            np.minimum.at(capq, fe[on], cap[inv[on]])
            for f in np.flatnonzero(nq >= 2):
                if mute is not None and mute[f]:
                    # its CNPs die on the dead reverse path: DCQCN never cuts it; the cut
                    # is kept, to be replayed when the CNPs get through (_run)
                    if missed is not None:
                        missed[int(f)] = (int(nq[f]), float(capq[f]), float(offer[f]))
                    continue
                cut = self._dcqcn_factor(
                    int(nq[f]),
                    float(capq[f]),
                    float(offer[f]),
                    float(size[f]) if size is not None else float(1 << 20),
                )
                fac[f] = min(fac[f], cut)
        if cuts is not None:
            cuts[:] = fac < 1.0
        return rate * fac

    def _fill_lists(
        self,
        fls: list[_Flow],
        pace: list[float],
        size: list[float] | None,
        mute: list[bool] | None,
        episode: list[tuple[int, float, float, float] | None] | None,
        missed: dict[int, tuple[int, float, float]] | None,
        cuts: list[bool],
    ) -> list[float]:
        """``_fill`` of a small component, one Python float at a time: the same rates
        (and ``cuts``, ``missed``) to the bit, without numpy's fixed cost per call.

        The flows' entries are their routes (``_Flow.rl``, ``.wl``) in order; every
        step is ``_fill``'s and ``maxmin``'s, in their order: sums taken entry by entry
        as ``np.bincount`` takes them, minima and maxima as ``np.minimum.at`` and
        ``np.maximum.at`` (NaN kept), so the floats are the same.  ``cuts`` is
        cleared and given one value per flow; without weights (``shares``) only.
        """
        n = len(fls)
        R = self.R
        inf = math.inf
        fe: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for i in range(n):
            f = fls[i]
            for r in f.rl:
                fe.append(i)
                cols.append(r)
            vals.extend(f.wl)
        cuts.clear()
        if not fe:
            cuts.extend([False] * n)
            return [0.0] * n
        for i in range(n):
            if math.isfinite(pace[i]) and fls[i].rl:
                # a paced flow's own resource (id R + its index), of capacity its pace
                fe.append(i)
                cols.append(R + i)
                vals.append(1.0)
        ne = len(fe)
        capa = self._cap_l
        fac = [1.0] * n
        if episode is not None:
            for i in range(n):
                ep = episode[i]
                if ep is not None:
                    fac[i] = self._dcqcn_factor(*ep)
        col_set = set(cols)
        if len(col_set) == ne:
            # no resource used twice: every flow is alone on its resources, so maxmin's
            # first round freezes each at its lowest level (the same floats: a level is
            # (cap - 0.0) / weight, nothing used yet; a flow whose lowest level is NaN
            # never freezes and keeps 0) and no switch queue is shared by two QPs (no
            # DCQCN cut, nothing missed); an entry's resource is its own, so its
            # capacity is read directly, without the resources' sorted index
            low = [inf] * n
            has = [False] * n
            for e in range(ne):
                col, w = cols[e], vals[e]  # weight is 0.0 + w: w
                if w > 1e-12:
                    x = (pace[col - R] if col >= R else capa[col]) - 0.0
                    v = (x if x >= 0.0 or x != x else 0.0) / w
                else:
                    v = inf
                i = fe[e]
                has[i] = True
                cur = low[i]
                if not (cur <= v or cur != cur):
                    low[i] = v
            cuts.extend([x < 1.0 for x in fac])
            out: list[float] = []
            for i in range(n):
                r0 = low[i] if has[i] and low[i] == low[i] else 0.0
                out.append(r0 * fac[i])
            return out
        used_res = sorted(col_set)
        m = len(used_res)
        where: dict[int, int] = {}
        for j in range(m):
            where[used_res[j]] = j
        inv = [where[c] for c in cols]
        cap: list[float] = []
        tol: list[float] = []
        for j in range(m):
            r = used_res[j]
            c = pace[r - R] if r >= R else capa[r]
            cap.append(c)
            tol.append(1e-9 * (c if c >= 1e-12 or c != c else 1e-12))
        # maxmin, scalar
        rate = [0.0] * n
        used = [0.0] * m
        active = [False] * n
        for i in fe:
            active[i] = True
        weight = [0.0] * m
        for e in range(ne):
            weight[inv[e]] += vals[e]
        up_tol = 1.0 + 1e-9
        for _ in range(m + 1):
            act_e = [active[fe[e]] for e in range(ne)]
            if not any(act_e):
                break
            level = [inf] * m
            for j in range(m):
                if weight[j] > 1e-12:
                    x = cap[j] - used[j]
                    level[j] = (x if x >= 0.0 or x != x else 0.0) / weight[j]
            low = [inf] * n
            for e in range(ne):
                if act_e[e]:
                    i, v = fe[e], level[inv[e]]
                    cur = low[i]
                    if not (cur <= v or cur != cur):
                        low[i] = v
            low_r = [inf] * m
            for e in range(ne):
                if act_e[e]:
                    j, v = inv[e], low[fe[e]]
                    cur = low_r[j]
                    if not (cur <= v or cur != cur):
                        low_r[j] = v
            frz = [False] * n
            anyf = False
            for e in range(ne):
                if act_e[e]:
                    j = inv[e]
                    if level[j] <= low_r[j] * up_tol:
                        frz[fe[e]] = True
                        anyf = True
            if not anyf:
                break
            for i in range(n):
                if frz[i]:
                    rate[i] = low[i]
            s_use = [0.0] * m
            s_w = [0.0] * m
            for e in range(ne):
                i = fe[e]
                if frz[i]:
                    j = inv[e]
                    s_use[j] += vals[e] * rate[i]
                    s_w[j] += vals[e]
            for j in range(m):
                used[j] = used[j] + s_use[j]
                weight[j] = weight[j] - s_w[j]
            for i in range(n):
                if frz[i]:
                    active[i] = False
        if self.dcqcn is not None:
            up0, down0, nvl0 = self._up0, self._down0, self._nvl_out0
            count = [0.0] * m
            for e in range(ne):
                if vals[e] > 0:
                    count[inv[e]] += 1.0
            full = [False] * m
            anyfull = False
            for j in range(m):
                r = used_res[j]
                up = up0 <= r < down0
                if r < nvl0 and not up and r < R and count[j] >= 2 and cap[j] - used[j] <= tol[j]:
                    full[j] = True
                    anyfull = True
            if anyfull:
                whole = [0.0] * m
                for e in range(ne):
                    whole[inv[e]] += vals[e]
                per_w: list[float] = []
                for j in range(m):
                    r = used_res[j]
                    per_w.append(cap[j] / whole[j] if up0 <= r < down0 and whole[j] > 0 else inf)
                offer = [inf] * n
                for e in range(ne):
                    i = fe[e]
                    v = per_w[inv[e]] / (1.0 if vals[e] > 0 else inf)
                    cur = offer[i]
                    if not (cur <= v or cur != cur):
                        offer[i] = v
                for i in range(n):
                    if math.isinf(offer[i]):
                        offer[i] = 0.0  # no NIC port (inside a server): offers nothing
                offered = [0.0] * m
                for e in range(ne):
                    offered[inv[e]] += vals[e] * offer[fe[e]]
                nq = [0.0] * n
                capq = [inf] * n
                for e in range(ne):
                    j = inv[e]
                    if full[j] and offered[j] > cap[j] + tol[j]:
                        i = fe[e]
                        v = count[j]
                        cur = nq[i]
                        if not (cur >= v or cur != cur):
                            nq[i] = v
                        v = cap[j]
                        cur = capq[i]
                        if not (cur <= v or cur != cur):
                            capq[i] = v
                for i in range(n):
                    if not nq[i] >= 2:
                        continue
                    if mute is not None and mute[i]:
                        if missed is not None:
                            missed[i] = (int(nq[i]), capq[i], offer[i])
                        continue
                    cut = self._dcqcn_factor(
                        int(nq[i]), capq[i], offer[i], size[i] if size is not None else 1048576.0
                    )
                    fac[i] = min(fac[i], cut)
        cuts.extend([x < 1.0 for x in fac])
        return [rate[i] * fac[i] for i in range(n)]

    def _dcqcn_factor(self, n: int, cap: float, offer: float, size: float) -> float:
        """The share of its max-min rate DCQCN leaves a QP of ``size`` payload bytes at
        a congested queue of capacity ``cap`` (bytes/ps) shared by ``n`` QPs that each
        offer ``offer`` (openmrc.flow.dcqcn, on the wire: payload / payload_share)."""
        if offer <= 0:
            return 1.0  # offers nothing to the queue (inside a server): DCQCN never cuts it
        key = (n, cap, offer, size)
        got = self._dcqcn_memo.get(key)
        if got is None:
            assert self.dcqcn is not None
            wire = 8e12 / self.payload_share  # payload bytes/ps -> wire b/s
            got = dcqcn_share(
                n,
                cap * wire,
                min(offer, self._host_c) * wire,
                self._host_c * wire,
                self._cnp_delay_ps,
                self._wire_packet,
                size / self.payload_share,
                self.dcqcn,
                self.ecn_profile,
            )
            self._dcqcn_memo[key] = got
        return got

    # ----- run ----------------------------------------------------------------------------
    def run(self, until_ps: float | None = None, stop_at_error: bool = False) -> FluidResult:
        """Run every job to its end (or ``until_ps``); the task times of each job.

        ``stop_at_error``: end the run at the first QP whose retries are exhausted
        (its transfer can never end, so neither can its job): ``end_ps`` is that
        time, and the events of that instant after it are not applied.  Without it
        the run goes on until nothing can move (``error_ps`` gives the first error).

        Divisions by zero in the run's vectorised steps are expected (rates of 0
        give infinite times, masked out), so numpy's warnings are off for the run
        once instead of at every step.
        """
        # the run makes millions of small objects and few cycles (its own closures):
        # the cyclic collector's passes over them are off while it runs
        collect = gc.isenabled()
        gc.disable()
        try:
            with np.errstate(divide="ignore", invalid="ignore"):
                return self._run(until_ps, stop_at_error)
        finally:
            if collect:
                gc.enable()

    def _run(self, until_ps: float | None, stop_at_error: bool = False) -> FluidResult:
        """The run (``run``): every job to its end (or ``until_ps``, or its first QP
        error with ``stop_at_error``).

        The flows in flight live in ``flows`` and, index for index, in numpy arrays
        (remaining and lost bytes, rate, efficiency, dead, group), so advancing time
        is vectorised; after an event only the resource groups whose flows or
        capacities changed get new rates (``_rates``).
        """
        tasks: list[tuple[int, int, Task]] = []  # (job, index in job, task)
        base: list[int] = []
        ring_n: dict[int, int] = {}  # folded rings: global task index -> whole ring's ranks
        for j, job in enumerate(self.jobs):
            base.append(len(tasks))
            ring_n.update((len(tasks) + i, n) for i, n in job.ring_ranks.items())
            tasks.extend((j, i, tk) for i, tk in enumerate(job.graph.tasks))
        n = len(tasks)
        left = np.zeros(n, dtype=np.int64)
        users: list[list[int]] = [[] for _ in range(n)]
        for gi, (j, _i, tk) in enumerate(tasks):
            left[gi] = len(tk.deps)
            for dep in tk.deps:
                users[base[j] + dep].append(gi)
        start: list[float | None] = [None] * n
        end: list[float | None] = [None] * n
        heap: list[tuple[float, int, int, int]] = []  # (time, order, kind, payload)
        seq = 0
        # kinds: 0 task ready, 1 task done, 2 fault (true state), 3 fault known
        for gi, (j, _i, _tk) in enumerate(tasks):
            if left[gi] == 0:
                heapq.heappush(heap, (float(self.jobs[j].start_ps), seq, 0, gi))
                seq += 1
        for fi, flt in enumerate(self._faults):
            heapq.heappush(heap, (float(flt.at_ps), seq, 2, fi))
            seq += 1
        # the flows in flight; their remaining and lost bytes, rates, efficiencies, whether
        # their path is dead and their groups, index for index (the arrays are the truth
        # for a flow in flight, the _Flow's rem / lost for one waiting to be added)
        #: the _Flow of every slot (a list: its items are read without a numpy call and
        #: typed, so the compiled run reads their attributes directly)
        flows: list[_Flow] = []
        # the per-slot arrays are the rows of three tables (floats, integers, booleans),
        # so that putting flows in flight and taking them out is one numpy call per
        # table, not one per array; the names below are views of the rows (``views``)
        # the tables have room for ``room`` slots, the first ``used`` in use (flows in
        # flight, and ended ones marked gone until ``compact``: ``gone_a``, ``n_gone``);
        # new flows take the next free slots, so slots stay in the order flows came in
        # flight
        room = 64
        used = 0
        n_gone = 0
        compact_dead = self.compact_dead
        f_tab = np.zeros((_F_ROWS, room))
        i_tab = np.zeros((_I_ROWS, room), dtype=np.int64)
        b_tab = np.zeros((_B_ROWS, room), dtype=bool)
        pace_a, rem_a, lost_a, rate_a, eff_a, tot_a, top_a, wt_a = f_tab[:, :0]
        oid_a, grp_a, buf_a, ri_a, lab_a = i_tab[:, :0]
        dead_a, cut_a, mute_a, ep_a, gone_a = b_tab[:, :0]
        # rem_a, lost_a, rate_a, eff_a: the remaining and lost bytes, rate, efficiency;
        # buf_a: _Flow.buf; cut_a: _Flow.cut (set on the _Flow when it is rerouted);
        # tot_a, mute_a, ep_a: _Flow.total, .mute and whether .episode is set (a refill
        # reads them as arrays)
        #: dead QPs' bytes queued at T0 uplinks (payload bytes), by the uplink's resource
        buf_q: dict[int, float] = {}
        xoff = self.pfc_xoff_bytes * self.payload_share
        # whether a slot may hold a dead QP, a QP filling an uplink's queue (buf >= 0) or
        # a flow of efficiency other than 1: when not, the steps for them are skipped
        # (adding the lost bytes of no flow, rate x 1.0: the same floats)
        always = not self.skip_idle_steps
        may_dead = may_buf = may_eff = always
        #: oid_a: every slot's _Flow.oid: ascending, as slots keep the order flows came in
        #: flight
        next_oid = 0
        #: the flows in flight on each resource, by resource (refill "component": what a
        #: change reaches); None: no flow was ever on it.  A set left empty is kept for
        #: the next flow there (``on_used``: the resources with a set)
        on_res: list[set[_Flow] | None] = [None] * self.R
        on_used: list[int] = []
        added: list[_Flow] = []  # flows started by this instant's events, not yet in flows
        dirty: set[int] = set()  # groups whose rates must be recomputed ("group")
        seeds: set[int] = set()  # resources whose flows changed ("component")
        dirty_all = self.refill == "all"
        refilled_flows = 0
        walks = walked = 0
        #: refill "component" with reuse_component: the kept closed sets of flows (every
        #: flow in flight on one of a set's resources is in it and uses no other
        #: resource), by label: the label of each resource in one (``lab``, by resource:
        #: -1 in none; a list, read without hashing), each set's
        #: resources (``lab_res``), the flows it may still refill (``lab_left``), and the
        #: label of each slot's flow (``lab_a``, -1: in none)
        lab: list[int] = [-1] * self.R
        lab_res: dict[int, list[int]] = {}
        lab_left: dict[int, float] = {}
        next_lab = 0
        budget = self.reuse_budget
        min_kept = self.reuse_min_flows
        #: when the transport learns of a fault: (fault, host links, fabric links, alive)
        known: list[tuple[int, list[tuple[int, int]], list[tuple[int, int, int]], bool]] = []
        # RoCE QPs waiting for their ACK timeout.  Only the timeout wakes them: as at
        # packet level, every transfer is a message on QPs of its own (the connection
        # keeps only their ECMP path), so a later message's packets NAK nothing of it.
        parked: list[_Flow | None] = []
        #: QPs DCQCN had cut when their path died, sending nothing until their timer
        held_dead: list[_Flow] = []

        #: rings stalled behind lost steps: how many resends each waits for, and its flows
        #: that sent all they could meanwhile
        stalls: dict[int, int] = {}
        stalled: dict[int, list[_Flow]] = {}
        #: rings sent as messages (ring_messages): per transfer its hops (src, dst, bytes),
        #: steps, QPs per hop and job; and the messages whose previous step arrives later
        ring_of: dict[int, tuple[list[tuple[int, int, float]], int, int, int]] = {}
        msg_starts: list[tuple[int, int, int, int]] = []
        #: ring_weights: every RoCE ring hop flow's bytes sent (its lost ones too), rate,
        #: step bytes, steps and the hop before it (its index here, -1: none), by _Flow.ri
        weigh = self.ring_weights and self.transport != "mrc" and not self.ring_messages
        reuse = self.reuse_component and self.refill == "component" and not weigh
        rs = _RingHops(self._nvl_out0)
        # ri_a: _Flow.ri of every slot; top_a: what every slot's flow may send (total -
        # held); wt_a: _Flow.wt of every slot
        t_wt = math.inf  # when a hop flow's messages ready next change by a whole one

        def start_msg(x: int, hop: int, k: int, q: int) -> None:
            """Start QP ``q``'s share of step ``k`` of ring ``x``'s hop ``hop``: a message."""
            hops, nsteps, nq, j = ring_of[x]
            s, d, size = hops[hop]
            fl = _Flow(x, s, d, size / nsteps / nq, j, q)
            fl.hop, fl.msg = hop, k
            self._route(fl)
            added.append(fl)

        def entries(fls: list[_Flow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """The (index among ``fls``, resource, weight) entries of flows ``fls``, flow
            by flow."""
            if not len(fls):
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
            lens = [len(f.res) for f in fls]
            return (
                np.repeat(np.arange(len(fls)), lens),
                np.concatenate([f.res for f in fls]),
                np.concatenate([f.w for f in fls]),
            )

        def index(fls: list[_Flow]) -> None:
            """Put flows ``fls`` on their resources (``on_res``) and seed a refill there."""
            for f in fls:
                rl = f.rl
                seeds.update(rl)
                for r in rl:
                    got = on_res[r]
                    if got is None:
                        on_res[r] = {f}
                        on_used.append(r)
                    else:
                        got.add(f)

        def unindex(f: _Flow) -> None:
            """Take flow ``f`` off its resources; seed a refill there."""
            for r in f.rl:
                seeds.add(r)
                got = on_res[r]
                if got is not None:
                    got.discard(f)

        def reindex() -> None:
            """Rebuild ``on_res`` after the flows in flight were rerouted."""
            for r in on_used:
                got = on_res[r]
                if got is not None:
                    got.clear()
            index(flows)
            seeds.clear()

        def reach(todo: list[int], seen: set[int], res: list[int] | None) -> set[_Flow]:
            """The flows connected to resources ``todo`` (each already in ``seen``)
            through the resources they use; ``seen`` (and ``res``, when given) gain the
            resources reached.  ``todo`` is used up."""
            got: set[_Flow] = set()
            while todo:
                here = on_res[todo.pop()]
                if here is None:
                    continue
                for f in here:
                    if f in got:
                        continue
                    got.add(f)
                    for r in f.rl:
                        if r not in seen:
                            seen.add(r)
                            todo.append(r)
                            if res is not None:
                                res.append(r)
            return got

        def slots(got: set[_Flow]) -> np.ndarray:
            """The slots (ascending) of flows ``got``."""
            if len(got) <= 16:
                # a few: sorted here, one numpy call
                return oid_a.searchsorted(sorted([f.oid for f in got]))
            ids = np.fromiter((f.oid for f in got), np.int64, len(got))
            ids.sort()
            return oid_a.searchsorted(ids)

        def component(starts: Any) -> np.ndarray:
            """The slots (ascending) of the flows connected to resources ``starts``
            through the resources they use."""
            todo = list(starts)
            got = reach(todo, set(todo), None)
            if not got:
                return np.zeros(0, dtype=np.int64)
            return slots(got)

        def dissolve(gone: set[int]) -> None:
            """Forget the kept sets labelled ``gone``: a change there walks again."""
            for x in gone:
                for r in lab_res.pop(x):
                    lab[r] = -1
                del lab_left[x]
            if len(gone) == 1:
                (x,) = gone
                lab_a[lab_a == x] = -1
            else:
                lab_a[np.isin(lab_a, list(gone))] = -1

        def walk_apart(starts: list[int]) -> np.ndarray:
            """The slots (ascending) of the flows connected to resources ``starts`` (none
            of them labelled); when they are at least ``min_kept``, each connected set of
            at least ``min_kept`` flows among them labelled and kept apart."""
            nonlocal next_lab, walks, walked
            idx = component(starts)
            walks += 1
            walked += len(idx)
            if len(idx) < min_kept:
                return idx
            seen: set[int] = set()
            for s0 in starts:
                if s0 in seen:
                    continue
                seen.add(s0)
                res = [s0]
                got = reach([s0], seen, res)
                if len(got) < min_kept:
                    continue
                x = next_lab
                next_lab += 1
                for r in res:
                    lab[r] = x
                lab_res[x] = res
                lab_left[x] = budget * len(got)
                lab_a[slots(got)] = x
            return idx

        def views() -> None:
            """Name the used slots' rows (after ``used`` or the tables changed)."""
            nonlocal rem_a, lost_a, rate_a, eff_a, dead_a, grp_a, pace_a, buf_a, cut_a
            nonlocal tot_a, mute_a, ep_a, oid_a, ri_a, top_a, wt_a, lab_a, gone_a
            pace_a, rem_a, lost_a, rate_a, eff_a, tot_a, top_a, wt_a = f_tab[:, :used]
            oid_a, grp_a, buf_a, ri_a, lab_a = i_tab[:, :used]
            dead_a, cut_a, mute_a, ep_a, gone_a = b_tab[:, :used]

        def compact() -> None:
            """Drop the gone slots: the live ones move down, in their order."""
            nonlocal used, n_gone
            if not n_gone:
                return
            if n_gone == used:
                flows.clear()
                used = 0
            else:
                keep = (~gone_a).nonzero()[0]
                m = len(keep)
                f_tab[:, :m] = f_tab[:, keep]
                i_tab[:, :m] = i_tab[:, keep]
                b_tab[:, :m] = b_tab[:, keep]
                flows[:] = [flows[i] for i in keep.tolist()]
                used = m
            n_gone = 0
            views()

        def merge() -> None:
            """Put the added flows in flight (their groups' rates are recomputed)."""
            nonlocal next_oid, f_tab, i_tab, b_tab, room, used
            nonlocal may_dead, may_buf, may_eff
            k = len(added)
            # every flow's column of the tables, one after the other (each value is
            # exact in a float): one flat list, read by numpy in one go
            rows: list[Any] = []
            pace = self.pace
            for f in added:
                f.oid = next_oid
                next_oid += 1
                dirty.add(f.grp)
                if f.dead:
                    may_dead = True
                if f.buf >= 0:
                    may_buf = True
                if f.eff != 1.0:
                    may_eff = True
                rows.extend(
                    (
                        pace(f),
                        f.rem,
                        f.lost,
                        0.0,
                        f.eff,
                        f.total,
                        f.total - f.held,
                        f.wt,
                        f.oid,
                        f.grp,
                        f.buf,
                        f.ri,
                        -1,
                        f.dead,
                        f.cut,
                        f.mute,
                        f.episode is not None,
                        False,
                    )
                )
            index(added)
            c = np.fromiter(rows, float, len(rows)).reshape(k, _F_ROWS + _I_ROWS + _B_ROWS).T
            # the integer and boolean rows stay floats here (small integers, 0 and 1:
            # exact) and are cast as the tables take them
            new_lab = c[_F_ROWS + _I_ROWS - 1]
            if lab_res:
                # a flow wholly on one kept set's resources joins it; one across a kept
                # set's edge dissolves it (the set would no longer be closed)
                gone: set[int] = set()
                for i, f in enumerate(added):
                    rl = f.rl
                    x = lab[rl[0]]
                    if x >= 0 and all(lab[r] == x for r in rl):
                        new_lab[i] = x
                        continue
                    for r in rl:
                        y = lab[r]
                        if y >= 0:
                            gone.add(y)
                if gone:
                    new_lab[np.isin(new_lab, list(gone))] = -1
                    dissolve(gone)
            flows.extend(added)
            end = used + k
            if end > room:
                room = max(2 * room, end)
                f_new = np.zeros((_F_ROWS, room))
                i_new = np.zeros((_I_ROWS, room), dtype=np.int64)
                b_new = np.zeros((_B_ROWS, room), dtype=bool)
                f_new[:, :used] = f_tab[:, :used]
                i_new[:, :used] = i_tab[:, :used]
                b_new[:, :used] = b_tab[:, :used]
                f_tab, i_tab, b_tab = f_new, i_new, b_new
            f_tab[:, used:end] = c[:_F_ROWS]
            i_tab[:, used:end] = c[_F_ROWS : _F_ROWS + _I_ROWS]
            b_tab[:, used:end] = c[_F_ROWS + _I_ROWS :]
            used = end
            views()
            added.clear()

        pending: dict[int, int] = {}
        now = 0.0
        events = 0
        recomputes = 0
        fault_log: list[dict[str, Any]] = []
        limit = math.inf if until_ps is None else float(until_ps)
        error_ps: float | None = None  # the first QP whose retries ran out
        eff_rate = np.zeros(0)
        dt_0 = np.zeros(())
        # the groups to refill, by group number (_group: planes, MRC's fabric, servers)
        dirty_mask = np.zeros(self.P + 2 + self.H // max(1, self.gpus_per_server), dtype=bool)
        while True:
            # hop flows back in flight (resent, or a stall lifted) may have moved: look
            merged = weigh and any(f.ri >= 0 and f.rem < f.total - f.held for f in added)
            if added:
                merge()
            checked = False
            if weigh and (merged or now >= t_wt) and bool((ri_a >= 0).any()):
                # messages ready at the hop flows' ports: new shares where they moved by one
                checked = True
                got, new_wt = rs.retarget(ri_a, top_a, rem_a, wt_a)
                if len(got):
                    wt_a[got] = new_wt
                    dirty.update(grp_a[got].tolist())
                    for i in got.tolist():
                        seeds.update(flows[i].rl)
            refilled = False  # rates of hop flows changed
            if dirty_all or dirty or seeds:
                # every changed component (or group) in one filling: they share no
                # resource and every step of the filling is per resource or per flow, so
                # each gets the rates it gets alone
                if dirty_all:
                    compact()
                    idx = np.arange(len(flows))
                    if lab_res:
                        dissolve(set(lab_res))
                elif self.refill == "group":
                    compact()
                    dirty_mask[:] = False
                    dirty_mask[list(dirty)] = True
                    idx = np.flatnonzero(dirty_mask[grp_a])
                elif not seeds:
                    idx = np.zeros(0, dtype=np.int64)  # nothing on a resource changed
                elif reuse:
                    # the kept sets the changes lie on, closed, hold every flow they
                    # reach there; the changes elsewhere are walked, each set apart
                    hit: set[int] = set()
                    free: list[int] = [] if lab_res else list(seeds)
                    if lab_res:
                        for r in seeds:
                            x = lab[r]
                            if x < 0:
                                free.append(r)
                            else:
                                hit.add(x)
                    parts = [walk_apart(free)] if free else []
                    if hit:
                        if len(hit) == 1:
                            (x,) = hit
                            kept = (lab_a == x).nonzero()[0]
                            tired = {x} if lab_left[x] <= len(kept) else set()
                            lab_left[x] -= len(kept)
                        else:
                            kept = np.flatnonzero(np.isin(lab_a, list(hit)))
                            xs, ns = np.unique(lab_a[kept], return_counts=True)
                            tired = set()
                            for x, n in zip(xs.tolist(), ns.tolist(), strict=True):
                                lab_left[x] -= n
                                if lab_left[x] <= 0:
                                    tired.add(x)
                        parts.append(kept)
                        if tired:
                            # refilled its budget: walked afresh at its next change
                            dissolve(tired)
                    if len(parts) == 1:
                        idx = parts[0]
                    elif parts:
                        idx = np.sort(np.concatenate(parts))
                    else:
                        idx = np.zeros(0, dtype=np.int64)
                else:
                    idx = component(seeds)
                    walks += 1
                    walked += len(idx)
                if weigh and len(idx):
                    refilled = bool((ri_a[idx] >= 0).any())
                refilled_flows += len(idx)
                fls: list[_Flow] = [flows[i] for i in idx.tolist()] if len(idx) else []
                n_e = 0
                if fls and not weigh:
                    for f in fls:
                        n_e += len(f.rl)
                if fls and not weigh and n_e <= self.small_fill:
                    # a small component: one float at a time (the same rates as _fill)
                    got_cuts: list[bool] = []
                    missed_l: dict[int, tuple[int, float, float]] = {}
                    mute_l: list[bool] | None = None
                    eps_l: list[tuple[int, float, float, float] | None] | None = None
                    size_l: list[float] | None = None
                    if self.dcqcn is not None:
                        # mute_a, ep_a and tot_a mirror the flows' own attributes (set
                        # from them whenever a flow is put in flight or rerouted): read
                        # from the flows, without a numpy call each
                        mute_l = [f.mute for f in fls]
                        size_l = [f.total for f in fls]
                        for f in fls:
                            if f.episode is not None:
                                eps_l = [g.episode for g in fls]
                                break
                    rate_a[idx] = self._fill_lists(
                        fls,
                        pace_a[idx].tolist(),
                        size_l,
                        mute_l,
                        eps_l,
                        missed_l,
                        got_cuts,
                    )
                    if self.dcqcn is not None:
                        cut_a[idx] = got_cuts
                    if mute_l is not None and any(mute_l):
                        for q in range(len(fls)):
                            if mute_l[q]:
                                fls[q].missed = missed_l.get(q)
                elif fls:
                    e_fl, e_res, e_w = entries(fls)
                    sizes = None if self.dcqcn is None else tot_a[idx]
                    mute = eps = cuts = None
                    missed: dict[int, tuple[int, float, float]] = {}
                    if self.dcqcn is not None:
                        mute = mute_a[idx]
                        if ep_a[idx].any():
                            eps = [g.episode for g in fls]
                        cuts = np.zeros(len(idx), dtype=bool)
                    shares = None
                    if weigh:
                        shares = wt_a[idx]
                        if not (shares != 1.0).any():
                            shares = None
                    rate_a[idx] = self._fill(
                        len(idx),
                        e_fl,
                        e_res,
                        e_w,
                        pace_a[idx],
                        sizes,
                        mute,
                        eps,
                        missed,
                        cuts,
                        shares,
                    )
                    if cuts is not None:
                        cut_a[idx] = cuts
                    if mute is not None and mute.any():
                        # the cut each muted QP misses now (None: its queue is not congested)
                        for q in np.flatnonzero(mute).tolist():
                            fls[q].missed = missed.get(q)
                recomputes += 1
                dirty.clear()
                seeds.clear()
                dirty_all = self.refill == "all"
            # next flow completion
            t_flow = math.inf
            if len(flows):
                eff_rate = rate_a * eff_a if may_eff else rate_a
                # the least time to finish, rem / rate, over the flows with a rate: without
                # one, rem / 0 is inf, or NaN with nothing left, which ``fmin`` passes
                # over (NaN only when every slot gives NaN: none has a rate)
                t_min = float(_np_fmin(rem_a / eff_rate))
                t_flow = now + (t_min if t_min == t_min else math.inf)
                if weigh and (refilled or checked):
                    t_wt = now + rs.next_change(ri_a, top_a, rem_a, wt_a, eff_rate)
            # dead QPs filling a T0 uplink's queue: when the PFC budgets are full
            t_buf = math.inf
            buf_ex: dict[int, tuple[float, float]] = {}
            if len(flows) and xoff > 0 and may_buf and bool((buf_a >= 0).any()):
                on = np.flatnonzero(buf_a >= 0)
                for r in sorted(set(buf_a[on].tolist())):
                    mem = on[buf_a[on] == r]
                    ex = float(eff_rate[mem].sum()) - float(self.cap[r])
                    if ex <= 0:
                        continue
                    budget = xoff * len({flows[m].src for m in mem.tolist()})
                    buf_ex[r] = (ex, budget)
                    t_buf = min(t_buf, now + max(0.0, budget - buf_q.get(r, 0.0)) / ex)
            t_ev = heap[0][0] if heap else math.inf
            # min(t_flow, t_ev, t_buf, t_wt), compared as floats (builtin min's order: a
            # later value replaces the least so far only when it is less)
            t = t_flow
            if t_ev < t:
                t = t_ev
            if t_buf < t:
                t = t_buf
            if t_wt < t:
                t = t_wt
            if t == math.inf or t > limit:
                if len(flows) and limit < math.inf:
                    now = limit
                break
            if len(flows):
                dt = t - now
                dt_0[()] = dt  # a 0-d array: the same product, without a scalar's conversion
                moved = eff_rate * dt_0
                rem_a -= moved
                if may_dead:
                    lost_a[dead_a] += moved[dead_a]
                done = _ended(rem_a, eff_rate)
                ends = done.nonzero()[0]
                if len(ends):
                    for i in ends.tolist():
                        fl: _Flow = flows[i]
                        dirty.add(fl.grp)
                        unindex(fl)
                        if fl.ri >= 0:
                            rs.leave(fl.ri, float(top_a[i]) - max(0.0, float(rem_a[i])))
                            fl.wt = float(wt_a[i])
                        lost_i = float(lost_a[i])
                        if lost_i > 0:
                            # all sent, some of it lost: the ACK timeout rewinds the QP
                            fl.rem, fl.lost = 0.0, lost_i
                            step = fl.msg if fl.msg >= 0 else fl.steps - 1
                            fl.rto, fl.waited = self._first_rto(fl, step), 0
                            heapq.heappush(heap, (t + fl.rto, seq, 4, len(parked)))
                            parked.append(fl)
                            seq += 1
                            continue
                        tr = fl.transfer
                        if fl.held > 0:
                            if tr in stalls:
                                stalled.setdefault(tr, []).append(fl)  # waits for the step
                            else:  # the lost steps arrived meanwhile: go on
                                fl.rem, fl.held = fl.held, 0.0
                                added.append(fl)
                            continue
                        if fl.redo:
                            stalls[tr] -= 1
                            if not stalls[tr]:
                                # the lost steps arrived: the ring moves again
                                del stalls[tr]
                                for f in stalled.pop(tr, []):
                                    f.rem, f.held = f.held, 0.0
                                    added.append(f)
                                for k, f in enumerate(flows):
                                    if (
                                        f.transfer == tr
                                        and f.held > 0
                                        and not done[k]
                                        and not gone_a[k]
                                    ):
                                        rem_a[k] += f.held
                                        f.held = 0.0
                                        top_a[k] = f.total
                        if fl.msg >= 0:
                            # a ring's message arrived: the next rank sends the next step
                            hops, nsteps, _nq, _j = ring_of[tr]
                            if fl.msg + 1 < nsteps:
                                G = self.gpus_per_server
                                g = self.latency_ps if fl.src // G != fl.dst // G else 0
                                heapq.heappush(heap, (t + g, seq, 6, len(msg_starts)))
                                msg_starts.append((tr, (fl.hop + 1) % len(hops), fl.msg + 1, fl.qp))
                                seq += 1
                        pending[tr] -= 1
                        if pending[tr] == 0:
                            del pending[tr]
                            # paced rings: the steps' waits are in the pace, the last remains
                            lat = self._latency(tasks[tr], self.jobs) * (
                                1
                                if self.pace_rings or tr in ring_of
                                else steps_of(tasks[tr][2], ring_n.get(tr, 0))
                            )
                            heapq.heappush(heap, (t + lat, seq, 1, tr))
                            seq += 1
                    # their slots are marked gone; the tables drop them later (compact)
                    # (one end, the usual case, as a slice: cheaper than fancy indexing)
                    gone_at: slice | np.ndarray = ends
                    if len(ends) == 1:
                        e0 = int(ends[0])
                        gone_at = slice(e0, e0 + 1)
                    f_tab[:, gone_at] = _F_GONE
                    i_tab[2:, gone_at] = -1
                    b_tab[:, gone_at] = _B_GONE
                    n_gone += len(ends)
                    if n_gone == used or n_gone > compact_dead * used:
                        compact()
                    if may_dead:
                        may_dead = always or bool(dead_a.any())
            full = []
            for r, (ex, budget) in buf_ex.items():
                buf_q[r] = buf_q.get(r, 0.0) + ex * (t - now)
                if buf_q[r] >= budget * (1 - 1e-9):
                    full.append(r)
            now = t
            if full:
                # PFC pauses the sending ports: the dead QPs get the uplink's share
                self._buf_full.update(full)
                self._route_cache.clear()
                self._pairs.clear()
                self._live.clear()
                compact()
                for i, fl in enumerate(flows):
                    if fl.buf in full:
                        self._route(fl)
                        pace_a[i], buf_a[i], mute_a[i] = self.pace(fl), fl.buf, fl.mute
                may_buf = always or bool((buf_a >= 0).any())
                reindex()
                dirty_all = True
            while heap and heap[0][0] <= now:
                _t, _o, kind, x = heapq.heappop(heap)
                events += 1
                if kind == 0:
                    start[x] = now
                    j, _i, task = tasks[x]
                    if task.kind == "compute":
                        heapq.heappush(heap, (now + task.dur_ps, seq, 1, x))
                        seq += 1
                        continue
                    hosts = self.jobs[j].hosts
                    made = 0
                    ring_w = ring_n.get(x, 0)
                    hops = flows_of(task, hosts, ring_w)
                    if self.ring_messages and steps_of(task, ring_w) > 1 and hops[0][2] > 0:
                        # every hop sends its step 0 now; step k + 1 of a hop when step k
                        # of the hop before it arrived (start_msg, at a message's end)
                        ring_of[x] = (hops, steps_of(task, ring_w), self.qps, j)
                        for hop in range(len(hops)):
                            for q in range(self.qps):
                                start_msg(x, hop, 0, q)
                        pending[x] = len(hops) * steps_of(task, ring_w) * self.qps
                        continue
                    steps = steps_of(task, ring_w) if self.pace_rings else 1
                    gap = self._latency(tasks[x], self.jobs)
                    hop_flows: dict[tuple[int, int], _Flow] = {}
                    for hop, (s, d, size) in enumerate(hops):
                        if size <= 0:
                            continue
                        nq = 1 if self.transport == "mrc" else self.qps
                        for q in range(nq):
                            # one connection per job and host pair, as the packet level keeps it
                            fl = _Flow(x, s, d, size / nq, j, q)
                            fl.steps, fl.gap, fl.hop = steps, gap, hop
                            self._route(fl)
                            added.append(fl)
                            hop_flows[hop, q] = fl
                            made += 1
                    if weigh and steps > 1:
                        rs.add_ring(hop_flows, len(hops))
                    if made:
                        pending[x] = made
                    else:
                        heapq.heappush(heap, (now, seq, 1, x))
                        seq += 1
                elif kind == 4:
                    parked_fl = parked[x]
                    if parked_fl is None:
                        continue  # no longer parked
                    fl = parked_fl
                    self._route(fl)
                    fl.tries += 1
                    fl.waited += fl.rto
                    if fl.dead and self._may_retry(fl):
                        if self.adp_base_ps is not None:
                            fl.rto = min(2 * fl.rto, self.rto_ps)
                        heapq.heappush(heap, (now + fl.rto, seq, 4, x))
                        seq += 1
                    elif not fl.dead:
                        parked[x] = None
                        fl.rem, fl.lost = fl.lost, 0.0  # go-back-N: resend what was lost
                        added.append(fl)
                    else:  # retries exhausted, the QP is in error; its transfer never ends
                        if error_ps is None:
                            error_ps = now
                        if stop_at_error:
                            break
                elif kind == 6:
                    start_msg(*msg_starts[x])
                elif kind == 5:
                    # DCQCN's timer lifts a dead QP's rate: it sends at its share again
                    hd = held_dead[x]
                    compact()
                    for i, fl in enumerate(flows):
                        if fl is hd:
                            pace_a[i] = self.pace(fl)
                            dirty.add(fl.grp)
                            seeds.update(fl.rl)
                            break
                elif kind == 1:
                    end[x] = now
                    for u in users[x]:
                        left[u] -= 1
                        if left[u] == 0:
                            j = tasks[u][0]
                            at = max(now, float(self.jobs[j].start_ps))
                            heapq.heappush(heap, (at, seq, 0, u))
                            seq += 1
                else:
                    if kind == 2:
                        fault = self._faults[x]
                        hl, fl_links = self._targets(fault)
                        alive = fault.kind.endswith("_up")
                        for h, p in hl:
                            self.host_true[h, p] = alive
                        for p, a, k in fl_links:
                            self.fab_true[p, a, k] = alive
                        for delay, part_h, part_f in self._seen_after(fault.kind, hl, fl_links):
                            heapq.heappush(heap, (now + delay, seq, 3, len(known)))
                            known.append((x, part_h, part_f, alive))
                            seq += 1
                        fault_log.append(
                            {
                                "time_ps": int(now),
                                "kind": fault.kind,
                                "target": fault.target or f"h{fault.host}/p{fault.plane}",
                            }
                        )
                    else:
                        fi, part_h, part_f, alive = known[x]
                        fault = self._faults[fi]
                        for h, p in part_h:
                            self.host_known[h, p] = alive
                        for p, a, k in part_f:
                            self.fab_known[p, a, k] = alive
                        if part_f:  # routes changed: the uplinks' queues start afresh
                            self._buf_full.clear()
                            buf_q.clear()
                        self._update_caps()
                        fault_log.append(
                            {
                                "time_ps": int(now),
                                "kind": f"{fault.kind} seen",
                                "target": fault.target or f"h{fault.host}/p{fault.plane}",
                            }
                        )
                    self._route_cache.clear()
                    self._pairs.clear()
                    self._live.clear()
                    if added:
                        merge()
                    compact()
                    for i, fl in enumerate(flows):
                        was = bool(dead_a[i])
                        was_mute = fl.mute
                        fl.cut = bool(cut_a[i])
                        self._route(fl)
                        if was_mute and not fl.mute and fl.missed is not None:
                            # its reverse path is back: the CNPs of the packets marked in
                            # its congested queue reach it at last, and DCQCN cuts it now,
                            # with the bytes it has left (packet level: aicb-16 RoCE with
                            # the failure; docs/training.md)
                            fl.episode = (*fl.missed, float(rem_a[i]) + fl.held)
                            fl.missed = None
                            ep_a[i] = True
                        eff_a[i], dead_a[i], grp_a[i] = fl.eff, fl.dead, fl.grp
                        mute_a[i] = fl.mute
                        buf_a[i] = fl.buf
                        pace_a[i] = self.pace(fl)
                        if fl.dead and not was and fl.cut and self.dcqcn is not None:
                            # DCQCN had cut it and no CNP reaches it now: at packet level
                            # its rate stays near DCQCN's floor until the rate-increase
                            # timer after its last CNP (chakra-8 RoCE with the failure,
                            # seed 4: its stage hops' 512 KiB QPs, cut from 17 us, were
                            # still sending at convergence and resent on a NAK)
                            fl.hold = now + self.dcqcn.rate_increase_interval_ps
                            heapq.heappush(heap, (fl.hold, seq, 5, len(held_dead)))
                            held_dead.append(fl)
                            seq += 1
                        if fl.dead and fl.hold > now:
                            pace_a[i] = 0.0
                        if was and not fl.dead and lost_a[i] > 0:
                            # rerouted: the receiver sees the gap in the step being sent,
                            # NAKs, the QP resends it; a ring's steps sent whole on the
                            # dead path were messages of their own: no packet of theirs
                            # follows to provoke a NAK, they wait for their timeout
                            whole, partial, k0 = self._lost_steps(
                                fl, float(rem_a[i]) + fl.held, float(lost_a[i])
                            )
                            if whole > 0:
                                redo = _Flow(fl.transfer, fl.src, fl.dst, 0.0, fl.job, fl.qp)
                                redo.rem, redo.lost, redo.redo = 0.0, whole, True
                                self._route(redo)
                                er = float(rate_a[i] * eff_a[i])
                                sent_at = now - (partial / er if er > 0 else 0.0)
                                redo.rto, redo.waited = self._first_rto(redo, k0), 0
                                fire = sent_at + redo.rto
                                while fire <= now:  # expired on the dead path: lost again
                                    redo.tries += 1
                                    redo.waited += redo.rto
                                    if self.adp_base_ps is not None:
                                        redo.rto = min(2 * redo.rto, self.rto_ps)
                                    fire += redo.rto
                                heapq.heappush(heap, (fire, seq, 4, len(parked)))
                                seq += 1
                                parked.append(redo)
                                pending[fl.transfer] += 1
                                stalls[fl.transfer] = stalls.get(fl.transfer, 0) + 1
                                self._stall_ring(fl, k0, tasks, flows, rem_a, lost_a)
                                top_a[:] = np.fromiter(
                                    (f.total - f.held for f in flows), float, len(flows)
                                )
                            rem_a[i] += lost_a[i] - whole
                            lost_a[i] = 0.0
                    may_dead = always or bool(dead_a.any())
                    may_buf = always or bool((buf_a >= 0).any())
                    may_eff = always or bool((eff_a != 1.0).any())
                    reindex()
                    dirty_all = True
            if stop_at_error and error_ps is not None:
                break
        out = []
        for j, job in enumerate(self.jobs):
            b = base[j]
            k = len(job.graph.tasks)
            out.append(JobTimes(start[b : b + k], end[b : b + k]))
        return FluidResult(
            out,
            now,
            events,
            recomputes,
            fault_log,
            refilled_flows,
            error_ps=error_ps,
            walks=walks,
            walked=walked,
        )

    @staticmethod
    def _lost_steps(fl: _Flow, rem: float, lost: float) -> tuple[float, float, int]:
        """(bytes of whole ring steps among the lost bytes, bytes of the step being sent,
        the first whole step lost).

        The flow's ``total`` bytes are ``steps`` steps of ``total / steps``; the last
        ``lost`` bytes it sent (``total - rem`` so far) went to a dead path.  A
        transfer of one step has no whole step to lose while it still sends.
        """
        if fl.steps <= 1:
            return 0.0, 0.0, 0
        c = fl.total / fl.steps
        sent = min(fl.total - rem, fl.total)
        first = math.ceil((sent - lost) / c - 1e-9)
        last = math.floor(sent / c + 1e-9)
        return max(0, last - first) * c, max(0.0, sent - last * c), first

    @staticmethod
    def _stall_ring(
        dead: _Flow,
        k0: int,
        tasks: list[tuple[int, int, Task]],
        flows: Any,
        rem_a: np.ndarray,
        lost_a: np.ndarray,
    ) -> None:
        """Hold back what a ring's hops cannot send while its step ``k0`` on ``dead``'s hop
        is lost: rank ``r`` sends step ``k + 1`` only after step ``k`` from ``r - 1``
        arrived, so the hop ``d`` places after the dead one stops after step
        ``k0 + d - 1`` (the dead hop itself after ``k0 + n - 1``).

        The stall is found when routing converges, but it began when step ``k0``
        was lost: until convergence the flow level let the other hops send on, so
        a hop that got past its last step is set back to it (the bytes beyond wait
        with the rest; the packet level's hop never sent them).  A hop whose own
        path was dead keeps what it sent: its lost bytes are resent on their own.
        """
        n = len(tasks[dead.transfer][2].ranks)
        for k, f in enumerate(flows):
            if f.transfer != dead.transfer or f.steps <= 1:
                continue
            d = (f.hop - dead.hop) % n or n
            c = f.total / f.steps
            cap = min(f.total, (k0 + d) * c)
            sent = f.total - float(rem_a[k]) - f.held
            if sent > cap and lost_a[k] <= 0:
                f.held += float(rem_a[k]) + sent - cap
                rem_a[k] = 0.0
                continue
            hold = min(float(rem_a[k]), max(0.0, f.total - max(cap, sent)))
            if hold > 0:
                rem_a[k] -= hold
                f.held += hold

    def _first_rto(self, fl: _Flow, step: int) -> int:
        """A parked QP's first retransmission timeout (adaptive: drawn per message).

        The packet level draws a QP's first adaptive timeout when the QP is made,
        and every message (a transfer, or one step of a ring) is on QPs of its own,
        so every lost message draws again: keyed by the connection's QP, the
        transfer and the ``step`` (the message of the transfer) that was lost.  One
        draw per connection's QP made every message of a connection wait as long
        (aicb-16 RoCE with the failure: the packet level's ring steps waited 0.5 or
        1 ms each, message by message).
        """
        if self.adp_base_ps is None:
            return self.rto_ps
        if self.rto_draw is not None:
            got = self.rto_draw(fl.src, fl.dst, fl.transfer, step, fl.qp)
            if got is not None:
                return got
        msg = f"{fl.conn}/{fl.transfer}/{step}"
        k = self.adp_init_exp + ecmp_hash(self.seed + 1, fl.src, fl.dst, msg, fl.qp) % max(
            1, self.adp_init_range
        )
        return min(self.adp_base_ps << k, self.rto_ps)

    def _may_retry(self, fl: _Flow) -> bool:
        """Whether a QP whose timeout expired without progress may time out again."""
        if self.adp_base_ps is None:
            return fl.tries <= self.retries
        return fl.waited < self.retries * self.rto_ps

    def _seen_after(
        self, kind: str, hl: list[tuple[int, int]], fl: list[tuple[int, int, int]]
    ) -> list[tuple[int, list[tuple[int, int]], list[tuple[int, int, int]]]]:
        """(delay, host links, fabric links): when the transport acts on a fault's parts.

        MRC: its loss detection (``detect_ps``) for every part.  RoCE / IB: a NIC
        sees its own port at once (a link that goes down), never a silent one;
        routing withdraws a fabric link at convergence, a silent one at the hold
        timer (as :class:`~openmrc.baselines.fabric.BaselineFabric` does).
        """
        if self.transport == "mrc":
            return [(self.detect_ps, hl, fl)]
        silent = kind in SILENT_FAULTS
        out: list[tuple[int, list[tuple[int, int]], list[tuple[int, int, int]]]] = []
        if hl and not silent:
            out.append((0, hl, []))
        if fl:
            out.append((self.hold_ps if silent else self.convergence_ps, [], fl))
        return out

    def _latency(self, entry: tuple[int, int, Task], jobs: list[FluidJob]) -> float:
        """One step's latency of a transfer: the fabric's one-way latency (0 inside a server)."""
        j, _i, task = entry
        hosts = jobs[j].hosts
        G = self.gpus_per_server
        servers = {hosts[r] // G for r in task.ranks}
        return 0.0 if len(servers) == 1 else float(self.latency_ps)


__all__ = [
    "FLUID_FAULTS",
    "FluidFault",
    "FluidJob",
    "FluidModel",
    "FluidResult",
    "JobTimes",
    "flows_of",
    "maxmin",
    "one_way_ps",
    "steps_of",
]
