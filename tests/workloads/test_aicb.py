"""AICB / SimAI workload files read as SimAI runs them: types, groups, loops, edge cases, real files."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from openmrc.workloads.jobs import JobError, aicb
from openmrc.workloads.jobs.graph import JobGraph, Task

DATA = Path(__file__).resolve().parent / "data" / "aicb"


def _file(tmp_path: Path, head: str, lines: list[str], name: str = "w.txt") -> Path:
    p = tmp_path / name
    p.write_text(head + "\n" + str(len(lines)) + "\n" + "\n".join(lines) + "\n")
    return p


def _line(fwd: str = "NONE 0", ig: str = "NONE 0", wg: str = "NONE 0", name: str = "l") -> str:
    return f"{name}\t-1\t100\t{fwd}\t100\t{ig}\t100\t{wg}\t0"


def _head(tp: int = 2, ep: int = 1, pp: int = 1, gpus: int = 8, extra: str = "") -> str:
    return (
        f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} "
        f"vpp: 1 ga: 1 all_gpus: {gpus} checkpoints: 0 checkpoint_initiates: 0{extra}"
    )


def _comms(g: JobGraph) -> list[Task]:
    return [t for t in g.tasks if t.kind != "compute"]


# tp 2 x dp 4, ep 2 on 8 GPUs: SimAI's MockNcclGroup partitions
GROUPS: dict[str, set[tuple[int, ...]]] = {
    "tp": {(0, 1), (2, 3), (4, 5), (6, 7)},
    "dp": {(0, 2, 4, 6), (1, 3, 5, 7)},
    "ep": {(0, 2), (4, 6), (1, 3), (5, 7)},
    "dp_ep": {(0, 4), (2, 6), (1, 5), (3, 7)},
}
KINDS = {
    "ALLREDUCE": "allreduce",
    "ALLGATHER": "allgather",
    "REDUCESCATTER": "reducescatter",
    "ALLTOALL": "alltoall",
}


@pytest.mark.parametrize("column", ["fwd", "ig", "wg"])
@pytest.mark.parametrize("suffix", ["", "_TP", "_DP", "_EP", "_DP_EP"])
@pytest.mark.parametrize("base", [*KINDS, "BROADCAST"])
def test_every_type_and_group_in_every_column(
    tmp_path: Path, column: str, suffix: str, base: str
) -> None:
    token = f"{base}{suffix} 65536"
    g = aicb.read(_file(tmp_path, _head(ep=2), [_line(**{column: token})]))
    group = {"_TP": "tp", "_DP": "dp", "_EP": "ep", "_DP_EP": "dp_ep"}.get(suffix)
    group = group or ("dp" if column == "wg" else "tp")
    comms = _comms(g)
    if base == "BROADCAST":
        # NCCL's ring broadcast: each rank forwards the buffer to the next, from the first
        chains = {tuple(t.ranks) for t in comms}
        assert {t.kind for t in comms} == {"p2p"} and {t.size for t in comms} == {65536}
        want = {(grp[i], grp[i + 1]) for grp in GROUPS[group] for i in range(len(grp) - 1)}
        assert chains == want
    else:
        assert {t.kind for t in comms} == {KINDS[base]}
        assert {t.ranks for t in comms} == GROUPS[group]
        assert {t.size for t in comms} == {65536}
        assert {t.phase for t in comms} == {group}
    assert not g.skipped


def test_blocking_columns_and_the_weight_gradient_beside_the_backward(tmp_path: Path) -> None:
    """SimAI: forward and input-gradient collectives block, weight-gradient ones do not."""
    lines = [
        _line("ALLREDUCE 8192", "ALLREDUCE 8192", "ALLREDUCE 8192", "a"),
        _line("ALLREDUCE 8192", "ALLREDUCE 8192", "ALLREDUCE 8192", "b"),
    ]
    g = aicb.read(_file(tmp_path, _head(), lines))

    def coll(label: str) -> int:  # rank 0's collective of that label
        return next(
            i
            for i, t in enumerate(g.tasks)
            if t.kind != "compute" and t.label == label and 0 in t.ranks
        )

    # the forward pass runs the lines in order, the backward in reverse
    order = [t.label for t in _comms(g)]
    assert order[0].startswith("a L3 fwd") and order[-1].startswith("a L3 wg")
    # rank 0's input-gradient compute of line a waits for b's input-gradient collective
    ig_a = next(t for t in g.tasks if t.label == "a L3 ig" and t.ranks == (0,))

    def ancestors(i: int) -> set[int]:
        seen: set[int] = set()
        todo = [i]
        while todo:
            for d in g.tasks[todo.pop()].deps:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    anc = ancestors(g.tasks.index(ig_a))
    assert coll("b L4 ig") in anc
    # ... but not for b's weight-gradient collective (it runs beside the backward pass)
    assert coll("b L4 wg") not in anc
    # rank 0's step ends when its weight-gradient collectives are done
    end = next(i for i, t in enumerate(g.tasks) if t.label == "step end" and t.ranks == (0,))
    assert {coll("a L3 wg"), coll("b L4 wg")} <= set(g.tasks[end].deps)


def test_ga_is_not_a_repeat_count(tmp_path: Path) -> None:
    """AICB writes every micro-batch into the file; SimAI runs the lines once."""
    one = aicb.read(_file(tmp_path, _head(), [_line("ALLREDUCE 8192")], "a.txt"))
    ga8 = aicb.read(
        _file(tmp_path, _head().replace("ga: 1", "ga: 8"), [_line("ALLREDUCE 8192")], "b.txt")
    )
    assert len(one.tasks) == len(ga8.tasks)


def test_zero3_gathers_run_over_the_data_parallel_group(tmp_path: Path) -> None:
    """model_parallel_NPU_group 1: a plain ALLGATHER in the forward or input-gradient
    column is ZeRO-3's parameter gather, over DP (phase zero); other types stay on TP."""
    lines = [
        _line(fwd="ALLGATHER 4096", ig="ALLGATHER 4096", wg="REDUCESCATTER 65536"),
        _line(fwd="ALLREDUCE 4096"),
    ]
    g = aicb.read(_file(tmp_path, _head(tp=1, gpus=4), lines))
    gathers = [t for t in _comms(g) if t.kind == "allgather"]
    assert len(gathers) == 2 and {t.ranks for t in gathers} == {(0, 1, 2, 3)}
    assert {t.phase for t in gathers} == {"zero"}
    # the all-reduce over the one-rank TP group runs nothing, and is counted
    assert g.skipped == {"ALLREDUCE over a one-rank TP group": 1}


