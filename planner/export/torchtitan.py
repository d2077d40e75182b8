"""torchtitan 0.2.x job-config fragments, keyed as in `torchtitan/config/job_config.py` ([parallelism],
[activation_checkpoint], [training]); what it cannot express is said in a comment. torchtitan trains in bf16 or fp32
only (`training.mixed_precision_param: Literal["bfloat16", "float32"]`; no loss scaler), so it refuses a GPU without
bf16."""

from __future__ import annotations

from planner.cost.pipeline import chunk_layers, every_nth_layers, stage_layers
from planner.errors import PlannerError
from planner.export.common import block_note, is_fp16, order_note, plan_line, precision_note, priced_attention
from planner.specs.model import ModelSpec
from planner.specs.strategy import Job, Precision, Runtime, shard_group


def pp_unsharded_gib(row) -> float:
    """GiB per GPU more than planned that torchtitan holds under PP with FSDP: torch.distributed.pipelining's
    PipelineStage (backward_maybe_with_nosync) turns FSDP's gradient sync and reshard-after-backward off for every
    micro-batch and reduces once after the last, so a stage keeps its whole gradients, not the plan's shard, and
    under ZeRO-3 its whole weights gathered too."""
    zero = int(row["zero_stage"])
    if int(row["pp"]) == 1 or zero < 2 or "gradients_gib" not in row:
        return 0.0                  # ZeRO-1's gradients were planned whole already
    shards = int(shard_group(int(row["dp"]), int(row.get("cp", 1)), int(row.get("dp_replicate", 1))))
    held = float(row["gradients_gib"]) + (float(row["weights_gib"]) if zero >= 3 else 0.0)
    return held * (shards - 1)


def edge_weights(layers: int, pp: int, vpp: int) -> tuple[int, int, int]:
    """(first, last, per_chunk): torchtitan's pipeline_parallel_first/last_stage_less_layers that reproduce the plan's
    split (stage_layers: the middle stages' layers minus each edge stage's) and, interleaved, its
    pipeline_parallel_layers_per_stage, (L + first + last) / (PP x VPP)."""
    first, mid, last = (int(x) for x in stage_layers(layers, pp))
    first_weight, last_weight = mid - first, mid - last
    return first_weight, last_weight, (layers + first_weight + last_weight) // (pp * vpp)


def _edge_too_heavy(first_weight: int, last_weight: int, per_chunk: int) -> bool:
    # generate_llm_fqn_per_model_part takes the edge weights off the first and last virtual stage only
    return max(first_weight, last_weight) > per_chunk


