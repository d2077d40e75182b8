"""Memory model against hand-worked and published figures: Korthikanti Table 2, formulas.md §3 and §9, ZeRO paper §5.
Its properties for any input are test_memory_properties.py."""

import dataclasses

import numpy as np
import pytest
from helpers import memory_parts as total
from helpers import rel

from planner.cost import memory
from planner.errors import PlannerError
from planner.specs.model import load_model
from planner.specs.strategy import Precision

# --- activations: Korthikanti et al. 2022 Table 2 -------------------------------------------------------------------

# gpt-22b (Korthikanti Table 3): h = 6144, a = 64, GeLU F = 4h, dropout, q = kv = h; s = 2048, b = 4 as in the paper.
S, B_MB, H, A, T = 2048, 4, 6144, 64, 8
SBH = S * B_MB * H


def act(tp, sp, rc, flash=False):
    return float(memory.activation_bytes_per_layer(load_model("gpt-22b"), S, B_MB, tp, sp, rc,
                                                   flash_attention=flash))


@pytest.mark.parametrize("row, tp, sp, rc, expected", [
    ("no parallelism", 1, False, 0, SBH * (34 + 5 * A * S / H)),
    ("no parallelism (sp flag irrelevant at t=1)", 1, True, 0, SBH * (34 + 5 * A * S / H)),
    ("tensor parallel", T, False, 0, SBH * (10 + 24 / T + 5 * A * S / (H * T))),
    ("tensor + sequence parallel", T, True, 0, SBH * (34 / T + 5 * A * S / (H * T))),
    ("tensor parallel + selective recompute", T, False, 1, SBH * (10 + 24 / T)),
    ("tensor + sequence parallel + selective recompute", T, True, 1, SBH * 34 / T),
    ("full recompute, no SP", T, False, 2, 2 * SBH),
    ("full recompute, SP-sharded checkpoint", T, True, 2, 2 * SBH / T),
    ("selective, no parallelism", 1, False, 1, SBH * 34),
])
def test_activation_bytes_reproduce_korthikanti_table_2(row, tp, sp, rc, expected):
    assert rel(act(tp, sp, rc), expected) < 1e-12, row


def test_llama_405b_tp8_sp_selective_flash_533_mb():
    m = load_model("llama-3.1-405b")
    s, b, t, h, a = 8192, 1, 8, 16384, 128
    sbh = s * b * h
    # formulas.md §3.2/§9 [derived] SwiGLU/GQA form, bytes per token per layer in units of h, with q = h,
    # kv = h/16, F = 3.25h: norm, QKV and MLP inputs 8; Q 2; K, V 4·(1/16); attention-out input 2;
    # gate/up/product 6·3.25 = 19.5 -> 31.75 (÷t with SP).
    per_token_layer = 8 + 2 + 4 / 16 + 2 + 6 * 53248 / 16384
    assert per_token_layer == 31.75
    # FlashAttention keeps its fp32 log-sum-exp, 4·a·s·b bytes, split over t heads-wise.
    expected = sbh * 31.75 / t + 4 * a * s * b / t
    got = float(memory.activation_bytes_per_layer(m, s, b, t, True, 1, flash_attention=True))
    assert rel(got, expected) < 1e-12
    assert rel(got, 533e6) < 0.005  # formulas.md §9 "[derived] SwiGLU form 31.75/t: 533 MB"


def test_logits_bytes_match_korthikanti_output_layer_with_sp():
    m = load_model("gpt-22b")
    s, b, t, h, V = 2048, 4, 8, 6144, 51200
    expected = 4 * s * b * h * (1 + V / h) / t
    assert rel(float(memory.logits_bytes(m, s, b, t, True)), expected) < 1e-12


def test_logits_bytes_contain_fp32_logits():
    # formulas.md §3.4: "s=8192, V=128256, t=8: fp32 logits 0.53 GB per micro-batch" — a lower bound on the term.
    m = load_model("llama-3.1-405b")
    fp32_logits = 4 * 8192 * 128256 / 8
    assert rel(fp32_logits, 0.525e9) < 0.01
    got = float(memory.logits_bytes(m, 8192, 1, 8, True))
    assert fp32_logits < got < fp32_logits + 4 * 8192 * 16384 / 8 + 1


# --- model states: ZeRO paper and Megatron distributed optimizer ---------------------------------------------------

ZERO_PREC = Precision(param_bytes=2, grad_bytes=2, optimizer_bytes=12)  # ZeRO paper: fp16 params/grads, K = 12


