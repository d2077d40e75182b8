"""Sliding-window attention (Mistral 7B: every layer attends to at most the 4,096 tokens before each token)."""

from dataclasses import replace

import numpy as np
import pytest
from helpers import rel
from hypothesis import given
from hypothesis import strategies as st

import planner
from planner.cost import compute, flops
from planner.errors import PlannerError
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model

W = 4096
FULL = load_model("llama-3.1-8b")          # 32 layers, q = 4,096, GQA 8: Mistral 7B's attention shape
WINDOWED = replace(FULL, sliding_window=W)


def exact_mean_keys(s: int, w: int) -> float:
    """Keys per query of causal attention within a window of w, counted pair by pair: query i sees min(i, w)."""
    return float(np.minimum(np.arange(1, s + 1), w).sum()) / s


def test_window_keys_by_hand():
    # at 32,768 tokens: in full (the PaLM-style count) w keys; halved, w - w²/2s = 4,096 - 256 = 3,840
    assert flops.attended_keys_per_query(WINDOWED, 32768) == 4096
    assert flops.attended_keys_per_query(WINDOWED, 32768, causal_halved=True) == 3840
    # within the window the model is full causal attention: s and s/2, exactly as without a window
    for s in (1024, 4096):
        for halved in (False, True):
            assert flops.attended_keys_per_query(WINDOWED, s, halved) == flops.attended_keys_per_query(FULL, s, halved)
    # the unfused kernel scores the whole square whatever the window
    assert flops.attended_keys_per_query(WINDOWED, 32768, windowed=False) == 32768


@given(w=st.integers(1, 300), extra=st.integers(0, 700))
def test_halved_window_keys_are_the_pair_count_less_the_diagonal_half(w, extra):
    """The closed form drops w/2s against the exact pair count (Σ min(i, w) / s), as the causal half s/2 drops 1/2."""
    s = w + extra
    m = replace(FULL, sliding_window=w)
    got = float(flops.attended_keys_per_query(m, s, causal_halved=True))
    assert got + w / (2 * s) == pytest.approx(exact_mean_keys(s, w), rel=1e-12)
    assert float(flops.attended_keys_per_query(FULL, s, True)) + 0.5 == pytest.approx(exact_mean_keys(s, s))


@given(s=st.integers(1, 200_000), w=st.integers(1, 200_000))
def test_a_window_never_adds_work_and_never_counts_more_than_w_keys(s, w):
    m = replace(FULL, sliding_window=w)
    for halved in (False, True):
        windowed, full = (float(flops.attended_keys_per_query(x, s, halved)) for x in (m, FULL))
        assert 0 < windowed <= full and windowed <= w


def test_a_window_on_some_layers_counts_the_mean_over_the_layers():
    # Qwen2's pattern: 8 of 32 layers windowed: at 32,768 tokens a quarter of the layers see 3,840 keys (halved),
    # the rest the causal half, 16,384
    some = replace(WINDOWED, window_layers=8)
    assert flops.attended_keys_per_query(some, 32768, causal_halved=True) == (8 * 3840 + 24 * 16384) / 32
    assert flops.attended_keys_per_query(some, 32768) == (8 * 4096 + 24 * 32768) / 32
    assert flops.attended_keys_per_query(some, 4096, True) == 2048
    for bad in (0, 33):
        with pytest.raises(PlannerError) as info:
            replace(WINDOWED, window_layers=bad)
        assert info.value.field.endswith("window_layers")
    with pytest.raises(PlannerError):
        replace(FULL, window_layers=8)                     # no window to cover them


def test_model_flops_count_the_window():
    # 6N + 12·L·q·w per token (PaLM's count with w keys per query): N is the same model's
    s = 32768
    gap = flops.model_flops_per_token(FULL, s) - flops.model_flops_per_token(WINDOWED, s)
    assert rel(gap, 12 * 32 * 4096 * (s - W)) < 1e-12


def test_fused_attention_computes_the_band_and_unfused_the_square():
    hw = load_hardware("h100-sxm")
    args = dict(seq_len=32768, micro_batch=1, tp=1, hw=hw)
    fused = [compute.attention_core_time_s(m, flash_attention=True, **args) for m in (WINDOWED, FULL)]
    # compute-bound at this length: the time goes as the attended keys, 3,840 of 16,384 (the causal half)
    assert rel(fused[0] / fused[1], 3840 / 16384) < 1e-9
    unfused = [compute.attention_core_time_s(m, flash_attention=False, **args) for m in (WINDOWED, FULL)]
    assert unfused[0] == unfused[1]


def test_a_window_shorter_than_the_sequence_plans_faster_and_refuses_cp():
    kw = dict(gpus=64, hardware="h100-sxm", seq_len=32768, global_batch=64)
    full = planner.search(FULL, tp=1, cp=1, **kw).iloc[0]
    windowed = planner.search(WINDOWED, tp=1, cp=1, **kw).iloc[0]
    assert windowed["step_time_s"] < 0.8 * full["step_time_s"]
    # CP: Transformer Engine windows only the all-gathered K/V exchange, not the ring
    with pytest.raises(PlannerError) as info:
        planner.evaluate(WINDOWED, cp=2, **kw)
    assert "sliding window shorter than the sequence (4,096 < 32,768) needs the K/V all-gather" in info.value.message
    gathered = planner.Runtime(cp_comm_overlap=False)
    cp_full, cp_windowed = (planner.evaluate(m, tp=1, cp=2, runtime=gathered, **kw).row for m in (FULL, WINDOWED))
    assert cp_windowed["step_time_s"] < 0.8 * cp_full["step_time_s"]
    # within the window, the same plan as without one, CP included
    short = dict(kw, seq_len=4096, global_batch=512)
    a, b = (planner.evaluate(m, tp=1, cp=2, pp=1, dp=32, **short).row for m in (WINDOWED, FULL))
    assert a["step_time_s"] == b["step_time_s"] and a["mfu"] == b["mfu"]


def test_readme_mistral_figures():
    """README (Assumptions and limits): Mistral 7B at 32K tokens on 64 H100s, the preset's 4Mi-token batch."""
    m = load_model("mistral-7b")
    assert (m.sliding_window, m.seq_len, m.kv_heads, m.ffn_hidden) == (4096, 8192, 8, 14336)   # Jiang 2023 Table 1
    kw = dict(gpus=64, seq_len=32768)
    ring, gathered = (planner.search(m, runtime=planner.Runtime(cp_comm_overlap=x), **kw).iloc[0]
                      for x in (True, False))
    full = planner.search(replace(m, sliding_window=None), **kw).iloc[0]
    assert [round(r["step_time_s"], 2) for r in (ring, gathered, full)] == [8.57, 7.65, 11.86]
    assert (ring["tp"], ring["cp"], gathered["cp"], full["cp"]) == (4, 1, 4, 4)
