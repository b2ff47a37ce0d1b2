"""The simulator's memory budget, and what a run will cost before it starts.

The numbers are bytes of resident memory per thing, measured on the compiled
build (native kernel and mypyc, CPython 3.11, x86-64) and rounded up; they are
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

#: One direction of a link: the native ``EgressPort`` (392 B with its collector
#: header) and its name (about 64 B).
BYTES_PER_PORT = 480
#: One link beyond its two ports: the ``Link``, its ``LinkInfo``, its name and its
#: entry in ``Fabric.links``.
BYTES_PER_LINK = 600
#: One host beyond its links: the ``SimHost``, its transport ``Context``, its random
#: generator (2.5 KB of Mersenne Twister state), one host end per plane, its link
#: listeners, route cache and its share of the topology's names.
BYTES_PER_HOST = 6_500
#: One MRC queue pair (each connection has two: the sender's and the receiver's)
#: over its run beyond this budget's packets in flight: its EV table, congestion
#: control state and queues (about 24 KB when its flow starts), then what sending
#: adds: the EV ids and ECN state, and the records of its transmissions in flight
#: (the requester's ``TxTable`` and per-EV send order ``EvOrder``) and its host's
#: route cache entries: about 35 KB per QP counted at the plateau of a sendrecv.
#: A sendrecv of 512 hosts x 8 planes added 45 KB of peak RSS per QP over its run,
#: packets in flight included (98 KB before the requester's records went into
#: arrays; this budget: 40 KB per QP and 89 KB of packets in flight); sendrecv-2048
#: and sendrecv-42k measured under the estimate this gives (docs/performance.md).
BYTES_PER_QP = 40_000
#: One packet in flight (on a wire or in a queue): the packet object (192 B) and
#: its event in the heap (32 B), rounded up.
BYTES_PER_PACKET = 256
#: What the interpreter and the imported modules take before anything is built.
BASE_BYTES = 64 << 20
#: Events per MTU-sized data packet sent, end to end (its hops, its ACK's hops, the
#: NIC's pump and timers) on paths through a T1, measured: 7.2 on a permutation and
#: 3.4 on a sendrecv (mostly under one T0) of 1 MiB per host, 256 hosts x 8 planes; with
#: losses, trims or failures there are more.
EVENTS_PER_PACKET = 8


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
) -> Estimate:
    """Estimate a run of flows of ``flow_bytes`` from ``senders`` hosts over ``qps`` QPs."""
    packets = sum(-(-b // mtu) for b in flow_bytes)
    flying = min(packets, in_flight(spec, senders, mtu, base_rtt_ps))
    memory = BASE_BYTES + fabric_bytes(spec) + qps * BYTES_PER_QP + flying * BYTES_PER_PACKET
    return Estimate(
        hosts=spec.hosts,
        planes=spec.planes,
        ports=2 * links_of(spec),
        links=links_of(spec),
        qps=qps,
        packets_in_flight=flying,
        memory_bytes=memory,
        events=packets * EVENTS_PER_PACKET,
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
