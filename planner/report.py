"""Outputs: rich tables, the JSON contract and CSV. Human units (GiB = 2^30 bytes, s) only here at the edge."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from planner.cost.memory import MEMORY_PARTS
from planner.cost.params import total_params
from planner.cost.step import TIME_PARTS
from planner.explain import (HSDP_LEGEND, attention_notes, bubble_line, causal_half_share, layout_label,
                             mfu_convention, placement_lines, price_note, recompute_label, rejection_summary,
                             small_batch_note, state_notes, why_first, zero_label)
from planner.search import SearchResult, counts_within_unit, min_gpus_text
from planner.whatif import suggestions

_CONVENTIONS = {
    "mfu": "model FLOPs (PaLM: 6N + 12*L*q*s per token, attention {attention}) / (step * GPUs * "
           "dense 16-bit peak: bf16, fp16 where the GPU has no bf16); excludes recomputation",
    "hfu": "as MFU, plus recomputed forward FLOPs (full: every layer, full(k): k per chunk; selective: attention "
           "core; op: every 2nd matmul)",
    "memory": "GiB = 2^30 bytes, per GPU on the most loaded pipeline stage",
}
_CONTRACT_KEYS = ("tp", "cp", "pp", "dp", "micro_batch", "num_microbatches", "global_batch", "vpp", "sequence_parallel",
                  "recompute", "recompute_layers", "zero_stage", "dp_replicate", "fits", "memory_gib")
LAYOUT_KEYS = _CONTRACT_KEYS[:_CONTRACT_KEYS.index("fits")]     # the layout part of a record
_AFTER_KEYS = ("step_time_s",)
_TAIL_KEYS = ("tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "placement", "peak_stage")
BUDGET_KEYS = ("train_tokens", "time_to_train_days", "gpu_hours", "price_usd_per_gpu_hour", "cost_usd",
               "price_provider", "pue", "energy_mwh")


def conventions(m, job, rt) -> dict:
    """How the figures count: the MFU text says whether causal attention is halved (the runtime's
    causal_flops_halved), and mfu_causal_half_share is the factor that turns every MFU of the job into the halved
    count (1 when it is halved already)."""
    attention = "halved for causality" if rt.causal_flops_halved else "not halved for causality"
    return {**_CONVENTIONS, "mfu": _CONVENTIONS["mfu"].format(attention=attention),
            "mfu_causal_half_share": round(causal_half_share(m, job, rt), 4)}


def plain(value):
    """numpy scalars -> JSON-ready Python values."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def config_record(row) -> dict:
    """One layout in the public JSON shape (names are the stable interface)."""
    rec = {k: plain(row[k]) for k in _CONTRACT_KEYS}
    rec["memory_breakdown_gib"] = {k: plain(row[f"{k}_gib"]) for k in MEMORY_PARTS}
    rec.update({k: plain(row[k]) for k in _AFTER_KEYS})
    rec["time_breakdown_s"] = {k: plain(row[f"{k}_s"]) for k in TIME_PARTS}
    rec.update({k: plain(row[k]) for k in _TAIL_KEYS})
    for key in ("overflow_gib",) + BUDGET_KEYS:
        if key in row:
            rec[key] = plain(row[key])
    return rec


def priced_with(runtime, precision, hardware=None) -> dict:
    """The training stack's runtime features and bytes per element a result was priced with, JSON-ready. On
    `hardware` (a HardwareSpec) the runtime is as it runs there (FlashAttention resolved); without it, as given
    (flash_attention None: as each profile runs it)."""
    if hardware is not None:
        runtime = runtime.for_hardware(hardware)
    return {"runtime": {k: plain(v) for k, v in asdict(runtime).items()},
            "precision": {k: plain(v) for k, v in asdict(precision).items()}}


def _context(result: SearchResult) -> dict:
    """What a record was priced on: the model, the hardware as this job is placed (a renamed profile names its
    network), the job's GPUs and sequence length, the memory limit, the runtime and the precision, so that a record
    can be checked, and re-priced, alone."""
    return {"model": {"name": result.model.name, "params": total_params(result.model)},
            "hardware": {"name": result.hardware.name, "gpus_per_node": result.hardware.gpus_per_node},
            "gpus": result.job.gpus, "seq_len": result.job.seq_len,
            "memory_capacity_gib": result.capacity_bytes / 2**30,
            **priced_with(result.runtime, result.precision, result.hardware)}


def pinned_record(ev) -> dict:
    """A pinned layout's JSON: its config, headed by the job's context as in a search."""
    return {**_context(ev.result), **config_record(ev.row)}


