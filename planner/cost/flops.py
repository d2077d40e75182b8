"""FLOP counts per token and per step (formulas.md §2).

Model FLOPs follow PaLM's MFU convention (Chowdhery et al. 2022, §4 and App. B): 6·N per token for the matmul
weights (N includes the output head, not the embedding lookup) plus 12·L·q·s for attention scores and
attention-over-values, with no causal halving unless asked. For GPT with q = h, F = 4h this equals Narayanan et
al. 2021's 72·B·s·L·h²·(1 + s/6h + V/12hL) (FLOP appendix) exactly. Hardware FLOPs add recomputation
(Korthikanti et al. 2022, evaluation section): full recompute repeats every layer's forward (Narayanan's
96·B·s·L·h²(1 + s/6h + V/16hL)); selective recompute repeats the attention core's forward (4·q·s per token per
layer, counted from first principles; the paper's printed 72·B·s·L·h²(1 + s/3h + V/12hL) doubles the attention term,
i.e. adds 12·q·s).

All functions take scalars or numpy arrays and broadcast.
"""

from __future__ import annotations

import numpy as np

from planner.checks import checked_array
from planner.cost.params import layer_matmul_params, op_recompute_matmul_params
from planner.specs.model import ModelSpec
from planner.specs.strategy import recompute_codes


def attended_keys_per_query(m: ModelSpec, seq_len, causal_halved=False, windowed=True):
    """Keys per query that attention's FLOPs count: s (PaLM's full square) or s/2 (the causal half).

    With a sliding window w < s (Mistral 7B, Jiang et al. 2023 §2: each token attends to at most the w before it)
    a query sees min(s, w) keys: counted in full, w; halved, the causal band's mean Σᵢ min(i, w)/s = w − w²/2s
    (dropping w/2s, as the causal half drops 1/2), which is s/2 at s = w. Where only some layers attend within
    the window (ModelSpec.window_layers), the mean over the layers. `windowed=False` counts the whole square: an
    unfused kernel scores every pair and masks those outside the window.
    """
    s = np.asarray(seq_len)
    w = m.sliding_window
    full = s * np.where(causal_halved, 0.5, 1.0)
    if w is None or not np.any(windowed) or np.all(s <= w):
        return full
    s = s.astype(float)
    band = np.minimum(float(w), s)
    keys = np.where(causal_halved, band - band * band / (2 * s), band)
    share = m.window_share
    return np.where(windowed, keys if share == 1 else share * keys + (1 - share) * full, full)


def attention_score_flops_per_token(m: ModelSpec, seq_len, causal_halved=False, windowed=True):
    """Forward FLOPs of QKᵀ and AV per token per layer: 2 matmuls × 2·q per attended key, 4·s·q for full attention
    (halved if causal tiles skip; a sliding window's band otherwise, attended_keys_per_query)."""
    return 4.0 * attended_keys_per_query(m, seq_len, causal_halved, windowed) * m.q_dim


def forward_flops_per_token(m: ModelSpec, seq_len, causal_halved=False):
    """One forward pass: 2 FLOPs per matmul weight (layers + output head) + attention scores."""
    layer = 2.0 * layer_matmul_params(m) + attention_score_flops_per_token(m, seq_len, causal_halved)
    return m.layers * layer + 2.0 * m.vocab * m.hidden


def model_flops_per_token(m: ModelSpec, seq_len, causal_halved=False):
    """Training FLOPs per token, no recompute: 3 × forward (forward, dgrad, wgrad) = 6N + 12·L·q·s (PaLM App. B)."""
    return 3.0 * forward_flops_per_token(m, seq_len, causal_halved)


def recompute_flops_per_token(m: ModelSpec, seq_len, recompute, causal_halved=False, full_fraction=1.0):
    """Extra forward work from activation recomputation; recompute is 0 none, 1 selective, 2 full (of
    `full_fraction` of the layers: Megatron's block method recomputes only some layers of each chunk), 3 op
    (torchtitan's per-op policy: every second matmul, params.op_recompute_matmul_params; attention is saved)."""
    attn = attention_score_flops_per_token(m, seq_len, causal_halved)
    full = m.layers * (2.0 * layer_matmul_params(m) + attn)
    selective = m.layers * attn
    op = m.layers * 2.0 * op_recompute_matmul_params(m)
    rc = recompute_codes(recompute)
    return np.where(rc == 2, np.asarray(full_fraction) * full,
                    np.where(rc == 1, selective, np.where(rc == 3, op, 0.0)))


def hardware_flops_per_token(m: ModelSpec, seq_len, recompute, causal_halved=False, full_fraction=1.0):
    """FLOPs the hardware executes per token: model FLOPs + recomputation (HFU numerator)."""
    return model_flops_per_token(m, seq_len, causal_halved) + recompute_flops_per_token(
        m, seq_len, recompute, causal_halved, full_fraction)


def model_flops_per_step(m: ModelSpec, seq_len, global_batch, causal_halved=False):
    """Model FLOPs of one optimizer step: tokens per step × model FLOPs per token."""
    tokens = (checked_array(global_batch, "global_batch", whole=True).astype(float)
              * checked_array(seq_len, "seq_len").astype(float))   # floats: int32 would overflow
    return tokens * model_flops_per_token(m, seq_len, causal_halved)
