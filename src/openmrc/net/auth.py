"""Authenticated datagrams (``--auth``): a per-session key and a tag on every MRC datagram.

MRC itself has no per-packet authentication (the ICRC is a CRC), so an
on-path attacker who sees a QP's packets can forge SACKs, NACKs and, with
the rkey it saw, WRITEs.  In authenticated mode, as PSP and UET's TSS do,
every datagram carries a trailer::

    MRC datagram (unchanged) | counter (8 bytes, big-endian) | tag (16 bytes)

The tag is AES-256-GCM over an empty plaintext with the whole MRC datagram as
associated data (integrity only: payloads stay in clear text, as the issue of
forging is what this mode addresses), under a key for this session and this
direction, with the counter as the nonce.  The keys come from HKDF-SHA256
over the control channel's shared secret, salted with both sides' handshake
nonces, so no two sessions share a key and a recorded session cannot be
replayed into another.  Each direction numbers its datagrams from 1; the
receiver keeps a sliding window of :data:`REPLAY_WINDOW` counters and drops
anything older or already seen.

The transport core never sees the trailer: :class:`~openmrc.net.driver.NetEndpoint`
checks and strips it on receive (before any other per-packet work beyond the
QP look-up) and appends it on send.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

#: Bytes the trailer adds to every datagram (counter + tag).
TRAILER = 24
#: Bytes of the tag.
TAG = 16
#: Counters below the highest seen by more than this are refused as replays;
#: within it, each is accepted once (a bitmap of this many bits per session).
REPLAY_WINDOW = 8192
_INFO = b"openmrc-datagram-auth-v1"
_ZERO4 = bytes(4)
_MASK = (1 << REPLAY_WINDOW) - 1


def derive_keys(secret: bytes, server_nonce: str, client_nonce: str) -> tuple[bytes, bytes]:
    """The session's (client -> server, server -> client) keys, 32 bytes each.

    HKDF-SHA256 of the shared secret, salted with both handshake nonces.
    """
    salt = f"{server_nonce}|{client_nonce}".encode()
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=salt, info=_INFO).derive(secret)
    return okm[:32], okm[32:]


class DatagramAuth:
    """One session's datagram protection: a send key and counter, a receive key and window.

    Shared by every QP of the session (the counter is per direction, so each
    nonce is used once under its key).  ``rx_failed`` and ``rx_replayed``
    count what :meth:`check` refused.
    """

    def __init__(self, tx_key: bytes, rx_key: bytes) -> None:
        self._tx = AESGCM(tx_key)
        self._rx = AESGCM(rx_key)
        self.tx_counter = 0
        #: highest accepted counter, and the bitmap of accepted counters below
        #: it (bit i: counter ``top - i``), at most REPLAY_WINDOW bits.
        self.top = 0
        self.seen = 0

    @classmethod
    def for_client(cls, secret: bytes, server_nonce: str, client_nonce: str) -> DatagramAuth:
        """The client's side of a session (sends with the client -> server key)."""
        c2s, s2c = derive_keys(secret, server_nonce, client_nonce)
        return cls(c2s, s2c)

    @classmethod
    def for_server(cls, secret: bytes, server_nonce: str, client_nonce: str) -> DatagramAuth:
        """The server's side of a session (sends with the server -> client key)."""
        c2s, s2c = derive_keys(secret, server_nonce, client_nonce)
        return cls(s2c, c2s)

    def seal(self, data: bytes) -> bytes:
        """``data`` with its trailer (the next counter and the tag)."""
        self.tx_counter += 1
        ctr = self.tx_counter.to_bytes(8, "big")
        return data + ctr + self._tx.encrypt(_ZERO4 + ctr, b"", data)

    def check(self, view: memoryview, n: int) -> int:
        """Check the trailer of the ``n``-byte datagram in ``view``.

        Returns 0 if it is authentic and new (its counter is then marked seen),
        1 if its tag is wrong (forged or corrupted, or too short), 2 if its
        counter was seen already or is older than the window (a replay).
        Never raises.
        """
        if n < TRAILER + 12:
            return 1
        body = n - TRAILER
        ctr_b = view[body : body + 8]
        ctr = int.from_bytes(ctr_b, "big")
        top = self.top
        if ctr <= top:
            age = top - ctr
            if age >= REPLAY_WINDOW or self.seen >> age & 1:
                return 2
        try:
            self._rx.decrypt(_ZERO4 + bytes(ctr_b), view[body + 8 : n], view[:body])
        except InvalidTag:
            return 1
        if ctr > top:
            shift = ctr - top
            self.seen = (self.seen << shift | 1) & _MASK if shift < REPLAY_WINDOW else 1
            self.top = ctr
        else:
            self.seen |= 1 << (top - ctr)
        return 0
