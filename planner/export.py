"""Launch settings: a layout written as the flags or config fragment of the framework that will run it.

Names follow the frameworks' current sources: Megatron-LM `megatron/training/arguments.py` (including
`--num-virtual-stages-per-pipeline-rank`, which replaced `--num-layers-per-virtual-pipeline-stage`, and Megatron-FSDP's
`--data-parallel-sharding-strategy optim|optim_grads|optim_grads_params`), torchtitan `torchtitan/config/job_config.py`
([parallelism], [activation_checkpoint], [training]) and DeepSpeed's JSON config (zero_optimization.stage,
train_micro_batch_size_per_gpu, gradient_accumulation_steps). What a framework cannot express is said in a comment
(or, for JSON, in `notes` returned beside it).

Mixed precision follows the GPU (HardwareSpec.mixed_precision): bf16, or, on a GPU without bf16 (V100), fp16 with
dynamic loss scaling: Megatron `--fp16` (its `--loss-scale` default None is dynamic scaling) and DeepSpeed's `fp16`
block with `"loss_scale": 0` (dynamic). torchtitan trains in bf16 or fp32 only (`training.mixed_precision_param:
Literal["bfloat16", "float32"]`, torchtitan/config/job_config.py; no loss scaler), so it refuses such a GPU.
"""

from __future__ import annotations

import json
from dataclasses import replace

from planner.cost.pipeline import chunk_layers, every_nth_layers, stage_layers
from planner.errors import PlannerError
from planner.search import repriced
from planner.specs.model import ModelSpec
from planner.specs.strategy import LAYOUT_KNOBS, RANK_ORDERS, Job, Runtime, pp_next_launchable

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")


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


def _order_note(framework: str, row) -> str | None:
    """When the row was priced in a rank order `framework` cannot launch (a library caller's forced order):
    the figures above do not describe its run."""
    if rank_order(row) in launch_orders(framework, row):
        return None
    return (f"the plan's figures assume rank order {row['placement']} (PP stages next to each other), which "
            f"{framework} cannot launch; best_supported prices a search's layouts in {framework}'s own order")


def blockers(framework: str, row, dtype: str = "bf16") -> list[str]:
    """Every reason `framework` cannot run this layout as planned (in mixed precision `dtype`); empty if it can."""
    why = []
    pp, vpp, zero, tp = int(row["pp"]), int(row["vpp"]), int(row["zero_stage"]), int(row["tp"])
    if framework != "torchtitan" and row.get("recompute") == "op":
        why.append(f"{framework} has no per-op checkpointing policy (recompute op is torchtitan's)")
    if framework == "megatron" and pp > 1 and zero >= 2:
        # Megatron-FSDP and pipeline parallelism are mutually exclusive (Megatron-LM PR #6081's run script).
        why.append("Megatron-FSDP (ZeRO-2/3) does not run with pipeline parallelism")
    if framework == "deepspeed":
        if int(row.get("dp_replicate", 1)) > 1:
            # DeepSpeed 0.19 rejects zero_optimization.mics_shard_size ("MiCS ZeRO-3 sharding has been removed");
            # ZeRO++ hpZ keeps a second copy of the parameters only, not the plan's per-group states.
            why.append("DeepSpeed shards over all data-parallel ranks: its hybrid sharding (MiCS) was removed, and "
                       "ZeRO++ hpZ shards only a second copy of the parameters per group")
        if int(row.get("cp", 1)) > 1:
            why.append("DeepSpeed has no context parallelism (its Ulysses sequence parallelism splits heads instead)")
        if pp > 1 and zero >= 2:
            why.append("DeepSpeed's pipeline engine supports ZeRO stages 0-1 only")
        if vpp > 1:
            why.append("DeepSpeed's pipeline engine has no interleaved schedule")
        if zero == 0 and not _fp16(dtype) and pp > 1 and int(row["dp"]) > 1:
            # engine.py _do_optimizer_sanity_check: the pipeline engine's bf16 without ZeRO is BF16_Optimizer, which
            # partitions the fp32 master weights and Adam states over DP: ZeRO-1's memory and traffic, not ZeRO-0's.
            # (Without PP, DeepSpeed >= 0.17.6 runs it unsharded as DDP_BFLOAT16: deepspeed_config notes that.)
            why.append("DeepSpeed's pipeline engine runs bf16 without ZeRO through BF16_Optimizer, which shards the "
                       "optimizer state over DP like ZeRO-1")
    if framework == "torchtitan":
        if int(row.get("cp", 1)) > 1 and zero == 0:
            why.append("torchtitan shards parameters over DP x CP (FSDP on the dp_shard x cp mesh) whenever CP > 1")
        if zero == 0 and (tp > 1 or pp > 1):
            # parallelize.py: DDP "has not supported > 1D parallelism"
            why.append("torchtitan's DDP (ZeRO-0) runs on a one-dimensional mesh only, not with TP or PP")
        if zero == 1:
            why.append("torchtitan has no ZeRO-1 (its FSDP shards gradients too)")
        if tp > 1 and not row["sequence_parallel"]:
            why.append("torchtitan 0.2.x's tensor parallelism always shards the sequence (0.3 adds "
                       "enable_sequence_parallel)")
    return why


