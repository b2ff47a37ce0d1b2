"""A small command layer over ``ip``, ``nft`` and network-namespace syscalls.

The lab (:mod:`openmrc.net.lab`) builds everything through this module so the
subprocess handling lives in one place:

* :func:`ip_batch` / :func:`ip_batches` feed many ``ip`` commands to one
  ``ip [-n NS] -batch -`` process (one process per namespace, run in parallel);
* :func:`enter_netns` / :func:`call_in_netns` switch *the calling thread* into a
  named namespace with ``setns(2)`` -- sockets created there stay bound to that
  namespace for their whole life, whichever thread later uses them;
* :func:`write_sysctls` writes ``/proc/sys`` inside a namespace without forking;
* :func:`set_tx_checksum` turns a device's TX checksum offload off (the
  ``ethtool -K DEV tx off`` ioctl, without needing the ``ethtool`` binary).

Everything here needs root (``CAP_SYS_ADMIN`` / ``CAP_NET_ADMIN``).
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

#: Where ``ip netns add`` puts the namespace handles.
NETNS_DIR = Path("/run/netns")

_CLONE_NEWNET = 0x40000000
_SIOCETHTOOL = 0x8946
_ETHTOOL_GTXCSUM = 0x00000016
_ETHTOOL_STXCSUM = 0x00000017

_T = TypeVar("_T")

_libc: ctypes.CDLL | None = None


class CommandError(RuntimeError):
    """A command of the lab failed; carries the command line and its stderr."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"{' '.join(argv)} failed ({returncode}): {stderr.strip()}")


def have_tool(name: str) -> bool:
    """Whether executable ``name`` is on PATH (``ip``, ``nft``, ``dumpcap``...)."""
    return shutil.which(name) is not None


