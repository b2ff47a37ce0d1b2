"""The network-namespace SRv6 uSID lab: delivery on every path, faults, cleanup, CLI.

Tests marked ``lab`` build real namespaces (root only; see conftest.py).  The
others check the pure parts (spec parsing, naming, command generation).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from openmrc.cli import lab as lab_cli
from openmrc.net import netns as nsmod
from openmrc.net.lab import (
    Lab,
    LabError,
    LabPlan,
    arrival_address,
    down_lab,
    ns_prefix,
    parse_spec,
    state_path,
)
from openmrc.net.sockets import UDP_NO_CHECK6_RX, UDP_NO_CHECK6_TX, udp_socket_nocheck
from openmrc.topology import ClosSpec, Topology, format_address, shift_address
from openmrc.transport.ev import make_ev
from tests.tools import needs_tool

PORT = 4791
SPEC2 = "planes=2,t0s=2,hosts_per_t0=1,t1s=2"

MakeLab = Callable[..., Lab]


# ----- helpers ----------------------------------------------------------------------


def _drain(sock: socket.socket, counts: dict[str, int], sources: dict[str, set[str]]) -> None:
    while True:
        try:
            data, addr = sock.recvfrom(2048)
        except BlockingIOError:
            return
        label = data.decode()
        counts[label] = counts.get(label, 0) + 1
        sources.setdefault(label, set()).add(addr[0])


def exchange(
    lab: Lab,
    paths: dict[str, str],
    n: int = 10,
    *,
    settle: float = 2.0,
    tx_sock: socket.socket | None = None,
    rx_sock: socket.socket | None = None,
) -> tuple[dict[str, int], dict[str, set[str]]]:
    """Send ``n`` datagrams h0 -> h1 to every path address; count arrivals per label.

    Waits up to ``settle`` seconds for stragglers (it returns as soon as every label has
    ``n``): generous, so that a busy machine does not turn late datagrams into losses.
    """
    rx = rx_sock or lab.udp_socket(1, PORT, blocking=False)
    tx = tx_sock or lab.udp_socket(0, 0)
    counts = dict.fromkeys(paths, 0)
    sources: dict[str, set[str]] = {}
    try:
        for label, addr in paths.items():
            for _ in range(n):
                tx.sendto(label.encode(), (addr, PORT))
                _drain(rx, counts, sources)
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            _drain(rx, counts, sources)
            if all(v >= n for v in counts.values()):
                break
            time.sleep(0.01)
    finally:
        if rx_sock is None:
            rx.close()
        if tx_sock is None:
            tx.close()
    return counts, sources


def all_paths(lab: Lab) -> dict[str, str]:
    """Every h0 -> h1 path address, labelled ``p<plane>k<t1>``."""
    spec = lab.topology.spec
    return {
        f"p{p}k{k}": lab.path_address(0, 1, make_ev(p, k))
        for p in range(spec.planes)
        for k in range(spec.t1s)
    }


# ----- pure parts (no root) -------------------------------------------------------------


def test_parse_spec_compact_and_files(tmp_path: Path) -> None:
    spec = parse_spec("planes=4, t0s=2,hosts_per_t0=1,t1s=2,host_gbps=200")
    assert (spec.planes, spec.t0s, spec.hosts_per_t0, spec.t1s) == (4, 2, 1, 2)
    assert spec.host_gbps == 200.0
    j = tmp_path / "t.json"
    j.write_text(json.dumps({"planes": 2, "t0s": 3, "hosts_per_t0": 2, "t1s": 1}))
    assert parse_spec(str(j)) == ClosSpec(planes=2, t0s=3, hosts_per_t0=2, t1s=1)
    t = tmp_path / "t.toml"
    t.write_text("[spec]\nplanes = 3\nt0s = 2\nhosts_per_t0 = 1\nt1s = 4\n")
    assert parse_spec(str(t)) == ClosSpec(planes=3, t0s=2, hosts_per_t0=1, t1s=4)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("planes=x", "planes"),
        ("plnes=2", "plnes"),
        ("planes=2,t1s=0", "t1s"),
        ("planes=2,t0s", "t0s"),
        ("planes=2,host_gbps=fast", "host_gbps"),
    ],
)
def test_parse_spec_errors_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_spec(text)


def test_plan_names_and_commands() -> None:
    plan = LabPlan(parse_spec(SPEC2), "x")
    assert plan.netns("h0") == "omrc-x-h0"
    assert all(ns.startswith("omrc-x-") for ns in plan.namespaces)
    ifnames = {e.ifname for lk in plan.links.values() for e in (lk.a, lk.b)}
    assert all(len(i) <= 15 for i in ifnames)
    assert len(plan.create_lines()) == len(plan.links) + len(plan.switch_names)
    lines = plan.config_lines("p0t0x0")
    assert any("seg6local action End flavors next-csid lblen 32 nflen 16" in x for x in lines)
    assert "route replace fcbb:0:8001::/48 via fe80::2 dev p2" in lines
    down = {("omrc-x-p0t0x0", "p2")}
    assert not any("dev p2" in x for x in plan.config_lines("p0t0x0", down))
    with pytest.raises(LabError):
        LabPlan(parse_spec(SPEC2), "bad-name")


def test_arrival_address_is_the_path_after_the_last_shift() -> None:
    topo = Topology(parse_spec("planes=2,t0s=3,hosts_per_t0=2,t1s=2"))
    for dst in range(1, topo.spec.hosts):
        for p in range(2):
            addr = topo.path_address(0, dst, make_ev(p, 1))
            for _ in topo.path_usids(0, dst, make_ev(p, 1))[:-1]:
                addr = shift_address(addr)
            assert addr == arrival_address(topo, dst, p)


def test_cli_refuses_without_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lab_cli.os, "geteuid", lambda: 1000)
    parser = argparse.ArgumentParser()
    lab_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["lab", "status"])
    assert args.func(args) == 2
    assert "root" in capsys.readouterr().err


# ----- the real lab ------------------------------------------------------------------------


@pytest.mark.lab
def test_every_path_delivers_through_its_t1(make_lab: MakeLab) -> None:
    lab = make_lab(SPEC2)
    spec = lab.topology.spec
    n = 20
    rx = lab.udp_socket(1, PORT, blocking=False)
    tx = lab.udp_socket(0, 0)
    try:
        for p in range(spec.planes):
            for k in range(spec.t1s):
                t1s = [lab.topology.t1_name(p, j) for j in range(spec.t1s)]
                before = {t: lab.rx_packets(t)["p0"] for t in t1s}  # port 0: from T0 0 (h0's)
                label = f"p{p}k{k}"
                counts, sources = exchange(
                    lab,
                    {label: lab.path_address(0, 1, make_ev(p, k))},
                    n,
                    tx_sock=tx,
                    rx_sock=rx,
                )
                assert counts[label] == n, f"path {label} lost datagrams"
                assert sources[label] == {lab.host_address(0, p)}
                delta = {t: lab.rx_packets(t)["p0"] - before[t] for t in t1s}
                assert delta[t1s[k]] >= n, f"{t1s[k]} did not carry {label}: {delta}"
                for j, t in enumerate(t1s):
                    if j != k:
                        assert delta[t] < n // 2, f"{t} carried {label}: {delta}"
    finally:
        rx.close()
        tx.close()


@pytest.mark.lab
def test_checksums_need_no_check6_options(make_lab: MakeLab) -> None:
    lab = make_lab(SPEC2)
    addr = lab.path_address(0, 1, make_ev(1, 1))

    def plain() -> socket.socket:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind(("::", 0))
        return s

    def rx_only() -> socket.socket:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
        s.bind(("::", PORT))
        s.setblocking(False)
        return s

    def tx_only() -> socket.socket:
        s = plain()
        s.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_TX, 1)
        return s

    def plain_rx() -> socket.socket:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind(("::", PORT))
        s.setblocking(False)
        return s

    def run(tx_make: Callable[[], socket.socket], rx_make: Callable[[], socket.socket]) -> int:
        tx, rx = lab.call(0, tx_make), lab.call(1, rx_make)
        try:
            counts, _ = exchange(lab, {"x": addr}, 5, tx_sock=tx, rx_sock=rx)
        finally:
            tx.close()
            rx.close()
        return counts["x"]

    # A checksum computed over the path address fails at the receiver.
    assert run(plain, rx_only) == 0
    # A zero checksum is dropped unless the receiver allows it.
    assert run(tx_only, plain_rx) == 0
    assert run(tx_only, rx_only) == 5
    sock = udp_socket_nocheck(("::", 0), netns=lab.host_netns(0))
    try:
        assert sock.getsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_TX) == 1
        assert sock.getsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX) == 1
    finally:
        sock.close()


@pytest.mark.lab
@pytest.mark.parametrize("mode", ["down", pytest.param("silent", marks=needs_tool("nft"))])
def test_link_failure_and_restore(make_lab: MakeLab, mode: str) -> None:
    lab = make_lab(SPEC2)
    paths = all_paths(lab)
    link = "p0t0x0-p0t1x1"
    lab.fail(link, mode)
    counts, _ = exchange(lab, paths, 10)
    assert counts["p0k1"] == 0
    assert all(v == 10 for k, v in counts.items() if k != "p0k1"), counts
    near = lab.counters("p0t0x0")["p2"]["operstate"]
    far = lab.counters("p0t1x1")["p0"]["operstate"]
    if mode == "silent":
        assert (near, far) == ("UP", "UP")  # nobody sees a carrier change
    else:
        assert near != "UP"
        assert far != "UP"
    assert lab.link_state(link) == mode
    assert Lab.load(lab.name).fault(link) is not None  # recorded in the state file
    lab.restore(link)
    counts, _ = exchange(lab, paths, 10)
    assert all(v == 10 for v in counts.values()), counts
    assert lab.faults == []


@pytest.mark.lab
@needs_tool("nft")
def test_random_loss(make_lab: MakeLab) -> None:
    lab = make_lab(SPEC2)
    lab.fail("p1t0x0-p1t1x0", "loss", 50)
    n = 400
    counts, _ = exchange(lab, {"lossy": lab.path_address(0, 1, make_ev(1, 0))}, n)
    assert 0.3 * n < counts["lossy"] < 0.7 * n, counts
    counts, _ = exchange(lab, {"clean": lab.path_address(0, 1, make_ev(1, 1))}, 100)
    assert counts["clean"] == 100
    lab.restore()
    counts, _ = exchange(lab, {"lossy": lab.path_address(0, 1, make_ev(1, 0))}, 100)
    assert counts["lossy"] == 100


@pytest.mark.lab
@pytest.mark.parametrize("mode", ["down", pytest.param("silent", marks=needs_tool("nft"))])
def test_switch_failure(make_lab: MakeLab, mode: str) -> None:
    lab = make_lab(SPEC2)
    paths = all_paths(lab)
    lab.fail("p1t1x0", mode)
    counts, _ = exchange(lab, paths, 5)
    assert counts["p1k0"] == 0
    assert all(v == 5 for k, v in counts.items() if k != "p1k0"), counts
    # A T0 failure takes its whole plane down for these two hosts.
    lab.fail("p0t0x1", mode)
    counts, _ = exchange(lab, paths, 5)
    assert counts["p0k0"] == counts["p0k1"] == counts["p1k0"] == 0
    assert counts["p1k1"] == 5
    lab.restore()
    counts, _ = exchange(lab, paths, 5)
    assert all(v == 5 for v in counts.values()), counts


@pytest.mark.lab
@needs_tool("nft")
def test_host_link_failure_and_call_in_host(make_lab: MakeLab) -> None:
    lab = make_lab(SPEC2)
    names = {n for _, n in lab.call(1, socket.if_nameindex)}
    assert {"plane0", "plane1"} <= names
    assert lab.exec(0, ["ip", "-6", "route", "show"], capture_output=True) == 0
    assert lab.exec(0, ["sh", "-c", "exit 3"]) == 3
    lab.fail("h1-p0t0x1", "silent")
    counts, _ = exchange(lab, all_paths(lab), 5)
    assert counts["p0k0"] == counts["p0k1"] == 0
    assert counts["p1k0"] == counts["p1k1"] == 5


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip() for line in out.stdout.splitlines()}


@pytest.mark.lab
@needs_tool("nft")
def test_down_leaves_nothing(make_lab: MakeLab, lab_name: str) -> None:
    before = _root_links()
    lab = make_lab("planes=2,t0s=2,hosts_per_t0=2,t1s=2")
    lab.fail("p0t0x0-p0t1x0", "loss", 10)
    assert state_path(lab_name).exists()
    assert lab.down()
    assert not [ns for ns in nsmod.list_netns() if ns.startswith(f"omrc-{lab_name}-")]
    assert not state_path(lab_name).exists()
    assert _root_links() <= before


@pytest.mark.lab
def test_down_after_crash(lab_name: str) -> None:
    before = _root_links()
    plan = LabPlan(parse_spec(SPEC2), lab_name)
    # A half-built lab: state file written, some namespaces and veths created, then a "crash".
    Lab(plan)._save(status="building")
    nsmod.ip_batch(f"netns add {ns}" for ns in plan.namespaces[:6])
    nsmod.ip_batch(plan.create_lines()[:1])  # h0-p0t0x0: both ends exist
    # ...and a stray namespace of the same lab that the state file does not list.
    stray = f"omrc-{lab_name}-stray"
    nsmod.ip_batch([f"netns add {stray}"])
    with pytest.raises(LabError, match="already up"):
        Lab.up(SPEC2, lab_name)
    removed = down_lab(lab_name)
    assert stray in removed
    assert not [ns for ns in nsmod.list_netns() if ns.startswith(f"omrc-{lab_name}-")]
    assert not state_path(lab_name).exists()
    assert _root_links() <= before
    # No state file at all: the prefix sweep alone cleans up.
    nsmod.ip_batch([f"netns add {stray}"])
    assert down_lab(lab_name) == [stray]


@pytest.mark.lab
@needs_tool("nft")
def test_cli_end_to_end(lab_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    lab_cli.register(parser.add_subparsers(dest="command"))

    def cli(*argv: str) -> int:
        args = parser.parse_args(list(argv))
        return int(args.func(args))

    assert cli("lab", "up", "planes=2,t0s=2,hosts_per_t0=1,t1s=2", "--name", lab_name) == 0
    assert cli("lab", "up", "planes=nope", "--name", lab_name) == 2
    assert "planes" in capsys.readouterr().err
    assert cli("lab", "fail", "p0t1x1-p0t0x0", "--silent", "--name", lab_name) == 0
    assert cli("lab", "fail", "p1t1x0", "--loss", "25", "--name", lab_name) == 0
    assert cli("lab", "fail", "nosuch", "--name", lab_name) == 1
    capsys.readouterr()
    assert cli("lab", "status", "--name", lab_name) == 0
    out = capsys.readouterr().out
    assert "p0t0x0-p0t1x1" in out and "silent" in out and "loss 25%" in out
    assert cli("lab", "exec", "--name", lab_name, "h0", "--", "sh", "-c", "exit 5") == 5
    pcap = tmp_path / "c.pcap"
    lab = Lab.load(lab_name)
    if nsmod.have_tool("dumpcap") or nsmod.have_tool("tcpdump"):
        proc = lab.capture(1, 1, pcap, count=3)
        # The capture starts asynchronously: keep sending until it has its 3 packets.
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            exchange(lab, {"c": lab.path_address(0, 1, make_ev(1, 1))}, 3, settle=0.2)
        proc.wait(timeout=10)
        assert pcap.stat().st_size > 0
    assert cli("lab", "restore", "--name", lab_name) == 0
    counts, _ = exchange(lab, all_paths(lab), 3)
    assert all(v == 3 for v in counts.values()), counts
    assert cli("lab", "down", "--name", lab_name) == 0
    assert not state_path(lab_name).exists()


@pytest.mark.lab
def test_four_planes_build_and_forward(make_lab: MakeLab) -> None:
    # How long a build takes is measured in benchmarks, not asserted here.
    lab = make_lab("planes=4,t0s=2,hosts_per_t0=1,t1s=2")
    counts, _ = exchange(lab, all_paths(lab), 2)
    assert all(v == 2 for v in counts.values()), counts
    assert format_address(lab.topology.host_address(1, 3)) == lab.host_address("h1", 3)


@pytest.mark.lab
def test_ipv6_in_ipv6_is_decapsulated_at_the_host(make_lab: MakeLab) -> None:
    """Outer destination = path, inner = host address: the host's End.DT6 decapsulates."""
    lab = make_lab(SPEC2)
    rx = lab.udp_socket(1, PORT)
    rx.settimeout(1.0)
    tx = lab.call(0, socket.socket, socket.AF_INET6, socket.SOCK_RAW, 41)  # IPPROTO_IPV6
    try:
        for p in range(2):
            payload = f"inner{p}".encode()
            udp = struct.pack("!HHHH", 5000, PORT, 8 + len(payload), 0) + payload
            inner = (
                struct.pack("!IHBB", 6 << 28, len(udp), 17, 64)
                + ipaddress.IPv6Address(lab.host_address(0, p)).packed
                + ipaddress.IPv6Address(lab.host_address(1, p)).packed
                + udp
            )
            # A datagram may be lost while a fresh fabric still resolves its neighbours
            # on a busy machine: resend once a second, for up to 15 s, until one arrives.
            for _attempt in range(15):
                tx.sendto(inner, (lab.path_address(0, 1, make_ev(p, 1)), 0))
                try:
                    data, addr = rx.recvfrom(100)
                    break
                except TimeoutError:
                    continue
            else:
                pytest.fail(f"no decapsulated datagram on plane {p} in 15 s")
            assert (data, addr[0], addr[1]) == (payload, lab.host_address(0, p), 5000)
    finally:
        rx.close()
        tx.close()


