"""HuggingFace config.json files: published configs mapped onto the planner's architecture, checked against the
models' published parameter counts (or counts written out by hand), and what a dense bf16 model cannot express refused.
"""

import json

import pytest
from helpers import gpt2_small_config, llama_31_8b_config

from planner.cost.params import total_params
from planner.errors import PlannerError
from planner.specs.model import load_model


# --- HuggingFace config.json -----------------------------------------------------------------------------------------

LLAMA_31_8B_CONFIG = llama_31_8b_config()  # meta-llama/Llama-3.1-8B config.json

MISTRAL_7B_CONFIG = {  # mistralai/Mistral-7B-v0.1 config.json
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32000,
}

QWEN2_05B_CONFIG = {  # Qwen/Qwen2-0.5B config.json
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}

GPT2_SMALL_CONFIG = gpt2_small_config()  # openai-community/gpt2 config.json

PYTHIA_160M_CONFIG = {  # EleutherAI/pythia-160m config.json
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
    "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 12, "num_hidden_layers": 12,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False, "use_cache": True,
    "use_parallel_residual": True, "vocab_size": 50304,
}


def write_config(tmp_path, cfg, dirname="model"):
    d = tmp_path / dirname
    d.mkdir()
    path = d / "config.json"
    path.write_text(json.dumps(cfg))
    return path


# hand: per layer 2·4096² + 2·4096·1024 (GQA 8 kv heads × 128) + 3·4096·14336 + 2·4096, ×32; untied embeddings
# 2·V·4096; final norm 4096. Llama 3.1 8B (V = 128256): 8,030,261,248, the model card's 8.03B; Mistral 7B
# (V = 32000, same block): 7,241,732,096, its "7.24B".
_BLOCK_8B = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


@pytest.mark.parametrize("config, vocab, expected", [
    (LLAMA_31_8B_CONFIG, 128256, 8_030_261_248),
    (MISTRAL_7B_CONFIG, 32000, 7_241_732_096),
])
def test_hf_8b_class_configs(tmp_path, config, vocab, expected):
    m = load_model(write_config(tmp_path, config))
    assert (m.layers, m.hidden, m.ffn_hidden, m.heads, m.kv_heads, m.head_dim, m.vocab) == \
        (32, 4096, 14336, 32, 8, 128, vocab)
    assert m.gated_mlp and not m.tied_embeddings and not m.bias and m.norm == "rmsnorm"
    assert 32 * _BLOCK_8B + 2 * vocab * 4096 + 4096 == expected
    assert total_params(m) == expected


def test_hf_qwen2_config_fields(tmp_path):
    m = load_model(write_config(tmp_path, QWEN2_05B_CONFIG))
    assert (m.layers, m.hidden, m.ffn_hidden, m.heads, m.kv_heads, m.head_dim, m.vocab) == \
        (24, 896, 4864, 14, 2, 64, 151936)
    assert m.tied_embeddings and m.gated_mlp and m.norm == "rmsnorm"
    # Qwen2 has biases on q, k, v only (transformers modeling_qwen2.py).
    assert m.qkv_bias and not m.bias


def test_hf_qwen2_parameter_count_exact(tmp_path):
    m = load_model(write_config(tmp_path, QWEN2_05B_CONFIG))
    # hand: per layer 2·896² + 2·896·128 (2 kv heads × 64) + q/k/v biases (896 + 2·128) + 3·896·4864 + 2·896;
    # ×24; tied embedding 151936·896; final norm 896 = 494,032,768 (Qwen2-0.5B safetensors total).
    layer = 2 * 896**2 + 2 * 896 * 128 + (896 + 2 * 128) + 3 * 896 * 4864 + 2 * 896
    expected = 24 * layer + 151936 * 896 + 896
    assert expected == 494_032_768
    assert total_params(m) == expected


# google/gemma-7b config.json (size fields; like the published file it has no tie_word_embeddings key).
GEMMA_7B_CONFIG = {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_size": 3072,
                   "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
                   "hidden_act": "gelu"}


