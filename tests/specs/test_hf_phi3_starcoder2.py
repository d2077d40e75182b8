"""Phi-3 and StarCoder2 config.json files: parameter counts written out by hand, the sliding window both apply on
every layer whenever the config sets one, Phi's partial rotary factor, StarCoder2's biased LayerNorm block."""

import pytest
from helpers import hf_model

import planner
from planner.cost.params import total_params
from planner.errors import PlannerError

# microsoft/Phi-3-mini-4k-instruct config.json, as TensorRT-LLM's Phi-3 test copies it (the fields the planner
# reads; transformers_version 4.40.2)
PHI3_MINI = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_bias": False,
             "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 4096,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "rope_scaling": None,
             "sliding_window": 2047, "tie_word_embeddings": False, "vocab_size": 32064}
# StarCoder2 3B: transformers' Starcoder2Config defaults are its shape (3072 hidden, 30 layers, 24 heads, 2 K/V
# heads, 12,288 MLP, 49,152 vocabulary); the StarCoder2 paper trains it with a 4,096-token sliding window
STARCODER2_3B = {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "hidden_size": 3072,
                 "intermediate_size": 12288, "num_hidden_layers": 30, "num_attention_heads": 24,
                 "num_key_value_heads": 2, "vocab_size": 49152, "max_position_embeddings": 16384,
                 "sliding_window": 4096, "hidden_act": "gelu_pytorch_tanh", "use_bias": True,
                 "attention_dropout": 0.1, "residual_dropout": 0.1, "embedding_dropout": 0.1}


def test_phi3_mini(tmp_path):
    m = hf_model(tmp_path, PHI3_MINI, "phi-3-mini")
    # hand: per layer 4·3072² (MHA) + SwiGLU 3·3072·8192 + two norms 2·3072; x32, + untied embeddings 2·32064·3072
    # + the final norm: 3,821,079,552, Phi-3-mini's 3.8B
    layer = 4 * 3072**2 + 3 * 3072 * 8192 + 2 * 3072
    assert total_params(m) == 32 * layer + 2 * 32064 * 3072 + 3072 == 3_821_079_552
    # its 2,047-token window binds at its own 4,096 tokens, on every layer, as transformers' Phi3Attention applies it
    assert (m.sliding_window, m.window_layers, m.seq_len, m.rotary_fraction) == (2047, None, 4096, 1.0)
    assert m.window_binds(m.seq_len) and m.gated_mlp and not m.tied_embeddings and m.norm == "rmsnorm"
    assert m.biased == (False, False, False)


def test_phi3_partial_rotary_and_no_window(tmp_path):
    m = hf_model(tmp_path, {**PHI3_MINI, "partial_rotary_factor": 0.75, "sliding_window": None}, "phi-4-mini-like")
    assert m.rotary_fraction == 0.75 and m.sliding_window is None
    with pytest.raises(PlannerError, match="partial_rotary_factor"):
        hf_model(tmp_path, {**PHI3_MINI, "partial_rotary_factor": 1.5}, "bad")


def test_starcoder2_3b(tmp_path):
    m = hf_model(tmp_path, STARCODER2_3B, "starcoder2-3b")
    # hand: per layer q, o 2·3072² + k, v 2·3072·256 (2 K/V heads of 128) and their biases 3072 + 2·256 + 3072,
    # plain GeLU MLP 2·3072·12288 + biases 12288 + 3072, two LayerNorms (weight and bias) 4·3072; x30, + the tied
    # embedding 49152·3072 + the final LayerNorm 2·3072: 3,030,371,328, the 3.03B of StarCoder2-3B
    layer = (2 * 3072**2 + 2 * 3072 * 256 + 3072 + 2 * 256 + 3072 + 2 * 3072 * 12288 + 12288 + 3072 + 4 * 3072)
    assert total_params(m) == 30 * layer + 49152 * 3072 + 2 * 3072 == 3_030_371_328
    assert (m.sliding_window, m.window_layers, m.seq_len) == (4096, None, 4096)     # planned at 4,096 by default
    assert m.biased == (True, True, True) and m.norm == "layernorm" and not m.gated_mlp and m.tied_embeddings
    assert m.dropout and m.activation == "gelu" and m.kv_heads == 2
    quiet = hf_model(tmp_path, {k: v for k, v in STARCODER2_3B.items() if "dropout" not in k}, "no-dropout")
    assert not quiet.dropout                                   # Starcoder2Config's dropout rates default to 0


def test_starcoder2_window_is_priced_at_long_context(tmp_path):
    """At 16K tokens (its training context) the 4,096-token window cuts attention: faster than full attention."""
    m = hf_model(tmp_path, STARCODER2_3B, "starcoder2-3b")
    from dataclasses import replace

    windowed = planner.search(m, gpus=16, seq_len=16384).iloc[0]
    full = planner.search(replace(m, sliding_window=None), gpus=16, seq_len=16384).iloc[0]
    assert windowed["step_time_s"] < full["step_time_s"]


@pytest.mark.parametrize("field, value", [("use_bias", "yes"), ("residual_dropout", 1.5),
                                          ("attention_dropout", True), ("num_key_value_heads", 0)])
def test_starcoder2_bad_fields_are_named(tmp_path, field, value):
    with pytest.raises(PlannerError, match=field):
        hf_model(tmp_path, {**STARCODER2_3B, field: value}, f"bad-{field}")
