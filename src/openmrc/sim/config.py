"""Fabric parameters: queue sizes, ECN marking, trimming, framing, switch and NIC latency."""

from __future__ import annotations

from dataclasses import dataclass

from ..topology import DEPLOYED_LINK_DELAY_PS

#: Ethernet bytes a link adds to a packet's IP size: header 14 + FCS 4 + preamble/IFG 20.
ETHERNET_FRAMING_BYTES = 38

#: The deployed latency model, the simulator's defaults (docs/latency.md gives the
#: sources): a 51.2 Tb/s Tomahawk-5-class switch forwards in about 600 ns; 20 m of
#: fibre at 5 ns/m; NIC transmit and receive processing (PCIe doorbell and DMA,
#: completion) 2.1 us per side, the remainder of the paper's 5.09 us within one T0.
DEPLOYED_SWITCH_LATENCY_PS = 600_000
DEPLOYED_NIC_LATENCY_PS = 2_100_000

__all__ = [
    "DEPLOYED_LINK_DELAY_PS",
    "DEPLOYED_NIC_LATENCY_PS",
    "DEPLOYED_SWITCH_LATENCY_PS",
    "ETHERNET_FRAMING_BYTES",
    "FabricConfig",
]


@dataclass(frozen=True)
class FabricConfig:
    """How switch egress ports (and host NIC egress ports) behave.

    Byte sizes left ``None`` are derived per port from its BDP, ``rate x
    base_rtt_ps``: the data queue is ``queue_bdp`` BDPs (1 with trimming, as in
    htsim; 5 is the usual choice without), the header (strict-priority) queue
    ``header_queue_bdp`` BDPs, and ECN marks on a linear ramp from ``ecn_kmin``
    to ``ecn_kmax`` (20 %-80 % of a BDP).  ``ecn_kmin == ecn_kmax`` gives a
    plain threshold.  All queue byte counts include Ethernet framing.
    """

    base_rtt_ps: int = 12_000_000
    queue_bdp: float = 1.0
    queue_bytes: int | None = None
    header_queue_bdp: float = 1.0
    header_queue_bytes: int | None = None
    trimming: bool = True
    ecn: bool = True
    ecn_kmin_frac: float = 0.2
    ecn_kmax_frac: float = 0.8
    ecn_kmin_bytes: int | None = None
    ecn_kmax_bytes: int | None = None
    #: Mark ECN on T0 -> host ports too (False: never mark on the last hop).
    ecn_lasthop: bool = True
    #: Data queue limit of a host NIC egress port (the NIC is expected to pace itself).
    host_queue_bytes: int = 64 * 1024 * 1024
    framing_bytes: int = ETHERNET_FRAMING_BYTES
    #: Fixed forwarding latency of a switch, added to the arrival time of every packet
    #: (default: the deployed 600 ns, docs/latency.md).
    switch_latency_ps: int = DEPLOYED_SWITCH_LATENCY_PS
    #: Port status: from a host's NIC port going down (or up) to its MRC NIC
    #: acting on it (remapping that plane's EVs and setting the SACK ports-down
    #: bitmap).  Default 1 s: the paper's testbed (5.2.2) shows "a brief
    #: interruption of less than a second" for detection, EV remapping and
    #: retransmission after a NIC-T0 link failure, about a second in the notes'
    #: summary; we take the upper bound.  Until then, the link's losses are
    #: handled as any loss (EVs go ASSUMED_BAD).  Set it small to study the
    #: port-status path itself.
    nic_port_status_delay_ps: int = 1_000_000_000_000
    #: NIC transmit processing (post / ACK generation to the wire) and receive
    #: processing (wire to memory and completion), added to every packet leaving /
    #: reaching a host.  Default: the deployed 2.1 us each (docs/latency.md);
    #: :meth:`ideal_latency` gives an ideal NIC and switch (0).
    nic_tx_latency_ps: int = DEPLOYED_NIC_LATENCY_PS
    nic_rx_latency_ps: int = DEPLOYED_NIC_LATENCY_PS

    @classmethod
    def deployed_latency(cls, **overrides: object) -> FabricConfig:
        """A config with the deployed NIC and switch latencies: the defaults, spelled out
        (links: ``DEPLOYED_LINK_DELAY_PS``, the default ``ClosSpec.link_delay_ps``)."""
        kw: dict[str, object] = {
            "switch_latency_ps": DEPLOYED_SWITCH_LATENCY_PS,
            "nic_tx_latency_ps": DEPLOYED_NIC_LATENCY_PS,
            "nic_rx_latency_ps": DEPLOYED_NIC_LATENCY_PS,
            **overrides,
        }
        return cls(**kw)  # type: ignore[arg-type]

    @classmethod
    def ideal_latency(cls, **overrides: object) -> FabricConfig:
        """A config with no NIC or switch processing latency (the defaults before the
        deployed latency model): for tests and studies that want links and queues only."""
        kw: dict[str, object] = {
            "switch_latency_ps": 0,
            "nic_tx_latency_ps": 0,
            "nic_rx_latency_ps": 0,
            **overrides,
        }
        return cls(**kw)  # type: ignore[arg-type]

    def path_latency_ps(self, switches: int = 3) -> int:
        """Fixed one-way processing latency over ``switches`` switches (links excluded)."""
        return self.nic_tx_latency_ps + self.nic_rx_latency_ps + switches * self.switch_latency_ps

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        for name in (
            "base_rtt_ps",
            "host_queue_bytes",
            "framing_bytes",
            "switch_latency_ps",
            "nic_port_status_delay_ps",
            "nic_tx_latency_ps",
            "nic_rx_latency_ps",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"FabricConfig.{name}: must be a non-negative integer, got {value!r}"
                )
        for name in ("queue_bdp", "header_queue_bdp", "ecn_kmin_frac", "ecn_kmax_frac"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(
                    f"FabricConfig.{name}: must be a non-negative number, got {value!r}"
                )
        for name in ("queue_bytes", "header_queue_bytes", "ecn_kmin_bytes", "ecn_kmax_bytes"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ValueError(
                    f"FabricConfig.{name}: must be None or a non-negative integer, got {value!r}"
                )
        if self.ecn_kmin_frac > self.ecn_kmax_frac:
            raise ValueError(
                f"FabricConfig.ecn_kmin_frac: must not exceed ecn_kmax_frac "
                f"({self.ecn_kmin_frac} > {self.ecn_kmax_frac})"
            )
        if (
            self.ecn_kmin_bytes is not None
            and self.ecn_kmax_bytes is not None
            and self.ecn_kmin_bytes > self.ecn_kmax_bytes
        ):
            raise ValueError(
                f"FabricConfig.ecn_kmin_bytes: must not exceed ecn_kmax_bytes "
                f"({self.ecn_kmin_bytes} > {self.ecn_kmax_bytes})"
            )

    def bdp_bytes(self, rate_bps: int) -> int:
        """Bandwidth-delay product of a port of ``rate_bps`` at :attr:`base_rtt_ps`."""
        return rate_bps * self.base_rtt_ps // (8 * 10**12)

    def port_params(self, rate_bps: int) -> tuple[int, int, int, int]:
        """(data queue, header queue, ECN kmin, ECN kmax) byte limits for a switch port."""
        bdp = self.bdp_bytes(rate_bps)
        queue = self.queue_bytes if self.queue_bytes is not None else int(bdp * self.queue_bdp)
        header = (
            self.header_queue_bytes
            if self.header_queue_bytes is not None
            else int(bdp * self.header_queue_bdp)
        )
        kmin = (
            self.ecn_kmin_bytes
            if self.ecn_kmin_bytes is not None
            else int(bdp * self.ecn_kmin_frac)
        )
        kmax = (
            self.ecn_kmax_bytes
            if self.ecn_kmax_bytes is not None
            else int(bdp * self.ecn_kmax_frac)
        )
        return queue, header, kmin, max(kmin, kmax)