def unsupported(framework: str, row, dtype: str = "bf16") -> str | None:
    """Why `framework` cannot run this layout as planned (in mixed precision `dtype`), or None: its first blocker."""
    return next(iter(blockers(framework, row, dtype)), None)


def _blocking(framework: str, table, dtype: str) -> str:
    """What keeps `framework` from every fitting layout of `table` (each has a blocker): a reason they all share
    (a pinned knob's, say), else each first reason with the number of layouts it stops, most first."""
    found = [blockers(framework, r, dtype) for _, r in table.iterrows()]
    shared = set(found[0]).intersection(*found[1:])
    if shared:
        return next(w for w in found[0] if w in shared)
    counts: dict[str, int] = {}
    for why in found:
        counts[why[0]] = counts.get(why[0], 0) + 1
    return "; ".join(f"{w}: {n:,} of {len(found):,} layouts" for w, n in sorted(counts.items(), key=lambda x: -x[1]))


def _whole_pp_sends(row) -> bool:
    """Whether Megatron-Core would send this layout's stage outputs whole (no SP, with TP and PP), where Megatron-LM's
    scatter/gather and DeepSpeed's pipeline engine split them over the TP ranks (Runtime.pp_scatter_gather)."""
    return not row["sequence_parallel"] and int(row["tp"]) > 1 and int(row["pp"]) > 1


def _priced_attention(runtime: Runtime) -> str | None:
    """The attention the plan priced when it is not FlashAttention-2-class fused kernels (the frameworks' own
    default today), else None."""
    if runtime.flash_attention is False:
        return "unfused attention (scores written to HBM)"
    if runtime.flash_attention_gen == 1:
        return "FlashAttention-1-class kernels (--flash-attention-gen 1)"
    return None


def _megatron_model_args(m: ModelSpec, job: Job) -> list[str]:
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
    args.append("--normalization " + ("RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"))
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


def _megatron_mlp_note(m: ModelSpec) -> str | None:
    """An MLP no Megatron-LM argument selects (--swiglu is SiLU-gated, --squared-relu plain, GeLU the default)."""
    if (m.gated_mlp, m.activation) in ((True, "silu"), (False, "gelu"), (False, "relu2")):
        return None
    kind = f"{'gated ' if m.gated_mlp else ''}{m.activation}" + (" (GeGLU, as Gemma's)" if m.gated_mlp and
                                                                  m.activation == "gelu" else "")
    return (f"# MLP: {kind} has no Megatron-LM argument: set gated_linear_unit and activation_func in the "
            "TransformerConfig (same FLOPs and memory as priced)")


def plan_line(row) -> str | None:
    """The plan's own figures for the exported layout, to tie a launch file back to the table (None for a row
    given by hand with the knobs only)."""
    if not all(k in row for k in ("step_time_s", "memory_gib", "mfu", "tokens_per_s")):
        return None
    return (f"plan: step {row['step_time_s']:.3g} s, {row['memory_gib']:.1f} GiB per GPU, MFU {row['mfu']:.1%} "
            f"({row['tokens_per_s']:,.0f} tokens/s)")


