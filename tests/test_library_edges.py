"""The library at its edges, as a notebook user meets it: names where codes are expected, empty tables, hardware
defaults, keyword names in errors, the caller's own mistakes in predict, huge numbers, nullable pandas dtypes."""

import numpy as np
import pytest

import planner
from planner import PlannerError, Runtime
from planner.cost import comm, compute, flops, memory, params, pipeline
from planner.cost.layer import cp_layer_times, layer_times
from planner.cost.step import step_columns
from planner.specs.strategy import Job

M8, H100 = planner.load_model("8b"), planner.load_hardware("h100-sxm")
JOB = Job(gpus=16, seq_len=8192, global_batch=64)
LAYOUT = dict(tp=2, cp=2, micro_batch=1, sp=True)


@pytest.mark.parametrize("fn", [layer_times, cp_layer_times])
def test_layer_times_read_recompute_names_as_their_codes(fn):
    """'full' is code 2, as memory and FLOPs read it; a misspelt name is an error, not 'none'."""
    for name, code in (("none", 0), ("selective", 1), ("full", 2)):
        by_name = fn(M8, H100, JOB, {**LAYOUT, "recompute": name}, Runtime())
        by_code = fn(M8, H100, JOB, {**LAYOUT, "recompute": code}, Runtime())
        assert np.allclose(by_name, by_code), name
    full = layer_times(M8, H100, JOB, {**LAYOUT, "recompute": "full"}, Runtime())[1]
    assert full > layer_times(M8, H100, JOB, {**LAYOUT, "recompute": "none"}, Runtime())[1]
    with pytest.raises(PlannerError, match="^recompute: got 'fulll'"):
        fn(M8, H100, JOB, {**LAYOUT, "recompute": "fulll"}, Runtime())


def test_step_columns_of_no_rows_are_empty_columns():
    """An empty selection of a search table (df[df.tp == 16]) prices to empty columns, not a StopIteration."""
    df = planner.search(model="8b", gpus=64)
    empty = df[df.tp == 16]
    assert len(empty) == 0
    out = step_columns(M8, H100, Job(gpus=64, seq_len=8192, global_batch=2048),
                       {k: empty[k].to_numpy() for k in planner.Layout.knobs()})
    assert out["step_time_s"].shape == (0,) and out["memory_bytes"].shape == (0,)


def test_rules_follow_the_hardware_attention_by_default():
    """On V100 (no fused attention) CP is invalid, as evaluate says, also when rules() is called without saying."""
    from planner import constraints

    v100 = planner.load_hardware("v100-sxm")
    cols = {"tp": np.array([4]), "cp": np.array([2]), "pp": np.array([1]), "dp": np.array([2]),
            "micro_batch": np.array([1]), "vpp": np.array([1]), "sp": np.array([True]),
            "recompute": np.array([0]), "zero": np.array([1])}
    job = Job(gpus=16, seq_len=2048, global_batch=64)
    failed, valid = constraints.first_failure(constraints.rules(M8, v100, job, cols), 1)
    assert not valid[0]
    reasons = [r for r, _ in constraints.rules(M8, v100, job, cols)]
    assert reasons[failed[0]].startswith("context parallelism needs fused (flash) attention")
    assert constraints.first_failure(constraints.rules(M8, H100, job, cols), 1)[1][0]      # H100 has it


@pytest.mark.parametrize("kwargs", [dict(dp_replicate=3), dict(dp_replicate=1000),
                                    dict(zero_stage=0, dp_replicate=2)])
def test_a_hybrid_sharding_error_names_the_keyword(kwargs):
    with pytest.raises(PlannerError) as exc:
        planner.search(model="8b", gpus=64, **kwargs)
    assert exc.value.field == "dp_replicate"


def test_predict_raises_on_the_callers_own_mistakes():
    """The run's problems are recorded in the Prediction; the caller's bad keywords raise, naming them."""
    run = planner.load_runs()[0]
    with pytest.raises(PlannerError, match="^hardware: unknown hardware 'nonexistent'"):
        planner.predict(run, hardware="nonexistent")
    with pytest.raises(PlannerError, match="^headroom_gib: got -1"):
        planner.predict(run, headroom_gib=-1)
    for key, value in (("runtime", Runtime()), ("micro_batch", 1), ("global_batch", 8)):
        with pytest.raises(PlannerError, match=f"^{key}: is the run's own"):
            planner.predict(run, **{key: value})
    assert planner.predict(run, headroom_gib=5).error is None


PRICE = "price_usd_per_gpu_hour"


@pytest.mark.parametrize("kwargs, field", [(dict(tokens=10**40), "tokens"), (dict(tokens=10**400), "tokens"),
                                           (dict(tokens=1e12, price_usd_per_gpu_hour=10**400), PRICE),
                                           (dict(tokens=1e12, price_usd_per_gpu_hour=1e308), PRICE)])
