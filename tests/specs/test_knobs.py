"""The layout knobs are listed once (Layout's fields); pins, validation-file layouts and cost columns follow them."""

from dataclasses import fields

import numpy as np
import pytest

from planner.cost.step import KNOBS
from planner.errors import PlannerError
from planner.candidates import Pins
from planner.specs.strategy import KNOB_COLUMNS, LAYOUT_KNOBS, Layout, check_knobs
from planner.runs_file import RunLayout


def test_every_knob_list_is_derived_from_layout():
    names = [f.name for f in fields(Layout)]
    assert list(LAYOUT_KNOBS) == names
    assert [f.name for f in fields(Pins)] == names
    assert list(RunLayout.model_fields) == names
    assert list(KNOB_COLUMNS) == names and KNOBS == tuple(KNOB_COLUMNS[k] for k in names)
    assert all(getattr(Pins(), k) is None and getattr(RunLayout(), k) is None for k in names)


@pytest.mark.parametrize("knob, value, expected", [
    ("tp", 0, "tp: got 0, expected a positive integer"),
    ("micro_batch", True, "micro_batch: got True, expected a positive integer"),
    ("sequence_parallel", 1, "sequence_parallel: got 1, expected True or False"),
    ("recompute", "most", "recompute: got 'most', expected one of none, selective, full, op"),
    ("zero_stage", 5, "zero_stage: got 5, expected a ZeRO stage 0, 1, 2 or 3"),
])
def test_check_knobs_names_the_knob_as_written_in_files(knob, value, expected):
    with pytest.raises(PlannerError) as err:
        check_knobs({knob: value})
    assert str(err.value) == expected


def test_layout_takes_numpy_scalars_and_stores_plain_python_values():
    lay = Layout(tp=np.int64(8), sequence_parallel=np.bool_(True), recompute="FULL", zero_stage="zero-1")
    assert (lay.tp, lay.sequence_parallel, lay.recompute, lay.zero_stage) == (8, True, "full", 1)
    assert type(lay.tp) is int and type(lay.sequence_parallel) is bool
    assert check_knobs({"tp": 4, "pp": None}) == Layout(tp=4)


def test_a_runs_file_with_a_bad_knob_names_the_run_and_the_knob(tmp_path):
    import yaml

    from planner.runs_file import BUNDLED_RUNS, load_runs

    run = yaml.safe_load(BUNDLED_RUNS.read_text())["runs"][0]
    run["layout"]["zero_stage"] = 5
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    with pytest.raises(PlannerError) as err:
        load_runs(path)
    assert str(err.value) == ("runs file runs.yaml: runs.0.layout: zero_stage: got 5, expected a ZeRO stage 0, 1, 2 or 3 "
                              f"(run {run['id']})")


@pytest.mark.parametrize("kwargs, field", [
    (dict(zero3_gather_unit="foo"), "zero3_gather_unit"), (dict(dp_bucket_bytes=0), "dp_bucket_bytes"),
    (dict(dp_bucket_bytes=float("inf")), "dp_bucket_bytes"),
    (dict(tp_comm_overlap="yes"), "tp_comm_overlap"), (dict(overlap_grad_reduce=1), "overlap_grad_reduce"),
    (dict(flash_attention="no"), "flash_attention"),
    (dict(flash_attention=False, flash_attention_gen=1), "flash_attention_gen"),
])
def test_runtime_is_validated_once(kwargs, field):
    """A typo or a truthy string must not silently switch a feature (flash_attention="no" used to mean on; a
    zero bucket size gave infinite DP time to every layout but ZeRO-3's)."""
    from planner.specs.strategy import Runtime
    with pytest.raises(PlannerError) as info:
        Runtime(**kwargs)
    assert info.value.field == field
    assert Runtime().dp_bucket_bytes is None                   # Megatron-Core's max(40M, 1M x DP·CP) elements
    rt = Runtime(zero3_gather_unit="matrix", dp_bucket_bytes=25e6, overlap_grad_reduce=np.bool_(False))
    assert (rt.zero3_gather_unit, rt.dp_bucket_bytes, bool(rt.overlap_grad_reduce)) == ("matrix", 25e6, False)


@pytest.mark.parametrize("kwargs, field", [(dict(grad_bytes=-4), "grad_bytes"), (dict(param_bytes=0), "param_bytes"),
                                           (dict(optimizer_bytes="12"), "optimizer_bytes"),
                                           (dict(activation_bytes=True), "activation_bytes")])
def test_precision_is_validated_once(kwargs, field):
    from planner.specs.strategy import Precision
    with pytest.raises(PlannerError) as info:
        Precision(**kwargs)
    assert info.value.field == field
    assert Precision(grad_bytes=2, optimizer_bytes=0).grad_bytes == 2


def test_zero_stage_takes_the_command_lines_text_in_the_library_too():
    """README: zero_stage, like recompute, takes the CLI's text; a float or a bool is not a stage."""
    from planner import evaluate
    from planner.errors import PlannerError
    for given in (1, "1", "zero1", "ZeRO-1", np.int64(1)):
        assert evaluate(model="8b", gpus=8, tp=4, pp=1, dp=2, zero_stage=given).row["zero_stage"] == 1
    for bad in (1.0, True, "zero-5", "one"):
        with pytest.raises(PlannerError, match="zero_stage"):
            evaluate(model="8b", gpus=8, tp=4, pp=1, dp=2, zero_stage=bad)
