"""What the three exporters share: rank orders a framework can launch, the plan's own figures, the mixed-precision
format, and what the plan priced that a framework runs differently."""

from __future__ import annotations

from planner.errors import PlannerError
from planner.specs.strategy import MASTER_BYTES, RANK_ORDERS, Precision, Runtime, pp_next_launchable


def rank_order(row) -> str:
    """The row's order of DP and PP after TP (and CP): "dp-pp" or "pp-dp" (RANK_ORDERS); a row given by hand
    with the knobs only is in the frameworks' default order, DP next to TP."""
    return "pp-dp" if str(row.get("placement", "")).endswith("pp-dp") else "dp-pp"


def launch_orders(framework: str, row) -> tuple[str, ...]:
    """The rank orders `framework` can launch this layout with. All three place DP next to TP by default
    (Megatron tp-cp-ep-dp-pp, torchtitan's mesh [pp, dp, cp, tp], DeepSpeed [pipe, data, model]); Megatron's
    --use-tp-pp-dp-mapping puts PP there instead, but not with CP or EP, nor with Megatron-FSDP (Megatron-Core
    ModelParallelConfig.use_tp_pp_dp_mapping)."""
    if int(row["pp"]) == 1 or int(row["dp"]) == 1:         # one order either way
        return RANK_ORDERS
    if framework == "megatron" and pp_next_launchable(int(row.get("cp", 1)), int(row["pp"]), int(row["zero_stage"])):
        return RANK_ORDERS
    return ("dp-pp",)


def order_note(framework: str, row) -> str | None:
    """When the row was priced in a rank order `framework` cannot launch (a library caller's forced order):
    the figures above do not describe its run."""
    if rank_order(row) in launch_orders(framework, row):
        return None
    return (f"the plan's figures assume rank order {row['placement']} (PP stages next to each other), which "
            f"{framework} cannot launch; best_supported prices a search's layouts in {framework}'s own order")


def plan_line(row) -> str | None:
    """The plan's own figures for the exported layout, to tie a launch file back to the table (None for a row
    given by hand with the knobs only)."""
    if not all(k in row for k in ("step_time_s", "memory_gib", "mfu", "tokens_per_s")):
        return None
    return (f"plan: step {row['step_time_s']:.3g} s, {row['memory_gib']:.1f} GiB per GPU, MFU {row['mfu']:.1%} "
            f"({row['tokens_per_s']:,.0f} tokens/s)")


def block_note(framework: str, m, seq_len: int) -> str | None:
    """The transformer block the plan priced where the framework builds another: a parallel residual
    (ModelSpec.parallel_residual) is not in Megatron-LM's arguments or torchtitan's models, and under DeepSpeed it
    is the model code's; Gemma 2/3's post-norms and Gemma 2's logit soft-capping; torchtitan's models rotate every
    head dimension (ModelSpec.rotary_fraction); a sliding window shorter than the sequence is Megatron's
    --window-size, absent from torchtitan's Llama (its FlexAttention sliding-window mask serves gpt-oss) and the
    model code's under DeepSpeed; None for a block it builds as planned."""
    notes = []
    if m.window_binds(seq_len) and m.window_layers is not None:
        notes.append(f"the sliding window covers {m.window_layers} of the {m.layers} layers (the others attend to "
                     "the whole sequence)" + (": Megatron's --window-size windows every layer unless "
                     "--window-attn-skip-freq picks them" if framework == "megatron" else ""))
    if m.window_binds(seq_len) and framework == "torchtitan":
        notes.append(f"sliding window of {m.sliding_window:,} tokens: torchtitan's Llama attends to the whole "
                     f"{seq_len:,}-token sequence, which costs more than planned")
    elif m.window_binds(seq_len) and framework == "deepspeed":
        notes.append(f"sliding window of {m.sliding_window:,} tokens: the model code's attention (FlashAttention's "
                     "window_size), as planned; full attention would cost more")
    if m.parallel_residual and framework == "deepspeed":
        notes.append("parallel residual: the model code's block (GPT-NeoX: gpt_j_residual true), one forward TP "
                     "reduction per layer as planned")
    elif m.parallel_residual:
        name = "Megatron-LM" if framework == "megatron" else "torchtitan"
        notes.append(f"parallel residual (attention and MLP side by side): {name} builds a sequential block, a "
                     "different model with a second forward TP reduction per layer; GPT-NeoX (gpt_j_residual true) "
                     "trains this one")
    if m.post_norms and framework != "deepspeed":
        name = "Megatron-LM's GPT block" if framework == "megatron" else "torchtitan's Llama"
        notes.append(f"norms after attention and the MLP too (Gemma 2/3): {name} has only the two before them, a "
                     "block with fewer norms than planned")
    elif m.post_norms:
        notes.append("norms after attention and the MLP too (Gemma 2/3): the model code's block, as planned")
    if (m.out_bias or m.mlp_bias) and not m.bias and framework != "deepspeed":
        which = " and ".join(x for x, on in (("the attention output", m.out_bias), ("the MLP", m.mlp_bias)) if on)
        builds = ("Megatron-LM biases every linear layer (--add-bias-linear) or Q, K and V alone (--add-qkv-bias)"
                  if framework == "megatron" else "torchtitan's Llama has no biases")
        notes.append(f"biases on {which} (Llama's attention_bias, mlp_bias): {builds}, so the exported model "
                     "differs from the planned one by those few parameters per layer")
    if m.final_softcap:
        notes.append("the plan priced Gemma 2's soft-capping of the logits as separate kernels before the loss "
                     "(logits / c, tanh, · c); the model code must apply it")
    if framework == "torchtitan" and m.rotary_fraction != 1:
        notes.append(f"rotary embedding on {m.rotary_fraction:.0%} of each head's dimensions: torchtitan's models "
                     "rotate all of them, a different model at the same cost")
    return "; ".join(notes) or None


