"""Search invariants: every ranked layout is valid, fits and multiplies to N; ranking and pinning behave."""

import numpy as np
import pytest

from planner.constraints import FIT_REASON, round_batch
from planner.errors import PlannerError
from planner.evaluate import evaluate
from planner.candidates import Pins, make_job
from planner.search import CLOSEST_TIMED, run_search, search
from planner.specs.model import load_model


def test_every_ranked_layout_multiplies_to_n_fits_and_is_valid(search_405b_512):
    r = search_405b_512
    t = r.table
    assert len(t) > 0
    assert (t.tp * t.cp * t.pp * t.dp == 512).all()
    assert ((t.cp == 1) | (8192 % (2 * t.cp) == 0)).all()
    assert t.fits.all()
    assert (t.memory_gib <= (r.hardware.hbm_bytes - r.headroom_bytes) / 2**30 + 1e-9).all()
    assert (t.tp <= 8).all()
    assert (128 % t.tp == 0).all() and ((8 % t.tp == 0) | (t.tp % 8 == 0)).all()
    assert (2048 % (t.dp * t.micro_batch) == 0).all()
    assert (t.num_microbatches * t.dp * t.micro_batch == 2048).all()
    assert (((126 % t.pp) == 0) | ((128 % t.pp) == 0)).all()


def test_ranked_by_tokens_per_s_then_memory_then_pp(search_405b_512):
    t = search_405b_512.table
    tps = t.tokens_per_s.to_numpy()
    assert (np.diff(tps) <= 1e-9 * tps[:-1]).all()
    ties = t[t.tokens_per_s.duplicated(keep=False)]
    for _, group in ties.groupby("tokens_per_s"):
        assert group.memory_gib.is_monotonic_increasing


def test_counts_add_up(search_405b_512):
    r = search_405b_512
    assert r.considered == len(r.table) + sum(r.rejected.values())
    # every layout that does not fit is counted; the closest table holds the nearest CLOSEST_TIMED of them
    assert len(r.closest) == min(r.rejected[FIT_REASON], CLOSEST_TIMED)
    assert any("TP does not divide the 8 K/V heads" in k for k in r.rejected)


def test_breakdown_parts_sum_to_totals(search_405b_512):
    t = search_405b_512.table
    mem = t[[f"{k}_gib" for k in ("weights", "gradients", "optimizer", "activations", "gathered", "other")]].sum(axis=1)
    assert np.allclose(mem, t.memory_gib)
    tim = t[[f"{k}_s" for k in ("compute", "tp_comm", "cp_comm", "pp_comm", "dp_comm", "bubble", "optimizer")]].sum(
        axis=1)
    assert np.allclose(tim, t.step_time_s)
    assert ((t.mfu > 0) & (t.mfu <= 1)).all() and (t.hfu >= t.mfu - 1e-12).all()


def test_evaluate_reproduces_a_search_row_exactly(search_405b_512):
    row = search_405b_512.table.iloc[3]
    ev = evaluate("405b", 512, tp=int(row.tp), cp=int(row.cp), pp=int(row.pp), dp=int(row.dp),
                  micro_batch=int(row.micro_batch),
                  vpp=int(row.vpp), sequence_parallel=bool(row.sequence_parallel), recompute=row.recompute,
                  zero_stage=int(row.zero_stage))
    for key, value in row.items():
        assert ev.row[key] == value, key


def test_pins_restrict_the_search():
    df = search("70b", 64, tp=4, recompute="selective")
    assert len(df) and (df.tp == 4).all() and (df.recompute == "selective").all()
    assert df.attrs["considered"] > 0 and df.attrs["gpus"] == 64


