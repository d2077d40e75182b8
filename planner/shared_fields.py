"""Field rules of the shared dataset's flat format (planner.shared_runs): free-text recompute, ZeRO/FSDP and
FlashAttention descriptions read into the planner's knobs, the GPU name into a profile, the source's year, and
whether torch.compile was on. Pure text rules, no I/O; a field the planner cannot express
raises Skip with the reason."""
from __future__ import annotations

import math
import re


class Skip(Exception):
    """The run cannot be expressed; the message says why."""


def text_of(value) -> str:
    return "" if value is None else str(value).lower()


# What a source writes when it does not say (the knob is then searched, as for null).
_UNSTATED = ("", "n/a", "na", "unknown", "not stated", "?", "null", "none stated")


_ORDINALS = {"other": 2, "2nd": 2, "second": 2, "3rd": 3, "third": 3}


def recompute_mode(value) -> str | None:
    """none | selective (Megatron's: the attention core) | full | op (torchtitan's per-op policy, "selective op") |
    "every N" (every N-th layer fully: torchtitan's "selective layer", selective_ac_option / ac_freq N, default 2) |
    "block N" (Megatron's block method: the first N layers of each pipeline chunk); None when unknown. Megatron's
    uniform method recomputes every layer (in groups): full. Micro-batch-level, custom and other partial policies
    are not expressible."""
    text = text_of(value).strip()
    if text in _UNSTATED:
        return None
    unknown = Skip(f"recompute {value!r}: only none, selective (the attention core), full (of every layer, every"
                   " n-th layer or the first n of each chunk) and torchtitan's per-op policy are modelled")
    if re.search(r"\b(custom|micro-?batch(es)?|partial)\b|\d\s*%|\d+\s+of\s+\d+", text):
        raise unknown
    if re.search(r"\buniform\b", text):
        return "full"
    # "every (transformer) block" / "each layer" / "every 2nd block": layers, in torchtitan's and PyTorch's words;
    # Megatron's block method names a count ("block 4", "recompute_num_layers 4")
    text = re.sub(r"\b(?:every|each)\s+((?:\d+|other|2nd|second|3rd|third)(?:th|st|nd|rd)?\s+)?"
                  r"(?:transformer\s+|decoder\s+)?(?:block|layer)s?\b",
                  lambda m: f"every {m.group(1) or ''}layer", text)
    if re.search(r"\bblock\b|recompute[_ -]num[_ -]layers|\bfirst\s+\d+", text):
        n = re.search(r"(?:num[_ -]layers|first|block)\D{0,24}?(\d+)|(\d+)\s*layers?", text)
        if not n or int(n.group(1) or n.group(2)) < 1:
            raise unknown
        return f"block {int(n.group(1) or n.group(2))}"
    if re.search(r"\bop\b|per-op|op-level", text):
        if re.search(r"\b(full|none|layers?|every)\b", text):
            raise unknown
        return "op"
    freq = (re.search(r"(?:selective_ac_option|ac_freq)\W*(\d+)", text)
            or re.search(r"every\s+(\d+|other|2nd|second|3rd|third)(?:th|st|nd|rd)?\b", text))
    if freq or re.search(r"\bselective[ _-]layers?\b", text):
        n = int(_ORDINALS.get(freq.group(1), freq.group(1))) if freq else 2
        if n < 1:
            raise unknown
        return "full" if n == 1 else f"every {n}"
    if "selective" in text:                     # "every layer" only qualifies it
        if re.search(r"\b(layers?|every)\b", re.sub(r"(on\s+)?every\s+layers?", "", text)):
            raise unknown
        return "selective"
    if re.search(r"every\s+layers?\b", text):
        return "full"
    for pattern, mode in ((r"\bfull\b", "full"), (r"\b(none|no|off|false|disabled)\b", "none"),
                          (r"^(true|yes|on)\b|checkpoint|recomput|remat", "full")):   # unqualified: every layer
        if re.search(pattern, text):
            return mode
    raise unknown


