"""Interleaving with a micro-batch count p does not divide: Megatron-Core's micro-batch groups
(--microbatch-group-size-per-virtual-pipeline-stage; pipeline_parallel/schedules.py get_schedule_table,
get_pp_rank_microbatches and the group-size check in forward_backward_pipelining_with_interleaving).

The closed forms are checked against a small event simulation of that schedule written from the same source: each
rank runs its warm-up forwards, then one forward and one backward per step, then the cool-down backwards, in the
schedule table's order; an op waits for the rank's previous op and for its neighbour's."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.cost.pipeline import (bubble_ratio, first_chunk_in_flight, in_flight_layers, interleave_group_size,
                                   last_group_size)


def _table(m, v, n):
    """(micro-batch, chunk) in schedule order: groups of n micro-batches, each through chunk 0, 1, ... in turn."""
    out = []
    for lo in range(0, m, n):
        hi = m if lo + n >= m else lo + n
        out += [(j, c) for c in range(v) for j in range(lo, hi)]
    return out


def _rank_ops(p, m, v, n, r):
    t, total = _table(m, v, n), m * v
    warm = min(total, 2 * (p - r - 1) + (v - 1) * n)
    ops = [("F",) + t[k] for k in range(warm)]
    for i in range(total - warm):
        j, c = t[i]
        ops += [("F",) + t[warm + i], ("B", j, v - 1 - c)]      # backward runs the chunks in reverse
    ops += [("B", t[i][0], v - 1 - t[i][1]) for i in range(total - warm, total)]
    return ops


def _makespan(p, m, v, n, fwd=1.0, bwd=2.0):
    """Step time of the schedule with one chunk's forward taking `fwd` and its backward `bwd`; None on deadlock."""
    order = [_rank_ops(p, m, v, n, r) for r in range(p)]
    end, pos, clock = {}, [0] * p, [0.0] * p
    while any(pos[r] < len(order[r]) for r in range(p)):
        moved = False
        for r in range(p):
            while pos[r] < len(order[r]):
                kind, j, c = order[r][pos[r]]
                if kind == "F":
                    dep = ("F", r - 1, c, j) if r else (("F", p - 1, c - 1, j) if c else None)
                else:
                    dep = (("B", r + 1, c, j) if r < p - 1 else
                           ("B", 0, c + 1, j) if c < v - 1 else ("F", p - 1, v - 1, j))
                if dep is not None and dep not in end:
                    break
                clock[r] = max(clock[r], end.get(dep, 0.0)) + (fwd if kind == "F" else bwd)
                end[(kind, r, c, j)] = clock[r]
                pos[r] += 1
                moved = True
        if not moved:
            return None
    return max(clock)


def _peaks(p, m, v, n, r):
    """(most chunk activations rank r holds at once, most chunk-0 micro-batches it holds at once)."""
    live, peak, live0, peak0 = set(), 0, set(), 0
    for kind, j, c in _rank_ops(p, m, v, n, r):
        if kind == "F":
            live.add((j, c))
            live0 |= {j} if c == 0 else set()
        peak, peak0 = max(peak, len(live)), max(peak0, len(live0))
        if kind == "B":
            live.discard((j, c))
            live0.discard(j) if c == 0 else None
    return peak, peak0


@pytest.mark.parametrize("p, m, n", [(4, 8, 4), (4, 10, 5), (4, 9, 5), (4, 14, 5), (8, 12, 12), (8, 20, 10),
                                     (2, 7, 4), (2, 2521, 11), (64, 193, 97)])
def test_group_size_by_hand(p, m, n):
    # (4, 9): 9 mod 4 = 1 < 4 is refused, 9 mod 5 = 4 >= 4 is not; (2, 2521): 2..10 all divide 2520, leaving 1
    assert int(interleave_group_size(p, m, 2)) == n


def test_group_size_is_p_without_interleaving_or_when_p_divides_m():
    assert interleave_group_size([4, 4, 4], [8, 10, 3], [2, 1, 2]).tolist() == [4, 4, 4]
    assert last_group_size([4, 4, 4], [8, 10, 9], 2).tolist() == [4, 5, 4]     # 9 = 5 + 4