def test_pinned_degrees_must_multiply_to_gpus():
    with pytest.raises(PlannerError, match=r"tp\(8\) \* cp\(1\) \* pp\(4\) \* dp\(8\) = 256 != gpus\(512\)"):
        run_search("405b", 512, pins=Pins(tp=8, pp=4, dp=8))       # CP is 1 when TP, PP and DP are all pinned
    with pytest.raises(PlannerError, match=r"tp\(8\) \* cp\(4\) \* pp\(4\) \* dp\(8\) = 1024 != gpus\(512\)"):
        run_search("405b", 512, pins=Pins(tp=8, cp=4, pp=4, dp=8))
    table = run_search("405b", 512, pins=Pins(tp=8, cp=2, pp=4, dp=8)).table
    assert len(table) and (table.cp == 2).all()


def test_cp_hint_only_for_the_degree_product():
    """"--cp 2 would use the other GPUs" answers a product that falls short, not a pin of the wrong type."""
    with pytest.raises(PlannerError) as info:
        evaluate("405b", 512, tp=True, pp=16, dp=4)
    assert info.value.field == "tp" and "--cp" not in info.value.message


def test_pinned_tp_that_does_not_divide_heads_is_named():
    with pytest.raises(PlannerError) as info:
        evaluate("405b", 384, tp=3)
    assert info.value.field == "tp" and "heads" in str(info.value)


def test_tp_and_cp_groups_never_straddle_nodes():
    """Ranks fill nodes TP innermost, then CP: TP 3 or 6 on 8-GPU nodes leaves groups on two nodes (ranks 6-11),
    priced by nothing, so the search drops them; GPT-3 175B (96 heads) on 96 GPUs has both on offer."""
    r = run_search("gpt3-175b", 96, find_min_gpus=False)
    tc = r.table.tp * r.table.cp
    assert len(r.table) and set(r.table.tp) <= {1, 2, 4, 8} and ((tc > 8) | (8 % tc == 0)).all()
    assert any("TP does not tile" in reason for reason in r.rejected)
    with pytest.raises(PlannerError, match="TP does not tile the 8-GPU nodes") as info:
        evaluate("gpt3-175b", 96, tp=6)
    assert info.value.field == "tp"
    with pytest.raises(PlannerError, match="TP x CP does not tile"):
        evaluate("8b", 48, tp=2, cp=3, pp=1)              # CP ranks {0, 2, 4}, {6, 8, 10}: the second straddles
    evaluate("8b", 48, tp=2, cp=2, pp=1, dp=12, global_batch=48)     # 4-GPU blocks tile the node
    with pytest.raises(PlannerError, match="TP x CP does not tile"):     # 12-GPU blocks: ranks 8-11 leave node 0
        evaluate("8b", 96, seq_len=12288, global_batch=1536, tp=4, cp=3, pp=1, dp=8)
    evaluate("8b", 64, tp=4, cp=4, pp=1, dp=4, global_batch=64)      # 16-GPU blocks: two whole nodes
    # Across nodes TP must take whole nodes: 16 = 2 nodes is priced, 12 = 1.5 nodes is not.
    assert evaluate("gpt3-175b", 512, tp=16, pp=8, dp=4, allow_cross_node_tp=True).row["tp"] == 16
    with pytest.raises(PlannerError, match="TP does not tile"):
        evaluate("gpt3-175b", 96, tp=12, allow_cross_node_tp=True)


def test_nothing_fits_reports_closest_and_smallest_gpu_count():
    r = run_search("405b", 16)
    assert len(r.table) == 0 and len(r.closest) > 0
    assert (r.closest.overflow_gib > 0).all() and r.closest.overflow_gib.is_monotonic_increasing
    assert r.min_gpus_that_fit is not None and r.min_gpus_that_fit % 8 == 0 and r.min_gpus_that_fit > 16
    # The count it names really has a fitting layout.
    assert len(run_search("405b", r.min_gpus_that_fit, find_min_gpus=False).table) > 0


def test_below_one_node_the_smallest_count_may_be_a_smaller_machine():
    """Llama 3.1 8B does not fit one H100 but fits two (TP 2): a 1-GPU request is told 2, not the next node of 8.
    A 3-GPU request for 70B tries 4, then whole nodes: the answer is a multiple of 8 (24)."""
    assert run_search("8b", 1).min_gpus_that_fit == 2 and len(run_search("8b", 2, find_min_gpus=False).table) > 0
    assert run_search("70b", 3).min_gpus_that_fit % 8 == 0


