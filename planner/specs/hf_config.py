"""HuggingFace config.json files read as the planner's model fields (specs.model validates them as a model file):
llama, mistral, phi3, qwen2, qwen3 and gemma, gemma2, gemma3_text (Llama-like), starcoder2, gpt2 and gpt_neox; transformers' defaults
where a key is absent. What a dense model cannot express (experts, quantization, ...) is refused, never planned as
another model."""

from __future__ import annotations

from planner.checks import is_int
from planner.errors import PlannerError

DEFAULT_HF_SEQ_LEN = 4096

_GEMMA = {"gemma", "gemma2", "gemma3_text"}
_LLAMA_LIKE = {"llama", "mistral", "phi3", "qwen2", "qwen3"} | _GEMMA
# Those whose attention applies sliding_window on every layer whenever the config sets it (transformers' Mistral,
# Phi3 and Starcoder2 attention pass config.sliding_window to every layer).
_WINDOW_WHEN_SET = {"mistral", "phi3", "starcoder2"}
# transformers' head_dim when a config leaves it out: Qwen3Config 128, the Gemma configs 256, else hidden / heads.
_HF_HEAD_DIM = {"qwen3": 128, "gemma": 256, "gemma2": 256, "gemma3_text": 256}
# Gemma 2 and 3 window every layer but each n-th (transformers' Gemma2Config: every second; Gemma3TextConfig:
# sliding_window_pattern, 6 by default: "sliding_attention" if bool((i + 1) % pattern) else "full_attention").
_WINDOW_PATTERN = {"gemma2": 2, "gemma3_text": 6}
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
_HF_TYPES = "llama, mistral, phi3, qwen2, qwen3, gemma, gemma2, gemma3_text, starcoder2, gpt2, gpt_neox"       # what hf_fields reads


def _hf_field(cfg: dict, key: str, where: str, default=None):
    """A positive-integer field of a config.json; `default` when absent (None: required)."""
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise PlannerError(where, f"missing field {key!r} needed to build the model")
        return default
    if not is_int(value) or value < 1:
        raise PlannerError(where, f"field {key!r} must be a positive integer, got {value!r}")
    return int(value)


def _hf_bool(cfg: dict, key: str, where: str, default: bool) -> bool:
    """A true/false field of a config.json; `default` when absent. No coercion: "false" is not False."""
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PlannerError(where, f"field {key!r} must be true or false, got {value!r}")
    return value


def _hf_float(cfg: dict, key: str, where: str, default: float) -> float:
    """A share in (0, 1] of a config.json; `default` when absent."""
    value = cfg.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise PlannerError(where, f"field {key!r} must be a number in (0, 1], got {value!r}")
    return float(value)


def _hf_unsupported(cfg: dict, where: str) -> None:
    """What a config can say that a dense full-attention bf16 model cannot express: one line, never a silently wrong
    dense model."""
    if "model_type" not in cfg:
        raise PlannerError(where, f"missing field 'model_type' (one of: {_HF_TYPES})")
    experts = {k: cfg[k] for k in MOE_KEYS if cfg.get(k) not in (None, 0, 1)}
    if experts:
        key, value = next(iter(experts.items()))
        raise PlannerError(where, f"field {key!r} is {value!r}: mixture-of-experts models are not supported yet "
                                  "(dense decoders only)")
    if isinstance(cfg.get("text_config"), dict):
        raise PlannerError(where, f"field 'text_config': a multimodal config ({cfg.get('model_type')}), whose vision "
                                  "encoder the planner does not price; give the text model's own config (its "
                                  "text_config, as a config.json with model_type gemma3_text for Gemma 3)")
    if cfg.get("quantization_config") is not None:
        raise PlannerError(where, "field 'quantization_config': quantized weights are not modelled (the planner "
                                  "trains in bf16 mixed precision); remove it to plan the bf16 model")


def _hf_activation(cfg: dict, where: str, *keys: str) -> str | None:
    """The MLP activation a config names (hidden_act, Gemma's hidden_activation, GPT-2's activation_function) as
    silu, gelu (any of transformers' GeLU variants) or relu2; None when absent (the gated/plain default)."""
    value = next((cfg[k] for k in keys if cfg.get(k) is not None), None)
    if value is None:
        return None
    text = str(value).lower()
    if text in ("silu", "swish", "swiglu"):
        return "silu"
    if "gelu" in text:                             # gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, quick_gelu, geglu
        return "gelu"
    if text in ("relu2", "squared_relu", "relu_squared"):
        return "relu2"
    raise PlannerError(where, f"field {keys[0]!r} is {value!r}: expected silu, a GeLU variant or squared ReLU")


