"""Per-layout pricing of the data-parallel collectives (cost.placement): the search's rows come in blocks of one
layout, priced once per block; the result must be the same, bit for bit, in any row order and row by row."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner import constraints
from planner.candidates import enumerate_candidates, make_job
from planner.cost.placement import layout_runs
from planner.cost.step import step_columns
from planner.specs.strategy import Runtime


def test_layout_runs_by_hand():
    """Runs of equal (TP, CP, PP, DP, replicas): rows 0-1, 2-3 and 4; dp_replicate absent counts as 1."""
    c = {"tp": np.array([8, 8, 8, 8, 4]), "cp": 1, "pp": np.array([2, 2, 4, 4, 4]), "dp": np.array([4, 4, 2, 2, 4]),
         "micro_batch": np.array([1, 2, 1, 2, 1])}
    one, first, runs = layout_runs(c)
    assert first.tolist() == [0, 2, 4] and runs.tolist() == [0, 0, 1, 1, 2]
    assert one["tp"].tolist() == [8, 8, 4] and one["pp"].tolist() == [2, 4, 4]
    assert one["dp_replicate"].tolist() == [1, 1, 1]
    scalar = {"tp": 8, "cp": 1, "pp": 2, "dp": 4}
    assert layout_runs(scalar)[1:] == (None, None)
    # rows of two layouts taking turns (hybrid-sharding variants): each layout once, in order of first appearance
    c = {"tp": np.array([8, 4, 8, 4, 8, 4]), "cp": 1, "pp": 2, "dp": np.array([2, 4, 2, 4, 2, 4]),
         "dp_replicate": np.array([2, 1, 2, 1, 2, 1])}
    one, first, runs = layout_runs(c)
    assert first.tolist() == [0, 1] and runs.tolist() == [0, 1, 0, 1, 0, 1]
    assert one["tp"].tolist() == [8, 4] and one["dp_replicate"].tolist() == [2, 1]


def _candidates(model, gpus, hardware, rows):
    m, hw = planner.load_model(model), planner.load_hardware(hardware).for_job(gpus)
    job = make_job(m, gpus)
    cols = enumerate_candidates(m, job)
    _, valid = constraints.first_failure(constraints.rules(m, hw, job, cols), len(cols["tp"]))
    pick = np.flatnonzero(valid)[np.linspace(0, valid.sum() - 1, rows).astype(int)]   # every layout's blocks
    cols = {k: v[pick] for k, v in cols.items()}
    # hybrid sharding on some ZeRO rows, so that replicas split runs too
    hsdp = (cols["zero"] >= 1) & (cols["dp"] % 2 == 0) & (np.arange(rows) % 3 == 0)
    cols["dp_replicate"] = np.where(hsdp, 2, cols["dp_replicate"])
    return m, hw, job, cols


CASES = [("405b", 512, "h100-sxm", Runtime()), ("70b", 256, "gb200", Runtime(zero1_all_reduce=True)),
         ("8b", 64, "mi300x", Runtime(overlap_grad_reduce=False, zero3_gather_unit="matrix"))]


@settings(max_examples=6, deadline=None)
@given(case=st.sampled_from(CASES), seed=st.integers(0, 2**32 - 1))
def test_any_row_order_prices_the_same(case, seed):
    """Shuffled rows (runs broken up) get exactly the prices of the block-ordered ones."""
    model, gpus, hardware, runtime = case
    m, hw, job, cols = _candidates(model, gpus, hardware, 400)
    order = np.random.default_rng(seed).permutation(len(cols["tp"]))
    blocks = step_columns(m, hw, job, cols, runtime=runtime)
    shuffled = step_columns(m, hw, job, {k: v[order] for k, v in cols.items()}, runtime=runtime)
    for key in ("step_time_s", "pp_comm_s", "dp_comm_s", "dp_inner"):
        assert np.array_equal(np.asarray(shuffled[key]), np.asarray(blocks[key])[order]), key


def test_rows_priced_alone_match_the_block():
    """Each row as a layout of its own (scalar columns) gets the price its block gave it."""
    for model, gpus, hardware, runtime in CASES:
        m, hw, job, cols = _candidates(model, gpus, hardware, 120)
        blocks = step_columns(m, hw, job, cols, runtime=runtime)
        for i in range(0, 120, 7):
            alone = step_columns(m, hw, job, {k: v[i] for k, v in cols.items()}, runtime=runtime)
            for key in ("step_time_s", "dp_comm_s", "pp_comm_s"):
                assert float(alone[key]) == float(blocks[key][i]), (model, i, key)