def test_global_batch_from_tokens_and_conflicts():
    m = load_model("405b")
    assert make_job(m, 512).global_batch == 2048                       # 16Mi tokens / 8192
    assert make_job(m, 512, seq_len=4096).global_batch == 4096
    assert make_job(m, 512, global_batch_tokens=2**22).global_batch == 512
    with pytest.raises(PlannerError, match="not both"):
        make_job(m, 512, global_batch=8, global_batch_tokens=2**20)
    with pytest.raises(PlannerError, match="whole number"):
        make_job(m, 512, global_batch_tokens=1000)


def test_numpy_scalars_are_numbers_wherever_numbers_are():
    """numbers.Integral / numbers.Real, numpy scalars included; a bool is never a number."""
    import numpy as np

    from planner import PlannerError, evaluate, search

    plain = search(model="8b", gpus=8, seq_len=4096, global_batch=64, headroom_gib=5.0)
    numpy = search(model="8b", gpus=np.int32(8), seq_len=np.int64(4096), global_batch=np.int64(64),
                   headroom_gib=np.float32(5))
    assert plain.equals(numpy)
    by_tokens = search(model="8b", gpus=8, seq_len=4096, global_batch_tokens=np.int64(64 * 4096), headroom_gib=5)
    assert by_tokens.equals(plain)
    assert evaluate("8b", 8, tp=np.int64(2), pp=np.uint8(1), dp=np.int16(4), micro_batch=np.int64(1)).fits
    for bad in (dict(seq_len=True), dict(seq_len=np.float64(4096)), dict(global_batch=np.bool_(True)),
                dict(global_batch_tokens=np.float32(2**20)), dict(headroom_gib=np.bool_(True)), dict(gpus=True)):
        field = next(iter(bad))                                   # the keyword, as given
        with pytest.raises(PlannerError, match=f"^{field}: got"):
            search(**{"model": "8b", "gpus": 8, **bad})


def test_narrow_numpy_pins_price_like_python_ints_and_arrays_are_refused():
    """A pin is stored as Layout stores it: uint8/int8 pins once overflowed in the search's arithmetic (2048 % dp,
    tp * pp), and an array where a number belongs reached numpy's truth-value error."""
    import numpy as np

    from planner import PlannerError, evaluate

    plain = evaluate("70b", 64, tp=8, pp=2, dp=4).step_time_s
    assert evaluate("70b", 64, tp=np.uint8(8), pp=np.int8(2), dp=np.uint8(4)).step_time_s == plain
    assert len(search("70b", 64, tp=np.int8(8))) == len(search("70b", 64, tp=8))
    with pytest.raises(PlannerError, match=r"^tp: got array\(\[8, 4\]\), expected a positive integer"):
        search("70b", 64, tp=np.array([8, 4]))
    for stage in (True, np.bool_(False), 1.0):
        with pytest.raises(PlannerError, match=f"^zero_stage: got {stage!r}, expected a ZeRO stage"):
            search("70b", 64, zero_stage=stage)


def test_the_min_gpu_scan_tries_its_limit_and_says_how_far_it_went():
    """smallest_fitting_gpus tries the limit itself (the doubling could stop short of it), and the message names the
    counts that were really tried: above a request beyond the limit, none."""
    from dataclasses import replace

    from planner.search import MAX_GPUS_TRIED, min_gpus_text, smallest_fitting_gpus

    r = run_search("405b", 16, find_min_gpus=False)
    args = (r.model, r.hardware, r.job, r.pins, r.capacity_bytes, False, r.precision, r.runtime)
    fits_at = smallest_fitting_gpus(*args)
    assert fits_at is not None and fits_at > 64
    assert smallest_fitting_gpus(*args, max_gpus=fits_at + 7) == fits_at      # 16..64 linear, then 128 > the limit
    assert smallest_fitting_gpus(*args, max_gpus=fits_at - 1) is None
    assert min_gpus_text(replace(r, min_gpus_that_fit=fits_at)) == f"{fits_at:,}"
    assert min_gpus_text(r) == f"none up to {MAX_GPUS_TRIED:,} GPUs, the most the search tries"
    beyond = replace(r, job=replace(r.job, gpus=2 * MAX_GPUS_TRIED))
    assert min_gpus_text(beyond) == (f"none tried: the scan for a larger count stops at {MAX_GPUS_TRIED:,} GPUs, not "
                                     f"above the {2 * MAX_GPUS_TRIED:,} asked")


