"""AICB / SimAI workload text and Chakra ET readers and writers."""

from __future__ import annotations

from pathlib import Path

import pytest

from openmrc.flow.model import FluidJob, FluidModel
from openmrc.pipeline.scenario import ScenarioError, parse
from openmrc.topology import ClosSpec
from openmrc.workloads.jobs import (
    GpuSpec,
    JobError,
    JobGraph,
    JobSpec,
    ModelSpec,
    Parallelism,
    aicb,
    build_iteration,
    chakra,
)
from openmrc.workloads.jobs.examples import CHAKRA_JOB, write_examples

SHIPPED = Path(__file__).resolve().parents[2] / "scenarios" / "training"


def test_shipped_examples_are_what_the_project_writes(tmp_path: Path) -> None:
    for p in write_examples(tmp_path):
        rel = p.relative_to(tmp_path)
        assert (SHIPPED / rel).read_bytes() == p.read_bytes(), rel


def _step(graph: JobGraph, spec: ClosSpec, g: int) -> float:
    m = FluidModel(spec, "mrc", gpus_per_server=g)
    m.add_job(FluidJob(graph, list(range(graph.ranks))))
    return max(e for e in m.run().jobs[0].end if e is not None)


def test_chakra_round_trip_keeps_the_graph() -> None:
    g = build_iteration(CHAKRA_JOB)
    files = chakra.trace_files(SHIPPED / "gpt-small-8-et")
    assert [f.name for f in files] == [f"gpt-small-8.{r}.et" for r in range(8)]
    back = chakra.read(files, "x", gpus_per_server=1)
    key = sorted((t.kind, t.ranks, t.size, t.dur_ps) for t in g.tasks)
    # a receive is its own zero-time node (it ends when the bytes are in)
    kept = [t for t in back.tasks if t.phase != "wait"]
    assert sorted((t.kind, t.ranks, t.size, t.dur_ps) for t in kept) == key
    spec = ClosSpec(planes=2, t0s=2, hosts_per_t0=4, t1s=2)
    assert _step(back, spec, 1) == _step(g, spec, 1)


def test_chakra_moe_round_trip(tmp_path: Path) -> None:
    m = ModelSpec(layers=2, hidden=256, heads=4, seq_len=128, global_batch=8, experts=4)
    g = build_iteration(JobSpec("moe", m, Parallelism(dp=4, ep=4), GpuSpec(gpus_per_server=1)))
    back = chakra.read(chakra.write(g, tmp_path), "moe", gpus_per_server=1)
    assert sum(t.kind == "alltoall" for t in back.tasks) == sum(
        t.kind == "alltoall" for t in g.tasks
    )
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=1)
    assert _step(back, spec, 1) == _step(g, spec, 1)


def test_aicb_file_read_by_hand() -> None:
    g = aicb.read(SHIPPED / "gpt-small-16.aicb.txt", gpus_per_server=2)
    assert g.ranks == 16
    tp = [t for t in g.tasks if t.phase == "tp"]
    dp = [t for t in g.tasks if t.phase == "dp"]
    # ga = 16 / (8 x 1) = 2 passes x 4 layers x (fwd + input grad) x 8 TP groups of 2
    assert len(tp) == 2 * 4 * 2 * 8
    assert {len(t.ranks) for t in tp} == {2}
    # activation b s h w = 512 x 512 x 2 bytes
    assert {t.size for t in tp} == {512 * 512 * 2}
    # weight gradients on the last pass: 4 layers x 2 DP groups of 8, a layer's
    # gradient bytes / TP: (12 h^2 + 13 h) / 2 x 2 bytes
    assert len(dp) == 4 * 2
    assert {len(t.ranks) for t in dp} == {8}
    assert {t.size for t in dp} == {(12 * 512 * 512 + 13 * 512) // 2 * 2}


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "w.txt"
    p.write_text(text)
    return p


HEAD = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 ga: 1 all_gpus: 4\n"
LINE = "l0\t-1\t100\tALLREDUCE\t4096\t100\tNONE\t0\t100\tALLREDUCE\t8192\t10\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEAD + "1\n" + "l0 -1 100 ALLREDUCE 4096\n", r"line 3: needs 12 columns, got 5"),
        (HEAD + "2\n" + LINE, r"line 2: says 2 layers, the file has 1"),
        (HEAD + "1\n" + LINE.replace("ALLREDUCE\t4096", "BRODCAST\t4096"), r"line 3: fwd column: unknown communication type 'BRODCAST'"),
        (HEAD.replace("ep: 1", "ep: 3") + "1\n" + LINE, r"line 1: ep 3 does not divide the 2 data-parallel replicas"),
        (HEAD + "1\n" + LINE.replace("100", "x", 1), r"line 3: a time or size is not an integer"),
        ("FOO 1\n1\n" + LINE, r"line 1: unknown training loop 'FOO'"),
    ],
)  # fmt: skip
def test_aicb_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(JobError, match=message) as err:
        aicb.read(p, gpus_per_server=2)
    assert str(p) in str(err.value) and "\n" not in str(err.value)


