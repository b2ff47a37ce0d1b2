"""``openmrc serve`` / ``send`` / ``perf``: MRC over real UDP/IPv6 sockets.

The main CLI (``openmrc.cli``) calls :func:`register`.  Each command runs one
:class:`~openmrc.net.driver.NetEndpoint` on uvloop (when installed):

* ``serve`` exposes a memory region and verifies, by SHA-256, what ``send``
  announces over the control channel (printing "hash OK" and per-plane/per-EV
  statistics);
* ``send FILE --to HOST`` WRITEs the file as several WRITEs, the last one a
  WRITE_WITH_IMM carrying a sequence number, then asks the server to verify;
* ``perf --to HOST`` measures bandwidth (``--mode bw``, write_bw style) or
  latency (``--mode lat``, write_lat style ping-pong).

Two ways to address peers:

* **lab**: ``--lab NAME --host H`` (serve) / ``--lab NAME --from H --to H2``
  (send, perf).  The command opens its sockets inside host ``H``'s network
  namespace itself (no ``ip netns exec`` needed, though running it under
  ``openmrc lab exec H -- ...`` works the same), sprays every EV over its own
  SRv6 uSID path, and uses a Unix control socket under the lab's state dir;
* **plain IPv6**: ``--bind ADDR`` (serve) / ``--to ADDR`` (send, perf), the
  control channel on TCP port 4792 (``--control-port``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openmrc import units
from openmrc.net.control import (
    ControlAddress,
    ControlError,
    default_token_path,
    ensure_token,
    lab_control_path,
    load_token,
    remove_control_path,
)
from openmrc.net.driver import (
    CONTROL_PORT,
    NetEndpoint,
    driver_attr,
    run,
)
from openmrc.net.service import (
    MemoryServer,
    ServerLimits,
    Session,
    VerifyResult,
    format_ev_counts,
    write_buffer,
)
from openmrc.net.sockets import ROCE_PORT
from openmrc.net.wireshark import dissector_path, tshark_hint
from openmrc.transport.errors import InvalidArgument
from openmrc.units import format_size, plural

_Handler = Callable[[argparse.Namespace], int]


def parse_size(text: str) -> int:
    """``4096``, ``64K``, ``64M``, ``1G`` -> bytes (openmrc.units); ArgumentTypeError otherwise."""
    try:
        return units.parse_size(text, "size", allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: ``send --chunk`` bounds: at least one 4 KiB packet per WRITE (smaller WRITEs
#: only multiply the work requests, 64 Mi of them for a 64 MiB file at 1 byte),
#: at most 1 GiB (a WRITE is a contiguous slice of the file and of the region).
MIN_CHUNK = 4 << 10
#: How long ``send`` waits for the server's verdict once a WRITE has failed.
DEAD_VERIFY_S = 10.0
MAX_CHUNK = 1 << 30


def _positive(flag: str, value: int) -> int:
    if value <= 0:
        raise InvalidArgument(f"{flag}: must be positive, got {value}")
    return value


def _port(flag: str, value: int) -> int:
    if not 0 <= value < 65536:
        raise InvalidArgument(f"{flag}: must be a UDP/TCP port 0..65535, got {value}")
    return value


def _ipv6(flag: str, text: str) -> str:
    import ipaddress

    addr = text.strip().strip("[]")
    try:
        ipaddress.IPv6Address(addr.split("%")[0])
    except ValueError:
        raise InvalidArgument(f"{flag}: {text!r} is not an IPv6 address") from None
    return addr


@dataclass
class _Where:
    """Where this command runs: its endpoint arguments and the peer's control address."""

    ep_kwargs: dict[str, Any]
    label: str
    control: ControlAddress | None = None


def _lab_where(lab_name: str, host: str, flag: str, port: int) -> tuple[_Where, Any]:
    from openmrc.net.lab import Lab, LabError

    try:
        lab = Lab.load(lab_name)
        idx = lab.host_index(host)
    except LabError as exc:
        raise InvalidArgument(f"{flag}: {exc}") from None
    node = lab.host_node(idx)
    kwargs = {
        "bind": "::",
        "port": port,
        "netns": lab.host_netns(idx),
        "lab": lab,
        "host": idx,
        "attr": driver_attr(lab.topology.spec.planes),
    }
    return _Where(kwargs, f"{node} in lab {lab.name}"), lab


