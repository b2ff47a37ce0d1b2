"""Simulator speed: wall time, events, packet-link traversals and peak RSS.

Cases (``--case``, repeatable; default ``perm-128`` and ``perm-1024``):

* ``perm-N`` - a permutation of 2 MB MRC flows (``--size``) on a non-blocking
  two-tier plane of N hosts (sqrt(N) rounded up to a power of two per T0,
  100 Gb/s, 1 us links, 4 KiB MTU); e.g. ``perm-128``, ``perm-1024``,
  ``perm-8192`` (the memory case);
* ``allreduce-1024`` - a ring all-reduce of 16 MiB over 1024 ranks (2,095,104
  transfers of 16 KiB on long-lived connections, one per ring neighbour and
  channel, as NCCL keeps its QPs; about 17x the data of ``perm-1024``); its
  transfers fold into per-step records as they finish (openmrc.sim.folding), so
  the JSON's flow figures are empty and ``collective`` holds its time and busbw;
* ``alltoall-64`` - every one of 64 hosts sends 64 KiB to every other
  (4032 QPs: the case that measures cost per QP rather than per packet);
* ``ring-loss1-T`` - the paper's ring all-reduce at 1 % loss (Figure 16's
  ``scenarios/paper/ring-allreduce-64-T-loss1.toml``, T one of ``mrc``, ``roce-1qp``,
  ``roce-16qp``) at the size ``openmrc paper --quick`` runs it (16 ranks, 16 MiB),
  to the end of the collective; ``ring-loss1-T-64`` at full size (64 ranks at
  400 Gb/s, 64 MiB; give it ``--until-us``: a capped run measures CPU seconds per
  simulated millisecond).  ``--seed`` is the scenario's seed;
* ``sendrecv-N`` - the paper's NCCL-tests sendrecv (5.2.6, Fig. 15) on N hosts x 8
  planes (T0s of 256 down / 256 up from 8192 hosts): every host sends 4 MiB to
  host + 1, in 1 MiB messages, and T1 0 of plane 0 goes down at 20 us;
  ``sendrecv-42k`` is 43,008 hosts (168 T0s), ``sendrecv-131072`` the paper's
  whole cluster (512 T0s, T1s of 512 ports).  The JSON adds ``per_nic_gbps``
  (median goodput per NIC, all planes), ``budget_mib`` (the memory budget's
  estimate for the run) and ``qps``.

Each run is a fresh process (so peak RSS is that run's own) and prints one JSON
object: wall seconds (the event loop), build seconds, total (both), simulated
microseconds, which event kernel ran (``kernel``: ``native`` or
``pure-python``, see docs/performance.md), CPU seconds of the process (less sensitive to a loaded machine
than wall time), events, packet-link traversals (a packet crossing one link counts
once), events and traversals per wall second, and peak RSS.

``--vs-htsim PATH`` also runs uet-htsim's ``htsim_uec`` (a local build, never
vendored) on the same work: the same hosts and two-tier shape (given to htsim as a
``.topo`` file: T0 radix down/up, T1 radix down, 100 Gb/s), the same flows (a
``.cm`` connection matrix), sender-based NSCC, and openmrc's latencies and payload
per packet: 1 us links, its switch latency on every switch, its NIC transmit and
receive latency folded into the host links (htsim models no NIC), and ``-mtu`` =
openmrc's MTU (payload) + htsim's 64-byte UEC header (htsim's MTU is the whole
packet).  It checks the work is the same (NSCC sized from the same NIC rate,
flows finished, payload bytes, new data packets, median FCT, each within 5 %) and
prints both sides' CPU seconds, the ratios, and each side's events and
packet-link traversals per CPU second (htsim counts neither: its traversals are
estimated from its packet counts and each flow's links, and it has no event
count); work that differs is named and the exit status is 1 (the ratio compares
nothing).  ``--planes P`` gives htsim ``-planes P`` (P copies of the plane, each
flow sprayed over all); ``--until-us T`` stops both at T (htsim's ``-end``, whole
us) and then checks the new data packets both had sent by T instead of the flows'
completions.

Stock ``htsim_uec`` refuses ``-planes`` above 1 and asserts fewer than 96 host
ports per T0 and 128 ports per switch (``fat_tree_topology.cpp``, a limit of the
builder, not of its switches: ``perm-8192`` has 128 hosts and 128 uplinks per
T0), and its NSCC sizes a flow's window (1.5 x BDP) and its constants from one
port's rate, where an openmrc host of P planes has P x 100 Gb/s (and sizes its
NSCC from that): with more planes than one, stock htsim's hosts send less.
``benchmarks/htsim_uec_planes.patch`` (``HTSIM_PLANES_PATCH``) lifts the three
asserts and the refusal and sizes NSCC from the NIC's rate over all its ports
(each port still sends at 100 Gb/s); with one plane its output is stock's, byte
for byte.  Apply it to a uet-htsim checkout and build ``htsim_uec``::

    git -C $UET_HTSIM apply $OPENMRC/benchmarks/htsim_uec_planes.patch
    cmake -S $UET_HTSIM/htsim/sim -B build -DCMAKE_BUILD_TYPE=Release && make -C build htsim_uec

``--vs-ref REF`` pairs the working tree against commit REF, both compiled in their
own cached venvs (``benchmarks/speed_guard.py`` says how): after an untimed warm-up of
each side (the case to 1 us), pairs of runs, the order swapped each pair (``--pairs``,
default 3, niced), CPU seconds of each child; it prints the CPU ratio, the median of
the pairs' ratios and each side's events and packet-link traversals.  ``--work-ref REF2``
measures another commit instead of the working tree (a bisection step), ``--work-python PY``
the compiled openmrc that interpreter imports; ``--until-us`` stops both sides' runs
at the same simulated time (a window of a big case).

    python benchmarks/sim_speed.py                                  # 128 then 1024 hosts
    python benchmarks/sim_speed.py --case alltoall-64 --case allreduce-1024
    python benchmarks/sim_speed.py --case sendrecv-8192 --case sendrecv-131072
    python benchmarks/sim_speed.py --case perm-1024 --vs-htsim /path/to/htsim_uec --out r.json
    python benchmarks/sim_speed.py --case perm-8192 --planes 8 --ranks 2   # 2 MPI ranks vs sequential
    python benchmarks/sim_speed.py --case perm-8192 --planes 8 --ranks 2 --pairs 5   # alternating
    python benchmarks/sim_speed.py --case perm-1024 --vs-ref main          # this tree / main, CPU
    python benchmarks/sim_speed.py --case ring-loss1-roce-16qp-64 --until-us 2000 --vs-ref main
    mkfifo ctl ack; perf record -e cpu-clock -D -1 --control fifo:ctl,ack -- \
        python benchmarks/sim_speed.py --child perm-8192 --until-us 30 --perf-control ctl,ack

``--ranks K`` runs each case in the ordinary sequential run and partitioned
(:mod:`openmrc.sim.partition`) on K ranks under ``mpirun`` in the same
invocation, both on the native kernel when it is built (``OPENMRC_PURE_PYTHON=1``:
both pure Python), and prints the speed-up with the synchronisation overhead:
windows, and per rank events, CPU seconds, seconds waiting at window
boundaries, packets sent to other ranks.  With ``--pairs N`` the sequential and the
partitioned run alternate N times (the order swapped each pair) and the median of
the pairs' speed-ups is printed last: one pair moves by 10 % and more on a machine
whose speed drifts.  An untimed sequential run of the case to 1 us comes first (the
first process after a pause runs slower).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from openmrc.baselines.experiment import BaselineExperiment
from openmrc.sim import _native
from openmrc.sim.budget import bytes_per_host, estimate, same_t0
from openmrc.sim.config import FabricConfig
from openmrc.sim.experiment import Experiment, TransportConfig
from openmrc.sim.factory import make_experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec, all_to_all, permutation
from openmrc.workloads.collectives import Collective, allreduce

US = 1_000_000
#: The repository (the scenario files of the ``ring-loss1`` cases).
ROOT = Path(__file__).resolve().parent.parent


def fabric_for(hosts: int, planes: int = 1) -> ClosSpec:
    """A non-blocking two-tier plane for ``hosts`` hosts: T0s with sqrt(hosts) ports down."""
    per_t0 = 2 ** math.ceil(math.log2(math.isqrt(hosts)))
    per_t0 = max(1, min(per_t0, hosts))
    t0s = -(-hosts // per_t0)
    if t0s * per_t0 != hosts:
        raise SystemExit(
            f"--case perm-{hosts}: pick a number that splits evenly over T0s (e.g. a power of 2)"
        )
    return ClosSpec(
        planes=planes, t0s=t0s, hosts_per_t0=per_t0, t1s=per_t0, link_delay_ps=1_000_000
    )


def perm_flows(hosts: int, size: int, seed: int) -> list[FlowSpec]:
    """The benchmark's permutation (the same for openmrc and htsim)."""
    return permutation(hosts, size, random.Random(seed))


