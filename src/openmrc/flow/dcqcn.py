"""DCQCN at one congested queue, in time: what share of it a RoCE transfer gets.

The flow level (:mod:`openmrc.flow.model`) gives RoCE QPs that meet in a congested
switch queue less than their max-min share, because DCQCN cuts them.  How much less
depends on how long the transfer lasts: at packet level (benchmarks/training.py
``--case dcqcn-series``), two QPs that start together into one 100 Gb/s link
deliver their fair share for about 60 us (the queue and the fabric's PFC backlog
drain), then nearly nothing until about 290 us, then their fair share again.  The
CNPs came every 4-5 us from 18 us to 58 us, each cutting the rate by ``alpha/2``
(alpha near 1) faster than the 32 KB byte counter could raise it, so the rate fell
to about 1 Gb/s; it recovers only when the byte counter (32 KB at that rate) or
the 300 us timer fires.  A 512 KiB transfer lasts through the stall and takes
about 300 us instead of 84; a 16 MiB one loses the same 230 us out of 2.9 ms.

:func:`dcqcn_trajectory` runs the packet model's own reaction point
(:class:`openmrc.baselines.roce.Dcqcn`, the same constants) against a fluid queue:
``n`` identical QPs that start together at their NIC's share, one bottleneck of
capacity ``cap``; the queue (standing for the bottleneck's queue and the PFC
backlog behind it) grows by what they offer beyond ``cap``; while it holds
bytes, each QP delivers ``cap / n``, otherwise what it sends.  The switch marks
with the baseline fabric's ECN ramp (``K_min``/``K_max``/``P_max`` of its
profile, scaled by the port rate); a QP's receiver counts the marked packets it
gets (expected values: ``p`` per packet) and sends a CNP for one at most every
``cnp_interval_ps``; the CNP reaches the sender one round trip after the marking.
The result is the bytes one QP has delivered over time; :func:`dcqcn_share` turns
it into the mean share of ``cap / n`` a transfer of a given size gets.  No constant
here is fitted: the DCQCN and ECN constants are the packet model's.
"""

from __future__ import annotations

import math
from dataclasses import astuple
from functools import lru_cache

import numpy as np

from ..baselines.fabric import ECN_PROFILES
from ..baselines.roce import Dcqcn, DcqcnConfig
from ..sim.config import FabricConfig
from ..topology import ClosSpec

#: the time step of the trajectory (ps): a fraction of the 4 us CNP spacing
STEP_PS = 250_000
#: how long a trajectory runs (ps); a transfer that needs longer gets ``cap / n`` after it
HORIZON_PS = 4_000_000_000


def cnp_delay_ps(spec: ClosSpec, mtu: int = 4096) -> int:
    """From a packet's marking at a T0's uplink to its CNP's arrival at the sender.

    The marked packet's rest of the way (three links, each its propagation and one
    MTU's serialisation, two switches, the receiving NIC) and the CNP's way back
    (a small packet: four links' propagation, three switches, both NICs), at the
    packet simulator's default latencies (docs/latency.md).
    """
    fc = FabricConfig()
    ser = mtu * 8 * (1000 / spec.host_gbps + 2 * 1000 / spec.fabric_gbps)
    marked = 3 * spec.link_delay_ps + ser + 2 * fc.switch_latency_ps + fc.nic_rx_latency_ps
    cnp = 4 * spec.link_delay_ps + 3 * fc.switch_latency_ps + fc.path_latency_ps(0)
    return int(marked + cnp)


