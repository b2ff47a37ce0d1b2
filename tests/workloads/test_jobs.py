"""Training jobs: model arithmetic against hand-computed values, the 1F1B order, the graph."""

from __future__ import annotations

import pytest

from openmrc.workloads.jobs import (
    GpuSpec,
    JobError,
    JobSpec,
    ModelSpec,
    Parallelism,
    build_iteration,
)
from openmrc.workloads.jobs.graph import one_f_one_b
from openmrc.workloads.jobs.model import stage_arithmetic

# A tiny model worked by hand (docs/training.md has the formulas):
#   h = 64, f = 4h = 256, s = 32, V = 100, L = 2, b = 2, B = 8, bf16 (2 bytes)
TINY = ModelSpec(layers=2, hidden=64, heads=4, seq_len=32, vocab=100, micro_batch=2, global_batch=8)
PAR = Parallelism(tp=2, pp=2, dp=2)


def test_parameters_by_hand() -> None:
    # attention 4h^2 + 4h = 16384 + 256
    assert TINY.attn_params() == 16640
    # MLP 2hf + f + h = 32768 + 256 + 64
    assert TINY.expert_params() == 33088
    # layer = attention + MLP + 4h of norms = 12h^2 + 13h = 49152 + 832
    assert TINY.layer_params() == 49984
    # total = 2 layers + Vh (6400) + 2h (128)
    assert TINY.params() == 106496


def test_stage_bytes_by_hand() -> None:
    s0 = stage_arithmetic(TINY, PAR, 0)
    s1 = stage_arithmetic(TINY, PAR, 1)
    # stage 0: one layer / TP 2 (24992) + embedding / TP 2 (3200)
    assert s0.params_rank == 28192
    assert s0.grad_bytes == 2 * 28192
    # stage 1: one layer / 2 + final norm 2h (128) + the tied output layer's copy (3200)
    assert s1.params_rank == 28320
    assert s1.grad_bytes == 56640
    # activation of one micro-batch b*s*h*2 = 8192 bytes, 1/TP of it per rank
    assert s0.p2p_bytes == 4096
    # forward FLOPs per token of a layer: 8h^2 + 4sh + 4hf = 32768 + 8192 + 65536
    assert TINY.layer_fwd_flops_per_token() == 106496
    # stage 0 forward, one micro-batch (64 tokens), per TP rank
    assert s0.fwd_flops == 106496 * 64 / 2
    assert s0.bwd_flops == 2 * s0.fwd_flops
    # the last stage adds the logits 2hV per token
    assert s1.fwd_flops == (106496 + 2 * 64 * 100) * 64 / 2


def test_moe_bytes_by_hand() -> None:
    moe = ModelSpec(
        layers=2, hidden=64, heads=4, seq_len=32, vocab=100, micro_batch=2, global_batch=8,
        experts=4, top_k=2,
    )  # fmt: skip
    par = Parallelism(tp=1, pp=1, dp=4, ep=4)
    a = stage_arithmetic(moe, par, 0)
    # layer: attention 16640 + 4 experts x 33088 + router hE 256 + norms 256
    assert moe.layer_params() == 16640 + 4 * 33088 + 256 + 256
    # one expert per rank (E / ep = 1): 2 layers x 33088 expert parameters
    assert a.expert_params_rank == 2 * 33088
    # all-to-all per layer: b*s*h*2 bytes x top_k x capacity 1.0
    assert a.a2a_bytes == 8192 * 2
    g = build_iteration(JobSpec("moe", moe, par, GpuSpec(gpus_per_server=1)))
    a2a = [t for t in g.tasks if t.kind == "alltoall"]
    # 1 micro-batch (B / (dp b) = 8 / 8) x (F + B) x 2 layers x (dispatch + combine)
    assert len(a2a) == 1 * 2 * 2 * 2
    assert {t.size for t in a2a} == {16384}


def test_graph_transfers_by_hand() -> None:
    g = build_iteration(JobSpec("tiny", TINY, PAR, GpuSpec(gpus_per_server=2)))
    p2p = [t for t in g.tasks if t.kind == "p2p"]
    # 4 pipelines (tp x dp) x 2 micro-batches x (activation + gradient) x 1 stage boundary
    assert len(p2p) == 16
    assert {t.size for t in p2p} == {4096}
    # DP: every (stage, tp) group all-reduces exactly its gradient bytes, over 2 ranks
    for stage, grad in ((0, 56384), (1, 56640)):
        for tp in range(2):
            sizes = [
                t.size
                for t in g.tasks
                if t.kind == "allreduce" and t.label.startswith(f"allreduce grads s{stage} t{tp} ")
            ]
            assert sum(sizes) == grad
    assert all(len(t.ranks) == 2 for t in g.tasks if t.kind == "allreduce")
    # compute serial per rank: every compute task but the first of a rank depends on its previous
    last: dict[int, int] = {}
    for i, t in enumerate(g.tasks):
        if t.kind == "compute":
            r = t.ranks[0]
            if r in last:
                assert last[r] in t.deps
            last[r] = i


def test_zero_stages_change_the_collectives() -> None:
    par1 = Parallelism(tp=1, pp=1, dp=4, zero=1)
    g = build_iteration(JobSpec("z1", TINY, par1, GpuSpec(gpus_per_server=1)))
    kinds = {t.kind for t in g.tasks if t.kind != "compute"}
    assert kinds == {"reducescatter", "allgather"}
    rs = sum(t.size for t in g.tasks if t.kind == "reducescatter")
    ag = sum(t.size for t in g.tasks if t.kind == "allgather")
    assert rs == ag == 2 * TINY.params()
    g3 = build_iteration(JobSpec("z3", TINY, Parallelism(dp=4, zero=3), GpuSpec(gpus_per_server=1)))
    # ZeRO-3 gathers the parameters before each forward and backward (1 micro-batch),
    # one after the other, and not after the step (they stay sharded)
    ag3 = [i for i, t in enumerate(g3.tasks) if t.kind == "allgather"]
    assert len(ag3) == 2
    assert ag3[0] in g3.tasks[ag3[1]].deps


def test_one_f_one_b_order() -> None:
    assert one_f_one_b(0, 4, 6) == [
        ("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("F", 4),
        ("B", 1), ("F", 5), ("B", 2), ("B", 3), ("B", 4), ("B", 5),
    ]  # fmt: skip
    assert one_f_one_b(3, 4, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]


def test_roofline_and_bad_input() -> None:
    gpu = GpuSpec(tflops=100.0, mfu=0.5, hbm_gbytes_s=1000.0)
    # 1e12 FLOPs at 50 TFLOP/s: 20 ms; memory-bound when bytes / 1 TB/s is longer
    assert gpu.compute_ps(1e12, 0) == 20_000_000_000
    assert gpu.compute_ps(0, 1e9) == 1_000_000_000
    with pytest.raises(JobError, match=r"job.parallel.pp"):
        Parallelism(pp=3).validate(TINY)
    with pytest.raises(JobError, match=r"job.parallel.tp"):
        JobSpec("x", TINY, Parallelism(tp=4), GpuSpec(gpus_per_server=2)).validate()
    with pytest.raises(JobError, match=r"job.model.global_batch"):
        Parallelism(dp=3).validate(TINY)
