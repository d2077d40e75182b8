"""Roofline kernel times (scaling book "Rooflines"; Calculon's max(flop_time, mem_time)), by hand.

The hardware is h100-sxm with its calibrated efficiencies pinned to round, documented values (989.4 TFLOP/s dense
bf16 at GEMM fraction 0.803, the MAMF figure; 3.35 TB/s HBM at fraction 0.89; no small-K penalty), so the
expected numbers below do not move when the profile is re-calibrated.
"""

import dataclasses

import numpy as np
import pytest

from planner.cost.compute import (attention_core_time_s, gemm_time_s, kernel_time_s, layer_elementwise_bytes,
                                  layer_gemm_time_s, logits_time_s)
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model

HW = dataclasses.replace(load_hardware("h100-sxm"), gemm_efficiency=0.803, attention_efficiency=0.803,
                         gemm_k_half=0.0, hbm_efficiency=0.89)
C = 989.4e12 * 0.803      # achievable FLOP/s
BW = 3.35e12 * 0.89       # achievable HBM bytes/s


def test_h100_numbers_used_here():
    assert HW.peak_flops * HW.gemm_efficiency == pytest.approx(C, rel=1e-12)
    assert HW.hbm_bw_bytes_per_s * HW.hbm_efficiency == pytest.approx(BW, rel=1e-12)


def test_square_gemm_is_compute_bound():
    n = 8192
    t_math = 2 * n**3 / C                   # 1.0995e12 FLOPs / 794.5e12 = 1.384 ms
    t_mem = 2 * 3 * n**2 / BW               # A, B read + C written in bf16: 402.7 MB / 2.98e12 = 0.135 ms
    assert t_math > 10 * t_mem
    assert float(gemm_time_s(n, n, n, HW)) == pytest.approx(t_math, rel=1e-12)
    assert t_math == pytest.approx(1.384e-3, rel=1e-3)


def test_matrix_vector_gemm_is_memory_bound():
    n = 8192
    t_math = 2 * 1 * n * n / C              # 134 MFLOP: 0.17 µs
    t_mem = 2 * (1 * n + n * n + 1 * n) / BW  # the 8192² weight dominates: 134.25 MB / 2.98e12 = 45 µs
    assert t_mem > 100 * t_math
    assert float(gemm_time_s(1, n, n, HW)) == pytest.approx(t_mem, rel=1e-12)
    assert t_mem == pytest.approx(45.0e-6, rel=1e-2)


def test_kernel_time_is_max_of_the_two_terms():
    flops = np.array([1e12, 1e9, 0.0])
    nbytes = np.array([1e6, 1e10, 1e9])
    got = kernel_time_s(flops, nbytes, HW)
    assert got == pytest.approx(np.maximum(flops / C, nbytes / BW), rel=1e-12)
    assert got[0] == pytest.approx(1e12 / C) and got[1] == pytest.approx(1e10 / BW)


def test_ridge_point_h100():
    # formulas.md §6: intensity ridge C/W_HBM ≈ 295 FLOP/byte at peak (9.9e14/3.35e12); at achievable rates
    # 794.5e12 / 2.98e12 ≈ 266. A kernel just above / below the ridge switches regime.
    ridge = C / BW
    assert ridge == pytest.approx(266.5, rel=1e-2)
    nbytes = 1e9
    assert float(kernel_time_s(1.01 * ridge * nbytes, nbytes, HW)) == pytest.approx(1.01 * ridge * nbytes / C)
    assert float(kernel_time_s(0.99 * ridge * nbytes, nbytes, HW)) == pytest.approx(nbytes / BW)


def test_layer_gemm_time_llama_405b_tp8_compute_bound():
    # formulas.md §9 "20.6 ms layer compute at peak" = forward + backward (3 × forward) of the four GEMMs plus the
    # causal-halved attention core (6·s²·q/t), at 989.4 TFLOP/s; the planner's forward GEMM time is the GEMM part
    # of that at GEMM efficiency 0.803.
    m = load_model("llama-3.1-405b")
    n, h, q, kv, F, t = 8192, 16384, 16384, 1024, 53248, 8
    fwd_flops = 2 * n * (h * (q + 2 * kv) + q * h + h * 2 * F + F * h) / t
    assert float(layer_gemm_time_s(m, 8192, 1, 8, HW)) == pytest.approx(fwd_flops / C, rel=1e-12)
    attn_train_halved = 6 * n * n * q / t
    assert (3 * fwd_flops + attn_train_halved) / 989.4e12 == pytest.approx(20.6e-3, rel=0.01)


def test_flash_attention_core_counts_the_causal_half():
    m = load_model("llama-3.1-405b")
    s, b, t = 8192, 1, 8
    # QKᵀ and AV: 2 matmuls × 2·s²·q per sequence, halved by causal tile skipping, over t ranks
    flops = 4 * b * s * s * 16384 / t * 0.5
    assert float(attention_core_time_s(m, s, b, t, True, HW)) == pytest.approx(flops / C, rel=1e-12)


