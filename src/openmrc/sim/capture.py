"""Packet capture in the simulator: pcap files of what hosts' NICs send and receive.

A :class:`Capture` taps chosen hosts of an experiment.  Every packet one of
them puts on a NIC port, and every packet one of them receives, is encoded to
the real wire format (outer IPv6 to the SRv6 path, inner IPv6 between the NICs,
UDP to port 4791, BTH and MRC headers: :func:`openmrc.wire.codec.encode_frame`)
and written with its simulated timestamp (nanosecond pcap, raw IPv6 link
type), so tshark and Wireshark read it like a capture from a real port.
Virtual payloads are written as zero bytes of the right length.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..transport.ev import ev_plane
from ..wire.codec import WireError, encode_frame
from ..wire.pcap import PcapWriter

if TYPE_CHECKING:
    from ..topology import Topology
    from ..wire.packets import Packet


class Capture:
    """Writes a pcap file of the traffic at ``hosts`` (all hosts when None).

    ``nics`` are the experiment's NICs by host index (anything with a ``taps``
    list the NIC calls per packet), ``topology`` names their addresses.
    """

    def __init__(
        self,
        topology: Topology,
        nics: Sequence[Any],
        path: str | Path,
        hosts: list[int] | None = None,
    ) -> None:
        n = len(nics)
        chosen = list(range(n)) if hosts is None else list(hosts)
        for h in chosen:
            if not isinstance(h, int) or not 0 <= h < n:
                raise ValueError(f"capture hosts: {h!r} is not a host index in 0..{n - 1}")
        self.topology = topology
        self.writer = PcapWriter(Path(path))
        self.packets = 0
        self.unencodable = 0
        self._hosts = set(chosen)
        for h in chosen:
            nics[h].taps.append(self._tap)

    def _tap(self, host: int, peer: int, pkt: Packet, sent: bool, now: int) -> None:
        if not isinstance(peer, int) or peer < 0:
            self.unencodable += 1  # a packet for no QP here: no known peer address
            return
        plane = ev_plane(pkt.path_ev)
        src, dst = (host, peer) if sent else (peer, host)
        try:
            frame = encode_frame(
                pkt,
                self.topology.host_address(src, plane),
                self.topology.host_address(dst, plane),
                pkt.route if isinstance(pkt.route, int) else None,
            )
        except WireError:
            self.unencodable += 1
            return
        self.writer.write(frame, now)
        self.packets += 1

    def close(self) -> None:
        """Flush and close the file."""
        self.writer.close()
