"""Gemma 2 and Gemma 3 config.json files: parameter counts against the published ones, the layers' window pattern as
transformers applies it, the post-norms, Gemma 3's query/key norms and Gemma 2's soft-capping."""

import pytest
from helpers import hf_model

import planner
from planner.cost.params import total_params
from planner.errors import PlannerError

# google/gemma-2-9b config.json (the fields the planner reads, as published; no tie_word_embeddings key)
GEMMA2_9B = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attn_logit_softcapping": 50.0,
             "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
             "hidden_size": 3584, "intermediate_size": 14336, "max_position_embeddings": 8192,
             "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
             "query_pre_attn_scalar": 256, "sliding_window": 4096, "vocab_size": 256000}
# google/gemma-3-1b-pt config.json (text-only, gemma3_text)
GEMMA3_1B = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attn_logit_softcapping": None,
             "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
             "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768,
             "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "sliding_window": 512,
             "sliding_window_pattern": 6, "vocab_size": 262144}


def test_gemma2_9b(tmp_path):
    m = hf_model(tmp_path, GEMMA2_9B, "gemma-2-9b")
    # hand: per layer q 3584·4096 + k, v 2·3584·2048 + o 4096·3584 + GeGLU 3·3584·14336 + four norms 4·3584;
    # x42, + the tied embedding 256000·3584 + the final norm: 9,241,705,984, the checkpoint's 9.24B
    layer = 3584 * 4096 + 2 * 3584 * 2048 + 4096 * 3584 + 3 * 3584 * 14336 + 4 * 3584
    assert total_params(m) == 42 * layer + 256000 * 3584 + 3584 == 9_241_705_984
    # every second layer (i = 0, 2, ...) attends within 4,096 tokens; the logits are soft-capped
    assert (m.sliding_window, m.window_layers, m.post_norms, m.final_softcap, m.qk_norm) == (4096, 21, True, True,
                                                                                            False)
    assert m.tied_embeddings and m.gated_mlp and m.activation == "gelu" and m.head_dim == 256


def test_gemma3_1b(tmp_path):
    m = hf_model(tmp_path, GEMMA3_1B, "gemma-3-1b")
    # hand: q 1152·1024, k, v 2·1152·256, o 1024·1152, GeGLU 3·1152·6912, four norms 4·1152 and q/k norms 2·256;
    # x26, + 262144·1152 tied + 1152: 999,885,952, the checkpoint's 1B
    layer = 1152 * 1024 + 2 * 1152 * 256 + 1024 * 1152 + 3 * 1152 * 6912 + 4 * 1152 + 2 * 256
    assert total_params(m) == 26 * layer + 262144 * 1152 + 1152 == 999_885_952
    # five of every six layers windowed (full at i = 5, 11, 17, 23): 22 of 26; no soft-capping
    assert (m.sliding_window, m.window_layers, m.post_norms, m.final_softcap, m.qk_norm) == (512, 22, True, False,
                                                                                            True)
    explicit = {**GEMMA3_1B, "layer_types": ["sliding_attention"] * 20 + ["full_attention"] * 6}
    assert hf_model(tmp_path, explicit, "explicit").window_layers == 20


def test_gemma_windows_and_refusals(tmp_path):
    no_cap = hf_model(tmp_path, {**GEMMA2_9B, "final_logit_softcapping": None}, "no-cap")
    assert not no_cap.final_softcap
    for bad, field in (({"sliding_window_pattern": 0}, "sliding_window_pattern"),
                       ({"layer_types": ["sliding_attention"]}, "layer_types")):
        with pytest.raises(PlannerError) as info:
            hf_model(tmp_path, {**GEMMA3_1B, **bad}, f"bad-{field}")
        assert field in info.value.message
    # a multimodal Gemma 3 config nests the text model: refused, not planned without its vision encoder
    with pytest.raises(PlannerError) as info:
        hf_model(tmp_path, {"model_type": "gemma3", "text_config": {**GEMMA3_1B}, "vision_config": {}}, "gemma-3-4b")
    assert "text_config" in info.value.message and "gemma3_text" in info.value.message


def test_gemma2_plans_beyond_its_window(tmp_path):
    """At its 8,192-token context half of Gemma 2's layers attend within 4,096 tokens: faster than full attention."""
    from dataclasses import replace
    m = hf_model(tmp_path, GEMMA2_9B, "gemma-2-9b")
    best = planner.search(m, gpus=64, seq_len=8192).iloc[0]
    unwindowed = planner.search(replace(m, sliding_window=None, window_layers=None), gpus=64, seq_len=8192).iloc[0]
    assert best["step_time_s"] < unwindowed["step_time_s"]
