"""Kernel time of one transformer layer on one GPU, per micro-batch, with the roofline model.

Every kernel takes max(FLOPs / (η_gemm·C), bytes / (η_hbm·BW)) (scaling book "Rooflines"; Calculon's "roofline"
processing time, Isaev et al. SC'23): the four GEMMs of a layer, the attention core, and the memory-bound
element-wise kernels (norms, residual/bias/dropout, activation, rotary) whose HBM traffic is counted tensor by
tensor. Backward GEMMs are dgrad + wgrad (2× forward). Sequence parallelism shards the element-wise work that plain
TP replicates, which is where its speed-up in Korthikanti et al. 2022 (Table 4) comes from.

All functions take scalars or numpy arrays for the layout knobs and broadcast.
"""

from __future__ import annotations

import numpy as np

from planner.checks import checked_array, tokens_and_tp
from planner.cost.flops import attention_score_flops_per_token
from planner.cost.params import kv_dim_per_rank
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec


def kernel_time_s(flops, nbytes, hw: HardwareSpec):
    """Roofline time of one kernel: the slower of its math and its HBM traffic."""
    return np.maximum(np.asarray(flops) / (hw.gemm_efficiency * hw.peak_flops),
                      np.asarray(nbytes) / (hw.hbm_efficiency * hw.hbm_bw_bytes_per_s))


def gemm_time_s(rows, inner, cols, hw: HardwareSpec, elem_bytes=2):
    """[rows × inner] @ [inner × cols]: 2·rows·inner·cols FLOPs, reads both operands and writes the result.

    Each output tile pays a fixed prologue/epilogue besides its K-loop, so efficiency grows with the inner
    dimension: η·K/(K + K½), K½ per hardware (small-K GEMMs such as the attention output projection under TP
    are the slow ones).
    """
    rows, inner, cols = (np.asarray(x, dtype=float) for x in (rows, inner, cols))   # int32 products overflow
    flops = 2.0 * rows * inner * cols
    nbytes = elem_bytes * (rows * inner + inner * cols + rows * cols)
    k_factor = 1.0 + hw.gemm_k_half / inner
    return kernel_time_s(flops * k_factor, nbytes, hw)


def layer_gemm_time_s(m: ModelSpec, seq_len, micro_batch, tp, hw: HardwareSpec, elem_bytes=2):
    """Forward time of QKV, attention-out, MLP-in (gate+up when gated) and MLP-out, TP-sharded (Megatron 2019)."""
    n, t = tokens_and_tp(seq_len, micro_batch, tp)
    return (column_parallel_gemm_time_s(m, seq_len, micro_batch, tp, hw, elem_bytes)
            + gemm_time_s(n, m.q_dim / t, m.hidden, hw, elem_bytes)
            + gemm_time_s(n, m.ffn_hidden / t, m.hidden, hw, elem_bytes))


def column_parallel_gemm_time_s(m: ModelSpec, seq_len, micro_batch, tp, hw: HardwareSpec, elem_bytes=2):
    """Forward time of the column-parallel GEMMs, QKV and MLP-in (gate+up when gated): the ones whose backward
    collectives Megatron's async TP backward overlaps (Korthikanti §4.2.2)."""
    n, t = tokens_and_tp(seq_len, micro_batch, tp)
    mlp_in = (2 if m.gated_mlp else 1) * m.ffn_hidden
    return (gemm_time_s(n, m.hidden, m.q_dim / t + 2 * kv_dim_per_rank(m, t), hw, elem_bytes)
            + gemm_time_s(n, m.hidden, mlp_in / t, hw, elem_bytes))


# First-generation FlashAttention kernels run at half the rate of FlashAttention-2-class ones, the kernels the
# hardware's attention efficiency describes: "FlashAttention-2 is 1.7-3.0x faster than FlashAttention, 1.3-2.5x
# faster than FlashAttention in Triton" (Dao 2023, arXiv:2307.08691 §4.1; "around 2x" on A100).
FLASH_V1_RELATIVE_RATE = 0.5