@pytest.mark.parametrize("stage, formula_bytes_per_param, printed_gb", [
    # Rajbhandari et al. 2019, Figure 1 / §5, Ψ = 7.5B, N_d = 64, K = 12.
    (0, (2 + 2 + 12), 120.0),
    (1, 2 + 2 + 12 / 64, 31.4),
    (2, 2 + (2 + 12) / 64, 16.6),
    (3, (2 + 2 + 12) / 64, 1.9),
])
def test_zero_paper_7_5b_example(stage, formula_bytes_per_param, printed_gb):
    psi = 7.5e9
    w, g, o = memory.state_bytes_per_param(stage, 64, ZERO_PREC)
    total = (float(w) + float(g) + float(o)) * psi
    assert rel(total, formula_bytes_per_param * psi) < 1e-12
    # The figure prints one decimal (stage 3: 1.875 GB shown as 1.9), so compare within half a printed digit
    # as well as within 1% for the larger figures.
    assert abs(total / 1e9 - printed_gb) <= 0.05 + 1e-9
    if printed_gb > 10:
        assert rel(total / 1e9, printed_gb) < 0.01


def test_megatron_distributed_optimizer_bytes_per_param():
    # formulas.md §3.1 (Megatron DO docs): bf16 params + fp32 main grads: 18 unsharded, 6 + 12/d sharded.
    d = np.array([1, 2, 8, 64, 128, 1000])
    w, g, o = memory.state_bytes_per_param(0, d)
    assert np.allclose(w + g + o, 18.0, rtol=0, atol=1e-12)
    w, g, o = memory.state_bytes_per_param(1, d)
    assert np.allclose(w + g + o, 6 + 12 / d, rtol=1e-15, atol=0)
    # ZeRO-2 / ZeRO-3 with the same precision: 2 + 16/d and 18/d (ZeRO §5 with grad_bytes = 4).
    w, g, o = memory.state_bytes_per_param(2, d)
    assert np.allclose(w + g + o, 2 + 16 / d, rtol=1e-15, atol=0)
    w, g, o = memory.state_bytes_per_param(3, d)
    assert np.allclose(w + g + o, 18 / d, rtol=1e-15, atol=0)


def test_fp32_parameters_as_master_store_16_bytes_per_param_under_zero3():
    # PyTorch FSDP mixed precision (param_dtype=bf16): the sharded fp32 parameters are Adam's master weights, so a
    # ZeRO-3 rank stores 4 (fp32 param) + 4 (fp32 grad) + 8 (m, v) = 16 bytes per param / d, where Megatron's bf16
    # parameters beside an fp32 master store 2 + 4 + 12 = 18 / d. Below ZeRO-3 the bf16 casts are held through
    # forward and backward, so the totals match Megatron's: the master moves from "optimizer" to "weights".
    d = np.array([1, 8, 64, 512])
    fsdp = Precision(params_are_master=True)
    w, g, o = memory.state_bytes_per_param(3, d, fsdp)
    assert np.allclose(w, 4 / d) and np.allclose(g, 4 / d) and np.allclose(o, 8 / d)
    assert np.allclose(w + g + o, 16 / d, rtol=1e-15, atol=0)
    for stage in (0, 1, 2):
        assert np.allclose(sum(memory.state_bytes_per_param(stage, d, fsdp)),
                           sum(memory.state_bytes_per_param(stage, d)), rtol=1e-15, atol=0)
    w, g, o = memory.state_bytes_per_param(1, 64, fsdp)
    assert float(w) == 2 + 4 / 64 and float(o) == 8 / 64
    with pytest.raises(PlannerError, match="optimizer_bytes.*at least 4"):
        Precision(params_are_master=True, optimizer_bytes=0)
    with pytest.raises(PlannerError, match="params_are_master: got 'yes', expected true or false"):
        Precision(params_are_master="yes")