def _client_where(args: argparse.Namespace) -> _Where:
    """Resolve ``--to``/``--lab``/``--from``/``--bind`` of send and perf."""
    port = _port("--port", args.port)
    if args.lab is not None:
        if args.from_host is None:
            raise InvalidArgument("--from: give the lab host to send from (with --lab)")
        where, lab = _lab_where(args.lab, args.from_host, "--from", port or ROCE_PORT)
        from openmrc.net.lab import LabError

        try:
            dst = lab.host_node(args.to)
        except LabError as exc:
            raise InvalidArgument(f"--to: {exc}") from None
        if dst == lab.host_node(where.ep_kwargs["host"]):
            raise InvalidArgument(f"--to: {dst} is the host we send from (--from)")
        where.control = ControlAddress(path=str(lab_control_path(lab.name, dst)))
        where.label = f"{where.label} -> {dst}"
        return where
    if args.from_host is not None:
        raise InvalidArgument("--from: only with --lab (a lab host name)")
    to = _ipv6("--to", args.to)
    bind = _ipv6("--bind", args.bind) if args.bind else "::"
    kwargs = {"bind": bind, "port": port, "attr": driver_attr(args.planes)}
    control = ControlAddress(host=to, port=_port("--control-port", args.control_port))
    return _Where(kwargs, f"[{bind}] -> [{to}]", control)


def _print(*parts: object) -> None:
    print(*parts, flush=True)


# ----- serve ------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    """Expose a memory region; verify what clients write by SHA-256."""
    size = _positive("--size", args.size)
    port = _port("--port", args.port)
    if args.lab is not None:
        if args.host is None:
            raise InvalidArgument("--host: give the lab host to serve on (with --lab)")
        if args.bind is not None:
            raise InvalidArgument("--bind: not with --lab (the lab host decides the addresses)")
        where, lab = _lab_where(args.lab, args.host, "--host", port)
        node = lab.host_node(where.ep_kwargs["host"])
        control = ControlAddress(path=str(lab_control_path(lab.name, node)))
        if args.listen is not None:
            raise InvalidArgument("--listen: not with --lab (the control socket is a Unix socket)")
    else:
        if args.host is not None:
            raise InvalidArgument("--host: only with --lab (a lab host name)")
        listen = _ipv6("--listen", args.listen or "::1")
        bind = _ipv6("--bind", args.bind or listen)
        where = _Where({"bind": bind, "port": port, "attr": driver_attr(args.planes)}, f"[{bind}]")
        control = ControlAddress(host=listen, port=_port("--control-port", args.control_port))
    _positive("--max-sessions", args.max_sessions)
    _positive("--max-unauthenticated", args.max_unauthenticated)
    for flag, value in (
        ("--idle-timeout", args.idle_timeout),
        ("--handshake-timeout", args.handshake_timeout),
    ):
        if not 0 < value <= 86400:
            raise InvalidArgument(f"{flag}: must be 0 < S <= 86400 seconds, got {value:g}")
    secret = _server_secret(args)
    return run(_serve(args, where, control, size, secret))


def _server_secret(args: argparse.Namespace) -> bytes:
    """The control channel's secret: ``--token-file`` (created if missing) or the default."""
    path = args.token_file or default_token_path()
    try:
        return ensure_token(path)
    except (ControlError, OSError) as exc:
        raise InvalidArgument(f"--token-file: {exc}") from None


def _client_secret(args: argparse.Namespace) -> bytes:
    """The secret the server wrote (``--token-file``, default the server's default file)."""
    path = Path(args.token_file or default_token_path())
    # A server started just before may not have written it yet: wait like the
    # control connection does (--connect-timeout).
    deadline = time.monotonic() + max(args.connect_timeout, 0.0)
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        return load_token(path)
    except ControlError as exc:
        raise InvalidArgument(
            f"--token-file: {exc} (run 'openmrc serve' first, or copy its token file here)"
        ) from None


def _report_verify(r: VerifyResult) -> None:
    gbps = r.length * 8 / r.seconds / 1e9 if r.seconds > 0 else 0.0
    _print(
        f"transfer: {r.length} bytes, imm {r.imm}, {r.seconds:.3f} s since connect "
        f"({gbps:.3f} Gb/s)"
    )
    for line in format_ev_counts(r.rx_by_ev, r.tx_by_ev):
        _print(line)
    if r.ok:
        _print(f"hash OK (sha256 {r.sha256})")
    else:
        _print(f"hash MISMATCH: expected {r.expected}, region has {r.sha256}")


