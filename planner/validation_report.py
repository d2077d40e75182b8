"""`plan validate`'s outputs: the measured-vs-predicted table, its JSON document and CSV (one row per run)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.explain import recompute_label, zero_label
from planner.report import LAYOUT_KEYS, fmt_rate, plain, priced_with

_METRIC_LABELS = {"iteration_time_s": "step s", "tokens_per_s": "tokens/s", "tokens_per_s_per_gpu": "tokens/s/GPU",
                  "tflops_per_gpu": "TFLOP/s/GPU", "mfu": "MFU"}


def _fmt_metric(metric: str, value: float) -> str:
    return {"iteration_time_s": f"{value:.2f}", "tokens_per_s": fmt_rate(value), "tokens_per_s_per_gpu": f"{value:.0f}",
            "tflops_per_gpu": f"{value:.1f}", "mfu": f"{value:.1%}"}[metric]


def _validation_layout(p) -> str:
    if p.evaluation is None:
        return "-"
    r = p.evaluation.row
    star = {k: "*" if k in p.searched else "" for k in ("micro_batch", "vpp", "recompute", "zero_stage",
                                                         "sequence_parallel")}
    cp = f" CP{r['cp']}" if r["cp"] > 1 else ""
    return (f"TP{r['tp']}{cp} PP{r['pp']} DP{r['dp']} mb{r['micro_batch']}{star['micro_batch']} "
            f"v{r['vpp']}{star['vpp']} {recompute_label(r)}{star['recompute']} Z{zero_label(r)}{star['zero_stage']}"
            f"{' SP' + star['sequence_parallel'] if r['sequence_parallel'] else ''}")


def _run_hardware(run) -> str:
    """The run's profile, with its node network where the run's cluster had another (validate.RunNetwork)."""
    return run.hardware if run.network is None else f"{run.hardware} ({run.network.label})"


def validation_record(p) -> dict:
    rec = {"id": p.run.id, "group": p.run.group, "hardware": p.run.hardware, "gpus": p.run.gpus,
           "metric": p.metric, "measured": p.measured_value, "used_for_fit": p.used_for_fit,
           "searched_knobs": list(p.searched), "error": p.error,
           "assumptions": {str(k): str(v) for k, v in p.run.assumptions.items()}}
    if p.run.network is not None:
        rec["network"] = p.run.network.model_dump()
    if p.error is None:
        res = p.evaluation.result
        rec.update(predicted=p.predicted_value, throughput_error=p.throughput_error,
                   measured_step_time_s=p.measured_step_s, predicted_step_time_s=p.predicted_step_s,
                   fits=p.fits, memory_gib=plain(p.evaluation.row["memory_gib"]),
                   layout={k: plain(p.evaluation.row[k]) for k in LAYOUT_KEYS},
                   **priced_with(res.runtime, res.precision, res.hardware))
        if p.run.measured.memory_gib is not None:
            rec["measured_memory_gib"] = p.run.measured.memory_gib
    return rec


def validation_csv(preds) -> str:
    """One row per predicted run: the JSON record's numbers with the layout as columns (no assumptions text)."""
    import pandas as pd

    rows = []
    for p in preds:
        rec = validation_record(p)
        for key in ("assumptions", "runtime", "precision"):       # the JSON's nested context stays there
            rec.pop(key, None)
        rec["searched_knobs"] = " ".join(rec["searched_knobs"])
        rec.update(rec.pop("layout", {}))
        rec.update({f"network_{k}": v for k, v in rec.pop("network", {}).items()})
        rows.append(rec)
    return pd.DataFrame(rows).to_csv(index=False)


def validation_document(preds, stats, skipped: dict | None = None) -> dict:
    summary = {group: {k: plain(v) for k, v in values.items()} for group, values in stats.items()}
    return {"runs": [validation_record(p) for p in preds], "summary": summary,
            "skipped": [{"id": k, "reason": v} for k, v in (skipped or {}).items()],
            "notes": "throughput_error = measured step time / predicted step time - 1 (+ = planner optimistic); "
                     "searched_knobs were not stated by the source and take the planner's best choice"}


def print_validation(preds, stats, out: Console, skipped: dict | None = None) -> None:
    t = Table(title="Measured vs predicted (* = not stated by the source: the planner's best choice)",
              title_justify="left", header_style="bold")
    for col in ("run", "hardware", "GPUs", "layout", "metric", "measured", "predicted", "error", "memory", "set"):
        t.add_column(col, justify="right" if col in ("GPUs", "measured", "predicted", "error") else "left")
    for p in preds:
        if p.error is not None:
            t.add_row(p.run.id, _run_hardware(p.run), str(p.run.gpus), "-", _METRIC_LABELS[p.metric],
                      _fmt_metric(p.metric, p.measured_value), "-", "-", p.error, "")
            continue
        err = p.throughput_error
        style = "red" if abs(err) > 0.2 else ("yellow" if abs(err) > 0.08 else "green")
        mem = f"{p.evaluation.row['memory_gib']:.0f} GiB {'fits' if p.fits else 'OOM'}"
        if p.run.measured.memory_gib is not None:
            mem += f" (meas {p.run.measured.memory_gib:.0f})"
        t.add_row(p.run.id, _run_hardware(p.run), str(p.run.gpus), _validation_layout(p), _METRIC_LABELS[p.metric],
                  _fmt_metric(p.metric, p.measured_value), _fmt_metric(p.metric, p.predicted_value),
                  f"[{style}]{err:+.1%}[/{style}]", mem,
                  "fit" if p.used_for_fit else "held out")
    out.print(t)
    s = Table(title="Absolute throughput error", title_justify="left", header_style="bold")
    for col in ("group", "runs", "mean", "median", "max"):
        s.add_column(col, justify="left" if col == "group" else "right")
    for group, st in stats.items():
        bold = group in ("overall", "fit runs", "held-out runs")
        fmt = (lambda x: f"[bold]{x}[/bold]") if bold else str
        pct = (lambda x: "-") if st["runs"] == 0 else (lambda x: f"{x:.1%}")     # an empty group has no statistics
        s.add_row(fmt(group), fmt(st["runs"]), fmt(pct(st["mean"])), fmt(pct(st["median"])), fmt(pct(st["max"])))
    out.print(s)
    if skipped:
        k = Table(title=f"Not predicted: {len(skipped)} runs the planner cannot express", title_justify="left",
                  header_style="bold")
        k.add_column("run")
        k.add_column("why")
        for run_id, why in skipped.items():
            k.add_row(run_id, why)
        out.print(k)
