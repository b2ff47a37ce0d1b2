"""Model arithmetic of a training job: parameters, FLOPs, bytes moved, compute time.

A :class:`ModelSpec` describes a dense (GPT/LLaMA-style) or MoE transformer, a
:class:`Parallelism` how it is cut over GPUs (TP, PP, DP with a ZeRO stage,
EP), a :class:`GpuSpec` the accelerator (the roofline).  Every formula is in
docs/training.md, with the same names as here; nothing here knows about the
fabric.

Conventions (Megatron-LM's, Narayanan et al., SC'21):

* ``h`` hidden size, ``f`` MLP hidden size (default ``4h``), ``s`` sequence
  length, ``V`` vocabulary, ``L`` layers, ``b`` micro-batch size, ``B`` global
  batch size, ``t`` / ``p`` / ``d`` / ``e`` the TP, PP, DP and EP degrees.
* One layer's parameters: attention ``4h^2 + 4h`` (QKV and output projection
  with biases), MLP ``2hf + f + h``, two layer norms ``4h``.  The word
  embedding ``Vh`` is tied with the output layer; the final layer norm ``2h``.
* FLOPs per token of one layer, forward: ``8h^2 + 4hf`` (matmuls, 2 FLOPs per
  multiply-add) ``+ 4sh`` (scores and the weighted sum of values); the logit
  layer ``2hV``.  Backward is twice the forward; recomputation adds one forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Bytes per element of the dtypes a job may name.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


class JobError(ValueError):
    """A job description is wrong; the message names the field and the reason."""


def _pos_int(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise JobError(f"{name}: must be a positive integer, got {value!r}")
    return value


def _pos_num(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise JobError(f"{name}: must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise JobError(f"{name}: must be finite, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ModelSpec:
    """A transformer: dense when ``experts == 0``, MoE (every layer's MLP) otherwise."""

    layers: int = 24
    hidden: int = 2048
    heads: int = 16
    seq_len: int = 2048
    vocab: int = 51200
    #: MLP hidden size; 0 means ``4 * hidden``.
    ffn_hidden: int = 0
    #: tokens per micro-batch row is ``seq_len``; ``micro_batch`` rows per micro-batch.
    micro_batch: int = 1
    global_batch: int = 64
    dtype: str = "bf16"
    #: MoE: experts per MoE layer (0: dense), experts each token goes to, capacity factor.
    experts: int = 0
    top_k: int = 2
    capacity_factor: float = 1.0
    #: activation recomputation (full): the backward pass runs the forward again.
    recompute: bool = False

    def validate(self) -> None:
        """Raise JobError naming the first bad field."""
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "micro_batch"):
            _pos_int(getattr(self, name), f"job.model.{name}")
        _pos_int(self.global_batch, "job.model.global_batch")
        if not isinstance(self.ffn_hidden, int) or self.ffn_hidden < 0:
            raise JobError(f"job.model.ffn_hidden: must be >= 0, got {self.ffn_hidden!r}")
        if self.hidden % self.heads:
            raise JobError(f"job.model.heads: {self.heads} does not divide hidden = {self.hidden}")
        if self.dtype not in DTYPE_BYTES:
            raise JobError(
                f"job.model.dtype: {self.dtype!r} is not one of {', '.join(DTYPE_BYTES)}"
            )
        if not isinstance(self.experts, int) or isinstance(self.experts, bool) or self.experts < 0:
            raise JobError(f"job.model.experts: must be >= 0, got {self.experts!r}")
        if self.experts:
            _pos_int(self.top_k, "job.model.top_k")
            if self.top_k > self.experts:
                raise JobError(f"job.model.top_k: {self.top_k} exceeds experts = {self.experts}")
            _pos_num(self.capacity_factor, "job.model.capacity_factor")

    @property
    def f(self) -> int:
        """MLP hidden size."""
        return self.ffn_hidden or 4 * self.hidden

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of weights, activations and gradients."""
        return DTYPE_BYTES[self.dtype]

    # ----- parameters ---------------------------------------------------------------
    def attn_params(self) -> int:
        """Attention parameters of one layer: ``4h^2 + 4h``."""
        h = self.hidden
        return 4 * h * h + 4 * h

    def expert_params(self) -> int:
        """One MLP (an expert of a MoE layer): ``2hf + f + h``."""
        return 2 * self.hidden * self.f + self.f + self.hidden

    def layer_params(self) -> int:
        """One layer: attention + MLP (or ``experts`` MLPs and the router ``hE``) + norms ``4h``."""
        h = self.hidden
        mlp = self.expert_params() if not self.experts else self.experts * self.expert_params()
        router = h * self.experts if self.experts else 0
        return self.attn_params() + mlp + router + 4 * h

    def embedding_params(self) -> int:
        """Word embedding ``Vh`` (tied with the output layer)."""
        return self.vocab * self.hidden

    def params(self) -> int:
        """All parameters: ``L * layer + Vh + 2h``."""
        return self.layers * self.layer_params() + self.embedding_params() + 2 * self.hidden

    # ----- FLOPs ----------------------------------------------------------------------
    def layer_fwd_flops_per_token(self) -> int:
        """Forward FLOPs of one layer per token: ``8h^2 + 4sh`` + MLP ``4hf`` (x top_k, + router ``2hE``)."""
        h, s = self.hidden, self.seq_len
        attn = 8 * h * h + 4 * s * h
        mlp = 4 * h * self.f
        if self.experts:
            mlp = self.top_k * mlp + 2 * h * self.experts
        return attn + mlp

    def logit_fwd_flops_per_token(self) -> int:
        """Forward FLOPs of the output (logit) layer per token: ``2hV``."""
        return 2 * self.hidden * self.vocab

    def tokens_per_micro_batch(self) -> int:
        """``b * s``."""
        return self.micro_batch * self.seq_len

    def activation_bytes(self) -> int:
        """One micro-batch's activation at a layer boundary: ``b * s * h * dtype``."""
        return self.micro_batch * self.seq_len * self.hidden * self.dtype_bytes


