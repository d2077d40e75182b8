"""Plain-language reasons: why the winner beats the runner-up, and why the rest were rejected."""

from __future__ import annotations

import math

import numpy as np

from planner.cost.pipeline import bubble_ratio
from planner.cost.step import TIME_PARTS
from planner.specs.strategy import recompute_label as strategy_recompute_label, shard_group

_KNOB_LABELS = (("tp", "TP"), ("cp", "CP"), ("pp", "PP"), ("dp", "DP"), ("micro_batch", "micro-batch"), ("vpp", "VPP"),
                ("sequence_parallel", "SP"), ("zero_stage", "ZeRO"), ("dp_replicate", "DP replicas"))
_PART_LABELS = {"compute": "compute", "tp_comm": "TP communication", "cp_comm": "exposed CP communication",
                "pp_comm": "PP communication",
                "dp_comm": "exposed DP communication", "bubble": "pipeline bubble", "optimizer": "optimizer step"}


def recompute_label(row) -> str:
    """A table row's recompute, as specs.strategy.recompute_label writes it."""
    return strategy_recompute_label(row["recompute"], int(row.get("recompute_layers", 0) or 0))


def zero_label(row) -> str:
    """The ZeRO stage, and under hybrid sharding 'HSDP r x s': r replicas of s-rank shard groups (DP x CP / r)."""
    r = int(row.get("dp_replicate", 1) or 1)
    return str(row["zero_stage"]) + (f" HSDP {r}x{shard_group(int(row['dp']), int(row['cp']), r)}" if r > 1 else "")


HSDP_LEGEND = ("ZeRO n HSDP r x s: hybrid sharding, ZeRO stage n within groups of s ranks (DP x CP / r), replicated r "
               "times; gradients are all-reduced across the r groups.")


def layout_label(row) -> str:
    sp = "+SP" if row["sequence_parallel"] else ""
    cp = f" CP{row['cp']}" if row["cp"] > 1 else ""
    return (f"TP{row['tp']}{sp}{cp} PP{row['pp']}{'x' + str(row['vpp']) if row['vpp'] > 1 else ''} DP{row['dp']} "
            f"mb{row['micro_batch']} {recompute_label(row)} ZeRO-{zero_label(row)}")


def knob_differences(a, b) -> list[str]:
    """'TP 8 vs 4', ... for the knobs two rows set differently; SP as on/off and recompute as the table writes it
    (full of every layer vs full of the first N per chunk)."""
    def shown(row, k):
        return ("on" if row[k] else "off") if k == "sequence_parallel" else row[k]

    diffs = [f"{label} {shown(a, k)} vs {shown(b, k)}" for k, label in _KNOB_LABELS
             if a.get(k, 1) != b.get(k, 1)]                   # dp_replicate may be absent: 1 (rows of a table)
    if recompute_label(a) != recompute_label(b):
        diffs.append(f"recompute {recompute_label(a)} vs {recompute_label(b)}")
    return diffs


def why_first(table) -> str:
    """One line: what makes row 0 faster than row 1 (the time parts that differ most, and the knobs)."""
    if len(table) == 0:
        return ""
    a = table.iloc[0]
    if len(table) == 1:
        return f"#1 {layout_label(a)} is the only layout that fits."
    b = table.iloc[1]
    gain = b["step_time_s"] / a["step_time_s"] - 1
    deltas = sorted(((b[f"{k}_s"] - a[f"{k}_s"], k) for k in TIME_PARTS), reverse=True)
    gained = sum(d for d, _ in deltas if d > 0)
    won = [(d, k) for d, k in deltas if d > 0.25 * gained][:2]
    lost = [(d, k) for d, k in deltas[::-1] if d < -0.25 * gained][:2]
    wins = [f"{_PART_LABELS[k]} {d:.3g} s shorter" for d, k in won]
    losses = [f"{_PART_LABELS[k]} {-d:.3g} s longer" for d, k in lost]
    # the parts named need not add up to the net: say what the others add, when it is a tenth of the net or more
    net = b["step_time_s"] - a["step_time_s"]
    rest = net - sum(d for d, _ in won + lost)
    if abs(rest) >= 0.1 * abs(net) and abs(rest) >= 1e-3 * a["step_time_s"]:
        losses.append(f"other parts {abs(rest):.3g} s {'longer' if rest < 0 else 'shorter'}, {net:.3g} s net")
    knobs = knob_differences(a, b)
    if gain < 5e-5 and a["memory_gib"] >= b["memory_gib"] and a["pp"] >= b["pp"]:
        return (f"#1 and #2 are equally fast (within 0.005%) ({', '.join(knobs) if knobs else 'same knobs'}; "
                f"#2 is {layout_label(b)}).")
    if gain < 1e-3:
        tie = ("uses less memory" if a["memory_gib"] < b["memory_gib"] else
               "has fewer pipeline stages" if a["pp"] < b["pp"] else "is marginally faster")
        close = "equally fast" if gain < 5e-5 else f"within {100 * gain:.2f}% of each other"
        return (f"#1 and #2 are {close}; #1 {tie} "
                f"({', '.join(knobs) if knobs else 'same knobs'}; #2 is {layout_label(b)}).")
    why = "; ".join(wins + ([f"despite {', '.join(losses)}"] if losses else []))
    return (f"#1 is {100 * gain:.1f}% faster than #2: {why} "
            f"({', '.join(knobs) if knobs else 'same knobs'}; #2 is {layout_label(b)}).")


