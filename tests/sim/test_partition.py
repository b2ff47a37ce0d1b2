"""A simulation partitioned over MPI ranks gives the same results.json as the ordinary
sequential run (``openmrc run``), for 1, 2 and 4 ranks.

The runs are subprocesses with ``OPENMRC_PURE_PYTHON=1`` (the pure-Python event
loop), so these tests run the same in the compiled and the interpreted suite;
where the native kernel is built, 2 ranks run on it too.  The scenarios are small (a few seconds each) and cover a link
failure, a blackholed-then-restored T1 (switch faults) with per-EV loss, a ring all-reduce with
random loss at every NIC ingress (dependencies, shared connections, per-port
random generators) and a NIC port down and up beside flapping T0-T1 links (the
host's reaction to its link runs on its rank only; captured to a pcap file).  Each process runs all of them (one ``mpirun`` per rank
count, for the CI budget).  The sequential reference runs in the test's process
(on the native kernel when it is built): the event order and the random draws
are the same in both (entity keys, per-port and per-host generators;
:mod:`openmrc.sim.engine`).  ``scenarios/t0-t1-link-failure.toml`` is also run
through the command line, ``mpirun -n 2 openmrc run ... --out X``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openmrc.sim import _native
from tests.tools import needs_tool

ROOT = Path(__file__).resolve().parents[2]

SCENARIOS = {
    "link-failure": """
seed = 2
[fabric]
planes = 2
t0s = 4
hosts_per_t0 = 2
t1s = 2
[workload]
kind = "permutation"
size = "512KiB"
[[faults]]
at_us = 8
kind = "link_down"
target = "p1t0x1-p1t1x1"
[run]
sample_us = 2
payloads = true
""",
    "silent-t1": """
seed = 5
[fabric]
planes = 2
t0s = 4
hosts_per_t0 = 2
t1s = 2
[workload]
kind = "permutation"
size = "512KiB"
[[faults]]
at_us = 5
kind = "switch_blackhole"
target = "p0t1x1"
[[faults]]
at_us = 40
kind = "switch_up"
target = "p0t1x1"
[[faults]]
at_us = 3
kind = "ev_loss"
evs = ["0x1230010", "0x1d40010", "0x2020010", "0x30c0010", "0x3bc0010"]
probability = 0.3
[run]
sample_us = 2
""",
    "allreduce-loss": """
seed = 3
[fabric]
planes = 2
t0s = 4
hosts_per_t0 = 2
t1s = 2
host_gbps = 100
fabric_gbps = 100
[workload]
kind = "allreduce"
size = "256KiB"
channels = 2
placement = [0, 2, 4, 6, 1, 3, 5, 7]
[[faults]]
at_us = 0
kind = "link_loss"
links = "host"
direction = "down"
probability = 0.01
[run]
sample_us = 2
""",
    "nic-port-flap": """
seed = 1
[fabric]
planes = 4
t0s = 2
hosts_per_t0 = 2
t1s = 2
host_gbps = 100
fabric_gbps = 100
[switches]
nic_port_status_delay_ps = 5_000_000
[workload]
kind = "flows"
flows = [
    { src = 0, dst = 2, size = "1MiB", qps = 2, message = "32KiB" },
    { src = 3, dst = 1, size = "1MiB", qps = 2, message = "32KiB" },
]
[[faults]]
at_us = 10
kind = "nic_port_down"
host = 0
plane = 0
[[faults]]
at_us = 15
kind = "nic_port_up"
host = 0
plane = 0
[[faults]]
at_us = 12
kind = "flap"
links = "fabric"
planes = [1]
t0s = [1]
period_us = 6
down_us = 3
count = 2
[run]
sample_us = 2
""",
}

#: Run under mpirun (or alone): every scenario file given, its results document printed
#: after a marker line by rank 0; the NIC scenario's packets captured into the directory
#: named first, in a file named after the number of ranks.
DRIVER = """
import contextlib, io, json, os, sys
from openmrc.pipeline.run import run_file
ranks = os.environ.get("OMPI_COMM_WORLD_SIZE", "1")
for path in sys.argv[2:]:
    buf = io.StringIO()
    pcap = None
    if path.endswith("nic-port-flap.toml"):
        pcap = os.path.join(sys.argv[1], "nic-port-flap-" + ranks + ".pcap")
    with contextlib.redirect_stdout(buf):
        rc = run_file(path, as_json=True, partitioned=True, pcap=pcap)
    if buf.getvalue().strip():
        print("@@@ " + path + " " + str(rc))
        print(buf.getvalue())
