"""Figures (optional extra, from a checkout: pip install ".[plot]"). matplotlib is imported only here, only when asked."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from planner.cost.step import TIME_PARTS
from planner.errors import PlannerError
from planner.explain import layout_label
from planner.output import check_writable, write_atomic

_COLORS = {"compute": "#4C72B0", "tp_comm": "#DD8452", "cp_comm": "#DA8BC3", "pp_comm": "#937860", "dp_comm": "#C44E52",
           "bubble": "#8172B3", "optimizer": "#55A868"}


_NO_MATPLOTLIB = 'needs matplotlib, the optional extra: pip install ".[plot]" (from the planner checkout)'


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlannerError("--plot", _NO_MATPLOTLIB) from None
    matplotlib.use("Agg")           # files only, no display
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path) -> Path:
    """The --plot target, checked before any work: a .png or .svg name in a writable directory."""
    if Path(str(path)).suffix.lower() not in (".png", ".svg"):
        raise PlannerError("--plot", f"{path!r}: expected a file name ending in .png or .svg")
    if importlib.util.find_spec("matplotlib") is None:        # found without importing it: the check stays fast
        raise PlannerError("--plot", _NO_MATPLOTLIB)
    return check_writable(path, "--plot")


def _save(fig, path: Path, plt) -> None:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lower().lstrip("."), bbox_inches="tight", dpi=120)
    plt.close(fig)
    write_atomic(path, buf.getvalue(), flag="--plot")


def plot_search(result, path, top: int = 10) -> Path:
    """Left: step time by part for the top layouts (stacked bars). Right: step time against memory per GPU for
    every valid layout, the memory limit, and the fitting frontier (no fitting layout is both faster and smaller)."""
    p = check_plot_path(path)
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    head = result.table.head(top) if len(result.table) else result.closest.head(top)
    bottom = [0.0] * len(head)
    labels = [f"#{i + 1} {layout_label(r)}" for i, (_, r) in enumerate(head.iterrows())]
    for part in TIME_PARTS:
        values = head[f"{part}_s"].to_list()
        ax1.barh(labels, values, left=bottom, color=_COLORS[part], label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax1.invert_yaxis()
    ax1.set_xlabel("step time (s)")
    ax1.set_title("Step time by part, best first")
    # below the axes: bars of similar length fill the plot, so a legend inside would cover some of them
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(TIME_PARTS), fontsize=8, frameon=False)
    ax1.tick_params(axis="y", labelsize=7)

    cap = result.capacity_bytes / 2**30
    if len(result.closest):
        ax2.scatter(result.closest["memory_gib"], result.closest["step_time_s"], s=6, c="#bbbbbb",
                    label=f"does not fit ({len(result.closest):,} nearest)")
    if len(result.table):
        t = result.table
        ax2.scatter(t["memory_gib"], t["step_time_s"], s=8, c="#4C72B0", label="fits")
        front = t.sort_values("memory_gib")
        front = front[front["step_time_s"] <= front["step_time_s"].cummin()]
        ax2.step(front["memory_gib"], front["step_time_s"], where="post", c="#C44E52", lw=1.5,
                 label="fitting frontier")
        best = t.iloc[0]
        ax2.scatter([best["memory_gib"]], [best["step_time_s"]], s=80, marker="*", c="#C44E52", zorder=5,
                    label="#1")
    ax2.axvline(cap, ls="--", c="k", lw=1, label=f"limit {cap:.0f} GiB")
    ax2.set_xlim(0, 3 * cap)                               # layouts far past the limit are off to the right
    fastest = min(x["step_time_s"].min() for x in (result.table, result.closest) if len(x))
    ax2.set_ylim(0.9 * fastest, 4 * fastest)               # the interesting band: up to 4x slower than the best
    ax2.set_xlabel("memory per GPU (GiB)")
    ax2.set_ylabel("step time (s)")
    ax2.set_yscale("log")
    ax2.set_title(f"{result.model.name} on {result.job.gpus} x {result.hardware.name}")
    ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=5, fontsize=8, frameon=False)
    _save(fig, p, plt)
    return p


def plot_sweep(df, path, title: str) -> Path:
    """Tokens/s and (with a token budget) cost against GPU count."""
    p = check_plot_path(path)
    plt = _pyplot()
    ok = df[df["status"] == "ok"]
    fig, ax1 = plt.subplots(figsize=(8, 5))
    ax1.plot(ok["gpus"], ok["tokens_per_s"], "o-", c="#4C72B0", label="tokens/s")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("GPUs")
    ax1.set_ylabel("tokens/s", color="#4C72B0")
    if "cost_usd" in ok and ok["cost_usd"].notna().any():
        ax2 = ax1.twinx()
        ax2.plot(ok["gpus"], ok["cost_usd"] / 1e6, "s--", c="#C44E52", label="cost")
        ax2.set_ylabel("cost to train (M USD)", color="#C44E52")
    ax1.set_title(title)
    _save(fig, p, plt)
    return p
