"""Re-predict published (or your own) measured training runs and report the error.

Each run (planner.runs_file) pins what its source states; knobs the source leaves open (micro-batch, VPP, ...) take
the planner's best choice for the pinned ones, and the report says which were searched. Predicted and measured step
times compare like with like: the measured one comes from the source's own FLOP convention
(runs_file.measured_step_time_s).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.errors import PlannerError, library_api
from planner.evaluate import Evaluation, evaluate
from planner.runs_file import LayerTime, ValidationRun, load_runs_file, measured_step_time_s
from planner.specs.hardware import load_hardware
from planner.specs._files import validate as checked_record
from planner.specs.hardware_file import gbit_to_bytes
from planner.specs.strategy import Layout, Precision, Runtime

# Source groups whose runs calibrated the hardware efficiencies (scripts/calibrate.py); all others are held out.
FIT_GROUPS = ("Korthikanti2022 Table 3/5", "Megatron-Core r0.8.0 README",
              "Megatron-LM 2020 README (model-parallel weak scaling, 1 node, V100 DGX-2)")


@lru_cache(maxsize=1)
def _bundled_fit_ids() -> frozenset[str]:
    """Ids of the bundled runs in the fit groups (scripts/calibrate.py fits on exactly these)."""
    return frozenset(r.id for r in load_runs_file().runs if r.group.startswith(FIT_GROUPS))


def predict_layer_ms(lt: LayerTime, hardware=None) -> tuple[float, float]:
    """Predicted (forward, backward) milliseconds of one layer, exposed TP communication included."""
    from planner.cost.layer import layer_times
    from planner.specs.model import load_model
    from planner.specs.strategy import Job, recompute_code

    m, hw = load_model(lt.model), hardware or load_hardware(lt.hardware)
    cols = {"tp": np.asarray(lt.tp), "micro_batch": np.asarray(lt.micro_batch),
            "sp": np.asarray(lt.sequence_parallel), "recompute": np.asarray(recompute_code(lt.recompute))}
    rt = Runtime(flash_attention=lt.flash_attention, tp_bwd_overlap=lt.tp_bwd_overlap)
    fwd, bwd, tp_fwd, tp_bwd = layer_times(m, hw, Job(gpus=lt.tp, seq_len=lt.seq_len, global_batch=lt.micro_batch),
                                           cols, rt)
    return float(fwd + tp_fwd) * 1e3, float(bwd + tp_bwd) * 1e3


@dataclass(frozen=True)
class Prediction:
    run: ValidationRun
    evaluation: Evaluation | None
    measured_step_s: float
    predicted_step_s: float
    searched: tuple[str, ...]          # knobs the source did not state: the planner's best choice
    error: str | None = None           # why the run could not be predicted

    @property
    def metric(self) -> str:
        return self.run.measured.throughput[0]

    @property
    def measured_value(self) -> float:
        return self.run.measured.throughput[1]

    @property
    def predicted_value(self) -> float:
        """The predicted run in the source's own metric (time: proportional; throughput: inverse)."""
        ratio = self.predicted_step_s / self.measured_step_s
        return self.measured_value * (ratio if self.metric == "iteration_time_s" else 1 / ratio)

    @property
    def throughput_error(self) -> float:
        """Signed relative error of predicted throughput: + means the planner is optimistic."""
        return self.measured_step_s / self.predicted_step_s - 1

    @property
    def fits(self) -> bool:
        return self.evaluation is not None and self.evaluation.fits

    @property
    def used_for_fit(self) -> bool:
        """A bundled run the profiles were fitted on (a user's copy under another id is held out)."""
        return self.run.group.startswith(FIT_GROUPS) and self.run.id in _bundled_fit_ids()


@library_api
def predict(run: ValidationRun, hardware=None, **search_kwargs) -> Prediction:
    """Evaluate the run's published configuration; unstated knobs take the planner's best choice.

    `hardware` overrides the run's profile (a HardwareSpec), e.g. to calibrate efficiencies; a run whose cluster
    had another node network (`network`) is priced on it either way. A run is known to
    have trained, so "fits" here means the modelled memory fits the GPU's HBM: the search's planning headroom
    (spare memory for a layout not yet run) is not applied unless `headroom_gib` is passed.
    """
    if not isinstance(run, ValidationRun):
        raise PlannerError("run", f"got a {type(run).__name__}, expected a ValidationRun (from planner.load_runs())")
    run = checked_record(ValidationRun, run.model_dump(warnings=False), f"run {run.id}")   # model_copy skips checks
    caller_kwargs = set(search_kwargs)
    taken = sorted(set(search_kwargs) & ({"global_batch", "runtime", "precision"} | _LAYOUT_FIELDS))
    if taken:                                     # the run states these (or leaves them to the search)
        raise PlannerError(taken[0], "is the run's own (its model, layout, runtime or precision); give a changed "
                                     "copy of the run instead: run.model_copy(update=...)")
    override = None if hardware is None else load_hardware(hardware)     # the caller's mistake: raised, not recorded
    search_kwargs.setdefault("headroom_gib", 0.0)
    if run.model.global_batch is None:
        raise PlannerError(f"run {run.id}: model.global_batch", "required for validation")
    # A run that used context parallelism (or recomputed only some layers) says so: unstated, CP is 1 and full
    # recompute covers every layer, not searched.
    # partial recompute and hybrid sharding only where stated (sources that shard, shard over all their ranks)
    layout = {**run.layout.model_dump(), "cp": run.layout.cp or 1,
              "recompute_layers": run.layout.recompute_layers or 0, "dp_replicate": run.layout.dp_replicate or 1}
    searched = tuple(k for k, v in layout.items() if v is None)
    runtime = Runtime(**{k: v for k, v in run.runtime.model_dump().items() if v is not None})
    measured = measured_step_time_s(run)
    try:
        hw = override or load_hardware(run.hardware)
        if run.network is not None:
            hw = hw.with_network(run.network.nics_per_node, gbit_to_bytes(run.network.nic_gbit_per_s))
        ev = evaluate(run.model.to_spec(), run.gpus, hardware=hw,
                      global_batch=run.model.global_batch,
                      runtime=runtime, precision=Precision(**run.precision.model_dump()),
                      **layout, **search_kwargs)
    except PlannerError as exc:                  # name the run file's field (evaluate names its keyword)
        if exc.field.partition(":")[0] in caller_kwargs:
            raise                                 # the caller's own keyword, not the run's
        field = _RUN_FIELDS.get(exc.field) or (f"layout.{exc.field}" if exc.field in _LAYOUT_FIELDS else exc.field)
        field = re.sub(r"^hardware [^:]*: network", "network", field)      # with_network names the profile
        return Prediction(run, None, measured, math.nan, searched, error=f"{field}: {exc.message}")
    return Prediction(run, ev, measured, float(ev.row["step_time_s"]), searched)


