"""Read measured runs written in the shared dataset's flat format (shared/validation/published_runs.yaml).

That format describes each run in the words of its source: `gpu: "A100-SXM4-80GB (Selene)"`, `framework:
"Megatron-Core r0.8.0 (--overlap-grad-reduce ...)"`, `recompute: "full (DeepSpeed activation checkpointing)"`,
`zero_stage: "FSDP FULL_SHARD"`, null where the source is silent. `convert_run` maps one such run onto the
planner's own run schema (planner/data/published_runs.yaml) with fixed, documented rules, and records every rule it
applied under `assumptions`; a run the cost model cannot express (MoE, expert parallelism, FP8 or 32-bit training,
hybrid sharding of unstated degree, CPU/NVMe offload, TPUs, micro-batch-level recompute, no GPU count, a gated MLP of unstated width, ...) is returned as skipped
with the reason. Nothing here is tuned to a run: the same rules apply to every file.

Rules (each one is why, briefly):
- hardware: the GPU's name picks the profile; an A100 whose memory the source does not state is the 40 GB
  original (the 80 GB part shipped in November 2020, after the earliest runs that omit it). The format has no
  network field; a run may add the bundled format's `network` ({nics_per_node, nic_gbit_per_s, name}) for a
  cluster whose node network is not the profile's, and it is priced on it.
- architecture: a model-family name (Llama, MPT, BLOOM, GPT-NeoX, Nemotron, OPT, Falcon, GPT) fixes the details
  the format lacks (gated MLP, tied embeddings, norm, biases, positions, dropout); otherwise the gated-MLP and
  tied-embedding choice closest to the stated `params_b` wins. Dropout in GPT-style models follows the era
  (Megatron GPT configs used it until Megatron-Core). Unstated kv_heads: multi-head attention; unstated ffn_hidden:
  4h for a GeLU MLP (a gated one is skipped).
- layout: a knob the source leaves null is searched (the planner's best choice, starred in the report), except
  what the stack of the day could not do (below); cp null is 1; dp is num_gpus / (tp·cp·pp) when tp and pp are
  stated; FSDP that keeps parameters gathered after the forward (SHARD_GRAD_OP) is ZeRO-2, otherwise ZeRO-3;
  NO_SHARD or DDP is 0; Megatron's distributed optimizer is 1.
- the source's year is the latest year its group and source text name (arXiv ids are not years), else its
  framework's era.
- runtime by framework and year: FlashAttention from 2023 (it reached Megatron, Composer and torchtitan after
  mid-2022; never on a profile without fused attention kernels, V100), its first generation in 2023 unless the framework names one (flash_generation); Megatron's async TP
  backward from 2022 (not in DeepSpeed forks), and its gradient-accumulation fusion with it (not where the framework
  is PyTorch's own, FSDP/DDP, Composer, torchtitan, which add each micro-batch's gradient apart); DP reduce/gather overlap where named, for FSDP, and for any
  non-DeepSpeed stack from 2023; TP-comm overlap where named and in NeMo; DeepSpeed ZeRO-3 gathers per weight
  matrix over flat rings; torchtitan runs its element-wise ops as eager PyTorch kernels unless torch.compile is
  named (its presets set compile = false).
- measured: the most direct figure wins (iteration time, tokens/s, tokens/s/GPU, TFLOP/s/GPU, MFU, HFU), and the
  source's FLOP accounting picks the convention: Narayanan's 96-form, "hardware FLOPs", "includes recompute" or
  HFU alone count the recompute forward; "6N"/"6ND" with no attention term is six_n; torchtitan's train.py counted
  every parameter, embeddings included (all_params); otherwise model FLOPs.
"""

from __future__ import annotations

import math
import re
from typing import Any

from planner.cost.pipeline import chunk_layers, every_nth_layers
from planner.shared_fields import (
    Skip,
    checked_numbers,
    compiled,
    dp_replicate_of,
    flash_generation,
    hardware_of,
    offloaded,
    recompute_of,
    text_of,
    year_of,
    zero_stage_of,
)

_GPUS_PER_NODE = 8      # DGX/HGX nodes, for the model-parallel split rule only

_MODERN = dict(gated_mlp=True, tied_embeddings=False, norm="rmsnorm", bias=False, learned_positions=False,
               dropout=False)
