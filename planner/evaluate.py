"""One layout in, a full breakdown out: the search's code path restricted to the pinned knobs.

Knobs left open (micro-batch, recompute, ...) take the best value the search finds for the pinned degrees, so
`evaluate(tp=8, pp=16, dp=4)` answers "how good can this layout be, and does it fit?".
"""

from __future__ import annotations

from dataclasses import dataclass

from planner import constraints
from planner.cost.memory import MEMORY_PARTS
from planner.cost.step import TIME_PARTS
from planner.errors import PlannerError
from planner.search import Pins, SearchResult, run_search

# Which flags a broken rule points at (most specific first), for one clear error line.
_RULE_FLAGS = (("TP x PP x DP", ("--tp", "--pp", "--dp")), ("TP", ("--tp",)), ("PP", ("--pp",)),
               ("global batch", ("--micro-batch", "--dp", "--global-batch")),
               ("sequence parallelism", ("--sequence-parallel", "--tp")), ("optimizer sharding", ("--zero", "--dp")),
               ("interleaving", ("--vpp", "--pp", "--micro-batch")))


@dataclass(frozen=True)
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
        return (f"<Evaluation tp={r['tp']} pp={r['pp']} dp={r['dp']} mb={r['micro_batch']} vpp={r['vpp']} "
                f"sp={r['sequence_parallel']} recompute={r['recompute']} zero={r['zero_stage']}: "
                f"{'fits' if self.fits else 'does NOT fit'} {r['memory_gib']:.1f}/{self.capacity_gib:.1f} GiB "
                f"[{mem}]; step {r['step_time_s']:.3f} s [{tim}]; MFU {r['mfu']:.3f}>")


def evaluate(model="405b", gpus=512, tp=None, pp=None, dp=None, micro_batch=None, vpp=None,
             sequence_parallel=None, recompute=None, zero_stage=None, **kwargs) -> Evaluation:
    """Evaluate one layout (pinned knobs); keyword arguments are those of `run_search`."""
    pins = Pins(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, vpp=vpp, sequence_parallel=sequence_parallel,
                recompute=recompute, zero_stage=zero_stage)
    result = run_search(model, gpus, pins=pins, find_min_gpus=False, **kwargs)
    if len(result.table):
        row = result.table.iloc[0]
    elif len(result.closest):
        row = result.closest.iloc[0]
    else:
        raise invalid_layout_error(result, tuple(k for k, v in pins.__dict__.items() if v is not None))
    return Evaluation(row=row.to_dict(), result=result)


def invalid_layout_error(result: SearchResult, pinned: tuple[str, ...] = ()) -> PlannerError:
    """No candidate passed the validity rules: one line naming the flag and the rules that rejected them.

    When flags were pinned, a rule about a pinned flag is named first (it is what the user can change)."""
    reasons = {k: v for k, v in result.rejected.items() if k != constraints.FIT_REASON}
    n = result.job.gpus
    if not reasons:
        return PlannerError("layout", f"no layout to evaluate for {n} GPUs")
    pin_names = {"--" + p.replace("_", "-"): p for p in pinned}
    flags_of = {r: next((f for prefix, f in _RULE_FLAGS if r.startswith(prefix)), ()) for r in reasons}
    # A rule about a flag the user pinned comes first (it is what they can change), then the most frequent.
    ranked = sorted(reasons, key=lambda r: (not set(flags_of[r]) & set(pin_names), -reasons[r]))
    reason = ranked[0]
    detail = "; ".join(f"{r} ({reasons[r]:,})" for r in ranked[:3])
    named = [f for f in flags_of[reason] if f in pin_names]
    flag = named[0] if named else "--gpus"           # nothing pinned: the GPU count is what does not work
    given = ", ".join(f"{p}={v}" for p, v in _pinned_values(result, pinned))
    where = f"{result.model.name} on {n} GPUs" + (f" with {given}" if given else "")
    hint = ""
    if n > 3 and not pinned and all(n % k for k in range(2, int(n**0.5) + 1)):
        hint = (f"; {n} is prime, so TP, PP or DP must be {n} on its own: pick a GPU count with small factors "
                f"(e.g. {1 << (n.bit_length() - 1)})")
    return PlannerError(flag, f"no valid layout of {where}: {detail}{hint}")


def _pinned_values(result: SearchResult, pinned) -> list[tuple[str, object]]:
    pins = result.pins.__dict__ if result.pins is not None else {}
    return [(p, pins[p]) for p in pinned if pins.get(p) is not None]