def megatron_args(row, m: ModelSpec, job: Job, runtime: Runtime = Runtime(), dtype: str = "bf16",
                  transformer_engine: bool = True) -> str:
    """Megatron-LM command-line arguments for the model, the layout and the runtime features the plan priced;
    `dtype` is the 16-bit format of mixed precision, bf16 or fp16 (HardwareSpec.mixed_precision);
    `transformer_engine` False on a GPU Transformer Engine does not support (HardwareSpec.fused_attention: sm70)."""
    tp, cp, pp, dp, v = (int(row[k]) for k in ("tp", "cp", "pp", "dp", "vpp"))
    fp16 = _fp16(dtype)
    args = _megatron_model_args(m, job)
    if not transformer_engine:
        args.append("--transformer-impl local")    # Megatron's default, transformer_engine, needs sm80 or newer
    mlp = _megatron_mlp_note(m)
    attention = _priced_attention(runtime)
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
    edge, mid = (int(x) for x in stage_layers(m.layers, pp))
    if pp > 1 and edge != mid:
        args += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    if v > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {v}")
    if pp > 1 and dp > 1 and rank_order(row) == "pp-dp" and "pp-dp" in launch_orders("megatron", row):
        args.append("--use-tp-pp-dp-mapping")       # the plan's rank order: PP stages next to each other
    if row["sequence_parallel"]:
        args.append("--sequence-parallel")
        if runtime.tp_comm_overlap and tp > 1:
            args.append("--tp-comm-overlap")
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
    if runtime.pp_scatter_gather and _whole_pp_sends(row):
        header += ("\n# the plan priced pipeline sends split over the TP ranks (pp_scatter_gather); without "
                   "--sequence-parallel Megatron-Core sends each whole: expect more PP time")
    if mlp:
        header += "\n" + mlp
    if order := _order_note("megatron", row):
        header += "\n# " + order
    if attention and runtime.flash_attention_gen == 1:
        header += (f"\n# attention: the plan priced {attention}; Megatron runs the flash-attn or cuDNN kernels "
                   "installed (FlashAttention-2 class today), so expect a faster step")
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


def _no_torchtitan_fp16(gpu: str) -> PlannerError:
    return PlannerError("--export", f"torchtitan cannot train on {gpu}: it has no bf16, and torchtitan's mixed "
                                    "precision is bf16 or fp32 only (training.mixed_precision_param; no fp16 loss "
                                    "scaling); export megatron or deepspeed, which write fp16 with dynamic loss scaling")


def _fp16(dtype: str) -> bool:
    if dtype not in ("bf16", "fp16"):
        raise PlannerError("dtype", f"got {dtype!r}, expected bf16 or fp16 (the 16-bit format of mixed precision)")
    return dtype == "fp16"


