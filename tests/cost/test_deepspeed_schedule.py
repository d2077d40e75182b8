"""DeepSpeed's pipeline engine runs the same timeline as Megatron's 1F1B, so the planner prices its runs (MT-NLG,
BLOOM, GPT-NeoX) with the same bubble, (p - 1)/m.

DeepSpeed's TrainSchedule (deepspeed/runtime/pipe/schedule.py) is not written as warm-up, steady state and cool-down:
it runs 2(m + p - 1) steps, and on each step a stage either runs a forward or a backward, the two alternating by
the parity of step + stage; the micro-batch of a step is its half-index shifted by the stage (forward) or by the
distance to the last stage (backward), and steps whose micro-batch is outside [0, m) compute nothing. A forward step
first receives its activation from the previous stage and then sends the previous step's input gradient back; a
backward step first sends the previous step's activation on and then receives its output gradient. Every send and
receive is blocking and must be met by its partner (the schedule's docstrings). Its pairwise hand-offs at every
step could in principle lock the stages into a slower rhythm than Megatron's 1F1B (whose stages exchange with
batched send/receive pairs); the event simulation below, written from those rules, shows they do not.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.pipeline import bubble_ratio


def _deepspeed_ops(p, m, s):
    """Stage s's operations in order: ("F"|"B", j) compute and ("send"|"recv", what, j) hand-offs."""
    ops, prev = [], None
    for step in range(2 * (m + p - 1)):
        forward = (step + s) % 2 == 0
        half = step // 2
        j = half - s // 2 if forward else half - p + (s + 1) // 2 if step % 2 == 0 else (step - 1) // 2 - p + 1 + s // 2
        real, real_prev = 0 <= j < m, prev is not None and 0 <= prev < m
        if forward and s > 0:
            ops += [("recv", "act", j)] if real else []
            ops += [("send", "grad", prev)] if real_prev else []
        if not forward and s < p - 1:
            ops += [("send", "act", prev)] if real_prev else []
            ops += [("recv", "grad", j)] if real else []
        if real:
            ops.append(("F" if forward else "B", j))
        prev = j
    return ops


def _megatron_ops(p, m, s):
    """Megatron's 1F1B: p - s - 1 warm-up forwards, then forward/backward pairs, then the cool-down backwards; the
    steady state's send-and-receive pairs are batched (one hand-off that completes when both partners are in it)."""
    warm, ops = min(p - s - 1, m), []
    for j in range(warm):
        ops += ([("recv", "act", j)] if s else []) + [("F", j)] + ([("send", "act", j)] if s < p - 1 else [])
    if warm < m and s:
        ops.append(("recv", "act", warm))
    for i in range(m - warm):
        f = warm + i
        ops.append(("F", f))
        if s < p - 1:
            ops.append(("pair", ("send", "act", f), ("recv", "grad", i)))
        ops.append(("B", i))
        if f + 1 < m and s:
            ops.append(("pair", ("send", "grad", i), ("recv", "act", f + 1)))
        elif s:
            ops.append(("send", "grad", i))
    for i in range(m - warm, m):
        ops += ([("recv", "grad", i)] if s < p - 1 else []) + [("B", i)] + ([("send", "grad", i)] if s else [])
    return ops


def _halves(op):
    return list(op[1:]) if op[0] == "pair" else [op]


def _peer(s, half):
    kind, what, _ = half
    return s + 1 if (kind, what) in (("send", "act"), ("recv", "grad")) else s - 1


def _partner(half):
    kind, what, j = half
    return ("recv" if kind == "send" else "send", what, j)


def _makespan(schedule, p, m, fwd, bwd):
    """Step time with stage s's forward taking fwd[s] and its backward bwd[s]; a hand-off completes when every
    partner it is chained to has reached it. None on deadlock."""
    ops = [schedule(p, m, s) for s in range(p)]
    t, i = [0.0] * p, [0] * p
    while any(i[s] < len(ops[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while i[s] < len(ops[s]) and ops[s][i[s]][0] in ("F", "B"):
                t[s] += (fwd if ops[s][i[s]][0] == "F" else bwd)[s]
                i[s], moved = i[s] + 1, True
            if i[s] == len(ops[s]):
                continue
            group, todo, ok = {s}, [s], True
            while todo and ok:
                q = todo.pop()
                for half in _halves(ops[q][i[q]]):
                    r = _peer(q, half)
                    ok = i[r] < len(ops[r]) and _partner(half) in _halves(ops[r][i[r]])
                    if not ok:
                        break
                    if r not in group:
                        group.add(r)
                        todo.append(r)
            if ok:
                start = max(t[q] for q in group)
                for q in group:
                    t[q], i[q] = start, i[q] + 1
                moved = True
        if not moved:
            return None
    return max(t)


@pytest.mark.parametrize("p, m", [(4, 32), (12, 128), (35, 160), (35, 240)])
def test_deepspeed_runs_the_1f1b_timeline(p, m):
    """Equal stages, full recompute (backward = 3 forwards): DeepSpeed's steps take (m + p - 1)(F + B), the 1F1B
    step time m(F + B)(1 + (p - 1)/m) the planner prices, for GPT-NeoX's PP 4, BLOOM's PP 12 and MT-NLG's PP 35."""
    fwd, bwd = [1.0] * p, [3.0] * p
    step = m * 4.0 * (1 + float(bubble_ratio(p, m)))
    assert _makespan(_deepspeed_ops, p, m, fwd, bwd) == pytest.approx(step)
    assert _makespan(_megatron_ops, p, m, fwd, bwd) == pytest.approx(step)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.integers(1, 24), st.lists(st.floats(0.5, 2.0), min_size=9, max_size=9))
def test_deepspeed_and_megatron_take_the_same_time_on_any_stages(p, extra, load):
    """Any stage loads (the last stage's logits make it heavier, an edge stage of an uneven split lighter): the two
    schedules finish together, so no DeepSpeed-specific pipeline term is missing from the model."""
    m = p + extra
    fwd = [load[s] for s in range(p)]
    bwd = [2.0 * f for f in fwd]
    deepspeed, megatron = _makespan(_deepspeed_ops, p, m, fwd, bwd), _makespan(_megatron_ops, p, m, fwd, bwd)
    assert deepspeed is not None and megatron is not None
    assert deepspeed == pytest.approx(megatron)
