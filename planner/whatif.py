"""What to change: one-knob variants of a layout, evaluated together, and what each would buy."""

from __future__ import annotations

import numpy as np

from planner import constraints
from planner.cost.pipeline import chunk_layers, stage_layers
from planner.cost.step import KNOBS, step_columns
from planner.specs.strategy import RECOMPUTE, SEARCHED_RECOMPUTE, shard_group

GIB = 2**30
PARTIAL = "full recompute of "         # the label of a partial-recompute variant, before its layer count


def _variants(row, m) -> list[tuple[str, dict]]:
    base = {"tp": int(row["tp"]), "cp": int(row["cp"]), "pp": int(row["pp"]), "dp": int(row["dp"]),
            "micro_batch": int(row["micro_batch"]),
            "vpp": int(row["vpp"]), "sp": int(bool(row["sequence_parallel"])),
            "recompute": RECOMPUTE.index(row["recompute"]), "zero": int(row["zero_stage"]),
            "rc_layers": int(row.get("recompute_layers", 0)), "dp_replicate": int(row.get("dp_replicate", 1))}
    out = []
    full = RECOMPUTE.index("full")
    for rc in (RECOMPUTE.index(name) for name in SEARCHED_RECOMPUTE):
        if rc != base["recompute"] or (rc == full and base["rc_layers"]):
            name = "no" if rc == RECOMPUTE.index("none") else RECOMPUTE[rc]
            out.append((f"{name} recompute", {**base, "recompute": rc, "rc_layers": 0}))
    # Full recompute of part of each pipeline chunk (Megatron --recompute-num-layers): between none and full. Every
    # count is priced; suggestions keeps the fastest that fits (the fewest layers recomputed that fit).
    chunk = int(chunk_layers(m.layers, base["pp"], base["vpp"]))
    for k in sorted(set(range(1, chunk)) - {base["rc_layers"]}):
        out.append((f"{PARTIAL}{k} of {chunk} layers per chunk", {**base, "recompute": full, "rc_layers": k}))
    if base["tp"] > 1:
        out.append(("sequence parallelism " + ("off" if base["sp"] else "on"), {**base, "sp": 1 - base["sp"]}))
    if base["dp"] * base["cp"] > 1:
        for z in range(4):
            if z != base["zero"]:
                out.append((f"ZeRO-{z}", {**base, "zero": z, "dp_replicate": base["dp_replicate"] if z else 1}))
    if base["zero"]:
        out += _hybrid(base)
    mid = int(stage_layers(m.layers, base["pp"])[1])
    if base["pp"] > 1 and mid > 0:
        for v in (2, 3, 4, 6, 8):
            if v != base["vpp"] and mid % v == 0:
                out.append(_interleaved(base, v, mid // v, chunk))
    # Trade data parallelism for context parallelism (same GPUs): more micro-batches per pipeline and 1/CP of the
    # activations per rank, for the K/V exchange; by any power of two the degrees allow (a 128K sequence may need
    # CP 8 where CP 2 is not enough).
    for more, fewer in (("cp", "dp"), ("dp", "cp")):          # CP up from DP, then back down to DP
        f = 2
        while base[fewer] % f == 0:
            v = {**base, more: base[more] * f, fewer: base[fewer] // f}
            label = f"CP {v['cp']} with DP {v['dp']}"
            if v["dp"] % v["dp_replicate"] or shard_group(v["dp"], v["cp"], v["dp_replicate"]) < 2:   # as DP allows
                v["dp_replicate"] = 1
                label += " (no hybrid sharding: it needs DP-replicate to divide DP)" * (base["dp_replicate"] > 1)
            out.append((label, v))
            f *= 2
    for mb in (base["micro_batch"] // 2, base["micro_batch"] * 2):
        if mb >= 1:
            out.append((f"micro-batch {mb}", {**base, "micro_batch": mb}))
    return out


def _hybrid(base: dict) -> list[tuple[str, dict]]:
    """Hybrid sharding one step either way: shard groups half or twice as large, or over all DP ranks."""
    r, d, cp = base["dp_replicate"], base["dp"], base["cp"]
    out = [] if r == 1 else [("ZeRO over all DP ranks (no hybrid sharding)", {**base, "dp_replicate": 1})]
    for new in (r * 2, r // 2):
        if new > 1 and d % new == 0 and shard_group(d, cp, new) >= 2:
            out.append((f"hybrid sharding: {new} replicas of {shard_group(d, cp, new)}-rank shard groups",
                        {**base, "dp_replicate": new}))
    return out


def _interleaved(base: dict, v: int, new_chunk: int, chunk: int) -> tuple[str, dict]:
    """VPP v; a partial recompute keeps its share of the (smaller) chunks, at least one layer, all of them stated
    as every layer."""
    k = base["rc_layers"]
    if not k:
        return f"VPP {v} interleaving", {**base, "vpp": v}
    k = min(max(-(-k * new_chunk // chunk), 1), new_chunk)          # rounded up: never less memory saved
    return (f"VPP {v} interleaving, full recompute of {k} of {new_chunk} layers per chunk",
            {**base, "vpp": v, "rc_layers": 0 if k == new_chunk else k})


def suggestions(ev, limit: int = 4) -> list[str]:
    """Plain lines: what makes this layout fit (if it does not) or run faster (if it does), best first."""
    res, row = ev.result, ev.row
    variants = _variants(row, res.model)
    if not variants:
        return []
    cols = {k: np.array([v[k] for _, v in variants]) for k in KNOBS}
    rules = constraints.rules(res.model, res.hardware, res.job, cols, allow_cross_node_tp=True,
                              flash_attention=res.runtime.flash_attention,
                              microbatch_groups=res.runtime.microbatch_groups, cp_ring=res.runtime.cp_comm_overlap)
    _, valid = constraints.first_failure(rules, len(variants))
    out = step_columns(res.model, res.hardware, res.job, cols, precision=res.precision, runtime=res.runtime)
    cap = res.capacity_bytes
    base_mem, base_step = row["memory_gib"] * GIB, row["step_time_s"]
    # Of the partial-recompute counts, only the fastest that fits is worth a line (the others are slower or do not
    # fit); when none fits, none is shown.
    partial = np.array([label.startswith(PARTIAL) for label, _ in variants])
    fitting = valid & (out["memory_bytes"] <= cap)
    candidates = np.flatnonzero(partial & fitting)
    keep = ~partial
    if len(candidates):
        keep[candidates[np.argmin(out["step_time_s"][candidates])]] = True
    # A change another fitting change beats on both memory and time is not worth a line (with FlashAttention,
    # selective recompute keeps what no recompute keeps, at more time)
    mem_all, step_all = out["memory_bytes"], out["step_time_s"]
    for i in np.flatnonzero(fitting & keep):
        others = fitting & (np.arange(len(variants)) != i)
        if np.any(others & (mem_all <= mem_all[i]) & (step_all <= step_all[i])
                  & ((mem_all < mem_all[i] - 2**20) | (step_all < step_all[i] * (1 - 1e-6)))):
            keep[i] = False
    lines = []
    for i, (label, _) in enumerate(variants):
        if not (valid[i] and keep[i]):
            continue
        mem, step = out["memory_bytes"][i], out["step_time_s"][i]
        fits = mem <= cap
        dmem, dstep = (mem - base_mem) / GIB, step / base_step - 1
        if not ev.fits and fits:
            lines.append((0, dstep, f"{label}: {-dmem:.1f} GiB less, so it fits ({mem / GIB:.1f} GiB); "
                                    f"step {dstep:+.1%}."))
        elif ev.fits and fits and dstep < -0.005:
            why = ""
            old, new = row["bubble_s"] / base_step, out["bubble_s"][i] / step
            if out["bubble_s"][i] < row["bubble_s"] * 0.9 and f"{old:.0%}" != f"{new:.0%}":
                why = f" (bubble {old:.0%} -> {new:.0%} of the step)"
            lines.append((1, dstep, f"{label}: step {dstep:+.1%}{why}; memory {dmem:+.1f} GiB "
                                    f"({mem / GIB:.1f} GiB)."))
        elif ev.fits and dmem < -1.0 and dstep < 0.02:
            lines.append((2, dstep, f"{label}: saves {-dmem:.1f} GiB at {dstep:+.1%} step time."))
    return [text for _, _, text in sorted(lines)[:limit]]
