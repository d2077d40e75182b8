"""Communication of one rank placement: pipeline sends and the data-parallel collectives with their overlap
windows (formulas.md §4-§6), composed per layout for cost.step.

The search hands over its candidates in blocks of one TP x CP x PP x DP layout (and hybrid-sharding degree), and
the data-parallel collectives depend on those degrees alone, so they are priced once per layout (layout_runs:
runs of equal degrees, or equal degrees found by sorting where rows of layouts interleave) and spread over its
rows: the same numbers, element by element, as pricing every row.
"""

from __future__ import annotations

import numpy as np

from planner.cost import comm
from planner.cost.layer import exposed, in_sequence, world
from planner.cost.pipeline import interleave_group_size, last_group_size
from planner.specs.strategy import shard_group

_LAYOUT_KEYS = ("tp", "cp", "pp", "dp", "dp_replicate")


def layout_runs(c: dict):
    """(the layouts' degree columns, a row of each layout, each row's layout): what placed_comm prices once per
    layout. Rows of one layout usually come in runs (the search's blocks); where they do not (hybrid-sharding
    variants, drawn from every block), equal degrees are found by sorting one mixed-radix key. Scalar columns (one
    layout) come back as given, with (None, None)."""
    cols = np.broadcast_arrays(*(np.asarray(c.get(k, 1)) for k in _LAYOUT_KEYS))
    if cols[0].ndim != 1 or len(cols[0]) < 2:
        return {k: c.get(k, 1) for k in _LAYOUT_KEYS}, None, None
    change = np.zeros(len(cols[0]), dtype=bool)
    change[0] = True
    for col in cols:
        change[1:] |= col[1:] != col[:-1]
    first = np.flatnonzero(change)
    radix = [int(col.max()) + 1 for col in cols]         # degrees are whole and at least 1
    if 4 * len(first) > len(change) and np.prod(radix, dtype=float) < 2**62:
        key = np.zeros(len(change), dtype=np.int64)
        for col, r in zip(cols, radix):
            key = key * r + col.astype(np.int64)
        _, first, row_layout = np.unique(key, return_index=True, return_inverse=True)
        order = np.argsort(first)                      # the layouts in the order they first appear, as runs are
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, row_layout = first[order], rank[row_layout.reshape(-1)]
        return {k: col[first] for k, col in zip(_LAYOUT_KEYS, cols)}, first, row_layout
    return {k: col[first] for k, col in zip(_LAYOUT_KEYS, cols)}, first, np.cumsum(change) - 1


def _pick(x, first):
    """The layouts' values of a per-row column (a scalar, or one value for every row, stays as it is)."""
    return x if first is None or np.size(x) == 1 else np.asarray(x)[first]


def _spread(x, runs):
    """Per-layout values back on every row."""
    return x if runs is None or np.ndim(x) == 0 else np.asarray(x)[runs]


def pp_send_parts(m, hw, job, c, rt, precision):
    """(bytes each TP rank sends across a stage boundary, seconds of the receiver's TP all-gather) per micro-batch.

    A stage's output is s/cp·b·h per micro-batch: each TP rank sends 1/t of it with SP (its sequence shard) or
    Megatron-LM's scatter/gather, else the whole of it (Megatron-Core schedules.get_tensor_shapes). Scatter/gather
    without SP rebuilds the whole tensor on the receiver with an all-gather over the TP group before it can be used
    (Narayanan §4.1; Megatron-LM p2p_communication._communicate; DeepSpeed PartitionedTensor.full()), in both
    directions. Neither depends on the rank placement: the TP group is innermost in both orders.
    """
    t = c["tp"]
    sp = np.asarray(c["sp"], dtype=bool)
    split = np.where(sp | rt.pp_scatter_gather, t, 1)
    stage_out_bytes = precision.activation_bytes * job.seq_len / c["cp"] * c["micro_batch"] * m.hidden
    regather = 0.0
    if rt.pp_scatter_gather:                    # off by default: the search's usual path skips the all-gather
        regather = np.where(~sp & (t > 1), comm.all_gather_time_s(
            stage_out_bytes, t, 1, hw, span=comm.span(t, 1, hw, world=world(c))), 0.0)
    return stage_out_bytes / split, regather