def test_one_rank_groups_and_empty_collectives_are_counted(tmp_path: Path) -> None:
    lines = [
        _line("ALLREDUCE 4096", "REDUCESCATTER 0", "ALLREDUCE 4096"),
        _line("ALLTOALL_EP 4096", "NONE 0", "ALLREDUCE_DP_EP 4096"),
    ]
    g = aicb.read(_file(tmp_path, _head(tp=1, ep=1, gpus=1), lines))
    assert g.skipped == {
        "ALLREDUCE over a one-rank TP group": 1,
        "REDUCESCATTER over a one-rank TP group": 1,
        "ALLTOALL_EP over a one-rank EP group": 1,
        "ALLREDUCE over a one-rank DP group": 1,
        "ALLREDUCE_DP_EP over a one-rank DP_EP group": 1,
    }
    assert not _comms(g)
    g = aicb.read(_file(tmp_path, _head(), [_line(ig="REDUCESCATTER 0")], "b.txt"))
    assert g.skipped == {"REDUCESCATTER of 0 bytes": 1} and not _comms(g)


def test_small_forward_collectives_round_up_to_4096_bytes(tmp_path: Path) -> None:
    g = aicb.read(_file(tmp_path, _head(), [_line("ALLREDUCE 4", "ALLREDUCE 4")]))
    assert sorted({(t.label.split()[-1], t.size) for t in _comms(g)}) == [("fwd", 4096), ("ig", 4)]