def run(
    argv: list[str], *, input: str | None = None, check: bool = True, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; return the finished process (text mode); raise :class:`CommandError`."""
    proc = subprocess.run(
        argv, input=input, capture_output=True, text=True, check=False, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stderr)
    return proc


def _ip_argv(netns: str | None, force: bool, ipv6: bool = False) -> list[str]:
    argv = ["ip", "-6"] if ipv6 else ["ip"]
    if netns is not None:
        argv += ["-n", netns]
    if force:
        argv.append("-force")
    return [*argv, "-batch", "-"]


def ip_batch(
    lines: Iterable[str],
    netns: str | None = None,
    *,
    check: bool = True,
    force: bool = False,
    ipv6: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``ip`` commands (one per line, without the leading ``ip``) in one process.

    ``netns``: run them inside that namespace (``ip -n``).  ``force``: carry on
    after a failing line (``ip -force``); the return code still reports failure.
    ``ipv6``: ``ip -6`` (IPv6 family for ``rule``/``route``/``neigh`` lines).
    """
    text = "".join(line + "\n" for line in lines)
    if not text:
        return subprocess.CompletedProcess(["ip"], 0, "", "")
    return run(_ip_argv(netns, force, ipv6), input=text, check=check)


def ip_batches(
    batches: Mapping[str | None, Iterable[str]],
    *,
    check: bool = True,
    force: bool = False,
    ipv6: bool = False,
) -> dict[str | None, subprocess.CompletedProcess[str]]:
    """Run one ``ip -batch`` per namespace, all at the same time; wait for all.

    Raises one :class:`CommandError` naming the first failing namespace once
    every process has finished (so nothing is left running).
    """
    procs: dict[str | None, tuple[list[str], subprocess.Popen[str], str]] = {}
    for ns, lines in batches.items():
        text = "".join(line + "\n" for line in lines)
        if not text:
            continue
        argv = _ip_argv(ns, force, ipv6)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs[ns] = (argv, proc, text)
    results: dict[str | None, subprocess.CompletedProcess[str]] = {}
    first_error: CommandError | None = None
    for ns, (argv, proc, text) in procs.items():
        out, err = proc.communicate(text, timeout=120)
        results[ns] = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if proc.returncode != 0 and first_error is None:
            first_error = CommandError(argv, proc.returncode, err)
    if check and first_error is not None:
        raise first_error
    return results


def nft(script: str, netns: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Load an nftables script (``nft -f -``) inside namespace ``netns``."""
    return run(["ip", "netns", "exec", netns, "nft", "-f", "-"], input=script, check=check)


def list_netns() -> list[str]:
    """Names of all named network namespaces (the entries of ``/run/netns``)."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def netns_exists(name: str) -> bool:
    """Whether the named network namespace exists."""
    return (NETNS_DIR / name).exists()


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def enter_netns(name: str) -> Iterator[None]:
    """Move the calling thread into network namespace ``name`` for the ``with`` body.

    Only this thread moves (network namespaces are per thread); the previous
    namespace is restored on exit, also on exceptions.  Sockets opened inside
    the body belong to ``name`` for good.
    """
    path = NETNS_DIR / name
    target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        original = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except BaseException:
        os.close(target)
        raise
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(original)
    finally:
        os.close(target)
        os.close(original)


def call_in_netns(name: str, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """Call ``fn(*args, **kwargs)`` in a helper thread inside namespace ``name``.

    Returns its result or re-raises its exception.  The calling thread never
    changes namespace.  Use it for short work (open sockets, read counters);
    for long-running programs prefer a subprocess via ``ip netns exec``.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            with enter_netns(name):
                box["result"] = fn(*args, **kwargs)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def write_sysctls(netns: str, values: Mapping[str, str | int]) -> None:
    """Write sysctls (dotted names, e.g. ``net.ipv6.conf.all.forwarding``) inside ``netns``."""

    def work() -> None:
        for key, value in values.items():
            path = Path("/proc/sys") / key.replace(".", "/")
            path.write_text(f"{value}\n")

    call_in_netns(netns, work)


def read_sysctl(netns: str, key: str) -> str:
    """Read one sysctl inside ``netns`` (stripped text)."""
    return call_in_netns(
        netns, lambda: (Path("/proc/sys") / key.replace(".", "/")).read_text().strip()
    )


def _ethtool_value(ifname: str, cmd: int, data: int = 0) -> int:
    buf = array.array("I", [cmd, data])
    addr, _ = buf.buffer_info()
    ifr = struct.pack("16sP", ifname.encode(), addr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, _SIOCETHTOOL, ifr)
    return int(buf[1])


def set_tx_checksum(netns: str, ifnames: Iterable[str], enabled: bool) -> None:
    """Turn TX checksum offload of devices in ``netns`` on or off (``ethtool -K tx``).

    With offload off the kernel computes UDP checksums in software at send
    time, over the destination address the packet leaves with -- as a real NIC
    would -- so a checksummed datagram sent to an SRv6 path address fails the
    check at the receiver (whose destination address differs).  On veth with
    offload on, the checksum is never computed nor verified and that bug hides.
    """
    names = list(ifnames)

    def work() -> None:
        for ifname in names:
            _ethtool_value(ifname, _ETHTOOL_STXCSUM, 1 if enabled else 0)

    call_in_netns(netns, work)


def get_tx_checksum(netns: str, ifname: str) -> bool:
    """Whether TX checksum offload is on for ``ifname`` in ``netns``."""
    return bool(call_in_netns(netns, _ethtool_value, ifname, _ETHTOOL_GTXCSUM))


def link_stats(netns: str) -> dict[str, dict[str, Any]]:
    """Per-interface state and counters in ``netns``: ``{ifname: {operstate, flags, rx, tx}}``.

    ``rx``/``tx`` are the kernel's ``stats64`` dicts (``packets``, ``bytes``,
    ``dropped``...) from ``ip -s -j link show``.
    """
    proc = run(["ip", "-n", netns, "-s", "-j", "link", "show"])
    out: dict[str, dict[str, Any]] = {}
    for item in json.loads(proc.stdout or "[]"):
        stats = item.get("stats64", {})
        out[item["ifname"]] = {
            "operstate": item.get("operstate", "UNKNOWN"),
            "flags": item.get("flags", []),
            "rx": stats.get("rx", {}),
            "tx": stats.get("tx", {}),
        }
    return out