def test_huge_budgets_and_prices_are_one_error_not_an_overflow(kwargs, field):
    with pytest.raises(PlannerError) as exc:
        planner.search(model="8b", gpus=8, **kwargs)
    assert exc.value.field == field and "at most" in exc.value.message and len(exc.value.message) < 120
    assert np.isfinite(planner.search(model="8b", gpus=8, tokens=1e30, price_usd_per_gpu_hour=1e6).cost_usd).all()


def test_style_takes_nullable_pandas_dtypes():
    """A sweep whose first counts fit nothing, converted to pandas' nullable dtypes (pd.NA), still renders."""
    df = planner.sweep(model="70b", gpus="8..64").convert_dtypes()
    view = planner.style(df)
    text = str(view)
    assert not df["fits"].iloc[0] and df["fits"].iloc[-1]
    assert "-" in text and f"{float(df['mfu'].iloc[-1]):.1%}" in text


def test_namesake_specs_with_different_numbers_are_not_called_the_same_profile():
    b = planner.load_hardware("a100-80gb").with_network(4, 100e9 / 8)
    for order in ([b, "a100-80gb"], ["a100-80gb", b]):
        with pytest.raises(PlannerError, match="share the name 'a100-80gb' but not their numbers.*dataclasses.replace"):
            planner.compare_hardware("8b", 64, order)
    with pytest.raises(PlannerError, match="are the same profile"):
        planner.compare_hardware("8b", 64, ["a100-80gb", planner.load_hardware("a100")])


@pytest.mark.parametrize("call, field", [
    (lambda m: memory.activation_bytes_per_layer(m, 8192, 1, -8, True, "none"), "tp"),
    (lambda m: memory.activation_bytes_per_layer(m, -8192, 1, 8, True, "none"), "seq_len"),
    (lambda m: memory.activation_bytes_per_layer(m, np.nan, 1, 8, True, "none"), "seq_len"),
    (lambda m: memory.activation_bytes_per_layer(m, 8192, np.array([1, 0]), 8, True, "none"), "micro_batch"),
    (lambda m: memory.state_bytes_per_param(1, -4), "dp"),
    (lambda m: memory.state_bytes_per_param(4, 8), "zero"),
    (lambda m: pipeline.bubble_fraction(-4, 8), "pp"),
    (lambda m: pipeline.bubble_fraction(4, 8, 0), "vpp"),
    (lambda m: params.kv_dim_per_rank(m, 0), "tp"),
    (lambda m: params.embedding_params_per_gpu(m, 0), "tp"),
    (lambda m: memory.activation_bytes_per_layer(m, 8192, 1, 1.5, True, "none"), "tp"),       # a fraction of a GPU
    (lambda m: memory.memory_breakdown(m, 8192, 8, 0, 4, 1, 64, 1, True, 1, 1), "pp"),
    (lambda m: memory.memory_breakdown(m, 8192, 8, np.nan, 4, 1, 64, 1, True, 1, 1), "pp"),
    (lambda m: memory.memory_breakdown(m, 8192, 8, 16, 4, 1, -1, 1, True, 1, 1), "num_microbatches"),
    (lambda m: memory.memory_breakdown(m, 8192, 8, 16, 4, 1, 64, 0, True, 1, 1), "vpp"),
    (lambda m: memory.memory_breakdown(m, 8192, 8, 16, 4, 1, 64, 1, True, 1, 1, cp=0), "cp"),
    (lambda m: memory.memory_breakdown(m, 8192, 8, 16, 4, 1, 64, 1, True, 1, 1, dp_replicate=0), "dp_replicate"),
    (lambda m: memory.memory_breakdown(m, 8192, 8, 16, 4, 1, 64, 1, True, 2, 1, recompute_layers=-1),
     "recompute_layers"),
    (lambda m: memory.logits_bytes(m, 8192, 1, -8, True), "tp"),
    (lambda m: compute.layer_gemm_time_s(m, 8192, -1, 8, planner.load_hardware("h100")), "micro_batch"),
    (lambda m: comm.all_reduce_time_s(1e9, 0, 1, planner.load_hardware("h100")), "size"),
    (lambda m: flops.model_flops_per_step(m, 8192, -1), "global_batch"),
    (lambda m: pipeline.stage_layers(126, 0), "pp"),
])
def test_cost_functions_refuse_what_no_layout_has(call, field):
    """A negative degree, a NaN length, a fractional degree or a ZeRO stage past 3 is an error naming the argument,
    not negative bytes, a free collective or a bubble outside [0, 1) returned silently."""
    with pytest.raises(PlannerError, match=rf"^{field}: got .*expected (finite|whole) numbers"):
        call(planner.load_model("405b"))


