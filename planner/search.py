"""Enumerate layouts, reject invalid ones with a reason, drop what does not fit, rank the rest.

One numpy column per knob; every candidate is evaluated by the same vectorised cost functions in a few calls
(chunked so that the arrays stay small at any GPU count).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, fields, make_dataclass, replace
from itertools import product

import numpy as np

from planner import constraints
from planner.cost.memory import MEMORY_PARTS
from planner.cost.pipeline import chunk_layers, stage_layers
from planner.cost.step import KNOBS, TIME_PARTS, knob_columns, memory_columns, step_columns
from planner.checks import checked_int, is_real, parse_count
from planner.errors import PlannerError, library_api
from planner.specs.hardware import HardwareSpec, load_hardware
from planner.specs.model import ModelSpec, load_model
from planner.specs.strategy import (LAYOUT_KNOBS, PARALLEL_DIMS, RECOMPUTE, SEARCHED_RECOMPUTE, ZERO_STAGES, Job,
                                    Layout, Precision, Runtime, recompute_code, shard_group, zero_code)

GIB = 2**30
# HBM kept free for allocator fragmentation and transient buffers beyond the modelled parts: formulas.md §3.5
# advises 5-10% plus a few GB on 80 GB parts (the fixed framework overhead is already a modelled part, "other").
DEFAULT_HEADROOM_FRACTION = 0.07
DEFAULT_HARDWARE = "h100-sxm"
CHUNK_ROWS = 200_000
HYBRID_DOMINATED = ("hybrid sharding: not the layout's fastest fitting degree, or no faster than sharding over "
                    "all ranks")
MAX_MICRO_BATCH = 1024
MAX_GPUS_TRIED = 2**20                 # smallest_fitting_gpus looks no further


Pins = make_dataclass("Pins", [(f.name, f"{f.type} | None", field(default=None)) for f in fields(Layout)],
                      frozen=True,
                      namespace={"__doc__": "Knobs the user fixed, one per Layout field; None = search over it."})
Pins.__module__ = __name__       # picklable (results go through multiprocessing and caches); 3.12 has module=


@dataclass
class SearchResult:
    model: ModelSpec
    hardware: HardwareSpec
    job: Job
    headroom_bytes: float
    considered: int
    rejected: dict[str, int]
    table: "object"                    # pandas DataFrame: fitting layouts, best first
    closest: "object"                  # pandas DataFrame: valid layouts that do not fit, least overflow first
    runtime: Runtime = field(default_factory=Runtime)
    min_gpus_that_fit: int | None = None
    pins: Pins = Pins()
    precision: Precision = field(default_factory=Precision)
    # When no layout is valid: layouts per rule that break only that rule, and the global batch (sequences)
    # nearest the job's that one of the batch-blocked layouts divides (None when there is none).
    sole_blockers: dict[str, int] = field(default_factory=dict)
    batch_suggestion: int | None = None

    @property
    def capacity_bytes(self) -> float:
        """Memory a layout may use per GPU: HBM less the planning headroom."""
        return self.hardware.hbm_bytes - self.headroom_bytes


# --- inputs -------------------------------------------------------------------------------------------------------

def make_job(model: ModelSpec, gpus, seq_len=None, global_batch=None, global_batch_tokens=None) -> Job:
    """Resolve the sequence length and the global batch (sequences) from flags or the model's defaults."""
    if global_batch is not None and global_batch_tokens is not None:
        raise PlannerError("--global-batch", "give either --global-batch (sequences) or --global-batch-tokens, not both")
    s = checked_int(model.seq_len if seq_len is None else seq_len, "--seq-len")
    if model.learned_positions and s > model.seq_len:       # no position embedding beyond the table
        raise PlannerError("--seq-len", f"got {s:,}, expected at most {model.seq_len:,}: {model.name} learns "
                                        f"{model.seq_len:,} positions")
    if model.sliding_window and s > model.sliding_window:   # beyond it the window is not full attention
        why = (f"{model.name} attends within a {model.sliding_window:,}-token sliding window, which the planner "
               "prices only up to the window (where it is full attention)")
        if seq_len is None:                                  # the model's own default, not a flag the user gave
            raise PlannerError("--model: seq_len", f"the model's sequence length {s:,} is longer than its sliding "
                                                   f"window: {why}; give --seq-len {model.sliding_window:,} or less")
        raise PlannerError("--seq-len", f"got {s:,}, expected at most {model.sliding_window:,}: {why}")
    if global_batch is None:
        tokens = model.global_batch_tokens if global_batch_tokens is None else global_batch_tokens
        if isinstance(tokens, str):                          # '16M': the command line's suffix rule
            tokens = parse_count(tokens, "--global-batch-tokens", binary=True)
        tokens = checked_int(tokens, "--global-batch-tokens")
        global_batch = max(1, round(tokens / s))
        if global_batch_tokens is not None and global_batch * s != tokens:
            raise PlannerError("--global-batch-tokens", f"{tokens:,} tokens is not a whole number of "
                                                        f"{s}-token sequences")
    return Job(gpus=gpus, seq_len=s, global_batch=global_batch)


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def _micro_batches(global_batch: int, dp: int) -> list[int]:
    """Divisors of the per-replica batch; if DP does not divide the batch, powers of two (rejected with a reason)."""
    if global_batch % dp == 0:
        return [x for x in _divisors(global_batch // dp) if x <= MAX_MICRO_BATCH]
    return [2**i for i in range(int(math.log2(max(global_batch // dp, 1))) + 1)]


def normalized_pins(pins: Pins) -> Pins:
    """The pinned knobs as Layout checks and stores them (Python ints and bools, recompute by name): a numpy uint8
    would overflow in the search's arithmetic, and an array where a number belongs is the one-line error here."""
    given = {k: v for k, v in pins.__dict__.items() if v is not None}
    layout = Layout(**given)
    return replace(pins, **{k: getattr(layout, k) for k in given})


def check_pins(pins: Pins, job: Job) -> None:
    """Pinned knobs must have the right type and range, and the degrees must be able to multiply to the GPU count."""
    layout = Layout(**{k: v for k, v in pins.__dict__.items() if v is not None})   # types and ranges, as any layout
    if layout.recompute_layers and pins.recompute is not None and layout.recompute != "full":
        raise PlannerError("--recompute-layers", f"recomputes layers fully; expected --recompute full, got "
                                                 f"{layout.recompute}")
    upper = {"tp": job.gpus, "cp": job.gpus, "pp": job.gpus, "dp": job.gpus, "micro_batch": job.global_batch,
             "vpp": 1024, "dp_replicate": job.gpus}
    for name, limit in upper.items():
        value = getattr(pins, name)
        if value is not None and value > limit:
            raise PlannerError(f"--{name.replace('_', '-')}", f"got {value:,}, expected at most {limit:,}")
    n = job.gpus
    pinned = {k: getattr(pins, k) for k in PARALLEL_DIMS if getattr(pins, k) is not None}
    if len(pinned) == len(PARALLEL_DIMS):
        layout.check_gpus(n)
    elif n % math.prod(pinned.values()):
        alone = next((k for k, v in pinned.items() if n % v), None)
        if alone is not None:                    # one pinned degree is the culprit on its own: name its flag
            raise PlannerError(f"--{alone}", f"{alone}({pinned[alone]}) does not divide gpus({n})")
        terms = " * ".join(f"{k}({v})" for k, v in pinned.items())
        raise PlannerError("layout", f"{terms} = {math.prod(pinned.values())} does not divide gpus({n})")


def enumerate_candidates(model: ModelSpec, job: Job, pins: Pins = Pins()) -> dict[str, np.ndarray]:
    """Every TP x CP x PP x DP factorization of the GPU count x micro-batch x VPP x SP x recompute x ZeRO, as columns.

    Micro-batches: divisors of the per-replica batch. VPP: divisors of the layer slots per stage. CP: divisors of
    the GPUs left by TP that split the sequence into 2·CP equal chunks (the load-balanced causal split).
    """
    n = job.gpus
    rcs = ([recompute_code(pins.recompute)] if pins.recompute is not None
           else [RECOMPUTE.index(r) for r in SEARCHED_RECOMPUTE])
    if pins.recompute_layers:                  # recomputing k layers of each chunk is full recompute, partially
        rcs = [c for c in rcs if c == RECOMPUTE.index("full")]
    blocks = []
    for tp in [pins.tp] if pins.tp is not None else _divisors(n):
        if n % tp:
            continue
        cps = [pins.cp] if pins.cp is not None else \
            [c for c in _divisors(n // tp) if c == 1 or job.seq_len % (2 * c) == 0]
        for cp in cps:
            if (n // tp) % cp:
                continue
            for pp in [pins.pp] if pins.pp is not None else _divisors(n // (tp * cp)):
                if (n // (tp * cp)) % pp:
                    continue
                dp = n // (tp * cp * pp)
                if pins.dp is not None and dp != pins.dp:
                    continue
                blocks.append(_block(model, job, pins, rcs, tp, cp, pp, dp))
    if not blocks:
        return {k: np.zeros(0, dtype=np.int64) for k in KNOBS}
    return {k: np.concatenate([b[k] for b in blocks]) for k in KNOBS}


def _block(model: ModelSpec, job: Job, pins: Pins, rcs: list[int], tp: int, cp: int, pp: int, dp: int) -> dict:
    """The candidates of one TP x CP x PP x DP factorization, as columns by knob."""
    mid = int(stage_layers(model.layers, pp)[1])
    if pins.vpp is not None:
        vpps = [pins.vpp]
    else:
        vpps = _divisors(mid) if pp > 1 and mid > 0 else [1]
    mbs = [pins.micro_batch] if pins.micro_batch is not None else _micro_batches(job.global_batch, dp)
    # SP only means something with TP > 1, ZeRO only with DP x CP > 1 (the ranks that hold replicas): unpinned,
    # those are not enumerated.
    sps = [pins.sequence_parallel] if pins.sequence_parallel is not None else [False, True][:1 + (tp > 1)]
    zs = [zero_code(pins.zero_stage)] if pins.zero_stage is not None else \
        list(ZERO_STAGES)[:1 + 3 * (dp * cp > 1)]
    # Hybrid sharding: as pinned (a pinned degree above 1 needs a ZeRO stage: no ZeRO-0 unless pinned too); open, 1
    # here, and the search adds the hybrid variants of the layouts that leave memory for them (hybrid_variants).
    r = 1 if pins.dp_replicate is None else pins.dp_replicate
    shardings = [(z, r) for z in zs if z or r == 1 or pins.zero_stage is not None] or [(z, r) for z in zs]  # the
    # last: no ZeRO is possible (DP x CP = 1), so the rules reject the pinned degree with its reason
    names = ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "sp", "recompute", "zero", "dp_replicate")
    grid = np.array([(*row[:-1], *row[-1]) for row in product([tp], [cp], [pp], [dp], mbs, vpps, sps, rcs, shardings)],
                    dtype=np.int64)
    grid, k = _with_recompute_layers(grid.reshape(-1, len(names)), pins, model.layers, names.index("recompute"),
                                     names.index("pp"), names.index("vpp"))
    cols = {n: grid[:, i] for i, n in enumerate(names)}
    return {c: (k if c == "rc_layers" else cols[c]) for c in KNOBS}


def hybrid_variants(cols: dict, parts: dict, capacity_bytes: float) -> tuple[dict, np.ndarray]:
    """The hybrid-sharding (HSDP) variants of ZeRO layouts sharded over all DP x CP ranks (dp_replicate 1) that
    may still fit: every degree r > 1 that divides DP and leaves a shard group of two or more ranks, as long as the
    sharded states, r times larger, stay within `capacity_bytes`. `parts` are the layouts' memory parts (bytes, on
    the most loaded stage): states sharded by stage z (optimizer from 1, gradients from 2, weights at 3) grow by
    (r - 1) x their share; another stage may then peak, so the caller still checks the variants' own memory.
    Hybrid sharding never saves memory, so a layout that does not fit sharded over all ranks has no variant.
    Returns the variants' columns and, per variant, the index of its layout in `cols` (variants of one layout are
    adjacent, by increasing r)."""
    z, d, cp = cols["zero"], cols["dp"], cols["cp"]
    sharded = (parts["optimizer"] * (z >= 1) + parts["gradients"] * (z >= 2) + parts["weights"] * (z >= 3))
    slack = capacity_bytes - sum(parts.values())
    base = (cols["dp_replicate"] == 1) & (z >= 1) & (slack > 0) & (d > 1)
    idx = np.flatnonzero(base)
    if not len(idx):
        return {k: v[:0] for k, v in cols.items()}, idx
    r_max = np.floor(1 + slack[idx] / np.maximum(sharded[idx], 1e-300))
    rows, degrees = [], []
    for dp_value in np.unique(d[idx]):
        options = np.array(_divisors(int(dp_value))[1:], dtype=np.int64)
        here = idx[d[idx] == dp_value]
        keep = (options[None, :] <= r_max[d[idx] == dp_value][:, None]) & \
            (shard_group(dp_value, cp[here][:, None], options[None, :]) >= 2)
        i, j = np.nonzero(keep)
        rows.append(here[i])
        degrees.append(options[j])
    rows, degrees = np.concatenate(rows), np.concatenate(degrees)
    order = np.lexsort((degrees, rows))
    rows, degrees = rows[order], degrees[order]
    out = {k: v[rows] for k, v in cols.items()}
    out["dp_replicate"] = degrees
    return out, rows


def _fastest_gain(step_s, fits, base_step_s, rows):
    """Per hybrid variant: is it the fastest fitting degree of its layout (the smallest on a tie: less memory) and
    faster than the layout sharded over all ranks? The search keeps those two: the least memory and the best step.
    (A faster degree may not fit: another stage can peak once the states grow.)"""
    key = np.where(fits, step_s, np.inf)
    order = np.lexsort((key, rows))                     # by layout, then step; degrees ascend within a tie (stable)
    first = np.ones(len(rows), dtype=bool)
    first[1:] = rows[order][1:] != rows[order][:-1]
    best = np.zeros(len(rows), dtype=bool)
    best[order[first]] = True
    return best & fits & (step_s < base_step_s[rows])


def _with_recompute_layers(grid, pins: Pins, layers: int, rc_col: int, pp_col: int, vpp_col: int):
    """The rows and the layers each recomputes per pipeline chunk under full recompute: every layer (0); when
    recompute is open, also half of each chunk (Megatron's block method), a step between none and full (any other
    count is a pin away: it would cost the search a candidate per count). A pinned "full" means every layer, as
    Megatron's --recompute-granularity full does, unless the layers are pinned too."""
    full = grid[:, rc_col] == RECOMPUTE.index("full")
    if pins.recompute_layers is not None:
        return grid, np.where(full, pins.recompute_layers, 0)
    k = np.zeros(len(grid), dtype=np.int64)
    if pins.recompute is not None or not full.any():
        return grid, k
    chunk = chunk_layers(layers, grid[0, pp_col], grid[:, vpp_col])     # one PP degree per block
    half = -(-chunk // 2)
    partial = full & (half < chunk)
    return np.concatenate([grid, grid[partial]]), np.concatenate([k, half[partial]])


# --- search -------------------------------------------------------------------------------------------------------

def _rows_to_frame(cols: dict, res: dict, job: Job, capacity_bytes: float):
    import pandas as pd  # heavy import kept off the CLI's start-up path until needed

    df = pd.DataFrame({
        "tp": cols["tp"], "cp": cols["cp"], "pp": cols["pp"], "dp": cols["dp"], "micro_batch": cols["micro_batch"],
        "num_microbatches": res["num_microbatches"].astype(np.int64), "global_batch": job.global_batch,
        "vpp": cols["vpp"], "sequence_parallel": cols["sp"].astype(bool),
        "recompute": np.asarray(RECOMPUTE, dtype=object)[cols["recompute"]],
        "recompute_layers": cols["rc_layers"], "zero_stage": cols["zero"], "dp_replicate": cols["dp_replicate"],
        "fits": res["memory_bytes"] <= capacity_bytes,
        "memory_gib": res["memory_bytes"] / GIB,
        **{f"{k}_gib": res[f"mem_{k}_bytes"] / GIB for k in MEMORY_PARTS},
        "step_time_s": res["step_time_s"],
        **{f"{k}_s": res[f"{k}_s"] for k in TIME_PARTS},
        "tokens_per_s": res["tokens_per_s"], "tflops_per_gpu": res["tflops_per_gpu"],
        "mfu": res["mfu"], "hfu": res["hfu"],
        "placement": np.where(cols["cp"] > 1, "tp-cp-", "tp-") + np.where(res["dp_inner"], "dp-pp", "pp-dp"),
        "peak_stage": res["peak_stage"].astype(np.int64),
    })
    return df


def repriced(result: SearchResult, table, runtime: Runtime):
    """Rows of `result`'s table priced again under `runtime` (a framework's fixed rank order, say), best first.
    Memory does not depend on what changes here, so a fitting layout still fits."""
    cols = knob_columns({k: table[k].to_numpy() for k in LAYOUT_KNOBS})       # the cost layer's names and codes
    res = step_columns(result.model, result.hardware, result.job, cols, result.precision, runtime)
    return _rank(_rows_to_frame(cols, res, result.job, result.capacity_bytes))


def _rank(df):
    return df.sort_values(["tokens_per_s", "memory_gib", "pp"], ascending=[False, True, True],
                          kind="stable").reset_index(drop=True)


@library_api
def run_search(model="405b", gpus=512, hardware=DEFAULT_HARDWARE, seq_len=None, global_batch=None,
               global_batch_tokens=None, pins: Pins = Pins(), headroom_gib=None,
               allow_cross_node_tp=False, precision: Precision = Precision(), runtime: Runtime = Runtime(),
               find_min_gpus=True) -> SearchResult:
    """Search all layouts of `model` on `gpus` GPUs of `hardware`; see SearchResult."""
    import pandas as pd

    check_options(runtime=runtime, precision=precision, pins=pins)
    pins = normalized_pins(pins)
    if runtime.tp_comm_overlap and pins.sequence_parallel is False and pins.tp != 1:      # as --tp-comm-overlap
        raise PlannerError("runtime", "tp_comm_overlap=True needs sequence parallelism (Megatron asserts it), and "
                                      "sequence_parallel is pinned False; drop one of them")
    for name, flag in (("allow_cross_node_tp", allow_cross_node_tp), ("find_min_gpus", find_min_gpus)):
        if not isinstance(flag, (bool, np.bool_)):
            raise PlannerError(name, f"got {flag!r}, expected True or False")
    m, hw = load_model(model), load_hardware(hardware)
    runtime = runtime.for_hardware(hw)          # FlashAttention follows the hardware unless the caller chose
    job = make_job(m, checked_int(gpus, "--gpus"), seq_len, global_batch, global_batch_tokens)
    hw = hw.for_job(job.gpus)                   # GB200: a job beyond one NVLink domain fills segments of it
    if headroom_gib is None:
        headroom_gib = DEFAULT_HEADROOM_FRACTION * hw.hbm_bytes / GIB
    if not (is_real(headroom_gib) and 0 <= headroom_gib < hw.hbm_bytes / GIB):
        raise PlannerError("--headroom-gib", f"got {headroom_gib!r}, expected 0 <= headroom < HBM capacity")
    headroom_gib = float(headroom_gib)
    capacity = hw.hbm_bytes - headroom_gib * GIB
    implied_cp = pins.cp is None and None not in (pins.tp, pins.pp, pins.dp)
    if implied_cp:
        pins = replace(pins, cp=1)          # a layout given as TP x PP x DP is complete: no CP unless asked
    try:
        check_pins(pins, job)
    except PlannerError as exc:
        # a "layout" error comes after the pins' types were checked, so the product below is of integers
        rest = job.gpus // max(pins.tp * pins.pp * pins.dp, 1) if implied_cp and exc.field == "layout" else 0
        if rest > 1 and rest * pins.tp * pins.pp * pins.dp == job.gpus:
            raise PlannerError(exc.field, f"{exc.message} (CP is 1 unless --cp is given; --cp {rest} would use the "
                                          f"other GPUs)") from None
        raise
    cols = enumerate_candidates(m, job, pins)
    n = len(cols["tp"])
    rejected: dict[str, int] = {}
    fitting, overflowing = [], []
    for good in _valid_chunks(m, hw, job, cols, allow_cross_node_tp, rejected, runtime.flash_attention):
        res = step_columns(m, hw, job, good, precision, runtime)
        frames = [_rows_to_frame(good, res, job, capacity)]
        if pins.dp_replicate is None:
            # Hybrid sharding, where memory allows it: each layout's fastest degree, if faster than sharding over
            # all ranks (the others are dropped, counted)
            hybrid, rows = hybrid_variants(good, {k: res[f"mem_{k}_bytes"] for k in MEMORY_PARTS}, capacity)
            n += len(rows)
            if len(rows):
                res_h = step_columns(m, hw, job, hybrid, precision, runtime)
                fits = res_h["memory_bytes"] <= capacity
                gain = _fastest_gain(res_h["step_time_s"], fits, res["step_time_s"], rows)
                dropped = fits & ~gain                 # the ones that do not fit are reported as such
                if dropped.any():
                    rejected[HYBRID_DOMINATED] = rejected.get(HYBRID_DOMINATED, 0) + int(np.count_nonzero(dropped))
                shown = gain | ~fits
                frames.append(_rows_to_frame({k: v[shown] for k, v in hybrid.items()},
                                             {k: np.asarray(v)[shown] for k, v in res_h.items()}, job, capacity))
        for df in frames:
            fitting.append(df[df["fits"]])
            overflowing.append(df[~df["fits"]])
    empty = _rows_to_frame({k: np.zeros(0, dtype=np.int64) for k in KNOBS},
                           {k: np.zeros(0) for k in _result_keys()}, job, capacity)
    table = _rank(pd.concat(fitting, ignore_index=True)) if fitting else empty
    over = pd.concat(overflowing, ignore_index=True) if overflowing else empty
    if len(over):
        rejected[constraints.FIT_REASON] = len(over)
        over = over.assign(overflow_gib=over["memory_gib"] - capacity / GIB)
        over = over.sort_values(["overflow_gib", "tokens_per_s"], ascending=[True, False]).reset_index(drop=True)
    result = SearchResult(m, hw, job, headroom_gib * GIB, n, rejected, table, over, runtime, pins=pins,
                          precision=precision)
    if len(table) == 0 and len(over) == 0:
        result.sole_blockers, result.batch_suggestion = constraints.sole_blockers(
            m, hw, job, cols, allow_cross_node_tp, runtime.flash_attention, CHUNK_ROWS)
    if len(table) == 0 and len(over) and find_min_gpus:
        result.min_gpus_that_fit = smallest_fitting_gpus(m, hw, job, pins, capacity, allow_cross_node_tp,
                                                         precision, runtime)
    return result


def _result_keys():
    return (["memory_bytes", "step_time_s", "num_microbatches", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu",
             "peak_stage", "dp_inner"] + [f"mem_{k}_bytes" for k in MEMORY_PARTS] + [f"{k}_s" for k in TIME_PARTS])


def _valid_chunks(m, hw, job, cols, allow_cross_node_tp, rejected=None, flash_attention=True):
    """The valid candidates of `cols`, CHUNK_ROWS rows at a time (arrays stay small at any GPU count); each
    rejected candidate is counted under the first rule it breaks in `rejected`, when given."""
    for start in range(0, len(cols["tp"]), CHUNK_ROWS):
        chunk = {k: v[start:start + CHUNK_ROWS] for k, v in cols.items()}
        rule_list = constraints.rules(m, hw, job, chunk, allow_cross_node_tp, flash_attention)
        failed, valid = constraints.first_failure(rule_list, len(chunk["tp"]))
        if rejected is not None:
            for i, (reason, _) in enumerate(rule_list):
                count = int(np.count_nonzero(failed == i))
                if count:
                    rejected[reason] = rejected.get(reason, 0) + count
        if valid.any():
            yield {k: v[valid] for k, v in chunk.items()}


def _fits_somewhere(m, hw, job, pins, capacity, allow_cross_node_tp, precision, runtime) -> bool:
    """Memory-only check: does any valid layout on job.gpus fit?"""
    hw = hw.for_job(job.gpus)                   # the TP-inside-a-node rule on this count's segments
    for good in _valid_chunks(m, hw, job, enumerate_candidates(m, job, pins), allow_cross_node_tp,
                              flash_attention=runtime.flash_attention):
        parts, _ = memory_columns(m, hw, job, good, precision, runtime)
        if (sum(parts.values()) <= capacity).any():
            return True
    return False


def scan_limit(hw: HardwareSpec, max_gpus: int = MAX_GPUS_TRIED) -> int:
    """The largest GPU count smallest_fitting_gpus tries: whole allocation units up to max_gpus."""
    return max_gpus // hw.alloc_gpus * hw.alloc_gpus


def smallest_fitting_gpus(m, hw, job, pins, capacity, allow_cross_node_tp, precision, runtime,
                          max_gpus=MAX_GPUS_TRIED) -> int | None:
    """Smallest GPU count above job.gpus, in whole allocation units (nodes, or hosts where the profile says so),
    with a layout that fits (global batch kept), or None.

    Scans the next unit counts (at most 64 of them, up to 4x the request), then doubles, and when a doubled count
    fits, walks back up from the last count that did not (at most 64 evenly spaced unit counts in between); memory
    only, so it stays fast.
    """
    g = hw.alloc_gpus
    start, top = (job.gpus // g + 1) * g, scan_limit(hw, max_gpus)
    counts = list(range(start, min(4 * max(job.gpus, g), start + 63 * g, top) + 1, g))
    nxt = counts[-1] * 2 if counts else start
    while nxt <= top:
        counts.append(nxt)
        nxt *= 2
    if start <= top and counts[-1] < top:
        counts.append(top)                        # the limit itself, so "none up to the limit" is true
    unpinned = Pins(**{**pins.__dict__, "dp": None})

    def fits(count: int) -> bool:
        trial = Job(gpus=count, seq_len=job.seq_len, global_batch=job.global_batch)
        return _fits_somewhere(m, hw, trial, unpinned, capacity, allow_cross_node_tp, precision, runtime)

    previous = job.gpus
    for count in counts:
        if fits(count):
            first = (previous // g + 1) * g              # whole units strictly between the last miss and this fit
            step = max(1, -(-((count - first) // g) // 64)) * g
            return next((c for c in range(first, count, step) if fits(c)), count)
        previous = count
    return None


def min_gpus_text(result: SearchResult) -> str:
    """The smallest GPU count that fits, or what the scan covered: it tries whole allocation units above the
    request, up to MAX_GPUS_TRIED."""
    if result.min_gpus_that_fit:
        # more GPUs cannot keep a pinned DP (the degrees multiply to the count): the scan frees it, so say so
        return f"{result.min_gpus_that_fit:,}" + (" (DP left free)" if result.pins.dp is not None else "")
    top = scan_limit(result.hardware)
    if result.job.gpus >= top:
        return f"none tried: the scan for a larger count stops at {top:,} GPUs, not above the {result.job.gpus:,} asked"
    return f"none up to {top:,} GPUs, the most the search tries"


def check_options(**given) -> None:
    """runtime=, precision= and pins= must be planner.Runtime / Precision / Pins objects (a dict is an error
    naming the argument, not an AttributeError deep inside)."""
    kinds = {"runtime": Runtime, "precision": Precision, "pins": Pins}
    for name, value in given.items():
        if not isinstance(value, kinds[name]):
            raise PlannerError(name, f"got {value!r}, expected planner.{kinds[name].__name__}(...)")


def pop_pins(kwargs: dict, caller: str = "search", taken: tuple[str, ...] = ("model", "gpus")) -> Pins:
    """Take the layout knobs (tp=8, recompute="full", ...) out of keyword arguments, with a `pins=Pins(...)` given
    there too (a knob given both ways is an error). What is left must be options of `run_search` that `caller`
    does not set itself (`taken`): a misspelt keyword is a TypeError naming `caller`, not run_search."""
    options = set(inspect.signature(run_search).parameters) - set(taken) - {"pins"}
    unknown = sorted(set(kwargs) - options - set(LAYOUT_KNOBS) - {"pins"})
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}; expected layout knobs "
                        f"({', '.join(LAYOUT_KNOBS)}), pins, or {', '.join(sorted(options))}")
    check_options(**{k: kwargs[k] for k in ("runtime", "precision") if k in kwargs})
    base = kwargs.pop("pins", None)
    base = Pins() if base is None else base
    if not isinstance(base, Pins):
        raise PlannerError("pins", f"got {base!r}, expected planner.Pins(...) or the knobs as keywords (tp=8, ...)")
    given = {k: v for k in LAYOUT_KNOBS if (v := kwargs.pop(k, None)) is not None}
    twice = next((k for k in given if getattr(base, k) is not None), None)
    if twice is not None:
        raise PlannerError(twice, "given both as a keyword and in pins; expected it once")
    return replace(base, **given)


@library_api
def search(model="405b", gpus=512, tokens=None, price_usd_per_gpu_hour=None, pue=None, **kwargs):
    """Ranked layouts as a pandas DataFrame, best first; `df.attrs` holds considered/rejected counts.

    Keyword arguments are those of `run_search`; pinning knobs may be given directly (tp=8, recompute="full").
    With `tokens` (a number or '15T'), each row also gets the days, GPU-hours, cost and energy to train them, as
    `plan --tokens` (price: the profile's unless given; PUE 1.2 unless given).
    """
    from planner.sweep import add_budget_columns, budget_arguments

    budget = budget_arguments(tokens, price_usd_per_gpu_hour, pue)
    pins = pop_pins(kwargs)
    result = require_valid(run_search(model, gpus, pins=pins, **kwargs))
    df = result.table
    if budget[0] is not None:
        add_budget_columns(df, budget[0], result.job.gpus, result.hardware, *budget[1:])
    df.attrs.update(model=result.model.name, hardware=result.hardware.name, gpus=result.job.gpus,
                    considered=result.considered, rejected=dict(result.rejected),
                    min_gpus_that_fit=result.min_gpus_that_fit)     # set when nothing fits (the frame is empty)
    return df


def require_valid(result: SearchResult) -> SearchResult:
    """`result`, unless no candidate passed the validity rules (fitting or not): then the one-line error."""
    if len(result.table) == 0 and len(result.closest) == 0:
        raise constraints.invalid_layout_error(result)
    return result