def test_aicb_hand_written_minimal(tmp_path: Path) -> None:
    g = aicb.read(_write(tmp_path, HEAD + "1\n" + LINE), gpus_per_server=2)
    kinds = [(t.kind, t.ranks, t.size) for t in g.tasks if t.kind != "compute"]
    assert kinds == [
        ("allreduce", (0, 1), 4096),
        ("allreduce", (2, 3), 4096),
        ("allreduce", (0, 2), 8192),
        ("allreduce", (1, 3), 8192),
    ]


def _et(tmp_path: Path, nodes: list[bytes], name: str = "t.0.et") -> Path:
    enc = chakra._enc_varint
    meta = chakra._enc_field(1, b"0.0.4")
    blob = enc(len(meta)) + meta + b"".join(enc(len(n)) + n for n in nodes)
    p = tmp_path / name
    p.write_bytes(blob)
    return p


def _node(nid: int, ntype: int, name: str = "n", attrs: bytes = b"") -> bytes:
    f = chakra._enc_field
    return f(1, nid) + f(2, name.encode()) + f(3, ntype) + attrs


def test_chakra_unknown_node_type_names_file_and_node(tmp_path: Path) -> None:
    p = _et(tmp_path, [_node(0, 4), _node(7, 9, "batch")])
    with pytest.raises(
        JobError, match=r"t.0.et: node 7 \(batch\): unsupported node type BATCH_NODE"
    ):
        chakra.read([p])


def test_chakra_malformed_and_unmatched(tmp_path: Path) -> None:
    p = tmp_path / "bad.0.et"
    p.write_bytes(b"\x05\x0a\x03ab")  # a message that claims more bytes than it has
    with pytest.raises(JobError, match=r"bad.0.et: .*not a Chakra ET file"):
        chakra.read([p])
    attr = chakra._enc_attr
    f = chakra._enc_field
    recv = _node(1, 6, "recv", f(10, attr("comm_src", 1)) + f(10, attr("comm_tag", 3)))
    a = _et(tmp_path, [_node(0, 4)], "u.0.et")
    b = _et(tmp_path, [recv], "u.1.et")
    with pytest.raises(JobError, match=r"receive from rank 1 tag 3 has no matching send"):
        chakra.read([b, a])
    coll = _node(0, 7, "ar", f(10, attr("comm_type", 12)) + f(10, attr("comm_size", 8)))
    with pytest.raises(JobError, match=r"node 0 \(ar\): unknown collective type 12"):
        chakra.read([_et(tmp_path, [coll], "c.0.et")])


def test_scenario_file_workloads(tmp_path: Path) -> None:
    data = {
        "fabric": {"planes": 2, "t0s": 2, "hosts_per_t0": 4, "t1s": 2},
        "workload": {
            "kind": "chakra",
            "files": str(SHIPPED / "gpt-small-8-et"),
            "gpus_per_server": 1,
        },
        "run": {"mode": "flow"},
    }
    sc = parse(data)
    assert sc.jobs[0].graph.ranks == 8
    data["workload"] = {"kind": "chakra", "files": str(tmp_path / "none")}
    with pytest.raises(ScenarioError, match=r"none: cannot read"):
        parse(data)
    data["workload"] = {"kind": "aicb", "file": str(SHIPPED / "gpt-small-16.aicb.txt"), "gpu": 1}
    with pytest.raises(ScenarioError, match=r"workload.gpu: not a key of a aicb workload"):
        parse(data)