@pytest.mark.parametrize("sp", ["False", "yes", np.nan, 2, np.array([0, 2])])
def test_a_switch_is_a_boolean_not_whatever_numpy_calls_truthy(sp):
    """np.asarray("False", dtype=bool) is True: a string or a NaN for sequence parallelism is an error naming sp,
    never SP switched on. Booleans and 0/1 are the switch."""
    m = planner.load_model("405b")
    with pytest.raises(PlannerError, match=r"^sp: got .*expected true/false"):
        memory.activation_bytes_per_layer(m, 8192, 1, 8, sp, "selective")
    on, off = (float(memory.activation_bytes_per_layer(m, 8192, 1, 8, x, "selective")) for x in (1, 0))
    assert on == float(memory.activation_bytes_per_layer(m, 8192, 1, 8, True, "selective")) < off
    # layer_times called directly reads the switch the same way
    with pytest.raises(PlannerError, match=r"^sp: got .*expected true/false"):
        layer_times(M8, H100, JOB, {**LAYOUT, "sp": sp, "recompute": "none"}, Runtime())


def test_numbers_held_in_arrays_and_objects_read_as_the_numbers():
    # A 0-d integer array is the integer (gpus=np.array(64)); a sweep's knob columns, object dtype once a row holds
    # None, price as their numbers; columns of different lengths are one error naming them.
    assert len(planner.search("8b", np.array(64))) == len(planner.search("8b", 64))
    assert Job(gpus=np.array(8), seq_len=np.array(4096), global_batch=np.array(64)) == Job(8, 4096, 64)
    df = planner.sweep("70b", "1,64")
    ok = df[df["status"] == "ok"]
    assert ok["tp"].dtype == object
    m, hw = planner.load_model("70b"), planner.load_hardware("h100-sxm")
    job = Job(gpus=64, seq_len=8192, global_batch=2048)
    out = step_columns(m, hw, job, {k: ok[k].to_numpy() for k in planner.Layout.knobs()})
    assert out["step_time_s"].tolist() == ok["step_time_s"].tolist()
    cols = {k: np.repeat(ok[k].to_numpy(), 3) for k in planner.Layout.knobs()}
    cols["tp"] = np.array([2, 2])
    with pytest.raises(PlannerError, match=r"^cols: columns of shapes \(2,\) and \(3,\); expected columns of one"):
        step_columns(m, hw, job, cols)


def test_a_styled_search_shows_its_first_rows_and_says_so():
    df = planner.search("405b", 512)
    view = planner.style(df)
    assert len(view.frame) == 100 < len(df) == view.rows
    assert view.to_html().endswith(f"<p>The first 100 of {len(df):,} rows; style(df, max_rows=None) shows all.</p>")
    whole = planner.style(df, max_rows=None)
    assert len(whole.frame) == len(df) and "The first" not in whole.to_html()
    assert "The first" not in planner.style(df.head(3)).to_html()
    with pytest.raises(PlannerError, match="max_rows: got 0, expected a positive integer"):
        planner.style(df, max_rows=0)


def test_step_columns_reads_table_columns_as_a_notebook_holds_them():
    """A float column of whole numbers (pandas after a merge) is the integers; a fraction is an error naming the
    knob; a near-miss of an optional knob's name is an error, not its default priced silently; every output has the
    rows' broadcast shape, so a result indexes by row."""
    m, hw = planner.load_model("405b"), planner.load_hardware("h100")
    job = Job(gpus=512, seq_len=8192, global_batch=2048)
    base = dict(tp=8, cp=1, pp=16, dp=4, micro_batch=1, vpp=1, sp=True, recompute="full", zero=1)
    ints = step_columns(m, hw, job, base)
    floats = step_columns(m, hw, job, {**base, "tp": 8.0, "pp": np.array([16.0]), "recompute": 2.0})
    assert float(floats["step_time_s"][0]) == float(ints["step_time_s"])
    with pytest.raises(PlannerError, match=r"^tp: got 1\.5"):
        step_columns(m, hw, job, {**base, "tp": 1.5})
    for typo, meant in (("recompute_layer", "recompute_layers"), ("rc_layer", "rc_layers"),
                        ("dp_replicat", "dp_replicate")):
        with pytest.raises(PlannerError, match=rf"^{typo}: not a knob column; did you mean {meant}\?"):
            step_columns(m, hw, job, {**base, typo: 2})
    grid = step_columns(m, hw, job, {**base, "tp": [[1], [2], [4], [8]], "dp": [[32], [16], [8], [4]],
                                     "micro_batch": [[1, 2, 4]]})
    assert {np.shape(v) for v in grid.values()} == {(4, 3)}
    stages = step_columns(m, hw, job, {**base, "zero": np.array([0, 1, 2, 3])})
    assert {np.shape(v) for v in stages.values()} == {(4,)}
    assert stages["compute_s"][1] == pytest.approx(float(ints["compute_s"]))
    with pytest.raises(PlannerError, match=r"^recompute: got an array holding 'nope'"):
        step_columns(m, hw, job, {**base, "recompute": np.array(["full", "nope"])})
