"""Pipeline schedule: bubble (Narayanan 2021 §2.2), in-flight micro-batches (Korthikanti 2022 §4, Megatron
schedules.py warm-up), stage split (formulas.md §7, §9)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.pipeline import (bubble_fraction, bubble_ratio, in_flight_layers, split_kind, stage_layers,
                                   stage_split_valid)


@pytest.mark.parametrize("v, printed_pct", [(1, 48.4), (2, 31.9), (4, 19.0), (8, 10.5)])
def test_bubble_llama_405b_p16_m16_formulas_md_section_9(v, printed_pct):
    p, m = 16, 16
    r = (p - 1) / (v * m)                      # Narayanan §2.2.1 / §2.2.2
    assert float(bubble_ratio(p, m, v)) == pytest.approx(r, rel=1e-15)
    assert float(bubble_fraction(p, m, v)) == pytest.approx(r / (1 + r), rel=1e-15)
    assert abs(100 * float(bubble_fraction(p, m, v)) - printed_pct) < 0.05  # printed with one decimal


def test_bubble_fraction_equals_gpipe_share_of_step():
    # 1F1B/GPipe: step = (m + p − 1)(t_F + t_B), idle (p − 1)(t_F + t_B) -> (p − 1)/(m + p − 1) (formulas.md §5)
    for p, m in [(2, 1), (4, 8), (8, 64), (16, 16)]:
        assert float(bubble_fraction(p, m)) == pytest.approx((p - 1) / (m + p - 1), rel=1e-14)
    assert float(bubble_ratio(1, 7)) == 0.0 and float(bubble_fraction(1, 7)) == 0.0


def test_in_flight_1f1b_stage_r_holds_min_m_p_minus_r():
    # formulas.md §9: p = 16, m = 16, middle stages 8 layers: stage r holds min(16, 16 − r) micro-batches.
    assert float(in_flight_layers(7, 0, 16, 16)) == 7 * 16      # stage 0 (7 layers): 112
    assert float(in_flight_layers(8, 1, 16, 16)) == 8 * 15      # stage 1: 120 (the peak)
    assert float(in_flight_layers(8, 2, 16, 16)) == 8 * 14
    assert float(in_flight_layers(7, 15, 16, 16)) == 7 * 1      # last stage: one micro-batch
    r = np.arange(16)
    assert np.array_equal(in_flight_layers(8, r, 16, 16), 8 * np.minimum(16, 16 - r))


@pytest.mark.parametrize("p", [1, 2, 4, 8, 16, 32])
def test_in_flight_stage_0_holds_L_layers_worth_independent_of_p(p):
    # Korthikanti §4 (pipeline): stage 0 holds p micro-batches × L/p layers = L layers' worth.
    L = 96
    assert float(in_flight_layers(L // p, 0, p, 64)) == L


@pytest.mark.parametrize("L, p, v", [(96, 4, 3), (96, 8, 2), (96, 8, 4), (128, 16, 8), (126, 7, 3)])
def test_in_flight_interleaved_stage_0_korthikanti_penalty(L, p, v):
    # Korthikanti §4 / Megatron interleaved_schedule_memory_penalty: L·(1 + (p − 1)/(p·v)) with m large (and a
    # multiple of p: the default micro-batch group of p)
    expected = L * (1 + (p - 1) / (p * v))
    assert float(in_flight_layers(L // p, 0, p, 100 * p, v)) == pytest.approx(expected, rel=1e-12)


def test_in_flight_interleaved_deeper_stages_follow_megatron_warmup():
    # Megatron schedules.py: warm-up = 2(p − r − 1) + (v − 1)·p chunk forwards, +1 in steady state; chunk = L/(p·v)
    p, v, per_stage = 8, 2, 12
    for r in range(p):
        chunks = 2 * (p - r - 1) + (v - 1) * p + 1
        assert float(in_flight_layers(per_stage, r, p, 1000, v)) == pytest.approx(chunks * per_stage / v)
    # 1000 micro-batches = 125 groups of p = 8: the default group size


def test_in_flight_capped_at_m_when_m_below_p():
    # formulas.md §3.3: m < p scales memory by m/p (only m micro-batches exist).
    assert float(in_flight_layers(12, 0, 8, 3)) == 3 * 12
    assert float(in_flight_layers(12, 0, 8, 1)) == 12
    # interleaved: all m·v chunks of the step, each L/(p·v) layers -> m·(layers on stage)
    assert float(in_flight_layers(12, 0, 8, 3, 2)) == 3 * 12
    assert float(in_flight_layers(12, 0, 8, 3, 4)) == 3 * 12


@pytest.mark.parametrize("L, p, valid, split", [
    (126, 16, True, (7, 8, 7)),      # formulas.md §9: (126 + 2)/16 = 8 slots; edges give one to embedding / loss
    (96, 8, True, (12, 12, 12)),     # even split
    # 126 % 5 = 1, 127 % 5 = 2, 128 % 5 = 3: explicit edges (--decoder-first/last-pipeline-num-layers), three
    # middle stages of ceil(128/5) = 26 and the 126 - 78 = 48 left split 24/24
    (126, 5, True, (24, 26, 24)),
    (126, 2, True, (63, 63, 63)),
    (126, 4, True, (31, 32, 31)),    # 128/4 = 32
    (80, 1, True, (80, 80, 80)),
    (4, 8, False, None),             # more stages than layers
    # Megatron's loss flag alone (validate_args adds one layer per flag): (L + 1)/p slots, the last stage one short
    (80, 3, True, (27, 27, 26)),     # Llama 3.1 70B on PP 3: 81/3
    (80, 9, True, (9, 9, 8)),
    (79, 2, True, (40, 40, 39)),
    # 80, 81, 82 are not multiples of 6: 4 x 14 in the middle (ceil(82/6)), 12 and 12 on the edges
    (80, 6, True, (12, 14, 12)),
    (80, 7, True, (10, 12, 10)),
    (32, 5, True, (6, 7, 5)),        # 11 edge layers: the odd one goes first (the last stage has the logits)
    (126, 24, False, None),          # 22 stages of ceil(128/24) = 6 exceed 126
    (32, 10, False, None),           # 8 x 4 = 32 leaves the edges nothing
])
def test_stage_split(L, p, valid, split):
    assert bool(stage_split_valid(L, p)) is valid
    if valid:
        first, mid, last = (int(x) for x in stage_layers(L, p))
        assert (first, mid, last) == split
        assert first + max(p - 2, 0) * mid + (last if p > 1 else 0) == L


def test_stage_split_vectorized():
    p = np.array([1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128])
    assert stage_split_valid(126, p).tolist() == [True] * 11 + [False]
    kinds = split_kind(126, p).tolist()
    assert kinds == [0, 0, 0, 1, 3, 0, 0, 1, 1, 1, 1, -1]      # 4, 8, ...: (126 + 2)/p; 5: explicit edges
    first, mid, last = stage_layers(126, p[:-1])
    assert np.array_equal(first + np.maximum(p[:-1] - 2, 0) * mid + np.where(p[:-1] > 1, last, 0), [126] * 11)


@settings(max_examples=300, deadline=None)
@given(L=st.integers(1, 200), p=st.integers(1, 64))
def test_every_valid_split_adds_up_and_keeps_the_edges_no_heavier(L, p):
    """Whatever the split kind, the stages hold every layer once, each at least one, and the first and last stage
    (which also hold the embedding and the logits) never more than a middle one: the middle stage paces."""
    if not stage_split_valid(L, p):
        return
    first, mid, last = (int(x) for x in stage_layers(L, p))
    assert first + max(p - 2, 0) * mid + (last if p > 1 else 0) == L
    assert min(first, mid, last) >= 1 and first <= mid and last <= mid and last <= first
    if split_kind(L, p) == 3:      # Megatron-Core: the middle stages divide what the edges leave
        assert p >= 3 and (L - first - last) % (p - 2) == 0


@settings(max_examples=100, deadline=None)
@given(p=st.integers(1, 128), m=st.integers(1, 4096), v=st.integers(1, 16))
def test_bubble_fraction_in_unit_interval(p, m, v):
    f = float(bubble_fraction(p, m, v))
    assert 0.0 <= f < 1.0
    assert (f == 0.0) == (p == 1)


@settings(max_examples=100, deadline=None)
@given(p=st.integers(1, 128), m=st.integers(1, 4096), dm=st.integers(1, 512), v=st.integers(1, 16),
       dv=st.integers(1, 8))
def test_bubble_fraction_non_increasing_in_m_and_v(p, m, dm, v, dv):
    f = float(bubble_fraction(p, m, v))
    assert float(bubble_fraction(p, m + dm, v)) <= f
    assert float(bubble_fraction(p, m, v + dv)) <= f
    if p > 1:
        assert float(bubble_fraction(p, m + dm, v)) < f


def test_the_pacing_stage_brings_its_own_communication():
    """With an uneven split (70 layers on 12 stages: 5 on the edges, 6 in the middle) and a huge vocabulary, the
    last stage paces the pipeline; its TP time is that of its 5 layers, not of a middle stage's 6."""
    import dataclasses

    import planner
    from planner.evaluate import evaluate

    base = planner.load_model("gpt-1.7b")
    small, huge = (dataclasses.replace(base, name=f"v{v}", layers=70, vocab=v) for v in (1024, 1_024_000))
    pins = dict(hardware="a100-80gb", tp=4, pp=12, dp=1, micro_batch=1, vpp=1, recompute="none", zero_stage=0,
                sequence_parallel=False, global_batch=24)
    mid, edge = (evaluate(model=m, gpus=48, **pins).row for m in (small, huge))
    assert edge["compute_s"] > 2 * mid["compute_s"]          # the logits make the edge stage the slowest
    assert edge["tp_comm_s"] == pytest.approx(5 / 6 * mid["tp_comm_s"], rel=1e-9)