def build(
    case: str, size: int, seed: int, planes: int
) -> tuple[Experiment, str, Collective | None]:
    """The experiment of one case, a description of its workload, and its collective."""
    if case.startswith("perm-"):
        hosts = int(case[5:])
        spec = fabric_for(hosts, planes)
        exp = make_experiment(spec, seed=seed, sample_interval_ps=100_000_000)
        exp.add_flows(perm_flows(hosts, size, seed))
        return exp, f"permutation, {size} B per flow", None
    if case == "allreduce-1024":
        spec = fabric_for(1024, planes)
        exp = make_experiment(spec, seed=seed, sample_interval_ps=100_000_000)
        coll = allreduce(1024, 16 << 20)
        exp.add_collective(coll)
        return exp, "ring all-reduce of 16 MiB over 1024 ranks", coll
    if case == "alltoall-64":
        spec = fabric_for(64, planes)
        exp = make_experiment(spec, seed=seed, sample_interval_ps=100_000_000)
        exp.add_flows(all_to_all(list(range(64)), 64 << 10))
        return exp, "all-to-all, 64 hosts, 64 KiB per ordered pair", None
    if case.startswith("ring-loss1-"):
        return ring_case(case, seed)
    if case.startswith("sendrecv-"):
        hosts = SENDRECV_HOSTS.get(case[9:]) or (int(case[9:]) if case[9:].isdigit() else 0)
        spec = sendrecv_fabric(hosts)
        exp = make_experiment(spec, seed=seed, sample_interval_ps=100_000_000)
        exp.add_flows(
            [FlowSpec(h, (h + 1) % hosts, SENDRECV_BYTES, message=1 << 20) for h in range(hosts)]
        )
        # a T1 of plane 0 goes down mid-run (about a third of the way at full rate)
        exp.faults.switch_down(exp.topology.t1_name(0, 0), at_ps=SENDRECV_T1_DOWN_PS)
        return (
            exp,
            (
                f"NCCL-tests sendrecv: every host sends {SENDRECV_BYTES >> 20} MiB to host + 1; "
                f"T1 p0t1x0 down at {SENDRECV_T1_DOWN_PS / US:g} us"
            ),
            None,
        )
    raise SystemExit(
        f"--case: unknown case {case!r} (perm-N, allreduce-1024, alltoall-64, sendrecv-N, "
        "sendrecv-42k, sendrecv-131072, ring-loss1-T, ring-loss1-T-64)"
    )


#: The transports of the paper's 1 % loss rings (``ring-loss1-T``).
RING_TRANSPORTS = ("mrc", "roce-1qp", "roce-16qp")


def ring_case(case: str, seed: int) -> tuple[Experiment, str, Collective | None]:
    """``ring-loss1-T`` (the paper's quick size) or ``ring-loss1-T-64`` (full size)."""
    from openmrc.paper.experiments import QUICK_RING, RING_FULL
    from openmrc.pipeline.run import load_scenario

    name = case[len("ring-loss1-") :]
    full = name.endswith("-64")
    transport = name[:-3] if full else name
    if transport not in RING_TRANSPORTS:
        raise SystemExit(
            f"--case {case}: the transport must be one of {', '.join(RING_TRANSPORTS)}"
        )
    path = ROOT / "scenarios" / "paper" / f"ring-allreduce-64-{transport}-loss1.toml"
    sets = list(RING_FULL) if full else [*QUICK_RING, 'workload.size="16MiB"']
    scenario, _ = load_scenario(str(path), sets, seed)
    ranks = scenario.spec.hosts
    return (
        scenario.build(),
        f"ring all-reduce, {ranks} ranks, 1 % loss, {transport} ({path.name})",
        None,
    )