def _hf_window(cfg: dict, mtype: str, where: str) -> tuple[int, int | None]:
    """(The sliding window, 0 for none; how many layers attend within it, None for all). Mistral applies
    sliding_window whenever it is set, on every layer; Qwen2/Qwen3 only with use_sliding_window true, and then on
    the layers from max_window_layers (default 28) on (transformers' configuration_qwen2.py); Gemma 2 and 3 on all
    but every n-th layer (_WINDOW_PATTERN); an explicit layer_types on those it names sliding_attention."""
    default_on = mtype in _WINDOW_WHEN_SET or mtype in _WINDOW_PATTERN
    active = cfg.get("use_sliding_window") is True if "use_sliding_window" in cfg else default_on
    # Gemma2Config and Gemma3TextConfig default to a 4,096-token window; the others to none
    window = _hf_field(cfg, "sliding_window", where, 4096 if mtype in _WINDOW_PATTERN else 0) if active else 0
    types = cfg.get("layer_types")
    if not window or (mtype in _WINDOW_WHEN_SET and types is None):
        return window, None
    layers = _hf_field(cfg, "num_hidden_layers", where)
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise PlannerError(where, f"field 'layer_types' must list one attention type per layer ({layers}), got "
                                      f"{types!r}"[:200])
        sliding = sum(t == "sliding_attention" for t in types)
    elif mtype in _WINDOW_PATTERN:
        every = _WINDOW_PATTERN[mtype]
        if mtype == "gemma3_text":                     # Gemma 2's pattern is fixed; Gemma 3's a config field
            every = cfg.get("sliding_window_pattern", every)
        if not is_int(every) or every < 1:
            raise PlannerError(where, f"field 'sliding_window_pattern' must be a positive integer, got {every!r}")
        sliding = layers - layers // every
    else:
        first = cfg.get("max_window_layers", 28)
        if not is_int(first) or first < 0:
            raise PlannerError(where, f"field 'max_window_layers' must be a non-negative integer, got {first!r}")
        sliding = max(layers - first, 0)
    if sliding == 0:
        return 0, None
    return window, None if sliding == layers else sliding


