"""Memory per GPU (formulas.md §3): model states, activations, logits and fixed overheads.

All functions take scalars or numpy arrays for the layout knobs and broadcast. Recompute: 0 none, 1 selective,
2 full, 3 op (torchtitan's per-op policy), or their names (strategy.RECOMPUTE). ZeRO stage: 0 none, 1 optimizer
states (Megatron distributed optimizer), 2 + gradients, 3 + parameters.
"""

from __future__ import annotations

import numpy as np

from planner.checks import checked_array, checked_flag, tokens_and_tp
from planner.cost import params as P
from planner.cost.pipeline import (block_recompute_share, first_chunk_in_flight, in_flight_layers,
                                   interleave_group_size, layers_per_stage, stage_layers)
from planner.specs.model import ModelSpec
from planner.specs.strategy import MASTER_BYTES, Precision, recompute_codes, shard_group

# "gathered": ZeRO-3's transient full-width units, apart from "other" so that a layout they dominate says so.
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "gathered", "other")


def optimizer_shards(zero, shards):
    """Ranks the optimizer states are split over: every ZeRO stage from 1 up shards them (ZeRO §5.1)."""
    return np.where(np.asarray(zero) >= 1, shards, 1)


def state_bytes_per_param(zero, dp, precision: Precision = Precision()):
    """Bytes per parameter of weights, gradients and optimizer states under ZeRO-DP over d ranks.

    ZeRO paper (Rajbhandari et al. 2019) §3 and §5: stage 1 shards the optimizer states (K = 12 bytes: fp32 master,
    Adam m and v), stage 2 also the gradients, stage 3 also the parameters. With the defaults (bf16 weights, fp32
    main grads) stage 0 is Megatron's 18 bytes/param and stage 1 its distributed optimizer's 6 + 12/d.
    With `params_are_master` (FSDP mixed precision) the fp32 master is the parameter itself, counted as weights
    and sharded with the optimizer states; the 16-bit casts are held through forward and backward below stage 3
    and, at stage 3, only one gathered unit at a time (zero3_transient_bytes): 4/d + grads/d + (K - 4)/d.
    """
    zero, dp = checked_array(zero, "zero", 0, 3, whole=True), checked_array(dp, "dp", whole=True)
    master = MASTER_BYTES if precision.params_are_master else 0
    opt_shards = optimizer_shards(zero, dp)
    weights = (np.where(zero >= 3, 0 if master else precision.param_bytes / dp, precision.param_bytes)
               + master / opt_shards)
    grads = precision.grad_bytes / np.where(zero >= 2, dp, 1)
    optimizer = (precision.optimizer_bytes - master) / opt_shards
    return weights, grads, optimizer


def activation_bytes_per_layer(m: ModelSpec, seq_len, micro_batch, tp, sp, recompute, flash_attention=True,
                               act_bytes=2):
    """Activation bytes one layer keeps for backward, per micro-batch, per GPU.

    Korthikanti et al. 2022 §4, Table 2 term by term, generalised to GQA and gated MLPs ([derived] in
    formulas.md §3.2). With q = kv = h, F = 4h, GeLU, dropout and no FlashAttention it reproduces the table:
    sbh(34 + 5as/h) alone, sbh(10 + 24/t + 5as/(ht)) with TP, sbh(34/t + 5as/(ht)) with TP + SP, the as²b term
    dropped by selective recompute, and 2sbh (the layer input; /t when SP shards it) under full recompute.
    FlashAttention never stores the s×s scores, only the fp32 log-sum-exp (4·a·s·b bytes).
    torchtitan's per-op policy (recompute 3) keeps the layer input and the outputs of the ops it saves: Q, V, the
    attention kernel (output and log-sum-exp), the MLP's first matmul, the gated MLP's down projection (every
    rank's full-width partial sum) and, with TP, the two reduce-scatters (params.op_recompute_matmul_params).
    """
    return activation_bytes_with_none(m, seq_len, micro_batch, tp, sp, recompute, flash_attention, act_bytes)[0]