def test_hf_gemma_ties_embeddings_by_default(tmp_path):
    """transformers' GemmaConfig defaults tie_word_embeddings to True. Gemma 7B by hand: per layer 2·3072·4096 (q, o;
    16 heads × 256) + 2·3072·4096 (k, v) + 3·3072·24576 (GeGLU) + 2·3072 (norms) = 276,830,208; × 28 layers, one
    256000 × 3072 embedding, a final norm: 8,537,680,896 (the 8.54B of the model card)."""
    m = load_model(write_config(tmp_path, GEMMA_7B_CONFIG))
    assert m.tied_embeddings and m.head_dim == 256
    layer = 4 * 3072 * 4096 + 3 * 3072 * 24576 + 2 * 3072
    assert layer == 276_830_208
    assert total_params(m) == 28 * layer + 256000 * 3072 + 3072 == 8_537_680_896
    untied = load_model(write_config(tmp_path, {**GEMMA_7B_CONFIG, "tie_word_embeddings": False}, "untied"))
    assert not untied.tied_embeddings and total_params(untied) == 8_537_680_896 + 256000 * 3072


def test_hf_head_dim_defaults_are_transformers_own(tmp_path):
    """Without head_dim, Qwen3Config takes 128 and GemmaConfig 256 (not hidden / heads). Qwen3-0.6B by hand: per
    layer 1024·2048 (q) + 2·1024·1024 (k, v: 8 heads × 128) + 2048·1024 (o) + 3·1024·3072 + 2·1024 = 15,730,688,
    and the q/k norms (q_norm, k_norm: 2·128); × 28, one tied 151936 × 1024 embedding, a final norm: 596,049,920,
    the model's published count. The Megatron export builds the same norms (--qk-layernorm)."""
    cfg = {"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
           "num_key_value_heads": 8, "num_hidden_layers": 28, "vocab_size": 151936, "tie_word_embeddings": True,
           "max_position_embeddings": 40960}
    m = load_model(write_config(tmp_path, cfg))
    assert m.head_dim == 128 and m.q_dim == 2048 and m.qk_norm
    layer = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 3 * 1024 * 3072 + 2 * 1024 + 2 * 128
    assert total_params(m) == 28 * layer + 151936 * 1024 + 1024 == 596_049_920
    from planner import evaluate
    from planner.export import export
    ev = evaluate(m, 8, tp=1, pp=1, dp=8)
    assert "--qk-layernorm" in export("megatron", ev.row, m, ev.result.job)[0]
    assert not load_model(write_config(tmp_path, {**cfg, "model_type": "qwen2"}, "qwen2")).qk_norm
    gemma = {k: v for k, v in GEMMA_7B_CONFIG.items() if k != "head_dim"}
    assert load_model(write_config(tmp_path, gemma, "gemma")).head_dim == 256


def test_hf_sliding_window_is_read(tmp_path):
    """Mistral 7B v0.1 attends within 4,096 tokens: its window is the model's (priced beyond it,
    tests/cost/test_sliding_window.py), its default sequence 4,096; Qwen2's window counts only with
    use_sliding_window true."""
    from planner.candidates import make_job
    m = load_model(write_config(tmp_path, MISTRAL_7B_CONFIG))
    assert m.sliding_window == 4096 and make_job(m, 8).seq_len == 4096
    assert make_job(m, 8, seq_len=32768).seq_len == 32768 and m.window_binds(32768) and not m.window_binds(4096)
    assert load_model(write_config(tmp_path, QWEN2_05B_CONFIG, "qwen")).sliding_window is None
    # transformers' Qwen2: with use_sliding_window, the layers from max_window_layers on (or layer_types) use it
    on = {**QWEN2_05B_CONFIG, "use_sliding_window": True, "sliding_window": 2048}
    cases = (({}, (None, None)), ({"max_window_layers": 0}, (2048, None)), ({"max_window_layers": 20}, (2048, 4)),
             ({"layer_types": ["sliding_attention"] * 24}, (2048, None)),
             ({"layer_types": ["full_attention", "sliding_attention"] * 12}, (2048, 12)))
    for i, (extra, window) in enumerate(cases):
        m = load_model(write_config(tmp_path, {**on, **extra}, f"qwen_{i}"))
        assert (m.sliding_window, m.window_layers) == window, extra
    with pytest.raises(PlannerError) as info:
        load_model(write_config(tmp_path, {**on, "layer_types": ["sliding_attention"]}, "qwen_bad"))
    assert "layer_types" in info.value.message and "one attention type per layer (24)" in info.value.message