def torchtitan_toml(row, m: ModelSpec, job: Job, dtype: str = "bf16", runtime: Runtime = Runtime()) -> str:
    """A torchtitan 0.2.x job-config fragment ([parallelism], [activation_checkpoint], [training]); bf16 only.
    torchtitan 0.3 replaced TOML job files with Python config_registry entries and --section.key overrides (its
    activation checkpointing became FullAC/SelectiveAC configs, without every-N-th-layer checkpointing), so the
    header says which release the keys are for."""
    if _fp16(dtype):
        raise _no_torchtitan_fp16("this GPU")
    tp, cp, pp, dp, v, zero = (int(row[k]) for k in ("tp", "cp", "pp", "dp", "vpp", "zero_stage"))
    notes = []
    if zero == 0:
        replicate, shard, reshard = dp, 1, None
    else:
        replicate = int(row.get("dp_replicate", 1))            # HSDP: FSDP within dp_shard x cp, replicated
        shard = dp // replicate
        # ZeRO-1/2: keep gathered params after forward; ZeRO-3: reshard. torchtitan's "default" reshards only
        # without PP (apply_fsdp: reshard_after_forward = not pp_enabled), so with PP ZeRO-3 must say "always".
        reshard = "never" if zero in (1, 2) else ("always" if pp > 1 else None)
        if zero == 1:
            notes.append("# torchtitan has no ZeRO-1: FSDP without resharding after forward (ZeRO-2-like) is closest")
        m_steps = job.global_batch // (int(row["micro_batch"]) * dp)
        if zero in (1, 2) and m_steps > 1:
            # FSDP2's post-backward hook frees the gathered parameters (torch fully_shard docs), so every
            # micro-batch's forward gathers them again; the plan's ZeRO-1/2 gathered them once per step
            notes.append(f"# FSDP2 frees the gathered weights after each backward: each of the {m_steps} "
                         "micro-batches all-gathers them again, where the plan priced one gather per step")
    if tp > 1 and not row["sequence_parallel"]:
        notes.append("# torchtitan's TP always shards the sequence (SP); the plan's SP-off variant is not available")
    if order := _order_note("torchtitan", row):
        notes.append("# " + order)
    if attention := _priced_attention(runtime):
        notes.append(f"# attention: the plan priced {attention}; torchtitan runs PyTorch SDPA's fused kernels "
                     "(FlashAttention-2 class), so expect a faster step"
                     + (" and less activation memory" if runtime.flash_attention is False else ""))
    if not runtime.eager_elementwise:
        notes.append("# the plan priced fused element-wise kernels: turn torch.compile on (or plan with "
                     "--eager-elementwise to price torchtitan without it)")
    if tp > 1 and runtime.tp_comm_overlap:
        notes.append("# the plan priced TP communication overlapped with GEMMs (--tp-comm-overlap): torchtitan's "
                     "nearest is [parallelism] enable_async_tensor_parallel = true, with [compile] enable = true")
    lines = ["[parallelism]", f"data_parallel_replicate_degree = {replicate}",
             f"data_parallel_shard_degree = {shard}", f"tensor_parallel_degree = {tp}",
             f"pipeline_parallel_degree = {pp}"] + ([f"context_parallel_degree = {cp}"] if cp > 1 else [])
    if cp > 1 and runtime.cp_comm_overlap:    # priced as Megatron's ring; torchtitan all-gathers unless told
        notes.append("# torchtitan's CP rotates K/V with all-gather by default (context_parallel_rotate_method); "
                     "plan with --cp-comm allgather to price that instead of Megatron's overlapped ring")
    if reshard:
        lines.append(f'fsdp_reshard_after_forward = "{reshard}"')
    if pp > 1:
        # torchtitan counts the embedding and the output as `*_stage_less_layers` layers on the first and last stage
        # and splits L plus those into PP x VPP stages. The plan's split: (L + 2)/p slots per stage when PP does not
        # divide L (Megatron's embedding/loss accounting, weights 1), else L/p (weights 0, not torchtitan's 1).
        edge, mid = (int(x) for x in stage_layers(m.layers, pp))
        edge_weight = 0 if edge == mid else 1
        lines += [f'pipeline_parallel_schedule = "{"Interleaved1F1B" if v > 1 else "1F1B"}"',
                  f"pipeline_parallel_microbatch_size = {int(row['micro_batch'])}",
                  f"pipeline_parallel_first_stage_less_layers = {edge_weight}",
                  f"pipeline_parallel_last_stage_less_layers = {edge_weight}"]
        if v > 1:       # ceil((L + first + last) / layers_per_stage) virtual stages = PP x VPP
            lines.append(f"pipeline_parallel_layers_per_stage = {(m.layers + 2 * edge_weight) // (pp * v)}")
    mode = {"none": "none", "selective": "selective", "full": "full", "op": "selective"}[row["recompute"]]
    k, chunk = int(row.get("recompute_layers", 0)), int(chunk_layers(m.layers, pp, v))
    # torchtitan's layer SAC checkpoints every N-th block of the rank (one counter over its v chunks): the plan's
    # k layers per chunk when N = v·chunk // (v·k) checkpoints v·k of them.
    rank, want = v * chunk, v * k
    every = rank // want if mode == "full" and 0 < k < chunk and every_nth_layers(rank, rank // want) == want else 0
    lines += ["", "[activation_checkpoint]", f'mode = "{"selective" if every or mode == "selective" else mode}"']
    if every:
        lines.append(f'selective_ac_option = "{every}"')
        nth = {1: "1st", 2: "2nd", 3: "3rd"}.get(every, f"{every}th")
        notes.append(f"# every {nth} layer fully recomputed: the plan's {k} of each {chunk}-layer chunk, "
                     "spread over the chunk instead of its first layers")
    elif mode == "full" and k:
        notes.append(f"# torchtitan checkpoints every layer or every N-th one ('selective' with an integer option), "
                     f"not the first {k} of each chunk the plan assumed: full AC is "
                     "written, which costs more time and saves more memory")
    if mode == "selective":
        lines.append('selective_ac_option = "op"')
    if row["recompute"] == "selective":
        notes.append("# torchtitan's op-level selective AC also recomputes every second matmul: costlier than "
                     "Megatron's selective recompute that the plan assumed (plan with --recompute op to price it)")
    # With PP, local_batch_size is a DP rank's share of the step, split into pipeline micro-batches; without PP,
    # it is one forward/backward, and global_batch_size / (local_batch_size x DP) steps are accumulated.
    micro = int(row["micro_batch"])
    local = job.global_batch // dp if pp > 1 else micro
    lines += ["", "[training]", f"local_batch_size = {local}", f"global_batch_size = {job.global_batch}",
              f"seq_len = {job.seq_len}"]
    if pp == 1 and job.global_batch > micro * dp:
        notes.append(f"# gradient accumulation: {job.global_batch // (micro * dp)} micro-batches of {micro} per step")
    plan = plan_line(row)
    head = ["# torchtitan 0.2.x job config (TOML, torchtitan/config/job_config.py): merge into your model's train "
            "config, whose [model] (name, flavor, tokenizer) and [optimizer] stay yours; torchtitan 0.3 takes "
            "Python config_registry entries and --section.key overrides instead"]
    return "\n".join(head + ([f"# torchtitan: {plan}"] if plan else []) + notes + lines) + "\n"