def blockers(row, capacity_gib: float | None = None, m: ModelSpec | None = None) -> list[str]:
    """Every reason torchtitan cannot run this layout as planned; empty if it can. `capacity_gib`: the memory a GPU
    may use (the search's), against which the unsharded gradients (and ZeRO-3 weights) under PP are checked; `m`: the
    model, whose layer split is checked against torchtitan's interleaved stage builder."""
    why = []
    zero, tp, pp = int(row["zero_stage"]), int(row["tp"]), int(row["pp"])
    if int(row.get("cp", 1)) > 1 and zero == 0:
        why.append("torchtitan shards parameters over DP x CP (FSDP on the dp_shard x cp mesh) whenever CP > 1")
    if zero == 0 and int(row["dp"]) > 1 and (tp > 1 or pp > 1):
        # parallelize.py: DDP "has not supported > 1D parallelism"; with DP 1 there is no DDP to apply
        why.append("torchtitan's DDP (ZeRO-0) runs on a one-dimensional mesh only, not with TP or PP")
    if zero == 1 and pp == 1:
        # Under PP its FSDP is ZeRO-1: torch's pipelining keeps the weights gathered and the gradients whole until
        # the last micro-batch (pp_unsharded_gib)
        why.append("torchtitan has no ZeRO-1 without PP (its FSDP shards gradients too)")
    if tp > 1 and not row["sequence_parallel"]:
        why.append("torchtitan 0.2.x's tensor parallelism always shards the sequence (0.3 adds "
                   "enable_sequence_parallel)")
    m_count, v = int(row["num_microbatches"]), int(row["vpp"])
    if pp > 1 and m_count < pp:
        # torch.distributed.pipelining PipelineScheduleSingle (1F1B, GPipe) raises on n_microbatches < num_stages;
        # Megatron runs the 1F1B warm-up with fewer
        why.append("torch's pipeline schedules need at least as many micro-batches as pipeline stages")
    if v > 1 and m_count % max(1, m_count // pp):
        # torch.distributed.pipelining ScheduleInterleaved1F1B: rounds = max(1, m // pp), m % rounds == 0. No
        # numbers in the text: the refusal of a whole search groups layouts by reason.
        why.append("torch's Interleaved1F1B needs the micro-batches to split into m // PP equal rounds (Megatron-Core "
                   "runs any count >= PP in micro-batch groups)")
    if m is not None and v > 1 and pp > 1 and _edge_too_heavy(*edge_weights(m.layers, pp, v)):
        why.append("torchtitan's stage builder needs each edge stage's fewer layers to fit in its one chunk "
                   "(input/output weight <= layers per stage); a smaller VPP does")
    extra = pp_unsharded_gib(row)
    if capacity_gib is not None and extra and float(row["memory_gib"]) + extra > capacity_gib:
        why.append("under PP torchtitan keeps FSDP's gradients unsharded (ZeRO-3: its weights gathered) until the "
                   "last micro-batch, which takes the layout over the memory limit")
    return why


def no_fp16(gpu: str) -> PlannerError:
    return PlannerError("--export", f"torchtitan cannot train on {gpu}: it has no bf16, and torchtitan's mixed "
                                    "precision is bf16 or fp32 only (training.mixed_precision_param; no fp16 loss "
                                    "scaling); export megatron or deepspeed, which write fp16 with dynamic loss scaling")


def torchtitan_toml(row, m: ModelSpec, job: Job, dtype: str = "bf16", runtime: Runtime = Runtime(),
                    precision: Precision = Precision()) -> str:
    """A torchtitan 0.2.x job-config fragment ([parallelism], [activation_checkpoint], [training]); bf16 only.
    torchtitan 0.3 replaced TOML job files with Python config_registry entries and --section.key overrides (its
    activation checkpointing became FullAC/SelectiveAC configs, without every-N-th-layer checkpointing), so the
    header says which release the keys are for."""
    if is_fp16(dtype):
        raise no_fp16("this GPU")
    tp, cp, pp, dp, v, zero = (int(row[k]) for k in ("tp", "cp", "pp", "dp", "vpp", "zero_stage"))
    notes = []
    if zero == 0:
        replicate, shard, reshard = dp, 1, None
    else:
        replicate = int(row.get("dp_replicate", 1))            # HSDP: FSDP within dp_shard x cp, replicated
        shard = dp // replicate
        # ZeRO-1/2: keep gathered params after forward; ZeRO-3: reshard. torchtitan's "default" reshards only
        # without PP (apply_fsdp: reshard_after_forward = not pp_enabled), so with PP ZeRO-3 must say "always"
        # (the search plans no ZeRO-3 under PP; a row given by hand may have it).
        reshard = None if zero == 1 and pp > 1 else "never" if zero in (1, 2) else ("always" if pp > 1 else None)
        if zero == 1 and pp == 1:
            notes.append("# torchtitan has no ZeRO-1: FSDP without resharding after forward (ZeRO-2-like) is closest")
        m_steps = job.global_batch // (int(row["micro_batch"]) * dp)
        if zero == 1 and pp > 1:
            notes.append("# under PP torchtitan's FSDP keeps the weights gathered and the gradients whole until the "
                         "last micro-batch, then reduce-scatters once: the plan's ZeRO-1")
        elif pp > 1:
            more = pp_unsharded_gib(row)
            extra = f" (about {more:,.1f} GiB more per GPU than planned)" if more else ""
            held = "gradients unsharded and its weights gathered" if zero >= 3 else "gradients unsharded"
            notes.append(f"# under PP torchtitan's stages keep FSDP's {held} until the last micro-batch, where the "
                         f"plan priced them sharded{extra}")
        elif zero in (1, 2) and m_steps > 1:
            # FSDP2's post-backward hook frees the gathered parameters (torch fully_shard docs), so every
            # micro-batch's forward gathers them again; the plan's ZeRO-1/2 gathered them once per step
            notes.append(f"# FSDP2 frees the gathered weights after each backward: each of the {m_steps} "
                         "micro-batches all-gathers them again, where the plan priced one gather per step")
    if note := precision_note("torchtitan", row, precision):
        notes.append("# " + note)
    if block := block_note("torchtitan", m, job.seq_len):
        notes.append("# " + block)
    if tp > 1 and not row["sequence_parallel"]:
        notes.append("# torchtitan's TP always shards the sequence (SP); the plan's SP-off variant is not available")
    if order := order_note("torchtitan", row):
        notes.append("# " + order)
    if attention := priced_attention(runtime):
        notes.append(f"# attention: the plan priced {attention}; torchtitan runs PyTorch SDPA's fused kernels "
                     "(FlashAttention-2 class), so expect a faster step"
                     + (" and less activation memory" if runtime.flash_attention is False else ""))
    if runtime.fused_cross_entropy:
        notes.append("# the plan priced a fused cross-entropy (4 bytes per logit); torchtitan's loss is PyTorch's "
                     "on fp32 logits, 12 bytes per logit: plan with --eager-loss for its memory")
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
        # and splits L plus those into PP x VPP stages. The plan's split: (L + 2)/p slots per stage (Megatron's
        # embedding and loss accounting, weights 1 and 1) or (L + 1)/p (the loss alone, weights 0 and 1) when PP
        # does not divide L, else L/p (weights 0, not torchtitan's default 1); explicit edge stages of first and
        # last layers take weights mid - first and mid - last.
        first_weight, last_weight, per_chunk = edge_weights(m.layers, pp, v)
        lines += [f'pipeline_parallel_schedule = "{"Interleaved1F1B" if v > 1 else "1F1B"}"',
                  f"pipeline_parallel_microbatch_size = {int(row['micro_batch'])}",
                  f"pipeline_parallel_first_stage_less_layers = {first_weight}",
                  f"pipeline_parallel_last_stage_less_layers = {last_weight}"]
        if v > 1:       # ceil((L + first + last) / layers_per_stage) virtual stages = PP x VPP
            lines.append(f"pipeline_parallel_layers_per_stage = {per_chunk}")
            if _edge_too_heavy(first_weight, last_weight, per_chunk):
                notes.append(f"# torchtitan refuses this split: its {first_weight} and {last_weight} fewer layers "
                             f"on the edge stages must each fit in one {per_chunk}-layer chunk (input/output_weight "
                             "<= layers per stage); plan with a smaller --vpp")
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
