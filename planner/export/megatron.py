"""Megatron-LM command-line arguments, named as in Megatron-LM's `megatron/training/arguments.py` (including
`--num-virtual-stages-per-pipeline-rank`, which replaced `--num-layers-per-virtual-pipeline-stage`, and Megatron-FSDP's
`--data-parallel-sharding-strategy optim|optim_grads|optim_grads_params`). What it cannot express is said in a comment.
fp16 (a GPU without bf16) is `--fp16` with dynamic loss scaling (its `--loss-scale` default None)."""

from __future__ import annotations

from planner.cost.pipeline import interleave_group_size, split_kind, stage_layers
from planner.export.common import (
    block_note,
    is_fp16,
    launch_orders,
    op_recompute_blocker,
    order_note,
    plan_line,
    precision_note,
    priced_attention,
    rank_order,
    whole_pp_sends,
)
from planner.specs.model import ModelSpec
from planner.specs.strategy import Job, Precision, Runtime


def blockers(row, model: ModelSpec | None = None, transformer_engine: bool = True) -> list[str]:
    """Every reason Megatron-LM cannot run this layout as planned; empty if it can (`transformer_engine` False:
    Megatron's local implementation, on a GPU Transformer Engine does not support)."""
    why = op_recompute_blocker("megatron", row)
    if not transformer_engine and model is not None and model.norm == "rmsnorm" and row["sequence_parallel"]:
        # LocalSpecProvider builds RMSNorm from torch (WrappedTorchNorm), which asserts not config.sequence_parallel
        why.append("Megatron without Transformer Engine builds RMSNorm from PyTorch's, which refuses sequence "
                   "parallelism")
    if int(row["pp"]) > 1 and int(row["zero_stage"]) >= 2:
        # Megatron-FSDP and pipeline parallelism are mutually exclusive (Megatron-LM PR #6081's run script).
        why.append("Megatron-FSDP (ZeRO-2/3) does not run with pipeline parallelism")
    return why


def _model_args(m: ModelSpec, job: Job) -> list[str]:
    """The architecture as Megatron-LM arguments (arguments.py), so that the layout flags come with the model they
    were planned for: Megatron's defaults are GeLU, LayerNorm, learned positions, biases, tied embeddings, dropout."""
    args = [f"--num-layers {m.layers}", f"--hidden-size {m.hidden}", f"--ffn-hidden-size {m.ffn_hidden}",
            f"--num-attention-heads {m.heads}"]
    if m.head_dim * m.heads != m.hidden:
        args.append(f"--kv-channels {m.head_dim}")
    if m.kv_heads != m.heads:
        args += ["--group-query-attention", f"--num-query-groups {m.kv_heads}"]
    args.append(f"--max-position-embeddings {max(job.seq_len, m.seq_len)}")
    args.append("--position-embedding-type " + ("learned_absolute" if m.learned_positions else "rope"))
    if m.rotary_fraction != 1:
        args.append(f"--rotary-percent {m.rotary_fraction:g}")        # GPT-NeoX's rotary_pct
    args.append("--normalization " + ("RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"))
    if m.qk_norm:
        args.append("--qk-layernorm")        # the query and key norms (of the --normalization kind)
    if m.sliding_window:                     # TransformerConfig.window_size: (left, right) keys, as FlashAttention's
        args.append(f"--window-size {m.sliding_window},0")
    if m.gated_mlp and m.activation == "silu":
        args.append("--swiglu")
    elif not m.gated_mlp and m.activation == "relu2":
        args.append("--squared-relu")
    if not m.bias:
        args.append("--disable-bias-linear")
        if m.qkv_bias:
            args.append("--add-qkv-bias")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.dropout:
        args += ["--attention-dropout 0.0", "--hidden-dropout 0.0"]
    return args


def _mlp_note(m: ModelSpec) -> str | None:
    """An MLP no Megatron-LM argument selects (--swiglu is SiLU-gated, --squared-relu plain, GeLU the default)."""
    if (m.gated_mlp, m.activation) in ((True, "silu"), (False, "gelu"), (False, "relu2")):
        return None
    kind = f"{'gated ' if m.gated_mlp else ''}{m.activation}" + (" (GeGLU, as Gemma's)" if m.gated_mlp and
                                                                  m.activation == "gelu" else "")
    return (f"# MLP: {kind} has no Megatron-LM argument: set gated_linear_unit and activation_func in the "
            "TransformerConfig (same FLOPs and memory as priced)")