def test_llama_405b_stage_params_and_state_bytes_formulas_md_section_9():
    m = load_model("llama-3.1-405b")
    layer = 3_187_703_808                       # formulas.md §9 per-layer params
    emb = 128256 * 16384                        # untied input embedding
    first, middle, last = (float(x) for x in memory.stage_params(m, 8, 16))
    # (126 + 2)/16 = 8 slots: middle stages 8 layers, first 7 layers + embedding, last 7 layers + head + final norm.
    # Every TP rank holds the whole of the two RMSNorms per layer (2h) and of the final norm (h): Megatron does not
    # split them, which §9's per-GPU figure (everything /8) rounds away.
    norms = 2 * 16384
    rank_layer = (layer - norms) / 8 + norms                # 398,491,648
    assert rank_layer == 398_491_648
    assert middle == 8 * rank_layer
    assert rel(middle, 3.188e9) < 1e-3
    assert first == 7 * rank_layer + emb / 8
    assert last == 7 * rank_layer + emb / 8 + 16384
    w, g, o = memory.state_bytes_per_param(1, 128)
    assert float(w + g + o) == 6 + 12 / 128
    assert rel(middle * (6 + 12 / 128), 19.4e9) < 0.005   # DO: 19.4 GB
    w, g, o = memory.state_bytes_per_param(0, 128)
    assert rel(middle * float(w + g + o), 57.4e9) < 0.005  # no DO, 18 B/param: 57.4 GB
    w, g, o = memory.state_bytes_per_param(1, 128, Precision(grad_bytes=2))
    assert rel(middle * float(w + g + o), 13.0e9) < 0.005  # ZeRO-1 with bf16 grads, 4.094 B/param: 13.0 GB


def test_explicit_edge_stages_hold_their_own_layers():
    """70B's 80 layers on PP 6: 12 on the first stage (with the embedding), 14 on each of four middle ones, 12 on the
    last (with the head and the final norm): --decoder-first/last-pipeline-num-layers 12 12."""
    m = load_model("llama-3.1-70b")
    h = 8192
    layer = 2 * h * h + 2 * h * 1024 + 3 * h * 28672 + 2 * h          # Q, O; K, V (8 heads of 128); gated MLP; norms
    rank_layer = (layer - 2 * h) / 4 + 2 * h
    emb = 128256 * h / 4
    first, middle, last = (float(x) for x in memory.stage_params(m, 4, 6))
    assert (first, middle, last) == (12 * rank_layer + emb, 14 * rank_layer, 12 * rank_layer + emb + h)


def test_stage_params_single_stage_is_whole_model_over_tp():
    """One stage holds the whole model: its TP-split weights over t, its 65 RMSNorms (2 per layer and the final
    one, 4096 each) on every rank."""
    m = load_model("llama-3.1-8b")
    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    whole = 32 * layer + 2 * 128256 * 4096 + 4096
    norms = 65 * 4096
    for part in memory.stage_params(m, 4, 1):
        assert float(part) == (whole - norms) / 4 + norms


def test_tied_head_is_a_copy_on_the_last_stage():
    # Megatron keeps a copy of a tied embedding on the last stage when p > 1 (formulas.md §3.4 / Megatron).
    m = load_model("gpt-22b")
    h, V, s = 6144, 51200, 2048
    layer = 12 * h**2 + 13 * h
    first, middle, last = (float(x) for x in memory.stage_params(m, 1, 4))
    assert rel(first, 12 * layer + V * h + s * h) < 1e-12   # embedding + learned positions
    assert rel(middle, 12 * layer) < 1e-12
    assert rel(last, 12 * layer + 2 * h + V * h) < 1e-12    # final LayerNorm + copied head


def test_kv_heads_are_replicated_not_split_when_tp_exceeds_them():
    """Megatron (transformer_config.py): with t > g each rank keeps one whole KV head. Llama-3.1-405B has g = 8,
    d_h = 128: at t = 16 a rank holds K and V of width 128 (not 64). Hand: the t=16 activations differ from the
    t=8 ones by halving everything TP-split except K, V (2·2·s·b·128 bytes each way)."""
    from planner.cost.params import kv_dim_per_rank, layer_params_per_gpu
    m = load_model("llama-3.1-405b")
    s, b = 8192, 1
    assert kv_dim_per_rank(m, 16) == 128 and kv_dim_per_rank(m, 8) == 128 and kv_dim_per_rank(m, 4) == 256
    a8 = memory.activation_bytes_per_layer(m, s, b, 8, True, 1, True)
    a16 = memory.activation_bytes_per_layer(m, s, b, 16, True, 1, True)
    kv = 2 * 2 * s * b * 128
    assert a16 - kv == pytest.approx((a8 - kv) / 2)
    # Weights: K, V projections (2·h·128 per rank) and the two norms (2h, replicated) do not shrink from t=8 to t=16.
    kept = 2 * m.hidden * 128 + 2 * m.hidden
    assert layer_params_per_gpu(m, 16) - kept == pytest.approx((layer_params_per_gpu(m, 8) - kept) / 2)