# Fields that hold a number when stated (null: not stated). Checked first, so that a malformed value is named.
_NUMBERS = ("num_gpus", "params_b", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "tp",
            "cp", "pp", "dp", "ep", "vpp", "model_parallel_size", "micro_batch", "global_batch", "global_batch_tokens",
            "iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "measured_tflops_per_gpu", "measured_mfu",
            "measured_hfu", "measured_pct_of_peak", "memory_per_gpu_gib", "peak_tflops_assumed")


def recompute_of(run: dict, notes: dict) -> str | None:
    """The recompute knob; torchtitan's plain "selective" is its per-op policy: the Llama 3 configs it ships set
    selective_ac_option = 'op' (train_configs/llama3_8b.toml; the code's default is every 2nd layer), and it has no
    attention-core-only mode to mean Megatron's."""
    mode = recompute_mode(run.get("recompute"))
    stated = text_of(run.get("recompute"))
    if mode == "selective" and "torchtitan" in text_of(run.get("framework")) and not re.search(
            r"attention|attn|core|megatron", stated):
        notes["recompute"] = (f"{run.get('recompute')!r} in torchtitan: its per-op policy (op), as its shipped "
                              "Llama 3 configs set selective_ac_option")
        return "op"
    return mode


def checked_numbers(run: dict) -> dict:
    """The run with its numeric fields checked, a number given as text ("8") read as the number."""
    run = dict(run)
    for key in _NUMBERS:
        value = run.get(key)
        if value is None:
            continue
        try:
            ok = not isinstance(value, bool) and math.isfinite(float(value)) and float(value) > 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise Skip(f"malformed run: {key} = {value!r}, expected a positive, finite number")
        if isinstance(value, str):
            run[key] = int(float(value)) if float(value).is_integer() else float(value)
    return run


def dp_replicate_of(value) -> int | None:
    """Hybrid sharding's replicate degree where the zero_stage text states one ("HSDP, dp_replicate=16", "FSDP
    HYBRID_SHARD, 4 replicas"); None for a text without hybrid sharding. Hybrid sharding of unstated degree is a
    skip: the flat format has no field for it."""
    text = text_of(value)
    instances = r"(?:num[_-])?distributed[_-]optimizer[_-]instances"
    if not re.search(rf"hybrid|hsdp|dp_replicate|replicate_degree|{instances}|(?<![\w-])\d+\s*replicas", text):
        return None
    m = (re.search(rf"(?:dp_replicate|replicate_degree|{instances})\s*[=:]?\s*(\d+)", text)
         or re.search(r"(?<![\w-])(\d+)\s*(?:replicas|replica groups|copies)", text))
    if not m or int(m.group(1)) < 1:
        raise Skip(f"zero_stage {value!r}: hybrid sharding of unstated degree (the flat format has no field for it); "
                   "state it as dp_replicate=N, or write the run in the bundled format with layout.dp_replicate")
    return int(m.group(1))


def offloaded(*texts) -> str | None:
    """The text naming CPU or NVMe offload of model states or activations (ZeRO-Offload, ZeRO-Infinity, FSDP's
    CPUOffload), which the planner cannot price (every state is priced in HBM), or None; "no offload" is not."""
    for text in texts:
        text = text_of(text)
        if re.search(r"offload|zero-?infinity|nvme", text) and not re.search(
                r"\b(no|without|not|disabled)\s+(\w+\s+)?(offload|zero-?infinity|nvme)|offload\w*\W+(false|none|off)\b",
                text):
            return text
    return None