def precision_note(framework: str, row, precision: Precision) -> str | None:
    """Where the framework stores ZeRO-3's parameters otherwise than the plan priced them: torchtitan's FSDP2 keeps
    fp32 parameters as the master weights and no 16-bit shard (Precision.params_are_master), Megatron-FSDP and
    DeepSpeed a 16-bit shard beside an fp32 master. The difference is that 16-bit shard; None where they agree."""
    if int(row["zero_stage"]) < 3 or "weights_gib" not in row or (framework == "torchtitan") == precision.params_are_master:
        return None
    shard = float(row["weights_gib"]) * (precision.param_bytes / MASTER_BYTES if precision.params_are_master else 1)
    if framework == "torchtitan":
        return (f"torchtitan's FSDP2 keeps fp32 parameters as the optimizer's master weights and no bf16 shard: about "
                f"{shard:.1f} GiB per GPU less than planned (--fp32-params prices it)")
    name = "Megatron-FSDP" if framework == "megatron" else "DeepSpeed ZeRO-3"
    return (f"{name} keeps a 16-bit parameter shard beside the fp32 master weights, where the plan priced fp32 "
            f"parameters alone (--fp32-params): about {shard:.1f} GiB per GPU more than planned")


def is_fp16(dtype: str) -> bool:
    """Whether the 16-bit format of mixed precision `dtype` is fp16 (else bf16); any other value is refused."""
    if dtype not in ("bf16", "fp16"):
        raise PlannerError("dtype", f"got {dtype!r}, expected bf16 or fp16 (the 16-bit format of mixed precision)")
    return dtype == "fp16"


def whole_pp_sends(row) -> bool:
    """Whether Megatron-Core would send this layout's stage outputs whole (no SP, with TP and PP), where Megatron-LM's
    scatter/gather and DeepSpeed's pipeline engine split them over the TP ranks (Runtime.pp_scatter_gather)."""
    return not row["sequence_parallel"] and int(row["tp"]) > 1 and int(row["pp"]) > 1


def priced_attention(runtime: Runtime) -> str | None:
    """The attention the plan priced when it is not FlashAttention-2-class fused kernels (the frameworks' own
    default today), else None."""
    if runtime.flash_attention is False:
        return "unfused attention (scores written to HBM)"
    if runtime.flash_attention_gen == 1:
        return "FlashAttention-1-class kernels (--flash-attention-gen 1)"
    if runtime.flash_attention_gen == 3:
        return "FlashAttention-3-class kernels (--flash-attention-gen 3: FA3, or cuDNN's fused attention on Hopper)"
    return None


def op_recompute_blocker(framework: str, row) -> list[str]:
    """Per-op checkpointing is torchtitan's policy: the other frameworks cannot run a row that priced it."""
    if row.get("recompute") == "op":
        return [f"{framework} has no per-op checkpointing policy (recompute op is torchtitan's)"]
    return []
