"""Helpers more than one test file uses: the relative-error helper, the HuggingFace config.json documents of the
models several files build, a minimal run in the shared dataset's flat format, and the memory parts by keyword.
Each document function returns a fresh dict, so a test may change its copy freely."""

from __future__ import annotations


def rel(a, b):
    """Relative error of a against the reference value b: |a - b| / |b|."""
    return abs(a - b) / abs(b)


# --- HuggingFace config.json documents -------------------------------------------------------------------------------

def llama_31_8b_config() -> dict:
    """meta-llama/Llama-3.1-8B config.json, verbatim."""
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
        "vocab_size": 128256,
    }


def llama_31_8b_core() -> dict:
    """The short form: model_type and the size fields only (in this order), values from llama_31_8b_config()."""
    full = llama_31_8b_config()
    keys = ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
            "num_key_value_heads", "vocab_size", "max_position_embeddings")
    return {k: full[k] for k in keys}


def gpt2_small_config() -> dict:
    """openai-community/gpt2 config.json, verbatim."""
    return {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_inner": None, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257,
    }


def gpt2_small_core() -> dict:
    """The short form: model_type and the size fields only (in this order), values from gpt2_small_config()."""
    full = gpt2_small_config()
    return {k: full[k] for k in ("model_type", "n_layer", "n_embd", "n_head", "vocab_size", "n_positions")}


def hf_model(tmp_path, cfg: dict, name: str):
    """The model a config.json holding `cfg` loads as, from a checkpoint directory called `name` (its name)."""
    import json

    import planner

    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return planner.load_model(d)


def zero3_pays_off(m, tp: int, pp: int, dp: int, param_bytes=2, grad_bytes=4) -> bool:
    """Whether ZeRO-3 can only lower memory against ZeRO-2 on every pipeline stage: it saves the sharded 16-bit
    weights, param_bytes·P_stage·(1 − 1/d), and adds the gathered units' transients (memory.zero3_transient_bytes:
    weights, prefetched weights and two gradients of a layer, or of the V×h embedding/head on the edge stages)."""
    from planner.cost.memory import stage_params, zero3_transient_bytes
    from planner.cost.params import layer_params_per_gpu
    from planner.specs.strategy import Precision

    prec = Precision(param_bytes=param_bytes, grad_bytes=grad_bytes)
    layer, edge = float(layer_params_per_gpu(m, tp)), m.vocab * m.hidden / tp
    stages = [float(x) for x in stage_params(m, tp, pp)]          # first, middle, last
    index = (0, 1 if pp > 2 else 0, pp - 1)                       # the stages memory_breakdown looks at
    costs = [float(zero3_transient_bytes(layer, edge, r == 0, r == pp - 1, prec)) for r in index]
    return all(param_bytes * p_r * (1 - 1 / dp) >= c for p_r, c in zip(stages, costs))


# --- The shared dataset's flat run format (planner.shared_runs) ------------------------------------------------------

def flat_run(**fields) -> dict:
    """A minimal run in the shared dataset's flat format (GPT-3 175B on 1024 A100s); fields override."""
    base = dict(id="r", group="g", source="s", model="GPT 175B", params_b=None, layers=96, hidden=12288,
                ffn_hidden=None, heads=96, kv_heads=None, vocab=51200, seq_len=2048, moe=None, gpu="A100 80GB",
                num_gpus=1024, tp=8, pp=16, dp=None, cp=None, ep=None, vpp=None, model_parallel_size=None,
                sequence_parallel=None, recompute="full", zero_stage=None, micro_batch=1, global_batch=1536,
                global_batch_tokens=None, precision="bf16", framework="Megatron-Core", iteration_time_s=30.0,
                tokens_per_s=None, tokens_per_s_per_gpu=None, measured_tflops_per_gpu=None, measured_mfu=None,
                measured_hfu=None, measured_pct_of_peak=None, memory_per_gpu_gib=None, peak_tflops_assumed=None,
                flops_accounting=None, inferred=None)
    return {**base, **fields}


# --- memory -------------------------------------------------------------------------------------------------------------

def memory_parts(m, *, tp, pp, dp, b, mb, vpp, sp, rc, zero, s, flash):
    """Memory parts (bytes) of the most loaded stage, with a 2 GiB framework overhead, by keyword."""
    from planner.cost import memory

    parts, _ = memory.memory_breakdown(m, s, tp, pp, dp, b, mb, vpp, sp, rc, zero, flash_attention=flash,
                                       overhead_bytes=2 * 2**30)
    return parts