def test_first_generation_flash_attention_runs_at_half_rate():
    # Dao 2023 §4.1: FlashAttention-2 ~2x FlashAttention-1 (1.7-3.0x) and its Triton port (1.3-2.5x).
    m = load_model("llama-3.1-405b")
    s, b, t = 8192, 1, 8
    flops = 4 * b * s * s * 16384 / t * 0.5
    for backward, work in [(False, 1.0), (True, 2.5)]:
        v1 = float(attention_core_time_s(m, s, b, t, True, HW, backward=backward, flash_gen=1))
        assert v1 == pytest.approx(work * flops / (0.5 * C), rel=1e-12)
        assert v1 == pytest.approx(2 * float(attention_core_time_s(m, s, b, t, True, HW, backward=backward)))
    # unfused attention has no generation
    assert float(attention_core_time_s(m, s, b, t, False, HW, flash_gen=1)) == float(
        attention_core_time_s(m, s, b, t, False, HW))


def test_output_layer_and_loss_by_hand():
    # Llama 3 8B head: [n x 4096] @ [4096 x 128256/t], forward + 2x backward at the GEMM rate (no small-K penalty
    # here), and the fp32 cross-entropy's kernels move 6 + 8 + 4 + 8 (forward) + 8 + 6 (backward) = 40 bytes per
    # logit (Megatron-Core fused_cross_entropy.py, kernel by kernel).
    m = load_model("llama-3.1-8b")
    n, t = 4096, 2
    gemm = 3 * 2 * n * 4096 * (128256 / t) / C
    loss = 40 * n * 128256 / t / BW
    assert float(logits_time_s(m, n, 1, t, HW)) == pytest.approx(gemm + loss, rel=1e-9)


def test_elementwise_bytes_hand_count_gpt_22b():
    # Per token (module docstring): 2 norms read+write h (2·2·2h), 2 residual+dropout adds read 2, write 1 plus a
    # 1-byte mask (2·(3·2 + 1)h): 22h replicated; GeLU reads and writes F (2·2F), no rotary (learned positions).
    m = load_model("gpt-22b")
    s, b, h, F = 2048, 4, 6144, 24576
    for t, sp in [(1, False), (8, False), (8, True), (4, True)]:
        expected = s * b * (22 * h / (t if sp else 1) + 4 * F / t)
        assert float(layer_elementwise_bytes(m, s, b, t, sp)) == pytest.approx(expected, rel=1e-12)


def test_elementwise_bytes_hand_count_llama():
    # SwiGLU reads gate and up and writes the product (3·2F); no dropout (2·3·2h); rotary on Q and K read+write
    # (2·2·(q + kv)).
    m = load_model("llama-3.1-8b")
    s, b, h, F, q, kv = 4096, 1, 4096, 14336, 4096, 1024
    for t, sp in [(1, False), (8, False), (8, True)]:
        expected = s * b * ((8 * h + 12 * h) / (t if sp else 1) + (6 * F + 4 * (q + kv)) / t)
        assert float(layer_elementwise_bytes(m, s, b, t, sp)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name, per_h", [("gpt-22b", 22), ("llama-3.1-8b", 20), ("llama-3.1-405b", 20)])
@pytest.mark.parametrize("t", [2, 4, 8])
def test_sequence_parallel_shrinks_elementwise_bytes(name, per_h, t):
    # Korthikanti 2022 §4 / Table 4: SP shards the norm/dropout/residual work that plain TP replicates. That
    # replicated part R is the hand count of the two tests above (GPT: 22·s·b·h; Llama, no dropout: 20·s·b·h), the
    # same at every t, and SP divides it by t: no_sp − with_sp = R·(1 − 1/t).
    m = load_model(name)
    s, b = 2048, 2
    no_sp = float(layer_elementwise_bytes(m, s, b, t, False))
    with_sp = float(layer_elementwise_bytes(m, s, b, t, True))
    assert with_sp < no_sp
    assert (no_sp - with_sp) / (1 - 1 / t) == pytest.approx(per_h * s * b * m.hidden, rel=1e-12)
    # at t = 1 SP changes nothing
    assert float(layer_elementwise_bytes(m, s, b, 1, True)) == float(layer_elementwise_bytes(m, s, b, 1, False))


def test_gemm_efficiency_grows_with_the_inner_dimension():
    """η·K/(K + K½): with K½ = 512 a K = 512 GEMM runs at half the large-K rate, K = 8192 at 16/17 of it."""
    hw = dataclasses.replace(HW, gemm_k_half=512.0)
    for k, factor in ((512, 2.0), (8192, 1 + 512 / 8192)):
        m_, n_ = 16384, 16384
        assert float(gemm_time_s(m_, k, n_, hw)) == pytest.approx(2 * m_ * k * n_ * factor / C, rel=1e-12)