def test_no_valid_layout_names_the_binding_rules_and_a_batch_that_works():
    """70B on 83 GPUs (a prime): DP 83 does not divide the 2048-sequence batch, and PP 83 exceeds the 80 layers; the
    error says which rules alone stand in the way (not just the most frequent) and which global batch would do. (On
    96 GPUs PP 3 splits 80 + 1 slots: Megatron's loss accounting; on 56, PP 14 takes explicit edge stages of 4
    layers around twelve of 6.)"""
    with pytest.raises(PlannerError) as info:
        evaluate("70b", 83)
    msg = info.value.message
    assert "global batch not divisible by DP x micro-batch" in msg and "valid but for this rule" in msg
    assert "PP does not split the 80 layers" in msg
    assert "try --global-batch 2656" in msg
    assert evaluate("70b", 83, global_batch=2656).row["dp"] == 83
    assert evaluate("70b", 96).row["pp"] % 3 == 0
    assert evaluate("70b", 56, pp=14).row["pp"] == 14
    assert round_batch(2048, {3, 24}) == 1536 and round_batch(2048, {2048}) == 2048
    # a unit sharing an odd factor with the batch, or larger than twice the batch, still gets its multiple
    assert (round_batch(1536, {72}), round_batch(6, {9}), round_batch(2048, {20480})) == (1152, 9, 20480)
    row = evaluate("70b", 576, global_batch=1152).row                 # the suggestion for 576 GPUs plans
    assert 1152 % (row["dp"] * row["micro_batch"]) == 0
    from planner.constraints import sole_failure
    assert list(sole_failure([("a", np.array([1, 1, 0])), ("b", np.array([True, False, False]))], 3)) == [-1, 1, -1]
    with pytest.raises(PlannerError, match="allow_cross_node_tp"):
        run_search("70b", 96, allow_cross_node_tp=1)


def test_results_pickle_compare_and_say_when_nothing_fits():
    import pickle

    ev = evaluate("8b", 64, tp=8, pp=1, dp=8)
    again = pickle.loads(pickle.dumps(ev))                    # Pins is a module-level class: multiprocessing works
    assert again.row == ev.row and again.result.pins == ev.result.pins
    assert ev == ev and ev != again and isinstance(hash(ev), int)   # identity: DataFrames do not compare to a bool
    df = search("405b", 8)
    assert len(df) == 0 and df.attrs["min_gpus_that_fit"] == run_search("405b", 8).min_gpus_that_fit > 8
    with pytest.raises(PlannerError) as info:                 # a wrongly typed pin beside the other degrees
        evaluate("405b", 512, tp="8", pp=16, dp=4)
    assert info.value.field == "tp"