def test_the_embedding_chunk_holds_p_or_2p_micro_batches():
    """1F1B: stage 0 holds min(m, p) micro-batches. Interleaved, Megatron's warm-up (2(p-1) + (v-1)p = 38 chunk
    forwards for p = 8, v = 4) runs chunk 0 on micro-batches 0-7, chunks 1-3 on them, then chunk 0 on 8-15 before
    chunk 0's first backward: 16, capped by m."""
    from planner.cost.pipeline import first_chunk_in_flight
    assert first_chunk_in_flight(8, 64, 1) == 8 and first_chunk_in_flight(8, 64, 4) == 16
    assert first_chunk_in_flight(8, 4, 1) == 4 and first_chunk_in_flight(8, 12, 2) == 12
    assert list(first_chunk_in_flight(np.array([8, 16]), 128, np.array([4, 4]))) == [16, 32]


def test_loss_accounting_alone_lightens_only_the_last_stage():
    """Llama 3.1 70B on PP 3: 81 slots, Megatron's --account-for-loss-in-pipeline-split alone: 27, 27 and 26 layers,
    the last stage with the output head; its parameters and its pacing time (with the logits) follow, and the
    exports name that one flag (torchtitan: last_stage_less_layers 1, first 0)."""
    from planner.cost import params as P
    from planner.cost.memory import stage_params
    from planner.evaluate import evaluate
    from planner.export import export
    from planner.specs.model import load_model

    m = load_model("70b")
    first, _, last = (float(x) for x in stage_params(m, 8, 3))
    layer = float(P.layer_params_per_gpu(m, 8))
    assert first == pytest.approx(27 * layer + float(P.embedding_params_per_gpu(m, 8)), rel=1e-12)
    assert last == pytest.approx(26 * layer + float(P.output_params_per_gpu(m, 8)), rel=1e-12)
    ev = evaluate("70b", 384, tp=8, pp=3, cp=1, vpp=1)
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    assert "--account-for-loss-in-pipeline-split" in text and "--account-for-embedding" not in text
    titan, _ = export("torchtitan", ev.row, ev.result.model, ev.result.job)
    assert "pipeline_parallel_first_stage_less_layers = 0" in titan
    assert "pipeline_parallel_last_stage_less_layers = 1" in titan


