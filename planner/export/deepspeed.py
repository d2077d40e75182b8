"""DeepSpeed JSON configs (zero_optimization.stage, train_micro_batch_size_per_gpu, gradient_accumulation_steps).
JSON has no comments, so what it cannot express (TP and PP live in the model code) comes back as notes beside it.
fp16 (a GPU without bf16) is its `fp16` block with `"loss_scale": 0`, dynamic loss scaling."""

from __future__ import annotations

from planner.cost.pipeline import stage_layers
from planner.export.common import (
    block_note,
    is_fp16,
    op_recompute_blocker,
    order_note,
    plan_line,
    precision_note,
    priced_attention,
    whole_pp_sends,
)
from planner.specs.model import ModelSpec
from planner.specs.strategy import Job, Precision, Runtime


def blockers(row, dtype: str = "bf16") -> list[str]:
    """Every reason DeepSpeed cannot run this layout as planned (in mixed precision `dtype`); empty if it can."""
    why = op_recompute_blocker("deepspeed", row)
    pp, vpp, zero = int(row["pp"]), int(row["vpp"]), int(row["zero_stage"])
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
    if zero == 0 and not is_fp16(dtype) and pp > 1 and int(row["dp"]) > 1:
        # engine.py _do_optimizer_sanity_check: the pipeline engine's bf16 without ZeRO is BF16_Optimizer, which
        # partitions the fp32 master weights and Adam states over DP: ZeRO-1's memory and traffic, not ZeRO-0's.
        # (Without PP, DeepSpeed >= 0.17.6 runs it unsharded as DDP_BFLOAT16: deepspeed_config notes that.)
        why.append("DeepSpeed's pipeline engine runs bf16 without ZeRO through BF16_Optimizer, which shards the "
                   "optimizer state over DP like ZeRO-1")
    return why