@given(st.integers(2, 24), st.integers(0, 200))
def test_group_size_is_the_smallest_megatron_accepts(p, extra):
    m = p + extra
    n = int(interleave_group_size(p, m, 2))
    accepted = [k for k in range(p, m + 1) if m % k == 0 or m % k >= p]
    assert n == accepted[0]
    # torch.distributed.pipelining's ScheduleInterleaved1F1B: rounds = max(1, m // p), m % rounds == 0; its
    # micro-batches per round are the same N wherever it accepts m
    rounds = max(1, m // p)
    if m % rounds == 0:
        assert m // rounds == n


@pytest.mark.parametrize("p", [2, 3, 4, 6])
@pytest.mark.parametrize("v", [2, 3])
def test_memory_matches_the_simulated_schedule(p, v):
    for m in range(p, 4 * p + 3):
        n = int(interleave_group_size(p, m, v))
        for r in range(p):
            chunks, chunk0 = _peaks(p, m, v, n, r)
            assert float(in_flight_layers(v, r, p, m, v)) == chunks, (p, v, m, r)  # v layers: one per chunk
            if r == 0:
                assert int(first_chunk_in_flight(p, m, v)) == chunk0, (p, v, m)


@pytest.mark.parametrize("p, v", [(2, 2), (4, 2), (4, 3), (8, 2), (8, 4)])
def test_bubble_is_unchanged_by_the_group_size(p, v):
    # Narayanan §2.2.2: idle (p − 1)/(v·m) of the ideal time, for every accepted group size, not only N = p
    fwd, bwd = 1.0, 2.0
    for m in range(p, 3 * p + 2):
        ideal = m * v * (fwd + bwd)
        for n in (k for k in range(p, m + 1) if m % k == 0 or m % k >= p):
            assert _makespan(p, m, v, n, fwd, bwd) == pytest.approx(ideal * (1 + float(bubble_ratio(p, m, v))))


def test_the_simulation_sees_the_stall_megatron_refuses():
    # a last group smaller than p: the check exists because this schedule stalls (or deadlocks)
    assert _makespan(4, 10, 2, 4) > 10 * 2 * 3 * (1 + float(bubble_ratio(4, 10, 2)))
    assert _makespan(8, 12, 2, 8) is None


def test_warmup_grows_with_the_group():
    # 405B-like: p = 16, v = 8, m = 24 (16 does not divide 24): N = 24 (24 mod 17..23 are 7..1), so the first stage
    # holds 2·15 + 7·24 + 1 = 199 chunks, capped at m·v = 192: every chunk of the step
    assert int(interleave_group_size(16, 24, 8)) == 24
    assert float(in_flight_layers(8, 0, 16, 24, 8)) == pytest.approx(192 * 8 / 8)
    assert np.isclose(float(in_flight_layers(8, 0, 16, 32, 8)), (2 * 15 + 7 * 16 + 1) * 8 / 8)


def test_a_stack_without_micro_batch_groups_needs_a_multiple_of_pp():
    """Runtime(microbatch_groups=False) prices a Megatron-LM of 2021-24, whose interleaved schedule took only a
    micro-batch count PP divides: 405B on 12,288 GPUs, TP8 CP4 PP6 DP64 runs 32 micro-batches in groups of 8 on a
    current stack and is refused without groups; 36 micro-batches (global batch 2,304) run on both, alike."""
    import planner
    from planner.errors import PlannerError
    from planner.specs.strategy import Runtime

    kw = dict(tp=8, cp=4, pp=6, dp=64, vpp=7, micro_batch=1)
    assert int(planner.evaluate("405b", 12288, **kw).row["num_microbatches"]) == 32
    with pytest.raises(PlannerError, match="multiple of PP"):
        planner.evaluate("405b", 12288, runtime=Runtime(microbatch_groups=False), **kw)
    old = planner.evaluate("405b", 12288, global_batch=2304, runtime=Runtime(microbatch_groups=False), **kw).row
    new = planner.evaluate("405b", 12288, global_batch=2304, **kw).row
    assert int(old["num_microbatches"]) == 36 and old["step_time_s"] == new["step_time_s"]
    # a search without groups ranks only interleaved layouts whose micro-batches PP divides
    table = planner.search("70b", 512, runtime=Runtime(microbatch_groups=False))
    inter = table[table["vpp"] > 1]
    assert len(inter) and (inter["num_microbatches"] % inter["pp"] == 0).all()


def test_the_cli_plans_a_stack_without_micro_batch_groups():
    """--no-microbatch-groups is Runtime(microbatch_groups=False) on the command line: the pinned 32-micro-batch
    layout is refused with the rule, and a search ranks only interleaved layouts whose micro-batches PP divides."""
    import json

    from typer.testing import CliRunner

    from planner.cli import app

    runner = CliRunner()
    pinned = ["-m", "405b", "-g", "12288", "--tp", "8", "--cp", "4", "--pp", "6", "--dp", "64", "--vpp", "7",
              "--micro-batch", "1"]
    assert runner.invoke(app, pinned).exit_code == 0
    out = runner.invoke(app, pinned + ["--no-microbatch-groups"])
    assert out.exit_code == 2 and "multiple of PP (this stack has no micro-batch groups)" in out.output
    out = runner.invoke(app, ["-m", "70b", "-g", "512", "--no-microbatch-groups", "--format", "json", "--top", "50"])
    rows = json.loads(out.stdout)["configs"]
    inter = [r for r in rows if r["vpp"] > 1]
    assert out.exit_code == 0 and inter and all(r["num_microbatches"] % r["pp"] == 0 for r in inter)
