"""A search times the layouts that fit and, of those that do not, the CLOSEST_TIMED nearest to fitting: the
closest table holds exactly those, timed as evaluate() times them one by one, and the rejection count still
counts every layout that does not fit."""

import numpy as np
import pytest

from planner import constraints
from planner.cost.step import memory_columns
from planner.candidates import enumerate_candidates, make_job
from planner.evaluate import evaluate
from planner.search import CLOSEST_TIMED, run_search
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model


@pytest.fixture(scope="module")
def result():
    return run_search("405b", 512)


def test_the_closest_are_the_nearest_to_fitting_and_all_timed(result):
    m, hw = load_model("405b"), load_hardware("h100-sxm")
    job = make_job(m, 512)
    cols = enumerate_candidates(m, job)
    _, valid = constraints.first_failure(constraints.rules(m, hw, job, cols), len(cols["tp"]))
    valid &= cols["recompute"] != 1           # selective recompute: dominated under FlashAttention, never timed
    parts, _ = memory_columns(m, hw, job, {k: v[valid] for k, v in cols.items()})
    over_gib = np.sort(sum(parts.values()) - result.capacity_bytes)
    over_gib = over_gib[over_gib > 0] / 2**30
    closest = result.closest
    assert result.rejected[constraints.FIT_REASON] > len(closest) == CLOSEST_TIMED
    # the nearest CLOSEST_TIMED of the ZeRO-sharded-over-all-ranks layouts that overflow (hybrid variants that
    # overflow only add to them), least overflow first, with times, no row left untimed
    assert closest["overflow_gib"].is_monotonic_increasing
    assert closest["overflow_gib"].iloc[-1] <= over_gib[CLOSEST_TIMED - 1] + 1e-9
    assert closest["step_time_s"].notna().all() and (closest["step_time_s"] > 0).all()
    assert result.table["step_time_s"].notna().all()


@pytest.mark.parametrize("i", [0, 1, CLOSEST_TIMED - 1])
def test_a_closest_layout_is_timed_as_alone(result, i):
    r = result.closest.iloc[i]
    alone = evaluate("405b", 512, tp=int(r["tp"]), cp=int(r["cp"]), pp=int(r["pp"]), dp=int(r["dp"]),
                     micro_batch=int(r["micro_batch"]), vpp=int(r["vpp"]), sequence_parallel=bool(r["sequence_parallel"]),
                     recompute=r["recompute"], zero_stage=int(r["zero_stage"]), dp_replicate=int(r["dp_replicate"]),
                     recompute_layers=int(r["recompute_layers"]))
    assert not alone.fits
    assert alone.row["step_time_s"] == pytest.approx(r["step_time_s"], rel=1e-12)
    assert alone.row["memory_gib"] == pytest.approx(r["memory_gib"], rel=1e-12)