def deepspeed_config(row, m: ModelSpec, job: Job, dtype: str = "bf16",
                     runtime: Runtime = Runtime(), precision: Precision = Precision()) -> tuple[dict, list[str]]:
    """A DeepSpeed JSON config and the notes for what lives outside it (TP, PP)."""
    tp, pp, dp, zero = (int(row[k]) for k in ("tp", "pp", "dp", "zero_stage"))
    micro, fp16 = int(row["micro_batch"]), is_fp16(dtype)
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
    partition = tp > 1 and not row["sequence_parallel"]
    if row["recompute"] != "none":
        # Partitioning splits each checkpointed layer input over the TP ranks, which hold it whole only without SP
        # (Megatron refuses its own equivalent, distribute_saved_activations, with SP).
        cfg["activation_checkpointing"] = {"partition_activations": partition,
                                           "contiguous_memory_optimization": False}
    notes = [n for n in (plan_line(row), f"data-parallel size {dp}: train_batch_size = micro-batch x gradient "
                                          "accumulation x DP") if n]
    if fp16:
        notes.append("fp16 mixed precision with dynamic loss scaling (loss_scale 0): this GPU has no bf16")
    elif zero == 0 and dp > 1:
        notes.append("bf16 without ZeRO needs DeepSpeed >= 0.17.6 (DDP_BFLOAT16; earlier releases refuse it): it "
                     "accumulates and all-reduces bf16 gradients where the plan priced fp32 ones, so expect less "
                     "gradient memory and DP traffic than planned")
    if zero == 1 and not fp16:
        # engine.py allreduce_gradients: without a ZeRO partitioned optimizer the engine all-reduces the gradients
        # for reduction (BF16_Optimizer's fp32 ones) at the accumulation boundary; BF16_Optimizer.step then
        # all-gathers the updated bf16 weights over DP
        notes.append("DeepSpeed's BF16_Optimizer all-reduces the fp32 gradients after the last micro-batch's backward "
                     "and all-gathers the updated weights after the step, neither overlapped with compute, where the "
                     "plan priced " + ("that all-reduce" if runtime.zero1_all_reduce else "a reduce-scatter")
                     + " and an all-gather hidden behind the backward and forward where overlap is on: expect more "
                     "exposed data-parallel time than planned"
                     + ("" if runtime.zero1_all_reduce else " (--zero1-all-reduce prices the all-reduce)"))
    elif zero >= 2:
        # engine.py communication_data_type: the configured one, else the model's 16-bit dtype
        notes.append(f"DeepSpeed reduces gradients in {'fp16' if fp16 else 'bf16'} (communication_data_type "
                     "defaults to the model's dtype) where the plan priced fp32 gradients: expect less "
                     "data-parallel traffic than planned, or set \"communication_data_type\": \"fp32\" for the "
                     "plan's (and Megatron's) numerics")
    if note := precision_note("deepspeed", row, precision):
        notes.append(note)
    if tp > 1:
        notes.append(f"tensor parallelism {tp} comes from the model code (Megatron-DeepSpeed "
                     f"--tensor-model-parallel-size {tp}), not from this JSON")
    if pp > 1:
        notes.append(f"pipeline parallelism: deepspeed.pipe.PipelineModule(num_stages={pp}); DeepSpeed's engine runs "
                     "1F1B only" + (" (the plan's interleaving is not available)" if int(row["vpp"]) > 1 else ""))
        first, mid, last = (int(x) for x in stage_layers(m.layers, pp))
        # ds_utils.partition_balanced over 0/1 weights: no part above ceil(L/p) blocks, which is the plan's middle
        # stage (stage_layers); the default 'parameters' weighs the embedding and output matrices too
        notes.append(f"stage split: the plan puts {first}, {mid} and {last} layers on the first, middle and last "
                     "stages; PipelineModule(partition_method='type:<your transformer block class>') balances the "
                     f"blocks alone, at most {mid} per stage as planned, though its lighter stages may sit elsewhere "
                     "(the default 'parameters' also weighs the embedding and output matrices)")
        if zero >= 2:
            notes.append("DeepSpeed does not support ZeRO-2/3 with pipeline parallelism: use stage 1")
        if not runtime.pp_scatter_gather and whole_pp_sends(row):
            # no direction: the split saves network bytes between nodes, and its all-gathers cost more than
            # they save when the stages share a node
            notes.append("DeepSpeed's pipeline engine splits each stage's output over the TP ranks and all-gathers it "
                         "on the receiver; the plan priced whole sends (Megatron-Core without SP), so expect another "
                         "PP time (Runtime(pp_scatter_gather=True) prices the split)")
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
    if row["recompute"] == "full":
        # Megatron-DeepSpeed's initialize.py configures deepspeed.checkpointing from its own flags, and an explicit
        # partition_activations there overrides the JSON's (checkpointing.configure)
        notes.append("Megatron-DeepSpeed configures deepspeed.checkpointing from its launcher flags, which override "
                     "this block: --deepspeed-activation-checkpointing"
                     + (" --partition-activations" if partition else " without --partition-activations"))
    if tp > 1 and row["sequence_parallel"]:
        notes.append("sequence parallelism: the plan shards norms and dropout over TP (Megatron-DeepSpeed "
                     "--sequence-parallel), again in the model code")
    if block := block_note("deepspeed", m, job.seq_len):
        notes.append(block)
    if order := order_note("deepspeed", row):
        notes.append(order)
    if attention := priced_attention(runtime):
        notes.append(f"attention kernels come from the model code: the plan priced {attention}")
    # Megatron-DeepSpeed's _VocabParallelCrossEntropy saves only the fp32 softmax for its in-place backward
    # (megatron/core/tensor_parallel/cross_entropy.py): the fused loss's 4 bytes per logit, not eager PyTorch's 12
    notes.append("the loss comes from the model code: the plan priced "
                 + ("PyTorch's cross-entropy on fp32 logits (--eager-loss, 12 bytes per logit); Megatron-DeepSpeed's "
                    "vocab-parallel one keeps 4, so expect less memory on the last stage" if not
                    runtime.fused_cross_entropy else "a fused one keeping 4 bytes per logit (Megatron-DeepSpeed's "
                    "vocab-parallel cross-entropy); a model calling PyTorch's on fp32 logits keeps 12: plan with "
                    "--eager-loss for its memory"))
    notes.append("element-wise kernels come from the model code: the plan priced "
                 + ("eager PyTorch ones (--eager-elementwise)" if runtime.eager_elementwise
                    else "fused ones (Megatron's or torch.compile's; plan with --eager-elementwise for plain PyTorch)"))
    if runtime.grad_accumulation_fusion and cfg["gradient_accumulation_steps"] > 1 and zero < 2:   # ZeRO-2/3: a shard
        # the engine (and BF16_Optimizer) add each micro-batch's weight gradient in a kernel of their own;
        # Megatron-DeepSpeed's linear layers have no gradient-accumulation fusion
        notes.append("DeepSpeed adds each micro-batch's weight gradient to the accumulated one in a separate kernel, "
                     "where the plan priced Megatron's fusion into the weight-gradient GEMM: expect a slower step "
                     "(plan with --no-grad-accumulation-fusion to price it)")
    if tp > 1 and runtime.tp_comm_overlap:
        notes.append("the plan priced TP communication overlapped with GEMMs (--tp-comm-overlap); Megatron-DeepSpeed "
                     "has no such option, so expect the TP time of a plan without it")
    return cfg, notes