@given(st.integers(1, 200), st.lists(st.integers(1, 64), min_size=65, max_size=400))   # max < size: gathered
def test_a_column_of_pp_degrees_splits_as_each_degree_alone(layers, degrees):
    """The search's path (one model, a column of PP degrees: the split computed once per degree and gathered) gives
    what each degree gives on its own."""
    from planner.cost.pipeline import _split, _splits
    pp = np.asarray(degrees)
    for column, alone in zip(_splits(layers, pp), _split(np.int64(layers), pp)):
        assert column.shape == pp.shape and (column == alone).all()
    for i in (0, len(degrees) - 1):
        assert split_kind(layers, degrees[i]) == split_kind(layers, pp)[i]
        assert tuple(stage_layers(layers, degrees[i])) == tuple(x[i] for x in stage_layers(layers, pp))


@given(st.integers(2, 400), st.integers(2, 128))
def test_the_middle_stage_holds_ceil_l_over_p_layers(layers, pp):
    """No split of L layers over p stages can keep every stage under ceil(L/p); every split the planner takes has
    its middle (largest) stages at exactly that, so the bottleneck is the best any framework's balancer reaches."""
    if not stage_split_valid(layers, pp):
        return
    first, mid, last = (int(x) for x in stage_layers(layers, pp))
    assert mid == -(-layers // pp) and max(first, last) <= mid
