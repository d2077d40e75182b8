"""Validity of layouts (formulas.md §7), as boolean masks with a reason each.

The same rules serve the search (count rejections per reason) and `evaluate` (raise on a pinned layout that
breaks one). Rules are checked in order; a layout is charged to the first rule it breaks.
"""

from __future__ import annotations

import numpy as np

from planner.cost.pipeline import chunk_layers, split_kind, stage_layers, stage_split_valid
from planner.cost.step import knob_columns, num_microbatches
from planner.errors import KEYWORD_FLAGS, PlannerError
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.strategy import RECOMPUTE, Job


def rules(m: ModelSpec, hw: HardwareSpec, job: Job, c: dict, allow_cross_node_tp: bool = False,
          flash_attention: bool | None = None, microbatch_groups: bool = True, cp_ring: bool = True):
    """[(reason, ok-mask)] for columns `c` (tp, cp, pp, dp, micro_batch, vpp, sp, recompute, zero, or a result
    table's names), on the hardware as a job of job.gpus GPUs sees it (HardwareSpec.for_job). FlashAttention: as
    the runtime prices it; None follows the hardware (Runtime.for_hardware), as the search does by default.
    `microbatch_groups`: Runtime.microbatch_groups (False: interleaving needs a multiple of PP micro-batches).
    `cp_ring`: Runtime.cp_comm_overlap (CP's K/V exchange as a ring; False: all-gathered)."""
    c, hw = knob_columns(c), hw.for_job(job.gpus)
    if flash_attention is None:
        flash_attention = hw.fused_attention
    t, cp, p, d, b, v, sp, z, r = (np.asarray(c[k]) for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "sp",
                                                                 "zero", "dp_replicate"))
    s, gpn = job.seq_len, hw.gpus_per_node
    one_node = job.gpus <= gpn
    # Megatron-Core (TransformerConfig: num_query_groups must be a multiple of tensor_model_parallel_size) and
    # torchtitan (n_kv_heads // tp local heads) split whole K/V heads: TP divides both head counts.
    q_heads_ok, kv_heads_ok = m.heads % t == 0, m.kv_heads % t == 0
    dims_ok = (m.hidden % t == 0) & (m.ffn_hidden % t == 0)
    first, mid, last = stage_layers(m.layers, p)
    batch_ok = job.global_batch % (b * d) == 0
    num_mb = num_microbatches(job, b, d)
    not_op = np.asarray(c["recompute"]) != RECOMPUTE.index("op")
    fused = "fused (flash) attention" + ("" if hw.fused_attention else f", which {hw.name} does not have")
    return [
        ("TP x CP x PP x DP != GPUs", t * cp * p * d == job.gpus),
        (f"TP does not divide the {m.heads} query heads", q_heads_ok),
        (f"TP does not divide the {m.kv_heads} K/V heads", kv_heads_ok),
        (f"TP does not divide hidden ({m.hidden}) and FFN ({m.ffn_hidden})", dims_ok),
        (f"TP exceeds the {hw.gpus_per_node} GPUs of a node", allow_cross_node_tp | (t <= hw.gpus_per_node)),
        # Ranks are placed TP innermost, then CP, in node order: on more than one node, a TP (or TP x CP) block that
        # does not tile the node leaves some groups on two nodes (TP 6 on 8-GPU nodes: ranks 6-11), which the costs
        # do not price.
        (f"TP does not tile the {gpn}-GPU nodes (a group would straddle two nodes)",
         one_node | np.where(t <= gpn, gpn % t == 0, t % gpn == 0)),
        (f"TP x CP does not tile the {gpn}-GPU nodes (a CP group would straddle two nodes)",
         one_node | np.where(t * cp <= gpn, gpn % (t * cp) == 0, (t * cp) % gpn == 0)),
        (f"PP does not split the {m.layers} layers (stages of at least one layer, the first and last no heavier "
         "than the middle ones)", stage_split_valid(m.layers, p)),
        ("global batch not divisible by DP x micro-batch", batch_ok),
        # Megatron-Core CP: the sequence is cut into 2·CP chunks, each rank takes one from each end so that causal
        # attention work is balanced; it runs on fused attention kernels only (docs: context_parallel.rst).
        (f"context parallelism needs the sequence ({s}) divisible by 2 x CP", (cp == 1) | (s % (2 * cp) == 0)),
        (f"context parallelism needs {fused}", (cp == 1) | bool(flash_attention)),
        # Transformer Engine runs a sliding window under CP only with the K/V all-gather or all-to-all, not the
        # ring (attn_forward_func_with_cp asserts it): with the all-gather each rank's queries see a window's band.
        (f"context parallelism with a sliding window shorter than the sequence ({m.sliding_window or 0:,} < {s:,}) "
         "needs the K/V all-gather (--cp-comm allgather), not the ring", (cp == 1) | (not m.window_binds(s))
         | (not cp_ring)),
        # torchtitan's per-op policy saves the fused attention kernel's output (unfused attention is not modelled),
        # runs TP only with SP, and saves aten.mm outputs: a biased linear (aten.addmm) would save nothing, and it
        # does not restore the RNG state that recomputed dropout needs (preserve_rng_state=False).
        (f"op-level recompute needs {fused}", not_op | bool(flash_attention)),
        ("op-level recompute with TP needs sequence parallelism", not_op | (t == 1) | np.asarray(sp, dtype=bool)),
        ("op-level recompute needs a model without biases or dropout (torchtitan's Llama)",
         not_op | (not (any(m.biased) or m.dropout))),
        ("sequence parallelism needs TP > 1", ~np.asarray(sp, dtype=bool) | (t > 1)),
        (f"sequence parallelism needs TP to divide the sequence ({s}) per CP rank",
         ~np.asarray(sp, dtype=bool) | ((s % cp == 0) & ((s // cp) % t == 0))),
        ("optimizer sharding needs DP x CP > 1", (z == 0) | (d * cp > 1)),
        # No framework keeps the weights sharded across a pipeline's micro-batches: DeepSpeed's pipeline engine
        # asserts ZeRO < 2, Megatron's FSDP paths run with TP, CP and EP but not PP, and torch's pipelining keeps
        # FSDP's weights gathered and gradients whole until the last micro-batch (PipelineStage
        # backward_maybe_with_nosync; torchtitan: reshard_after_forward = not pp_enabled), ZeRO-1's memory and
        # traffic, which is what to plan.
        ("ZeRO-3 with PP > 1: no framework keeps the weights sharded across micro-batches (plan ZeRO-1)",
         (z < 3) | (p == 1)),
        # HSDP: DP = dp_replicate x dp_shard (torchtitan's mesh; Megatron's instances split the DP x CP group evenly)
        ("hybrid sharding needs DP-replicate to divide DP", d % r == 0),
        ("hybrid sharding needs optimizer sharding (ZeRO 1-3)", (r == 1) | (z > 0)),
        ("hybrid sharding needs a shard group of at least 2 ranks", (r == 1) | (d // r * cp >= 2)),
        ("interleaving needs PP > 1", (v == 1) | (p > 1)),
        # With the embedding/loss accounting a stage has (L+2)/p slots (an edge stage: one is the embedding or the
        # loss); the slots split into v equal chunks (Llama 3 405B: 128 slots, 16 stages, interleaved). Explicit
        # edge sizes must split into v chunks too (Megatron-Core TransformerConfig).
        ("interleaving: VPP must divide the layers (slots) per stage",
         (v == 1) | ((mid % v == 0) & ((split_kind(m.layers, p) != 3) | ((first % v == 0) & (last % v == 0))))),
        # Megatron-Core runs the chunks in groups of N >= p micro-batches (N = m fits any m >= p; the planner takes
        # the smallest valid N, cost.pipeline.interleave_group_size); fewer than p would stall the pipeline.
        ("interleaving needs at least PP micro-batches", (v == 1) | (batch_ok & (num_mb >= p))),
        ("interleaving needs micro-batches to be a multiple of PP (this stack has no micro-batch groups)",
         (v == 1) | bool(microbatch_groups) | (num_mb % p == 0)),
        # Megatron's block method recomputes the first k layers of each chunk of a stage.
        ("recompute layers exceed the layers per pipeline chunk",
         np.asarray(c.get("rc_layers", 0)) <= chunk_layers(m.layers, p, v)),
    ]


FIT_REASON = "does not fit in memory"
# Which flags a broken rule points at (matched on the rule's leading words, most specific first).
RULE_FLAGS = (("TP x CP x PP x DP", ("--tp", "--cp", "--pp", "--dp")), ("TP", ("--tp",)), ("PP", ("--pp",)),
              ("context parallelism with a sliding window", ("--cp", "--cp-comm", "--seq-len")),
              ("context parallelism", ("--cp", "--seq-len")),
              ("op-level recompute with TP", ("--recompute", "--sequence-parallel", "--tp")),
              ("op-level recompute needs a model", ("--recompute", "--model")),
              ("op-level recompute", ("--recompute", "--no-flash-attention")),
              ("global batch", ("--micro-batch", "--dp", "--global-batch")),
              ("sequence parallelism", ("--sequence-parallel", "--tp")), ("optimizer sharding", ("--zero", "--dp")),
              ("ZeRO-3 with PP", ("--zero", "--pp")),
              ("hybrid sharding needs optimizer", ("--dp-replicate", "--zero")),
              ("hybrid sharding", ("--dp-replicate", "--dp")),
              ("interleaving", ("--vpp", "--pp", "--micro-batch")),
              ("recompute layers", ("--recompute-layers", "--pp", "--vpp")))


def first_failure(rule_list, n: int):
    """Index of the first broken rule per row (len(rule_list) if none), and the all-valid mask."""
    failed = np.full(n, len(rule_list), dtype=np.int16)
    for i in range(len(rule_list) - 1, -1, -1):
        failed = np.where(np.broadcast_to(rule_list[i][1], (n,)), failed, i)
    return failed, failed == len(rule_list)


def sole_failure(rule_list, n: int):
    """Index of the only rule each row breaks, -1 where it breaks none or several: the rows that relaxing that one
    rule would make valid (what binds when nothing is valid, which the first-failure counts do not show)."""
    broken = np.stack([~np.broadcast_to(np.asarray(ok, dtype=bool), (n,)) for _, ok in rule_list])
    return np.where(broken.sum(axis=0) == 1, broken.argmax(axis=0), -1)


# --- which rule to blame when nothing is valid ------------------------------------------------------------------

def sole_blockers(m: ModelSpec, hw: HardwareSpec, job: Job, cols: dict, allow_cross_node_tp: bool,
                  flash_attention: bool, chunk_rows: int, microbatch_groups: bool = True, cp_ring: bool = True):
    """({rule: layouts that break only it}, nearest global batch that a layout blocked only by the batch rule
    divides), for the error when nothing is valid."""
    counts: dict[str, int] = {}
    units: set[int] = set()
    for start in range(0, len(cols["tp"]), chunk_rows):
        chunk = {k: v[start:start + chunk_rows] for k, v in cols.items()}
        rule_list = rules(m, hw, job, chunk, allow_cross_node_tp, flash_attention, microbatch_groups, cp_ring)
        only = sole_failure(rule_list, len(chunk["tp"]))
        for i, (reason, _) in enumerate(rule_list):
            rows = only == i
            if rows.any():
                counts[reason] = counts.get(reason, 0) + int(np.count_nonzero(rows))
                if reason.startswith("global batch"):
                    units.update(int(u) for u in np.unique(chunk["dp"][rows] * chunk["micro_batch"][rows]))
    return counts, round_batch(job.global_batch, units)


def round_batch(batch: int, units: set[int]) -> int | None:
    """The global batch nearest `batch` that one of `units` (DP x micro-batch) divides, among round ones: a unit
    times a power of two (6144 GPUs, batch 2048: 1536 = 3 x 512, not 2049)."""
    best = None
    for u in units:
        for k in range(64):                      # u, 2u, 4u, ... up to the first one past the batch
            cand = u << k
            if best is None or (abs(cand - batch), -cand) < (abs(best - batch), -best):
                best = cand
            if cand >= batch:
                break
    return best


def _rule_flags(reason: str) -> tuple:
    return next((f for prefix, f in RULE_FLAGS if reason.startswith(prefix)), ())


def _pinned_flags(result) -> dict[str, str]:
    """The pinned knobs as {CLI flag: keyword} (zero_stage is --zero)."""
    return {KEYWORD_FLAGS.get(k, "--" + k.replace("_", "-")): k for k, v in result.pins.__dict__.items()
            if v is not None}


def ranked_rejections(result) -> list[str]:
    """The validity rules that rejected candidates (not memory), most telling first: a rule about a flag the user
    pinned (it is what they can change); with nothing pinned, the rules that alone block some layout (most such
    layouts first, `sole_blockers`); then the most frequent."""
    pinned = set(_pinned_flags(result))
    reasons = {k: v for k, v in result.rejected.items() if k != FIT_REASON}
    sole = {} if pinned else result.sole_blockers
    return sorted(reasons, key=lambda r: (not set(_rule_flags(r)) & pinned, -sole.get(r, 0), -reasons[r]))


def invalid_layout_error(result) -> PlannerError:
    """No candidate passed the validity rules: one line naming the flag and the rules that rejected them, in the
    order of ranked_rejections, with how many layouts each rule alone blocks and a global batch that would work."""
    pinned = {k: v for k, v in result.pins.__dict__.items() if v is not None}
    reasons = result.rejected
    n = result.job.gpus
    ranked = ranked_rejections(result)
    if not ranked:
        return PlannerError("layout", f"no layout to evaluate for {n} GPUs")
    pin_names = _pinned_flags(result)
    sole = result.sole_blockers
    reason = ranked[0]
    flags_of = {r: _rule_flags(r) for r in ranked}
    detail = "; ".join(f"{r} ({reasons[r]:,} layout{'s' * (reasons[r] != 1)}"
                       + (f", {sole[r]:,} of them valid but for this rule" if r in sole and not pinned else "") + ")"
                       for r in ranked[:3])
    named = [f for f in flags_of[reason] if f in pin_names]
    flag = named[0] if named else "--gpus"           # nothing pinned: the GPU count is what does not work
    given = ", ".join(f"{p}={v}" for p, v in pinned.items())
    where = f"{result.model.name} on {n} GPUs" + (f" with {given}" if given else "")
    hints = []
    if reason.startswith("TP exceeds"):
        hints.append("--allow-cross-node-tp lets TP span nodes")
    elif reason.startswith("interleaving: VPP") and "pp" in pinned:
        first, slots, last = (int(x) for x in stage_layers(result.model.layers, pinned["pp"]))
        if split_kind(result.model.layers, pinned["pp"]) == 3:
            hints.append(f"with PP {pinned['pp']} the first, middle and last stages have {first}, {slots} and {last} "
                         f"layers, so VPP must divide all three")
        else:
            hints.append(f"with PP {pinned['pp']} a stage has {slots} layer slots, so VPP must divide {slots}")
    elif reason.startswith("recompute layers exceed"):
        p, v = pinned.get("pp", 1), pinned.get("vpp", 1)
        chunk = int(chunk_layers(result.model.layers, p, v))
        where = (f"with PP {p}{f' x VPP {v}' if v > 1 else ''} a chunk has {chunk} layers" if "pp" in pinned
                 else f"a chunk has at most {chunk} layers (PP 1)")
        hints.append(f"{where}, so --recompute-layers is at most {chunk}")
    if n > 3 and not pinned and all(n % k for k in range(2, int(n**0.5) + 1)):
        hints.append(f"{n} is prime, so TP, PP or DP must be {n} on its own: pick a GPU count with small factors "
                     f"(e.g. {1 << (n.bit_length() - 1)})")
    if result.batch_suggestion:
        hints.append(f"{'or ' if hints else ''}try --global-batch {result.batch_suggestion}, the nearest round batch "
                     "that some layout's DP x micro-batch divides")
    return PlannerError(flag, f"no valid layout of {where}: {detail}" + "".join(f"; {h}" for h in hints))

