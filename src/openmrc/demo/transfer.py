"""``openmrc demo loopback``: one MRC transfer over a lossy, reordering multipath channel.

Two endpoints, an 8-plane EV set, random loss, reordering, trimming and ECN
everywhere, and one plane blackholed part-way through (then restored).  The
demo writes random bytes with a mix of WRITE and WRITE_IMM, checks the
destination byte for byte, and reports what the transport did.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from ..loopback import Faults, Loopback
from ..transport import (
    SGE,
    CCProfile,
    EVEvent,
    EVProfile,
    EVState,
    QPAttr,
    RecvWR,
    SendWR,
    WROpcode,
)
from ..transport.errors import InvalidArgument
from ..transport.ev import ev_plane


@dataclass
class DemoConfig:
    """What the demo does; every field is checked by :meth:`validate`."""

    size: int = 64 << 20
    message: int = 1 << 20
    planes: int = 8
    rate_gbps: float = 800.0
    loss: float = 0.01
    reorder: float = 0.2
    trim: float = 0.01
    ecn: float = 0.02
    blackhole_plane: int | None = 3
    blackhole_from: float = 0.25  # fraction of the expected transfer time
    blackhole_until: float = 0.6
    seed: int = 1
    wire: bool = False

    def validate(self) -> None:
        """Raise InvalidArgument naming the bad field."""
        if not 1 <= self.size <= 1 << 32:
            raise InvalidArgument(f"size: must be 1 byte to 4 GiB, got {self.size}")
        if not 1 <= self.message <= self.size:
            raise InvalidArgument(f"message: must be 1..size ({self.size}), got {self.message}")
        if not 1 <= self.planes <= 16:
            raise InvalidArgument(f"planes: must be 1..16, got {self.planes}")
        if not 0 < self.rate_gbps <= 10_000:
            raise InvalidArgument(f"rate_gbps: must be in (0, 10000], got {self.rate_gbps}")
        for name in ("loss", "reorder", "trim", "ecn"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise InvalidArgument(f"{name}: must be a probability in [0, 1), got {value}")
        if self.blackhole_plane is not None and not 0 <= self.blackhole_plane < self.planes:
            raise InvalidArgument(
                f"blackhole_plane: must be 0..{self.planes - 1} (or none), got {self.blackhole_plane}"
            )
        if not 0.0 <= self.blackhole_from < self.blackhole_until:
            raise InvalidArgument("blackhole_from/blackhole_until: need 0 <= from < until")


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Run the demo transfer and return its report (JSON-able)."""
    cfg.validate()
    rate_bps = cfg.rate_gbps * 1e9
    faults = Faults(
        loss=cfg.loss,
        reorder=cfg.reorder,
        reorder_delay_ps=3_000_000,
        trim=cfg.trim,
        ecn=cfg.ecn,
    )
    back = Faults(loss=cfg.loss, reorder=cfg.reorder, reorder_delay_ps=3_000_000)
    lb = Loopback(faults, back, rate_bps=rate_bps, delay_ps=3_000_000, seed=cfg.seed, wire=cfg.wire)
    attr = QPAttr(
        ev_profile=EVProfile(planes=cfg.planes, paths_per_plane=64, ev_count=32 * cfg.planes),
        cc_profile=CCProfile(link_bps=rate_bps, base_rtt_ps=8_000_000),
        timeout=6,
    )
    qa, qb = lb.connect(attr)
    rng = random.Random(cfg.seed)
    src = bytearray(rng.randbytes(cfg.size))
    dst = bytearray(cfg.size)
    mra = qa.pd.reg_mr(cfg.size, buffer=src)
    mrb = qb.pd.reg_mr(cfg.size, buffer=dst)
    n_msgs = 0
    imms = []
    for offset in range(0, cfg.size, cfg.message):
        length = min(cfg.message, cfg.size - offset)
        if n_msgs % 4 == 3:
            qb.post_recv(RecvWR(n_msgs))
            imms.append(n_msgs)
            wr = SendWR(
                n_msgs,
                WROpcode.RDMA_WRITE_WITH_IMM,
                [SGE(mra.addr + offset, length, mra.lkey)],
                mrb.addr + offset,
                mrb.rkey,
                imm_data=n_msgs,
            )
        else:
            wr = SendWR(
                n_msgs,
                WROpcode.RDMA_WRITE,
                [SGE(mra.addr + offset, length, mra.lkey)],
                mrb.addr + offset,
                mrb.rkey,
            )
        qa.post_send(wr)
        n_msgs += 1

    expected_ps = int(cfg.size * 8 / rate_bps * 1e12)
    send_wcs: list = []
    recv_wcs: list = []

    def done() -> bool:
        send_wcs.extend(qa.send_cq.poll(1 << 20))
        recv_wcs.extend(qb.recv_cq.poll(1 << 20))
        return len(send_wcs) >= n_msgs

    started = time.perf_counter()
    hole = cfg.blackhole_plane
    if hole is not None:
        lb.run(until=int(expected_ps * cfg.blackhole_from), stop=done)
        lb.faults_ab.blackhole_planes.add(hole)
        lb.faults_ba.blackhole_planes.add(hole)
        lb.run(until=int(expected_ps * cfg.blackhole_until), stop=done)
        lb.faults_ab.blackhole_planes.clear()
        lb.faults_ba.blackhole_planes.clear()
    lb.run(stop=done)
    finish = lb.now
    # Let background probes bring the blackholed plane's EVs back.
    lb.run(until=finish + 300_000_000)
    wall = time.perf_counter() - started

    ev_events = []
    while (event := lb.a.next_event()) is not None:
        if isinstance(event, EVEvent):
            ev_events.append(event)
    went_bad = sorted({e.ev for e in ev_events if e.new is EVState.ASSUMED_BAD})
    came_back = sorted({e.ev for e in ev_events if e.new is EVState.GOOD})
    stats = qa.stats
    paths = qa.paths
    assert paths is not None  # an RTS QP has its EV set
    ok = all(wc.ok for wc in send_wcs) and len(send_wcs) == n_msgs
    exact = src == dst
    imms_ok = [wc.imm_data for wc in recv_wcs] == imms and all(wc.ok for wc in recv_wcs)
    ch = lb.stats("ab")
    return {
        "ok": ok and exact and imms_ok,
        "bytes": cfg.size,
        "messages": n_msgs,
        "write_imm_completions_in_order": imms_ok,
        "byte_exact": exact,
        "simulated_us": round(finish / 1e6, 2),
        "goodput_gbps": round(cfg.size * 8 / (finish / 1e12) / 1e9, 1) if finish else 0.0,
        "wall_seconds": round(wall, 2),
        "paths": {
            "evs_used": len(ch.evs_used),
            "planes_used": sorted({ev_plane(ev) for ev in ch.evs_used}),
            "evs_assumed_bad": len(went_bad),
            "evs_recovered_by_probes": len(came_back),
            "bad_by_plane": {
                plane: sum(1 for ev in went_bad if ev_plane(ev) == plane)
                for plane in range(cfg.planes)
            },
            "replacements": paths.stats_replacements,
            "skips": paths.stats_skips,
            "final_states": paths.counts(),
        },
        "sender": {
            "data_packets": stats.tx_data_packets,
            "retransmits": stats.retransmits,
            "trims_nacked": stats.trims,
            "losses_detected": stats.losses_detected,
            "timeouts": stats.timeouts,
            "tail_probes": stats.tail_probes,
            "ev_probes": stats.probes_sent - stats.tail_probes,
            "ecn_echoes": stats.ecn_echoes,
            "cc": qa.cc.describe() if qa.cc is not None else {},
        },
        "receiver": {
            "data_packets": qb.stats.rx_data_packets,
            "duplicates": qb.stats.rx_duplicates,
            "sacks": qb.stats.tx_sacks,
            "nacks": qb.stats.tx_nacks,
        },
        "channel": {
            "packets": ch.sent,
            "dropped": ch.dropped,
            "blackholed": ch.blackholed,
            "trimmed": ch.trimmed,
            "reordered": ch.reordered,
            "ecn_marked": ch.ecn_marked,
        },
        "config": {k: v for k, v in vars(cfg).items()},
    }


