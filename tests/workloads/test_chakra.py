"""Chakra execution traces read as astra-sim runs them: node types, collectives, groups,
dependencies, edge cases, and real traces from astra-sim's examples."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from openmrc.workloads.jobs import JobError, chakra
from openmrc.workloads.jobs.graph import JobGraph

DATA = Path(__file__).resolve().parent / "data" / "chakra"
f = chakra._enc_field
attr = chakra._enc_attr


def _a(name: str, value: int | str | list[int]) -> bytes:
    return f(10, attr(name, value))


def _bool(name: str, value: bool) -> bytes:
    return f(10, f(1, name.encode()) + chakra._enc_varint(27 << 3) + bytes([int(value)]))


def node(
    nid: int,
    ntype: int,
    name: str = "n",
    *attrs: bytes,
    data: tuple[int, ...] = (),
    ctrl: tuple[int, ...] = (),
    us: int = 0,
    inputs: str = "",
) -> bytes:
    out = f(1, nid) + f(2, name.encode()) + f(3, ntype)
    if ctrl:
        out += f(4, b"".join(chakra._enc_varint(x) for x in ctrl))
    if data:
        out += f(5, b"".join(chakra._enc_varint(x) for x in data))
    if us:
        out += f(7, us)
    if inputs:
        out += f(8, f(1, inputs.encode()))
    return out + b"".join(attrs)


def et(tmp_path: Path, name: str, nodes: list[bytes]) -> Path:
    enc = chakra._enc_varint
    meta = f(1, b"0.0.4")
    p = tmp_path / name
    p.write_bytes(enc(len(meta)) + meta + b"".join(enc(len(n)) + n for n in nodes))
    return p


def coll(nid: int, code: int, size: int, *extra: bytes, **kw: Any) -> bytes:
    return node(nid, 7, f"c{nid}", _a("comm_type", code), _a("comm_size", size), *extra, **kw)


def ranks_files(tmp_path: Path, per_rank: list[list[bytes]], stem: str = "t") -> list[Path]:
    return [et(tmp_path, f"{stem}.{r}.et", nodes) for r, nodes in enumerate(per_rank)]


def comms(g: JobGraph) -> list[tuple[str, tuple[int, ...], int]]:
    return [(t.kind, t.ranks, t.size) for t in g.tasks if t.kind != "compute"]


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (0, "allreduce"),
        (2, "allgather"),
        (6, "alltoall"),
        (7, "reducescatter"),
        (8, "reducescatter"),
    ],
)
def test_collective_types(tmp_path: Path, code: int, kind: str) -> None:
    g = chakra.read(ranks_files(tmp_path, [[coll(0, code, 4096)] for _ in range(4)]))
    assert comms(g) == [(kind, (0, 1, 2, 3), 4096)]


def test_broadcast_is_a_ring_from_the_first_rank(tmp_path: Path) -> None:
    g = chakra.read(
        ranks_files(tmp_path, [[coll(0, 5, 4096), node(1, 4, data=(0,), us=3)] for _ in range(3)])
    )
    assert comms(g) == [("p2p", (0, 1), 4096), ("p2p", (1, 2), 4096)]
    # what follows the broadcast on any rank waits for all of it
    hops = {i for i, t in enumerate(g.tasks) if t.kind == "p2p"}
    for t in g.tasks:
        if t.kind == "compute" and t.dur_ps:
            (done,) = t.deps
            assert set(g.tasks[done].deps) == hops


def test_barrier_waits_for_every_rank_and_moves_nothing(tmp_path: Path) -> None:
    per = [
        [node(0, 4, us=5 * (r + 1)), coll(1, 9, 0, data=(0,)), node(2, 4, data=(1,), us=1)]
        for r in range(2)
    ]
    g = chakra.read(ranks_files(tmp_path, per))
    assert not comms(g) and not g.skipped
    # rank 0's last compute starts after rank 1's 10 us
    assert g.critical_compute_ps() == 11_000_000


@pytest.mark.parametrize(("code", "name"), [(1, "REDUCE"), (3, "GATHER"), (4, "SCATTER")])
def test_collectives_astra_sim_refuses_are_refused(tmp_path: Path, code: int, name: str) -> None:
    (p,) = ranks_files(tmp_path, [[coll(4, code, 64)]])
    with pytest.raises(JobError, match=rf"t.0.et: node 4 \(c4\): collective {name} is not run"):
        chakra.read([p])


def test_node_types_compute_memory_metadata_invalid(tmp_path: Path) -> None:
    nodes = [
        node(0, 0, "invalid"),
        node(1, 1, "meta", data=(0,)),
        node(2, 2, "load", data=(1,), us=2),
        node(3, 4, "gemm", data=(2,), us=3),
        node(4, 3, "store", data=(3,), us=4),
    ]
    g = chakra.read(ranks_files(tmp_path, [nodes]))
    assert g.critical_compute_ps() == 9_000_000
    assert g.compute_busy_ps() == [9_000_000]


def test_data_and_control_dependencies_and_compute_lanes(tmp_path: Path) -> None:
    # b depends on a by a control edge only; c and d are independent GPU kernels (one at a
    # time, as astra-sim runs them); e is a CPU op beside them
    nodes = [
        node(0, 4, "a", us=2),
        node(1, 4, "b", ctrl=(0,), us=3),
        node(2, 4, "c", us=4),
        node(3, 4, "e", _bool("is_cpu_op", True), us=20),
    ]
    g = chakra.read(ranks_files(tmp_path, [nodes]))
    # a, b, c one after another on the GPU (9 us); e on the CPU (20 us)
    assert g.critical_compute_ps() == 20_000_000
    nodes[3] = node(3, 4, "e", us=20)
    g = chakra.read(ranks_files(tmp_path, [nodes], "u"))
    assert g.critical_compute_ps() == 29_000_000


def test_sends_and_receives_match_in_order_per_tag(tmp_path: Path) -> None:
    def send(i: int, size: int) -> bytes:
        return node(i, 5, "s", _a("comm_dst", 1), _a("comm_size", size), _a("comm_tag", 0))

    def recv(i: int) -> bytes:
        deps = (i - 1,) if i else ()
        return node(i, 6, "r", _a("comm_src", 0), _a("comm_tag", 0), data=deps)

    g = chakra.read(ranks_files(tmp_path, [[send(0, 100), send(1, 200)], [recv(0), recv(1)]]))
    assert comms(g) == [("p2p", (0, 1), 100), ("p2p", (0, 1), 200)]
    # the first receive ends with the first send's bytes, the second with the second's
    received = [t for t in g.tasks if t.label == "r received"]
    sizes = [g.tasks[d].size for t in received for d in t.deps if g.tasks[d].kind == "p2p"]
    assert sizes == [100, 200]
    # the same with the receiver's file read first
    back = [
        [node(i, 6, "r", _a("comm_src", 1), _a("comm_tag", 0), data=(i - 1,) if i else ()) for i in range(2)],
        [node(i, 5, "s", _a("comm_dst", 0), _a("comm_size", 100 * (i + 1))) for i in range(2)],
    ]  # fmt: skip
    g = chakra.read(ranks_files(tmp_path, back, "b"))
    received = [t for t in g.tasks if t.label == "r received"]
    sizes = [g.tasks[d].size for t in received for d in t.deps if g.tasks[d].kind == "p2p"]
    assert sizes == [100, 200]


def test_process_groups_by_pg_name(tmp_path: Path) -> None:
    meta = json.dumps([{"pg_name": "2", "ranks": [1, 3]}])
    per = []
    for r in range(4):
        nodes = [node(0, 1, "pg", inputs=f"['{meta}']"), coll(1, 0, 64, _a("pg_name", "0"))]
        if r in (1, 3):
            nodes.append(coll(2, 2, 64, _a("pg_name", "2")))
        if r in (0, 2):
            nodes.append(coll(2, 2, 64, _a("pg_name", "5")))
        per.append(nodes)
    g = chakra.read(ranks_files(tmp_path, per), comm_groups={"5": [0, 2]})
    assert sorted(comms(g)) == [
        ("allgather", (0, 2), 64),
        ("allgather", (1, 3), 64),
        ("allreduce", (0, 1, 2, 3), 64),
    ]
    with pytest.raises(
        JobError, match=r"t.0.et: node 2 \(c2\): pg_name '5' is not a communicator group"
    ):
        chakra.read(ranks_files(tmp_path, per))


def test_one_rank_group_is_counted_not_dropped(tmp_path: Path) -> None:
    per = [[coll(0, 0, 64, _a("pg_ranks", [r])), node(1, 4, data=(0,), us=1)] for r in range(2)]
    g = chakra.read(ranks_files(tmp_path, per))
    assert not comms(g)
    assert g.skipped == {"ALL_REDUCE over a one-rank group (pg_ranks)": 2}


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([node(0, 4, data=(9,))], r"t.0.et: node 0 \(n\): depends on node 9, which is not in the file"),
        ([node(0, 12)], r"t.0.et: node 0 \(n\): unknown node type 12"),
        ([node(0, 5, "s", _a("comm_dst", 7), _a("comm_size", 8))], r"t.0.et: node 0 \(s\): comm_dst 7 is not another rank of the 2"),
        ([coll(3, 0, 8, _a("pg_ranks", [0, 5]))], r"t.0.et: node 3 \(c3\): pg_ranks holds rank 5, outside the job's 2 ranks"),
        ([coll(3, 17, 8)], r"t.0.et: node 3 \(c3\): unknown collective type 17"),
        ([node(0, 4, data=(1,)), node(1, 4, data=(0,))], r"t.0.et: node \d \(n\): its dependencies form a cycle"),
    ],
)  # fmt: skip
def test_errors_name_the_file_and_node(tmp_path: Path, nodes: list[bytes], message: str) -> None:
    files = ranks_files(tmp_path, [nodes, [node(0, 4)]])
    with pytest.raises(JobError, match=message) as err:
        chakra.read(files)
    assert "\n" not in str(err.value)


def test_missing_rank_file_and_truncated_file(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    for r in (0, 1, 3):
        et(d, f"x.{r}.et", [node(0, 4)])
    with pytest.raises(JobError, match=r"job: rank 2's trace \(x.2.et\) is missing"):
        chakra.trace_files(d)
    blob = (DATA / "all_reduce" / "all_reduce.1.et").read_bytes()
    p = tmp_path / "cut.0.et"
    p.write_bytes(blob[:-5])
    with pytest.raises(JobError, match=r"cut.0.et: byte \d+: not a Chakra ET file \(.*truncated\)"):
        chakra.read([p])


def test_collective_missing_on_a_rank(tmp_path: Path) -> None:
    files = ranks_files(tmp_path, [[coll(0, 0, 64)], [node(0, 4)], [coll(0, 0, 64)]])
    with pytest.raises(
        JobError,
        match=r"t.0.et: node 0: collective #0 of group \[0, 1, 2\] is missing from rank 1 \(.*t.1.et\)",
    ):
        chakra.read(files)


def test_comm_groups_file(tmp_path: Path) -> None:
    p = tmp_path / "groups.json"
    p.write_text('{"1": [0, 1], "2": [2, 3]}')
    assert chakra.read_comm_groups(p) == {"1": [0, 1], "2": [2, 3]}
    p.write_text('{"x": [0]}')
    with pytest.raises(JobError, match=r"groups.json: group 'x': a numeric id"):
        chakra.read_comm_groups(p)


# ----- real traces (tests/workloads/data/chakra/README.md) -------------------------------------
@pytest.mark.parametrize(
    ("folder", "kind"),
    [("all_reduce", "allreduce"), ("all_gather", "allgather"), ("reduce_scatter", "reducescatter"), ("all_to_all", "alltoall")],
)  # fmt: skip
def test_real_astra_sim_microbenchmarks(folder: str, kind: str) -> None:
    g = chakra.read(chakra.trace_files(DATA / folder), gpus_per_server=1)
    assert comms(g) == [(kind, (0, 1, 2, 3), 1 << 20)]


def test_real_astra_sim_ring_of_sends_and_receives() -> None:
    """astra-sim's custom ring all-reduce: each rank sends before it receives (eager sends)."""
    g = chakra.read(chakra.trace_files(DATA / "custom_allreduce"), gpus_per_server=1)
    p2p = [c for c in comms(g) if c[0] == "p2p"]
    assert len(p2p) == 8 * 14 and {c[2] for c in p2p} == {131072}
    assert {c[1] for c in p2p} == {(r, (r + 1) % 8) for r in range(8)}