"""

CLI = "import sys; from openmrc.cli import main; sys.exit(main())"

#: What differs between two runs of one scenario (when, and how long it took).
VOLATILE = ("wall_seconds", "start_time")


def _strip(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    return doc


def _env(pure: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    env["OPENMRC_PURE_PYTHON"] = "1" if pure else "0"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def _run(ranks: int, files: list[Path], pure: bool = True) -> dict[str, tuple[int, dict[str, Any]]]:
    """Each scenario's (exit code, results document) on ``ranks`` processes (1: no MPI),
    pure Python or on the native kernel."""
    cmd = [sys.executable, "-c", DRIVER, str(files[0].parent), *map(str, files)]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(pure), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    for part in proc.stdout.split("@@@ ")[1:]:
        head, _, body = part.partition("\n")
        path, rc = head.rsplit(" ", 1)
        out[Path(path).stem] = (int(rc), json.loads(body))
    assert sorted(out) == sorted(Path(f).stem for f in files), proc.stdout[-2000:]
    return out


def _have_mpi4py() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def scenario_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("partition")
    files = []
    for name, text in SCENARIOS.items():
        path = d / f"{name}.toml"
        path.write_text(text)
        files.append(path)
    return files


@pytest.fixture(scope="module")
def one_rank(scenario_files: list[Path]) -> dict[str, tuple[int, dict[str, Any]]]:
    return _run(1, scenario_files)


@pytest.fixture(scope="module")
def sequential(scenario_files: list[Path]) -> dict[str, tuple[int, dict[str, Any]]]:
    """Each scenario's (exit code, results document) from the ordinary sequential run."""
    from openmrc.pipeline.run import run_file

    out = {}
    for path in scenario_files:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = run_file(str(path), as_json=True)
        out[path.stem] = (rc, json.loads(buf.getvalue()))
    return out