def rejection_summary(considered: int, rejected: dict[str, int], kept: int) -> str:
    parts = ", ".join(f"{reason}: {count:,}" for reason, count in sorted(rejected.items(), key=lambda kv: -kv[1]))
    return (f"{considered:,} layout{'s' * (considered != 1)} considered, {kept:,} fit"
            + (f"; rejected: {parts}." if parts else "."))


def small_batch_note(job) -> str | None:
    """The model's default global batch (a preset's source may be a small benchmark's) of fewer sequences than GPUs:
    DP divides both the GPU count and the batch (DP x micro-batch divides it), so TP x CP x PP spans at least
    gpus / gcd(gpus, batch) GPUs. For the default only (the caller knows): a batch the user chose is meant."""
    if job.global_batch >= job.gpus:
        return None
    return (f"Note: the model's default global batch ({job.global_batch} sequence{'s' * (job.global_batch != 1)}) "
            f"is smaller than the {job.gpus} GPUs, so the model-parallel group (TP x CP x PP) spans at least "
            f"{job.gpus // math.gcd(job.gpus, job.global_batch)} GPUs; --global-batch or --global-batch-tokens sets "
            "yours.")


def bubble_line(row) -> str:
    """The bubble formula with this layout's numbers (Narayanan et al. 2021 §2.2)."""
    p, v, m = int(row["pp"]), int(row["vpp"]), int(row["num_microbatches"])
    if p == 1:
        return "no pipeline: no bubble."
    kind = "interleaved 1F1B" if v > 1 else "1F1B"
    # The share of the step is measured against the whole step (communication and optimizer included), as the
    # time-by-part table shows it, not r/(1 + r), which counts only compute and bubble.
    share = float(row["bubble_s"]) / max(float(row["step_time_s"]), 1e-300)
    return (f"bubble ({kind}) = (p-1)/(v*m) = ({p}-1)/({v}*{m}) = {float(bubble_ratio(p, m, v)):.1%} of the ideal "
            f"time, {share:.1%} of the step ({row['bubble_s']:.3g} s).")