def attention_core_time_s(m: ModelSpec, seq_len, micro_batch, tp, flash_attention, hw: HardwareSpec,
                          elem_bytes=2, backward=False, cp=1, flash_gen=2):
    """Time of softmax(QKᵀ)V for the heads on this GPU, forward (or backward). `seq_len` is the whole sequence.

    FlashAttention (Dao et al. 2022) computes only the unmasked causal half (with a sliding window, FlashAttention
    2.3's window_size, only the band of tiles inside it), in one kernel whose HBM traffic is
    Q, K, V and O, at the hardware's attention-kernel efficiency (FlashAttention-2 reaches 50-73% of A100 peak,
    Dao 2023); its backward does 2.5x the forward FLOPs (it recomputes QKᵀ). Unfused attention (Megatron
    2019-22) computes the full s×s scores and moves them through HBM. Forward, bytes per score element: QKᵀ
    writes e, the fused scale-mask-softmax reads and writes e, dropout reads e and writes e plus a 1-byte mask,
    AV reads e (13 with dropout, 8 without). Backward: dP written, dropout-backward reads it and the mask and
    writes, softmax-backward reads P and dP and writes dS, dQ and dK read dS, dV reads P (19 with dropout,
    14 without); the matmuls do 2x the forward FLOPs.

    Context parallelism (cp ranks): each rank holds s/cp queries and sees every key and value once (Megatron-Core
    splits the sequence into 2·cp chunks so the causal work is the same on every rank): 1/cp of the FLOPs, its own
    Q and O, all of K and V. `flash_gen` 1 (FlashAttention-1 or its Triton port) runs at FLASH_V1_RELATIVE_RATE of
    the FlashAttention-2-class efficiency, 3 (FlashAttention-3 class: FA3, cuDNN's fused attention on Hopper) at
    the profile's attention_gen3_rate of it (Shah et al. 2024).
    """
    s = checked_array(seq_len, "seq_len").astype(float)
    b = checked_array(micro_batch, "micro_batch", whole=True).astype(float)
    t, c = checked_array(tp, "tp", whole=True), checked_array(cp, "cp", whole=True)
    fa = np.asarray(flash_attention, dtype=bool)
    # fused: the causal half, or a sliding window's band; unfused: every score, the window masked
    flops = b * s * attention_score_flops_per_token(m, s, causal_halved=fa, windowed=fa) / t / c
    if backward:
        flops = flops * np.where(fa, 2.5, 2.0)
    qkvo = elem_bytes * b * s * (2 * m.q_dim / t / c + 2 * kv_dim_per_rank(m, t)) * (2 if backward else 1)
    scores = b * m.heads / t * s * s / c
    drop = 1.0 if m.dropout else 0.0
    per_score = (7 if backward else 4) * elem_bytes + drop * (2 * elem_bytes + 1)
    gen = np.asarray(flash_gen)
    fused_eff = hw.attention_efficiency * np.where(gen == 1, FLASH_V1_RELATIVE_RATE, np.where(
        gen == 3, hw.attention_gen3_rate or 1.0, 1.0))      # generation 3 only where the profile has its rate
    math_s = flops / (np.where(fa, fused_eff, hw.gemm_efficiency) * hw.peak_flops)
    mem_s = (qkvo + np.where(fa, 0.0, scores * per_score)) / (hw.hbm_efficiency * hw.hbm_bw_bytes_per_s)
    return np.maximum(math_s, mem_s)


def layer_elementwise_bytes(m: ModelSpec, seq_len, micro_batch, tp, sp, elem_bytes=2, eager=False):
    """HBM bytes moved by one layer's memory-bound kernels in the forward pass.

    Two norms (four with post_norms; read + write h per token each), two fused bias-dropout-residual adds (read 2, write
    1, plus a 1-byte mask with dropout), the MLP activation (GeLU: read 1, write 1 of F; SwiGLU: read 2, write 1),
    and rotary embeddings on Q and K when positions are not learned. Norm and residual work is replicated across TP
    ranks unless sequence parallelism shards it. A parallel residual runs as GPT-NeoX's layer does (gpt_j_residual,
    megatron/model/transformer.py): bias-dropout of the attention output (read 1, write 1), bias-dropout-add of the
    MLP output onto it (read 2, write 1), both on the TP ranks' partial sums of the whole sequence, before the one
    reduction, so SP does not shard them; then the layer input added to the reduced sum (read 2, write 1).
    `eager`: the same ops as separate PyTorch kernels (eager_extra_bytes).
    """
    sb, t = tokens_and_tp(seq_len, micro_batch, tp)
    e, h, drop = elem_bytes, m.hidden, (1.0 if m.dropout else 0.0)
    if m.parallel_residual:
        pre_reduction, residual = (5 * e + 2 * drop) * h, 3 * e * h
    else:
        pre_reduction, residual = 0.0, 2 * ((3 * e + drop) * h)
    per_token_replicated = m.layer_norms * (2 * e * h) + residual
    act = (3 if m.gated_mlp else 2) * e * m.ffn_hidden
    rope = 0.0 if m.learned_positions else 2 * e * (m.q_dim / t + kv_dim_per_rank(m, t))
    fused = per_token_replicated / np.where(sp, t, 1) + pre_reduction + act / t + rope
    extra = eager_extra_bytes(m, t, sp, e) if np.any(eager) else 0.0
    return sb * (fused + np.where(eager, extra, 0.0))