def test_one_rank_runs_are_complete_and_equal_the_sequential_run(
    scenario_files: list[Path],
    one_rank: dict[str, tuple[int, dict[str, Any]]],
    sequential: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """On one process every scenario completes, with the sequential run's document."""
    for name, (rc, doc) in one_rank.items():
        assert rc == 0, name
        assert doc["all_ok"], name
        assert doc["fabric"]["faults"], name  # the faults were applied
        assert (rc, _strip(doc)) == (sequential[name][0], _strip(sequential[name][1])), name


@needs_tool("mpirun")
@pytest.mark.skipif(not _have_mpi4py(), reason="needs mpi4py (pip install 'openmrc[mpi]')")
@pytest.mark.parametrize("ranks", [2, 4])
def test_ranks_give_the_sequential_results(
    ranks: int,
    scenario_files: list[Path],
    one_rank: dict[str, tuple[int, dict[str, Any]]],
    sequential: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """K = 2 and 4 ranks: every results document equals the ordinary sequential run's
    but wall time, and the packet capture is the one-rank file byte for byte."""
    got = _run(ranks, scenario_files)
    for name, (rc, doc) in got.items():
        assert rc == sequential[name][0], name
        assert _strip(doc) == _strip(sequential[name][1]), name
    d = scenario_files[0].parent
    one = (d / "nic-port-flap-1.pcap").read_bytes()
    assert len(one) > 100_000  # (thousands of packets)
    assert (d / f"nic-port-flap-{ranks}.pcap").read_bytes() == one


@needs_tool("mpirun")
@pytest.mark.skipif(not _have_mpi4py(), reason="needs mpi4py (pip install 'openmrc[mpi]')")
@pytest.mark.skipif(not _native.NATIVE, reason="the native kernel is not built")
def test_native_ranks_give_the_sequential_results(
    scenario_files: list[Path],
    one_rank: dict[str, tuple[int, dict[str, Any]]],
    sequential: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """2 ranks on the native kernel (its C event loop routes packets for the other
    rank to an outbox): the sequential documents, and the same pcap bytes."""
    got = _run(2, scenario_files, pure=False)
    for name, (rc, doc) in got.items():
        assert rc == sequential[name][0], name
        assert _strip(doc) == _strip(sequential[name][1]), name
    d = scenario_files[0].parent
    assert (d / "nic-port-flap-2.pcap").read_bytes() == (d / "nic-port-flap-1.pcap").read_bytes()


@needs_tool("mpirun")
@pytest.mark.skipif(not _have_mpi4py(), reason="needs mpi4py (pip install 'openmrc[mpi]')")
@pytest.mark.worker_group("mpirun")  # no module fixture: beside the file's others
def test_mpirun_openmrc_run_writes_the_sequential_results_json(tmp_path: Path) -> None:
    """``mpirun -n 2 openmrc run scenarios/t0-t1-link-failure.toml --out X`` writes the
    results.json (and CSV files) of ``openmrc run ... --out Y``, but wall time.  (A
    quarter of the file's 16 MiB a flow, the link failing at 20 us instead of 60: still
    while every flow runs, with payloads, for less simulated traffic per run.)"""
    scenario = ROOT / "scenarios" / "t0-t1-link-failure.toml"
    env = _env()
    env.pop("OPENMRC_PURE_PYTHON")  # as a user runs them: native when built
    smaller = ["--set", 'workload.size="4MiB"', "--set", "faults[0].at_us=20"]
    outs = {}
    for ranks in (1, 2):
        out = tmp_path / f"out{ranks}"
        cmd = [sys.executable, "-c", CLI, "run", str(scenario), *smaller, "--out", str(out)]
        if ranks > 1:
            cmd = ["mpirun", "--oversubscribe", "-n", str(ranks), *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert ("partitioned over 2 rank(s)" in proc.stderr) == (ranks == 2)
        outs[ranks] = out
    docs = [json.loads((outs[k] / "results.json").read_text()) for k in (1, 2)]
    assert docs[0]["all_ok"] and docs[0]["fabric"]["faults"]
    # the failure came while every flow was still running
    assert min(f["fct_us"] for f in docs[0]["flows"]) > 20, docs[0]["flows"]
    assert _strip(docs[1]) == _strip(docs[0])
    for name in ("flows.csv", "goodput.csv", "ev_events.csv"):
        assert (outs[2] / name).read_bytes() == (outs[1] / name).read_bytes(), name


#: Under mpirun: the link-failure scenario on 2 ranks; each rank writes, to a file of
#: its own, the hosts whose contexts hold QPs and memory regions, and its own hosts.
HOLDINGS = """
import json, sys
from openmrc.pipeline.run import load_scenario
from openmrc.sim import partition
comm = partition.mpi_comm()
partition.request(comm)
scenario, _ = load_scenario(sys.argv[1], [])
exp = scenario.build()
# what the rank made of the fabric (before the run: rank 0 completes its copy to merge)
hosts = [i for i, h in enumerate(exp.hosts) if h is not None]
ends = [i for i, e in enumerate(exp.fabric.host_ends) if e]
links = sorted(exp.fabric.links)
ports = len(exp.fabric.ports)
held = {}
free = exp._free_transport  # what the rank held when its part was measured


def record():
    held["qps"] = {h.index: len(h.ctx.qps) for h in exp.hosts if h is not None and h.ctx.qps}
    held["mrs"] = [h.index for h in exp.hosts if h is not None and h.ctx.lkeys]
    free()


exp._free_transport = record
result = exp.run()
hpt = exp.spec.hosts_per_t0
doc = {
    "rank": comm.rank,
    "mine": [h for h in range(exp.spec.hosts) if partition.rank_of_t0(h // hpt, exp.spec.t0s, 2) == comm.rank],
    "hosts": hosts,
    "ends": ends,
    "links": links,
    "ports": ports,
    "links_after": len(exp.fabric.links),
    "qps": held["qps"],
    "mrs": held["mrs"],
    # then freed: the QPs destroyed, the flows' references to them dropped
    "qps_after": sum(len(h.ctx.qps) for h in exp.hosts if h is not None),
    "flow_qps_after": sum(len(f.qas) + len(f.qbs) for f in exp.flows),
    "all_ok": None if result is None else result.all_ok,
}
# each rank its own file: two ranks printing at once can share a line of mpirun's output
with open(f"{sys.argv[2]}/rank{comm.rank}.json", "w") as out:
    json.dump(doc, out)
"""


@needs_tool("mpirun")
@pytest.mark.skipif(not _have_mpi4py(), reason="needs mpi4py (pip install 'openmrc[mpi]')")
def test_each_rank_makes_only_its_own_hosts_qps_and_regions(
    scenario_files: list[Path], tmp_path: Path
) -> None:
    """The memory is divided: a rank makes its own hosts (their NICs and host ends),
    and of the fabric only the links with an end it holds (its T0s' and T1s'), and the
    QPs, memory regions and receives of its own hosts' ends only (a source learns its
    destination region's address and rkey from the destination's rank); together the
    ranks hold every QP once, and rank 0 has every link again to merge the counters.
    Once its part is measured a rank destroys its QPs (rank 0 merges into that memory)."""
    path = next(f for f in scenario_files if f.stem == "link-failure")
    cmd = ["mpirun", "--oversubscribe", "-n", "2", sys.executable, "-c", HOLDINGS]
    cmd += [str(path), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [d["rank"] for d in ranks] == [0, 1]
    assert ranks[0]["all_ok"]
    total: dict[str, int] = {}
    for d in ranks:
        assert d["qps"] and set(map(int, d["qps"])) <= set(d["mine"]), d
        assert d["mrs"] and set(d["mrs"]) <= set(d["mine"]), d
        for h, n in d["qps"].items():
            total[h] = total.get(h, 0) + n
    # a permutation of 8 hosts: each host has its flow's source QP and its peer's
    assert total == {str(h): 2 for h in range(8)}
    # the fabric: 2 planes, 4 T0s of 2 hosts, 2 T1s (T0s 0-1 and T1 0 of each plane
    # on rank 0; T0s 2-3 and T1 1 on rank 1)
    from openmrc.sim.partition import rank_of_t0, rank_of_t1

    every = 2 * (8 + 4 * 2)
    for r, d in enumerate(ranks):
        assert d["hosts"] == d["ends"] == d["mine"] == [h for h in range(8) if h // 2 * 2 // 4 == r]
        want = [f"h{h}-p{p}t0x{h // 2}" for p in range(2) for h in d["mine"]]
        want += [
            f"p{p}t0x{i}-p{p}t1x{k}"
            for p in range(2)
            for i in range(4)
            for k in range(2)
            if r in (rank_of_t0(i, 4, 2), rank_of_t1(p, k, 2, 2))
        ]
        assert d["links"] == sorted(want)
        assert len(want) == 8 + 12 < every
        assert d["ports"] == 2 * len(want)
    assert ranks[0]["links_after"] == every
    assert [(d["qps_after"], d["flow_qps_after"]) for d in ranks] == [(0, 0), (0, 0)]


def test_refusals_name_what_is_not_supported(tmp_path: Path) -> None:
    """What a partitioned run cannot do yet fails with one line naming it."""
    path = tmp_path / "ctl.toml"
    path.write_text(SCENARIOS["link-failure"] + "\n[clustermapper]\n")
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "run", str(path), "--partitioned"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode != 0
    assert "partitioned run: the clustermapper is not supported yet" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_window_divides_the_sample_interval_within_the_lookahead() -> None:
    """Sample ticks fall on window boundaries, and no window is wider than the lookahead."""
    from openmrc.sim.partition import PartitionError, window_ps

    for look, interval in [(1_200_000, 5_000_000), (1_000_000, 100_000_000), (7, 10), (3, 3)]:
        w = window_ps(look, interval)
        assert interval % w == 0 and 0 < w <= look
    assert window_ps(None, 5_000_000) == 5_000_000  # one rank: nothing crosses
    with pytest.raises(PartitionError, match="no delay"):
        window_ps(0, 5_000_000)


def test_rack_groups_keep_hosts_with_their_t0s_and_spread_t1s() -> None:
    """Rack groups are contiguous and balanced; every rank gets T1s of every plane."""
    from openmrc.sim.partition import rank_of_t0, rank_of_t1

    t0s, t1s, planes = 16, 8, 4
    for k in (1, 2, 4):
        racks = [rank_of_t0(i, t0s, k) for i in range(t0s)]
        assert racks == sorted(racks) and all(racks.count(r) == t0s // k for r in range(k))
        for p in range(planes):
            spread = {rank_of_t1(p, j, t1s, k) for j in range(t1s)}
            assert spread == set(range(k))


def _exchange_side(rank: int) -> tuple[Any, Any, list[tuple[Any, int]], int]:
    """One rank of a two-entity line: a port on rank 0 into a host end on rank 1."""
    from openmrc.sim.partition import NativePartitionedSimulator
    from openmrc.sim.port import EgressPort
    from openmrc.sim.switch import HostEnd

    sim = NativePartitionedSimulator(7, rank, 2)
    end = HostEnd(sim, 1, 0)
    got: list[tuple[Any, int]] = []
    end.on_receive = lambda pkt, plane, now: got.append((pkt, now))
    port = EgressPort(
        sim, "a->b", 100_000_000_000, 1_000, end.receive, data_limit=10**8, prio_limit=10**8
    )
    e_port = sim.add_entity([port])
    sim.add_entity([end])
    sim.set_ranks([0, 1])
    sim.set_ports([port])
    return sim, port, got, e_port


@pytest.mark.skipif(not _native.NATIVE, reason="the native kernel is not built")
def test_native_exchange_carries_every_packet_class_as_bytes() -> None:
    """The native ranks' exchange writes the wire packet classes as bytes (no pickling)
    and the receiving rank rebuilds each field: big routes and SACK bitmaps, payload
    bytes (and memoryviews where allowed), enums, None, trims; a packet holding a value
    it does not know is pickled beside them."""
    from openmrc.wire.packets import (
        DataPacket,
        NackPacket,
        NackReason,
        Opcode,
        ProbePacket,
        ProbeReplyPacket,
        SackPacket,
        packet_fields,
    )

    route = (0xFCBB << 112) | (0xE001 << 80) | 0xBEEF
    d1 = DataPacket(9, 0x1234501, Opcode.WRITE_LAST_IMM, 7, 3, 2**40, 77, 5, b"hello", 42, 10**12)
    d2 = DataPacket(9, 0x1234502, Opcode.WRITE_MIDDLE, 8, 3, 0, 77, 4, b"abcd")
    with contextlib.suppress(TypeError):  # a memoryview where the class allows one
        d2.payload = memoryview(b"xxabcd")[2:]  # type: ignore[assignment]
    d3 = DataPacket(9, 3, Opcode.WRITE_FIRST, 2**33, 2, 1, 2, 4096, None, None, 5, True, True, True)
    d3.trim(lasthop=True)
    sack = SackPacket(4, 0x12, 100, 101, (1 << 200) | 5, True, 2**45, 3, 99, 17, 0b101)
    # either side of the 62 bits a compiled int field keeps in its own word
    sack.cack, sack.sack_base, sack.rcvd_bytes = 2**62 - 1, 2**62, -(2**62)
    sack.ooo_count, sack.ts_echo = -(2**62) - 1, -(2**63)
    nack = NackPacket(4, 6, NackReason.REMOTE_ACCESS_ERROR, 12, 10, -3)
    probe = ProbePacket(4, 0x21, 5, 123, reliability=True)
    reply = ProbeReplyPacket(4, 0x21, 5, 123)
    other = ProbeReplyPacket(4, 0x22, 6, 124)
    sent = [d1, d2, d3, sack, nack, probe, reply, other]
    for i, pkt in enumerate(sent):
        pkt.route = route + i
        pkt.ecn = i % 2 == 1
    other.meta = ("a value the exchange does not write", 1)
    sim0, port0, _, e_port = _exchange_side(0)
    for i, pkt in enumerate(sent):
        sim0.push_as(e_port, 1_000 * i, lambda p=pkt: port0.enqueue(p))
    sim0.run_window(10**9)
    blobs, first = sim0.pack()
    wire, pickled = blobs[1]
    assert blobs[0] == (b"", None)
    assert len(wire) > 29 * 7 and pickled is not None  # 7 as bytes, the other pickled
    assert first is not None and first > 1_000
    sim1, _, got, _ = _exchange_side(1)
    sim1.unpack(blobs[1])
    sim1.run_window(10**9)
    assert [t for _, t in got] == sorted(t for _, t in got) and got[0][1] == first
    by_route = {p.route: p for p, _ in got}
    assert len(by_route) == len(sent)
    for pkt in sent:
        back = by_route[pkt.route]
        assert type(back) is type(pkt)
        for name in packet_fields(type(pkt)):
            a, b = getattr(pkt, name), getattr(back, name)
            if isinstance(a, memoryview):
                a = bytes(a)
            assert a == b and type(a) is type(b), (type(pkt).__name__, name, a, b)


@pytest.mark.skipif(not _native.NATIVE, reason="the native kernel is not built")
def test_a_native_rank_fills_the_packets_it_sent_with_the_ones_it_receives() -> None:
    """A compiled packet a rank wrote for another rank, held by nothing else, is kept
    with its object fields released, and becomes a packet another rank sends: every
    field as sent, nothing left of its first life."""
    from openmrc.sim.partition import NativePartitionedSimulator
    from openmrc.sim.port import EgressPort
    from openmrc.sim.switch import HostEnd
    from openmrc.wire import packets
    from openmrc.wire.packets import DataPacket, Opcode, packet_fields

    def side(rank: int) -> tuple[Any, list[Any], list[int], list[Any]]:
        """Two hosts, 0 on rank 0 and 1 on rank 1, a link each way."""
        sim = NativePartitionedSimulator(7, rank, 2)
        ends = [HostEnd(sim, h, 0) for h in (0, 1)]
        got: list[Any] = []
        for end in ends:
            end.on_receive = lambda pkt, plane, now: got.append(pkt)
        ports = [
            EgressPort(sim, f"{a}->{b}", 10**11, 1_000, ends[b].receive, data_limit=10**8,
                       prio_limit=10**8)
            for a, b in ((0, 1), (1, 0))
        ]  # fmt: skip
        e_ports = [sim.add_entity([ports[0], ends[0]]), sim.add_entity([ports[1], ends[1]])]
        sim.set_ranks([0, 1])
        sim.set_ports(ports)
        return sim, ports, e_ports, got

    def send(sim: Any, port: Any, e_port: int, make: Any) -> None:
        # four at once: the first goes on the wire while its maker still holds it (not
        # kept); the other three wait in the queue and leave it held by nothing else
        sim.push_as(e_port, 0, lambda: [port.enqueue(make(i)) for i in range(4)])
        sim.run_window(10**9)

    queued: set[int] = set()  # (the packets that wait in the queue: kept, so alive)
    held = [bytearray(b"meta") for _ in range(4)]

    def first_life(i: int) -> DataPacket:
        pkt = DataPacket(5, 6, Opcode.WRITE_LAST_IMM, 200 + i, 2, 2**40, 3, 5, b"old!", 99, 7)
        pkt.route, pkt.meta = 10**30 + i, memoryview(held[i])
        if i:
            queued.add(id(pkt))
        return pkt

    def sent(i: int) -> DataPacket:
        pkt = DataPacket(9, 8, Opcode.WRITE_MIDDLE, 100 + i, 3, 0, 77, 4, None)
        pkt.route = 2000 + i
        return pkt

    sim0, ports0, e0, _ = side(0)
    sim1, ports1, e1, got1 = side(1)
    send(sim1, ports1[1], e1[1], first_life)  # rank 1's four packets for rank 0
    compiled = not packets.__file__.endswith(".py")
    assert sim1.exchange_kept().get(DataPacket.__name__, 0) == (3 if compiled else 0)
    if not compiled:
        return
    for buf in held:  # a kept packet holds none of its fields (a view would pin its buffer)
        buf.extend(b"!")
    send(sim0, ports0[0], e0[0], sent)  # rank 0's four for rank 1
    sim1.unpack(sim0.pack()[0][1])
    assert sim1.exchange_kept()[DataPacket.__name__] == 0
    sim1.run_window(10**9)
    assert [p.psn for p in got1] == [100, 101, 102, 103]
    assert {id(p) for p in got1[:3]} == queued  # (the fourth made anew: none left)
    for pkt in got1:
        want = sent(pkt.psn - 100)
        for name in packet_fields(DataPacket):
            assert getattr(pkt, name) == getattr(want, name), name


@pytest.mark.skipif(not _native.NATIVE, reason="the native kernel is not built")
def test_native_exchange_moves_compiled_int_fields_as_their_words() -> None:
    """Where the packet classes are compiled, the exchange finds each int field's word
    (moved without an int object) and each object field's pointer (read without a
    call); bools, enums and classes that are not compiled go through their
    descriptors."""
    from openmrc.wire import packets

    sim, _, _, _ = _exchange_side(0)
    slots = sim.exchange_slots()
    words, objects = slots[packets.DataPacket.__name__]
    if packets.__file__.endswith(".py"):
        assert all(found == ((), ()) for found in slots.values())
        return
    assert {"dqpn", "ev", "path_ev", "psn", "msn", "va", "rkey", "length", "ts"} == set(words)
    assert {"size", "route", "meta", "payload", "imm"} == set(objects)
    sack_words, _ = slots[packets.SackPacket.__name__]
    assert {"cack", "sack_base", "bitmap", "ts_echo"} <= set(sack_words)


def test_a_rank_makes_its_results_with_the_collector_paused(
    scenario_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its windows a rank makes its fragment, and rank 0 merges the fragments and
    collects the results, with the collector paused, as the sequential run collects its
    results: an automatic collection there walks the whole fabric and hosts (0.6 s a rank
    at 8192 hosts x 8 planes).  With the collector's thresholds at 1, any allocation
    there outside the pause would start one."""
    import gc

    from openmrc.pipeline.run import run_file
    from openmrc.sim import partition

    inside: list[str] = []
    seen: list[tuple[str, int]] = []
    cls = partition.PartitionedExperiment
    for name in ("_fragment", "_merge", "_collect"):
        method = getattr(cls, name)

        def wrapped(self: Any, *args: Any, _m: Any = method, _n: str = name) -> Any:
            inside.append(_n)
            try:
                return _m(self, *args)
            finally:
                inside.pop()

        monkeypatch.setattr(cls, name, wrapped)

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and inside:
            seen.append((inside[-1], info["generation"]))

    thresholds = gc.get_threshold()
    gc.callbacks.append(watch)
    gc.set_threshold(1, 1, 1)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            rc = run_file(str(scenario_files[0]), as_json=True, partitioned=True)
    finally:
        gc.callbacks.remove(watch)
        gc.set_threshold(*thresholds)
    assert rc == 0
    assert not seen, seen[:5]


def test_a_ranks_sampler_has_the_hosts_report_only_while_an_input_can_matter() -> None:
    """A rank's sampler is armed as the sequential one is (the hosts then call the
    experiment back only as in a sequential run: not after every input, a Python call
    each); from a tick until the window boundary decides it, and while it sleeps, every
    host input reports; where a tick falls in every window they report throughout."""
    from types import SimpleNamespace

    from openmrc.sim.partition import PartitionedSampler, PartitionedSimulator

    port = SimpleNamespace(tx_bytes=0)
    hooks: list[bool] = []
    sim = PartitionedSimulator(1, 0, 2)
    sampler = PartitionedSampler(sim, 1_000, [], 1, lambda flow: 0, lambda: 1, hooks.append)
    sampler.my_ports = [[port]]
    sampler.start()
    assert sampler.armed and hooks == []  # nothing before the first tick can matter
    port.tx_bytes = 100
    sampler.sample()  # bytes moved: reports on until the boundary
    assert not sampler.armed and hooks == [True]
    assert sampler.decide([sampler.tick], [None]) is not None  # re-armed
    assert sampler.armed and hooks == [True, False]
    sampler.sample()  # nothing moved: asleep at the boundary, reports stay on
    assert sampler.decide([sampler.tick], [None]) is None
    assert sampler.asleep and not sampler.armed and hooks == [True, False, True]
    assert sampler.decide([None], [2_500]) == 3_000  # woken by an input
    assert sampler.armed and not sampler.asleep and hooks == [True, False, True, False]

    steady = PartitionedSampler(sim, 1_000, [], 1, lambda flow: 0, lambda: 1, hooks.append)
    steady.every_window = True
    steady.my_ports = [[port]]
    hooks.clear()
    steady.start()
    port.tx_bytes += 1
    steady.sample()
    steady.decide([steady.tick], [None])
    assert not steady.armed and hooks == []