def hf_fields(cfg: dict, name: str, where: str) -> dict:
    """Map a HuggingFace config.json onto the planner's architecture fields (_HF_TYPES), a model file's mapping for
    ModelFile to validate; what a dense model cannot express is refused (_hf_unsupported)."""
    mtype = str(cfg.get("model_type", "")).lower()
    _hf_unsupported(cfg, where)
    window, window_layers = _hf_window(cfg, mtype, where)
    if mtype in _LLAMA_LIKE:
        heads = _hf_field(cfg, "num_attention_heads", where)
        fields = dict(
            layers=_hf_field(cfg, "num_hidden_layers", where), hidden=_hf_field(cfg, "hidden_size", where),
            ffn_hidden=_hf_field(cfg, "intermediate_size", where), heads=heads,
            kv_heads=_hf_field(cfg, "num_key_value_heads", where, heads),
            head_dim=_hf_field(cfg, "head_dim", where, _HF_HEAD_DIM.get(mtype, 0)) or None,
            vocab=_hf_field(cfg, "vocab_size", where),
            seq_len=min(_hf_field(cfg, "max_position_embeddings", where, DEFAULT_HF_SEQ_LEN), DEFAULT_HF_SEQ_LEN),
            sliding_window=window or None, window_layers=window_layers,
            # transformers' defaults when the key is absent: the Gemma configs tie the embeddings, the others do not.
            gated_mlp=True, tied_embeddings=_hf_bool(cfg, "tie_word_embeddings", where, mtype in _GEMMA),
            norm="rmsnorm",
            # Qwen2 biases Q, K, V only; Llama's attention_bias also biases o_proj, its mlp_bias the MLP
            qkv_bias=_hf_bool(cfg, "attention_bias", where, mtype == "qwen2"),
            out_bias=mtype != "qwen2" and _hf_bool(cfg, "attention_bias", where, False),
            mlp_bias=_hf_bool(cfg, "mlp_bias", where, False),
            # Qwen3's and Gemma 3's q_norm and k_norm (RMSNorm over head_dim)
            qk_norm=mtype in ("qwen3", "gemma3_text"),
            # Gemma 2/3 decoder layers: pre- and post-norms around attention and the MLP; Gemma 2 soft-caps the
            # logits (final_logit_softcapping, 30 by default; Gemma 3 sets none)
            post_norms=mtype in ("gemma2", "gemma3_text"),
            final_softcap=mtype == "gemma2" and cfg.get("final_logit_softcapping", 30.0) is not None,
            activation=_hf_activation(cfg, where, "hidden_activation", "hidden_act") if mtype in _GEMMA else
            _hf_activation(cfg, where, "hidden_act"),
            # Phi-3/Phi-4's partial_rotary_factor (Phi3Config's default 1.0: every dimension)
            rotary_fraction=_hf_float(cfg, "partial_rotary_factor", where, 1.0) if mtype == "phi3" else None,
        )
    elif mtype == "starcoder2":
        heads = _hf_field(cfg, "num_attention_heads", where)
        drops = [cfg.get(k, 0.0) for k in ("attention_dropout", "residual_dropout", "embedding_dropout")]
        if any(isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1 for d in drops):
            raise PlannerError(where, f"fields attention_dropout, residual_dropout, embedding_dropout must be numbers "
                                      f"in [0, 1), got {drops!r}")
        fields = dict(
            layers=_hf_field(cfg, "num_hidden_layers", where), hidden=_hf_field(cfg, "hidden_size", where),
            ffn_hidden=_hf_field(cfg, "intermediate_size", where), heads=heads,
            kv_heads=_hf_field(cfg, "num_key_value_heads", where, heads), vocab=_hf_field(cfg, "vocab_size", where),
            seq_len=min(_hf_field(cfg, "max_position_embeddings", where, DEFAULT_HF_SEQ_LEN), DEFAULT_HF_SEQ_LEN),
            sliding_window=window or None,
            # Starcoder2Config's defaults: LayerNorm, a plain GeLU MLP (c_fc, c_proj), biases on every linear layer
            # (use_bias), tied embeddings; dropout where any of its three rates is set
            gated_mlp=False, tied_embeddings=_hf_bool(cfg, "tie_word_embeddings", where, True), norm="layernorm",
            bias=_hf_bool(cfg, "use_bias", where, True), dropout=any(d > 0 for d in drops),
            activation=_hf_activation(cfg, where, "hidden_act"),
        )
    elif mtype == "gpt2":
        hidden = _hf_field(cfg, "n_embd", where)
        fields = dict(
            layers=_hf_field(cfg, "n_layer", where), hidden=hidden,
            ffn_hidden=_hf_field(cfg, "n_inner", where, 4 * hidden),
            heads=_hf_field(cfg, "n_head", where), vocab=_hf_field(cfg, "vocab_size", where),
            seq_len=_hf_field(cfg, "n_positions", where, _hf_field(cfg, "n_ctx", where, 1024)), gated_mlp=False,
            tied_embeddings=_hf_bool(cfg, "tie_word_embeddings", where, True),
            norm="layernorm", bias=True, learned_positions=True, dropout=True,
            activation=_hf_activation(cfg, where, "activation_function"),
        )
    elif mtype == "gpt_neox":
        fields = dict(
            layers=_hf_field(cfg, "num_hidden_layers", where), hidden=_hf_field(cfg, "hidden_size", where),
            ffn_hidden=_hf_field(cfg, "intermediate_size", where), heads=_hf_field(cfg, "num_attention_heads", where),
            vocab=_hf_field(cfg, "vocab_size", where),
            seq_len=min(_hf_field(cfg, "max_position_embeddings", where, 2048), DEFAULT_HF_SEQ_LEN), gated_mlp=False,
            tied_embeddings=_hf_bool(cfg, "tie_word_embeddings", where, False), norm="layernorm", bias=True,
            activation=_hf_activation(cfg, where, "hidden_act"),
            # GPTNeoXConfig's default is True (GPT-NeoX-20B, Pythia): attention and MLP in parallel, two norms
            parallel_residual=_hf_bool(cfg, "use_parallel_residual", where, True),
            rotary_fraction=_hf_float(cfg, "rotary_pct", where, 0.25),     # GPTNeoXConfig's default (NeoX-20B, Pythia)
        )
    else:
        raise PlannerError(where, f"model_type {cfg.get('model_type')!r} is not supported "
                                  f"(expected one of: {_HF_TYPES})")
    return {"name": name, **{k: v for k, v in fields.items() if v is not None}}
