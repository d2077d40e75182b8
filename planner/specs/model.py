"""Model architectures: presets (planner/presets/*.yaml), user YAML files and HuggingFace config.json files.

Notation (formulas.md §0): L layers, h hidden, F FFN width, a query heads, g KV heads, d_h head dim, V vocab, s seq len.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from planner.checks import is_int
from planner.errors import PlannerError, library_api
from planner.specs._files import read_mapping, validate
from planner.specs.hf_config import MOE_KEYS, hf_fields
from planner.specs.strategy import MAX_GLOBAL_BATCH, MAX_LAYERS, MAX_SEQ_LEN

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"
# Used when a file gives no batch: 4 Mi tokens, the low end of the 4-60M tokens practice (formulas.md §8).
DEFAULT_GLOBAL_BATCH_TOKENS = 4 * 2**20
ACTIVATIONS = ("silu", "gelu", "relu2")


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder-only transformer. Counts are per model; sizes are in elements, not bytes."""

    name: str
    layers: int                 # L
    hidden: int                 # h
    ffn_hidden: int             # F
    heads: int                  # a
    kv_heads: int               # g (= a for MHA)
    vocab: int                  # V
    seq_len: int                # s: default training sequence length
    global_batch_tokens: int    # default global batch, tokens
    head_dim: int               # d_h
    gated_mlp: bool = True      # SwiGLU (3 matrices) vs plain GeLU (2 matrices)
    tied_embeddings: bool = False
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    bias: bool = False          # biases on every linear layer (GPT-2/3, Megatron GPT)
    qkv_bias: bool = False      # biases on Q, K, V only (Qwen2)
    out_bias: bool = False      # a bias on the attention output projection (Llama's attention_bias: Q, K, V and O)
    mlp_bias: bool = False      # biases on the MLP's linear layers (Llama's mlp_bias)
    learned_positions: bool = False
    dropout: bool = False       # dropout masks kept for backward (Korthikanti's GPT accounting)
    qk_norm: bool = False       # a norm over each head's queries and keys (Qwen3: q_norm, k_norm; --qk-layernorm)
    # Attention and MLP side by side on the layer input, their outputs summed (GPT-J, GPT-NeoX's use_parallel_residual,
    # PaLM): the same weights (two norms, as GPT-NeoX) and FLOPs, one forward TP reduction per layer instead of two.
    parallel_residual: bool = False
    # Norms on the attention and MLP outputs too, before each residual add (Gemma 2/3: post_attention_layernorm,
    # pre_ and post_feedforward_layernorm): four per layer, each one's input kept for its backward.
    post_norms: bool = False
    # Gemma 2's tanh soft-capping of the output logits (final_logit_softcapping): logits / c, tanh, · c.
    final_softcap: bool = False
    # Share of each head's dimensions rotary embedding rotates (GPT-NeoX rotary_pct, Megatron --rotary-percent). The
    # same cost: Megatron's and GPT-NeoX's rope split the head, rotate one part and concatenate, moving all of it.
    rotary_fraction: float = 1.0
    description: str = ""
    sliding_window: int | None = None   # attention window (Mistral 7B: 4,096 tokens); none: full causal attention
    window_layers: int | None = None    # layers attending within it (Qwen2: from max_window_layers on); none: all
    # MLP activation: silu (SwiGLU when gated), gelu (GeGLU when gated, Gemma), relu2 (squared ReLU, Nemotron-4).
    # The same FLOPs and bytes for the cost model; the exports need it. "" = silu if gated, else gelu.
    activation: str = ""

    def __post_init__(self):
        """The file schema's rules, for a spec built or changed in Python (dataclasses.replace): positive integer
        sizes, booleans for the switches, heads a multiple of kv_heads; the error names the field."""
        for f in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "global_batch_tokens",
                  "head_dim"):
            value = getattr(self, f)
            if not is_int(value) or value < 1:
                raise PlannerError(f"model {self.name}: {f}", f"got {value!r}, expected a positive integer")
        for f in ("gated_mlp", "tied_embeddings", "bias", "qkv_bias", "out_bias", "mlp_bias", "learned_positions",
                  "dropout", "qk_norm", "parallel_residual", "post_norms", "final_softcap"):
            if not isinstance(getattr(self, f), bool):
                raise PlannerError(f"model {self.name}: {f}", f"got {getattr(self, f)!r}, expected true or false")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise PlannerError(f"model {self.name}: norm", f"got {self.norm!r}, expected rmsnorm or layernorm")
        if isinstance(self.rotary_fraction, bool) or not isinstance(self.rotary_fraction, (int, float)) or not (
                0 < self.rotary_fraction <= 1):
            raise PlannerError(f"model {self.name}: rotary_fraction", f"got {self.rotary_fraction!r}, expected a "
                                                                      "share of the head dimensions in (0, 1]")
        if self.learned_positions and self.rotary_fraction != 1:
            raise PlannerError(f"model {self.name}: rotary_fraction", "expected 1 with learned_positions (no rotary "
                                                                      "embedding to apply to part of the heads)")
        if self.post_norms and self.parallel_residual:
            raise PlannerError(f"model {self.name}: post_norms", "expected false with parallel_residual (no model "
                                                                 "has both: the branches share one residual add)")
        if self.heads % self.kv_heads:
            raise PlannerError(f"model {self.name}: kv_heads",
                               f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.activation == "":
            object.__setattr__(self, "activation", "silu" if self.gated_mlp else "gelu")
        if self.activation not in ACTIVATIONS:
            raise PlannerError(f"model {self.name}: activation",
                               f"got {self.activation!r}, expected one of {', '.join(ACTIVATIONS)}")
        if self.sliding_window is not None and (not is_int(self.sliding_window) or self.sliding_window < 1):
            raise PlannerError(f"model {self.name}: sliding_window",
                               f"got {self.sliding_window!r}, expected a positive integer or none")
        if self.window_layers is not None and (self.sliding_window is None or not is_int(self.window_layers)
                                               or not 1 <= self.window_layers <= self.layers):
            raise PlannerError(f"model {self.name}: window_layers",
                               f"got {self.window_layers!r}, expected a layer count from 1 to {self.layers} with a "
                               "sliding_window, or none")

    def window_binds(self, seq_len: int) -> bool:
        """Whether the sliding window is shorter than the sequence (else it is full causal attention)."""
        return self.sliding_window is not None and seq_len > self.sliding_window

    @property
    def biased(self) -> tuple[bool, bool, bool]:
        """(Q/K/V, attention output, MLP) linear layers with biases."""
        return self.bias or self.qkv_bias, self.bias or self.out_bias, self.bias or self.mlp_bias

    @property
    def layer_norms(self) -> int:
        """Norms per layer over the hidden size: two, four with post_norms (Gemma 2/3)."""
        return 4 if self.post_norms else 2

    @property
    def window_share(self) -> float:
        """Share of the layers that attend within the sliding window (0 without one)."""
        if self.sliding_window is None:
            return 0.0
        return 1.0 if self.window_layers is None else self.window_layers / self.layers

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


# --- file schema ---------------------------------------------------------------------------------------------------

class ModelFile(BaseModel):
    """Schema of a model YAML file (the presets use it too). Strict types: `heads: true` or `gated_mlp: "yes"` is an
    error naming the field, not 1 or True."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _dense(cls, data):
        """An expert count says the model is a mixture of experts: not a typo, a model the planner cannot plan."""
        key = next((k for k in _MOE_FILE_KEYS if isinstance(data, dict) and k in data), None)
        if key is not None:
            raise ValueError(f"{key}: mixture-of-experts models are not supported yet (expert parallelism is next); "
                             "expected a dense model")
        return data

    name: str = Field(min_length=1)
    aliases: list[str] = []
    description: str = ""
    source: str = ""
    layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden: int = Field(ge=1, le=1_000_000)
    ffn_hidden: int = Field(ge=1, le=10_000_000)
    heads: int = Field(ge=1, le=100_000)
    kv_heads: int | None = Field(default=None, ge=1, le=100_000)
    head_dim: int | None = Field(default=None, ge=1, le=100_000)
    vocab: int = Field(ge=1, le=100_000_000)
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)                       # the bounds of a job (--seq-len etc.)
    global_batch_tokens: int | None = Field(default=None, ge=1)
    global_batch: int | None = Field(default=None, ge=1, le=MAX_GLOBAL_BATCH, description="sequences")
    gated_mlp: bool = True
    tied_embeddings: bool = False
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    bias: bool = False
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    learned_positions: bool = False
    dropout: bool = False
    qk_norm: bool = False
    parallel_residual: bool = False
    post_norms: bool = False
    final_softcap: bool = False
    rotary_fraction: float = Field(default=1.0, gt=0, le=1)
    sliding_window: int | None = Field(default=None, ge=1, le=MAX_SEQ_LEN)
    window_layers: int | None = Field(default=None, ge=1, le=MAX_LAYERS)
    activation: Literal[ACTIVATIONS] | None = None      # default: silu if gated_mlp, else gelu

    @field_validator("global_batch_tokens")
    @classmethod
    def _whole_sequences(cls, tokens: int | None, info: ValidationInfo) -> int | None:
        """The same rule as --global-batch-tokens: a batch is a whole number of sequences, never rounded."""
        s = info.data.get("seq_len")
        if tokens is not None and s and tokens % s:
            raise ValueError(f"{tokens:,} tokens is not a whole number of {s}-token sequences (seq_len)")
        if tokens is not None and s and tokens // s > MAX_GLOBAL_BATCH:
            raise ValueError(f"{tokens:,} tokens are {tokens // s:,} sequences of {s} tokens, expected at most "
                             f"{MAX_GLOBAL_BATCH:,}")
        return tokens

    @model_validator(mode="after")
    def _consistent(self) -> "ModelFile":
        if self.global_batch is not None and self.global_batch_tokens is not None:
            raise ValueError("give global_batch (sequences) or global_batch_tokens, not both")
        kv = self.kv_heads or self.heads
        if self.heads % kv:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({kv})")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads}) unless head_dim is given")
        if self.window_layers is not None and (self.sliding_window is None or self.window_layers > self.layers):
            raise ValueError(f"window_layers ({self.window_layers}) needs a sliding_window and at most the "
                             f"{self.layers} layers")
        return self

    def to_spec(self) -> ModelSpec:
        if self.global_batch_tokens is not None:
            batch_tokens = self.global_batch_tokens
        elif self.global_batch is not None:
            batch_tokens = self.global_batch * self.seq_len
        else:
            batch_tokens = DEFAULT_GLOBAL_BATCH_TOKENS
        return ModelSpec(
            name=self.name, layers=self.layers, hidden=self.hidden, ffn_hidden=self.ffn_hidden, heads=self.heads,
            kv_heads=self.kv_heads or self.heads, vocab=self.vocab, seq_len=self.seq_len,
            global_batch_tokens=batch_tokens, head_dim=self.head_dim or self.hidden // self.heads,
            gated_mlp=self.gated_mlp, tied_embeddings=self.tied_embeddings, norm=self.norm, bias=self.bias,
            qkv_bias=self.qkv_bias, out_bias=self.out_bias, mlp_bias=self.mlp_bias,
            learned_positions=self.learned_positions, dropout=self.dropout,
            qk_norm=self.qk_norm, parallel_residual=self.parallel_residual, post_norms=self.post_norms,
            final_softcap=self.final_softcap, rotary_fraction=self.rotary_fraction,
            description=self.description,
            sliding_window=self.sliding_window, window_layers=self.window_layers, activation=self.activation or "",
        )


# In a model file any of these names an MoE model (a config.json may carry top_k as a generation default).
_MOE_FILE_KEYS = MOE_KEYS + ("experts", "moe_ffn_hidden", "experts_per_token", "top_k")


# --- lookup -------------------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _presets() -> dict[str, ModelFile]:
    """Preset name and aliases -> validated file. Names resolve only to these bundled files."""
    index: dict[str, ModelFile] = {}
    for path in sorted(PRESETS_DIR.glob("*.yaml")):
        mf = validate(ModelFile, read_mapping(path, f"preset {path.name}"), f"preset {path.name}")
        for key in [mf.name, *mf.aliases]:
            index[key.lower()] = mf
    return index


def preset_file(name: str) -> ModelFile | None:
    """The bundled preset a name or alias (case-insensitive) refers to, as its validated file; None if none does."""
    return _presets().get(str(name).strip().lower())


def list_models() -> list[ModelFile]:
    seen, out = set(), []
    for mf in _presets().values():
        if mf.name not in seen:
            seen.add(mf.name)
            out.append(mf)
    return out


@library_api
def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A preset by name or alias, a model YAML file, a HuggingFace config.json, or a directory holding one."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = str(name_or_path).strip()
    if not text:
        raise PlannerError("--model", "empty; expected a preset name (see `plan models`), a YAML or a config.json path")
    path = Path(text).expanduser()
    try:
        is_dir = path.is_dir()
    except (OSError, ValueError):                 # a name too long or otherwise unusable as a path
        is_dir = False
    if text.endswith((".yaml", ".yml", ".json")) or "/" in text or "\\" in text or is_dir:
        if is_dir and (path / "config.json").is_file():
            path = path / "config.json"
        elif is_dir:
            raise PlannerError("--model", f"directory {text!r} holds no config.json; expected a model YAML, a "
                                          "HuggingFace config.json or a directory holding one")
        where = f"model file {path.name}"
        data = read_mapping(path, "--model")
        if path.suffix == ".json":
            return validate(ModelFile, hf_fields(data, name=_hf_name(path), where=where), where).to_spec()
        return validate(ModelFile, data, where).to_spec()
    index = _presets()
    if text.lower() in index:
        return index[text.lower()].to_spec()
    close = difflib.get_close_matches(text.lower(), list(index), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    if _is_file(path):                           # a file by that name here: names only resolve to presets
        hint += f"; a file {text!r} exists here: give it as ./{text} (a path) or with a .yaml/.json name"
    raise PlannerError("--model", f"unknown model {text!r}{hint} (see `plan models`, or pass a YAML or config.json path)")


def _hf_name(path: Path) -> str:
    """A checkpoint's config.json is named after its directory (Meta-Llama-3-8B/config.json), resolved so that `.`
    and a bare config.json give the real directory; any other JSON file after its own name."""
    if path.name != "config.json":
        return path.stem
    try:
        return path.resolve().parent.name or path.stem
    except (OSError, RuntimeError):              # an unresolvable path (symlink loop): the name as given
        return path.parent.name or path.stem


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False