def _scenario(files: str, mode: str) -> dict[str, Any]:
    return {
        "seed": 1,
        "fabric": {"planes": 2, "t0s": 2, "hosts_per_t0": 4, "t1s": 2},
        "workload": {"kind": "chakra", "files": str(DATA / files), "gpus_per_server": 1},
        "run": {"mode": mode},
    }


@pytest.mark.parametrize("mode", ["flow", "packet"])
def test_real_traces_run(mode: str) -> None:
    from openmrc.pipeline.results import validate
    from openmrc.pipeline.run import execute
    from openmrc.pipeline.scenario import parse

    for files in ("all_reduce", "custom_allreduce"):
        sc = parse(copy.deepcopy(_scenario(files, mode)), name="t")
        out = execute(sc, scenario_file="t.toml", overrides=[], workload={})
        validate(out.doc)
        (job,) = out.doc["jobs"]
        assert job["complete"] and job["step_time_us"] > 0
        assert job["skipped_collectives"] == []


def test_more_ranks_than_the_fabric_has_hosts_names_the_traces() -> None:
    from openmrc.pipeline.scenario import ScenarioError, parse

    data = _scenario("all_reduce", "flow")
    data["fabric"] = {"planes": 1, "t0s": 1, "hosts_per_t0": 2, "t1s": 1}
    with pytest.raises(ScenarioError, match=r"workload \(.*all_reduce: 4 ranks\): needs 4 servers"):
        parse(data)


def test_damaged_traces_fail_with_one_line(tmp_path: Path) -> None:
    """Bytes flipped, cut or inserted anywhere in a real trace: a graph or one JobError line."""
    import random

    rng = random.Random(7)
    blobs = [p.read_bytes() for p in chakra.trace_files(DATA / "custom_allreduce")]
    for it in range(150):
        files = []
        for r, blob in enumerate(blobs):
            b = bytearray(blob)
            if r == it % len(blobs):
                for _ in range(rng.randint(1, 4)):
                    k = rng.randrange(len(b))
                    op = rng.random()
                    if op < 0.6:
                        b[k] = rng.randrange(256)
                    elif op < 0.8:
                        del b[k : k + rng.randint(1, 20)]
                    else:
                        b[k:k] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 5)))
            p = tmp_path / f"x.{r}.et"
            p.write_bytes(bytes(b))
            files.append(p)
        try:
            chakra.read(files, gpus_per_server=1)
        except JobError as exc:
            assert "\n" not in str(exc)