def deepspeed_config(row, m: ModelSpec, job: Job, dtype: str = "bf16",
                     runtime: Runtime = Runtime()) -> tuple[dict, list[str]]:
    """A DeepSpeed JSON config and the notes for what lives outside it (TP, PP)."""
    tp, pp, dp, zero = (int(row[k]) for k in ("tp", "pp", "dp", "zero_stage"))
    micro, fp16 = int(row["micro_batch"]), _fp16(dtype)
    cfg = {
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": job.global_batch // (micro * dp),
        # DeepSpeed's fp16 loss_scale 0 is dynamic loss scaling (config docs; DeepSpeed PR #7889 keeps 0 as dynamic)
        **({"fp16": {"enabled": True, "loss_scale": 0}} if fp16 else {"bf16": {"enabled": True}}),
        "zero_optimization": {"stage": zero, "overlap_comm": True, "contiguous_gradients": True},
        "gradient_clipping": 1.0,
    }
    if zero == 1 and not fp16:
        # The plan prices fp32 main gradients; DeepSpeed accumulates in the model's bf16 unless told, and with fp32
        # accumulation runs ZeRO-1 as BF16_Optimizer (engine.py _do_optimizer_sanity_check), the same sharding.
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    if row["recompute"] != "none":
        cfg["activation_checkpointing"] = {"partition_activations": tp > 1, "contiguous_memory_optimization": False}
    notes = [n for n in (plan_line(row), f"data-parallel size {dp}: train_batch_size = micro-batch x gradient "
                                          "accumulation x DP") if n]
    if fp16:
        notes.append("fp16 mixed precision with dynamic loss scaling (loss_scale 0): this GPU has no bf16")
    elif zero == 0 and dp > 1:
        notes.append("bf16 without ZeRO needs DeepSpeed >= 0.17.6 (DDP_BFLOAT16; earlier releases refuse it): it "
                     "accumulates and all-reduces bf16 gradients where the plan priced fp32 ones, so expect less "
                     "gradient memory and DP traffic than planned")
    if tp > 1:
        notes.append(f"tensor parallelism {tp} comes from the model code (Megatron-DeepSpeed "
                     f"--tensor-model-parallel-size {tp}), not from this JSON")
    if pp > 1:
        notes.append(f"pipeline parallelism: deepspeed.pipe.PipelineModule(num_stages={pp}); DeepSpeed's engine runs "
                     "1F1B only" + (" (the plan's interleaving is not available)" if int(row["vpp"]) > 1 else ""))
        if zero >= 2:
            notes.append("DeepSpeed does not support ZeRO-2/3 with pipeline parallelism: use stage 1")
        if not runtime.pp_scatter_gather and _whole_pp_sends(row):
            notes.append("DeepSpeed's pipeline engine splits each stage's output over the TP ranks; the plan priced "
                         "whole sends (Megatron-Core without SP): expect less PP time (Runtime(pp_scatter_gather="
                         "True) prices the split)")
    if row["recompute"] == "selective":
        notes.append("selective recompute: use the model's own checkpointing of the attention core "
                     "(DeepSpeed checkpoints whole layers)")
    if row["recompute"] == "full" and int(row.get("recompute_layers", 0)):
        notes.append(f"partial recompute: checkpoint only the first {int(row['recompute_layers'])} layers of each "
                     "pipeline chunk in the model code (deepspeed.checkpointing.checkpoint per layer)")
    elif row["recompute"] == "full":
        notes.append("full recompute: the activation_checkpointing block only configures deepspeed.checkpointing; "
                     "the model code must checkpoint every layer with deepspeed.checkpointing.checkpoint "
                     "(Megatron-DeepSpeed --checkpoint-activations)")
    if tp > 1 and row["sequence_parallel"]:
        notes.append("sequence parallelism: the plan shards norms and dropout over TP (Megatron-DeepSpeed "
                     "--sequence-parallel), again in the model code")
    if order := _order_note("deepspeed", row):
        notes.append(order)
    if attention := _priced_attention(runtime):
        notes.append(f"attention kernels come from the model code: the plan priced {attention}")
    notes.append("element-wise kernels come from the model code: the plan priced "
                 + ("eager PyTorch ones (--eager-elementwise)" if runtime.eager_elementwise
                    else "fused ones (Megatron's or torch.compile's; plan with --eager-elementwise for plain PyTorch)"))
    if tp > 1 and runtime.tp_comm_overlap:
        notes.append("the plan priced TP communication overlapped with GEMMs (--tp-comm-overlap); Megatron-DeepSpeed "
                     "has no such option, so expect the TP time of a plan without it")
    return cfg, notes