@dataclass(frozen=True)
class Parallelism:
    """How a job is cut: TP inside a server, PP stages, DP replicas (ZeRO stage), EP."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    #: expert parallelism: experts spread over ``ep`` ranks of each DP group (divides dp).
    ep: int = 1
    #: ZeRO / distributed-optimizer stage: 0 (plain all-reduce), 1, 2 or 3.
    zero: int = 0
    #: gradient buckets (Megatron's DDP buckets, overlapped with the backward pass);
    #: 0 means one bucket per 40M parameters of a rank (Megatron's default bucket size).
    buckets: int = 0

    def validate(self, model: ModelSpec) -> None:
        """Raise JobError naming the first bad field."""
        for name in ("tp", "pp", "dp", "ep"):
            _pos_int(getattr(self, name), f"job.parallel.{name}")
        if self.zero not in (0, 1, 2, 3):
            raise JobError(f"job.parallel.zero: must be 0, 1, 2 or 3, got {self.zero!r}")
        if not isinstance(self.buckets, int) or self.buckets < 0:
            raise JobError(f"job.parallel.buckets: must be >= 0, got {self.buckets!r}")
        if model.layers % self.pp:
            raise JobError(
                f"job.parallel.pp: {self.pp} stages do not divide layers = {model.layers}"
            )
        if model.heads % self.tp:
            raise JobError(f"job.parallel.tp: {self.tp} does not divide heads = {model.heads}")
        if self.dp % self.ep:
            raise JobError(f"job.parallel.ep: {self.ep} does not divide dp = {self.dp}")
        if self.ep > 1 and not model.experts:
            raise JobError("job.parallel.ep: expert parallelism needs a MoE model (experts > 0)")
        if model.experts and model.experts % self.ep:
            raise JobError(f"job.parallel.ep: {self.ep} does not divide experts = {model.experts}")
        rows = model.global_batch
        if rows % (self.dp * model.micro_batch):
            raise JobError(
                f"job.model.global_batch: {rows} is not a multiple of dp x micro_batch "
                f"= {self.dp * model.micro_batch}"
            )

    @property
    def gpus(self) -> int:
        """``t * p * d``."""
        return self.tp * self.pp * self.dp

    def micro_batches(self, model: ModelSpec) -> int:
        """Micro-batches per pipeline per iteration: ``B / (d * b)``."""
        return model.global_batch // (self.dp * model.micro_batch)


@dataclass(frozen=True)
class GpuSpec:
    """The accelerator and its server: the roofline and the scale-up domain.

    Defaults: an H100 SXM (989 TFLOP/s dense BF16, 3.35 TB/s HBM3, NVLink 4 at
    450 GB/s per direction; NVIDIA H100 datasheet) at 45 % of peak, a typical
    Megatron MFU for GPT-3-size models (Narayanan et al. report 52 % of A100 peak).
    """

    tflops: float = 989.0
    mfu: float = 0.45
    hbm_gbytes_s: float = 3350.0
    #: scale-up (NVLink) bandwidth per GPU per direction, GB/s.
    nvlink_gbytes_s: float = 450.0
    gpus_per_server: int = 8

    def validate(self) -> None:
        """Raise JobError naming the first bad field."""
        for name in ("tflops", "hbm_gbytes_s", "nvlink_gbytes_s"):
            _pos_num(getattr(self, name), f"job.gpu.{name}")
        mfu = _pos_num(self.mfu, "job.gpu.mfu")
        if mfu > 1:
            raise JobError(f"job.gpu.mfu: must be in (0, 1], got {self.mfu!r}")
        _pos_int(self.gpus_per_server, "job.gpu.gpus_per_server")

    def compute_ps(self, flops: float, mem_bytes: float) -> int:
        """Roofline: ``max(flops / (peak * mfu), bytes / hbm)`` in picoseconds."""
        t_flops = flops / (self.tflops * 1e12 * self.mfu)
        t_mem = mem_bytes / (self.hbm_gbytes_s * 1e9)
        return round(max(t_flops, t_mem) * 1e12)

    def scaleup_ps(self, nbytes: float) -> int:
        """Time to move ``nbytes`` out of one GPU over NVLink, in picoseconds."""
        return round(nbytes / (self.nvlink_gbytes_s * 1e9) * 1e12)


@dataclass(frozen=True)
class StageArithmetic:
    """What one rank of one pipeline stage computes and moves per iteration."""

    layers: int
    #: parameters held by one rank (after TP; experts after EP).
    params_rank: int
    #: of which expert parameters (their gradients reduce over dp / ep ranks only).
    expert_params_rank: int
    #: gradient bytes of one rank (``params_rank * dtype``).
    grad_bytes: int
    fwd_flops: float
    bwd_flops: float
    #: PP: activation bytes one rank sends to the next stage per micro-batch.
    p2p_bytes: int
    #: EP: bytes one rank sends in one all-to-all (dispatch or combine), per layer.
    a2a_bytes: int
    #: TP: all-reduce bytes per layer per micro-batch inside the server (forward).
    tp_bytes: int


def stage_arithmetic(model: ModelSpec, par: Parallelism, stage: int) -> StageArithmetic:
    """Per-rank arithmetic of pipeline ``stage`` (formulas in docs/training.md)."""
    t = par.tp
    lps = model.layers // par.pp
    h, db = model.hidden, model.dtype_bytes
    expert = model.experts * model.expert_params() if model.experts else 0
    dense_layer = model.layer_params() - expert
    params = lps * (dense_layer // t + expert // (t * par.ep))
    expert_rank = lps * expert // (t * par.ep)
    if stage == 0:
        params += model.embedding_params() // t
    if stage == par.pp - 1:
        params += 2 * h
        if par.pp > 1:
            params += model.embedding_params() // t  # the tied output layer's copy
    tokens = model.tokens_per_micro_batch()
    fwd = lps * model.layer_fwd_flops_per_token() * tokens / t
    if stage == par.pp - 1:
        fwd += model.logit_fwd_flops_per_token() * tokens / t
    bwd = 2 * fwd + (fwd if model.recompute else 0)
    act = model.activation_bytes()
    a2a = 0
    if model.experts:
        a2a = math.ceil(act * model.top_k * model.capacity_factor / t)
    return StageArithmetic(
        layers=lps,
        params_rank=params,
        expert_params_rank=expert_rank,
        grad_bytes=params * db,
        fwd_flops=fwd,
        bwd_flops=bwd,
        p2p_bytes=act // t,
        a2a_bytes=a2a,
        tp_bytes=act,
    )


__all__ = [
    "DTYPE_BYTES",
    "GpuSpec",
    "JobError",
    "ModelSpec",
    "Parallelism",
    "StageArithmetic",
    "stage_arithmetic",
]
