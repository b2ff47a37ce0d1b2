"""Helpers for the tests that attack a live ``openmrc serve`` on ``::1`` (no root needed).

:func:`serve` starts the server in a subprocess (the same interpreter and
``PYTHONPATH``, so it runs the code under test) on free ports with a fresh
token; :func:`fds` and :func:`rss_kib` read a process's open files and memory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from openmrc.net.control import ControlAddress, ensure_token


def free_port(kind: int) -> int:
    """A port on ``::1`` that is free now (UDP or TCP)."""
    with socket.socket(socket.AF_INET6, kind) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fds(pid: int) -> int:
    """Open file descriptors of ``pid``."""
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Server:
    """A running ``openmrc serve``: its process, data port, control address and secret."""

    proc: subprocess.Popen[bytes]
    port: int
    control: ControlAddress
    secret: bytes
    log: Path

    def output(self) -> str:
        """Stop the server (if still running) and return everything it printed."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.log.read_text(errors="replace")


@contextmanager
def serve(
    tmp_path: Path,
    *extra: str,
    size: int = 16 << 20,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[Server]:
    """Run ``openmrc serve`` on ``::1`` for the ``with`` block (killed afterwards).

    ``extra``: more command-line arguments; ``preexec_fn``: run in the child
    before it starts (e.g. to lower its open-file limit)."""
    token = tmp_path / "token"
    secret = ensure_token(token)
    port, ctl = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    log = tmp_path / "serve.log"  # a file, not a pipe: a full pipe would block the server
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "openmrc.cli", "serve", "--bind", "::1", "--port", str(port),
             "--control-port", str(ctl), "--size", str(size), "--token-file", str(token), *extra],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec_fn,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:  # wait for the control port to accept
            try:
                with socket.create_connection(("::1", ctl), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"serve did not start: {log.read_text()}") from None
                time.sleep(0.05)
        yield Server(proc, port, ControlAddress(host="::1", port=ctl), secret, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
