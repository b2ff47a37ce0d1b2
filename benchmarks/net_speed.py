"""Goodput of one MRC connection on real sockets, against a plain UDP blast.

Prints one JSON object:

* ``loopback``: over ``::1``: ``mrc`` (``openmrc serve`` in a subprocess, the
  client here: one QP WRITEs ``--size`` bytes in 1 MiB WRITEs) and ``udp_blast``
  (the same number of datagrams of the same size -- an MRC data packet with a
  4096-byte payload -- sent as fast as a blocking no-checksum socket goes, to a
  subprocess draining a non-blocking socket with ``recv_into`` from
  ``loop.add_reader``, like the driver);
* ``lab`` (root only): the same two over a 4-plane namespace SRv6 lab
  (``planes=4,t0s=2,hosts_per_t0=1,t1s=2``), h0 -> h1; the blast sprays its
  datagrams over the same SRv6 path addresses (the EVs of a driver EV set)
  with the EV in the source port and flow label;
* ``cpu``: model, cores, Python, uvloop and kernel versions.

Usage: ``python benchmarks/net_speed.py [--size 64M] [--no-lab] [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from openmrc.net.control import ControlAddress, ensure_token, lab_control_path
from openmrc.net.driver import NetEndpoint, driver_attr, run, set_bufsize
from openmrc.net.service import Session, write_buffer
from openmrc.net.sockets import UDP_NO_CHECK6_RX, UDP_NO_CHECK6_TX, send_flow_labels
from openmrc.transport.ev import make_ev
from openmrc.wire.codec import udp_sport

#: The control channel's secret for this run (the server and the client share it).
TOKEN = Path(os.environ.get("TMPDIR", "/tmp")) / f"openmrc-bench-token-{os.getpid()}"

#: UDP payload of an MRC data packet with 4096 payload bytes (BTH+RETH+MDH+ICRC).
DATAGRAM = 4096 + 12 + 16 + 24 + 4
LAB_SPEC = "planes=4,t0s=2,hosts_per_t0=1,t1s=2"
HERE = Path(__file__).resolve()


def cpu_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        import uvloop

        uv = uvloop.__version__
    except ImportError:
        uv = None
    return {
        "model": model or platform.processor(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "uvloop": uv,
        "kernel": platform.release(),
    }


# ----- UDP blast ------------------------------------------------------------------------


def blast_receive(bind: str, port: int, expect: int, idle: float) -> dict[str, Any]:
    """Drain a no-checksum socket until ``expect`` datagrams or ``idle`` s of silence."""

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
        set_bufsize(sock, 32 << 20)
        sock.bind((bind, port))
        sock.setblocking(False)
        buf = bytearray(65536)
        st = {"packets": 0, "bytes": 0, "first": 0.0, "last": 0.0}
        done = asyncio.Event()

        def readable() -> None:
            n_pk = st["packets"]
            nb = 0
            while True:
                try:
                    n = sock.recv_into(buf)
                except BlockingIOError:
                    break
                n_pk += 1
                nb += n
            if n_pk != st["packets"]:
                now = time.perf_counter()
                if not st["first"]:
                    st["first"] = now
                st["last"] = now
                st["packets"] = n_pk
                st["bytes"] += nb
                if n_pk >= expect:
                    done.set()

        loop.add_reader(sock.fileno(), readable)
        print("ready", flush=True)
        while not done.is_set():
            before = st["packets"]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), idle)
            if st["packets"] == before and before > 0:
                break
        loop.remove_reader(sock.fileno())
        sock.close()
        return st

    return run(main())


def _blast_send(sock: socket.socket, dests: list[tuple[str, int, int, int]], count: int) -> float:
    payload = os.urandom(DATAGRAM)
    sendto = sock.sendto
    n = len(dests)
    t0 = time.perf_counter()
    for i in range(count):
        sendto(payload, dests[i % n])
    return time.perf_counter() - t0


def _blast_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_TX, 1)
    send_flow_labels(s)  # (as the driver's send sockets)
    set_bufsize(s, 32 << 20)
    s.bind(("::", udp_sport(0)))
    return s


def udp_blast(
    count: int,
    dests: list[tuple[str, int, int, int]],
    recv_argv_prefix: list[str],
    bind: str,
    port: int,
    send_netns: str | None,
) -> dict[str, Any]:
    """Blast ``count`` datagrams over ``dests`` to a receiver subprocess; rates of both ends."""
    recv = subprocess.Popen(
        [*recv_argv_prefix, sys.executable, str(HERE), "--blast-receive", "--bind", bind,
         "--port", str(port), "--expect", str(count)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert recv.stdout is not None
        recv.stdout.readline()  # "ready"
        if send_netns is not None:
            from openmrc.net.netns import call_in_netns

            sock = call_in_netns(send_netns, _blast_socket)
        else:
            sock = _blast_socket()
        with sock:
            seconds = _blast_send(sock, dests, count)
        out, _ = recv.communicate(timeout=60)
    finally:
        recv.kill()
    got = json.loads(out.strip().splitlines()[-1])
    span = max(got["last"] - got["first"], 1e-9)
    return {
        "datagram_bytes": DATAGRAM,
        "sent": count,
        "send_pps": round(count / seconds),
        "send_gbps": round(count * DATAGRAM * 8 / seconds / 1e9, 3),
        "received": got["packets"],
        "recv_pps": round(got["packets"] / span),
        "recv_gbps": round(got["bytes"] * 8 / span / 1e9, 3),
    }


# ----- MRC ------------------------------------------------------------------------------


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET6, kind) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


async def _mrc_client(ep_kwargs: dict[str, Any], ctl: ControlAddress, size: int) -> dict[str, Any]:
    data = bytearray(os.urandom(size))
    digest = hashlib.sha256(data).hexdigest()
    async with NetEndpoint(**ep_kwargs) as ep:
        local = ep.reg_mr(data)
        secret = ensure_token(TOKEN)
        async with await Session.open(ep, ctl, secret=secret, timeout=20) as session:
            res = await write_buffer(session, local, size, imm=1)
            verdict = await session.verify(1, size, digest)
            st = session.conns[0].qp.stats
            return {
                "bytes": size,
                "seconds": round(res.seconds, 3),
                "goodput_gbps": round(res.goodput_bps / 1e9, 3),
                "data_pps": round(st.tx_data_packets / res.seconds),
                "datagrams_sent": ep.counters.tx_datagrams,
                "datagrams_received": ep.counters.rx_datagrams,
                "retransmits": st.retransmits,
                "hash_ok": bool(verdict["ok"]) and res.ok,
            }


def mrc_run(
    serve_argv: list[str], ep_kwargs: dict[str, Any], ctl: ControlAddress, size: int
) -> dict[str, Any]:
    """One MRC transfer: ``openmrc serve`` in a subprocess, this process the client."""
    serve_argv = [*serve_argv, "--token-file", str(TOKEN)]
    server = subprocess.Popen(serve_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return run(_mrc_client(ep_kwargs, ctl, size))
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
        server.kill()


def _best(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    best = max(runs, key=lambda r: r[key])
    return {**best, "runs": [r[key] for r in runs]}


def bench_loopback(size: int, runs: int) -> dict[str, Any]:
    """MRC and the UDP blast over ::1."""
    cli = [sys.executable, "-m", "openmrc.cli"]
    mrc = []
    for _ in range(runs):
        port, cport = _free_port(socket.SOCK_DGRAM), _free_port(socket.SOCK_STREAM)
        serve = [*cli, "serve", "--bind", "::1", "--port", str(port), "--control-port",
                 str(cport), "--once", "--size", str(size)]  # fmt: skip
        ctl = ControlAddress(host="::1", port=cport)
        mrc.append(mrc_run(serve, {"bind": "::1", "port": 0}, ctl, size))
    count = size // 4096
    blast = []
    for _ in range(runs):
        port = _free_port(socket.SOCK_DGRAM)
        blast.append(udp_blast(count, [("::1", port, 0, 0)], [], "::1", port, None))
    return {"mrc": _best(mrc, "goodput_gbps"), "udp_blast": _best(blast, "recv_gbps")}


def bench_auth_cost(size: int, runs: int) -> dict[str, Any]:
    """MRC over ::1 without and with ``--auth``, paired (A B A B ...), ``runs`` of each."""
    cli = [sys.executable, "-m", "openmrc.cli"]
    out: dict[str, list[dict[str, Any]]] = {"plain": [], "auth": []}
    for _ in range(runs):
        for mode in ("plain", "auth"):
            auth = mode == "auth"
            port, cport = _free_port(socket.SOCK_DGRAM), _free_port(socket.SOCK_STREAM)
            serve = [*cli, "serve", "--bind", "::1", "--port", str(port), "--control-port",
                     str(cport), "--once", "--size", str(size), *(["--auth"] if auth else [])]  # fmt: skip
            ctl = ControlAddress(host="::1", port=cport)
            out[mode].append(mrc_run(serve, {"bind": "::1", "port": 0, "auth": auth}, ctl, size))
    pairs = [
        round(b["goodput_gbps"] / a["goodput_gbps"], 3)
        for a, b in zip(out["plain"], out["auth"], strict=True)
    ]
    return {
        "plain": _best(out["plain"], "goodput_gbps"),
        "auth": _best(out["auth"], "goodput_gbps"),
        "auth_over_plain_per_pair": pairs,
        "all_hash_ok": all(r["hash_ok"] for r in out["plain"] + out["auth"]),
    }


def bench_lab(size: int, runs: int) -> dict[str, Any]:
    """MRC and the UDP blast h0 -> h1 over a 4-plane namespace lab."""
    from openmrc.net.lab import Lab, down_lab

    name = f"bench{os.getpid()}"
    lab = Lab.up(LAB_SPEC, name)
    try:
        planes = lab.topology.spec.planes
        cli = [sys.executable, "-m", "openmrc.cli"]
        serve = [*cli, "serve", "--lab", name, "--host", "h1", "--once", "--size", str(size)]
        ep_kwargs = {"netns": lab.host_netns(0), "lab": lab, "host": 0,
                     "attr": driver_attr(planes)}  # fmt: skip
        ctl = ControlAddress(path=str(lab_control_path(name, "h1")))
        mrc = [mrc_run(serve, ep_kwargs, ctl, size) for _ in range(runs)]
        # The blast sprays over the path addresses of 16 EVs per plane, as MRC does.
        evs = [make_ev(p, path) for path in range(16) for p in range(planes)]
        dests = [(lab.path_address(0, 1, ev), 4791, ev & 0xFFFFF, 0) for ev in evs]
        prefix = ["ip", "netns", "exec", lab.host_netns(1)]
        count = size // 4096
        blast = [
            udp_blast(count, dests, prefix, "::", 4791, lab.host_netns(0)) for _ in range(runs)
        ]
        return {
            "spec": LAB_SPEC,
            "mrc": _best(mrc, "goodput_gbps"),
            "udp_blast": _best(blast, "recv_gbps"),
        }
    finally:
        down_lab(name)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks (or, with ``--blast-receive``, be the blast's receiver)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="64M", help="bytes per transfer (64M)")
    p.add_argument("--runs", type=int, default=3, help="runs of each (best is reported)")
    p.add_argument("--no-lab", action="store_true", help="skip the namespace lab")
    p.add_argument(
        "--auth-cost",
        action="store_true",
        help="only MRC over ::1 without and with --auth, paired A B A B (--runs pairs)",
    )
    p.add_argument("--blast-receive", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bind", default="::1", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--expect", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.blast_receive:
        print(json.dumps(blast_receive(args.bind, args.port, args.expect, 1.0)), flush=True)
        return 0
    from openmrc.cli.net import parse_size

    size = parse_size(args.size)
    report: dict[str, Any] = {"cpu": cpu_info(), "size": size}
    if args.auth_cost:
        report["auth_cost"] = bench_auth_cost(size, args.runs)
        print(json.dumps(report, indent=1))
        return 0
    report["loopback"] = bench_loopback(size, args.runs)
    if args.no_lab:
        report["lab"] = "skipped (--no-lab)"
    elif os.geteuid() != 0:
        report["lab"] = "skipped (needs root)"
    else:
        try:
            report["lab"] = bench_lab(size, args.runs)
        except Exception as exc:  # the lab may not build here (no SRv6, no ip)
            report["lab"] = f"skipped: {type(exc).__name__}: {exc}"
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
