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
"""

from __future__ import annotations

import socket

from openmrc.net.netns import call_in_netns

#: ``linux/udp.h``: send IPv6 UDP datagrams with a zero checksum.
UDP_NO_CHECK6_TX = 101
#: ``linux/udp.h``: accept IPv6 UDP datagrams with a zero checksum.
UDP_NO_CHECK6_RX = 102

#: The RoCEv2 UDP destination port.
ROCE_PORT = 4791


def set_nocheck(sock: socket.socket, *, tx: bool = True, rx: bool = True) -> None:
    """Set ``UDP_NO_CHECK6_TX`` / ``UDP_NO_CHECK6_RX`` on an existing IPv6 UDP socket."""
    sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_TX, 1 if tx else 0)
    sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX, 1 if rx else 0)


def _make(
    bind: tuple[str, int] | None, tx: bool, rx: bool, blocking: bool, reuse_port: bool
) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        set_nocheck(sock, tx=tx, rx=rx)
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
) -> socket.socket:
    """Open an IPv6 UDP socket that sends zero checksums and accepts them.

    ``bind``: ``(address, port)`` to bind, e.g. ``("::", 4791)`` or a host's
    plane address.  ``netns``: create the socket inside that named network
    namespace (e.g. a lab host, ``Lab.host_netns(h)``); the socket stays in it
    for good and can be used from any thread or event loop of this process.
    ``tx``/``rx`` choose which of the two options to set.
    """
    if netns is None:
        return _make(bind, tx, rx, blocking, reuse_port)
    return call_in_netns(netns, _make, bind, tx, rx, blocking, reuse_port)
