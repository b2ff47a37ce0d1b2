"""openmrc.net.sockets: the flow label a socket sends."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from openmrc.net.driver import _open_udp
from openmrc.net.sockets import udp_socket_nocheck


def _driver_socket() -> socket.socket:
    return _open_udp(("::1", 0), False, 1 << 20)


def _flow_label_socket() -> socket.socket:
    return udp_socket_nocheck(("::1", 0), flow_labels=True)


@pytest.mark.parametrize("make", [_driver_socket, _flow_label_socket], ids=["driver", "sockets"])
def test_a_zero_flow_label_stays_zero(make: Callable[[], socket.socket]) -> None:
    """A socket that sends EVs puts the label its ``sendto`` address gives in the flow
    label as it is, 0 too, which the kernel would otherwise replace with one of its own
    (automatic flow labels, on by default), moving EV 0's packets off the EV's path."""
    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx = make()
    try:
        rx.bind(("::1", 0))
        rx.setsockopt(socket.IPPROTO_IPV6, 11, 1)  # IPV6_FLOWINFO: report it in a cmsg
        rx.setsockopt(socket.IPPROTO_UDP, 102, 1)  # UDP_NO_CHECK6_RX
        rx.settimeout(5)
        for label in (0, 0x12345, 0):
            tx.sendto(b"x", ("::1", rx.getsockname()[1], label, 0))
            _data, anc, _flags, _addr = rx.recvmsg(64, 64)
            # (the kernel reports the flow information only when it is not all zero)
            flow = [int.from_bytes(d, "big") & 0xFFFFF for _lvl, t, d in anc if t == 11]
            assert (flow or [0]) == [label]
    finally:
        rx.close()
        tx.close()
