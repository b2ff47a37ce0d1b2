"""A minimal pcap writer, for looking at openmrc traffic in Wireshark/tshark.

Writes the classic libpcap format with *nanosecond* timestamps (magic
0xa1b23c4d, little-endian), one record per frame.  The default link type is
``LINKTYPE_RAW`` (101): each record is a bare IP packet, which is exactly what
:func:`openmrc.wire.codec.encode_frame` produces.  Wireshark decodes the
UDP/4791 payload as RoCEv2 (the BTH); openmrc's own headers behind it show as
data.
"""

from __future__ import annotations

import os
import struct
from types import TracebackType
from typing import BinaryIO, Final

__all__ = ["LINKTYPE_ETHERNET", "LINKTYPE_RAW", "PCAP_NS_MAGIC", "PcapWriter"]

#: Link type of records that start with an IPv4/IPv6 header.
LINKTYPE_RAW = 101
#: Link type of records that start with an Ethernet header.
LINKTYPE_ETHERNET = 1
#: Magic number of a nanosecond-resolution pcap file.
PCAP_NS_MAGIC: Final = 0xA1B23C4D
#: Snapshot length written in the file header (no record is cut).
SNAPLEN: Final = 262144

_FILE_HEADER: Final = struct.Struct("<IHHiIII")
_RECORD_HEADER: Final = struct.Struct("<IIII")
_NS_PER_S: Final = 1_000_000_000


class PcapWriter:
    """Write frames to a nanosecond pcap file.

    ``path_or_fileobj`` is a path (the writer opens, owns and closes the file)
    or a binary file object (the writer only writes and flushes it; closing it
    stays with the caller).  Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self, path_or_fileobj: str | os.PathLike[str] | BinaryIO, linktype: int = LINKTYPE_RAW
    ) -> None:
        if not isinstance(linktype, int) or not 0 <= linktype <= 0xFFFFFFFF:
            raise ValueError(f"linktype: {linktype!r} is not a 32-bit link type")
        if isinstance(path_or_fileobj, str | os.PathLike):
            self._file: BinaryIO = open(path_or_fileobj, "wb")  # noqa: SIM115 - closed in close()
            self._owned = True
        else:
            self._file = path_or_fileobj
            self._owned = False
        self._closed = False
        self.linktype = linktype
        self._file.write(_FILE_HEADER.pack(PCAP_NS_MAGIC, 2, 4, 0, 0, SNAPLEN, linktype))

    def write(self, frame: bytes | bytearray | memoryview, ts_ps: int) -> None:
        """Append one frame captured at ``ts_ps`` picoseconds (rounded down to ns)."""
        if self._closed:
            raise ValueError("write: the PcapWriter is closed")
        if not isinstance(ts_ps, int) or ts_ps < 0:
            raise ValueError(f"ts_ps: {ts_ps!r} is not a non-negative integer")
        sec, nsec = divmod(ts_ps // 1000, _NS_PER_S)
        if sec > 0xFFFFFFFF:
            raise ValueError(f"ts_ps: {ts_ps} is past what a pcap timestamp can hold")
        size = len(frame)
        self._file.write(_RECORD_HEADER.pack(sec, nsec, size, size))
        self._file.write(frame)

    def close(self) -> None:
        """Flush, and close the file if this writer opened it.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._file.flush()
        if self._owned:
            self._file.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