def megatron_args(row, m: ModelSpec, job: Job, runtime: Runtime = Runtime(), dtype: str = "bf16",
                  transformer_engine: bool = True, precision: Precision = Precision()) -> str:
    """Megatron-LM command-line arguments for the model, the layout and the runtime features the plan priced;
    `dtype` is the 16-bit format of mixed precision, bf16 or fp16 (HardwareSpec.mixed_precision);
    `transformer_engine` False on a GPU Transformer Engine does not support (HardwareSpec.fused_attention: sm70)."""
    tp, cp, pp, dp, v = (int(row[k]) for k in ("tp", "cp", "pp", "dp", "vpp"))
    fp16 = is_fp16(dtype)
    args = _model_args(m, job)
    if not transformer_engine:
        args.append("--transformer-impl local")    # Megatron's default, transformer_engine, needs sm80 or newer
        if m.norm == "rmsnorm":   # torch's RMSNorm (WrappedTorchNorm) asserts persist_layer_norm off, on by default
            args.append("--no-persist-layer-norm")
    mlp = _mlp_note(m)
    attention = priced_attention(runtime)
    if transformer_engine and runtime.flash_attention is False:
        args.append("--attention-backend unfused")    # what the plan priced (the default, auto, picks fused kernels)
    args += [f"--tensor-model-parallel-size {tp}", f"--pipeline-model-parallel-size {pp}"]
    if cp > 1:
        args.append(f"--context-parallel-size {cp}")
        # --cp-comm-type: p2p (default, the overlapped ring), all_gather, a2a or a2a+p2p; the value reaches
        # Transformer Engine as is, which spells it all_gather (megatron/core/transformer/transformer_config.py
        # cp_comm_type; arguments.py's help text says "allgather", a value TE rejects)
        if not runtime.cp_comm_overlap:
            args.append("--cp-comm-type all_gather")
    first, mid, last = (int(x) for x in stage_layers(m.layers, pp))
    if pp > 1 and split_kind(m.layers, pp) == 3:     # explicit edge stages (no accounting flag goes with them)
        args += [f"--decoder-first-pipeline-num-layers {first}", f"--decoder-last-pipeline-num-layers {last}"]
    else:
        if pp > 1 and first != mid:      # the first stage counts the embedding as a layer
            args.append("--account-for-embedding-in-pipeline-split")
        if pp > 1 and last != mid:       # the last stage counts the loss as a layer
            args.append("--account-for-loss-in-pipeline-split")
    group = int(interleave_group_size(pp, int(row["num_microbatches"]), v)) if v > 1 else pp
    if v > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {v}")
        if group != pp:         # PP does not divide the micro-batches: the group size the plan priced (default PP)
            args.append(f"--microbatch-group-size-per-virtual-pipeline-stage {group}")
    if pp > 1 and dp > 1 and rank_order(row) == "pp-dp" and "pp-dp" in launch_orders("megatron", row):
        args.append("--use-tp-pp-dp-mapping")       # the plan's rank order: PP stages next to each other
    if row["sequence_parallel"]:
        args.append("--sequence-parallel")
        if runtime.tp_comm_overlap and tp > 1:
            args.append("--tp-comm-overlap")
    if not runtime.grad_accumulation_fusion:
        args.append("--no-gradient-accumulation-fusion")      # the plan priced a separate gradient add
    if row["recompute"] == "selective":
        args.append("--recompute-granularity selective")
    elif row["recompute"] == "full" and int(row.get("recompute_layers", 0)):
        args += ["--recompute-granularity full", "--recompute-method block",
                 f"--recompute-num-layers {int(row['recompute_layers'])}"]
    elif row["recompute"] == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    zero, replicas = int(row["zero_stage"]), int(row.get("dp_replicate", 1))
    if zero == 1:
        args.append("--use-distributed-optimizer")
    elif zero >= 2:
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        # validate_args: Megatron-FSDP only supports the fsdp_dtensor checkpoint format (default torch_dist)
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}", "--use-distributed-optimizer",
                 "--ckpt-format fsdp_dtensor"]
    if replicas > 1:        # HSDP: the distributed optimizer (or Megatron-FSDP) within DP x CP / r ranks, r copies
        args.append(f"--num-distributed-optimizer-instances {replicas}")
    if dp * cp > 1:                          # gradients are reduced over DP x CP
        args += ["--overlap-grad-reduce"] + (["--overlap-param-gather"] if zero >= 1 else [])
    args += [f"--micro-batch-size {int(row['micro_batch'])}", f"--global-batch-size {job.global_batch}",
             f"--seq-length {job.seq_len}"]
    # fp16: Megatron keeps fp32 main gradients only for bf16 unless asked (arguments.py validate_args); the plan
    # priced fp32 main grads (Precision.grad_bytes 4), so ask.
    args += ["--fp16", "--accumulate-allreduce-grads-in-fp32"] if fp16 else ["--bf16"]
    layout = f"TP {tp} x CP {cp} x PP {pp} x DP {dp}" if cp > 1 else f"TP {tp} x PP {pp} x DP {dp}"
    plan = plan_line(row)
    header = (f"# Megatron-LM: {layout} = {tp * cp * pp * dp} GPUs (DP is implied by the world size)"
              + (f"; {plan}" if plan else "")
              + f"\n# vocabulary: {m.vocab} from your tokenizer (Megatron pads it to a multiple of 128 x TP); add the "
              f"settings speed does not depend on (data, tokenizer, {'' if m.learned_positions else '--rotary-base, '}"
              "optimizer, schedule)")
    if fp16:
        header += "\n# fp16 mixed precision with dynamic loss scaling (the default --loss-scale): this GPU has no bf16"
    if group != pp:
        header += (f"\n# {int(row['num_microbatches'])} micro-batches, which PP {pp} does not divide: needs a "
                   "Megatron-Core with --microbatch-group-size-per-virtual-pipeline-stage; older releases refuse the "
                   "interleaved schedule unless PP divides the micro-batches (pick a --global-batch that makes it so)")
    if runtime.pp_scatter_gather and whole_pp_sends(row):
        header += ("\n# the plan priced pipeline sends split over the TP ranks and all-gathered on the receiver "
                   "(pp_scatter_gather); without --sequence-parallel Megatron-Core sends each whole: expect another "
                   "PP time (more network bytes, no all-gather)")
    if mlp:
        header += "\n" + mlp
    if block := block_note("megatron", m, job.seq_len):
        header += "\n# " + block
    if order := order_note("megatron", row):
        header += "\n# " + order
    if attention and runtime.flash_attention_gen == 1:
        header += (f"\n# attention: the plan priced {attention}; Megatron runs the flash-attn or cuDNN kernels "
                   "installed (FlashAttention-2 class today), so expect a faster step")
    elif attention and runtime.flash_attention_gen == 3:
        header += (f"\n# attention: the plan priced {attention}; Transformer Engine runs cuDNN's with "
                   "NVTE_FUSED_ATTN=1 NVTE_FLASH_ATTN=0 in the environment (its flash-attn backend is FlashAttention-2 "
                   "unless flash-attn 3 is installed)")
    if runtime.zero1_all_reduce and zero == 1 and dp * cp > 1:
        header += ("\n# the plan priced ZeRO-1 as DeepSpeed's BF16_Optimizer runs it (--zero1-all-reduce: the whole "
                   "gradients all-reduced); Megatron's distributed optimizer reduce-scatters them, so expect the same "
                   "or less DP traffic")
    if note := precision_note("megatron", row, precision):
        header += "\n# " + note
    if not runtime.fused_cross_entropy:
        header += ("\n# the plan priced PyTorch's cross-entropy on fp32 logits (--eager-loss); Megatron's fused "
                   "vocab-parallel kernel keeps 4 bytes per logit, not 12, so expect less memory on the last stage")
    if runtime.eager_elementwise:
        header += ("\n# the plan priced eager PyTorch element-wise kernels (--eager-elementwise); Megatron runs fused "
                   "ones, so expect a faster step")
    if replicas > 1 and zero >= 2 and int(row["num_microbatches"]) > 1:
        # megatron_fsdp.py: the outer (DP-replica) all-reduce runs only with is_last_microbatch
        header += (f"\n# hybrid sharding: Megatron-FSDP all-reduces the gradient shards across the {replicas} groups "
                   "once per step; the plan priced it after every micro-batch (FSDP2, torchtitan), so expect the "
                   "same or less DP traffic")
    # validate_args asserts the environment too: Megatron-FSDP needs more than one CUDA connection; TP or CP
    # overlap needs exactly one (before Blackwell)
    if zero >= 2:
        header += "\n# environment: CUDA_DEVICE_MAX_CONNECTIONS unset or > 1 (Megatron-FSDP asserts it is not 1)"
    elif tp > 1 or cp > 1:
        header += "\n# environment: CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron asserts it for TP or CP before Blackwell)"
    return header + "\n" + " \\\n".join(args) + "\n"
