"""What ``openmrc send`` and ``perf`` print: a few lines by default, counts that add up
and say what they count, interval lines under a header of their own (loopback only)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

from openmrc.cli.net import _INTERVAL_COLUMNS
from tests.net.test_driver import _free_port, _openmrc, _serve


def _send(path: Path, *extra: str) -> str:
    port, ctl = _free_port(), _free_port(socket.SOCK_STREAM)
    server = _serve(port, ctl)
    try:
        send = subprocess.run(
            _openmrc("send", str(path), "--to", "::1", "--control-port", str(ctl), *extra),
            capture_output=True,
            text=True,
            timeout=60,
        )
        server.communicate(timeout=30)
    finally:
        server.kill()
    assert send.returncode == 0, send.stdout + send.stderr
    return send.stdout


def test_send_prints_a_few_lines_and_v_adds_the_detail(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(8 << 20))
    out = _send(blob)
    lines = out.splitlines()
    assert len(lines) <= 6, out  # was ~86 lines of per-EV detail
    assert lines[0].startswith(f"openmrc send: {blob} (8.0 MiB, sha256 ")
    assert "wrote 8.0 MiB in 8 WRITEs" in out and "server: hash OK" in out
    assert "per EV" not in out and "per plane" not in out
    # resent packets beside what declared packets lost, each labelled
    m = re.search(
        r"resent (\d+) \(of (\d+) declared lost: (\d+) by SACK/RACK, (\d+) by timeout", out
    )
    assert m, out
    assert int(m[2]) == int(m[3]) + int(m[4])
    verbose = _send(blob, "-v")
    assert "per plane" in verbose
    paths = re.search(r"paths: (\d+) active EVs?: (.*)", verbose)
    per_ev = re.search(r"per EV \((\d+) EVs?: (\d+) active, (\d+) no longer", verbose)
    assert paths and per_ev, verbose
    by_state = [int(n) for n in re.findall(r"[A-Z_]+ (\d+)", paths[2].split(";")[0])]
    assert sum(by_state) == int(paths[1]) == int(per_ev[2])  # GOOD + ... = the active EVs
    assert int(per_ev[1]) == int(per_ev[2]) + int(per_ev[3])  # every row counted once


def test_perf_intervals_sit_under_a_header_of_their_own() -> None:
    port, ctl = _free_port(), _free_port(socket.SOCK_STREAM)
    server = _serve(port, ctl, "--size", "1M")
    try:
        perf = subprocess.run(
            _openmrc("perf", "--to", "::1", "--control-port", str(ctl), "-D", "1.3", "-i", "0.4"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        server.communicate(timeout=30)
    finally:
        server.kill()
    assert perf.returncode == 0, perf.stdout + perf.stderr
    lines = perf.stdout.splitlines()
    head = lines.index(_INTERVAL_COLUMNS)
    rows = []
    for line in lines[head + 1 :]:
        if line.startswith("-"):
            break
        rows.append(line)
    assert len(rows) >= 2, perf.stdout
    titles = _INTERVAL_COLUMNS.split()
    for row in rows:
        cells = row.split()
        assert len(cells) == len(titles) and len(row) == len(_INTERVAL_COLUMNS), (row, titles)
        start, end = (float(x) for x in cells[0].split("-"))
        assert end > start and int(cells[1]) >= 0 and float(cells[2]) >= 0
    # then the run's summary under the perftest header
    summary = lines[lines.index(rows[-1]) + 1 :]
    assert any("BW average[Gb/sec]" in line for line in summary), perf.stdout