@lru_cache(maxsize=64)
def dcqcn_trajectory(
    n: int,
    cap_bps: float,
    offer_bps: float,
    line_bps: float,
    rtt_ps: int,
    packet_bytes: int,
    cfg: tuple[object, ...],
    ecn_profile: str = "nvidia",
) -> np.ndarray:
    """The bytes one of ``n`` synchronised QPs has delivered at a shared queue over time.

    Every rate and size here is on the wire (headers and framing in), as DCQCN
    sees them.  ``cap_bps``: the queue's capacity; ``offer_bps``: what each QP's
    NIC lets it send (its share of the NIC port); ``line_bps``: the NIC's line rate
    (DCQCN's maximum); ``rtt_ps``: from the marking to the CNP's arrival at the
    sender; ``packet_bytes``: one full packet.  The sender charges the byte
    counter packet by packet and the receiver may send a CNP only when a packet
    arrives, as at packet level.  Returns the cumulative bytes per QP at times
    ``i * STEP_PS`` (a numpy array of 16,001 points, 128 KB a trajectory).  ``cfg``:
    the :class:`DcqcnConfig`'s fields in order (hashable, for the cache).
    """
    dcfg = DcqcnConfig(*cfg)  # type: ignore[arg-type]
    kmin0, kmax0, ref, pmax = ECN_PROFILES[ecn_profile]
    kmin, kmax = kmin0 * cap_bps / ref, kmax0 * cap_bps / ref
    dc = Dcqcn(dcfg, line_bps, 0)
    dt = STEP_PS
    fair = cap_bps / n
    queue = 0.0  # bytes
    sent_pkt = 0.0  # bytes of the packet being sent
    got_pkt = 0.0  # bytes of the packet being received
    marked = 0.0  # expected marked packets the receiver got since its last CNP
    last_cnp: float = -math.inf
    pending: list[int] = []  # CNP arrival times at the sender
    cum = 0.0
    cums: list[float] = [0.0]
    t = 0
    while t < HORIZON_PS:
        while pending and pending[0] <= t:
            dc.on_cnp(pending.pop(0))
        send = min(dc.rate(t), offer_bps)  # b/s
        sent = send * dt / 8e12
        sent_pkt += sent
        while sent_pkt >= packet_bytes:
            sent_pkt -= packet_bytes
            dc.on_sent(packet_bytes, t)
        queue += (n * send - cap_bps) * dt / 8e12
        if queue > 0:
            got = fair * dt / 8e12
        else:
            queue = 0.0
            got = sent
        cum += got
        got_pkt += got
        p = 0.0
        if queue > kmin:
            p = 1.0 if queue >= kmax else pmax * (queue - kmin) / (kmax - kmin)
        while got_pkt >= packet_bytes:
            got_pkt -= packet_bytes
            marked += p
            if marked >= 1.0 and t - last_cnp >= dcfg.cnp_interval_ps:
                last_cnp = float(t)  # exact: t < 2**53
                marked = 0.0
                pending.append(t + rtt_ps)
        t += dt
        cums.append(cum)
    return np.array(cums)


def dcqcn_share(
    n: int,
    cap_bps: float,
    offer_bps: float,
    line_bps: float,
    rtt_ps: int,
    packet_bytes: int,
    size: float,
    cfg: DcqcnConfig,
    ecn_profile: str = "nvidia",
) -> float:
    """The mean share of ``cap / n`` a transfer of ``size`` bytes per QP gets from DCQCN.

    Rates and ``size`` on the wire (see :func:`dcqcn_trajectory`).  ``size / (cap /
    n)`` over the time :func:`dcqcn_trajectory` needs to deliver ``size``: near 1
    for a transfer that ends before the cuts bite or lasts far longer than the
    stall, lowest for one that ends just after the stall.  ``ecn_profile``: the
    baseline fabric's (``BaselineFabricConfig.ecn_profile``).
    """
    if n < 2 or size <= 0 or not cfg.enabled:
        return 1.0
    # whole Mb/s, so a run's few distinct bottlenecks share trajectories
    cums = dcqcn_trajectory(
        n,
        round(cap_bps, -6),
        round(offer_bps, -6),
        round(line_bps, -6),
        int(rtt_ps),
        int(packet_bytes),
        astuple(cfg),
        ecn_profile,
    )
    fair = cap_bps / n / 8e12  # bytes/ps
    i = int(np.searchsorted(cums, size, side="left"))
    if i >= len(cums):
        took = float((len(cums) - 1) * STEP_PS) + (size - float(cums[-1])) / fair
    else:
        t0, c0 = (float((i - 1) * STEP_PS), float(cums[i - 1])) if i else (0.0, 0.0)
        span = float(cums[i]) - c0
        took = t0 + ((size - c0) / span if span > 0 else 1.0) * (float(i * STEP_PS) - t0)
    if took <= 0:
        return 1.0
    return min(1.0, size / (fair * took))
