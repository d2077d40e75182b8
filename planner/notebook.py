"""Notebook niceties: a readable HTML view of result tables (pandas Styler) and of one layout's breakdown."""

from __future__ import annotations

from html import escape

from planner.checks import checked_int
from planner.errors import PlannerError

_FORMATS = {"memory_gib": "{:.1f}", "step_time_s": "{:.2f}", "tokens_per_s": "{:,.0f}", "tflops_per_gpu": "{:.0f}",
            "mfu": "{:.1%}", "hfu": "{:.1%}", "time_to_train_days": "{:,.1f}", "gpu_hours": "{:,.0f}",
            "cost_usd": "${:,.0f}", "energy_mwh": "{:,.0f}", "scaling_efficiency": "{:.0%}",
            "tokens_per_s_per_gpu": "{:,.0f}"}
_PREFERRED = ("gpus", "hardware", "tp", "cp", "pp", "dp", "micro_batch", "num_microbatches", "vpp", "sequence_parallel",
              "recompute", "recompute_layers", "zero_stage", "dp_replicate", "fits", "memory_gib", "step_time_s",
              "tokens_per_s", "tflops_per_gpu", "mfu", "scaling_efficiency", "time_to_train_days", "cost_usd")


MAX_ROWS = 100     # a search has thousands of rows; a notebook cell showing them all stalls the browser


class StyledTable:
    """A formatted view of a result table: renders as HTML in Jupyter, `.to_html()` / `str()` elsewhere; `rows` is
    how many rows the table had before `style` kept the first ones."""

    def __init__(self, frame, rows: int | None = None):
        self.frame, self.rows = frame, len(frame) if rows is None else rows

    def to_html(self) -> str:
        html = self.frame.to_html(index=False, escape=True, border=0, classes="planner-table")
        if self.rows > len(self.frame):
            html += (f"<p>The first {len(self.frame):,} of {self.rows:,} rows; style(df, max_rows=None) shows "
                     "all.</p>")
        return html

    def _repr_html_(self) -> str:
        return self.to_html()

    def __str__(self) -> str:
        return self.frame.to_string(index=False)


def style(df, columns=None, max_rows: int | None = MAX_ROWS) -> StyledTable:
    """A readable view of a search, sweep or comparison table: the main columns, units formatted (no extra
    dependency: pandas' own Styler would need jinja2), its first `max_rows` rows (None: all)."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise PlannerError("df", f"got {type(df).__name__}, expected a DataFrame from planner.search, sweep or "
                                 "compare_hardware (an evaluation renders itself in Jupyter)")
    if isinstance(columns, str):                  # one column by name
        columns = [columns]
    cols = list(columns) if columns is not None else [c for c in _PREFERRED if c in df.columns]
    unknown = [c for c in cols if c not in df.columns]
    if unknown:
        raise PlannerError("columns", f"{', '.join(map(repr, unknown))} not in the table; expected some of "
                                      f"{', '.join(df.columns)}")
    if max_rows is not None:
        checked_int(max_rows, "max_rows")
    view = df[cols].head(max_rows).copy() if max_rows is not None else df[cols].copy()
    for c in cols:
        if c in _FORMATS:
            fmt = _FORMATS[c]
            view[c] = [fmt.format(v) if not pd.isna(v) else "-" for v in view[c]]     # NaN, None or pd.NA
    return StyledTable(view, len(df))


def evaluation_html(ev) -> str:
    """One layout: verdict, memory parts and time parts as small HTML tables."""
    from planner.explain import bubble_line, layout_label

    r = ev.row
    verdict = "fits" if ev.fits else "does NOT fit"
    mem = "".join(f"<tr><td>{escape(k)}</td><td style='text-align:right'>{v:.2f}</td></tr>"
                  for k, v in ev.memory_gib.items())
    tim = "".join(f"<tr><td>{escape(k)}</td><td style='text-align:right'>{v:.3f}</td></tr>"
                  for k, v in ev.time_s.items())
    return (f"<div><b>{escape(layout_label(r))}</b>: {r['memory_gib']:.1f} of {ev.capacity_gib:.1f} GiB, "
            f"{verdict}; step {r['step_time_s']:.3f} s, {r['tokens_per_s']:,.0f} tokens/s, MFU {r['mfu']:.1%}"
            f"<table style='display:inline-table;margin:8px'><tr><th>memory part</th><th>GiB</th></tr>{mem}"
            f"<tr><td><b>total</b></td><td style='text-align:right'><b>{r['memory_gib']:.2f}</b></td></tr></table>"
            f"<table style='display:inline-table;margin:8px'><tr><th>time part</th><th>s</th></tr>{tim}"
            f"<tr><td><b>step</b></td><td style='text-align:right'><b>{r['step_time_s']:.3f}</b></td></tr></table>"
            f"<div>{escape(bubble_line(r))}</div></div>")