def export(framework: str, row, m: ModelSpec, job: Job, runtime: Runtime = Runtime(),
           dtype: str = "bf16", transformer_engine: bool = True) -> tuple[str, list[str]]:
    """(text, notes) for `framework` (one of FRAMEWORKS), in mixed precision `dtype` (bf16, or fp16 on a GPU without
    bf16: HardwareSpec.mixed_precision). Megatron and torchtitan carry their notes as comments in the text;
    DeepSpeed's JSON cannot, so its notes come back separately."""
    if framework == "megatron":
        return megatron_args(row, m, job, runtime, dtype, transformer_engine), []
    if framework == "torchtitan":
        return torchtitan_toml(row, m, job, dtype, runtime), []
    cfg, notes = deepspeed_config(row, m, job, dtype, runtime)
    return json.dumps(cfg, indent=2) + "\n", notes


def best_supported(framework: str, result) -> tuple[str, list[str]]:
    """The best fitting layout of a search that `framework` can run, as (text, notes)."""
    dtype = result.hardware.mixed_precision
    if framework == "torchtitan" and _fp16(dtype):           # before the rows: no layout changes the answer
        raise _no_torchtitan_fp16(result.hardware.name)
    table = result.table
    if result.runtime.rank_order is not None and len(table):
        # a forced order: price every layout in the cheaper order some framework launches first, so the rows are
        # ranked by prices the pass below can only raise
        table = repriced(result, table, replace(result.runtime, rank_order=None))
    # The first supported row whose rank order the framework can launch, best first: stop there (iterating the
    # whole table took a second on large searches). Faster rows in an order it cannot launch are priced again in
    # its own order (no cheaper than before) and may still win.
    best, other_order = None, []
    for _, r in table.iterrows():
        if unsupported(framework, r, dtype) is not None:
            continue
        if rank_order(r) in launch_orders(framework, r):
            best = r
            break
        other_order.append(r)
    reordered = False
    if other_order:
        import pandas as pd

        again = repriced(result, pd.DataFrame(other_order), replace(result.runtime, rank_order="dp-pp")).iloc[0]
        if best is None or again["tokens_per_s"] > best["tokens_per_s"]:
            best, reordered = again, True
    if best is None:
        why = _blocking(framework, table, dtype) if len(table) else "no layout fits in memory"
        raise PlannerError("--export", f"no fitting layout that {framework} can run ({why})")
    overall = table.iloc[0]
    text, notes = export(framework, best, result.model, result.job, result.runtime, dtype,
                         result.hardware.fused_attention)
    gap = overall["tokens_per_s"] / best["tokens_per_s"] - 1
    same_knobs = all(best[k] == overall[k] for k in LAYOUT_KNOBS)
    if reordered:
        notes.insert(0, f"priced in {framework}'s rank order {best['placement']} (PP outermost)"
                        + (f": {gap:.1%} slower than the table's {overall['placement']}" if same_knobs else ""))
    if gap > 0 and not same_knobs:
        reason = unsupported(framework, overall, dtype) or (f"its rank order {overall['placement']} (PP stages next "
                                                            f"to each other), which {framework} cannot launch")
        notes.insert(0, f"best layout {framework} can run; the overall best ({gap:.1%} faster) is not supported: "
                        f"{reason}")
    return text, notes