def test_library_calls_name_themselves_and_their_arguments():
    import planner

    for call, name in ((lambda: evaluate("8b", 64, tensor_parallel=8), "evaluate"),
                       (lambda: search("8b", 8, hardwre="b200"), "search"),
                       (lambda: planner.sweep("8b", "8,16", tensor_parallel=8), "sweep"),
                       (lambda: planner.compare_hardware("8b", 8, "h100-sxm,b200", find_min_gpus=True),
                        "compare_hardware")):
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument"):
            call()
    # the list of what it takes has the caller's own keywords too (a CLI spelling finds its library name there)
    for call, own in ((lambda: search("8b", 8, price_per_gpu_hour=2.0), ["price_usd_per_gpu_hour", "pue", "tokens"]),
                      (lambda: planner.compare_hardware("8b", 8, "h100-sxm,b200", order="cost"), ["sort", "tokens"])):
        with pytest.raises(TypeError) as info:
            call()
        assert all(f" {k}" in str(info.value).split("pins, or", 1)[1] for k in own), str(info.value)
    for call, field in ((lambda: evaluate("8b", 8, runtime={}), "runtime"),
                        (lambda: planner.sweep("8b", "8,16", precision={"grad_bytes": 2}), "precision"),
                        (lambda: planner.compare_hardware("8b", 64, None), "hardware"),
                        (lambda: evaluate("8b", 8, recompute=2.0), "recompute")):
        with pytest.raises(PlannerError) as info:
            call()
        assert info.value.field == field


def test_cost_columns_take_a_result_table_and_price_it_as_the_search_does():
    """step_columns takes a search table's own columns (sequence_parallel, zero_stage, recompute_layers; recompute
    as the object column of names pandas gives) and places each row as the search places a job of its size, GB200's
    64-GPU segments included (it once priced 405B on 128 GB200s at 330.6 s where evaluate said 329.3 s); a row set
    of several GPU counts is priced count by count."""
    import numpy as np

    import planner
    from planner.constraints import rules
    from planner.cost.step import step_columns

    knobs = ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "sequence_parallel", "recompute", "recompute_layers",
             "zero_stage", "dp_replicate")
    m, gb = planner.load_model("70b"), planner.load_hardware("gb200")
    df = planner.search("70b", 256, hardware="gb200")
    job = planner.Job(gpus=256, seq_len=8192, global_batch=2048)
    out = step_columns(m, gb, job, {k: df[k].to_numpy() for k in knobs})
    assert np.array_equal(out["step_time_s"], df["step_time_s"].to_numpy())
    assert all(mask.all() for _, mask in rules(m, gb, job, {k: df[k].to_numpy() for k in knobs}))
    # rows of 128 GPUs (64-GPU segments), 144 (two whole 72-GPU domains) and 64 (one domain) in one call, the
    # knobs other than PP and DP given as scalars beside the arrays: each row equals evaluate of its own count
    pins = dict(tp=8, cp=1, micro_batch=1, vpp=1, sequence_parallel=True, recompute="none", recompute_layers=0,
                zero_stage=1)
    pp, dp = np.array([4, 2, 4]), np.array([4, 9, 2])
    m405 = planner.load_model("405b")
    out = step_columns(m405, gb, planner.Job(gpus=128, seq_len=8192, global_batch=2304), {**pins, "pp": pp, "dp": dp})
    for i in range(3):
        ev = planner.evaluate("405b", int(8 * pp[i] * dp[i]), hardware="gb200", global_batch=2304, pp=int(pp[i]),
                              dp=int(dp[i]), **pins)
        assert out["step_time_s"][i] == ev.row["step_time_s"], i
        assert out["dp_inner"].dtype == bool and out["num_microbatches"].dtype.kind == "i"
    assert planner.load_hardware("gb200").for_job(128).gpus_per_node == 64       # the counts are placed apart
    with pytest.raises(planner.PlannerError, match="^cols: missing"):
        step_columns(m, gb, job, {"tp": np.array([8])})
    with pytest.raises(planner.PlannerError, match="^sequence_parallel: given both"):
        step_columns(m, gb, job, {**pins, "pp": 4, "dp": 8, "sp": False})
    with pytest.raises(planner.PlannerError, match="^zero_stage: got 5"):
        step_columns(m, gb, job, {**pins, "pp": 4, "dp": 8, "zero_stage": 5})


