"""Launch settings: a layout written as the flags or config fragment of the framework that will run it, one module per
framework (megatron, torchtitan, deepspeed: each names its source), chosen here.

Mixed precision follows the GPU (HardwareSpec.mixed_precision): bf16, or, on a GPU without bf16 (V100), fp16 with
dynamic loss scaling, which Megatron and DeepSpeed write and torchtitan refuses.
"""

from __future__ import annotations

import json
from dataclasses import replace

from planner.errors import PlannerError
from planner.export import deepspeed, megatron, torchtitan
from planner.export.common import is_fp16, launch_orders, plan_line, rank_order
from planner.export.deepspeed import deepspeed_config
from planner.export.megatron import megatron_args
from planner.export.torchtitan import torchtitan_toml
from planner.search import repriced
from planner.specs.model import ModelSpec
from planner.specs.strategy import LAYOUT_KNOBS, Job, Precision, Runtime

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
__all__ = ["FRAMEWORKS", "best_supported", "blockers", "deepspeed_config", "export", "launch_orders",
           "megatron_args", "plan_line", "rank_order", "torchtitan_toml", "unsupported"]


def _check_framework(framework) -> None:
    if framework not in FRAMEWORKS:
        raise PlannerError("framework", f"got {framework!r}, expected one of {', '.join(FRAMEWORKS)}")


def blockers(framework: str, row, dtype: str = "bf16", capacity_gib: float | None = None,
             model: ModelSpec | None = None, transformer_engine: bool = True) -> list[str]:
    """Every reason `framework` cannot run this layout as planned (in mixed precision `dtype`); empty if it can.
    `capacity_gib`, the memory a GPU may use, also refuses a layout the framework would hold more memory for than
    planned (torchtitan's unsharded gradients under PP); `model` a layer split the framework cannot build
    (torchtitan's interleaved edge stages) or, without `transformer_engine` (HardwareSpec.fused_attention), a norm
    Megatron's local implementation cannot shard."""
    _check_framework(framework)
    is_fp16(dtype)                                      # refuses a dtype that is neither, for every framework
    if framework == "megatron":
        return megatron.blockers(row, model, transformer_engine)
    if framework == "torchtitan":
        return torchtitan.blockers(row, capacity_gib, model)
    return deepspeed.blockers(row, dtype)


def unsupported(framework: str, row, dtype: str = "bf16", capacity_gib: float | None = None,
                model: ModelSpec | None = None, transformer_engine: bool = True) -> str | None:
    """Why `framework` cannot run this layout as planned (in mixed precision `dtype`), or None: its first blocker
    (`capacity_gib`, `model`, `transformer_engine`: as blockers)."""
    return next(iter(blockers(framework, row, dtype, capacity_gib, model, transformer_engine)), None)


def _blocking(found: list[list[str]]) -> str:
    """What keeps a framework from every fitting layout, given each layout's blockers (none empty): a reason they
    all share (a pinned knob's, say), else each first reason with the number of layouts it stops, most first."""
    shared = set(found[0]).intersection(*found[1:])
    if shared:
        return next(w for w in found[0] if w in shared)
    counts: dict[str, int] = {}
    for why in found:
        counts[why[0]] = counts.get(why[0], 0) + 1
    return "; ".join(f"{w}: {n:,} of {len(found):,} layouts" for w, n in sorted(counts.items(), key=lambda x: -x[1]))


def export(framework: str, row, m: ModelSpec, job: Job, runtime: Runtime = Runtime(),
           dtype: str = "bf16", transformer_engine: bool = True,
           precision: Precision = Precision()) -> tuple[str, list[str]]:
    """(text, notes) for `framework` (one of FRAMEWORKS), in mixed precision `dtype` (bf16, or fp16 on a GPU without
    bf16: HardwareSpec.mixed_precision). Megatron and torchtitan carry their notes as comments in the text;
    DeepSpeed's JSON cannot, so its notes come back separately."""
    _check_framework(framework)
    if framework == "megatron":
        return megatron_args(row, m, job, runtime, dtype, transformer_engine, precision), []
    if framework == "torchtitan":
        return torchtitan_toml(row, m, job, dtype, runtime, precision), []
    cfg, notes = deepspeed_config(row, m, job, dtype, runtime, precision)
    return json.dumps(cfg, indent=2) + "\n", notes


def best_supported(framework: str, result) -> tuple[str, list[str]]:
    """The best fitting layout of a search that `framework` can run, as (text, notes)."""
    _check_framework(framework)
    dtype = result.hardware.mixed_precision
    if framework == "torchtitan" and is_fp16(dtype):           # before the rows: no layout changes the answer
        raise torchtitan.no_fp16(result.hardware.name)
    table = result.table
    if result.runtime.rank_order is not None and len(table):
        # a forced order: price every layout in the cheaper order some framework launches first, so the rows are
        # ranked by prices the pass below can only raise
        table = repriced(result, table, replace(result.runtime, rank_order=None))
    # The first supported row whose rank order the framework can launch, best first: stop there (iterating the
    # whole table took a second on large searches). Faster rows in an order it cannot launch are priced again in
    # its own order (no cheaper than before) and may still win.
    best, other_order, blocked = None, [], []
    capacity_gib, te = result.capacity_bytes / 2**30, result.hardware.fused_attention
    for _, r in table.iterrows():
        if why := blockers(framework, r, dtype, capacity_gib, result.model, te):
            blocked.append(why)          # kept for the refusal below, which needs every row's reasons
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
        why = _blocking(blocked) if len(table) else "no layout fits in memory"
        raise PlannerError("--export", f"no fitting layout that {framework} can run ({why})")
    overall = table.iloc[0]
    text, notes = export(framework, best, result.model, result.job, result.runtime, dtype, te, result.precision)
    gap = overall["tokens_per_s"] / best["tokens_per_s"] - 1
    same_knobs = all(best[k] == overall[k] for k in LAYOUT_KNOBS)
    if reordered:
        notes.insert(0, f"priced in {framework}'s rank order {best['placement']} (PP outermost)"
                        + (f": {gap:.1%} slower than the table's {overall['placement']}" if same_knobs else ""))
    if gap > 0 and not same_knobs:
        reason = unsupported(framework, overall, dtype, capacity_gib, result.model, te) or (
            f"its rank order {overall['placement']} (PP stages next to each other), which {framework} cannot launch")
        notes.insert(0, f"best layout {framework} can run; the overall best ({gap:.1%} faster) is not supported: "
                        f"{reason}")
    return text, notes