# Eager PyTorch runs each element-wise op of a Llama block as its own kernel, counted here from torchtitan's model
# code (torchtitan/models/norms.py RMSNorm, models/llama/model.py apply_rotary_emb, repeat_kv, FeedForward), bytes
# per element and kernels beyond the fused kernels above (one per op: Megatron/Transformer Engine, torch.compile).
EAGER_RMSNORM_FP32_BYTES = 28       # its fp32 traffic: x.float() (e + 4), pow(2) (8), mean (4), x * rsqrt (8),
                                    # type_as (4 + e), * weight (2e): 28 + 4e in all, against one kernel's 2e
EAGER_ROPE_EXTRA_BYTES = 16         # q and k each: .float() (e + 4), complex multiply (8), type_as (4 + e), against 2e
EAGER_RMSNORM_EXTRA_KERNELS = 7     # 8 kernels (float, pow, mean, + eps, rsqrt, mul, type_as, mul weight) for 1
EAGER_ROPE_EXTRA_KERNELS = 5        # 3 for q and 3 for k, for 1


def eager_extra_bytes(m: ModelSpec, tp, sp, elem_bytes=2):
    """HBM bytes per token one layer's forward moves in eager PyTorch beyond the fused kernels (torchtitan without
    torch.compile): the fp32-upcast RMSNorm (EAGER_RMSNORM_FP32_BYTES + 2e per element, per norm); dropout apart from
    the residual add (2e); SiLU apart from the gate product (2e per F element); RoPE through complex fp32
    (EAGER_ROPE_EXTRA_BYTES per Q and K element); and under GQA, repeat_kv copying K and V into full heads (read
    the K/V heads, write the query heads' worth: 2e per K/V and per Q element; torchtitan's code makes that copy
    compiled too, while Megatron's fused attention reads the K/V heads as they are). LayerNorm and GeLU are single
    kernels in eager PyTorch too (nn.LayerNorm, F.gelu): nothing extra."""
    t, e, h = np.asarray(tp), elem_bytes, m.hidden
    q, kv = m.q_dim / t, kv_dim_per_rank(m, t)
    norms = m.layer_norms * (EAGER_RMSNORM_FP32_BYTES + 2 * e) * h if m.norm == "rmsnorm" else 0.0
    dropout = 2 * (2 * e) * h if m.dropout else 0.0
    replicated = (norms + dropout) / np.where(sp, t, 1)          # sharded by SP like the fused kernels
    glu = 2 * e * m.ffn_hidden / t if m.gated_mlp else 0.0
    rope = 0.0 if m.learned_positions else EAGER_ROPE_EXTRA_BYTES * (q + kv)
    gqa = 2 * e * (kv + q) if m.kv_heads < m.heads else 0.0
    return replicated + glu + rope + gqa


def elementwise_time_s(nbytes, hw: HardwareSpec):
    return np.asarray(nbytes) / (hw.hbm_efficiency * hw.hbm_bw_bytes_per_s)


# HBM bytes per logit element of the fp32 cross-entropy, kernel by kernel as in Megatron-Core's fused vocab-parallel
# cross-entropy (megatron/core/fusions/fused_cross_entropy.py): upcast with the row max (read 2, write 4), subtract
# and exp in place (read 4, write 4), row sum (read 4), normalise to the softmax kept for backward (read 4, write 4);
# backward, scale in place by the incoming gradient (read 4, write 4) and cast back to 16 bits (read 4, write 2).
# That path is --cross-entropy-loss-fusion, on in NeMo's model configs; Megatron's default unfused path moves 52,
# PyTorch's F.cross_entropy under autocast 36 or more.
LOSS_BYTES_PER_LOGIT = 40.0
# Gemma 2's final soft-capping in 16 bits before the loss (transformers' Gemma2ForCausalLM): divide, tanh, multiply
# (read 2, write 2 each); backward, the multiply's and the divide's scaling (read 2, write 2 each) and tanh's
# (read its output and the gradient, write 2).
SOFTCAP_BYTES_PER_LOGIT = 26.0


