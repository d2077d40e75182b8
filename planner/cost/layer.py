"""One transformer layer per micro-batch on one rank: kernel time forward and backward, and the TP and CP
communication left exposed (formulas.md §5), plus the overlap arithmetic the step composition shares.
`planner.cost.step` composes these into a step; the per-layer functions are also what Korthikanti et al. 2022
Table 4 checks (validate.predict_layer_ms)."""

from __future__ import annotations

import numpy as np

from planner.checks import checked_flag
from planner.cost import comm, compute
from planner.cost.params import kv_dim_per_rank
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.strategy import DEFAULT_FLASH_GENERATION, Job, Runtime, recompute_codes


def world(c: dict):
    """The job's ranks, t·cp·p·d, where the columns hold them all (to place groups on ragged nodes); else None."""
    if not all(k in c for k in ("tp", "pp", "dp")):
        return None
    return np.asarray(c["tp"]) * np.asarray(c.get("cp", 1)) * np.asarray(c["pp"]) * np.asarray(c["dp"])


def exposed(comm_s, window_s, slowdown):
    """Communication left on the critical path when it overlaps `window_s` of compute: the part that does not fit in
    the window, plus a share `slowdown` of the overlapped part, since collectives take SMs and HBM bandwidth from
    the concurrent kernels (Calculon's processor_usage, Isaev et al. SC'23)."""
    hidden = np.minimum(comm_s, window_s)
    return comm_s - hidden * (1.0 - slowdown)


def in_sequence(*collectives):
    """(time, overlap slowdown) of collectives run one after another on one stream, each given as (time, slowdown):
    the times add, the slowdowns are weighted by time."""
    total = sum(t for t, _ in collectives)
    return total, sum(t * u for t, u in collectives) / np.maximum(total, 1e-300)


def attention_times(m: ModelSpec, hw: HardwareSpec, job: Job, c: dict, rt: Runtime, e: int = 2):
    """(forward, backward) time of one layer's attention core per micro-batch on one rank (with CP, its 1/cp)."""
    rt = rt.for_hardware(hw)                            # FlashAttention unless the hardware has no fused kernels
    s, b, t, cp = job.seq_len, c["micro_batch"], c["tp"], np.asarray(c.get("cp", 1))
    gen = rt.flash_attention_gen or DEFAULT_FLASH_GENERATION     # None only with unfused attention (unused)
    return (compute.attention_core_time_s(m, s, b, t, rt.flash_attention, hw, e, cp=cp, flash_gen=gen),
            compute.attention_core_time_s(m, s, b, t, rt.flash_attention, hw, e, backward=True, cp=cp, flash_gen=gen))