def activation_bytes_with_none(m: ModelSpec, seq_len, micro_batch, tp, sp, recompute, flash_attention=True,
                               act_bytes=2):
    """(activation_bytes_per_layer under `recompute`, the same without recompute), from one set of shared terms."""
    # Floats from the start: int32 token counts overflow in sb·h products (numpy keeps int32 x int as int32).
    s = checked_array(seq_len, "seq_len").astype(float)
    b = checked_array(micro_batch, "micro_batch", whole=True).astype(float)
    t = checked_array(tp, "tp", whole=True)
    sp, rc = checked_flag(sp, "sp"), recompute_codes(recompute)
    e, sb, h = act_bytes, s * b, m.hidden
    drop = 1.0 if m.dropout else 0.0
    kv_rank = P.kv_dim_per_rank(m, t)
    # Inputs of the two norms, of QKV and of the MLP; two 1-byte dropout masks. Replicated across TP unless SP.
    # A parallel residual's second norm reads the layer input, already kept for the first: three tensors, not four.
    # Post-norms (Gemma 2/3) keep their inputs too, the attention and MLP outputs after the TP reduction: six.
    replicated = sb * h * ((3 if m.parallel_residual else 2 + m.layer_norms) * e + 2 * drop)
    # Q, K, V, attention-out input; MLP intermediates (gated: gate, up, product; plain: GeLU input and output).
    split = e * sb * 2 * m.q_dim + e * sb * m.ffn_hidden * (3 if m.gated_mlp else 2)
    # K and V (whole heads per rank when t > g). Unfused attention widens them to every query head before the score
    # matmuls (Megatron-Core DotProductAttention, TE's unfused path: repeat_interleave) and autograd keeps the wide
    # copies; selective recompute checkpoints them before the widening, and fused kernels take GQA as it is.
    unfused = ~np.asarray(flash_attention, dtype=bool)
    kv_wide, kv_narrow = 2 * e * sb * np.maximum(m.q_dim / t, kv_rank), 2 * e * sb * kv_rank
    # Softmax output (+ dropout mask and output) of the materialised a×s×s scores, or FlashAttention's statistics.
    scores_all = np.where(flash_attention, 4.0 * m.heads * sb, m.heads * s * sb * (e + drop * (1 + e)))
    sp_div = np.where(sp, t, 1)
    none = replicated / sp_div + (split + scores_all) / t + np.where(unfused, kv_wide, kv_narrow)
    if np.any(unfused & (rc == 1)):        # selective recompute drops the scores and keeps K, V narrow
        kv = np.where(unfused & (rc != 1), kv_wide, kv_narrow)
        scores = np.where((rc == 1) & unfused, 0.0, scores_all)
        stored = replicated / sp_div + (split + scores) / t + kv
    else:                                  # no unfused selective row: the terms are those without recompute
        stored = none
    layer_input = e * sb * h / sp_div
    op_saved = (layer_input + e * sb * (2 * m.q_dim + m.ffn_hidden) / t + e * sb * kv_rank
                + scores_all / t + e * sb * h * (1 if m.gated_mlp else 0) + np.where(t > 1, 2 * e * sb * h / t, 0.0))
    return np.where(rc == 2, layer_input, np.where(rc == 3, op_saved, stored)), np.asarray(none, dtype=float)


def recompute_working_bytes(m: ModelSpec, seq_len, micro_batch, tp, sp, recompute, flash_attention=True,
                            act_bytes=2):
    """Transient memory while one layer is recomputed: what recompute saved for that one layer (0 without; never
    negative: under TP the per-op policy can keep more than no recompute)."""
    kept, full = activation_bytes_with_none(m, seq_len, micro_batch, tp, sp, recompute, flash_attention, act_bytes)
    return _working_bytes(full, kept)


def _working_bytes(full, kept):
    """What a recomputed layer rebuilds beyond what it kept (its activations without recompute, less those kept)."""
    return np.maximum(full - kept, 0.0)


def logits_bytes(m: ModelSpec, seq_len, micro_batch, tp, sp, act_bytes=2, fused_cross_entropy=True):
    """Last stage, one micro-batch: the final norm's input and the output layer's input (16-bit each) and the logits
    of the cross-entropy (with Gemma 2's final soft-capping also the 16-bit tanh output its backward needs,
    transformers' Gemma2ForCausalLM: logits / c, tanh, · c). Fused (Megatron's vocab-parallel kernel works in place
    on the fp32 logits): 4 bytes per logit (formulas.md §3.4; Korthikanti's 4sbh(1 + V/h)/t with SP). PyTorch's
    cross_entropy on logits cast to fp32 (torchtitan's loss: F.cross_entropy(pred.float(), labels)) peaks as the
    backward starts, with all activations still held: log_softmax keeps its fp32 output for its backward
    (derivatives.yaml: it saves `result`), nll_loss's backward writes a dense fp32 gradient of it and log_softmax's
    backward the fp32 gradient of the logits, 12 bytes per logit (the forward's 16-bit logits, fp32 copy and output
    are 10)."""
    sb, t = tokens_and_tp(seq_len, micro_batch, tp)
    sp = checked_flag(sp, "sp")
    per_logit = np.where(checked_flag(fused_cross_entropy, "fused_cross_entropy"), 4.0, 12.0) + (
        act_bytes if m.final_softcap else 0.0)
    return 2 * act_bytes * sb * m.hidden / np.where(sp, t, 1) + per_logit * sb * m.vocab / t