def format_report(rep: dict[str, Any]) -> str:
    """A human-readable summary of :func:`run_demo`'s report."""
    cfg = rep["config"]
    p, s, r, ch = rep["paths"], rep["sender"], rep["receiver"], rep["channel"]
    hole = cfg["blackhole_plane"]
    lines = [
        f"openmrc demo loopback: {rep['bytes'] / 2**20:.0f} MiB in {rep['messages']} WRITEs "
        f"(every 4th WRITE_IMM) over {cfg['planes']} planes at {cfg['rate_gbps']:g} Gb/s",
        f"  faults: {cfg['loss']:.1%} loss, {cfg['reorder']:.0%} reordered, {cfg['trim']:.1%} trimmed, "
        f"{cfg['ecn']:.0%} ECN"
        + (
            f", plane {hole} blackholed from {cfg['blackhole_from']:.0%} to {cfg['blackhole_until']:.0%}"
            if hole is not None
            else ""
        ),
        f"  result: {'OK' if rep['ok'] else 'FAILED'} - byte-exact: {rep['byte_exact']}, "
        f"immediates in order: {rep['write_imm_completions_in_order']}",
        f"  time: {rep['simulated_us']} us simulated ({rep['goodput_gbps']} Gb/s goodput), "
        f"{rep['wall_seconds']} s wall",
        f"  paths: {p['evs_used']} EVs used on planes {p['planes_used']}; {p['evs_assumed_bad']} went "
        f"ASSUMED_BAD (per plane {list(p['bad_by_plane'].values())}), "
        f"{p['evs_recovered_by_probes']} recovered by probes, "
        f"{p['replacements']} replaced from backups, {p['skips']} ECN/trim skips",
        f"  sender: {s['data_packets']} data packets, {s['retransmits']} retransmissions "
        f"({s['trims_nacked']} after trim NACKs, {s['losses_detected']} losses found from SACKs, "
        f"{s['timeouts']} timeouts), {s['tail_probes']} tail probes, {s['ev_probes']} EV probes",
        f"  receiver: {r['data_packets']} placed, {r['duplicates']} duplicates, {r['sacks']} SACKs, "
        f"{r['nacks']} NACKs",
        f"  channel: {ch['packets']} packets, {ch['dropped']} dropped, {ch['blackholed']} blackholed, "
        f"{ch['trimmed']} trimmed, {ch['reordered']} reordered, {ch['ecn_marked']} ECN-marked",
    ]
    return "\n".join(lines)