def logits_time_s(m: ModelSpec, seq_len, micro_batch, tp, hw: HardwareSpec, elem_bytes=2):
    """Forward + backward of the output layer and the vocab-parallel cross-entropy on fp32 logits (last stage).

    GEMM [n × h] @ [h × V/t] forward and 2× backward; the loss moves LOSS_BYTES_PER_LOGIT bytes per logit, Gemma 2's
    soft-capping SOFTCAP_BYTES_PER_LOGIT more.
    """
    n, t = tokens_and_tp(seq_len, micro_batch, tp)
    gemm = 3 * gemm_time_s(n, m.hidden, m.vocab / t, hw, elem_bytes)
    per_logit = LOSS_BYTES_PER_LOGIT + (SOFTCAP_BYTES_PER_LOGIT if m.final_softcap else 0.0)
    return gemm + elementwise_time_s(per_logit * n * m.vocab / t, hw)


def layer_kernel_count(m: ModelSpec, flash_attention, cp=1, eager=False):
    """Kernels one layer launches in the forward pass: 4 GEMMs, the attention core (1 fused FlashAttention kernel,
    or QKᵀ, softmax, dropout, AV unfused), 2 norms, 2 residual adds, the MLP activation and rotary embedding.
    Context parallelism runs attention as one kernel per K/V chunk (cp steps) and merges each step's partial output
    with a rescaling kernel (Transformer Engine's context-parallel attention): 2 more per extra step. `eager`: the
    element-wise ops' own kernels (eager_extra_bytes): RMSNorm's, dropout, SiLU, RoPE's and GQA's K/V copies."""
    attention = np.where(flash_attention, 1, 4) + 2 * (np.asarray(cp) - 1)
    return 4 + attention + _elementwise_kernels(m) + np.where(eager, _eager_extra_kernels(m), 0)


def _eager_extra_kernels(m: ModelSpec) -> int:
    """Kernels eager PyTorch adds to a layer's forward (eager_extra_bytes counts their bytes)."""
    return (m.layer_norms * EAGER_RMSNORM_EXTRA_KERNELS * (m.norm == "rmsnorm") + 2 * m.dropout + m.gated_mlp
            + EAGER_ROPE_EXTRA_KERNELS * (not m.learned_positions) + 2 * (m.kv_heads < m.heads))


def _elementwise_kernels(m: ModelSpec) -> int:
    """2 norms (4 with post_norms), 2 residual adds (a parallel residual: GPT-NeoX's 3 kernels,
    layer_elementwise_bytes), the MLP activation, and rotary embedding unless positions are learned."""
    return 3 + m.layer_norms + (1 if m.parallel_residual else 0) + (0 if m.learned_positions else 1)


def op_recompute_time_s(m: ModelSpec, seq_len, micro_batch, tp, hw: HardwareSpec, elem_bytes=2, elementwise_s=0.0,
                        eager=False):
    """Backward-time recompute of torchtitan's per-op policy, one layer: the three matmuls it does not save (K, the
    output projection, the MLP's second matmul; params.op_recompute_matmul_params), TP-sharded, plus every
    element-wise kernel (`elementwise_s`: their forward time; `eager`: as many as eager PyTorch launches), whose
    outputs it does not save either."""
    n, t = tokens_and_tp(seq_len, micro_batch, tp)
    mlp = (gemm_time_s(n, m.hidden, m.ffn_hidden / t, hw, elem_bytes) if m.gated_mlp
           else gemm_time_s(n, m.ffn_hidden / t, m.hidden, hw, elem_bytes))
    gemms = (gemm_time_s(n, m.hidden, kv_dim_per_rank(m, t), hw, elem_bytes)
             + gemm_time_s(n, m.q_dim / t, m.hidden, hw, elem_bytes) + mlp)
    kernels = 3 + _elementwise_kernels(m) + np.where(eager, _eager_extra_kernels(m), 0)
    return gemms + elementwise_s + kernels * hw.kernel_overhead_s
