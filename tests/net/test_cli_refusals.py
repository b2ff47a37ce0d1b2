"""``openmrc send`` / ``serve`` say why (``::1``, no root): every refusal one line
with its reason, in the client's error and in the server's log.

* ``send --chunk`` outside 4 KiB..1 GiB is refused naming the flag;
* a server whose region cannot be mapped (``--size 1T``) refuses each session
  naming ``size`` and logs it;
* a server that stops mid-transfer: the client's error names the data path's
  failure (retries exhausted), not only the control channel's silence.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .live import Server, serve


def _send(srv: Server, tmp_path: Path, *args: str, size: int = 1 << 20) -> subprocess.Popen[str]:
    blob = tmp_path / "blob"
    if not blob.exists():
        blob.write_bytes(os.urandom(size))
    return subprocess.Popen(
        [sys.executable, "-m", "openmrc.cli", "send", str(blob), "--to", "::1",
         "--control-port", str(srv.control.port), "--token-file", str(tmp_path / "token"),
         *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_send_chunk_bounds(tmp_path: Path) -> None:
    with serve(tmp_path, size=1 << 20) as srv:
        for chunk in ("1", "2G"):
            out, _ = _send(srv, tmp_path, "--chunk", chunk).communicate(timeout=60)
            assert "--chunk: must be 4.0 KiB..1.0 GiB" in out and "Traceback" not in out, out
            assert len(out.strip().splitlines()) == 1, out


def test_a_region_that_cannot_be_mapped_is_a_logged_refusal(tmp_path: Path) -> None:
    with serve(tmp_path, "--once", size=1 << 40) as srv:
        proc = _send(srv, tmp_path)
        out, _ = proc.communicate(timeout=60)
        log = srv.output()
    assert proc.returncode != 0
    assert "size" in out and "cannot map" in out and "Traceback" not in out, out
    assert "refused" in log and "cannot map" in log, log


def test_a_peer_that_stops_mid_transfer_is_named_as_the_data_path(tmp_path: Path) -> None:
    with serve(tmp_path, size=256 << 20) as srv:
        proc = _send(srv, tmp_path, "--timeout", "20", size=256 << 20)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed just before the session opens
        time.sleep(0.5)
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            out, _ = proc.communicate(timeout=120)
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
    out = first + out
    assert proc.returncode != 0
    assert "data path:" in out and "RETRY_EXC_ERR" in out, out
    assert "Traceback" not in out