def result_document(result: SearchResult, top: int) -> dict:
    """The JSON contract: model, hardware, gpus, considered, rejected, configs (best first)."""
    table = result.table.head(top)
    doc = {
        **_context(result),
        "global_batch": result.job.global_batch,
        "considered": result.considered,
        "rejected": dict(result.rejected),
        "configs": [config_record(r) for _, r in table.iterrows()],
        "why_first": why_first(result.table),
        "conventions": conventions(result.model, result.job, result.runtime),
    }
    if len(result.table) == 0:
        doc["closest"] = [config_record(r) for _, r in result.closest.head(top).iterrows()]
        doc["min_gpus_that_fit"] = result.min_gpus_that_fit
    return doc


def json_text(doc) -> str:
    return json.dumps(doc, indent=2) + "\n"


def to_json(result: SearchResult, top: int) -> str:
    return json_text(result_document(result, top))


def to_csv(result: SearchResult, top: int) -> str:
    table = result.table if len(result.table) else result.closest
    return table.head(top).assign(hardware=result.hardware.name).to_csv(index=False)


def _fmt_params(n: float) -> str:
    """405.9B, 8.0B; below a billion in millions (GPT-2's 124M, not 0.1B)."""
    return f"{n / 1e9:.1f}B" if n >= 999.5e6 else f"{n / 1e6:.3g}M"      # the unit after rounding: no "1000M"


def _fmt_step(x: float) -> str:
    """Step seconds to two decimals, or three significant figures below a second (0.0612, not 0.06)."""
    return f"{x:.2f}" if x >= 0.995 else f"{x:.3g}"                  # 0.9996 is "1.00", not "1"


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