_GPT = dict(gated_mlp=False, norm="layernorm", bias=True, learned_positions=True)
_LN = dict(gated_mlp=False, norm="layernorm", learned_positions=False)   # LayerNorm, positions by ALiBi/rotary/RoPE
# Architecture details by family name (model cards / training configs of each family).
_FAMILIES = (
    (r"llama|mistral|qwen|olmo|internlm|baichuan", _MODERN),
    (r"gemma", {**_MODERN, "tied_embeddings": True}),
    (r"mpt", dict(_LN, tied_embeddings=True, bias=False, dropout=False)),                   # ALiBi, no biases
    (r"bloom", dict(_LN, tied_embeddings=True, bias=True, dropout=True)),                   # ALiBi
    (r"neox|pythia", dict(_LN, tied_embeddings=False, bias=True, dropout=False,            # gpt_j_residual
                          parallel_residual=True, rotary_fraction=0.25)),                   # rotary_pct 0.25
    (r"nemotron", dict(_LN, tied_embeddings=False, bias=False, dropout=False)),             # squared ReLU, RoPE
    (r"falcon", dict(gated_mlp=False, tied_embeddings=True, norm="layernorm", bias=False, learned_positions=False,
                     dropout=False)),
    (r"\bopt\b", dict(**_GPT, tied_embeddings=True, dropout=True)),
    (r"gpt|mt-nlg|megatron|turing", _GPT),
)
_THROUGHPUT = (("iteration_time_s", "iteration_time_s"), ("tokens_per_s", "tokens_per_s"),
               ("tokens_per_s_per_gpu", "tokens_per_s_per_gpu"), ("measured_tflops_per_gpu", "tflops_per_gpu"),
               ("measured_mfu", "mfu"))


