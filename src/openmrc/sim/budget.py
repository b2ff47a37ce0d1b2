"""The simulator's memory budget, and what a run will cost before it starts.

The numbers are bytes of resident memory per thing, measured on the compiled
build (native kernel and mypyc, CPython 3.11, x86-64); they are
documented, with how they were measured, in ``docs/performance.md``, which
``benchmarks/sim_speed.py`` reports against and ``tests/sim/test_budget.py``
keeps (a fabric of 16,384 hosts on 8 planes must fit its budget per host).

:func:`estimate` turns a fabric's size and a workload into hosts, ports,
links, QPs, an estimate of peak memory and of events; the ``run`` command
prints it before it builds anything and warns when the memory estimate is more
than the machine has free.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from openmrc.topology import ClosSpec

#: One direction of a link: the native ``EgressPort`` (432 B with its collector
#: header) and its name (about 64 B).
BYTES_PER_PORT = 520
#: One link beyond its two ports: the ``Link``, its ``LinkInfo``, its name and its
#: entry in ``Fabric.links``.
BYTES_PER_LINK = 600
#: One host beyond its links: the ``SimHost``, its transport ``Context``, its random
#: generator (2.5 KB of Mersenne Twister state), one host end per plane, its link
#: listeners, route cache and its share of the topology's names.
BYTES_PER_HOST = 6_500
#: One MRC queue pair (a connection has two: the sender's and the receiver's) of a
#: flow between two hosts under one T0, over its run: everything the run adds at its
#: peak beyond the fabric, per QP (its EV table and state, its transmissions in
#: flight and their records, the flow's own records and results).  Measured with
#: ``benchmarks/mem_costs.py`` on sendrecv and permutation runs of 256 to 2048 hosts
#: x 8 planes (peak RSS less the interpreter and the fabric's budget), split by a
#: least-squares fit over the seven runs into the two kinds of QP below
#: (docs/results/estimate.md).
BYTES_PER_QP_LOCAL = 62_000
#: The same for a QP whose flow crosses the T1 tier: twice the local QP (more EVs
#: in use, a longer round trip with more packets in flight and their records).
BYTES_PER_QP = 121_000
#: One packet in flight (on a wire or in a queue): the packet object (192 B) and
#: its event in the heap (32 B), rounded up.  Counted inside the per-QP costs
#: above; :func:`in_flight` says how many there can be.
BYTES_PER_PACKET = 256
#: What the interpreter and the imported modules take before anything is built.
BASE_BYTES = 64 << 20
#: Events per MTU-sized data packet sent, end to end (its hops, its ACK's hops, the
#: NIC's pump and timers), by the same fit as the QPs: 3.6 between hosts of one T0,
#: 8.2 through a T1; with losses, trims or failures there are more.
EVENTS_PER_PACKET_LOCAL = 3.6
EVENTS_PER_PACKET = 8.2
#: CPU seconds per event and per host built, compiled build (native kernel and
#: mypyc), from the recorded large runs (benchmarks/results/: 5.0 to 5.3 us per event
#: on sendrecv, 3.1 on a permutation; 1.5 to 1.6 ms per host of set-up).  A
#: pure-Python install runs several times slower.
SECONDS_PER_EVENT = 5.0e-6
SECONDS_PER_HOST = 1.6e-3


@dataclass(frozen=True)
class Estimate:
    """What a run will cost: its size and an estimate of its peak memory and events."""

    hosts: int
    planes: int
    ports: int
    links: int
    qps: int
    packets_in_flight: int
    memory_bytes: int
    events: int
    #: flows (transfers) the run will simulate, and its data packets.
    flows: int = 0
    packets: int = 0
    #: of ``qps``: those of flows between two hosts under one T0.
    local_qps: int = 0
    #: CPU seconds, compiled build (:data:`SECONDS_PER_EVENT`, :data:`SECONDS_PER_HOST`).
    cpu_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the estimate."""
        return asdict(self)

    def line(self) -> str:
        """One line for a person: sizes, memory and events."""
        return (
            f"{self.hosts:,} hosts x {self.planes} planes, {self.ports:,} ports, "
            f"{self.qps:,} QPs: about {self.memory_bytes / 2**30:.1f} GiB "
            f"and {self.events:,} events"
        )