def embedding_input_bytes(m: ModelSpec, seq_len, micro_batch, tp, sp):
    """First stage, one micro-batch: the int64 token ids (8sb) and, with dropout, the embedding dropout's 1-byte
    mask (sbh, split over TP with SP, which scatters the sequence before the dropout) (formulas.md §3.4; Megatron)."""
    sb, t = tokens_and_tp(seq_len, micro_batch, tp)
    return 8.0 * sb + (sb * m.hidden / np.where(checked_flag(sp, "sp"), t, 1) if m.dropout else 0.0)


def stage_params(m: ModelSpec, tp, pp):
    """Parameters per GPU on (first, middle, last) stage: layers/t plus the embedding (first) and the output head
    (last; a tied head is a copy of the embedding when p > 1, as in Megatron)."""
    t, p = checked_array(tp, "tp", whole=True), checked_array(pp, "pp", whole=True)
    first_n, mid, last_n = stage_layers(m.layers, p)
    layer = P.layer_params_per_gpu(m, t)
    emb = P.embedding_params_per_gpu(m, t)
    head = P.output_params_per_gpu(m, t) + np.where(m.tied_embeddings & (p > 1), m.vocab * m.hidden, 0) / t
    single = m.layers * layer + emb + head
    first = np.where(p == 1, single, first_n * layer + emb)
    last = np.where(p == 1, single, last_n * layer + head)
    middle = np.where(p > 2, mid * layer, first)
    return first, middle, last


def zero3_transient_bytes(layer_unit, edge_unit, first, last, precision: Precision = Precision()):
    """Peak ZeRO-3 transients on one stage, walking its gathered units in backward order (formulas.md §3.1; FSDP).

    While a unit's backward runs, the GPU holds its gathered 16-bit weights, the next unit's prefetched weights, the
    unit's gradient being computed (16-bit) and the previous unit's gradient waiting for its reduce-scatter (gradient
    dtype). Units are layers (l); the last stage starts with the output head and the first ends with the embedding
    (each V·h/t, its own FSDP unit): head step p(2H + l), the last layer's p·3l + g·H, middle layers p·3l + g·l, the
    first layer's p(2l + E) + g·l, the embedding's 2p·E + g·l.
    """
    pb, gb = precision.param_bytes, precision.grad_bytes
    l, e = np.asarray(layer_unit, dtype=float), np.asarray(edge_unit, dtype=float)
    middle = 3 * pb * l + gb * l
    first_peak = np.maximum(middle, np.maximum(pb * (2 * l + e) + gb * l, 2 * pb * e + gb * l))
    last_peak = np.maximum(middle, np.maximum(pb * (2 * e + l), 3 * pb * l + gb * e))
    return np.maximum(np.where(first, first_peak, middle), np.where(last, last_peak, middle))


def stage_state_bytes(m: ModelSpec, tp, pp, dp, zero, precision: Precision = Precision()):
    """Weights, gradients and optimizer states (bytes) on the (first, middle, last) stage under ZeRO over d ranks."""
    w_pp, g_pp, o_pp = state_bytes_per_param(zero, dp, precision)
    return [{"weights": params * w_pp, "gradients": params * g_pp, "optimizer": params * o_pp}
            for params in stage_params(m, tp, pp)]


