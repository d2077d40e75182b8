"""Take the candidate layouts (planner.candidates), reject invalid ones with a reason, drop what does not fit, rank
the rest.

One numpy column per knob; every candidate is evaluated by the same vectorised cost functions in a few calls
(chunked so that the arrays stay small at any GPU count).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace

import numpy as np

from planner import constraints
from planner.candidates import (Pins, check_pins, enumerate_candidates, fastest_gain, hybrid_variants, make_job,
                                normalized_pins)
from planner.cost.memory import MEMORY_PARTS
from planner.cost.step import KNOBS, TIME_PARTS, knob_columns, memory_columns, step_columns
from planner.checks import checked_int, is_int, is_real
from planner.errors import PlannerError, library_api
from planner.specs.hardware import HardwareSpec, load_hardware
from planner.specs.model import ModelSpec, load_model
from planner.specs.strategy import LAYOUT_KNOBS, RECOMPUTE, Job, Precision, Runtime

GIB = 2**30
# HBM kept free for allocator fragmentation and transient buffers beyond the modelled parts: formulas.md §3.5
# advises 5-10% plus a few GB on 80 GB parts (the fixed framework overhead is already a modelled part, "other").
DEFAULT_HEADROOM_FRACTION = 0.07
DEFAULT_HARDWARE = "h100-sxm"
# Candidates per chunk: memory stays flat at any GPU count, and each cost column (400 kB) stays nearer the CPU's
# caches, with fewer of numpy's temporaries faulted in afresh (1M candidates: 81k minor page faults, not 104k;
# 200k-row chunks ran 10-15% slower)
CHUNK_ROWS = 50_000
SELECTIVE_DOMINATED = ("selective recompute with FlashAttention: the memory of no recompute (no attention scores "
                       "kept) at more time")
HYBRID_DOMINATED = ("hybrid sharding: not the layout's fastest fitting degree, or no faster than sharding over "
                    "all ranks")
MAX_GPUS_TRIED = 2**20                 # smallest_fitting_gpus looks no further


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


# The rank orders by CP (none, some) and DP next to TP (False, True); string columns are built from these objects
# with pandas' str dtype, the same for any number of rows (an empty numpy-derived column would be object)
_PLACEMENTS = np.asarray(["tp-pp-dp", "tp-dp-pp", "tp-cp-pp-dp", "tp-cp-dp-pp"], dtype=object)


def _rows_to_frame(cols: dict, res: dict, job: Job, capacity_bytes: float):
    import pandas as pd  # heavy import kept off the CLI's start-up path until needed

    df = pd.DataFrame({
        "tp": cols["tp"], "cp": cols["cp"], "pp": cols["pp"], "dp": cols["dp"], "micro_batch": cols["micro_batch"],
        "num_microbatches": res["num_microbatches"].astype(np.int64), "global_batch": job.global_batch,
        "vpp": cols["vpp"], "sequence_parallel": cols["sp"].astype(bool),
        "recompute": pd.Series(np.asarray(RECOMPUTE, dtype=object)[cols["recompute"]], dtype="str"),
        "recompute_layers": cols["rc_layers"], "zero_stage": cols["zero"], "dp_replicate": cols["dp_replicate"],
        "fits": res["memory_bytes"] <= capacity_bytes,
        "memory_gib": res["memory_bytes"] / GIB,
        **{f"{k}_gib": res[f"mem_{k}_bytes"] / GIB for k in MEMORY_PARTS},
        "step_time_s": res["step_time_s"],
        **{f"{k}_s": res[f"{k}_s"] for k in TIME_PARTS},
        "tokens_per_s": res["tokens_per_s"], "tflops_per_gpu": res["tflops_per_gpu"],
        "mfu": res["mfu"], "hfu": res["hfu"],
        "placement": pd.Series(_PLACEMENTS[2 * (np.asarray(cols["cp"]) > 1) + np.asarray(res["dp_inner"], dtype=int)],
                               dtype="str"),
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
    if allow_cross_node_tp and pins.tp is not None and cross_node_tp_unused(checked_int(pins.tp, "--tp"), hw):
        raise PlannerError("--allow-cross-node-tp", f"lets TP span nodes, and the pinned --tp {pins.tp} fits in "
                                                    f"one node of {hw.gpus_per_node} GPUs; drop one of them")
    if headroom_gib is None:
        headroom_gib = DEFAULT_HEADROOM_FRACTION * hw.hbm_bytes / GIB
    if not (is_real(headroom_gib) and 0 <= headroom_gib < hw.hbm_bytes / GIB):
        raise PlannerError("--headroom-gib", f"got {headroom_gib!r}, expected 0 <= headroom < {hw.name}'s HBM, "
                                             f"{hw.hbm_bytes / GIB:.1f} GiB")
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
    # FlashAttention keeps no s x s scores, so selective recompute keeps what none keeps (memory.
    # activation_bytes_per_layer) and costs the attention forward again: a valid one can never rank first
    drop_selective = pins.recompute is None and runtime.for_hardware(hw).flash_attention
    fitting, overflowing = [], []           # frames of the layouts that fit; columns of those that do not
    for good in _valid_chunks(m, hw, job, cols, allow_cross_node_tp, rejected, runtime.flash_attention,
                              runtime.microbatch_groups, runtime.cp_comm_overlap):
        if drop_selective and (twin := good["recompute"] == RECOMPUTE.index("selective")).any():
            rejected[SELECTIVE_DOMINATED] = rejected.get(SELECTIVE_DOMINATED, 0) + int(np.count_nonzero(twin))
            good = {k: v[~twin] for k, v in good.items()}
            if not len(good["tp"]):
                continue
        res = _timed_if_fitting(m, hw, job, good, precision, runtime, capacity)
        fits = res["memory_bytes"] <= capacity
        fitting.append(_rows_to_frame(_rows(good, fits), _rows(res, fits), job, capacity))
        overflowing.append((_rows(good, ~fits), res["memory_bytes"][~fits]))
        if pins.dp_replicate is None:
            # Hybrid sharding, where memory allows it: each layout's fastest degree, if faster than sharding over
            # all ranks (the others are dropped, counted)
            hybrid, rows = hybrid_variants(good, {k: res[f"mem_{k}_bytes"] for k in MEMORY_PARTS}, capacity)
            n += len(rows)
            if len(rows):
                res_h = _timed_if_fitting(m, hw, job, hybrid, precision, runtime, capacity)
                fits = res_h["memory_bytes"] <= capacity
                gain = fastest_gain(res_h["step_time_s"], fits, res["step_time_s"], rows)
                dropped = fits & ~gain                 # the ones that do not fit are reported as such
                if dropped.any():
                    rejected[HYBRID_DOMINATED] = rejected.get(HYBRID_DOMINATED, 0) + int(np.count_nonzero(dropped))
                fitting.append(_rows_to_frame(_rows(hybrid, gain & fits), _rows(res_h, gain & fits), job, capacity))
                overflowing.append((_rows(hybrid, ~fits), res_h["memory_bytes"][~fits]))
    empty = _rows_to_frame({k: np.zeros(0, dtype=np.int64) for k in KNOBS},
                           {k: np.zeros(0) for k in _result_keys()}, job, capacity)
    table = _rank(pd.concat(fitting, ignore_index=True)) if fitting else empty
    over = empty
    if over_count := sum(len(memory_bytes) for _, memory_bytes in overflowing):
        rejected[constraints.FIT_REASON] = over_count
        over = _closest_timed(m, hw, job, overflowing, precision, runtime, capacity)
    result = SearchResult(m, hw, job, headroom_gib * GIB, n, rejected, table, over, runtime, pins=pins,
                          precision=precision)
    if len(table) == 0 and len(over) == 0:
        result.sole_blockers, result.batch_suggestion = constraints.sole_blockers(
            m, hw, job, cols, allow_cross_node_tp, runtime.flash_attention, CHUNK_ROWS, runtime.microbatch_groups,
            runtime.cp_comm_overlap)
    if len(table) == 0 and len(over) and find_min_gpus:
        result.min_gpus_that_fit = smallest_fitting_gpus(m, hw, job, pins, capacity, allow_cross_node_tp,
                                                         precision, runtime)
    return result


# Layouts that do not fit are timed only among the CLOSEST_TIMED nearest to fitting: the closest table, the plot and
# the nothing-fits explanation show those, and timing the rest was most of a memory-bound search's work.
CLOSEST_TIMED = 2000


def _timed_if_fitting(m, hw, job, cols, precision, runtime, capacity):
    """step_columns for the rows that fit in `capacity`; the others get their memory and NaN times."""
    mem = memory_columns(m, hw, job, cols, precision, runtime)
    fit = sum(mem[0].values()) <= capacity
    if fit.all():
        return step_columns(m, hw, job, cols, precision, runtime, known_memory=mem)
    timed = step_columns(m, hw, job, {k: v[fit] for k, v in cols.items()}, precision, runtime,
                         known_memory=({k: v[fit] for k, v in mem[0].items()}, mem[1][fit]))
    out = {k: np.full(len(fit), np.nan if np.asarray(v).dtype.kind == "f" else 0, dtype=np.asarray(v).dtype)
           for k, v in timed.items()}
    for key, value in timed.items():
        out[key][fit] = value
    out.update({f"mem_{k}_bytes": v for k, v in mem[0].items()}, memory_bytes=sum(mem[0].values()), peak_stage=mem[1])
    return out


def _closest_timed(m, hw, job, overflowing, precision, runtime, capacity):
    """The CLOSEST_TIMED layouts of `overflowing` ((columns, memory bytes) of layouts that do not fit) nearest to
    fitting, timed, as a frame: least overflow first (ties: faster first, then in search order)."""
    memory_bytes = np.concatenate([mb for _, mb in overflowing])
    nearest = np.argsort(memory_bytes, kind="stable")[:CLOSEST_TIMED]
    cols = {k: np.concatenate([c[k] for c, _ in overflowing])[nearest] for k in overflowing[0][0]}
    df = _rows_to_frame(cols, step_columns(m, hw, job, cols, precision, runtime), job, capacity)
    df = df.assign(overflow_gib=df["memory_gib"] - capacity / GIB)
    return df.sort_values(["overflow_gib", "tokens_per_s"], ascending=[True, False]).reset_index(drop=True)


def _rows(columns: dict, mask) -> dict:
    if mask.all():                  # most chunks of a search that is not memory-bound: no copies
        return columns
    return {k: np.asarray(v)[mask] for k, v in columns.items()}


def _result_keys():
    return (["memory_bytes", "step_time_s", "num_microbatches", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu",
             "peak_stage", "dp_inner"] + [f"mem_{k}_bytes" for k in MEMORY_PARTS] + [f"{k}_s" for k in TIME_PARTS])


def _valid_chunks(m, hw, job, cols, allow_cross_node_tp, rejected=None, flash_attention=None, microbatch_groups=True,
                  cp_ring=True):
    """The valid candidates of `cols`, CHUNK_ROWS rows at a time (arrays stay small at any GPU count); each
    rejected candidate is counted under the first rule it breaks in `rejected`, when given."""
    for start in range(0, len(cols["tp"]), CHUNK_ROWS):
        chunk = {k: v[start:start + CHUNK_ROWS] for k, v in cols.items()}
        rule_list = constraints.rules(m, hw, job, chunk, allow_cross_node_tp, flash_attention, microbatch_groups,
                                      cp_ring)
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
                              flash_attention=runtime.flash_attention, microbatch_groups=runtime.microbatch_groups,
                              cp_ring=runtime.cp_comm_overlap):
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
    with a layout that fits (global batch kept), or None. A request below one unit tries the powers of two up to
    it first (a 2- or 4-GPU machine).

    Scans the next unit counts (at most 64 of them, up to 4x the request), then doubles, and when a doubled count
    fits, walks back up from the last count that did not (at most 64 evenly spaced unit counts in between); memory
    only, so it stays fast.
    """
    g = hw.alloc_gpus
    start, top = (job.gpus // g + 1) * g, scan_limit(hw, max_gpus)
    counts = counts_within_unit(job.gpus, g)
    counts += range(start, min(4 * max(job.gpus, g), start + 63 * g, top) + 1, g)
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


def cross_node_tp_unused(tp, hw: HardwareSpec) -> bool:
    """--allow-cross-node-tp changes nothing for a pinned TP that fits in one node of `hw` (as the job sees it:
    HardwareSpec.for_job); run_search refuses the flag then."""
    return is_int(tp) and tp <= hw.gpus_per_node


def counts_within_unit(gpus: int, unit: int) -> list[int]:
    """The powers of two above `gpus` and below one allocation unit of `unit` GPUs, which the scan for a count
    that fits tries before whole units."""
    return [2**k for k in range(1, unit.bit_length()) if gpus < 2**k < unit]


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


BUDGET_KEYWORDS = ("tokens", "price_usd_per_gpu_hour", "pue")     # every caller of pop_pins takes these itself


def pop_pins(kwargs: dict, caller: str = "search", taken: tuple[str, ...] = ("model", "gpus"),
             own: tuple[str, ...] = BUDGET_KEYWORDS) -> Pins:
    """Take the layout knobs (tp=8, recompute="full", ...) out of keyword arguments, with a `pins=Pins(...)` given
    there too (a knob given both ways is an error). What is left must be options of `run_search` that `caller`
    does not set itself (`taken`): a misspelt keyword is a TypeError naming `caller`, not run_search, and listing
    those options with the caller's own keywords (`own`)."""
    options = set(inspect.signature(run_search).parameters) - set(taken) - {"pins"}
    unknown = sorted(set(kwargs) - options - set(LAYOUT_KNOBS) - {"pins"})
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}; expected layout knobs "
                        f"({', '.join(LAYOUT_KNOBS)}), pins, or {', '.join(sorted(options | set(own)))}")
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