def zero_stage_of(value) -> int | None:
    text = text_of(value).strip()
    if text in _UNSTATED:
        return None
    if dp_replicate_of(value) is not None:
        # A stated stage; Megatron's distributed-optimizer instances are ZeRO-1 in groups; FSDP HYBRID_SHARD shards
        # parameters too (ZeRO-3 in groups), its _HYBRID_SHARD_ZERO2 keeps them gathered
        stated = re.search(r"zero-?\s*([1-3])\b|stage\s*([1-3])\b", text)
        if stated:
            return int(stated.group(1) or stated.group(2))
        if re.search(r"distributed.optimizer", text):      # its instances included
            return 1
        return 2 if re.search(r"shard_grad_op|(not|no|never)\s+reshard", text) else 3
    if re.search(r"no_shard|\bddp\b", text):
        return 0
    if re.search(r"fsdp|fully.shard|full_shard|shard_grad_op", text):
        # Parameters kept gathered after the forward (FSDP SHARD_GRAD_OP, reshard_after_forward=False): ZeRO-2.
        keep = r"(not|no|never)\s+reshard|reshard_after_forward\W+(false|never)|shard_grad_op"
        return 2 if re.search(keep, text) else 3
    if re.search(r"distributed.optimizer|dist-?opt\b|optimizer.states?.shard|shard\w*.optimizer", text):
        return 1                       # Megatron's distributed optimizer shards optimizer states: ZeRO-1
    if re.search(r"^\s*(none|no|off|false|disabled)\b", text):
        return 0
    m = re.search(r"(?:zero-?\s*|stage\s*|^)([0-3])\b", text)
    if not m:
        raise Skip(f"zero_stage {value!r}: expected a ZeRO stage 0-3, FSDP, the distributed optimizer or none")
    return int(m.group(1))


# Generations a framework text names (a clause ends at , or ;): FlashAttention-2/3 ("flash-attn==2.3.3", "FA-2",
# "(v2)" after the kernel's name) or cuDNN attention; FlashAttention-1 ("flash-attn 1.0.4", "(v1)") or its Triton
# port ("Triton FlashAttention"). Transformer Engine alone does not say: it ran on flash-attn 1.x until it
# required >= 2.0.6 in January 2024 (TransformerEngine PR #585).
_KERNEL = r"(flash.?(attn|attention)|\bfa\b)"
_FLASH_V2 = re.compile(_KERNEL + r"[ _-]*\(?(v|==|>=|~=|:|version)?\s*[23](?!\d)|\bfa[ -]?v?[23]\b|"
                       r"(flash|attention)[^,;]*\(v?[23](\.\d+)*\)|cudnn[^,;]*(attn|attention)")
# FlashAttention-3 class where the hardware runs it (Hopper): FA3 named, its flash_attn_interface, or cuDNN's fused
# attention (Transformer Engine's NVTE_FUSED_ATTN=1), which the FA3 paper measures at FA3's speed (its Fig. 5).
_FLASH_V3 = re.compile(_KERNEL + r"[ _-]*\(?(v|==|>=|~=|:|version)?\s*3(?!\d)|\bfa[ -]?v?3\b|flash_attn_interface|"
                       r"(flash|attention)[^,;]*\(v?3(\.\d+)*\)|cudnn[^,;]*(attn|attention)|nvte_fused_attn\W*1")
_FLASH_V1 = re.compile(_KERNEL + r"[ _-]*\(?(v|==|>=|~=|:|version)?\s*(1|0\.\d)(?!\d)|\bfa[ -]?v?1\b|"
                       r"(flash|attention)[^,;]*\(v?1(\.\d+)*\)|triton[ _-]*(flash|attn|attention|fa\b)|"
                       + _KERNEL + r"[ _-]*\(?triton")


def flash_generation(fw: str, year: int | None, gen3: bool = False) -> int:
    """The generation the framework names, else the year's: FlashAttention-2 (July 2023) reached the stacks around
    January 2024 (PyTorch 2.2's SDPA, Transformer Engine), so a 2023 run that names none used the first. `gen3`:
    the hardware runs FlashAttention-3-class kernels (its profile has their rate), where FA3 or cuDNN named is 3."""
    if gen3 and _FLASH_V3.search(fw):
        return 3
    if _FLASH_V2.search(fw):
        return 2
    if _FLASH_V1.search(fw):
        return 1
    return 1 if year is not None and year < 2024 else 2