def links_of(spec: ClosSpec) -> int:
    """Full-duplex links of the fabric (host links and T0-T1 links, all planes)."""
    return spec.planes * (spec.hosts + spec.t0s * spec.t1s)


def same_t0(spec: ClosSpec, src: int, dst: int) -> bool:
    """Whether hosts ``src`` and ``dst`` sit under one T0 (their flow never reaches a T1)."""
    return src // spec.hosts_per_t0 == dst // spec.hosts_per_t0


def fabric_bytes(spec: ClosSpec) -> int:
    """The budget of the fabric and its hosts, before any flow starts."""
    links = links_of(spec)
    return links * (2 * BYTES_PER_PORT + BYTES_PER_LINK) + spec.hosts * BYTES_PER_HOST


def bytes_per_host(spec: ClosSpec) -> float:
    """The budget per host of the fabric and hosts (:func:`fabric_bytes` / hosts)."""
    return fabric_bytes(spec) / spec.hosts


def in_flight(spec: ClosSpec, senders: int, mtu: int, base_rtt_ps: int) -> int:
    """Packets in flight when ``senders`` hosts each keep a bandwidth-delay product of
    every plane busy (the most a window-limited transport keeps in the fabric)."""
    bdp = spec.host_gbps * 1e9 * spec.planes * base_rtt_ps / 8e12
    return int(senders * max(1.0, bdp / max(mtu, 1)) * 2)  # x2: queues on the way


def estimate(
    spec: ClosSpec,
    flow_bytes: list[int],
    senders: int,
    qps: int,
    mtu: int = 4096,
    base_rtt_ps: int = 10_000_000,
    local_qps: int = 0,
    local_bytes: int = 0,
) -> Estimate:
    """Estimate a run of flows of ``flow_bytes`` from ``senders`` hosts over ``qps`` QPs,
    ``local_qps`` of them (and ``local_bytes`` of the bytes) between hosts under one T0.

    Memory: the interpreter, the fabric and hosts (:func:`fabric_bytes`), and each
    QP's cost over its run by where its flow goes (:data:`BYTES_PER_QP_LOCAL`,
    :data:`BYTES_PER_QP`).  The per-QP costs were measured on flows larger than a
    window (2 to 4 MiB); many small flows come out above what they take.
    """
    local_qps = min(max(local_qps, 0), qps)
    total = sum(flow_bytes)
    local_bytes = min(max(local_bytes, 0), total)
    packets = sum(-(-b // mtu) for b in flow_bytes)
    local_packets = round(packets * local_bytes / total) if total else 0
    flying = min(packets, in_flight(spec, senders, mtu, base_rtt_ps))
    memory = (
        BASE_BYTES
        + fabric_bytes(spec)
        + local_qps * BYTES_PER_QP_LOCAL
        + (qps - local_qps) * BYTES_PER_QP
    )
    events = round(
        local_packets * EVENTS_PER_PACKET_LOCAL + (packets - local_packets) * EVENTS_PER_PACKET
    )
    return Estimate(
        hosts=spec.hosts,
        planes=spec.planes,
        ports=2 * links_of(spec),
        links=links_of(spec),
        qps=qps,
        packets_in_flight=flying,
        memory_bytes=memory,
        events=events,
        flows=len(flow_bytes),
        packets=packets,
        local_qps=local_qps,
        cpu_seconds=events * SECONDS_PER_EVENT + spec.hosts * SECONDS_PER_HOST,
    )


def available_bytes() -> int | None:
    """Memory the machine has available now (``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