def test_pipeline_stages_groups_and_transfers(tmp_path: Path) -> None:
    """tp 2 x pp 2 x dp 4 (ep 2) on 16 GPUs: rank t + 2 (s + 2 d); groups stay in a stage."""
    head = _head(tp=2, ep=2, pp=2, gpus=16, extra=" pp_comm: 1048576").replace("ga: 1", "ga: 4")
    lines = [
        _line("ALLREDUCE 8192", "ALLTOALL_EP 8192", "ALLGATHER 8192", "x"),
        _line("NONE 0", "NONE 0", "REDUCESCATTER_DP_EP 8192", "y"),
    ]
    g = aicb.read(_file(tmp_path, head, lines))
    comms = _comms(g)
    tp = {t.ranks for t in comms if t.kind == "allreduce"}
    assert tp == {(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)}
    dp = {t.ranks for t in comms if t.kind == "allgather"}
    assert (0, 4, 8, 12) in dp and (2, 6, 10, 14) in dp and len(dp) == 4
    ep = {t.ranks for t in comms if t.kind == "alltoall"}
    assert (0, 4) in ep and (8, 12) in ep and (2, 6) in ep and len(ep) == 8
    dp_ep = {t.ranks for t in comms if t.kind == "reducescatter"}
    assert (0, 8) in dp_ep and (4, 12) in dp_ep and len(dp_ep) == 8
    pp = [t for t in comms if t.phase == "pp"]
    # per (t, d) chain: first activation and the other ga - 1 forward, last gradient and
    # the other ga - 1 backward
    assert len(pp) == 2 * 4 * 4
    assert {(t.label, t.size) for t in pp} == {
        ("pp first activation", 1048576),
        ("pp activations", 3 * 1048576),
        ("pp last gradient", 1048576),
        ("pp gradients", 3 * 1048576),
    }
    assert {t.ranks for t in pp if t.label == "pp first activation"} == {
        (t + 4 * d, t + 4 * d + 2) for t in range(2) for d in range(4)
    }
    # the bubble: stage 1 waits one micro-batch's forward (200 / 4 ns), stage 0 one
    # micro-batch's backward ((200 + 200) / 4 ns); idle, not compute
    bubbles = {(t.ranks[0], t.label, t.dur_ps) for t in g.tasks if t.phase == "bubble"}
    assert (2, "pipeline fill", 50_000) in bubbles and (0, "pipeline drain", 100_000) in bubbles
    busy = g.compute_busy_ps()
    assert busy[0] == busy[2] == 6 * 100_000


def test_pipeline_without_pp_comm_is_counted(tmp_path: Path) -> None:
    g = aicb.read(_file(tmp_path, _head(tp=1, pp=2, gpus=2), [_line()]))
    assert g.skipped == {"pipeline transfers: pp_comm is 0": 1}
    assert not [t for t in g.tasks if t.kind == "p2p"]


def test_data_and_micro_loops(tmp_path: Path) -> None:
    # DATA: no forward or input-gradient collectives; the weight gradient, then the input
    # gradient of every layer but the first
    lines = [_line("ALLREDUCE 8192", "ALLREDUCE 8192", "ALLREDUCE 8192", f"l{i}") for i in range(2)]
    g = aicb.read(_file(tmp_path, "DATA", lines), gpus=2)
    assert [t.label for t in _comms(g)] == ["l1 L4 wg", "l0 L3 wg"]
    assert [t.label for t in g.tasks if t.ranks == (0,) and t.phase == "bwd"] == [
        "l1 L4 wg",
        "l1 L4 ig",
        "l0 L3 wg",
    ]
    # MICRO: every line's weight-gradient collective at once, no compute
    g = aicb.read(DATA / "all_gather.txt", gpus=4)
    comms = _comms(g)
    assert len(comms) == 19 and all(not t.deps for t in comms)
    assert {t.ranks for t in comms} == {(0, 1, 2, 3)}
    assert not [t for t in g.tasks if t.kind == "compute" and t.phase in ("fwd", "bwd")]


def test_checkpoints_recompute_the_forward(tmp_path: Path) -> None:
    head = _head(tp=1, gpus=1).replace(
        "checkpoints: 0 checkpoint_initiates: 0", "checkpoints: 1 0 checkpoint_initiates: 1 2"
    )
    g = aicb.read(_file(tmp_path, head, [_line(name=f"l{i}") for i in range(3)]))
    fwd = [t.label for t in g.tasks if t.phase == "fwd"]
    assert fwd == ["l0 L3 fwd", "l1 L4 fwd", "l2 L5 fwd", "l0 L3 fwd", "l1 L4 fwd"]
    with pytest.raises(JobError, match=r"line 1: checkpoints: layer 5 is not one of 0..2"):
        aicb.read(
            _file(tmp_path, head.replace("checkpoints: 1 0", "checkpoints: 1 5"), [_line()] * 3)
        )


@pytest.mark.parametrize(
    ("head", "lines", "message"),
    [
        (_head(), [_line("ALLRED 8")], r"line 3: fwd column: unknown communication type 'ALLRED'"),
        (_head(), [_line(wg="ALLREDUCE_XY 8")], r"line 3: wg column: unknown communication type 'ALLREDUCE_XY'"),
        (_head(), [_line(ig="ALLREDUCEALLTOALL 8")], r"'ALLREDUCEALLTOALL' \(SimAI's parser runs it as nothing\)"),
        (_head(extra=" foo: 3"), [_line()], r"line 1: unknown header field 'foo:'"),
        (_head().replace("all_gpus: 8", "all_gpus: x"), [_line()], r"line 1: all_gpus: not an integer: 'x'"),
        (_head(pp=3), [_line()], r"line 1: model_parallel_NPU_group 2 x pp 3 does not divide 8 GPUs"),
        ("HYBRID_DLRM", [_line()], r"line 1: unknown training loop 'HYBRID_DLRM'"),
        (_head().replace("all_gpus: 8 ", ""), [_line()], r"line 1: no all_gpus \(give workload.gpus\)"),
        (_head(gpus=10**7), [_line()], r"line 1: 10000000 GPUs x 1 lines is too large a graph to build"),
    ],
)  # fmt: skip
def test_errors_name_the_file_line_and_token(
    tmp_path: Path, head: str, lines: list[str], message: str
) -> None:
    p = _file(tmp_path, head, lines)
    with pytest.raises(JobError, match=message) as err:
        aicb.read(p)
    assert str(err.value).startswith(str(p)) and "\n" not in str(err.value)