def test_zero3_transient_buffers_by_hand():
    """ZeRO-3's 'gathered' part is the peak of the transients along the stage's gathered units in backward order: the unit's
    16-bit weights, the next unit's prefetched weights, the gradient being computed (16-bit) and the previous unit's
    waiting for its reduce-scatter (grad dtype). Llama 3.1 8B, one stage, TP 1: layer l = 218,112,000, head and
    embedding E = H = 128,256 x 4096 = 525,336,576. Steps: head 2(2H + l) = 2,537,570,304; last layer
    6l + 4H = 3,410,018,304 (the peak: the head's fp32 gradient is still being reduce-scattered); middle layers 10l
    = 2,181,120,000; first layer 2(2l + E) + 4l = 2,795,569,152; embedding 4E + 4l = 2,973,794,304. With 2-byte
    gradients the peak is 2,537,570,304 (head step and embedding step tie). GPT-3 175B at TP 8: a layer,
    226,576,896 per rank, outweighs the 51,200 x 12,288 / 8 = 78,643,200 head: 10 x 226,576,896."""
    m = load_model("llama-3.1-8b")
    kw = dict(s=4096, pp=1, dp=8, b=1, mb=1, vpp=1, sp=False, rc=0, flash=True)
    extra = total(m, tp=1, zero=3, **kw)["gathered"]
    assert total(m, tp=1, zero=2, **kw)["gathered"] == 0                # no stage below 3 gathers
    assert total(m, tp=1, zero=3, **kw)["other"] == total(m, tp=1, zero=2, **kw)["other"]
    assert 6 * 218_112_000 + 4 * 525_336_576 == 3_410_018_304
    assert extra == pytest.approx(3_410_018_304, rel=1e-12)
    grads16 = memory.memory_breakdown(m, 4096, 1, 1, 8, 1, 1, 1, False, 0, 3, Precision(grad_bytes=2))[0]
    assert grads16["gathered"] == pytest.approx(2 * (2 * 525_336_576 + 218_112_000), rel=1e-12)
    g = load_model("gpt3-175b")
    kw = dict(s=2048, pp=1, dp=8, b=1, mb=1, vpp=1, sp=True, rc=0, flash=True)
    extra = total(g, tp=8, zero=3, **kw)["gathered"]
    # per rank: 12h² weights and the column-parallel biases (QKV 3h, MLP in 4h) over 8, the two LayerNorms (4h) and
    # the row-parallel biases (2h) whole
    assert (12 * 12288**2 + 7 * 12288) / 8 + 6 * 12288 == 226_576_896
    assert extra == pytest.approx(10 * 226_576_896, rel=1e-12)


def test_int32_inputs_do_not_overflow():
    """Notebook callers pass whatever integer arrays they have; numpy keeps int32 x int as int32, so 128K-token
    products wrapped before the cost functions cast to float (70B, s = 32,768: 9.0e9 bytes per layer, was 4.1e8)."""
    from planner.cost import budget, compute, flops
    from planner.specs.hardware import load_hardware
    m, hw = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    s32, b32 = np.array([32768, 131072], dtype=np.int32), np.array([1, 16], dtype=np.int32)
    s64, b64 = s32.astype(np.int64), b32.astype(np.int64)
    pairs = [
        lambda s, b: memory.activation_bytes_per_layer(m, s, b, 1, False, 0),
        lambda s, b: memory.logits_bytes(m, s, b, 1, False),
        lambda s, b: flops.model_flops_per_step(m, s, b * 1024),
        lambda s, b: compute.attention_core_time_s(m, s, b, 1, True, hw),
        lambda s, b: compute.layer_elementwise_bytes(m, s, b, 1, False),
        lambda s, b: compute.gemm_time_s(s * b, np.int32(8192), np.int32(28672), hw),
        lambda s, b: budget.gpu_hours(s, s * b),
        lambda s, b: budget.energy_j(s, s * b, 700),
    ]
    for f in pairs:
        got, want = f(s32, b32), f(s64, b64)
        assert np.all(got > 0) and np.allclose(got, want, rtol=1e-12)
    # by hand, Llama 3 70B (h 8192, q 8192, KV 1024, F 28672, SwiGLU), no TP, flash: sbh(8 + 4q/h + 4kv/h + 6F/h)
    # + 4·a·sb = 32768 x 8192 x (8 + 4 + 0.5 + 21) + 4 x 64 x 32768 = 9.0e9 bytes
    s, h = 32768, 8192
    assert memory.activation_bytes_per_layer(m, s32[:1], 1, 1, False, 0)[0] == pytest.approx(
        s * h * (8 + 4 + 4 * 1024 / h + 6 * 28672 / h) + 4 * 64 * s, rel=1e-12)