async def _serve(
    args: argparse.Namespace, where: _Where, control: ControlAddress, size: int, secret: bytes
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with NetEndpoint(**where.ep_kwargs, auth=args.auth) as ep:
        server = MemoryServer(
            ep,
            size,
            secret=secret,
            limits=ServerLimits(
                max_sessions=args.max_sessions,
                idle_timeout=args.idle_timeout,
                hello_timeout=args.handshake_timeout,
                max_unauthenticated=args.max_unauthenticated,
                max_unauthenticated_per_source=max(1, args.max_unauthenticated // 2),
            ),
            on_verify=_report_verify,
        )
        await server.listen(control)
        try:
            _print(
                f"openmrc serve: {where.label} data port {ep.port}, control {control}, "
                f"region {size} bytes per session, {ep.attr.ev_profile.planes} planes, "
                f"token {args.token_file or default_token_path()}"
                + (", every datagram authenticated (--auth)" if ep.auth else "")
            )
            while not stop.is_set():
                closed = asyncio.ensure_future(server.session_closed.wait())
                stopped = asyncio.ensure_future(stop.wait())
                await asyncio.wait({closed, stopped}, return_when=asyncio.FIRST_COMPLETED)
                closed.cancel()
                stopped.cancel()
                server.session_closed.clear()
                if args.once and server.sessions_done >= 1:
                    break
        finally:
            await server.close()
            remove_control_path(control)
        st = ep.stats()
        _print(
            f"openmrc serve: done: {server.sessions_done} sessions, {len(server.results)} "
            f"transfers verified ({sum(not r.ok for r in server.results)} failed); datagrams "
            f"rx {st['rx_datagrams']} tx {st['tx_datagrams']}"
            + (
                f"; refused: {st['rx_auth_failed']} failed authentication, "
                f"{st['rx_replayed']} replayed"
                if ep.auth
                else ""
            )
        )
        return 1 if any(not r.ok for r in server.results) else 0


# ----- send -----------------------------------------------------------------------------


def _cmd_send(args: argparse.Namespace) -> int:
    """WRITE a file to a server and have it verify the SHA-256."""
    where = _client_where(args)
    chunk = args.chunk
    if not MIN_CHUNK <= chunk <= MAX_CHUNK:
        raise InvalidArgument(
            f"--chunk: must be {format_size(MIN_CHUNK)}..{format_size(MAX_CHUNK)}, got {chunk}"
        )
    if not 0 <= args.seq < 1 << 32:
        raise InvalidArgument(f"--seq: must be a 32-bit unsigned int, got {args.seq}")
    try:
        with open(args.file, "rb") as f:
            data = bytearray(f.read())
    except OSError as exc:
        raise InvalidArgument(f"FILE: cannot read {args.file}: {exc.strerror}") from None
    secret = _client_secret(args)
    return run(_send(args, where, data, chunk, secret))


async def _send(
    args: argparse.Namespace, where: _Where, data: bytearray, chunk: int, secret: bytes
) -> int:
    length = len(data)
    digest = hashlib.sha256(data).hexdigest()
    assert where.control is not None
    async with NetEndpoint(**where.ep_kwargs, auth=args.auth) as ep:
        local = ep.reg_mr(data if length else bytearray(1))
        _print(
            f"openmrc send: {args.file} ({format_size(length)}, sha256 {digest[:16]}...) "
            f"{where.label}"
        )
        session = await Session.open(ep, where.control, secret=secret, timeout=args.connect_timeout)
        conn = session.conns[0]
        async with session:
            result = await write_buffer(session, local, length, imm=args.seq, chunk=chunk)
            try:
                # (after a failed WRITE the server is asked briefly: it may be gone)
                wait = args.timeout if result.ok else min(args.timeout, DEAD_VERIFY_S)
                verdict = await session.verify(args.seq, length, digest, timeout=wait)
            except ControlError as exc:
                if result.ok:
                    raise
                why = f" ({conn.qp.error_reason})" if conn.qp.error_reason else ""
                raise ControlError(
                    f"data path: {result.failed[0]}{why}; then the server did not answer: {exc}"
                ) from None
        for line in _send_lines(conn, length, result, args.seq, verbose=args.verbose):
            _print(line)
        stats = ep.stats()
        if stats["tx_errors"]:
            _print(f"  send errors: {stats['tx_errors']} ({stats['last_tx_error']})")
        ok = result.ok and bool(verdict.get("ok"))
        for failure in result.failed:
            _print(f"  FAILED: {failure}")
        if verdict.get("ok"):
            _print("  server: hash OK")
        elif not verdict.get("arrived"):
            _print("  server: the final WRITE_WITH_IMM never arrived")
        else:
            _print(f"  server: hash MISMATCH (server has {verdict.get('sha256')})")
        return 0 if ok else 1


def _send_lines(conn: Any, length: int, result: Any, seq: int, *, verbose: bool) -> list[str]:
    """What ``send`` prints after the transfer: a few lines, per plane and per EV with -v.

    Every count says what it counts: packets resent against the events that
    declared packets lost (a timeout or a detected loss marks a packet lost; it is
    resent only if no ACK covers it first), and the EVs of the profile (active)
    apart from those that carried datagrams before they left it.
    """
    st = conn.qp.stats
    lines = [
        f"  wrote {format_size(length)} in {plural(result.writes, 'WRITE')} (the last a "
        f"WRITE_WITH_IMM, imm {seq}) in {result.seconds:.3f} s: "
        f"{result.goodput_bps / 1e9:.3f} Gb/s",
        f"  data packets {st.tx_data_packets:,}, resent {st.retransmits:,} "
        f"(of {st.losses_detected + st.timeouts:,} declared lost: {st.losses_detected:,} by "
        f"SACK/RACK, {st.timeouts:,} by timeout; {st.spurious_retransmits:,} resent needlessly), "
        f"trimmed {st.trims:,}, probes {st.probes_sent:,}, SACKs {st.rx_sacks:,}, "
        f"NACKs {st.rx_nacks:,}",
    ]
    counts = conn.qp.paths.counts() if conn.qp.paths else {}
    rows = conn.ev_table()
    active = sum(counts.values())
    retired = sum(1 for r in rows if not r["active"])
    lines.append(
        f"  paths: {plural(active, 'active EV')}: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + (f"; {retired} more carried datagrams before they left the profile" if retired else "")
    )
    if not verbose:
        return lines
    lines.append("  per plane (datagrams tx/rx, active EVs by state):")
    for plane, row in conn.plane_table().items():
        lines.append(
            f"    plane {plane}: tx {row['tx']:>7} rx {row['rx']:>7}  GOOD {row['GOOD']} "
            f"SKIP {row['SKIP']} ASSUMED_BAD {row['ASSUMED_BAD']} DENIED {row['DENIED']}"
        )
    lines.append(
        f"  per EV ({plural(len(rows), 'EV')}: {active} active, {retired} no longer; "
        "ev plane/path state tx/rx, * not active):"
    )
    cells = [
        f"{r['ev']:#07x} {r['plane']}/{r['path']:<3} {r['state'][:4]:<4}"
        f"{' ' if r['active'] else '*'}{r['tx']:>5}/{r['rx']:<5}"
        for r in rows
    ]
    for i in range(0, len(cells), 3):
        lines.append("    " + "   ".join(cells[i : i + 3]))
    return lines


# ----- perf -----------------------------------------------------------------------------


def _cmd_perf(args: argparse.Namespace) -> int:
    """write_bw / write_lat style measurements against a server."""
    where = _client_where(args)
    if args.size is None:
        args.size = 65536 if args.mode == "bw" else 2
    _positive("--size", args.size)
    _positive("--iters", args.iters)
    if not 1 <= args.qps <= 256:
        raise InvalidArgument(f"--qps: must be 1..256, got {args.qps}")
    _positive("--tx-depth", args.tx_depth)
    if args.duration is not None and not 0 < args.duration <= 86400:
        raise InvalidArgument(f"-D/--duration: must be 0..86400 seconds, got {args.duration}")
    if args.interval is not None and not 0 < args.interval <= 3600:
        raise InvalidArgument(f"-i/--interval: must be 0..3600 seconds, got {args.interval}")
    if args.bidir and args.mode != "bw":
        raise InvalidArgument("--bidir: only with --mode bw")
    if args.all_sizes and args.mode != "bw":
        raise InvalidArgument("-a/--all: only with --mode bw")
    secret = _client_secret(args)
    return run(_perf(args, where, secret))


#: ``-a``: message sizes swept (perftest's 2 B .. 8 MiB, powers of two).
SWEEP_SIZES = [1 << k for k in range(1, 24)]


def _percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return 0.0
    k = min(len(sorted_vals) - 1, max(0, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[k]


async def _perf(args: argparse.Namespace, where: _Where, secret: bytes) -> int:
    assert where.control is not None
    sizes = SWEEP_SIZES if args.all_sizes else [args.size]
    biggest = max(sizes)
    async with NetEndpoint(**where.ep_kwargs, auth=args.auth) as ep:
        local = ep.reg_mr(bytearray(os.urandom(biggest)))
        mode = "write" if args.mode == "bw" else "pingpong"
        if args.bidir:
            mode = "bidir"
        session = await Session.open(
            ep,
            where.control,
            secret=secret,
            qps=args.qps,
            mode=mode,
            local=local,
            timeout=args.connect_timeout,
        )
        report: dict[str, Any] = {
            "mode": args.mode,
            "where": where.label,
            "qps": args.qps,
            "bidir": bool(args.bidir),
            "results": [],
        }
        async with session:
            sizes = [n for n in sizes if n <= session.remote.length]
            if not sizes:
                raise InvalidArgument(
                    f"--size: {args.size} bytes exceed the server's region ({session.remote.length})"
                )
            if not args.json:
                _print(
                    f"openmrc perf: {args.mode} {where.label}, {plural(args.qps, 'QP')}, "
                    f"{'sizes ' + str(sizes[0]) + '..' + str(sizes[-1]) if args.all_sizes else str(sizes[0]) + ' B messages'}"
                    f"{', bidirectional' if args.bidir else ''}"
                )
            ok = True
            if args.mode == "bw":
                if not args.json and not args.interval:
                    _bw_header()
                for size in sizes:
                    if not args.json and args.interval:
                        _interval_header(size)
                    row = await _perf_bw(session, local, size, args)
                    report["results"].append(row)
                    ok = ok and row["failures"] == 0
                    if not args.json:
                        if args.interval:
                            _bw_header()  # the whole run's line, under its own header
                        _bw_row(row)
                if not args.json:
                    _print("-" * 86)
            else:
                lat = await _perf_lat(session, local, args)
                ok = lat is not None
                if lat is not None:
                    report["results"].append(lat)
            if args.bidir:
                report["server_tx"] = await session.perf_stats()
            retx = sum(c.qp.stats.retransmits for c in session.conns)
            report["retransmissions"] = retx
            report["ok"] = ok
            if args.json:
                print(json.dumps(report, indent=1), flush=True)
            else:
                if args.bidir:
                    st = report["server_tx"]
                    _print(
                        f" server -> client: {st['bytes']} bytes in {st['seconds']:.3f} s, "
                        f"{st['gbps']:.3f} Gb/s ({st['failures']} failed WRITEs)"
                    )
                _print(f" retransmissions: {retx}")
        return 0 if ok else 1


def _bw_header() -> None:
    _print("-" * 86)
    _print(
        f" {'#bytes':<10} {'#iterations':<12} {'BW peak[Gb/sec]':<18} "
        f"{'BW average[Gb/sec]':<20} {'MsgRate[Mpps]':<14}"
    )


#: ``-i``: the columns of an interval line (:func:`_interval_row`), iperf3-like.
_INTERVAL_COLUMNS = f" {'Interval[sec]':<19} {'Transfer[bytes]':>15} {'BW[Gb/sec]':>12}"


def _interval_header(size: int) -> None:
    _print("-" * 86)
    _print(f" {size}-byte WRITEs, one line per interval:")
    _print(_INTERVAL_COLUMNS)


def _interval_row(item: dict[str, float]) -> str:
    """One ``-i`` line, under :data:`_INTERVAL_COLUMNS`."""
    span = f"{item['start']:.2f}-{item['end']:.2f}"
    return f" {span:<19} {int(item['bytes']):>15} {item['gbps']:>12.3f}"


def _bw_row(row: dict[str, Any]) -> None:
    _print(
        f" {row['bytes']:<10} {row['iterations']:<12} {row['bw_peak_gbps']:<18.3f} "
        f"{row['bw_avg_gbps']:<20.3f} {row['msg_rate_mpps']:<14.6f}"
    )


async def _perf_bw(
    session: Session, local: Any, size: int, args: argparse.Namespace
) -> dict[str, Any]:
    """WRITE ``size``-byte messages (``--iters`` of them, or for ``-D`` seconds).

    With ``-i`` a line per interval (or a JSON ``intervals`` list) reports the
    bytes completed in it.
    """
    conns = session.conns
    done_times: list[float] = []
    failures = 0
    duration = args.duration
    iters = args.iters
    t0 = time.perf_counter()
    stop_at = t0 + duration if duration is not None else None
    intervals: list[dict[str, float]] = []

    async def drive(q: int, count: int | None) -> None:
        nonlocal failures
        conn = conns[q]
        pending: list[int] = []
        n = 0
        while (count is None or n < count) and (stop_at is None or time.perf_counter() < stop_at):
            if len(pending) >= args.tx_depth:
                wc = await conn.wait_send(pending.pop(0))
                failures += not wc.ok
                done_times.append(time.perf_counter())
            pending.append(conn.post_write(local, 0, size, session.remote, 0))
            n += 1
        for wr in pending:
            wc = await conn.wait_send(wr)
            failures += not wc.ok
            done_times.append(time.perf_counter())

    async def reporter() -> None:
        assert args.interval is not None
        start, seen = t0, 0
        while True:
            await asyncio.sleep(args.interval)
            now, count = time.perf_counter(), len(done_times)
            gbps = (count - seen) * size * 8 / (now - start) / 1e9
            item = {"start": start - t0, "end": now - t0, "bytes": (count - seen) * size,
                    "gbps": gbps}  # fmt: skip
            intervals.append(item)
            if not args.json:
                _print(_interval_row(item))
            start, seen = now, count

    if duration is not None:
        share: list[int | None] = [None] * len(conns)
    else:
        share = [iters // len(conns) + (q < iters % len(conns)) for q in range(len(conns))]
    rep = asyncio.create_task(reporter()) if args.interval else None
    try:
        await asyncio.gather(*(drive(q, n) for q, n in enumerate(share) if n is None or n))
    finally:
        if rep is not None:
            rep.cancel()
    dt = time.perf_counter() - t0
    count = len(done_times)
    done_times.sort()
    k = max(1, count // 10)
    peak = 0.0
    for i in range(len(done_times) - k):
        span = done_times[i + k] - done_times[i]
        if span > 0:
            peak = max(peak, k * size * 8 / span / 1e9)
    avg = count * size * 8 / dt / 1e9 if dt > 0 else 0.0
    row: dict[str, Any] = {
        "bytes": size,
        "iterations": count,
        "seconds": dt,
        "bw_peak_gbps": max(peak, avg),
        "bw_avg_gbps": avg,
        "msg_rate_mpps": count / dt / 1e6 if dt > 0 else 0.0,
        "failures": failures,
    }
    if args.interval:
        row["intervals"] = intervals
    if failures and not args.json:
        _print(f" FAILED: {failures} WRITEs completed with an error")
    return row


async def _perf_lat(
    session: Session, local: Any, args: argparse.Namespace
) -> dict[str, Any] | None:
    size, iters = args.size, args.iters
    conn = session.conns[0]
    warmup = min(10, iters)
    samples: list[float] = []
    for i in range(warmup + iters):
        conn.post_recv(i)
        t = time.perf_counter()
        wr = conn.post_write(local, 0, size, session.remote, 0, imm=i & 0xFFFFFFFF)
        back = await asyncio.wait_for(conn.wait_recv(), args.timeout)
        rtt = time.perf_counter() - t
        wc = await conn.wait_send(wr)
        if not wc.ok or not back.ok or back.imm_data != i & 0xFFFFFFFF:
            _print(f" FAILED at iteration {i}: {wc.status.value} / {back.status.value}")
            return None
        if i >= warmup:
            samples.append(rtt / 2 * 1e6)
    s = sorted(samples)
    avg = sum(s) / len(s)
    stdev = math.sqrt(sum((x - avg) ** 2 for x in s) / len(s))
    row = {
        "bytes": size,
        "iterations": iters,
        "t_min_us": s[0],
        "t_max_us": s[-1],
        "t_typical_us": _percentile(s, 0.5),
        "t_avg_us": avg,
        "t_stdev_us": stdev,
        "p99_us": _percentile(s, 0.99),
        "p999_us": _percentile(s, 0.999),
    }
    if args.json:
        return row
    _print("-" * 118)
    _print(
        f" {'#bytes':<8} {'#iterations':<12} {'t_min[usec]':<12} {'t_max[usec]':<12} "
        f"{'t_typical[usec]':<16} {'t_avg[usec]':<12} {'t_stdev[usec]':<14} "
        f"{'99% percentile[usec]':<21} {'99.9% percentile[usec]':<22}"
    )
    _print(
        f" {size:<8} {iters:<12} {s[0]:<12.2f} {s[-1]:<12.2f} {_percentile(s, 0.5):<16.2f} "
        f"{avg:<12.2f} {stdev:<14.2f} {_percentile(s, 0.99):<21.2f} {_percentile(s, 0.999):<22.2f}"
    )
    _print("-" * 118)
    return row


# ----- wireshark --------------------------------------------------------------------------


def personal_plugins_dir() -> Path:
    """Wireshark's personal Lua plugins folder on Linux (``~/.local/lib/wireshark/plugins``)."""
    return Path.home() / ".local" / "lib" / "wireshark" / "plugins"


def _cmd_wireshark(args: argparse.Namespace) -> int:
    """Print the dissector's path, or install it into the personal plugins folder."""
    src = dissector_path()
    if not args.install:
        _print(str(src))
        _print(f"use: {tshark_hint()}   (or openmrc wireshark --install)")
        _print("(the zero UDP checksum is deliberate: switches rewrite the address it covers)")
        return 0
    dest_dir = Path(args.dir) if args.dir else personal_plugins_dir()
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / src.name
        dest.write_bytes(src.read_bytes())
    except OSError as exc:
        raise InvalidArgument(f"--dir: cannot write to {dest_dir}: {exc.strerror}") from None
    _print(f"installed {dest} (Wireshark and tshark load it at start)")
    return 0


# ----- registration -----------------------------------------------------------------------


def _guard(fn: _Handler) -> _Handler:
    """Turn connection failures into exit code 1 with a message (usage errors propagate)."""

    def handler(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (ConnectionError, TimeoutError, OSError) as exc:
            print(f"openmrc {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130

    handler.__doc__ = fn.__doc__
    return handler


def _common(p: argparse.ArgumentParser, *, server: bool) -> None:
    p.add_argument("--lab", metavar="NAME", help="run as a host of this namespace lab")
    if server:
        p.add_argument("--host", metavar="H", help="lab host to serve on (with --lab), e.g. h1")
        p.add_argument(
            "--listen",
            metavar="ADDR",
            help="IPv6 address of the TCP control channel (default ::1: loopback only)",
        )
        p.add_argument(
            "--bind", metavar="ADDR", help="IPv6 address of the UDP data socket (default: --listen)"
        )
        p.add_argument(
            "--max-sessions", type=int, default=4, help="concurrent client sessions (default 4)"
        )
        p.add_argument(
            "--idle-timeout",
            type=float,
            default=120.0,
            metavar="S",
            help="end a session with no control message and no data for S seconds (120)",
        )
        p.add_argument(
            "--handshake-timeout",
            type=float,
            default=10.0,
            metavar="S",
            help="seconds a new control connection has to authenticate (10)",
        )
        p.add_argument(
            "--max-unauthenticated",
            type=int,
            default=256,
            metavar="N",
            help="control connections not yet authenticated; more evict the oldest (256)",
        )
    else:
        p.add_argument("--to", required=True, metavar="HOST", help="lab host (h1) or IPv6 address")
        p.add_argument("--from", dest="from_host", metavar="H", help="lab host to send from")
        p.add_argument("--bind", metavar="ADDR", help="local IPv6 address (default ::)")
        p.add_argument(
            "--connect-timeout",
            type=float,
            default=10.0,
            metavar="S",
            help="keep trying the control channel this long (default 10 s)",
        )
    p.add_argument(
        "--port",
        type=int,
        default=ROCE_PORT if server else 0,
        help=f"UDP data port (default {ROCE_PORT if server else 'any; the server learns it'})",
    )
    p.add_argument(
        "--control-port",
        type=int,
        default=CONTROL_PORT,
        help=f"TCP control port for plain IPv6 peers (default {CONTROL_PORT})",
    )
    p.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"the control channel's shared secret (default {default_token_path()}; "
        + ("'serve' creates it, mode 0600, if missing)" if server else "written by 'serve')"),
    )
    p.add_argument(
        "--planes", type=int, default=8, help="EV planes without a lab (default 8; lab: its planes)"
    )
    p.add_argument(
        "--auth",
        action="store_true",
        help="authenticate every MRC datagram with a per-session key (AES-GCM tag; "
        "client and server must both use it; docs/security.md)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``serve``, ``send`` and ``perf``; each sets ``func`` returning an exit code."""
    p = subparsers.add_parser(
        "serve",
        help="MRC responder on real sockets: expose memory, verify transfers by SHA-256",
        description="Expose a memory region to MRC WRITEs over UDP/IPv6 and verify, by "
        "SHA-256, what 'openmrc send' announces.  Prints per-plane and per-EV statistics "
        "after every transfer.",
    )
    _common(p, server=True)
    p.add_argument("--size", type=parse_size, default=256 << 20, help="region size (default 256M)")
    p.add_argument("--once", action="store_true", help="exit after the first client session")
    p.set_defaults(func=_guard(_cmd_serve))

    p = subparsers.add_parser(
        "send",
        help="WRITE a file to 'openmrc serve' over MRC and verify its SHA-256",
        description="WRITE FILE to a server as several RDMA WRITEs (the last a "
        "WRITE_WITH_IMM carrying --seq), then have the server verify the SHA-256.",
    )
    p.add_argument("file", metavar="FILE")
    _common(p, server=False)
    p.add_argument("--chunk", type=parse_size, default=1 << 20, help="bytes per WRITE (1M)")
    p.add_argument("--seq", type=int, default=1, help="immediate of the last WRITE (1)")
    p.add_argument("--timeout", type=float, default=60.0, help="verification timeout (60 s)")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="also print per-plane and per-EV counters"
    )
    p.set_defaults(func=_guard(_cmd_send))

    p = subparsers.add_parser(
        "perf",
        help="write_bw / write_lat style benchmark against 'openmrc serve'",
        description="Measure WRITE bandwidth (--mode bw) or half round-trip latency of "
        "WRITE_WITH_IMM ping-pong (--mode lat) against a server.",
    )
    _common(p, server=False)
    p.add_argument("--mode", choices=("bw", "lat"), default="bw")
    p.add_argument("--size", type=parse_size, help="message bytes (bw 65536, lat 2)")
    p.add_argument("--iters", type=int, default=1000, help="iterations (1000)")
    p.add_argument("--qps", type=int, default=1, help="QPs (bw mode spreads over them)")
    p.add_argument("--tx-depth", type=int, default=32, help="WRITEs in flight per QP (32)")
    p.add_argument("--timeout", type=float, default=10.0, help="per-iteration timeout (lat)")
    p.add_argument(
        "-D", "--duration", type=float, metavar="S", help="bw: run S seconds (not --iters)"
    )
    p.add_argument("-i", "--interval", type=float, metavar="S", help="bw: report every S seconds")
    p.add_argument("-J", "--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--bidir", action="store_true", help="bw: the server WRITEs back at the same time"
    )
    p.add_argument(
        "-a", "--all", dest="all_sizes", action="store_true",
        help="bw: sweep message sizes 2 B .. 8 MiB (powers of two, up to the region)",
    )  # fmt: skip
    p.set_defaults(func=_guard(_cmd_perf))

    p = subparsers.add_parser(
        "wireshark",
        help="the Wireshark Lua dissector for openmrc's MRC headers: path or --install",
        description="Print the path of openmrc's Wireshark dissector (use it with tshark "
        "-X lua_script:PATH), or --install it into the personal Lua plugins folder.",
    )
    p.add_argument("--install", action="store_true", help="copy it to the plugins folder")
    p.add_argument(
        "--dir", metavar="DIR", help="plugins folder (default ~/.local/lib/wireshark/plugins)"
    )
    p.set_defaults(func=_guard(_cmd_wireshark))