def test_truncated_file(tmp_path: Path) -> None:
    text = (DATA / "L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt").read_text()
    p = tmp_path / "cut.txt"
    p.write_text(text[: len(text) // 2])
    with pytest.raises(JobError, match=r"cut.txt: line 2: says 12 layers, the file has \d+"):
        aicb.read(p, gpus=8)
    lines = text[: text.index("Llama_layer3") - 20].splitlines()
    lines[1] = str(len(lines) - 2)
    p.write_text("\n".join(lines))
    with pytest.raises(JobError, match=r"cut.txt: line 4: needs 12 columns, got \d+"):
        aicb.read(p, gpus=8)


# ----- real files (tests/workloads/data/aicb/README.md) ----------------------------------------
def _scenario(
    file: str, gpus: int | None, hosts: int, mode: str = "flow", per_server: int = 8
) -> dict[str, Any]:
    w: dict[str, Any] = {"kind": "aicb", "file": str(DATA / file), "gpus_per_server": per_server}
    if gpus is not None:
        w["gpus"] = gpus
    return {
        "seed": 1,
        "fabric": {
            "planes": 2,
            "t0s": max(1, hosts // 8),
            "hosts_per_t0": min(8, hosts),
            "t1s": 2,
            "host_gbps": 400.0,
            "fabric_gbps": 400.0,
        },
        "workload": w,
        "run": {"mode": mode},
    }


def _run(data: dict[str, Any]) -> Any:
    from openmrc.pipeline.run import execute
    from openmrc.pipeline.scenario import parse

    sc = parse(copy.deepcopy(data), name="t")
    return execute(sc, scenario_file="t.toml", overrides=[], workload={})


def test_real_megatron_tp2_file_runs_with_its_broadcast() -> None:
    g = aicb.read(DATA / "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt", gpus=16)
    bcast = [t for t in g.tasks if t.kind == "p2p"]
    assert [(t.ranks, t.size) for t in bcast[:2]] == [((0, 1), 16384), ((2, 3), 16384)]
    assert len(bcast) == 8 and not g.skipped
    out = _run(_scenario("L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt", 16, 16))
    (job,) = out.doc["jobs"]
    assert job["complete"] and job["skipped_collectives"] == []
    assert set(job["comm_time_us_by_phase"]) == {"tp", "dp"}


def test_real_zero3_file_gathers_are_in_the_trace_and_exposed() -> None:
    """The 12 per-layer ALLGATHERs of a DeepSpeed ZeRO-3 file: over DP, in the trace, and
    (blocking the backward pass) all of their time exposed."""
    from openmrc.pipeline.results import validate

    out = _run(_scenario("L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt", 8, 8, per_server=1))
    validate(out.doc)
    (job,) = out.doc["jobs"]
    assert job["skipped_collectives"] == []
    zero = job["comm_time_us_by_phase"]["zero"]
    assert zero > 0
    assert job["exposed_comm_us"] >= zero - 0.01
    names = [
        e["name"]
        for e in out.trace["traceEvents"]
        if e["ph"] == "b" and e["cat"] == "comm.zero" and e["tid"] == 0
    ]
    assert len(names) == 12 and all(" ig" in n for n in names)


def test_real_moe_files_run_their_expert_groups() -> None:
    g = aicb.read(DATA / "workload_ep_test.txt")
    phases = {t.phase for t in _comms(g)}
    assert {"tp", "ep", "dp", "dp_ep"} <= phases
    assert {len(t.ranks) for t in _comms(g) if t.phase == "ep"} == {4}
    # tp 4 x dp 8 on 32 GPUs, ep 4: DP_EP groups of 8 / 4 = 2
    assert {len(t.ranks) for t in _comms(g) if t.phase == "dp_ep"} == {2}
    assert g.skipped == {"REDUCESCATTER of 0 bytes": 4}
    out = _run(_scenario("workload_ep_test.txt", None, 32))
    (job,) = out.doc["jobs"]
    assert job["complete"]
    assert job["skipped_collectives"] == [{"reason": "REDUCESCATTER of 0 bytes", "count": 4}]
    assert any(
        "4 collectives of its workload file ran nothing" in w
        for w in out.doc["provenance"]["warnings"]
    )


def test_real_pipeline_moe_file_reads() -> None:
    """DeepSeek-16B, tp 2 x pp 2 x dp 8, ep 4: stages, expert groups and pipeline transfers."""
    g = aicb.read(DATA / "DeepSeek-16B-tp2-pp2-dp2-ep4-g32-mpdeptip.txt")
    assert g.ranks == 32
    pp = [t for t in g.tasks if t.phase == "pp"]
    assert {t.size for t in pp if t.label == "pp first activation"} == {8388608}
    assert len(pp) == 4 * 2 * 8  # 2 x 8 chains, 4 transfers each
    ep = {t.ranks for t in _comms(g) if t.phase == "ep"}
    assert (0, 4, 8, 12) in ep and (2, 6, 10, 14) in ep
    assert sum(1 for t in g.tasks if t.phase == "bubble") == 32


def test_quick_start_scenarios_in_the_docs_run() -> None:
    """docs/workloads.md's quick start: its TOML, with a real file in place of the user's."""
    import re
    import tomllib

    from openmrc.pipeline.run import execute
    from openmrc.pipeline.scenario import parse

    doc = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    aicb_block, chakra_block = re.findall(r"```toml\n(.*?)```", doc, re.S)[:2]
    data = tomllib.loads(aicb_block)
    assert data["workload"]["kind"] == "aicb" and data["run"]["mode"] == "flow"
    data["workload"]["file"] = str(DATA / "workload_ep_test.txt")
    out = execute(parse(data, name="q"), scenario_file="q.toml", overrides=[], workload={})
    assert out.doc["jobs"][0]["complete"]
    chak = tomllib.loads(chakra_block)["workload"]
    assert chak["kind"] == "chakra"
    data["workload"] = dict(chak, files=str(DATA.parent / "chakra" / "all_reduce"))
    out = execute(parse(data, name="q"), scenario_file="q.toml", overrides=[], workload={})
    assert out.doc["jobs"][0]["complete"] and out.doc["jobs"][0]["gpus"] == 4


def test_header_as_simai_and_aicb_write_it() -> None:
    """SimAI's example header (pp_comm without its colon) and AICB's float pp_comm."""
    h = aicb.parse_header(
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 16 pp: 12 vpp: 8 "
        "ga: 24 all_gpus: 9216 checkpoints: 0 checkpoint_initiates: 0 pp_comm 50331648",
        "x",
    )
    assert h.fields == {
        "model_parallel_NPU_group": 2,
        "ep": 16,
        "pp": 12,
        "vpp": 8,
        "ga": 24,
        "all_gpus": 9216,
        "pp_comm": 50331648,
    }
    h = aicb.parse_header(
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD pp_comm: 8388608.0 checkpoints: 2 1 3", "x"
    )
    assert h.fields == {"pp_comm": 8388608} and h.checkpoints == [1, 3]
    # the old header (no ep, pp, ga, all_gpus): SimAI's defaults, the GPUs from the scenario
    g = aicb.read(DATA / "L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt", gpus=4)
    assert g.ranks == 4


def test_zero3_gather_on_one_gpu_names_the_group_it_would_use(tmp_path: Path) -> None:
    g = aicb.read(_file(tmp_path, _head(tp=1, gpus=1), [_line(ig="ALLGATHER 4096")]))
    assert g.skipped == {"ALLGATHER over a one-rank DP group": 1}


def test_damaged_files_fail_with_one_line(tmp_path: Path) -> None:
    """Tokens of a real file replaced at random: a graph or one JobError line."""
    import random

    rng = random.Random(7)
    text = (DATA / "workload_ep_test.txt").read_text()
    tokens = ["NONE", "ALLREDUCE", "ALLTOALL_EP", "x", "-1", "0", "9" * 20, "1.5", ":", "ep:", "3"]
    p = tmp_path / "w.txt"
    for _ in range(300):
        lines = text.split("\n")
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(lines))
            cols = lines[i].split()
            if cols:
                cols[rng.randrange(len(cols))] = rng.choice(tokens)
                lines[i] = "\t".join(cols)
        p.write_text("\n".join(lines))
        try:
            aicb.read(p)
        except JobError as exc:
            assert str(exc).startswith(str(p)) and "\n" not in str(exc)