def layer_times(m: ModelSpec, hw: HardwareSpec, job: Job, c: dict, rt: Runtime, e: int = 2, attention=None):
    """Per layer per micro-batch: (forward, backward incl. recompute) kernel time and (forward, backward) exposed TP
    communication, in seconds. `c` needs the columns tp, micro_batch, sp, recompute (and cp, default 1);
    `attention` is `attention_times(...)` when the caller has it already.

    Context parallelism gives each rank s/cp tokens: every token-wise kernel and the TP collectives shrink by cp,
    attention by cp too (compute.attention_core_time_s); its own K/V exchange is `cp_layer_times`."""
    rt = rt.for_hardware(hw)
    s, b, t, rc = job.seq_len, c["micro_batch"], c["tp"], recompute_codes(c["recompute"])
    sp = checked_flag(c["sp"], "sp")            # a string "False" would read as true
    cp = np.asarray(c.get("cp", 1))
    s_rank = s / cp
    gemm = compute.layer_gemm_time_s(m, s_rank, b, t, hw, e)
    attn, attn_bwd = attention if attention is not None else attention_times(m, hw, job, c, rt, e)
    eager = rt.eager_elementwise
    elem = compute.elementwise_time_s(compute.layer_elementwise_bytes(m, s_rank, b, t, sp, e, eager), hw)
    ring_steps = cp if rt.cp_comm_overlap else 1        # the all-gather variant runs one attention kernel
    launch = compute.layer_kernel_count(m, rt.flash_attention, ring_steps, eager) * hw.kernel_overhead_s
    fwd = gemm + attn + elem + launch
    # Backward: dgrad + wgrad GEMMs, the attention backward, element-wise gradients that read the saved input and
    # the incoming gradient and write one (3 tensors where the forward moves 2: 1.5x traffic), about twice the kernels.
    bwd = 2 * gemm + attn_bwd + 1.5 * elem + 2 * launch
    f = np.asarray(c.get("rc_frac", 1.0))              # full recompute of this share of the layers
    op = compute.op_recompute_time_s(m, s_rank, b, t, hw, e, elem, eager) if np.any(rc == 3) else 0.0  # pinned only
    recompute = np.where(rc == 2, f * fwd, np.where(rc == 1, attn, np.where(rc == 3, op, 0.0)))

    # TP, per layer (Megatron 2019; Korthikanti §4.2): forward two all-reduces of the b·s·h activation, or with SP
    # two all-gathers + two reduce-scatters (same volume); backward the same, and with SP two more all-gathers to
    # rebuild the column-parallel layers' inputs for their weight gradients. Full recompute repeats the forward
    # collectives; torchtitan's per-op policy saves the reduce-scatter outputs but not the all-gathers: half of them.
    # A parallel residual (GPT-NeoX's gpt_j_residual) sums the attention and MLP outputs before one reduction:
    # forward one all-reduce, or with SP the two branches' all-gathers and one reduce-scatter, and in backward one
    # all-gather of that output's gradient; each column-parallel layer still reduces its own input gradient.
    act_bytes = e * s_rank * b * m.hidden
    tp_group = comm.span(t, 1, hw, world=world(c))
    ar_pair = comm.all_reduce_time_s(2 * act_bytes, t, 1, hw, count=2, span=tp_group)
    ag_pair = comm.all_gather_time_s(2 * act_bytes, t, 1, hw, count=2, span=tp_group)
    ar_out, ag_out = ((comm.all_reduce_time_s(act_bytes, t, 1, hw, span=tp_group),
                       comm.all_gather_time_s(act_bytes, t, 1, hw, span=tp_group)) if m.parallel_residual
                      else (ar_pair, ag_pair))          # the output reductions: one per layer, or one per branch
    sp = np.asarray(sp, dtype=bool)
    tp_f = np.where(sp, ag_pair + ag_out, ar_out)       # AG + RS cost the same
    # Backward, by the layer each collective serves. The column-parallel layers (QKV, MLP-in) all-reduce their
    # input gradient, or with SP reduce-scatter it and first all-gather their input again: Megatron's async
    # backward (LinearWithGradAccumulationAndAsyncCommunication) overlaps the all-gather with the data-gradient
    # GEMM and the reduction with the weight-gradient GEMM of that layer (Korthikanti §4.2.2), so their window is
    # those two GEMMs of the column-parallel layers (one of them without SP). With SP the row-parallel layers'
    # output gradient is all-gathered before their data-gradient GEMM can start (the backward of the forward's
    # reduce-scatter, _ReduceScatterToSequenceParallelRegion: a plain synchronous all-gather): exposed.
    # --tp-comm-overlap (TE userbuffers) hides every backward collective behind the backward GEMMs.
    hide = rt.tp_comm_overlap & sp                     # Megatron's TP overlap requires sequence parallelism
    column = compute.column_parallel_gemm_time_s(m, s_rank, b, t, hw, e)
    tp_b_async = np.where(sp, 2 * ag_pair, ar_pair)
    tp_b_sync = np.where(sp, ag_out, 0.0)
    async_window = np.where(rt.tp_bwd_overlap, column * (1 + sp), 0.0)
    u = np.where(sp, comm.overlap_slowdown(tp_group, hw, 2 * act_bytes, count=2),      # NVLink unless
                 comm.overlap_slowdown(tp_group, hw, 2 * act_bytes, count=2, rounds=2))  # --allow-cross-node-tp
    tp_fwd = np.where(hide, exposed(tp_f, gemm, u), tp_f)
    tp_b = np.where(hide, exposed(tp_b_async + tp_b_sync, 2 * gemm, u),
                    tp_b_sync + exposed(tp_b_async, async_window, u))
    tp_bwd = tp_b + np.where(rc == 2, f * tp_fwd, np.where(rc == 3, 0.5 * tp_fwd, 0.0))
    return fwd, bwd + recompute, tp_fwd, tp_bwd


def cp_layer_times(m: ModelSpec, hw: HardwareSpec, job: Job, c: dict, rt: Runtime, e: int = 2, attention=None):
    """Exposed context-parallel communication per layer per micro-batch, (forward, backward incl. recompute), s.

    Megatron-Core CP (docs, context_parallel.rst): attention needs the K and V of the whole sequence, so the forward
    all-gathers them over the cp ranks and the backward gathers them again and reduce-scatters their gradients,
    each moving the b·s·kv_dim/t K and V of this rank's heads (GQA keeps it small). Megatron-Core runs them as a
    ring of point-to-point steps (comm.ring_exchange_time_s) overlapped with the attention kernels (Ring Attention),
    so only what exceeds the attention time (and the overlap slowdown) is exposed. Llama 3 all-gathers K and V with
    a collective before attention (§3.3.2: on the critical path, small with GQA): Runtime.cp_comm_overlap = False.
    Recomputing attention (selective or full) repeats the forward exchange; the per-op policy saves attention's output.
    """
    s, b, t, rc = job.seq_len, c["micro_batch"], c["tp"], recompute_codes(c["recompute"])
    cp = np.asarray(c.get("cp", 1))
    kv_bytes = 2.0 * e * b * s * kv_dim_per_rank(m, t)
    group = comm.span(cp, t, hw, world=world(c))
    hide = rt.cp_comm_overlap
    exchange = (comm.ring_exchange_time_s(kv_bytes, cp, t, hw, world(c)) if hide
                else comm.all_gather_time_s(kv_bytes, cp, t, hw, span=group))
    attn, attn_bwd = attention if attention is not None else attention_times(m, hw, job, c, rt, e)
    u = comm.overlap_slowdown(group, hw, kv_bytes, ring=hide, size=cp)
    cp_fwd = exposed(exchange, attn, u) if hide else exchange
    f = np.where(rc == 2, np.asarray(c.get("rc_frac", 1.0)), 1.0)
    again = (rc == 1) | (rc == 2)                      # attention recomputed: the exchange repeats
    cp_bwd = (exposed(2 * exchange, attn_bwd, u) if hide else 2 * exchange) + np.where(again, f * cp_fwd, 0.0)
    return np.where(cp > 1, cp_fwd, 0.0), np.where(cp > 1, cp_bwd, 0.0)