@pytest.mark.lab
def test_cli_down_without_name_removes_the_default_lab_only(
    make_lab: MakeLab, lab_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lab down`` with no ``--name`` removes the default lab, never another one."""
    other = make_lab()  # a lab that must survive
    default = f"{lab_name}d"  # stands in for the default name (others may use the real one)
    try:
        Lab.up("planes=1,t0s=1,hosts_per_t0=1,t1s=1", default)
        monkeypatch.setattr(lab_cli, "DEFAULT_NAME", default)
        assert lab_cli.main(["lab", "down"]) == 0
        present = nsmod.list_netns()
        assert not [ns for ns in present if ns.startswith(ns_prefix(default))]
        assert [ns for ns in present if ns.startswith(ns_prefix(other.name))]
        assert lab_cli.main(["lab", "down", "--all", "--name", "x"]) == 2  # not both
    finally:
        down_lab(default)


@pytest.mark.lab
def test_fail_without_nft_is_one_line_and_records_nothing(
    make_lab: MakeLab,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without nftables, ``lab fail --silent`` says so in one line (exit 1), no traceback."""
    import shutil

    lab = make_lab(SPEC2)
    bare = tmp_path / "bin"  # a PATH with ip and nothing else: nft is missing
    bare.mkdir()
    ip = shutil.which("ip")
    assert ip is not None
    (bare / "ip").symlink_to(ip)
    monkeypatch.setenv("PATH", str(bare))
    for mode in ("--silent", "--loss=5", "--ecn=100"):
        assert lab_cli.main(["lab", "fail", "p0t0x0-p0t1x1", mode, "--name", lab.name]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "nft" in err and "nftables" in err, err
    assert Lab.load(lab.name).faults == []  # nothing recorded that cannot be restored
    assert lab_cli.main(["lab", "fail", "p0t0x0-p0t1x1", "--name", lab.name]) == 0  # down: ip only