def test_library_entry_points_refuse_what_they_cannot_use_with_a_planner_error():
    """Each raised something else (AttributeError, KeyError) or took a string as True."""
    import dataclasses

    import planner

    cases = [(lambda: planner.style(planner.evaluate("8b", 8, tp=1, pp=1, dp=8)), "df"),
             (lambda: planner.style(planner.search("8b", 8), columns=["bogus"]), "columns"),
             (lambda: planner.predict("narayanan2021_t1_1p7b"), "run"),
             (lambda: planner.search("8b", 8, find_min_gpus="no"), "find_min_gpus")]
    for call, field in cases:
        with pytest.raises(planner.PlannerError) as info:
            call()
        assert info.value.field == field
    df = planner.search("8b", 8)
    assert str(planner.style(df, columns=df.columns[:4])) == str(planner.style(df, columns=list(df.columns[:4])))
    assert str(planner.style(df, columns="tp")) == str(planner.style(df, columns=["tp"]))
    hw = planner.load_hardware("h100-sxm")
    with pytest.raises(planner.PlannerError, match="dataclasses.replace") as info:
        planner.compare_hardware("70b", 256, [hw, dataclasses.replace(hw, inter_bw_bytes_per_s=1e11)])
    assert "HardwareSpec(" not in str(info.value)                      # not the whole spec's repr


def test_readme_notebook_code_runs_and_the_cost_columns_match_the_search():
    """README's notebook block, executed as written: the vectorised path it shows reproduces the search's rows."""
    import re
    from pathlib import Path

    import numpy as np

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## In a notebook"):text.index("## How it works")]
    ns: dict = {}
    exec(re.search(r"```python\n(.*?)```", section, re.S).group(1), ns)     # noqa: S102 - our own README
    assert np.array_equal(ns["out"]["step_time_s"], ns["df"]["step_time_s"].to_numpy())


def test_selective_recompute_is_searched_only_where_it_can_save_memory():
    """With FlashAttention no s x s scores are kept, so selective recompute keeps exactly what none keeps and costs
    the attention forward again: the search counts the valid ones as rejected (after the validity rules, which
    still name what else is wrong with the rest) and ranks none of them; without
    FlashAttention (unfused attention keeps the scores) selective saves memory and is searched; pinned, it is
    priced."""
    from planner.cost import memory
    from planner.search import SELECTIVE_DOMINATED
    from planner.specs.strategy import Runtime
    m = load_model("llama-3.1-8b")
    assert float(memory.activation_bytes_per_layer(m, 8192, 1, 2, True, "selective")) == float(
        memory.activation_bytes_per_layer(m, 8192, 1, 2, True, "none"))
    flash = run_search("8b", 16, find_min_gpus=False)
    unpriced = run_search("8b", 16, find_min_gpus=False, pins=Pins(recompute="selective"))
    assert flash.rejected[SELECTIVE_DOMINATED] == len(unpriced.table) + unpriced.rejected.get(FIT_REASON, 0)
    assert "selective" not in set(flash.table["recompute"])
    unfused = run_search("8b", 16, find_min_gpus=False, runtime=Runtime(flash_attention=False))
    assert SELECTIVE_DOMINATED not in unfused.rejected and "selective" in set(unfused.table["recompute"])
    pinned = run_search("8b", 16, find_min_gpus=False, pins=Pins(recompute="selective"))
    assert len(pinned.table) and set(pinned.table["recompute"]) == {"selective"}


def test_string_columns_have_one_dtype_in_every_table():
    """recompute and placement come with pandas' str dtype whatever the search: pinned, unpinned, empty (nothing
    fits) or the closest layouts (pinned 405B searches once gave object columns, concatenated from empty chunks)."""
    frames = [run_search("405b", 512, pins=Pins(tp=8, pp=16), find_min_gpus=False).table,
              run_search("8b", 8, find_min_gpus=False).table, run_search("405b", 8, find_min_gpus=False).table,
              run_search("405b", 8, find_min_gpus=False).closest]
    assert len(frames[2]) == 0 < len(frames[3])
    dtypes = {str(f[c].dtype) for f in frames for c in ("recompute", "placement")}
    assert len(dtypes) == 1, dtypes
