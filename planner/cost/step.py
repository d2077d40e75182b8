"""Step time, throughput and utilisation of a layout: the cost functions composed (formulas.md §5, §6).

    step = compute + exposed TP comm + exposed CP comm + PP comm + exposed DP comm + bubble + optimizer

compute and TP comm are m micro-batches through the slowest pipeline stage; the bubble is (p − 1)/v of one
micro-batch's forward + backward on that stage (Narayanan et al. 2021 §2.2); DP communication overlaps the
backward of the last micro-batch (gradients) and the forward of the first (parameter all-gather), as Megatron's
--overlap-grad-reduce / --overlap-param-gather and PyTorch DDP/FSDP buckets do, and only the rest is exposed
(Calculon's overlap window, Isaev et al. SC'23); with v interleaved chunks Megatron-Core syncs chunk by chunk,
so all but the last chunk's 1/v share hide behind (v − 1)·p/v micro-batch passes. ZeRO-3 gathers parameters for
every micro-batch (ZeRO §7): two all-gathers of the 16-bit parameters and one reduce-scatter of the gradients per
micro-batch, the gradients in `Precision.grad_bytes` (4 by default: Megatron's fp32 main grads, FSDP's fp32
reduce_dtype): each micro-batch moves as many bytes as plain DP's one all-reduce per step (1.5 x in the ZeRO
paper's all-16-bit accounting, grad_bytes=2). Without gradient-accumulation fusion each micro-batch's stage time also
adds its weight gradient to the accumulation buffer, a memory-bound pass (grad_accumulation_bytes_per_param).

`step_columns` takes one numpy column per knob and returns one column per result: the search calls it on every
candidate at once and `evaluate` on a single layout, so they cannot disagree.
"""

from __future__ import annotations

import difflib

import numpy as np

from planner.checks import integral
from planner.cost import compute, flops, memory
from planner.cost.layer import attention_times, cp_layer_times, layer_times
from planner.cost.pipeline import (block_recompute_share, bubble_ratio, layers_per_stage, model_recompute_share,
                                   stage_layers)
from planner.cost.placement import placed_comm, pp_send_parts
from planner.errors import PlannerError
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.strategy import (KNOB_COLUMNS, Job, Precision, Runtime, pp_next_launchable, recompute_codes,
                                     shard_group)

TIME_PARTS = ("compute", "tp_comm", "cp_comm", "pp_comm", "dp_comm", "bubble", "optimizer")
KNOBS = tuple(KNOB_COLUMNS.values())      # one candidate column per layout knob


def knob_columns(cols: dict) -> dict:
    """The candidate columns as arrays; rc_layers (0: full recompute covers every layer) and dp_replicate (1: ZeRO
    shards over all DP x CP ranks) may be left out.
    Recompute may be given as names or codes (read as codes); the other knobs must be integers (sp: booleans or
    0/1), so that a string or a fraction is an error here, not a silently different layout."""
    given = {KNOB_COLUMNS[k]: k for k in cols if k in KNOB_COLUMNS and KNOB_COLUMNS[k] != k}   # a table's names
    twice = [k for k in given if k in cols]
    if twice:
        raise PlannerError(given[twice[0]], f"given both as {given[twice[0]]} and as {twice[0]}; expected one column")
    cols = {**cols, **{short: cols[name] for short, name in given.items()}}
    optional = {"rc_layers": 0, "dp_replicate": 1}
    # Other columns are let through (a whole result table may be given), but a near-miss of an optional knob's name
    # would price its default silently
    names = [*optional, "recompute_layers"]
    for k in cols:
        near = difflib.get_close_matches(str(k), names, n=1, cutoff=0.8) if k not in KNOB_COLUMNS else []
        if near and k not in names:
            raise PlannerError(str(k), f"not a knob column; did you mean {near[0]}?")
    missing = [k for k in KNOBS if k not in cols and k not in optional]
    if missing:
        raise PlannerError("cols", f"missing {', '.join(missing)}; expected a column per knob: "
                                   f"{', '.join(KNOBS)} (or {', '.join(KNOB_COLUMNS)})")
    c = {k: _unboxed(np.asarray(cols[k] if k in cols else optional[k])) for k in KNOBS}
    c["recompute"] = recompute_codes(c["recompute"])
    try:
        np.broadcast_shapes(*(col.shape for col in c.values()))
    except ValueError:
        lengths = sorted({col.shape for col in c.values() if col.ndim}, key=str)
        raise PlannerError("cols", f"columns of shapes {' and '.join(map(str, lengths))}; expected columns of one "
                                   "length (or single values)") from None
    for k, col in c.items():
        col = integral(col)
        whole = col.dtype.kind in "iu" or (col.dtype.kind == "b" and k == "sp")
        least = 0 if k in ("sp", "zero", "recompute", "rc_layers") else 1      # degrees and sizes are at least 1
        if not whole or np.any(col < least) or (k == "sp" and np.any(col > 1)) or (k == "zero" and np.any(col > 3)):
            expected = ("booleans" if k == "sp" else "ZeRO stages 0-3" if k == "zero"
                        else f"integers >= {least}")
            raise PlannerError(given.get(k, k), f"got {_shown_column(cols.get(k, col))}, expected {expected}")
        # int64 (sp: bool) from here on: products of int16/uint8 columns would wrap around
        c[k] = col.astype(bool) if k == "sp" else col.astype(np.int64, copy=False)
    return c