def memory_breakdown(m: ModelSpec, seq_len, tp, pp, dp, micro_batch, num_microbatches, vpp, sp, recompute, zero,
                     precision: Precision = Precision(), flash_attention=True, overhead_bytes=0.0,
                     zero3_gather_unit="layer", cp=1, recompute_layers=0, dp_replicate=1, fused_cross_entropy=True):
    """Peak memory per GPU on the most loaded pipeline stage, as named parts in bytes (MEMORY_PARTS).

    weights / gradients / optimizer: model states of that stage (ZeRO paper §3/§5).
    activations: stored activations of the in-flight micro-batches (1F1B or interleaved) plus, on the last stage,
    the logits of one micro-batch (logits_bytes: a fused cross-entropy's or PyTorch's), and on the first stage the
    in-flight micro-batches' token ids and embedding dropout masks (embedding_input_bytes).
    gathered: under ZeRO-3, the peak transients of the gathered units (zero3_transient_bytes; a unit is a layer for
    FSDP's per-block wrapping, the largest weight matrix for DeepSpeed's per-module gathering, and the embedding or
    output head on the edge stages); 0 below stage 3.
    other: fixed framework overhead (CUDA context, workspaces, NCCL buffers) and the working set of the layer being
    recomputed.
    Context parallelism (cp ranks) keeps s/cp tokens of every activation per rank (Megatron-Core: each rank stores
    the K and V of its own chunk and gathers them again in backward), and ZeRO shards over the dp·cp ranks that hold
    the same weights, or with hybrid sharding (HSDP) over a group of dp·cp/dp_replicate of them.
    `recompute_layers` k: under full recompute, only the first k layers of each pipeline chunk are recomputed
    (Megatron's block method; 0: all), the others store all their activations; the share is per stage
    (pipeline.block_recompute_share: an edge stage of an uneven split has fewer layers).
    Returns (parts, stage) where stage is the 0-based index of the most loaded stage.
    """
    t, p, d, c = (checked_array(x, k, whole=True) for x, k in ((tp, "tp"), (pp, "pp"), (dp, "dp"), (cp, "cp")))
    vpp, num_microbatches, dp_replicate = (checked_array(x, k, whole=True) for x, k in (
        (vpp, "vpp"), (num_microbatches, "num_microbatches"), (dp_replicate, "dp_replicate")))
    recompute_layers = checked_array(recompute_layers, "recompute_layers", 0, whole=True)
    zero, sp = checked_array(zero, "zero", 0, 3, whole=True), checked_flag(sp, "sp")
    seq_len = np.asarray(seq_len) / c                           # tokens per rank
    act, act_none = activation_bytes_with_none(m, seq_len, micro_batch, t, sp, recompute, flash_attention,
                                               precision.activation_bytes)
    full = recompute_codes(recompute) == 2
    stage_idx = (np.zeros_like(p), np.where(p > 2, 1, 0), p - 1)
    layers = layers_per_stage(m.layers, p)
    logits = logits_bytes(m, seq_len, micro_batch, t, sp, precision.activation_bytes, fused_cross_entropy)
    embedded = embedding_input_bytes(m, seq_len, micro_batch, t, sp)
    work = _working_bytes(act_none, act)          # recompute_working_bytes, from the two already computed
    layer_unit = (P.layer_params_per_gpu(m, t) if zero3_gather_unit == "layer"
                  else (2 if m.gated_mlp else 1) * m.hidden * m.ffn_hidden / t)
    edge_unit = m.vocab * m.hidden / t
    zero3 = np.asarray(zero) >= 3

    best_parts, best_total, best_stage = None, None, None
    shards = shard_group(d, c, dp_replicate)
    group = interleave_group_size(p, num_microbatches, vpp)          # the same for every stage
    first_inputs = first_chunk_in_flight(p, num_microbatches, vpp, group) * embedded
    for states, layers_r, r in zip(stage_state_bytes(m, t, p, shards, zero, precision), layers, stage_idx):
        transient = zero3_transient_bytes(layer_unit, edge_unit, r == 0, r == p - 1, precision)
        # Block method: a share f of this stage's layers keeps only its input, the rest everything.
        f = np.where(full, block_recompute_share(layers_r, recompute_layers, vpp), 1.0)
        parts = {
            **states,
            "activations": in_flight_layers(layers_r, r, p, num_microbatches, vpp, group)
            * (f * act + (1 - f) * act_none)
            + np.where(r == p - 1, logits, 0.0)
            # the first stage keeps its in-flight micro-batches' token ids and embedding dropout masks
            + np.where(r == 0, first_inputs, 0.0),
            "gathered": np.where(zero3, transient, 0.0),
            "other": overhead_bytes + work,
        }
        total = sum(parts.values())
        if best_total is None:
            best_parts, best_total, best_stage = parts, total, r
        else:
            more = total > best_total
            best_parts = {k: np.where(more, parts[k], best_parts[k]) for k in parts}
            best_stage = np.where(more, r, best_stage)
            best_total = np.maximum(total, best_total)
    return best_parts, best_stage