def _dp_cp_spread(t: int, c: int, p: int, d: int, g: int) -> tuple[int, int, int]:
    """(nodes, fewest, most members per node) of the DP x CP groups in the tp-cp-pp-dp order, by enumeration: the
    ranks sharing a TP and a PP index, on nodes of g."""
    r = np.arange(t * c * p * d)
    group = (r % t) * p + (r // (t * c)) % p
    pairs, counts = np.unique(group * (r[-1] // g + 1) + r // g, return_counts=True)
    owner = pairs // (r[-1] // g + 1)
    spans = np.bincount(owner)
    crossing = spans[owner] > 1
    if not crossing.any():
        return 1, c * d, c * d
    return int(spans.max()), int(counts[crossing].min()), int(counts[crossing].max())


def _spread(nodes: int, fewest: int, most: int, link: str) -> str:
    """Where a group's ranks sit: one node, one rank per node, or k (or fewest-most) ranks on each of its nodes."""
    if nodes == 1:
        return f"inside one node, on {link}."
    if most == 1:
        return f"across {nodes} nodes, one rank per node: all on the NICs."
    per = f"{most}" if fewest == most else f"{fewest}-{most}"
    return f"across {nodes} nodes, {per} ranks per node: {link} inside and the NICs between, at once."


def placement_lines(row, hw) -> list[str]:
    """Which collectives stay inside a node (NVLink, or a mesh's links) and which cross nodes, for this layout's rank
    order."""
    from planner.cost.comm import group_nodes, placement_strides, pp_crosses_nodes

    t, c, p, d, g = int(row["tp"]), int(row["cp"]), int(row["pp"]), int(row["dp"]), hw.gpus_per_node
    dp_inner = row["placement"].endswith("dp-pp")
    lines = []
    link = "NVLink" if hw.intra_topology == "switch" else "the node's mesh links"     # MI300X: Infinity Fabric
    world = t * c * p * d
    if hw.domain_gpus > g:                             # HardwareSpec.for_job: the job fills segments of a domain
        lines.append(f"{world} GPUs as {world // g} segments of {g} ({g // hw.alloc_gpus} hosts of {hw.alloc_gpus}), "
                     f"each inside one {hw.domain_gpus}-GPU NVLink domain (Slurm --segment {g // hw.alloc_gpus}): "
                     "a node below is a segment.")
    elif hw.alloc_gpus < g < world:                    # hosts smaller than the domain: whole domains in order
        rest = f" and {world % g} GPUs of another" if world % g else ""
        lines.append(f"{world} GPUs fill {world // g} whole {g}-GPU NVLink domain{'s' * (world // g > 1)}{rest}, "
                     "in rank order.")
    nodes, _, _ = group_nodes(t, 1, g, world)
    lines.append(f"TP ({t}): " + ("no TP communication." if t == 1 else
                 f"inside one node, on {link}." if nodes == 1 else f"spans {nodes} nodes: {link} inside, NICs across."))
    if c > 1:
        lines.append(f"CP ({c}): K/V exchange " + _spread(*group_nodes(c, t, g, world), link))
    dp_stride = int(placement_strides(t, p, d, dp_inner, c)[0])
    name = f"DP x CP ({d} x {c})" if c > 1 else f"DP ({d})"
    if d * c == 1:
        lines.append(f"{name}: no gradient reduction.")
    elif c == 1 or dp_stride == t * c:                 # one group of d·c ranks: DP next to CP (or no CP)
        lines.append(f"{name}: " + _spread(*group_nodes(d * c, t if c > 1 else dp_stride, g, world), link))
    else:                                              # PP between CP and DP: counted rank by rank
        lines.append(f"{name}: " + _spread(*_dp_cp_spread(t, c, p, d, g), link))
    r = int(row.get("dp_replicate", 1) or 1)
    if r > 1:                                          # the ZeRO collectives stay in the inner d/r DP ranks (x CP)
        shard_d = d // r
        group = (_spread(*group_nodes(shard_d * c, t if c > 1 else dp_stride, g, world), link)
                 if c == 1 or dp_stride == t * c else _spread(*_dp_cp_spread(t, c, p, shard_d, g), link))
        lines.append(f"  hybrid sharding: ZeRO within groups of {shard_d * c} ranks, {group[0].lower()}{group[1:]}")
        lines.append(f"  gradient shards all-reduced across the {r} groups: "
                     + _spread(*group_nodes(r, dp_stride * shard_d, g, world), link))
    if p == 1:
        lines.append(f"PP ({p}): no pipeline.")
    elif pp_crosses_nodes(t, p, d, dp_inner, g, c):
        # every pipeline's boundaries (rank r + i·stride, r a first-stage rank): the one crossing most paces them all
        stride = int(placement_strides(t, p, d, dp_inner, c)[1])
        ranks = np.arange(t * c * p * d)
        first = ranks[(ranks // stride) % p == 0]
        nodes = (first[:, None] + stride * np.arange(p)[None, :]) // g
        per_pipeline = (nodes[:, 1:] != nodes[:, :-1]).sum(axis=1)
        crossing, least = int(per_pipeline.max()), int(per_pipeline.min())
        lines.append(f"PP ({p}): " + ("every stage boundary crosses nodes: P2P over the NICs." if least == p - 1 else
                     f"{'' if least == crossing else 'up to '}{crossing} of {p - 1} stage boundaries "
                     f"{'crosses' if crossing == 1 and least == crossing else 'cross'} nodes: P2P "
                     "over the NICs there (the slowest "
                     f"boundary paces the pipeline), on {link} elsewhere."))
    else:
        lines.append(f"PP ({p}): neighbouring stages share a node: P2P on {link}.")
    return lines


def causal_half_share(m, job, rt) -> float:
    """Model FLOPs with causal attention counted at half (as FlashAttention computes it) over the count `rt` prices
    MFU with: the factor that turns any layout's MFU of this job into the halved convention's (1 when the runtime
    halves it already)."""
    from planner.cost.flops import model_flops_per_step

    if rt.causal_flops_halved:
        return 1.0
    full, half = (float(model_flops_per_step(m, job.seq_len, job.global_batch, h)) for h in (False, True))
    return half / full


def halved_mfu(mfu, m, job, rt) -> float | None:
    """`mfu` with causal attention counted at half, where that moves it a point or more (at long sequences attention
    is a large share of the FLOPs); else None."""
    halved = mfu * causal_half_share(m, job, rt)
    return halved if mfu - halved >= 0.01 else None


def mfu_convention(m, job, rt, best_mfu=None) -> tuple[str, str]:
    """(How MFU counts attention, and a sentence with the halved figures when halving moves `best_mfu` a point or
    more; else "")."""
    some = "" if m.window_layers is None else f" on {m.window_layers} of {m.layers} layers"
    window = (f"attention within the {m.sliding_window:,}-token sliding window{some}, " if m.window_binds(job.seq_len)
              else "causal attention ")
    if rt.causal_flops_halved:
        return f"MFU: model FLOPs ({window}counted at half)", ""
    halved = None if best_mfu is None else halved_mfu(best_mfu, m, job, rt)
    line = "" if halved is None else (f" Counting causal attention at half, as FlashAttention computes it, every MFU "
                                      f"is x{causal_half_share(m, job, rt):.2f} (#1: {halved:.1%}).")
    return f"MFU: model FLOPs (PaLM convention, {window}not halved)", line


def attention_notes(row, m, job, rt) -> list[str]:
    """What the MFU convention and a CP ring do to the figures of a layout: PaLM's MFU counts causal attention in
    full while FlashAttention computes half of it (at long sequences that alone is points of MFU); a ring runs
    attention as one kernel per K/V chunk plus merges, launches counted under compute (compute.layer_kernel_count)."""
    lines = []
    if (halved := halved_mfu(float(row["mfu"]), m, job, rt)) is not None:
        lines.append(f"MFU counts causal attention in full (PaLM's convention); FlashAttention computes half of "
                     f"it: counted at half, MFU is {halved:.1%}.")
    cp = int(row.get("cp", 1))
    if cp > 1 and rt.cp_comm_overlap:
        merges = f"{cp - 1} merge{'s' if cp > 2 else ''}"
        lines.append(f"CP ring: each layer's attention runs as {cp} partial kernels and {merges} per pass "
                     "(one per K/V chunk); their launches count under compute, not cp_comm.")
    return lines


def state_notes(row, rt, precision) -> list[str]:
    """How one layout's gradients are accumulated and its parameters stored, where that is not the default."""
    notes = []
    if row["zero_stage"] == 3:
        notes.append("Gathered: ZeRO-3's full-width units at their peak (the unit being computed, the next one "
                     "prefetched, the gradient being made and the previous one waiting for its reduce-scatter).")
    if not rt.grad_accumulation_fusion and int(row["num_microbatches"]) > 1:
        notes.append("Compute includes adding each micro-batch's weight gradient to the accumulated one in a kernel "
                     "of its own (no gradient-accumulation fusion); Megatron's --gradient-accumulation-fusion saves "
                     "it.")
    if precision.params_are_master:
        notes.append("Weights are the fp32 parameters, the optimizer's master copy (--fp32-params): "
                     + ("ZeRO-3 holds bf16 casts only of the gathered units." if row["zero_stage"] == 3
                        else "their bf16 casts are held through forward and backward, the master sharded with the "
                             "optimizer states."))
    return notes


def price_note(df, hardware: str | None = None) -> str | None:
    """Whose prices a table's costs use: one provider's, the user's, or (a warning) several providers', which are
    not like for like; and which rows have no price (a profile without one: `hardware` names it where the table has
    no hardware column); None without costs."""
    if "price_provider" not in df or "cost_usd" not in df:
        return None
    priced = df[df["cost_usd"].notna() & df["price_provider"].notna()]
    by: dict[str, list[str]] = {}
    for key, provider in zip(priced.get("hardware", priced.index.astype(str)), priced["price_provider"]):
        by.setdefault(provider, []).append(str(key))
    notes = []
    if len(by) == 1:
        provider = next(iter(by))
        notes.append("Costs use your --price-per-gpu-hour." if provider == "given" else
                     f"Costs use the profile's {provider} on-demand price (`plan hardware`; --price-per-gpu-hour for "
                     "yours).")
    elif by:
        listing = "; ".join(f"{p}: {', '.join(keys)}" for p, keys in sorted(by.items()))
        notes.append(f"Costs use prices from different providers ({listing}), not like for like: the profiles' "
                     "prices are dated on-demand rates (`plan hardware`).")
    # rows with a rate but no price (rows without a layout that fits have neither: NaN > 0 is False)
    unpriced = df[df["price_provider"].isna() & (df["tokens_per_s"] > 0)]
    if len(unpriced):
        names = sorted(set(unpriced["hardware"].astype(str))) if "hardware" in unpriced else [hardware] * bool(hardware)
        several = len(names) > 1
        which = f"the {', '.join(names)} profile{'s' * several}" if names else "the hardware profile"
        notes.append(f"Cost n/a: {which} {'carry' if several else 'carries'} no sourced price; --price-per-gpu-hour "
                     f"gives one{' (to every row)' if several or len(by) else ''}.")
    return " ".join(notes) or None