def placed_comm(hw, c, rt, precision, num_mb, params_stage, layers, stage_fwd, stage_bwd, stage_mb, send,
                dp_inner):
    """(PP comm, exposed DP comm) in seconds per step for one rank placement; `send` is `pp_send_parts(...)`.
    Where the rows share a layout (the search's blocks), its collectives are priced once for the block."""
    t, cp, p, d, v, z = (c[k] for k in ("tp", "cp", "pp", "dp", "vpp", "zero"))
    one, first, runs = layout_runs(c)

    # PP: each micro-batch crosses every boundary forward (activation) and backward (gradient), v times when
    # interleaved; where the boundary crosses nodes depends on the placement.
    send_bytes, regather = send
    cross = _spread(comm.pp_crosses_nodes(one["tp"], one["pp"], one["dp"], dp_inner, hw.gpus_per_node,
                                          one["cp"]), runs)
    p2p = comm.p2p_time_s(send_bytes, cross, hw) + regather
    pp_comm = np.where(p > 1, 2 * p2p * (num_mb * v + p - 1), 0.0)

    per_layout = layout_collectives(hw, one, rt, precision, _pick(params_stage, first), _pick(layers, first),
                                    dp_inner)
    buckets, units, ag, u_ag, ar, u_ar, rs_rep, u_rs_rep, ar_all, u_all, zero3_comm, u3, zero3_edge = (
        _spread(x, runs) for x in per_layout)
    # Overlap windows. Without interleaving, gradient buckets are reduced during the last micro-batch's backward and
    # parameter buckets gathered during the first one's forward: the window is one pass, the last (first) bucket
    # stays exposed. Interleaved (v chunks), Megatron-Core syncs a chunk's gradients in one go after the chunk's last
    # backward and gathers a chunk's parameters as the previous chunk's first forward starts (schedules.py,
    # grad_sync_func / param_sync_func). The chunks take turns in groups of micro-batches (p by default; N and a last
    # group of m mod N with a micro-batch count p does not divide: pipeline.interleave_group_size), so the other
    # chunks' gradient syncs hide behind (v − 1) times the last group's chunk passes and their parameter gathers
    # behind (v − 1) times the first group's, while the chunk that finishes last (first) has nothing to hide behind:
    # its 1/v share stays exposed (Calculon's interleaved window, formulas.md §6).
    interleaved = v > 1
    first_group = interleave_group_size(p, num_mb, v)
    last_group = last_group_size(p, num_mb, v, first_group)
    edge = np.where(interleaved, v, buckets)
    hide_grads = np.where(rt.overlap_grad_reduce, stage_bwd * np.where(interleaved, (v - 1) * last_group / v, 1.0),
                          0.0)
    hide_params = np.where(rt.overlap_param_gather,
                           stage_fwd * np.where(interleaved, (v - 1) * first_group / v, 1.0), 0.0)
    # A collective across nodes moves part of its bytes on NVLink, which slow overlapped compute like any in-node
    # collective's, and the rest on the network: each link's bytes bring their own slowdown (no scaling past 100%).
    gather = np.maximum(exposed(ag, hide_params, u_ag), ag / edge)
    plain = np.maximum(exposed(ar, hide_grads, u_ar), ar / edge)      # DDP: all-reduce after the last backward
    reduce = np.maximum(exposed(rs_rep, hide_grads, u_rs_rep), rs_rep / edge)
    if rt.zero1_all_reduce:   # BF16_Optimizer: the whole gradients all-reduced over every DP x CP rank, then AG
        reduce1 = np.maximum(exposed(ar_all, hide_grads, u_all), ar_all / edge)
    else:                     # distributed optimizer: reduce-scatter the gradients (HSDP: then across the groups)
        reduce1 = reduce
    zero1 = reduce1 + gather                                        # ... and all-gather the updated parameters
    # ZeRO-2 keeps only a gradient shard, so gradients are reduce-scattered after every micro-batch's backward
    # (DeepSpeed stage 2), behind the next micro-batch's forward and backward; ZeRO-3 also gathers parameters for
    # every forward and backward (ZeRO §7; FSDP), each prefetched behind that micro-batch's compute except the first
    # gather and the last reduce-scatter. Under HSDP each reduce-scatter is followed by the all-reduce of the shard
    # across the groups, every micro-batch (FSDP2's default, which torchtitan keeps: no set_requires_all_reduce).
    reduce_each = np.maximum(exposed(rs_rep, stage_mb, u_rs_rep), rs_rep / buckets)
    zero2 = (num_mb - 1) * reduce_each + reduce + gather
    zero3 = num_mb * np.where(rt.overlap_param_gather,
                              np.maximum(exposed(zero3_comm, stage_mb, u3), zero3_edge), zero3_comm)
    by_stage = np.where(z >= 3, zero3, np.where(z == 2, zero2, np.where(z == 1, zero1, plain)))
    dp_comm = np.where(d * cp > 1, by_stage, 0.0)
    return pp_comm, dp_comm