def test_learned_positions_bound_the_sequence(tmp_path):
    """GPT-2 learns 1,024 positions: a longer --seq-len has no position embedding to use."""
    from planner.candidates import make_job
    m = load_model(write_config(tmp_path, GPT2_SMALL_CONFIG))
    with pytest.raises(PlannerError, match="learns 1,024 positions"):
        make_job(m, 8, seq_len=2048)
    untied = load_model(write_config(tmp_path, {**GPT2_SMALL_CONFIG, "tie_word_embeddings": False}, "untied"))
    assert total_params(untied) == total_params(m) + 50257 * 768


def test_hf_gpt2_small_config_124m(tmp_path):
    m = load_model(write_config(tmp_path, GPT2_SMALL_CONFIG))
    assert (m.layers, m.hidden, m.heads, m.vocab, m.seq_len) == (12, 768, 12, 50257, 1024)
    assert m.ffn_hidden == 4 * 768  # n_inner null means 4·hidden (HF GPT2Config)
    assert m.tied_embeddings and m.learned_positions and m.bias and m.norm == "layernorm" and not m.gated_mlp
    # hand (brief / Ultra-Scale Playbook GPT form): 12·(12·768² + 13·768) + 50257·768 + 1024·768 + 2·768
    expected = 12 * (12 * 768**2 + 13 * 768) + 50257 * 768 + 1024 * 768 + 2 * 768
    assert expected == 124_439_808  # GPT-2 small: 124.4M
    assert total_params(m) == expected


def test_hf_gpt2_explicit_n_inner_is_used(tmp_path):
    cfg = dict(GPT2_SMALL_CONFIG, n_inner=1024)
    m = load_model(write_config(tmp_path, cfg))
    assert m.ffn_hidden == 1024
    # hand: MLP 2·768·1024 + biases 1024 + 768 instead of 8·768² + 4·768 + 768
    layer = (4 * 768**2 + 4 * 768) + (2 * 768 * 1024 + 1024 + 768) + 4 * 768
    assert total_params(m) == 12 * layer + 50257 * 768 + 1024 * 768 + 2 * 768


def test_hf_gpt_neox_pythia_160m(tmp_path):
    m = load_model(write_config(tmp_path, PYTHIA_160M_CONFIG))
    assert (m.layers, m.hidden, m.ffn_hidden, m.heads, m.vocab) == (12, 768, 3072, 12, 50304)
    assert not m.tied_embeddings and not m.learned_positions and m.bias and m.norm == "layernorm"
    # use_parallel_residual: the config's value, else transformers' GPTNeoXConfig default (True)
    assert m.parallel_residual
    absent = {k: v for k, v in PYTHIA_160M_CONFIG.items() if k != "use_parallel_residual"}
    assert load_model(write_config(tmp_path, absent, "absent")).parallel_residual
    assert not load_model(write_config(tmp_path, {**absent, "use_parallel_residual": False}, "off")).parallel_residual
    # hand: 12·(12·768² + 13·768) + final LayerNorm 2·768 = 85,056,000 non-embedding (Pythia README), plus untied
    # embed_in and embed_out 2·50304·768 -> 162,322,944.
    non_embedding = 12 * (12 * 768**2 + 13 * 768) + 2 * 768
    assert non_embedding == 85_056_000
    assert total_params(m) == non_embedding + 2 * 50304 * 768


def test_hf_config_directory_loads(tmp_path):
    path = write_config(tmp_path, LLAMA_31_8B_CONFIG, dirname="Llama-3.1-8B")
    by_dir = load_model(str(path.parent))
    by_file = load_model(path)
    assert by_dir == by_file
    assert by_dir.name == "Llama-3.1-8B"


def test_a_config_is_named_after_its_checkpoint_directory_other_json_after_itself(tmp_path, monkeypatch):
    path = write_config(tmp_path, LLAMA_31_8B_CONFIG, dirname="Llama-3.1-8B")
    monkeypatch.chdir(path.parent)
    assert load_model("config.json").name == "Llama-3.1-8B"        # a bare config.json: the real directory
    assert load_model(".").name == "Llama-3.1-8B"
    renamed = tmp_path / "llama-3-8b.json"
    renamed.write_text(path.read_text())
    assert load_model(renamed).name == "llama-3-8b"               # not the folder it happens to sit in


