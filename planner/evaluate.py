"""One layout in, a full breakdown out: the search's code path restricted to the pinned knobs.

Knobs left open (micro-batch, recompute, ...) take the best value the search finds for the pinned degrees, so
`evaluate(tp=8, pp=16, dp=4)` answers "how good can this layout be, and does it fit?".
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.memory import MEMORY_PARTS
from planner.cost.step import TIME_PARTS
from planner.errors import library_api
from planner.search import SearchResult, pop_pins, require_valid, run_search
from planner.specs.strategy import recompute_label


@dataclass(frozen=True, eq=False)      # identity equality: the result holds DataFrames, which do not compare to a bool
class Evaluation:
    """A layout's breakdown. `row` holds exactly the columns of a search row (the public JSON names)."""

    row: dict
    result: SearchResult

    @property
    def fits(self) -> bool:
        return bool(self.row["fits"])

    @property
    def memory_gib(self) -> dict[str, float]:
        return {k: float(self.row[f"{k}_gib"]) for k in MEMORY_PARTS}

    @property
    def time_s(self) -> dict[str, float]:
        return {k: float(self.row[f"{k}_s"]) for k in TIME_PARTS}

    @property
    def capacity_gib(self) -> float:
        return self.result.capacity_bytes / 2**30

    @property
    def dominant_memory(self) -> str:
        parts = self.memory_gib
        return max(parts, key=parts.get)

    def __getattr__(self, name):
        if name == "row":
            raise AttributeError(name)
        try:
            return self.row[name]
        except KeyError:
            raise AttributeError(name) from None

    def _repr_html_(self) -> str:
        from planner.notebook import evaluation_html

        return evaluation_html(self)

    def __repr__(self) -> str:
        r = self.row
        mem = ", ".join(f"{k} {v:.1f}" for k, v in self.memory_gib.items())
        tim = ", ".join(f"{k} {v:.3g}" for k, v in self.time_s.items())
        rc = recompute_label(r["recompute"], r.get("recompute_layers", 0) or 0)
        return (f"<Evaluation tp={r['tp']} cp={r['cp']} pp={r['pp']} dp={r['dp']} mb={r['micro_batch']} vpp={r['vpp']} "
                f"sp={r['sequence_parallel']} recompute={rc} zero={r['zero_stage']}"
                + (f" dp_replicate={r['dp_replicate']}" if r.get("dp_replicate", 1) > 1 else "") + ": "
                f"{'fits' if self.fits else 'does NOT fit'} {r['memory_gib']:.1f}/{self.capacity_gib:.1f} GiB "
                f"[{mem}]; step {r['step_time_s']:.3f} s [{tim}]; MFU {r['mfu']:.3f}>")


@library_api
def evaluate(model="405b", gpus=512, tokens=None, price_usd_per_gpu_hour=None, pue=None, **kwargs) -> Evaluation:
    """Evaluate one layout. Pin its knobs by name (tp, cp, pp, dp, micro_batch, vpp, sequence_parallel, recompute,
    recompute_layers, zero_stage: the fields of specs.strategy.Layout; with tp, pp and dp pinned, cp is 1 unless
    given); the other keyword arguments are those of `run_search`. With `tokens`, the row also holds the days,
    GPU-hours, cost and energy to train them (time_to_train_days, gpu_hours, cost_usd, energy_mwh), as `plan
    --tokens`."""
    from planner.sweep import add_budget_to_row, budget_arguments

    budget = budget_arguments(tokens, price_usd_per_gpu_hour, pue)
    pins = pop_pins(kwargs, "evaluate", ("model", "gpus", "find_min_gpus"))
    result = require_valid(run_search(model, gpus, pins=pins, find_min_gpus=False, **kwargs))
    row = (result.table.iloc[0] if len(result.table) else result.closest.iloc[0]).to_dict()
    if budget[0] is not None:
        add_budget_to_row(row, budget[0], result.job.gpus, result.hardware, *budget[1:])
    return Evaluation(row=row, result=result)