def test_recompute_names_equal_codes_and_bad_values_are_named():
    """A notebook may pass "full" where the columns hold 2; a name or code the cost layer does not know must not
    be read as no recompute (it was: "full" gave the no-recompute 5.3e8 bytes instead of 3.4e7)."""
    from planner.cost import flops
    from planner.errors import PlannerError
    m = load_model("llama-3.1-405b")
    for name, code in (("none", 0), ("selective", 1), ("full", 2), ("op", 3), ("FULL", 2)):
        assert memory.activation_bytes_per_layer(m, 8192, 1, 8, True, name) == \
            memory.activation_bytes_per_layer(m, 8192, 1, 8, True, code)
        assert flops.recompute_flops_per_token(m, 8192, name) == flops.recompute_flops_per_token(m, 8192, code)
    both = memory.activation_bytes_per_layer(m, 8192, 1, 8, True, np.array(["none", "full"]))
    assert both[1] == pytest.approx(2 * 8192 * 16384 / 8) and both[0] > 10 * both[1]
    for bad in ("fulll", 7, -1, 2.5, [0, 4], True):
        with pytest.raises(PlannerError, match="recompute"):
            memory.activation_bytes_per_layer(m, 8192, 1, 8, True, bad)


def test_first_stage_keeps_token_ids_and_embedding_dropout_masks():
    """formulas.md §3.4: the first stage holds, per micro-batch in flight, its int64 token ids (8sb) and the
    embedding dropout's 1-byte mask (sbh; with SP the sequence is scattered first: sbh/t). GPT-3 175B, s = 2048,
    b = 1, t = 8: 16,384 + 25,165,824 = 25,182,208 bytes, 3,162,112 with SP; on PP 8 (8 micro-batches in flight on
    the first stage under 1F1B) 201 MB. Llama (no dropout): the ids only."""
    gpt3, llama = load_model("gpt3-175b"), load_model("llama-3.1-405b")
    assert float(memory.embedding_input_bytes(gpt3, 2048, 1, 8, False)) == 25_182_208
    assert float(memory.embedding_input_bytes(gpt3, 2048, 1, 8, True)) == 3_162_112
    assert float(memory.embedding_input_bytes(llama, 8192, 1, 8, True)) == 8 * 8192
    args = (2048, 8, 8, 1, 1, 64, 1, False, 2, 1)                 # s, t, p, d, b, m, v, sp, full recompute, ZeRO-1
    parts, stage = memory.memory_breakdown(gpt3, *args)
    no_dropout, _ = memory.memory_breakdown(dataclasses.replace(gpt3, dropout=False), *args)
    assert stage == 0
    assert parts["activations"] - no_dropout["activations"] == pytest.approx(8 * 2048 * 12288, rel=1e-12)
    # Interleaved (v = 4, 64 micro-batches): Megatron's warm-up runs chunk 0 on micro-batches 0-7 and 8-15 before
    # its first backward, so the embedding chunk holds 16 (a simulation of the schedule agrees), not 8
    inter = (2048, 8, 8, 1, 1, 64, 4, False, 2, 1)
    parts, _ = memory.memory_breakdown(gpt3, *inter)
    no_dropout, _ = memory.memory_breakdown(dataclasses.replace(gpt3, dropout=False), *inter)
    assert parts["activations"] - no_dropout["activations"] == pytest.approx(16 * 2048 * 12288, rel=1e-12)


def test_unfused_gqa_attention_keeps_k_and_v_widened_to_every_query_head():
    """Unfused attention repeats GQA's K and V for every query head before the score matmuls (Megatron-Core
    DotProductAttention: repeat_interleave), and autograd keeps the wide copies; selective recompute checkpoints
    them before the widening and drops the scores. So for Llama 3.1 70B (64 query heads, 8 K/V heads, no dropout)
    at s = 2048, b = 1, TP8 with SP, no recompute keeps, beyond selective recompute, the 2-byte a·s·s scores / t and
    2·2·s·(q − kv)/t bytes of widened K and V, by hand (a reviewer found the second missing)."""
    m = load_model("llama-3.1-70b")
    args = dict(seq_len=2048, micro_batch=1, tp=8, sp=True, flash_attention=False)
    extra = (memory.activation_bytes_per_layer(m, recompute=0, **args)
             - memory.activation_bytes_per_layer(m, recompute=1, **args))
    assert extra == 64 * 2048 * 2048 * 2 / 8 + 2 * 2 * 2048 * (8192 - 1024) / 8
    # FlashAttention takes GQA as it is: K and V stay at the K/V heads' width
    fused = dict(args, flash_attention=True)
    assert (memory.activation_bytes_per_layer(m, recompute=0, **fused)
            - memory.activation_bytes_per_layer(m, recompute=1, **fused)) == 0