_RUN_FIELDS = {"seq_len": "model.seq_len", "global_batch": "model.global_batch",
               "global_batch_tokens": "model.global_batch", "model: seq_len": "model.seq_len"}
_LAYOUT_FIELDS = {f.name for f in dataclasses.fields(Layout)}


def summarize(preds: list[Prediction]) -> dict:
    """Mean / median / max absolute throughput error per group, overall, and split into fit / held-out runs."""
    groups: dict[str, list[float]] = {}
    for p in preds:
        if p.error is None:
            groups.setdefault(p.run.group, []).append(abs(p.throughput_error))
    stats = {g: _stats(v) for g, v in groups.items()}
    ok = [p for p in preds if p.error is None]
    stats["overall"] = _stats([abs(p.throughput_error) for p in ok])
    stats["fit runs"] = _stats([abs(p.throughput_error) for p in ok if p.used_for_fit])
    stats["held-out runs"] = _stats([abs(p.throughput_error) for p in ok if not p.used_for_fit])
    return stats


def predict_all(runs: list[ValidationRun]) -> list[Prediction]:
    return [predict(r) for r in runs]


def select_runs(runs: list[ValidationRun], hardware: str | None = None, group: str | None = None
                ) -> list[ValidationRun]:
    """The runs on one hardware profile (a name or alias, as --hardware takes it) and/or whose source group contains
    `group` (case-insensitive); none selected is an error naming the filter and what the runs offer."""
    chosen = list(runs)
    if hardware is not None:
        wanted = {str(hardware).strip().lower(), load_hardware(hardware).name.lower()}
        offered = sorted({r.hardware for r in chosen})
        chosen = [r for r in chosen if r.hardware.lower() in wanted]
        if not chosen:
            raise PlannerError("--hardware", f"no run is on {hardware!r}; the runs are on {', '.join(offered)}")
    if group is not None:
        text = str(group).strip().lower()
        offered = sorted({r.group for r in chosen})
        chosen = [r for r in chosen if text and text in r.group.lower()]
        if not chosen:
            shown = "; ".join(offered[:8]) + (f"; and {len(offered) - 8} more" if len(offered) > 8 else "")
            where = f" on {hardware}" if hardware is not None else ""
            raise PlannerError("--group", f"no run{where} has a group containing {group!r}; the groups{where} are "
                                          f"{shown}")
    return chosen


def predict_file(path: str | None = None, hardware: str | None = None, group: str | None = None
                 ) -> tuple[list[Prediction], dict[str, str]]:
    """`plan validate`: the predictions for a runs file (None: the bundled runs), filtered as select_runs, and the
    runs left out with the reason. A run of the bundled format that cannot be predicted is an error in the file; a
    shared-format file's are listed with the reason instead, and so are the runs its conversion could not express
    (only for the whole file: their hardware may be unknown, so they say nothing about a selection)."""
    runs = load_runs_file(path)
    preds = predict_all(select_runs(runs.runs, hardware, group))
    failed = [p for p in preds if p.error is not None]
    skipped = dict(runs.skipped) if hardware is None and group is None else {}
    if failed and not runs.shared_format:
        raise PlannerError(f"run {failed[0].run.id}", failed[0].error)
    skipped.update({p.run.id: p.error for p in failed})
    preds = [p for p in preds if p.error is None]
    if not preds:
        example = "; e.g. " + ": ".join(next(iter(skipped.items()))) if skipped else ""
        raise PlannerError("runs file", f"none of its runs can be predicted{example}")
    return preds, skipped


def _stats(errors: list[float]) -> dict:
    a = np.asarray(errors, dtype=float)
    if a.size == 0:
        return {"runs": 0, "mean": math.nan, "median": math.nan, "max": math.nan}
    return {"runs": int(a.size), "mean": float(a.mean()), "median": float(np.median(a)), "max": float(a.max())}