def _shown_column(value) -> str:
    """A column for an error message: its values as a list (at most 5), not numpy's repr."""
    if isinstance(value, (np.ndarray, list, tuple)) or hasattr(value, "tolist"):
        values = np.asarray(value).ravel().tolist()
        return repr(values[:5])[:-1] + (", ...]" if len(values) > 5 else "]")
    return repr(value)


def _unboxed(col: np.ndarray) -> np.ndarray:
    """An object column of plain numbers (a pandas column that once held None or text, such as a sweep's) as the
    numeric array it holds; anything else unchanged, for the checks to judge."""
    if col.dtype != object or not col.size:
        return col
    values = np.array(col.tolist())
    return values if values.dtype.kind in "iub" else col


def optimizer_traffic_bytes_per_param(precision: Precision) -> float:
    """HBM traffic of one mixed-precision Adam step per optimised parameter (memory-bound, formulas.md §6):
    16-bit gradients are first copied to fp32 main grads (read g, write 4); the global grad-norm reads them (4);
    Adam reads master, grad, m, v and writes master, m, v (28); the 16-bit weights are refreshed from the fp32
    master (read 4, write param bytes)."""
    to_fp32 = precision.grad_bytes + 4 if precision.grad_bytes < 4 else 0
    return to_fp32 + 4 + 28 + 4 + precision.param_bytes


def grad_accumulation_bytes_per_param(precision: Precision) -> float:
    """HBM traffic of accumulating one micro-batch's weight gradient without gradient-accumulation fusion: the
    16-bit gradient the wgrad GEMM wrote is read (param_bytes) and the accumulation buffer read and written (2 x
    grad_bytes): Megatron-LM 2021's main_grad.add_(grad) hook (distributed.py), 2 + 4 + 4 = 10 bytes for fp32 main
    grads; autograd's in-place .grad accumulation in 16-bit, 6."""
    return precision.param_bytes + 2 * precision.grad_bytes