def is_shared_format(data: dict) -> bool:
    """True for a file in the shared dataset's flat format (runs carry `num_gpus`/`gpu`, not `hardware`)."""
    runs = data.get("runs")
    maps = [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
    return any("num_gpus" in r or "gpu" in r for r in maps) and not any("hardware" in r for r in maps)


def _int(run: dict, key: str) -> int:
    """A whole number (2.0 is 2); booleans and fractions are malformed, not silently truncated."""
    value = run[key]
    if isinstance(value, bool) or float(value) != int(float(value)):
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    return int(float(value))


def _params_b(model: dict) -> float:
    from planner.cost.params import total_params
    from planner.specs.model import ModelFile

    return total_params(ModelFile(**model).to_spec()) / 1e9


def _architecture(run: dict, year: int | None, notes: dict) -> dict:
    name = text_of(run.get("model"))
    need = [k for k in ("layers", "hidden", "heads", "vocab", "seq_len") if run.get(k) is None]
    if need:
        raise Skip(f"architecture not stated ({', '.join(need)})")
    h = _int(run, "hidden")
    model = {"name": re.sub(r"[^a-z0-9.]+", "-", name).strip("-") or str(run.get("id") or "run"),
             "description": str(run.get("model") or ""), "layers": _int(run, "layers"), "hidden": h,
             "ffn_hidden": _int(run, "ffn_hidden") if run.get("ffn_hidden") else 4 * h, "heads": _int(run, "heads"),
             "vocab": _int(run, "vocab"), "seq_len": _int(run, "seq_len")}
    if run.get("kv_heads"):
        model["kv_heads"] = _int(run, "kv_heads")
    else:
        notes["kv_heads"] = "not stated: multi-head attention (as many K/V heads as query heads)"
    family = next(((p, f) for p, f in _FAMILIES if re.search(p, name)), None)
    if family is not None:
        flags = dict(family[1])
        notes["architecture"] = f"family {family[0]!r} from the model name"
    else:
        flags = dict(_MODERN)
        notes["architecture"] = "no known family name: modern decoder defaults (RMSNorm, RoPE, no biases)"
    if "tied_embeddings" not in flags and year is not None and year <= 2022:
        flags["tied_embeddings"] = True       # Megatron-LM tied input and output embeddings until Megatron-Core
    if "tied_embeddings" not in flags or family is None:
        # The stated parameter count decides what the format does not say (gated MLP, tied embeddings).
        choices = [dict(gated_mlp=g, tied_embeddings=t) for g in (flags["gated_mlp"], not flags["gated_mlp"])
                   for t in (True, False)] if family is None else \
            [dict(tied_embeddings=t) for t in (True, False)]
        if run.get("params_b"):
            best = min(choices, key=lambda c: abs(_params_b({**model, **flags, **c}) - float(run["params_b"])))
            notes["params_b"] = f"{best} gives the parameter count closest to params_b={run['params_b']}"
        else:
            best = choices[0]
        flags.update(best)
    if "dropout" not in flags:
        flags["dropout"] = year is not None and year <= 2022   # Megatron GPT configs dropped it with Megatron-Core
    if not run.get("ffn_hidden"):
        if flags["gated_mlp"]:
            raise Skip("ffn_hidden not stated for a gated-MLP model (no standard width to assume)")
        notes["ffn_hidden"] = "not stated: the standard 4h of a GeLU MLP"
    return {**model, **flags}


def _legacy(run: dict, year: int | None) -> tuple[bool, bool]:
    """(DeepSpeed-based stack, Megatron-LM before its 2022 distributed optimizer)."""
    fw = text_of(run.get("framework"))
    deepspeed = "deepspeed" in fw or "neox" in fw
    old_megatron = "megatron" in fw and "core" not in fw and not deepspeed and (year or 9999) <= 2022
    return deepspeed, old_megatron


def _layout(run: dict, year: int | None, notes: dict) -> dict:
    if (run.get("ep") or 1) > 1:
        raise Skip(f"ep={run['ep']}: expert parallelism is not modelled yet")
    layout: dict[str, Any] = {k: _int(run, k) for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp") if run.get(k)}
    mps = run.get("model_parallel_size")
    if not ({"tp", "pp", "dp"} & set(layout) or mps or run.get("num_gpus") == 1):
        raise Skip("parallel layout not stated (tp, pp, dp and model_parallel_size are all null)")
    if "tp" not in layout and "pp" not in layout and mps:
        # Narayanan et al. 2021 §3.3, takeaway 1: tensor parallelism up to the GPUs of a node, pipeline across nodes.
        layout["tp"] = math.gcd(int(mps), _GPUS_PER_NODE)
        layout["pp"] = int(mps) // layout["tp"]
        notes["tp"] = f"model_parallel_size {mps} split as TP {layout['tp']} (one node) x PP {layout['pp']}"
    if "dp" not in layout and "tp" in layout and "pp" in layout and run.get("num_gpus"):
        layout["dp"] = int(run["num_gpus"]) // (layout["tp"] * layout.get("cp", 1) * layout["pp"])
    sp = text_of(run.get("sequence_parallel")).strip()
    if sp in ("true", "yes", "on", "1", "enabled", "false", "no", "off", "0", "disabled", "none"):
        layout["sequence_parallel"] = sp in ("true", "yes", "on", "1", "enabled")
    for key, value in (("recompute", recompute_of(run, notes)),
                       ("zero_stage", zero_stage_of(run.get("zero_stage"))),
                       ("dp_replicate", dp_replicate_of(run.get("zero_stage")))):
        if value is not None:
            layout[key] = value
    stated = text_of(run.get("zero_stage"))
    fsdp_words = re.search(r"fsdp|fully.shard|full_shard", stated) and not re.search(r"zero|stage", stated)
    if layout.get("zero_stage") == 3 and int(layout.get("pp", 1)) > 1 and fsdp_words:
        # FSDP under PP: torch's pipelining keeps the weights gathered and the gradients whole until the last
        # micro-batch (constraints: no ZeRO-3 under PP), which is ZeRO-1's memory and traffic
        layout["zero_stage"] = 1
        notes["zero_stage"] = (f"{run.get('zero_stage')!r} under PP {layout['pp']}: FSDP keeps the weights gathered "
                               "and the gradients whole until the last micro-batch (torch pipelining), ZeRO-1")
    _partial_recompute(run, layout, notes)
    # Unstated knobs that the stack of the day did not have are not searched (features and their dates:
    # selective recompute and sequence parallelism, Korthikanti et al. May 2022; Megatron's distributed
    # optimizer, 2022; DeepSpeed's pipeline engine runs only non-interleaved 1F1B).
    deepspeed, old_megatron = _legacy(run, year)
    before_2022 = deepspeed or (year is not None and year <= 2021)
    defaults = {"recompute": ("full", before_2022), "sequence_parallel": (False, before_2022),
                "zero_stage": (0, old_megatron), "vpp": (1, deepspeed)}
    for key, (value, applies) in defaults.items():
        if key not in layout and applies:
            layout[key] = value
            stack = "DeepSpeed" if deepspeed and key in ("recompute", "sequence_parallel", "vpp") else year
            notes[key] = f"{value}: not stated; the {stack} stack had no alternative"
    return layout


def _partial_recompute(run: dict, layout: dict, notes: dict) -> None:
    """"block N" is Megatron's block method as stated; "every N" is the same share of each pipeline chunk, counted
    on a stated pp with vpp 1 unless stated (a share pinned as a count must not move with a searched vpp)."""
    mode, _, n = layout.get("recompute", "").partition(" ")
    if mode == "block":
        layout.update(recompute="full", recompute_layers=int(n))
    elif mode == "every":
        if "pp" not in layout:
            raise Skip("recompute of every n-th layer needs pp stated (the share is counted per pipeline chunk)")
        if "vpp" not in layout:
            layout["vpp"] = 1
            notes["vpp"] = "not stated: 1, so that the every-n-th-layer share keeps its meaning"
        v = int(layout["vpp"])
        chunk = int(chunk_layers(_int(run, "layers"), layout["pp"], v))
        per_rank = int(every_nth_layers(v * chunk, int(n)))       # one counter over the rank's v chunks
        if per_rank == 0:
            layout["recompute"] = "none"
            notes["recompute"] = (f"every {n}-th layer: none of the rank's {v * chunk} layers (torchtitan counts "
                                  "every n-th block, and the counter never reaches n)")
            return
        layout.update(recompute="full", recompute_layers=max(round(per_rank / v), 1))
        notes["recompute"] = (f"every {n}-th layer fully recomputed: {per_rank} of the rank's {v * chunk} layers, "
                              f"{layout['recompute_layers']} per {chunk}-layer chunk (torchtitan counts every n-th block)")


def _stack(run: dict, year: int | None) -> tuple[bool, bool]:
    """(Megatron or NeMo, PyTorch's own stack: DDP/FSDP, Composer, torchtitan, fairscale); DeepSpeed is neither."""
    fw = text_of(run.get("framework"))
    megatron = not _legacy(run, year)[0] and re.search(r"megatron|nemo", fw) is not None
    native = not megatron and re.search(r"fsdp|ddp|composer|llm-foundry|torchtitan|pytorch|fairscale", fw) is not None
    return megatron, native


def _runtime(run: dict, year: int | None, zero: int | None, hardware: str) -> dict:
    from planner.specs.hardware import load_hardware
    fw = text_of(run.get("framework"))
    deepspeed = _legacy(run, year)[0]
    megatron, native = _stack(run, year)
    fsdp = zero == 3 and not deepspeed or bool(re.search(r"fsdp|composer|llm-foundry|torchtitan", fw))
    # Since 2023 every mainstream stack overlaps DP collectives with compute (PyTorch DDP/FSDP buckets, Megatron-Core
    # and NeMo recipes); NeMo's performance recipes also overlap TP communication with GEMMs (comm-overlap callback).
    modern = not deepspeed and (year is None or year >= 2023)
    rt = {"flash_attention": (year is None or year >= 2023) and load_hardware(hardware).fused_attention,
          "tp_bwd_overlap": not deepspeed and (year is None or year >= 2022),
          # Megatron's gradient-accumulation fusion lives in the autograd function of its async TP backward; stacks
          # named as PyTorch's own (DDP/FSDP, Composer, torchtitan) and DeepSpeed add each micro-batch's gradient
          # in a kernel of their own; an unnamed framework is the planner's default, Megatron-Core
          "grad_accumulation_fusion": not deepspeed and not native and (year is None or year >= 2022),
          "tp_comm_overlap": bool(re.search(r"tp.comm.overlap|nemo", fw)),
          "overlap_grad_reduce": fsdp or modern or bool(re.search(r"overlap.grad.reduce", fw)),
          "overlap_param_gather": fsdp or modern or bool(re.search(r"overlap.param.gather", fw)),
          # pipeline sends split over TP ranks: DeepSpeed's engine, and Megatron-LM until Megatron-Core (2023)
          "pp_scatter_gather": deepspeed or (year is not None and year < 2023)}
    if rt["flash_attention"]:
        rt["flash_attention_gen"] = flash_generation(fw, year, load_hardware(hardware).attention_gen3_rate is not None)
    if deepspeed and zero == 1 and re.search(r"bf16|bfloat16", text_of(run.get("precision"))) and (year or 0) >= 2022:
        rt["zero1_all_reduce"] = True       # BF16_Optimizer (DeepSpeed, February 2022 on): whole-gradient all-reduce
    if deepspeed and zero == 3:
        rt.update(zero3_gather_unit="matrix", hierarchical_collectives=False)
    if megatron and year is not None and year <= 2024:
        # Megatron's interleaved schedule took only a multiple of PP micro-batches until its micro-batch groups
        # (schedules.py of January 2024 warms up (v - 1)·PP chunks, NVIDIA/Megatron-LM#675; a December 2024
        # NeMo-based PR still cites the rule, 9rum/flatflow#20)
        rt["microbatch_groups"] = False
    if "torchtitan" in fw and not compiled(fw):
        rt["eager_elementwise"] = True          # its presets' compile = false: eager PyTorch element-wise kernels
    if "torchtitan" in fw:
        rt["fused_cross_entropy"] = False       # its loss: F.cross_entropy(pred.float(), labels), compiled or not
    return rt


def _precision(run: dict, year: int | None) -> dict:
    text = text_of(run.get("precision"))
    if re.search(r"fp8|float8|e4m3|e5m2|fp4|mxfp|nvfp", text):
        raise Skip(f"precision {run.get('precision')!r}: FP8/FP4 training is not modelled yet")
    if text and not re.search(r"bf16|bfloat16|fp16|float16|16-bit|half|amp|mixed|^16$", text.strip()):
        raise Skip(f"precision {run.get('precision')!r}: only 16-bit mixed precision is modelled")
    sixteen_bit_grads = "pure" in text or ("bf16" not in text and re.search(r"fp16|16-bit", text) is not None)
    out = {"grad_bytes": 2} if sixteen_bit_grads else {}
    if sixteen_bit_grads and _legacy(run, year)[1]:
        out["optimizer_bytes"] = 16          # legacy Megatron fp16: fp32 main grads live beside Adam's 12 bytes
    if _stack(run, year)[1]:                 # PyTorch mixed precision (autocast, FSDP's MixedPrecision, also PURE):
        out["params_are_master"] = True      # fp32 parameters are the master weights, cast to 16 bits for compute
    return out


def _measured(run: dict, layout: dict, hardware: str, year: int | None, notes: dict) -> tuple[dict, dict]:
    """(measured, extra top-level fields: flops_convention, peak_tflops)."""
    accounting = text_of(run.get("flops_accounting"))
    recompute_counted = bool(re.search(r"96\s*\*|hfu-like|4\s*\*\s*2|hardware (t)?flop|includ\w* (the )?recomput"
                                       r"|count\w* (the )?recomput", accounting)
                             or (re.search(r"\bhfu\b", accounting) and not re.search(r"\bmfu\b", accounting)))
    # "6N" alone (Kaplan/Chinchilla-style: no attention term) is its own convention.
    six_n = bool(re.search(r"\b6\s*[*x·]?\s*n\b|\b6nd\b|6\s*[*x·]\s*params", accounting)
                 and not re.search(r"12|attention|attn", accounting))
    extra: dict[str, Any] = {}
    derived = set(run.get("inferred") or {}) if isinstance(run.get("inferred"), dict) else set()
    for src, dst in _THROUGHPUT:
        if run.get(src) and src not in derived:         # a figure the dataset derived is not a measurement
            measured = {dst: float(run[src])}
            break
    else:
        hfu = next((run[k] for k in ("measured_hfu", "measured_pct_of_peak") if run.get(k) and k not in derived), None)
        if not hfu or layout.get("recompute") != "full" or layout.get("recompute_layers"):
            only = sorted(derived & {src for src, _ in _THROUGHPUT})
            raise Skip(f"throughput only derived by the dataset ({', '.join(only)} under `inferred`), not measured"
                        if only else "no measured throughput (HFU alone needs full recompute of every layer)")
        measured, recompute_counted = {"mfu": float(hfu)}, True
    if next(iter(measured)) in ("tflops_per_gpu", "mfu"):
        if recompute_counted and layout.get("recompute_layers"):
            raise Skip("a FLOP count with recompute in it, under partial recompute (the source's share is unknown)")
        # torchtitan's early MFU counted the embeddings (later: get_num_params(exclude_embedding=True)).
        embeddings = "torchtitan" in accounting and not re.search(r"exclud", accounting)
        extra["flops_convention"] = ("model_plus_full_recompute" if recompute_counted else "six_n" if six_n else
                                     "all_params" if embeddings else "model")
        notes["flops_convention"] = f"{extra['flops_convention']} (from flops_accounting)"
        if not accounting and "neox" in text_of(run.get("framework")) and (year or 9999) <= 2022:
            extra["flops_convention"] = "gpt_neox_2021"          # the logger GPT-NeoX had before 2023
            notes["flops_convention"] = "gpt_neox_2021: GPT-NeoX's logger of the day (6N + 60·s·h·L per token)"
    from planner.specs.hardware import load_hardware

    peak = load_hardware(hardware).peak_flops / 1e12
    if "mfu" in measured:
        extra["peak_tflops"] = float(run.get("peak_tflops_assumed") or peak)
    if measured.get("mfu", 0) > 1 or measured.get("tflops_per_gpu", 0) > peak:
        key, value = next(iter(measured.items()))
        hint = f" (mfu is a fraction: {value / 100:g} for {value:g}%)" if key == "mfu" and value <= 100 else ""
        raise Skip(f"measured {key} {value:g} is above the {hardware} peak ({peak:g} TFLOP/s dense 16-bit){hint}")
    if run.get("memory_per_gpu_gib"):
        measured["memory_gib"] = float(run["memory_per_gpu_gib"])
    return measured, extra


def convert_run(run: dict) -> tuple[dict | None, str | None]:
    """(run in the planner's schema, None), or (None, why it cannot be expressed)."""
    try:
        run = checked_numbers(run)
        if run.get("moe") and text_of(run.get("moe")).strip() not in ("no", "none", "dense", "false", "0"):
            raise Skip("mixture-of-experts model: not a dense decoder")
        if not run.get("num_gpus"):
            raise Skip("GPU count not stated")
        if where := offloaded(run.get("zero_stage"), run.get("framework"), run.get("precision")):
            raise Skip(f"offload to CPU or NVMe ({where!r}): not modelled (every state is priced in HBM)")
        year = year_of(run)
        notes: dict[str, str] = {}
        hardware = hardware_of(run, year, notes)
        model = _architecture(run, year, notes)
        batch = run.get("global_batch")
        if batch is None and run.get("global_batch_tokens"):
            batch = round(run["global_batch_tokens"] / model["seq_len"])
        if not batch:
            raise Skip("global batch not stated")
        model["global_batch"] = int(batch)
        layout = _layout(run, year, notes)
        fw = text_of(run.get("framework"))
        multiple = 128 * layout.get("tp", 1)
        if re.search(r"megatron|neox|nemo", fw) and model["vocab"] % multiple:
            # Megatron pads the embedding to a multiple of 128 x TP (--make-vocab-size-divisible-by).
            padded = -(-model["vocab"] // multiple) * multiple
            notes["vocab"] = f"{model['vocab']} padded to {padded} (Megatron: a multiple of 128 x TP)"
            model["vocab"] = padded
        measured, extra = _measured(run, layout, hardware, year, notes)
        runtime = _runtime(run, year, layout.get("zero_stage"), hardware)
        precision = _precision(run, year)
        notes["runtime"] = f"from framework {run.get('framework')!r} and source year {year}"
        if runtime.get("flash_attention_gen") == 1:
            notes["runtime"] += ("; first-generation FlashAttention (named, or a 2023 source that names no"
                                 " generation: FlashAttention-2 reached the stacks from late 2023)")
        converted = {"id": str(run.get("id") or "run"), "group": str(run.get("group") or "runs"),
                     "source": str(run.get("source") or ""), "source_locator": str(run.get("source_locator") or ""),
                     "model": model, "hardware": hardware, "gpus": _int(run, "num_gpus"), "layout": layout,
                     "runtime": runtime, "precision": precision, "measured": measured, **extra, "assumptions": notes}
        if run.get("network") is not None:    # a cluster that is not the profile's build states its own
            converted["network"] = run["network"]
            notes["network"] = "as the run states it (its NICs per server and their rate), not the profile's"
    except Skip as why:
        return None, str(why)
    except (ValueError, TypeError, ArithmeticError) as exc:      # a malformed field: say which value failed
        return None, f"malformed run: {exc}"
    return converted, None
