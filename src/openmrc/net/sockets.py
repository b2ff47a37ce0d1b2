"""UDP sockets for SRv6 path addresses: no UDP checksum on send, none required on receive.

An SRv6 uSID switch rewrites the IPv6 destination at every hop (it shifts the
uSID carrier left).  The UDP checksum covers a pseudo-header holding the
destination address, so a checksum the sender computed over the *path* address
fails at the receiver, which sees the *shifted* address.  IPv6 normally forbids
a zero UDP checksum; Linux allows it per socket (RFC 6935/6936):

* ``UDP_NO_CHECK6_TX`` (101, level ``IPPROTO_UDP``) on the sender: send a zero
  checksum;
* ``UDP_NO_CHECK6_RX`` (102) on the receiver: accept zero-checksum datagrams
  (without it they are dropped and counted in ``Udp6InCsumErrors``).

(A datagram *with* a non-zero checksum is still verified, so both ends need
the options.)  MRC carries its own integrity check (the RoCE ICRC) anyway.

A packet's EV also rides in its IPv6 flow label, given to ``sendto`` as the
address's ``flowinfo``: :func:`send_flow_labels` makes a socket honour it.
"""

from __future__ import annotations

import contextlib
import socket

from openmrc.net.netns import call_in_netns

#: ``linux/udp.h``: send IPv6 UDP datagrams with a zero checksum.
UDP_NO_CHECK6_TX = 101
#: ``linux/udp.h``: accept IPv6 UDP datagrams with a zero checksum.
UDP_NO_CHECK6_RX = 102

#: ``linux/in6.h``: honour ``sin6_flowinfo`` given to ``sendto`` (the flow label).
IPV6_FLOWINFO_SEND = 33
#: ``linux/in6.h``: 0 turns the kernel's automatic flow labels off for the socket, so a
#: zero label given to ``sendto`` (an EV whose low 20 bits are 0) goes out as 0 rather
#: than as a hash of the socket's addresses and ports (``net.ipv6.auto_flowlabels``).
IPV6_AUTOFLOWLABEL = 70

#: The RoCEv2 UDP destination port.
ROCE_PORT = 4791


def send_flow_labels(sock: socket.socket) -> None:
    """Make ``sock`` send the flow label each ``sendto`` address gives, 0 included.

    Best effort: a kernel without an option keeps its own labels (4.6 added the
    automatic labels' switch); the datagrams still go out.
    """
    for option, value in ((IPV6_FLOWINFO_SEND, 1), (IPV6_AUTOFLOWLABEL, 0)):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_IPV6, option, value)


def set_nocheck(sock: socket.socket, *, tx: bool = True, rx: bool = True) -> None:
    """Set ``UDP_NO_CHECK6_TX`` / ``UDP_NO_CHECK6_RX`` on an existing IPv6 UDP socket."""
    sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_TX, 1 if tx else 0)
    sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX, 1 if rx else 0)


def _make(
    bind: tuple[str, int] | None,
    tx: bool,
    rx: bool,
    blocking: bool,
    reuse_port: bool,
    flow_labels: bool = False,
) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        set_nocheck(sock, tx=tx, rx=rx)
        if flow_labels:
            send_flow_labels(sock)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if bind is not None:
            sock.bind(bind)
        sock.setblocking(blocking)
    except BaseException:
        sock.close()
        raise
    return sock


def udp_socket_nocheck(
    bind: tuple[str, int] | None = None,
    *,
    netns: str | None = None,
    tx: bool = True,
    rx: bool = True,
    blocking: bool = True,
    reuse_port: bool = False,
    flow_labels: bool = False,
) -> socket.socket:
    """Open an IPv6 UDP socket that sends zero checksums and accepts them.

    ``bind``: ``(address, port)`` to bind, e.g. ``("::", 4791)`` or a host's
    plane address.  ``netns``: create the socket inside that named network
    namespace (e.g. a lab host, ``Lab.host_netns(h)``); the socket stays in it
    for good and can be used from any thread or event loop of this process.
    ``tx``/``rx`` choose which of the two options to set.  ``flow_labels``: send
    the flow label ``sendto`` gives (:func:`send_flow_labels`).
    """
    if netns is None:
        return _make(bind, tx, rx, blocking, reuse_port, flow_labels)
    return call_in_netns(netns, _make, bind, tx, rx, blocking, reuse_port, flow_labels)
