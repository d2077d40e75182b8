"""Parameter counts of a dense decoder-only transformer (formulas.md §1).

Sources: Megatron-LM `theoretical_memory_usage.py::compute_weight_and_optimizer_memory`; the scaling book's
"Transformer math" table; for GPT-style models N = Vh + L(12h^2 + 13h) + 2h (+ s·h learned positions), the
Ultra-Scale Playbook's count.
"""

from __future__ import annotations

import numpy as np

from planner.checks import checked_array
from planner.specs.model import ModelSpec


def attention_params(m: ModelSpec) -> int:
    """W_q h·q + W_k, W_v h·kv each + W_o q·h = 2hq + 2h·kv (+ biases q + 2kv, + h on the output projection)."""
    weights = 2 * m.hidden * m.q_dim + 2 * m.hidden * m.kv_dim
    qkv, out, _ = m.biased
    return weights + (m.q_dim + 2 * m.kv_dim if qkv else 0) + (m.hidden if out else 0)


def mlp_params(m: ModelSpec) -> int:
    """Gated (SwiGLU): 3hF; plain GeLU: 2hF (+ biases: F, or 2F for the gate and up projections, + h)."""
    gated = 1 if m.gated_mlp else 0
    weights = (2 + gated) * m.hidden * m.ffn_hidden
    return weights + ((1 + gated) * m.ffn_hidden + m.hidden if m.biased[2] else 0)


def one_norm_params(m: ModelSpec) -> int:
    """One norm: RMSNorm h (scale), LayerNorm 2h (scale and bias)."""
    return m.hidden * (2 if m.norm == "layernorm" else 1)


def norm_params(m: ModelSpec) -> int:
    """Two norms per layer, four with post_norms (Gemma 2/3), + the query and key norms over head_dim with qk_norm
    (Qwen3's and Gemma 3's q_norm and k_norm)."""
    qk = 2 * m.head_dim * (2 if m.norm == "layernorm" else 1) if m.qk_norm else 0
    return m.layer_norms * one_norm_params(m) + qk


def position_params(m: ModelSpec) -> int:
    """Learned position embeddings, s·h (0 with rotary positions)."""
    return m.seq_len * m.hidden if m.learned_positions else 0


def layer_params(m: ModelSpec) -> int:
    return attention_params(m) + mlp_params(m) + norm_params(m)


def embedding_params(m: ModelSpec) -> int:
    """Input embedding V·h (+ learned positions s·h)."""
    return m.vocab * m.hidden + position_params(m)


def output_params(m: ModelSpec) -> int:
    """Final norm + output head V·h when untied (0 when tied to the input embedding)."""
    return one_norm_params(m) + (0 if m.tied_embeddings else m.vocab * m.hidden)


def total_params(m: ModelSpec) -> int:
    """N_p = L·(attention + MLP + norms) + embeddings + output head + final norm (formulas.md §1)."""
    return m.layers * layer_params(m) + embedding_params(m) + output_params(m)


def layer_matmul_params(m: ModelSpec) -> int:
    """Weights that take part in matmuls in one layer (no biases or norms): the 6N FLOP rule's N per layer."""
    return 2 * m.hidden * m.q_dim + 2 * m.hidden * m.kv_dim + (3 if m.gated_mlp else 2) * m.hidden * m.ffn_hidden


def op_recompute_matmul_params(m: ModelSpec) -> int:
    """Weights of the matmuls torchtitan's per-op checkpointing recomputes in one layer: it saves every matmul's
    output but every second one (activation_checkpoint.py, mm_count % 2), counted in the block's order Q, K, V,
    output, MLP in (gate), up, down: K, the output projection and the MLP's second matmul (gated: up; plain: down)."""
    return m.hidden * m.kv_dim + m.q_dim * m.hidden + m.hidden * m.ffn_hidden


def kv_dim_per_rank(m: ModelSpec, tp):
    """K (or V) width held by one TP rank: kv/t, but at least one whole head (t > g would replicate each KV head
    over t/g ranks; the layout rules refuse it, as Megatron-Core and torchtitan do, but the formula stays total)."""
    return m.kv_dim / np.minimum(checked_array(tp, "tp", whole=True), m.kv_heads)


def layer_params_per_gpu(m: ModelSpec, tp):
    """One layer's parameters on one TP rank (Megatron's tensor-parallel layers): the column-parallel weights and
    biases (Q, K, V, MLP in) and the row-parallel weights (output projection, MLP out) split t ways, K and V at least
    one whole head per rank (replicated KV heads); the norms and the row-parallel layers' biases, which every rank
    adds after the all-reduce, replicated."""
    t = checked_array(tp, "tp", whole=True)
    qkv, out, mlp = m.biased
    kv_row = m.hidden + (1 if qkv else 0)                               # a K or V column: its weights (+ bias)
    replicated = norm_params(m) + m.hidden * (int(out) + int(mlp))    # the row-parallel layers' biases
    split = layer_params(m) - 2 * m.kv_dim * kv_row - replicated
    return split / t + 2 * kv_dim_per_rank(m, t) * kv_row + replicated


def embedding_params_per_gpu(m: ModelSpec, tp):
    """Input embedding on one TP rank: the vocabulary-parallel table V·h/t; learned positions are replicated."""
    return m.vocab * m.hidden / checked_array(tp, "tp", whole=True) + position_params(m)


def output_params_per_gpu(m: ModelSpec, tp):
    """Output layer on one TP rank: the vocabulary-parallel head V·h/t when untied; the final norm replicated."""
    return (0 if m.tied_embeddings else m.vocab * m.hidden) / checked_array(tp, "tp", whole=True) + one_norm_params(m)