# Profiles by GPU name, most specific first.
_HARDWARE = ((r"gb200", "gb200"), (r"b200", "b200"), (r"h200", "h200-sxm"), (r"h100", "h100-sxm"),
             (r"mi300x", "mi300x"), (r"a100.*40\s*g", "a100-40gb"), (r"a100.*80\s*g", "a100-80gb"),
             (r"a100", "a100"), (r"v100", "v100-sxm"))
A100_80GB_SINCE = 2021      # the A100 80GB was announced in November 2020: an earlier A100 without a size had 40 GB
_NO_PROFILE = {r"tpu": "TPU (no TPU profile yet)", r"h800": "H800 (its NVLink is cut to 400 GB/s; no profile)",
               r"gh200": "GH200 (Grace Hopper superchip; no profile)",
               r"pcie|h[12]00\s*nvl\b": "PCIe card (no NVSwitch node; no profile)",
               # the h100-sxm profile is the 80 GB HBM3 700 W part; 94 GB is the NVL card, 96 GB HBM2e a 500 W SXM
               # part whose peak lies between the SXM and NVL ones (torchtitan docs/performance.md)
               r"h100\D{0,12}9[46]\s*gb?\b|h100.*hbm2e": "H100 with 94 or 96 GB (the NVL card, or an HBM2e part at "
                                                        "a lower power): not the 80 GB SXM profile; no profile"}


# The year a framework's runs date from when the source names none (it decides the runtime shared_runs sets).
_FRAMEWORK_YEAR = ((r"megatron-core|nemo|megatron-bridge|torchtitan", 2024), (r"composer|llm-foundry|gigatron", 2023),
                   (r"deepspeed|gpt-neox|metaseq", 2022))


def year_of(run: dict) -> int | None:
    """The source's year (the latest year its citation names: older ones are its references; arXiv ids such as
    2010.12345 are not years), else its framework's era; None: unknown, treated as current."""
    text = re.sub(r"\d{4}\.\d{4,5}", " ", f"{run.get('group', '')} {run.get('source', '')}")
    found = re.findall(r"\b20[12]\d\b", text)
    if found:
        return max(int(y) for y in found)
    fw = text_of(run.get("framework"))
    return next((year for pattern, year in _FRAMEWORK_YEAR if re.search(pattern, fw)), None)


def hardware_of(run: dict, year: int | None, notes: dict) -> str:
    """The profile a GPU name means, noted. An A100 of unstated memory is the 40 GB part before 2021 (the only one
    there was) and the 80 GB part after, as it is in most published large runs (a wrong 40 GB would also predict
    false out-of-memory); a source of unknown year counts as current."""
    gpu = text_of(run.get("gpu"))
    for pattern, reason in _NO_PROFILE.items():
        if re.search(pattern, gpu):
            raise Skip(reason)
    for pattern, profile in _HARDWARE:
        if re.search(pattern, gpu):
            notes["hardware"] = f"{run.get('gpu')!r} -> {profile}"
            if profile == "a100":
                profile = "a100-40gb" if year is not None and year < A100_80GB_SINCE else "a100-80gb"
                notes["hardware"] = (f"{run.get('gpu')!r} -> {profile} (memory not stated: the A100 of "
                                     f"{year or 'today, the source has no year'})")
            return profile
    raise Skip(f"no hardware profile for GPU {run.get('gpu')!r}")


def compiled(framework_text: str) -> bool:
    """The framework text says torch.compile was on: 'torch.compile', 'compile = true', 'compiled', not 'compile =
    false', 'no torch.compile' or 'without compile'."""
    text = framework_text.lower()
    if re.search(r"\b(no|without|not)\s+(torch\.)?compile|compile\s*[=:]?\s*(false|off|no)\b", text):
        return False
    return re.search(r"compile", text) is not None