def num_microbatches(job: Job, micro_batch, dp):
    """m = B/(b·d) micro-batches per pipeline per step (at least 1; divisibility is a validity rule)."""
    return np.maximum(job.global_batch // np.maximum(np.asarray(micro_batch) * np.asarray(dp), 1), 1)


def recompute_fraction(m: ModelSpec, c: dict):
    """Share of a stage's layers that full recompute recomputes: k of the layers of each pipeline chunk (Megatron's
    block method, --recompute-num-layers k), all of them for k = 0."""
    return block_recompute_share(stage_layers(m.layers, c["pp"])[1], c["rc_layers"], c["vpp"])


def memory_columns(m: ModelSpec, hw: HardwareSpec, job: Job, cols: dict, precision: Precision = Precision(),
                   runtime: Runtime = Runtime()):
    """Memory parts (bytes) of the most loaded stage and its index, for layouts given as columns (KNOBS)."""
    c, runtime = knob_columns(cols), runtime.for_hardware(hw)
    return memory.memory_breakdown(
        m, job.seq_len, c["tp"], c["pp"], c["dp"], c["micro_batch"], num_microbatches(job, c["micro_batch"], c["dp"]),
        c["vpp"], c["sp"], c["recompute"], c["zero"], precision, runtime.flash_attention, hw.framework_overhead_bytes,
        runtime.zero3_gather_unit, c["cp"], c["rc_layers"], c["dp_replicate"], runtime.fused_cross_entropy)


def step_columns(m: ModelSpec, hw: HardwareSpec, job: Job, cols: dict, precision: Precision = Precision(),
                 runtime: Runtime = Runtime(), known_memory: tuple | None = None) -> dict:
    """Evaluate layouts given as columns (KNOBS, or the result tables' names: sequence_parallel, zero_stage,
    recompute_layers); returns columns of memory parts (bytes), time parts (s) and throughput. Each row's GPU count
    is t·cp·p·d, placed as the hardware places a job of that size (HardwareSpec.for_job: GB200 segments), as the
    search does. Validity is not checked here (see planner.constraints.rules). `known_memory`: memory_columns(...) of
    these rows when the caller has it already (it does not depend on the placement)."""
    c = knob_columns(cols)
    world = c["tp"] * c["cp"] * c["pp"] * c["dp"]
    # Rows are grouped by how their GPU count is placed (at most two ways on GB200: 72- or 64-GPU nodes); the
    # collectives take each row's own count (group spans use t·cp·p·d).
    sizes, inverse = np.unique(world, return_inverse=True)
    specs = [hw.for_job(int(n)) for n in sizes]
    placed = {spec.gpus_per_node: spec for spec in specs}
    shape = np.broadcast_shapes(*(v.shape for v in c.values()))     # every output has the rows' shape
    if len(placed) <= 1:                        # one placement (or no rows: empty columns)
        out = _step_columns(m, specs[0] if specs else hw, job, c, precision, runtime, known_memory)
        return {k: v if np.shape(v) == shape else np.broadcast_to(v, shape).copy() for k, v in out.items()}
    c = {k: np.broadcast_to(v, shape) for k, v in c.items()}
    nodes = np.broadcast_to(np.array([spec.gpus_per_node for spec in specs])[inverse.reshape(world.shape)], shape)
    parts = {g: (nodes == g, _step_columns(m, spec, job, {k: v[nodes == g] for k, v in c.items()}, precision,
                                           runtime, _rows(known_memory, nodes == g))) for g, spec in placed.items()}
    out = {}
    for key in next(iter(parts.values()))[1]:
        out[key] = np.empty(shape, dtype=np.asarray(next(iter(parts.values()))[1][key]).dtype)
        for mask, res in parts.values():
            out[key][mask] = np.broadcast_to(res[key], (int(mask.sum()),))
    return out


def _rows(known_memory: tuple | None, mask):
    """The rows `mask` selects of memory_columns' (parts, stage), or None."""
    if known_memory is None:
        return None
    parts, stage = known_memory
    return ({k: np.broadcast_to(v, mask.shape)[mask] for k, v in parts.items()},
            np.broadcast_to(stage, mask.shape)[mask])


def _step_columns(m: ModelSpec, hw: HardwareSpec, job: Job, c: dict, precision: Precision, runtime: Runtime,
                  known_memory: tuple | None = None) -> dict:
    """step_columns for layouts of one placement (`hw` as a job of their size sees it)."""
    runtime = runtime.for_hardware(hw)
    c = dict(c)
    t, cp, p, d, b, v, rc, z = (c[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "recompute", "zero"))
    e = precision.activation_bytes
    num_mb = num_microbatches(job, b, d)

    mem, stage = known_memory if known_memory is not None else memory_columns(m, hw, job, c, precision, runtime)
    c["rc_frac"] = recompute_fraction(m, c)

    # Per micro-batch time of each stage; the slowest stage paces the pipeline.
    attention = attention_times(m, hw, job, c, runtime, e)        # shared by the kernels and the CP overlap window
    fwd, bwd, tp_fwd, tp_bwd = layer_times(m, hw, job, c, runtime, e, attention)
    cp_fwd, cp_bwd = cp_layer_times(m, hw, job, c, runtime, e, attention)
    # The last stage adds the logits to its layers; the first has no more layers than a middle one (the embedding
    # lookup is cheap), so the middle entry (the first stage's when p = 2) stands for both.
    _, middle, last = layers_per_stage(m.layers, p)
    layers_max = stage_layers(m.layers, p)[1]
    logits = compute.logits_time_s(m, job.seq_len / cp, b, t, hw, e)
    # The last stage of an uneven split may recompute a larger share of its layers (block_recompute_share).
    partial = np.any(np.asarray(c["rc_layers"]) > 0)          # else every share is 1: skip the arithmetic
    edge_share = block_recompute_share(last, c["rc_layers"], v) if partial else 1.0
    # (a recomputed forward repeats its TP collectives and its CP K/V exchange, as cp_layer_times prices the share)
    edge_rc = np.where(rc == 2, (edge_share - c["rc_frac"]) * last * (fwd + tp_fwd + cp_fwd), 0.0)
    # Without gradient-accumulation fusion each micro-batch's backward ends with an add of its weight gradient into
    # the accumulation buffer, a memory-bound pass over the stage's gradients (the shard of them where ZeRO shards
    # the gradients, as memory.state_bytes_per_param does); the first stage's embedding counts with the middle ones.
    hbm_bytes_per_s = hw.hbm_efficiency * hw.hbm_bw_bytes_per_s
    first_params, mid_params, last_params = memory.stage_params(m, t, p)
    if runtime.grad_accumulation_fusion:
        edge_add = mid_add = 0.0
    else:
        shard = memory.state_bytes_per_param(z, shard_group(d, cp, c["dp_replicate"]), precision)[1]
        per_param_s = grad_accumulation_bytes_per_param(precision) * shard / precision.grad_bytes / hbm_bytes_per_s
        edge_add, mid_add = last_params * per_param_s, np.maximum(first_params, mid_params) * per_param_s
    # The pacing stage is the one whose compute plus TP and CP communication is longest; its parts are reported.
    edge_comp = last * (fwd + bwd) + edge_rc + logits + edge_add
    mid_comp = middle * (fwd + bwd) + mid_add
    layer_comm = tp_fwd + tp_bwd + cp_fwd + cp_bwd
    edge_paces = edge_comp + last * layer_comm > mid_comp + middle * layer_comm
    pacing_layers = np.where(edge_paces, last, middle)
    stage_comp = np.where(edge_paces, edge_comp, mid_comp)
    stage_add = np.where(edge_paces, edge_add, mid_add)
    stage_tp = pacing_layers * (tp_fwd + tp_bwd)
    stage_cp = pacing_layers * (cp_fwd + cp_bwd)
    stage_fwd = layers_max * (fwd + tp_fwd + cp_fwd)
    stage_bwd = layers_max * (bwd + tp_bwd + cp_bwd)

    # Placement: TP innermost, then either DP (Megatron's default order) or PP: the runtime's order when the
    # framework fixes it, else the cheaper per layout.
    params_stage = np.maximum.reduce((first_params, mid_params, last_params))
    send = pp_send_parts(m, hw, job, c, runtime, precision)        # the same for either placement
    results = [placed_comm(hw, c, runtime, precision, num_mb, params_stage, layers_max, stage_fwd, stage_bwd,
                           stage_comp + stage_tp + stage_cp, send, dp_inner) for dp_inner in (True, False)]
    pick_dp_inner = results[0][0] + results[0][1] <= results[1][0] + results[1][1]
    if runtime.rank_order is None:      # PP next to TP only where a framework can launch it
        pick_dp_inner = pick_dp_inner | ~pp_next_launchable(cp, p, z)
    else:
        pick_dp_inner = np.full(np.shape(pick_dp_inner), runtime.rank_order == "dp-pp")
    pick_dp_inner = pick_dp_inner | (p == 1) | (d == 1)     # one order when either degree is 1: call it dp-pp
    pp_comm = np.where(pick_dp_inner, results[0][0], results[1][0])
    dp_comm = np.where(pick_dp_inner, results[0][1], results[1][1])

    # ZeRO shards over the DP x CP ranks that hold the same weights, or over one shard group of them (HSDP)
    opt_params = params_stage / memory.optimizer_shards(z, shard_group(d, cp, c["dp_replicate"]))
    optimizer = opt_params * optimizer_traffic_bytes_per_param(precision) / hbm_bytes_per_s

    times = {
        # the first micro-batch's gradient is written, not added (autograd; Megatron-LM 2021's main_grad hook and
        # BF16_Optimizer add that one too: one add a step not priced, so a single micro-batch costs nothing more)
        "compute": num_mb * stage_comp - stage_add,
        "tp_comm": num_mb * stage_tp,
        "cp_comm": num_mb * stage_cp,
        "pp_comm": pp_comm,
        "dp_comm": dp_comm,
        "bubble": bubble_ratio(p, 1, v) * (stage_comp + stage_tp + stage_cp),     # (p − 1)/v micro-batch passes
        "optimizer": optimizer,
    }
    step = sum(times.values())
    tokens = job.global_batch * job.seq_len
    gpus = t * cp * p * d
    model_flops = flops.model_flops_per_step(m, job.seq_len, job.global_batch, runtime.causal_flops_halved)
    hw_flops = tokens * flops.hardware_flops_per_token(m, job.seq_len, rc, runtime.causal_flops_halved,
                                                       model_recompute_share(m.layers, p, c["rc_layers"], v)
                                                       if partial else 1.0)
    out = {f"mem_{k}_bytes": v_ for k, v_ in mem.items()}
    out["memory_bytes"] = sum(mem.values())
    out.update({f"{k}_s": v_ for k, v_ in times.items()})
    out.update(
        step_time_s=step,
        num_microbatches=num_mb,
        tokens_per_s=tokens / step,
        tflops_per_gpu=model_flops / (step * gpus) / 1e12,
        mfu=model_flops / (step * gpus * hw.peak_flops),
        hfu=hw_flops / (step * gpus * hw.peak_flops),
        peak_stage=stage,
        dp_inner=pick_dp_inner,
    )
    return out