def layout_collectives(hw, c, rt, precision, params_stage, layers, dp_inner):
    """The data-parallel collectives of one rank placement, which depend on the layout's degrees alone: bucket and
    gather-unit counts, each collective's time and overlap slowdown (comm.overlapped_collective), for placed_comm."""
    t, cp, p, d = (c[k] for k in ("tp", "cp", "pp", "dp"))
    dp_stride = comm.placement_strides(t, p, d, dp_inner, cp)[0]
    grad_bytes = params_stage * precision.grad_bytes
    param_bytes = params_stage * precision.param_bytes
    # Gradients travel in buckets: by default Megatron-Core's max(40M, 1M x DP·CP) elements when the reduction
    # overlaps the backward, one call when it does not (DistributedDataParallel sets bucket_size None then).
    # ZeRO-3 gathers one layer (FSDP block) or one weight matrix (DeepSpeed) per call.
    megatron = np.where(rt.overlap_grad_reduce, np.maximum(40e6, 1e6 * d * cp) * precision.grad_bytes, np.inf)
    bucket_bytes = megatron if rt.dp_bucket_bytes is None else rt.dp_bucket_bytes
    buckets = np.maximum(np.ceil(grad_bytes / bucket_bytes), 1)
    # Gradients are reduced (and ZeRO shards kept) over the DP x CP ranks, which hold the same weights (Megatron's
    # data-parallel group with context parallelism): CP ranks sit next to each other, DP ranks dp_stride apart.
    # Hybrid sharding (HSDP, r = dp_replicate > 1) runs the ZeRO collectives inside a shard group of the inner d/r
    # DP ranks (x CP) and then all-reduces each rank's reduced gradient shard across the r groups, on the same
    # stream (Megatron-Core param_and_grad_buffer: reduce-scatter in the distributed-optimizer instance, all-reduce
    # across instances; FSDP2 HSDP: reduce-scatter over dp_shard, all-reduce over dp_replicate).
    r = c.get("dp_replicate", 1)
    replicas = shard_group(d, cp, r)
    shard_d = replicas // cp                          # its DP ranks
    group = comm.nested_span(cp, t, shard_d, dp_stride, hw, rt.hierarchical_collectives, world(c))
    rep_stride = dp_stride * shard_d
    rep_group = comm.span(r, rep_stride, hw, rt.hierarchical_collectives, world(c))
    # Each collective with the share of its time that still slows overlapped compute (comm.overlap_slowdown).
    rs, u_rs = comm.overlapped_collective(grad_bytes, replicas, dp_stride, hw, buckets, 1, group)
    ag, u_ag = comm.overlapped_collective(param_bytes, replicas, dp_stride, hw, buckets, 1, group)
    ar, u_ar = comm.overlapped_collective(grad_bytes, replicas, dp_stride, hw, buckets, 2, group)  # ZeRO-0: r = 1
    rep, u_rep = comm.overlapped_collective(grad_bytes / replicas, r, rep_stride, hw, buckets, 2, rep_group)
    units = np.maximum(layers, 1) * (4 if rt.zero3_gather_unit == "matrix" else 1)   # QKV, out, MLP in, MLP out
    ag3, u_ag3 = comm.overlapped_collective(param_bytes, replicas, dp_stride, hw, units, 1, group)
    rs3, u_rs3 = comm.overlapped_collective(grad_bytes, replicas, dp_stride, hw, units, 1, group)
    rep3, u_rep3 = comm.overlapped_collective(grad_bytes / replicas, r, rep_stride, hw, units, 2, rep_group)
    rs_rep, u_rs_rep = in_sequence((rs, u_rs), (rep, u_rep))        # a gradient reduction of ZeRO-1 and -2
    ar_all = u_all = 0.0
    if rt.zero1_all_reduce:   # BF16_Optimizer: the whole gradients all-reduced over every DP x CP rank, then AG
        whole = comm.nested_span(cp, t, d, dp_stride, hw, rt.hierarchical_collectives, world(c))
        ar_all, u_all = comm.overlapped_collective(grad_bytes, d * cp, dp_stride, hw, buckets, 2, whole)
    # ZeRO-3: one window for all three, their slowdowns weighted by their time (exact while the window holds them)
    zero3_comm, u3 = in_sequence((2 * ag3, u_ag3), (rs3, u_rs3), (rep3, u_rep3))
    zero3_edge = (ag3 + rs3 + rep3) / units
    return buckets, units, ag, u_ag, ar, u_ar, rs_rep, u_rs_rep, ar_all, u_all, zero3_comm, u3, zero3_edge