def layouts_table(df, title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    budget = "time_to_train_days" in df
    cp = bool(len(df)) and bool((df["cp"] > 1).any())          # the CP column appears when a row uses it
    for name in ("#", "TP") + (("CP",) if cp else ()) + ("PP", "DP", "mb", "m", "VPP", "SP", "recompute", "ZeRO",
                                                          "memory GiB", "dominant", "step s", "tokens/s",
                                                          "TFLOP/s/GPU", "MFU") + (("days", "cost") if budget else ()):
        t.add_column(name, justify="left" if name in ("recompute", "dominant") else "right")
    for i, (_, r) in enumerate(df.iterrows(), 1):
        dominant = max(MEMORY_PARTS, key=lambda k: r[f"{k}_gib"])
        mem = f"{r['memory_gib']:.1f} {'fits' if r['fits'] else 'OOM'}"
        extra = (f"{r['time_to_train_days']:,.1f}", _money(r["cost_usd"])) if budget else ()
        t.add_row(str(i), str(r["tp"]), *((str(r["cp"]),) if cp else ()), str(r["pp"]), str(r["dp"]),
                  str(r["micro_batch"]),
                  str(r["num_microbatches"]), str(r["vpp"]), "yes" if r["sequence_parallel"] else "no",
                  recompute_label(r), zero_label(r), mem, dominant, _fmt_step(r['step_time_s']),
                  fmt_rate(r["tokens_per_s"]), f"{r['tflops_per_gpu']:.0f}", f"{r['mfu']:.1%}", *extra)
    return t


MAX_TABLE_ROWS = 500      # a terminal table longer than this is unreadable (and slow to lay out); CSV/JSON take all


def print_search(result: SearchResult, top: int, out: Console, err: Console, default_batch: bool = False) -> None:
    """The ranked table and its notes; `default_batch`: the global batch is the model's own (no batch flag given)."""
    m, hw, job = result.model, result.hardware, result.job
    shown = len(result.table) if len(result.table) else len(result.closest)
    if top > MAX_TABLE_ROWS and shown > MAX_TABLE_ROWS:
        of = f"{shown:,} layouts" if top >= shown else f"the {top:,} rows asked for ({shown:,} layouts ranked)"
        err.print(f"Showing the first {MAX_TABLE_ROWS:,} of {of}; --format csv or json gives all "
                  f"{min(top, shown):,}.")
    top = min(top, MAX_TABLE_ROWS)
    cap = result.capacity_bytes / 2**30
    head = (f"{m.name} ({_fmt_params(total_params(m))} params) on {job.gpus} x {hw.name}; seq {job.seq_len}, "
            f"global batch {job.global_batch} sequence{'s' * (job.global_batch != 1)} ({_binary_count(job.tokens_per_step)} tokens); "
            f"memory limit {cap:.1f} GiB per GPU")
    if len(result.table):
        rows = result.table.head(top)
        out.print(layouts_table(rows, head))
        if (rows["dp_replicate"] > 1).any():
            out.print(HSDP_LEGEND)
        out.print(why_first(result.table))
        if "time_to_train_days" in rows:
            out.print(budget_line(rows.iloc[0], "#1's training budget"))
        for note in filter(None, (price_note(result.table, hw.name), small_batch_note(job) if default_batch else None)):
            out.print(note)
    else:
        pins = {k: v for k, v in result.pins.__dict__.items() if v is not None}
        pinned = f" with {', '.join(f'{k}={v}' for k, v in pins.items())}" if pins else ""
        err.print(f"Nothing fits: no valid layout of {m.name} on {job.gpus} x {hw.name}{pinned} fits in {cap:.1f} "
                  "GiB" + (" (other layouts may: drop a pin to search them)." if pins else "."))
        if len(result.closest):
            out.print(layouts_table(result.closest.head(top), head + " (closest, none fits)"))
            best = result.closest.iloc[0]
            tight = best["memory_gib"] <= hw.hbm_bytes / 2**30
            err.print(f"Closest: {layout_label(best)} needs {best['memory_gib']:.1f} GiB, "
                      f"{best['overflow_gib']:.1f} GiB over" + (f", but under the {hw.hbm_bytes / 2**30:.1f} GiB of "
                      "HBM: tight, inside the fragmentation headroom; --headroom-gib 0 accepts it." if tight else "."))
        unit = "hosts" if hw.gpus_per_host else "nodes"
        if len(result.closest):
            within = " or ".join(map(str, counts_within_unit(result.job.gpus, hw.alloc_gpus)))
            within = f"{within} GPUs, then " if within else ""
            err.print(f"Smallest GPU count ({within}whole {hw.alloc_gpus}-GPU {unit}) with a layout that fits"
                      f"{' these pins' if pins else ''}: {min_gpus_text(result)}.")
    out.print(rejection_summary(result.considered, result.rejected, len(result.table)))
    unfused = ("" if result.runtime.flash_attention else "; attention unfused (no FlashAttention)") + (
        "; element-wise kernels eager (no torch.compile)" if result.runtime.eager_elementwise else "") + (
        "; PyTorch's cross-entropy on fp32 logits" if not result.runtime.fused_cross_entropy else "") + (
        "; gradients accumulated by a separate add per micro-batch (no fusion)"
        if not result.runtime.grad_accumulation_fusion else "") + (
        "; fp32 parameters as the master weights" if result.precision.params_are_master else "")
    convention, halved = mfu_convention(result.model, result.job, result.runtime,
                                        float(result.table["mfu"].iloc[0]) if len(result.table) else None)
    out.print(f"{convention} / dense {hw.mixed_precision} peak; memory in GiB{unfused}.{halved}")


def print_breakdown(ev, out: Console) -> None:
    """The full memory and time breakdown of one layout."""
    r, res = ev.row, ev.result
    hw, m = res.hardware, res.model
    hbm = hw.hbm_bytes / 2**30
    verdict = "fits" if ev.fits else "does NOT fit"
    if not ev.fits and r["memory_gib"] <= hbm:      # inside the fragmentation headroom, not beyond the HBM
        verdict += (f" (it is under the {hbm:.1f} GiB of HBM, inside the {hbm - ev.capacity_gib:.1f} GiB kept free "
                    f"for fragmentation: tight; --headroom-gib 0 accepts it)")
    out.print(f"[bold]{m.name} on {res.job.gpus} x {hw.name}: {layout_label(r)}[/bold]")
    out.print(f"Memory per GPU (most loaded stage: {r['peak_stage']}, counting from 0): {r['memory_gib']:.1f} GiB of "
              f"{ev.capacity_gib:.1f} GiB usable -> {verdict}; dominated by {ev.dominant_memory}.")
    mt = Table(header_style="bold", title=f"Memory per GPU against {hbm:.1f} GiB of HBM", title_justify="left")
    for col in ("part", "GiB", "share", f"of HBM ({_BAR} = {hbm / _BAR_WIDTH:.1f} GiB)"):
        mt.add_column(col, justify="right" if col in ("GiB", "share") else "left")
    for k, v in ev.memory_gib.items():
        if k == "gathered" and v == 0:                 # only ZeRO-3 gathers units
            continue
        mt.add_row(k, f"{v:.2f}", f"{v / r['memory_gib']:.0%}", _bar(v, hbm))
    mt.add_row("[bold]total[/bold]", f"[bold]{r['memory_gib']:.2f}[/bold]", "",
               _bar(r["memory_gib"], hbm) + f"  limit {ev.capacity_gib:.1f} GiB after headroom")
    out.print(mt)
    tt = Table(header_style="bold", title="Step time by part", title_justify="left")
    for col in ("part", "s", "share", ""):
        tt.add_column(col, justify="right" if col in ("s", "share") else "left")
    for k, v in ev.time_s.items():
        tt.add_row(k, f"{v:.3f}", f"{v / r['step_time_s']:.1%}", _bar(v, r["step_time_s"]))
    tt.add_row("[bold]step[/bold]", f"[bold]{r['step_time_s']:.3f}[/bold]", "", "")
    out.print(tt)
    n = int(r["num_microbatches"])
    out.print(f"{n} micro-batch{'es' if n != 1 else ''} of {r['micro_batch']} per pipeline; "
              f"{fmt_rate(r['tokens_per_s'])} tokens/s, {r['tflops_per_gpu']:.0f} TFLOP/s per GPU, "
              f"MFU {r['mfu']:.1%}, HFU {r['hfu']:.1%}.")
    for line in attention_notes(r, m, res.job, res.runtime) + state_notes(r, res.runtime, res.precision):
        out.print(line)
    if "time_to_train_days" in r:
        out.print(budget_line(r, "Training budget"))
    out.print(bubble_line(r))
    out.print(f"Rank order {r['placement']} (TP innermost):")
    for line in placement_lines(r, hw):
        out.print(f"  {line}")
    tips = suggestions(ev)
    if tips:
        out.print("What to change (one knob at a time):" if ev.fits else "To make it fit (one knob at a time):")
        for line in tips:
            out.print(f"  {line}")
    elif ev.fits:
        out.print("No single-knob change (recompute, SP, ZeRO, VPP, CP for DP, micro-batch) is faster and still fits.")
    else:
        out.print("No single-knob change makes it fit: search without pins (another TP, PP or CP split), or add GPUs.")


_BAR, _BAR_WIDTH = "█", 40


def budget_line(r, what: str) -> str:
    """Days, GPU-hours, cost and energy of one row's --tokens, with the price's source and the PUE."""
    provider = r.get("price_provider")
    cost = (f"{_money(r['cost_usd'])} ({'your price' if provider == 'given' else provider + ' price'})"
            if isinstance(provider, str) else "no price in the profile (--price-per-gpu-hour)")
    scale, unit = next((u for u in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")) if r["train_tokens"] >= u[0]),
                       (1, ""))
    return (f"{what} for {r['train_tokens'] / scale:.4g}{unit} tokens: {r['time_to_train_days']:,.1f} days, "
            f"{r['gpu_hours']:,.0f} GPU-hours, {cost}, {r['energy_mwh']:,.0f} MWh at PUE {r['pue']:g}.")


def _bar(value: float, whole: float) -> str:
    n = 0 if whole <= 0 else int(round(_BAR_WIDTH * min(max(value / whole, 0.0), 1.0)))
    return _BAR * n


# --- sweeps and hardware comparisons ------------------------------------------------------------------------------

def _money(x) -> str:
    if x != x:  # NaN: no price
        return "n/a"
    if x >= 999.995e12:                            # past $T a suffix stops helping: $1.34e+23, not $133784390694.64T
        return f"${x:.3g}"
    return "$" + _scaled(x, ((1.0, "", 0), (1e3, "k", 0), (1e6, "M", 2), (1e9, "B", 2), (1e12, "T", 2)))


def _binary_count(n: int) -> str:
    """Tokens in the unit the batch flags use (powers of 1024): 16.00Mi, 24.00Ki, 512."""
    return _scaled(n, ((1, "", 0), (2**10, "Ki", 2), (2**20, "Mi", 2), (2**30, "Gi", 2)))


def _scaled(x, units) -> str:
    """x in the largest of `units` ((scale, suffix, digits), ascending) it reaches, moved up one when the rounded
    figure reaches the next unit: $999,996 is $1.00M, not $1000k; 1,048,575 tokens are 1.00Mi, not 1024.00Ki."""
    i = max(j for j, (scale, _, _) in enumerate(units) if x >= scale or j == 0)
    if i + 1 < len(units) and round(x / units[i][0], units[i][2]) * units[i][0] >= units[i + 1][0]:
        i += 1
    scale, unit, digits = units[i]
    return f"{x / scale:.{digits}f}{unit}"


def summary_table(df, title: str, first: str) -> Table:
    """One row per GPU count (sweep) or per hardware (comparison), with budget columns when present."""
    t = Table(title=title, title_justify="left", header_style="bold")
    budget = "time_to_train_days" in df
    cols = [first, "layout", "memory GiB", "step s", "tokens/s", "MFU", "scaling"] if first == "GPUs" else \
        [first, "layout", "memory GiB", "step s", "tokens/s", "MFU"]
    if budget:
        cols += ["days", "GPU-hours", "cost", "MWh"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("layout", "hardware") else "right")
    for _, r in df.iterrows():
        key = f"{r['gpus']:,}" if first == "GPUs" else r["hardware"]
        if r.get("status") != "ok":
            why = f"{r.get('status', '-')}: {r['reason']}" if r.get("reason") else r.get("status", "-")
            t.add_row(key, why, *["-"] * (len(cols) - 2))
            continue
        cells = [key, layout_label(r), f"{r['memory_gib']:.1f}", _fmt_step(r['step_time_s']),
                 fmt_rate(r["tokens_per_s"]), f"{r['mfu']:.1%}"]
        if first == "GPUs":
            cells.append(f"{r['scaling_efficiency']:.0%}")
        if budget:
            cells += [f"{r['time_to_train_days']:,.1f}", f"{r['gpu_hours']:,.0f}", _money(r["cost_usd"]),
                      f"{r['energy_mwh']:,.0f}"]
        t.add_row(*cells)
    return t


def frame_document(title: str, df) -> dict:
    """A sweep's or comparison's JSON: its title, the model, sequence length and global batch, the runtime and
    precision its rows were priced with (the frame's attributes, which planner.sweep and compare_hardware set) and
    the rows."""
    job = {k: df.attrs[k] for k in ("model", "seq_len", "global_batch") if k in df.attrs}
    return {"title": title, **job, **priced_with(df.attrs["runtime"], df.attrs["precision"]),
            "rows": frame_records(df)}


def frame_records(df) -> list[dict]:
    """Sweep and comparison rows for JSON: a row with a layout is a config in the public shape (config_record,
    breakdowns nested as in a search) after its key (gpus or hardware), status and reason; any other row as is."""
    part_columns = {f"{k}_gib" for k in MEMORY_PARTS} | {f"{k}_s" for k in TIME_PARTS}
    records = []
    for row in df.to_dict(orient="records"):
        if row.get("status") == "ok" and all(k in row for k in _CONTRACT_KEYS):
            rec = {k: plain(row[k]) for k in ("gpus", "hardware", "status", "reason") if k in row}
            rec.update(config_record(row))
            rec.update({k: plain(v) for k, v in row.items() if k not in rec and k not in part_columns})
        else:                                       # no layout: what is known, not a config of nulls
            rec = {k: plain(v) for k, v in row.items()
                   if k in ("gpus", "hardware", "status", "reason") or plain(v) is not None}
        records.append(rec)
    return records


def models_table() -> Table:
    """`plan models`: the built-in model presets, smallest first."""
    from planner.specs.model import list_models

    t = Table(header_style="bold")
    for col in ("name", "aliases", "params", "layers", "hidden", "FFN", "heads", "KV", "vocab", "seq", "batch"):
        t.add_column(col, justify="left" if col in ("name", "aliases") else "right")
    for mf in sorted(list_models(), key=lambda f: total_params(f.to_spec())):
        s = mf.to_spec()
        t.add_row(s.name, ", ".join(mf.aliases), f"{total_params(s) / 1e9:.2f}B", str(s.layers), str(s.hidden),
                  str(s.ffn_hidden), str(s.heads), str(s.kv_heads), str(s.vocab), str(s.seq_len),
                  f"{s.global_batch_tokens // s.seq_len}")
    return t


def hardware_table() -> Table:
    """`plan hardware`: the built-in hardware profiles with their headline figures (GB = 1e9 bytes, GiB = 2^30)."""
    from planner.specs.hardware import hardware_aliases, list_hardware

    aliases = hardware_aliases()
    t = Table(header_style="bold")
    for col in ("name", "aliases", "description", "16-bit TFLOP/s", "HBM GiB", "HBM TB/s", "GPUs/node", "node GB/s",
                "NIC GB/s", "$/GPU-h"):
        t.add_column(col, justify="left" if col in ("name", "aliases", "description") else "right")
    for h in list_hardware():
        price = f"{h.price_usd_per_gpu_hour:.2f} {h.price_provider}" if h.price_usd_per_gpu_hour else "n/a"
        t.add_row(h.name, ", ".join(aliases.get(h.name, [])), h.description,
                  f"{h.peak_flops / 1e12:.0f} {h.mixed_precision}", f"{h.hbm_bytes / 2**30:.1f}",
                  f"{h.hbm_bw_bytes_per_s / 1e12:.2f}", str(h.gpus_per_node), f"{h.intra_bw_bytes_per_s / 1e9:.0f}",
                  f"{h.inter_bw_bytes_per_s / 1e9:.1f}", price)
    return t