#: The paper's sendrecv (5.2.6, Fig. 15): bytes per rank.
SENDRECV_BYTES = 4 << 20
#: When a T1 of plane 0 goes down in the sendrecv cases.
SENDRECV_T1_DOWN_PS = 20 * US
#: Named sizes: the paper's 42K GPUs (168 T0s of 256) and its whole cluster.
SENDRECV_HOSTS = {"42k": 168 * 256}


def sendrecv_fabric(hosts: int) -> ClosSpec:
    """The paper's cluster shape cut to ``hosts`` hosts: 8 planes of 100 Gb/s, T0s of 256
    hosts down and 256 T1s up (T1s of 512 ports at 131,072 hosts), 1 us links; fewer
    than 8192 hosts: T0s of 32 hosts and 32 T1s."""
    per_t0 = 256 if hosts >= 8192 else 32
    if hosts < 2 * per_t0 or hosts % per_t0 or hosts // per_t0 > 1024:
        raise SystemExit(
            f"--case sendrecv-{hosts}: the host count must be a multiple of {per_t0} "
            f"(at least {2 * per_t0}, at most {1024 * per_t0})"
        )
    return ClosSpec(planes=8, t0s=hosts // per_t0, hosts_per_t0=per_t0, t1s=per_t0)


def run_openmrc(
    case: str,
    size: int,
    seed: int,
    planes: int,
    until_us: float | None = None,
    ranks: int | None = None,
    perf_control: str | None = None,
) -> dict[str, object] | None:
    """One run in this process (one rank of it with ``ranks``); returns its figures
    (None on ranks other than 0).  ``perf_control``: ``CTL,ACK``, perf's control and
    acknowledgement FIFOs (``perf record -D -1 --control fifo:CTL,ACK``): the profile
    is switched on once the case is built, so that it holds the event loop alone."""
    comm = None
    if ranks is not None:
        from openmrc.sim import partition

        comm = partition.mpi_comm() or partition.LocalComm()
        partition.request(comm)
    t0 = time.perf_counter()
    exp, workload, coll = build(case, size, seed, planes)
    build_s = time.perf_counter() - t0
    if perf_control is not None:
        perf_enable(perf_control)
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = exp.run(None if until_us is None else int(until_us * US))
    if result is None:
        return None  # another rank than 0 of a partitioned run
    wall = result.wall_seconds
    traversals = sum(p.tx_pkts for p in exp.fabric.ports)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    loop_cpu = cpu - before.ru_utime - before.ru_stime
    rss_kb = usage.ru_maxrss
    mtu = exp.transport.mtu
    fct = sorted(f.fct_ps for f in result.flows if f.fct_ps is not None)
    spec = exp.spec
    rates = sorted(f.goodput_gbps for f in result.flows if f.fct_ps is not None)
    sizes = [f.size for f in result.flows]
    senders = {f.src for f in result.flows}
    if coll is not None:  # a folded collective: its transfers are not result flows
        sizes += [t.size for t in coll.transfers]
        senders.update(range(coll.ranks))
    parallel = getattr(exp, "parallel_stats", None)
    if parallel:  # each rank made its own hosts' QPs only
        qps = sum(r["qps"] for r in parallel["per_rank"])
    elif isinstance(exp, BaselineExperiment):  # RoCE/IB: QPs numbered from 1 as made
        qps = exp._next_qp - 1
    else:
        qps = sum(len(h.ctx.qps) for h in exp.hosts)
    sent = new_packets_sent(exp) if not parallel else None
    local = [f for f in result.flows if same_t0(spec, f.src, f.dst)]
    est = estimate(
        spec,
        sizes,
        senders=len(senders),
        qps=qps,
        local_qps=round(qps * len(local) / len(result.flows)) if result.flows else 0,
        local_bytes=sum(f.size for f in local),
    )
    return {
        "case": case,
        "simulator": "openmrc",
        # the fabric's event kernel: "native" (openmrc.sim._kernel) or "pure-python"
        # (not built, or OPENMRC_PURE_PYTHON=1)
        "kernel": "native" if _native.NATIVE else "pure-python",
        "hosts": spec.hosts,
        "planes": spec.planes,
        "fabric": f"{spec.t0s} T0 x {spec.t1s} T1 per plane, {spec.host_gbps:g} Gb/s, {spec.link_delay_ps / 1e6:g} us links",
        "workload": workload,
        "until_us": until_us,
        "flows": len(result.flows),
        "all_ok": result.all_ok,
        "build_seconds": round(build_s, 2),
        "wall_seconds": round(wall, 2),
        "total_seconds": round(build_s + wall, 2),
        "cpu_seconds": round(cpu, 2),
        "loop_cpu_seconds": round(loop_cpu, 2),
        "simulated_us": round(result.sim_end_ps / 1e6, 1),
        "events": result.events,
        "events_per_wall_second": round(result.events / wall) if wall else None,
        "packet_link_traversals": traversals,
        "traversals_per_wall_second": round(traversals / wall) if wall else None,
        # per CPU second of the whole process (set-up included, as htsim's figure is)
        "events_per_cpu_second": round(result.events / cpu) if cpu else None,
        "traversals_per_cpu_second": round(traversals / cpu) if cpu else None,
        # the work, as --vs-htsim checks it: payload, packets (mtu is payload per packet)
        "mtu": mtu,
        "base_rtt_us": round(exp.base_rtt_ps / 1e6, 2),
        # the NIC's rate, all planes: what NSCC sizes its window and constants from
        "nic_gbps": spec.planes * spec.host_gbps,
        "payload_bytes": sum(f.size for f in result.flows),
        "new_packets": sum(-(-f.size // mtu) for f in result.flows),
        "retransmits": sum(f.retransmits for f in result.flows),
        # new data packets the MRC senders had sent when the run stopped (a window's
        # work, as --vs-htsim --until-us checks it; None for RoCE/IB and ranks)
        "new_packets_sent": sent,
        "median_fct_us": round(fct[len(fct) // 2] / 1e6, 1) if fct else None,
        "peak_rss_mib": round(rss_kb / 1024, 1),
        # the memory budget (openmrc.sim.budget, docs/performance.md) for this run
        "budget_mib": round(est.memory_bytes / 2**20, 1),
        "budget_bytes_per_host": round(bytes_per_host(spec)),
        "qps": est.qps,
        # per NIC (all its planes): median and lowest goodput of the finished flows, Gb/s
        # (the paper's Fig. 15 is in GB/s: divide by 8)
        "per_nic_gbps": round(rates[len(rates) // 2], 1) if rates else None,
        "min_nic_gbps": round(rates[0], 1) if rates else None,
        "flows_finished": len(fct),
        # the collective's summary (time, algbw, busbw), without its step records
        "collective": (
            {k: v for k, v in result.collectives[0].items() if k != "step_records"}
            if result.collectives
            else None
        ),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": os.cpu_count(),
        # a partitioned run (--ranks): ranks, windows, and per rank events, CPU, idle, packets
        "parallel": getattr(exp, "parallel_stats", None) or None,
        # a RoCE/IB run: what its QPs did (go-back-N's resends, timeouts, NAKs, CNPs)
        "roce": roce_counters(exp) if isinstance(exp, BaselineExperiment) else None,
    }


def new_packets_sent(exp: Experiment) -> int | None:
    """New data packets (first transmissions, PSNs) every MRC requester had sent:
    what a run capped with ``--until-us`` did, where no flow need have finished.
    None for RoCE/IB runs."""
    if isinstance(exp, BaselineExperiment):
        return None
    return sum(
        qp.requester.next_psn
        for h in exp.hosts
        for qp in h.ctx.qps.values()
        if qp.requester is not None
    )


def roce_counters(exp: BaselineExperiment) -> dict[str, int]:
    """The QPs' counters of a RoCE/IB run, summed: data packets sent against PSNs
    acknowledged (the difference is go-back-N's resends), rewinds, ACK timeouts, NAKs,
    CNPs."""
    senders = [s for f in exp.flows for s in getattr(f, "senders", ())]
    receivers = [r for f in exp.flows for r in getattr(f, "receivers", ())]
    return {
        "qps": len(senders),
        "data_packets_sent": sum(s.sent_pkts for s in senders),
        "psns_acked": sum(s.una for s in senders),
        "rewinds": sum(s.rewinds for s in senders),
        "ack_timeouts": sum(s.timeouts for s in senders),
        "naks": sum(r.naks for r in receivers),
        "cnps": sum(r.cnps for r in receivers),
    }


def perf_enable(control: str) -> None:
    """Tell a waiting ``perf record --control fifo:CTL,ACK`` to start (``control`` is
    ``CTL,ACK``) and wait for its acknowledgement."""
    ctl, _, ack = control.partition(",")
    with open(ctl, "w") as f:
        f.write("enable\n")
    with open(ack) as f:
        f.readline()


def run_child(
    case: str,
    size: int,
    seed: int,
    planes: int,
    until_us: float | None = None,
    ranks: int | None = None,
) -> dict[str, object]:
    """Run one case in a fresh interpreter (its own peak RSS); its figures.

    With ``ranks``: partitioned, on that many MPI ranks (``mpirun`` when more than
    one), with the kernel the environment selects (native when built)."""
    argv = [sys.executable, __file__, "--child", case, "--size", str(size), "--seed", str(seed),
            "--planes", str(planes)]  # fmt: skip
    if until_us is not None:
        argv += ["--until-us", str(until_us)]
    if ranks is not None:
        argv += ["--ranks", str(ranks)]
        if ranks > 1:
            argv = ["mpirun", "--oversubscribe", "-n", str(ranks), *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{case}: the openmrc run failed:\n{out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----- uet-htsim ---------------------------------------------------------------------
_FINISHED = re.compile(
    r"^Flow Uec_(\d+)_(\d+) flowId \d+ uecSrc \d+ finished at ([0-9.]+)"
    r"(?: total messages \d+ total packets (\d+) RTS (\d+) total bytes (\d+))?"
)
_TOTALS = re.compile(r"^New: (\d+) Rtx: (\d+) RTS: (\d+) Bounced: (\d+) ACKs: (\d+) NACKs: (\d+)")
#: htsim's NSCC set-up lines: the rate its constants are scaled from (the static
#: parameters) and the first flow's window (``maxwnd`` = 1.5 x ``_base_bdp``, the
#: base RTT at its NIC's rate).
_NSCC_RATE = re.compile(r"^Initializing static NSCC parameters:.* _network_linkspeed=(\d+)")
_NSCC_FLOW = re.compile(
    r"^Initialize per-instance NSCC parameters:.* _base_rtt=(\d+) _base_bdp=(\d+)"
)
#: uet-htsim's UEC header bytes (``UecSrc::_hdr_size``): its ``-mtu`` is the whole
#: packet, payload and this header, where openmrc's ``mtu`` is the payload alone.
HTSIM_UEC_HEADER_BYTES = 64
#: How far the two simulators may differ and still be doing the same work.
SAME_WORK_TOLERANCE = 0.05
#: The patch ``--vs-htsim`` needs for ``perm-8192`` and ``--planes`` above 1 (the
#: module docstring says what it changes and how to apply it).
HTSIM_PLANES_PATCH = ROOT / "benchmarks" / "htsim_uec_planes.patch"


def htsim_latencies() -> dict[str, int]:
    """The latencies openmrc's perm runs use (the default :class:`FabricConfig`, the
    benchmark's 1 us links), in the form htsim takes them, in ns: a link per tier,
    the switch latency, and the NIC's transmit and receive latencies folded into the
    host links (htsim has no NIC latency: a packet leaving a host crosses one host
    link and one reaching a host another, so each host link carries half of
    transmit + receive; every one-way path and the base RTT come out the same)."""
    cfg = FabricConfig()
    link_ns = fabric_for(2).link_delay_ps // 1000
    nic_ps = cfg.nic_tx_latency_ps + cfg.nic_rx_latency_ps
    return {
        "host_link_ns": link_ns + nic_ps // 2000,
        "fabric_link_ns": link_ns,
        "switch_ns": cfg.switch_latency_ps // 1000,
    }


def htsim_mtu() -> int:
    """htsim's ``-mtu`` for the same payload per packet as openmrc's (same packets)."""
    return TransportConfig().mtu + HTSIM_UEC_HEADER_BYTES


def htsim_topo(hosts: int) -> str:
    """htsim's ``.topo`` text for the benchmark's two-tier plane, with openmrc's latencies."""
    spec = fabric_for(hosts)
    lat = htsim_latencies()
    return "\n".join([
        f"Nodes {hosts}", "Tiers 2", f"Podsize {hosts}", "",
        "Tier 0", "Downlink_speed_Gbps 100", f"Radix_Down {spec.hosts_per_t0}",
        f"Radix_Up {spec.t1s}", f"Downlink_Latency_ns {lat['host_link_ns']}",
        f"Switch_Latency_ns {lat['switch_ns']}", "",
        "Tier 1", "Downlink_speed_Gbps 100", f"Radix_Down {spec.t0s}",
        f"Downlink_Latency_ns {lat['fabric_link_ns']}", f"Switch_Latency_ns {lat['switch_ns']}",
        "Bundle 1", "",
    ])  # fmt: skip


def htsim_cm(hosts: int, size: int, seed: int) -> str:
    """htsim's connection matrix for the benchmark's permutation."""
    flows = perm_flows(hosts, size, seed)
    lines = [f"Nodes {hosts}", f"Connections {len(flows)}"]
    lines += [f"{f.src}->{f.dst} start {f.start_ps // US} size {f.size}" for f in flows]
    return "\n".join(lines) + "\n"


def link_hops(hosts: int, src: int, dst: int) -> int:
    """Links a packet from ``src`` to ``dst`` crosses in the benchmark's plane (2 under
    one T0, 4 over a T1)."""
    per_t0 = fabric_for(hosts).hosts_per_t0
    return 2 if src // per_t0 == dst // per_t0 else 4


def parse_htsim(
    text: str, hosts: int, pairs: list[tuple[int, int]] | None = None
) -> dict[str, object]:
    """htsim_uec's output: the rates its NSCC was sized from, FCTs, packets (its
    ``New``/``Rtx``/``ACKs`` totals, per flow from each finish line) and an estimate
    of packet-link traversals (it counts none: data packets per flow x that flow's
    links, retransmissions, ACKs and NACKs at the mean links; a trimmed packet
    counted whole).  A run stopped before any flow finished (``-end``) has no
    per-flow packets: all its packets are counted at the mean links of the flows'
    ``(src, dst)`` ``pairs`` (equal sizes), when given."""
    fct: list[float] = []
    flow_packets: list[int] = []
    flow_bytes = 0
    data_hops = 0
    for m in map(_FINISHED.match, text.splitlines()):
        if not m:
            continue
        fct.append(float(m[3]))
        if m[4] is not None:
            pkts = int(m[4]) - int(m[5])
            flow_packets.append(pkts)
            flow_bytes += int(m[6])
            data_hops += pkts * link_hops(hosts, int(m[1]), int(m[2]))
    fct.sort()
    totals = [_TOTALS.match(line) for line in text.splitlines()]
    t = next((m for m in totals if m), None)
    rate = next((m for m in map(_NSCC_RATE.match, text.splitlines()) if m), None)
    flow = next((m for m in map(_NSCC_FLOW.match, text.splitlines()) if m), None)
    out: dict[str, object] = {
        # the rate NSCC's constants are scaled from, and the one a flow's window is
        # sized from (its base BDP over its base RTT), Gb/s: None if htsim printed neither
        "nscc_gbps": round(int(rate[1]) / 1e9, 1) if rate else None,
        "window_gbps": (
            round(int(flow[2]) * 8 / (int(flow[1]) / 1e12) / 1e9, 1)
            if flow and int(flow[1])
            else None
        ),
        "flows_finished": len(fct),
        "median_fct_us": round(fct[len(fct) // 2], 1) if fct else None,
        "flow_packets": sum(flow_packets),
        "flow_payload_bytes": flow_bytes,
    }
    if t is not None:
        new, rtx, acks, nacks = int(t[1]), int(t[2]), int(t[5]), int(t[6])
        mean_hops = data_hops / max(sum(flow_packets), 1)
        if not fct and pairs:
            mean_hops = sum(link_hops(hosts, a, b) for a, b in pairs) / len(pairs)
            data_hops = round(new * mean_hops)
        out.update({
            "new_packets": new, "retransmits": rtx, "acks": acks, "nacks": nacks,
            "data_packets": new + rtx,
            "packet_link_traversals_est": round(data_hops + (rtx + acks + nacks) * mean_hops),
        })  # fmt: skip
    return out


#: htsim's event loop step (``EventList::doNextEvent``), counted by ``--htsim-events``.
_HTSIM_EVENT_SYMBOL = "_ZN9EventList11doNextEventEv"


def count_htsim_events(argv: list[str], cwd: Path) -> tuple[int | None, str]:
    """Run htsim once more, untimed, with a perf uprobe on its event loop step: its
    events (htsim counts none itself), or None and why not (needs ``perf``, root and
    tracefs).  The probe is removed afterwards."""
    if shutil.which("perf") is None:
        return None, "no perf"
    event = f"openmrc:htsimev{os.getpid()}"
    add = subprocess.run(
        ["perf", "probe", "-q", "-x", argv[0], "-a", f"{event}={_HTSIM_EVENT_SYMBOL}"],
        capture_output=True, text=True,
    )  # fmt: skip
    if add.returncode != 0:
        return None, f"perf probe: {add.stderr.strip()[-200:] or add.returncode}"
    try:
        out = subprocess.run(
            ["perf", "stat", "-x,", "-e", event, "-o", str(cwd / "count.txt"), "--", *argv],
            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if out.returncode != 0:
            return None, f"perf stat exited {out.returncode}"
        for line in (cwd / "count.txt").read_text().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2] == event and fields[0].isdigit():
                return int(fields[0]), "perf uprobe on EventList::doNextEvent"
        return None, "perf stat gave no count"
    finally:
        subprocess.run(["perf", "probe", "-q", "-d", event], capture_output=True)


def run_htsim(
    binary: str,
    hosts: int,
    size: int,
    seed: int,
    count_events: bool = False,
    planes: int = 1,
    until_us: float | None = None,
) -> dict[str, object]:
    """Run ``htsim_uec`` on the same permutation with openmrc's latencies and payload
    per packet, on ``planes`` planes (its ``-planes``: each a copy of the plane, a
    flow sprayed over all), to the end or stopped at ``until_us`` (its ``-end``, in
    whole us); CPU and wall time, peak RSS, FCTs, packets."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "bench.topo").write_text(htsim_topo(hosts))
        (work / "bench.cm").write_text(htsim_cm(hosts, size, seed))
        argv = [binary, "-topo", "bench.topo", "-tm", "bench.cm", "-nodes", str(hosts),
                "-tiers", "2", "-sender_cc_only", "-mtu", str(htsim_mtu()),
                "-linkspeed", "100000", "-seed", str(seed),
                "-end", str(100_000 if until_us is None else int(until_us))]  # fmt: skip
        if planes != 1:
            argv += ["-planes", str(planes)]
        t0 = time.perf_counter()
        with open(work / "out.txt", "w") as out:
            proc = subprocess.Popen(argv, cwd=work, stdout=out, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        text = (work / "out.txt").read_text(errors="replace")
        if proc.returncode != 0:
            raise SystemExit(f"htsim exited {proc.returncode}: {' '.join(argv)}\n{text[-2000:]}")
        events, how = count_htsim_events(argv, work) if count_events else (None, "not counted")
    cpu = usage.ru_utime + usage.ru_stime
    got: dict[str, object] = {
        "case": f"perm-{hosts}",
        "simulator": "uet-htsim htsim_uec",
        "hosts": hosts,
        "planes": planes,
        "until_us": until_us,
        "latencies_ns": htsim_latencies(),
        "mtu_whole_packet": htsim_mtu(),
        **parse_htsim(text, hosts, [(f.src, f.dst) for f in perm_flows(hosts, size, seed)]),
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "command": " ".join(["htsim_uec", *argv[1:]]),
    }
    est = got.get("packet_link_traversals_est")
    if isinstance(est, int) and cpu > 0:
        got["traversals_per_cpu_second_est"] = round(est / cpu)
    got["events"] = events
    got["events_counted_by"] = how
    if events is not None and cpu > 0:
        got["events_per_cpu_second"] = round(events / cpu)
    return got


def same_work(mine: dict[str, object], theirs: dict[str, object]) -> dict[str, object]:
    """Whether openmrc and htsim did the same work: NSCC sized from the same NIC rate
    (its window and its constants: all planes' rate, which stock ``htsim_uec`` does
    not give a host of several planes, see ``HTSIM_PLANES_PATCH``), the same flows
    all finished, the same payload bytes and new data packets, and median FCTs
    within ``SAME_WORK_TOLERANCE``; each check with its two values.  A run stopped
    at ``--until-us`` (no flow need have finished) checks the new data packets both
    sides had sent by then instead of the flows' completions."""

    def close(a: object, b: object) -> bool:
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
            return False
        return abs(a / b - 1) <= SAME_WORK_TOLERANCE

    checks = {
        "window_gbps": (mine.get("nic_gbps"), theirs.get("window_gbps")),
        "nscc_gbps": (mine.get("nic_gbps"), theirs.get("nscc_gbps")),
    }
    if mine.get("until_us") is not None:
        checks["new_packets_sent"] = (mine.get("new_packets_sent"), theirs.get("new_packets"))
    else:
        checks |= {
            "flows_finished": (mine.get("flows_finished"), theirs.get("flows_finished")),
            "new_packets": (mine.get("new_packets"), theirs.get("new_packets")),
            "payload_bytes": (mine.get("payload_bytes"), theirs.get("flow_payload_bytes")),
            "median_fct_us": (mine.get("median_fct_us"), theirs.get("median_fct_us")),
        }
    out: dict[str, object] = {k: {"openmrc": a, "htsim": b, "ok": close(a, b)}
                              for k, (a, b) in checks.items()}  # fmt: skip
    out["ok"] = all(v["ok"] for v in out.values() if isinstance(v, dict))
    return out


#: The simulated microseconds of the untimed warm-up run before timed pairs (``--ranks``,
#: ``--vs-ref``): the first process after a build or a pause builds and runs its case
#: slower (fresh memory: perm-8192's set-up 3.1 s against 0.8, ``--ranks``' first
#: sequential set-up 2.4-5.6 s against 1.3-2.3), which would go to whatever ran first.
WARM_US = 1.0


def speedup(case: str, args: argparse.Namespace) -> list[dict[str, object]]:
    """``case`` in the sequential run and partitioned on ``args.ranks``: both figures,
    and the speed-up line (event loop and total) with the synchronisation overhead.

    First an untimed sequential run of the case to :data:`WARM_US` (a warm-up).  With ``--pairs N``
    the two alternate N times (sequential first in the odd pairs, partitioned first in
    the even ones), a line per pair, then the median of the pairs' event-loop
    speed-ups: on a machine whose speed drifts, one pair's ratio moves by 10 % and
    more."""
    npairs = args.pairs if args.pairs is not None else 1
    runs: list[dict[str, object]] = []
    ratios: list[float] = []
    run_child(case, args.size, args.seed, args.planes, WARM_US, None)  # untimed
    for i in range(npairs):
        pair: dict[int | None, dict[str, object]] = {}
        for k in (None, args.ranks) if i % 2 == 0 else (args.ranks, None):
            pair[k] = run_child(case, args.size, args.seed, args.planes, args.until_us, k)
            runs.append(pair[k])
            print(json.dumps(pair[k]), flush=True)
        ratios.append(_speedup_line(case, args.ranks, pair[None], pair[args.ranks]))
    if npairs > 1:
        print(
            f"{case}: {args.ranks} ranks vs the sequential run, event loop, median of "
            f"{npairs} pairs {statistics.median(ratios):.2f}x (each "
            f"{', '.join(f'{r:.2f}' for r in ratios)})",
            file=sys.stderr,
            flush=True,
        )
    return runs


def _speedup_line(case: str, ranks: int, one: dict[str, Any], many: dict[str, Any]) -> float:
    """Print one pair's speed-up line; its event loop's speed-up."""
    loop = float(one["wall_seconds"]) / max(float(many["wall_seconds"]), 1e-9)
    total = float(one["total_seconds"]) / max(float(many["total_seconds"]), 1e-9)
    par = many["parallel"]
    assert isinstance(par, dict)
    each = "; ".join(
        f"rank {r['rank']} {r['events']:,} events, {r['cpu_s']} s CPU, {r['idle_s']} s idle, "
        f"{r['packets_sent']:,} packets out, peak RSS {r['peak_rss_mib']:,.0f} MiB"
        for r in par["per_rank"]
    )
    print(
        f"{case}: {ranks} ranks vs the sequential run ({many['kernel']}, same "
        "invocation): event loop "
        f"{one['wall_seconds']} s -> {many['wall_seconds']} s = {loop:.2f}x, total "
        f"{one['total_seconds']} s -> {many['total_seconds']} s = {total:.2f}x; "
        f"{par['windows']:,} windows of {par['window_ps'] / 1e6:g} us; {each}; "
        f"results equal: {_same(one, many)}",
        file=sys.stderr,
        flush=True,
    )
    return loop


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    """Whether two runs measured the same (events, traversals, simulated time, FCTs)."""
    keys = ("events", "packet_link_traversals", "simulated_us", "median_fct_us", "all_ok")
    return all(a[k] == b[k] for k in keys)


def child_args(size: int, seed: int, planes: int, until_us: float | None) -> list[str]:
    """The options both sides of ``--vs-ref`` run their ``--child`` with: the same
    work, and with ``--until-us`` the same window of it (a big case's first
    microseconds pair in minutes where its whole run takes many)."""
    extra = ["--size", str(size), "--seed", str(seed), "--planes", str(planes)]
    if until_us is not None:
        extra += ["--until-us", str(until_us)]
    return extra


def vs_ref(args: argparse.Namespace) -> int:
    """``--vs-ref REF``: the working tree and REF, compiled, paired on each case."""
    import speed_guard as guard

    repo = Path(__file__).resolve().parent.parent
    try:
        pairs = args.pairs if args.pairs is not None else 3  # (main checked it)
        nice = guard.check_nice(args.nice)
        sha = guard.resolve_ref(repo, args.vs_ref)
        ref_py, ref_script = guard.ensure_ref(repo, sha, nice)
        work_script = Path(__file__).resolve()
        if args.work_python:
            work_py: Path = Path(args.work_python)
            probe = guard.require_compiled(work_py, "--work-python")
            work_what = f"{work_py} (openmrc at {probe['file']})"
        elif args.work_ref:
            work_sha = guard.resolve_ref(repo, args.work_ref)
            work_py, work_script = guard.ensure_ref(repo, work_sha, nice)
            work_what = work_sha
        else:
            work_py, work_script = guard.ensure_work(repo, nice)
            work_what = f"the working tree, built in {work_py.parent.parent.parent}"
        extra = child_args(args.size, args.seed, args.planes, args.until_us)
        results: list[dict[str, object]] = []
        warm = child_args(args.size, args.seed, args.planes, WARM_US)
        sides = (("work", work_py, work_script), ("ref", ref_py, ref_script))
        for case in args.case or ["perm-1024"]:
            pairing = guard.Pairing()
            runs: dict[str, list[dict[str, object]]] = {"work": [], "ref": []}
            for _, python, script in sides:  # untimed warm-ups (WARM_US)
                guard.run_side(python, script, case, warm, nice)
            for i in range(pairs):
                # the order swapped each pair: a side that always ran first (or second)
                # would carry whatever the machine does to that position
                got = {name: guard.run_side(python, script, case, extra, nice)
                       for name, python, script in (sides if i % 2 == 0 else sides[::-1])}  # fmt: skip
                mine, theirs = got["work"], got["ref"]
                runs["work"].append(mine)
                runs["ref"].append(theirs)
                pairing.add(float(mine["guard_cpu_seconds"]), float(theirs["guard_cpu_seconds"]))  # type: ignore[arg-type]
                print(
                    f"{case} pair {i + 1}/{pairs} ({'work' if i % 2 == 0 else 'ref'} first): "
                    f"work {mine['guard_cpu_seconds']} s CPU "
                    f"(build {mine.get('build_seconds')} s, loop {mine.get('wall_seconds')} s wall), "
                    f"ref {theirs['guard_cpu_seconds']} s CPU (build {theirs.get('build_seconds')} s, "
                    f"loop {theirs.get('wall_seconds')} s wall)",
                    file=sys.stderr,
                    flush=True,
                )
            summary = pairing.summary()
            w, r = runs["work"][-1], runs["ref"][-1]
            row = {
                "case": case,
                "simulator": "openmrc --vs-ref",
                "ref": sha,
                "work": work_what,
                **summary,
                "work_events": w.get("events"),
                "ref_events": r.get("events"),
                "work_traversals": w.get("packet_link_traversals"),
                "ref_traversals": r.get("packet_link_traversals"),
                "work_median_fct_us": w.get("median_fct_us"),
                "ref_median_fct_us": r.get("median_fct_us"),
                "runs": runs,
            }
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
            print(
                f"{case}: {'working tree' if not args.work_ref else args.work_ref} / {sha[:10]} CPU = {summary['cpu_ratio']}x over {pairs} "
                f"pairs (each {', '.join(map(str, summary['pair_ratios']))}; "  # type: ignore[call-overload]
                f"median {summary['pair_ratio_median']}x); "
                f"median CPU {summary['work_cpu_median']} s vs {summary['ref_cpu_median']} s; "
                f"events {w.get('events'):,} vs {r.get('events'):,}; packet-link traversals "
                f"{w.get('packet_link_traversals'):,} vs {r.get('packet_link_traversals'):,}",
                file=sys.stderr,
                flush=True,
            )
    except guard.GuardError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print JSON lines (and write them with ``--out``)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", action="append", help="perm-N, allreduce-1024, alltoall-64")
    parser.add_argument("--planes", type=int, default=1)
    parser.add_argument("--size", type=int, default=2_000_000, help="bytes per permutation flow")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vs-htsim", metavar="PATH", help="uet-htsim's htsim_uec binary")
    parser.add_argument(
        "--htsim-events",
        action="store_true",
        help="--vs-htsim: count htsim's events in an extra untimed run (a perf uprobe: root, tracefs)",
    )
    parser.add_argument("--out", type=Path, help="also write the results here (JSON list)")
    parser.add_argument(
        "--until-us",
        type=float,
        help="stop each openmrc run at this simulated time (set-up memory of a big case; "
        "with --vs-ref, both sides' runs)",
    )
    parser.add_argument(
        "--ranks",
        type=int,
        metavar="K",
        help="partitioned over K MPI ranks (mpirun), and the sequential run in the same "
        "invocation: prints both and the speed-up (docs/parallel.md)",
    )
    parser.add_argument(
        "--vs-ref",
        metavar="REF",
        help="pair the working tree with commit REF, both compiled in their own cached venvs "
        "(benchmarks/speed_guard.py): work, ref, work, ref ...; prints the CPU ratio",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        help="--vs-ref: pairs of runs (3); --ranks: pairs of the sequential and the "
        "partitioned run, alternating (1)",
    )
    parser.add_argument("--nice", type=int, default=10, help="--vs-ref: niceness of the runs (10)")
    parser.add_argument(
        "--work-python",
        metavar="PY",
        help="--vs-ref: measure the (compiled) openmrc this interpreter imports as the working "
        "side instead of building the working tree",
    )
    parser.add_argument(
        "--work-ref",
        metavar="REF2",
        help="--vs-ref: measure commit REF2 (its own cached build and sim_speed.py) as the "
        "working side: REF2 against REF, as a bisection step does",
    )
    parser.add_argument(
        "--perf-control",
        metavar="CTL,ACK",
        help="with --child: perf's control FIFOs (perf record -D -1 --control fifo:CTL,ACK); "
        "the profile starts once the case is built",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ranks is not None and args.ranks < 1:
        parser.error("--ranks: must be at least 1")
    if args.pairs is not None:
        import speed_guard as guard

        try:
            guard.check_pairs(args.pairs)
        except guard.GuardError as exc:
            parser.error(str(exc))
    if args.perf_control is not None and (not args.child or args.perf_control.count(",") != 1):
        parser.error("--perf-control: CTL,ACK (two FIFOs), with --child only")
    if args.child:
        got = run_openmrc(
            args.child,
            args.size,
            args.seed,
            args.planes,
            args.until_us,
            args.ranks,
            args.perf_control,
        )
        if got is not None:
            print(json.dumps(got))
        return 0
    if args.vs_ref is not None:
        if args.vs_htsim or args.ranks is not None:
            parser.error("--vs-ref: not with --vs-htsim or --ranks")
        if args.work_python and args.work_ref:
            parser.error("--work-python and --work-ref: one working side at a time")
        return vs_ref(args)
    if args.vs_htsim and not Path(args.vs_htsim).is_file():
        print(f"--vs-htsim: no such file: {args.vs_htsim}", file=sys.stderr)
        return 2
    if args.vs_htsim:
        args.vs_htsim = str(Path(args.vs_htsim).resolve())  # htsim runs in a temporary dir
    results: list[dict[str, object]] = []
    unequal: list[str] = []  # cases where htsim did other work than openmrc
    for case in args.case or ["perm-128", "perm-1024"]:
        if case.startswith("perm-") and (not case[5:].isdigit() or int(case[5:]) < 2):
            parser.error(f"--case {case}: perm-N needs a host count N >= 2")
        if args.until_us is not None and args.vs_htsim and args.until_us != int(args.until_us):
            parser.error("--until-us: whole microseconds with --vs-htsim (htsim's -end)")
        if args.ranks is not None:
            if args.vs_htsim:
                parser.error("--ranks: not with --vs-htsim")
            results.extend(speedup(case, args))
            continue
        mine = run_child(case, args.size, args.seed, args.planes, args.until_us)
        results.append(mine)
        print(json.dumps(mine), flush=True)
        if args.vs_htsim and case.startswith("perm-"):
            theirs = run_htsim(
                args.vs_htsim,
                int(case[5:]),
                args.size,
                args.seed,
                args.htsim_events,
                planes=args.planes,
                until_us=args.until_us,
            )
            for key, a, b in (
                ("openmrc_over_htsim_wall", mine["total_seconds"], theirs["wall_seconds"]),
                ("openmrc_over_htsim_cpu", mine["cpu_seconds"], theirs["cpu_seconds"]),
                ("openmrc_over_htsim_rss", mine["peak_rss_mib"], theirs["peak_rss_mib"]),
            ):
                theirs[key] = round(float(a) / max(float(b), 1e-9), 2)  # type: ignore[arg-type]
            check = same_work(mine, theirs)
            theirs["same_work"] = check
            results.append(theirs)
            print(json.dumps(theirs), flush=True)
            print(
                f"{case}: openmrc {mine['cpu_seconds']} s CPU, {mine['peak_rss_mib']} MiB; "
                f"htsim {theirs['cpu_seconds']} s CPU, {theirs['peak_rss_mib']} MiB; "
                f"openmrc/htsim CPU {theirs['openmrc_over_htsim_cpu']}x, "
                f"wall {theirs['openmrc_over_htsim_wall']}x, "
                f"RSS {theirs['openmrc_over_htsim_rss']}x\n"
                f"  per CPU second: openmrc {mine['events_per_cpu_second']:,} events, "
                f"{mine['traversals_per_cpu_second']:,} packet-link traversals; htsim "
                + (
                    f"{theirs['events_per_cpu_second']:,} events, "
                    if "events_per_cpu_second" in theirs
                    else "events not counted (--htsim-events), "
                )
                + f"{theirs.get('traversals_per_cpu_second_est', 0):,} traversals "
                "(estimated from its packet counts)\n"
                f"  events: openmrc {mine['events']:,}, htsim "
                f"{format(theirs['events'], ',') if theirs['events'] is not None else '-'}; "
                f"packet-link traversals: openmrc {mine['packet_link_traversals']:,}, htsim "
                f"{format(theirs.get('packet_link_traversals_est', 0), ',')} (est.)\n"
                f"  same work ({'yes' if check['ok'] else 'NO'}, within "
                f"{SAME_WORK_TOLERANCE:.0%}): "
                + "; ".join(
                    f"{k} {v['openmrc']} vs {v['htsim']}"  # type: ignore[index]
                    for k, v in check.items()
                    if isinstance(v, dict)
                ),
                file=sys.stderr,
                flush=True,
            )
            if not check["ok"]:
                unequal.append(case)
                print(
                    f"{case}: NOT the same work, the ratios compare nothing"
                    + (
                        f" (htsim's NSCC sized from {theirs['window_gbps']} Gb/s, openmrc's NIC "
                        f"has {mine['nic_gbps']}: build htsim_uec with {HTSIM_PLANES_PATCH.name})"
                        if not check["window_gbps"]["ok"]  # type: ignore[index]
                        else ""
                    ),
                    file=sys.stderr,
                    flush=True,
                )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 1 if unequal else 0


if __name__ == "__main__":
    sys.exit(main())