@pytest.mark.parametrize("cfg, drop", [
    (LLAMA_31_8B_CONFIG, "num_hidden_layers"),
    (LLAMA_31_8B_CONFIG, "vocab_size"),
    (GPT2_SMALL_CONFIG, "n_embd"),
    (PYTHIA_160M_CONFIG, "intermediate_size"),
])
def test_hf_config_missing_field_names_it(tmp_path, cfg, drop):
    bad = {k: v for k, v in cfg.items() if k != drop}
    with pytest.raises(PlannerError) as info:
        load_model(write_config(tmp_path, bad))
    assert drop in str(info.value)


def test_hf_config_null_required_field_names_it(tmp_path):
    with pytest.raises(PlannerError, match="hidden_size"):
        load_model(write_config(tmp_path, dict(LLAMA_31_8B_CONFIG, hidden_size=None)))


@pytest.mark.parametrize("cfg, patch", [
    (GPT2_SMALL_CONFIG, {"n_embd": 770}),           # 770 % 12 != 0
    (LLAMA_31_8B_CONFIG, {"hidden_size": 4100}),    # 4100 % 32 != 0, no head_dim
])
def test_hf_config_hidden_not_divisible_by_heads(tmp_path, cfg, patch):
    with pytest.raises(PlannerError) as info:
        load_model(write_config(tmp_path, dict(cfg, **patch)))
    msg = str(info.value)
    assert "hidden" in msg and "heads" in msg and "divisible" in msg


def test_hf_config_unsupported_model_type(tmp_path):
    with pytest.raises(PlannerError, match="model_type"):
        load_model(write_config(tmp_path, dict(LLAMA_31_8B_CONFIG, model_type="mamba")))


def test_hf_mlp_activation_is_read_and_exported(tmp_path):
    """Gemma's gated GeLU (GeGLU) is not SwiGLU: the Megatron export must not write --swiglu for it; a squared-ReLU
    model is --squared-relu; Llama stays --swiglu, GPT-2 GeLU (Megatron's default); an activation the planner does
    not know is an error naming the field."""
    from planner.export import megatron_args
    from planner.specs.strategy import Job

    row = {"tp": 1, "cp": 1, "pp": 1, "dp": 8, "vpp": 1, "micro_batch": 1, "sequence_parallel": False,
           "recompute": "none", "zero_stage": 1}
    job = Job(gpus=8, seq_len=2048, global_batch=64)
    gemma = load_model(write_config(tmp_path, {**GEMMA_7B_CONFIG, "hidden_activation": "gelu_pytorch_tanh"}))
    assert gemma.activation == "gelu" and gemma.gated_mlp
    text = megatron_args(row, gemma, job)
    assert "--swiglu" not in text and "GeGLU" in text
    llama = load_model(write_config(tmp_path, llama_31_8b_config(), "llama"))
    assert llama.activation == "silu" and "--swiglu" in megatron_args(row, llama, job)
    gpt2 = load_model(write_config(tmp_path, gpt2_small_config(), "gpt2"))
    assert gpt2.activation == "gelu" and "--swiglu" not in megatron_args(row, gpt2, job)
    nemo = load_model(write_config(tmp_path, {**gpt2_small_config(), "activation_function": "relu2"}, "nemo"))
    assert nemo.activation == "relu2" and "--squared-relu" in megatron_args(row, nemo, job)
    with pytest.raises(PlannerError, match="'hidden_act' is 'relu'"):
        load_model(write_config(tmp_path, {**llama_31_8b_config(), "hidden_act": "relu"}, "relu"))


def test_exports_say_when_they_build_no_parallel_residual(tmp_path):
    """Megatron-LM and torchtitan have no parallel block: their exports say they would train a sequential one (a
    second forward TP reduction per layer); DeepSpeed's block is the model code's, and its notes say so."""
    from planner import evaluate
    from planner.export import export
    m = load_model(write_config(tmp_path, PYTHIA_160M_CONFIG))
    ev = evaluate(m, 8, tp=2, pp=1, dp=4, zero_stage=3, hardware="a100-80gb")
    megatron_text = export("megatron", ev.row, m, ev.result.job)[0]
    torchtitan_text = export("torchtitan", ev.row, m, ev.result.job)[0]
    for text in (megatron_text, torchtitan_text):
        assert "parallel residual" in text and "builds a sequential block" in text
    assert any("gpt_j_residual true" in n for n in export("deepspeed", ev.row, m, ev.result.job)[1])
    sequential = load_model(write_config(tmp_path, {**PYTHIA_160M_CONFIG, "use_parallel_residual": False}, "seq"))
    assert "parallel residual" not in export("megatron", ev.row, sequential, ev.result.job)[0]



def test_partial_rotary_is_read_costs_full_and_is_exported(tmp_path):
    """GPT-NeoX's rotary_pct (Pythia: 0.25; GPTNeoXConfig's default when absent) becomes rotary_fraction; the cost
    is full rotary's (the rope kernels move whole heads: split, rotate, concatenate); the Megatron export writes
    --rotary-percent 0.25, torchtitan's notes that its models rotate every dimension; a share outside (0, 1], or one
    beside learned positions, is refused naming the field."""
    import dataclasses

    from planner import evaluate
    from planner.cost.compute import layer_elementwise_bytes
    from planner.errors import PlannerError
    from planner.export import export
    m = load_model(write_config(tmp_path, PYTHIA_160M_CONFIG))
    absent = {k: v for k, v in PYTHIA_160M_CONFIG.items() if k != "rotary_pct"}
    whole = load_model(write_config(tmp_path, {**PYTHIA_160M_CONFIG, "rotary_pct": 1.0}, "whole"))
    assert m.rotary_fraction == 0.25 and load_model(write_config(tmp_path, absent, "absent")).rotary_fraction == 0.25
    assert float(layer_elementwise_bytes(m, 2048, 1, 1, False)) == float(layer_elementwise_bytes(whole, 2048, 1, 1,
                                                                                                 False))
    ev = evaluate(m, 8, tp=2, pp=1, dp=4, zero_stage=1, hardware="a100-80gb")
    assert "--rotary-percent 0.25" in export("megatron", ev.row, m, ev.result.job)[0]
    assert "--rotary-percent" not in export("megatron", ev.row, whole, ev.result.job)[0]
    sequential = dataclasses.replace(m, parallel_residual=False)
    assert "rotary embedding on 25% of each head's dimensions" in export("torchtitan", ev.row, sequential,
                                                                         ev.result.job)[0]
    both = export("torchtitan", ev.row, m, ev.result.job)[0]             # Pythia itself: both notes
    assert "builds a sequential block" in both and "rotary embedding on 25%" in both
    for bad in (0, 1.5, True, "0.25"):
        with pytest.raises(PlannerError, match="rotary_pct"):
            load_model(write_config(tmp_path, {**PYTHIA_160M_CONFIG, "rotary_pct": bad}, f"bad{bad}"))
    with pytest.raises(PlannerError, match="rotary_fraction"):
        dataclasses.replace(m, rotary_fraction=0.0)
    with pytest.raises(PlannerError, match="rotary_fraction"):
        dataclasses.replace(m, learned_positions=True)


def test_llama_attention_and_mlp_biases_are_counted(tmp_path):
    """Llama's attention_bias biases q, k, v and o_proj; mlp_bias gate, up and down (transformers' LlamaAttention and
    LlamaMLP): by hand, per layer (4096 + 2·1024) + 4096 and 2·14336 + 4096 more than Llama 3.1 8B, x32."""
    base = total_params(load_model(write_config(tmp_path, LLAMA_31_8B_CONFIG, "plain")))
    biased = load_model(write_config(tmp_path, {**LLAMA_31_8B_CONFIG, "attention_bias": True, "mlp_bias": True},
                                     "biased"))
    assert (biased.qkv_bias, biased.out_bias, biased.mlp_bias) == (True, True, True)
    assert total_params(biased) - base == 32 * ((4096 + 2 * 1024) + 4096 + (2 * 14336 + 4096))
    from planner.cost.params import layer_params_per_gpu
    # on TP 8 the row-parallel biases (o_proj, down) stay whole on every rank, the rest splits
    split = (4096 + 2 * 1024) + 2 * 14336
    gap = layer_params_per_gpu(biased, 8) - layer_params_per_gpu(load_model("8b"), 8)
    assert gap == pytest.approx(split / 8 + 2 * 4096)
    qwen = load_model(write_config(tmp_path, QWEN2_05B_CONFIG, "qwen"))   # Q, K, V biased, o_proj not
    assert (qwen.qkv_bias, qwen.out_bias, qwen.mlp_bias) == (True, False, False)
