"""Properties of the cost model over random but consistent architectures, every bundled hardware profile and random
valid layouts (hypothesis). tests/cost/ checks the same kinds of statements on two fixed presets; here the model
itself is random, and the composed `step_columns` / `memory_columns` path and the search are exercised.

Where the physics makes a monotonicity claim false, the exception is stated next to the property and the property
is tested only where it holds (never weakened into something that cannot fail):

* PP: with Megatron's (L+2)/p uneven split, and with interleaving (stage 0 holds L(1 + (p-1)/(pv)) layers' worth),
  memory per GPU can legitimately rise with p; only even 1F1B splits before and after are tested.
* ZeRO-3 holds transient copies of a gathered unit (two 16-bit copies and two gradients; the unit is a layer, or
  the embedding/head on the edge stages), so 2 -> 3 only pays off where the sharded weights outweigh them
  (helpers.zero3_pays_off).
* MFU <= 1 needs attention not to dominate: PaLM's convention counts the full s^2 attention while FlashAttention
  computes the causal half, so MFU is only bounded for seq_len <= 4 * hidden.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest
from helpers import zero3_pays_off
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import planner
from planner.cost.memory import MEMORY_PARTS
from planner.cost.pipeline import bubble_fraction, stage_layers, stage_split_valid
from planner.cost.step import KNOBS, TIME_PARTS, memory_columns, step_columns
from planner.specs.model import ModelFile
from planner.specs.strategy import Job

GIB = 2**30
HARDWARE = planner.list_hardware()
FUSED = [hw for hw in HARDWARE if hw.fused_attention]      # context parallelism runs only on fused attention
PRESETS = sorted(mf.name for mf in planner.list_models())
# PLANNER_PROPERTY_EXAMPLES=2000 for a longer run (the search property scales with it, 1/4 as many).
EXAMPLES = int(os.environ.get("PLANNER_PROPERTY_EXAMPLES", "80"))
PROPS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


# --- strategies ------------------------------------------------------------------------------------------------------

@st.composite
def models(draw, realistic=False):
    """A consistent dense decoder: heads a multiple of kv_heads, hidden a multiple of heads*8, FFN 2-4x hidden.

    realistic: head_dim >= 32, at least 4 heads, and seq_len <= 4 * hidden (attention does not dominate)."""
    kv = draw(st.sampled_from([1, 2, 4, 8, 16]), label="kv_heads")
    heads = kv * draw(st.sampled_from([1, 2, 4, 8]), label="group")
    if realistic:
        assume(heads >= 4)
    head_dim = 8 * draw(st.integers(4 if realistic else 1, 16), label="head_dim/8")
    hidden = heads * head_dim
    ffn = 8 * draw(st.integers(hidden // 4, hidden // 2), label="ffn/8")          # 2h..4h, a multiple of 8
    max_seq = min(8192, 4 * hidden) if realistic else 8192
    assume(max_seq >= 256)
    mf = ModelFile(
        name="random", layers=draw(st.integers(2, 128), label="layers"), hidden=hidden, ffn_hidden=ffn, heads=heads,
        kv_heads=kv, vocab=draw(st.integers(1000, 256_000), label="vocab"),
        seq_len=draw(st.integers(256, max_seq), label="seq_len"), gated_mlp=draw(st.booleans(), label="gated"),
        tied_embeddings=draw(st.booleans(), label="tied"),
        # Gemma 2/3's block and Mistral/Gemma's sliding windows (on all layers or some)
        post_norms=draw(st.booleans(), label="post_norms"), final_softcap=draw(st.booleans(), label="softcap"),
        **draw(st.one_of(st.just({}), st.builds(lambda w, share: {"sliding_window": w, "window_layers": share},
                                                st.integers(64, 8192), st.one_of(st.none(), st.integers(1, 2)))),
               label="window"),
    )
    return mf.to_spec()


def valid_tps(m):
    """TP degrees the search accepts (planner/constraints.py): divide heads, hidden and FFN; KV heads divide or are
    divided by TP."""
    return [t for t in TP_CANDIDATES if m.heads % t == 0 and (m.kv_heads % t == 0 or t % m.kv_heads == 0)
            and m.hidden % t == 0 and m.ffn_hidden % t == 0]


def valid_pps(m, even=False):
    ps = [p for p in range(1, min(m.layers, 64) + 1) if bool(stage_split_valid(m.layers, p))]
    return [p for p in ps if m.layers % p == 0] if even else ps


def divisors(n):
    return [i for i in range(1, n + 1) if n % i == 0]


@st.composite
def layouts(draw, m, tp=None, pp=None, even_pp=False, vpp1=False, cp1=False):
    """One valid layout for model m, as a dict of plain values (KNOBS) plus the global batch it implies."""
    t = tp if tp is not None else draw(st.sampled_from(valid_tps(m)), label="tp")
    p = pp if pp is not None else draw(st.sampled_from(valid_pps(m, even_pp)), label="pp")
    d = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 64]), label="dp")
    b = draw(st.sampled_from([1, 2, 4]), label="micro_batch")
    n_mb = draw(st.integers(1, 64), label="num_microbatches")
    first, mid, last = (int(x) for x in stage_layers(m.layers, p))
    vpps = divisors(mid) if (p > 1 and first == mid == last and n_mb % p == 0 and not vpp1) else [1]
    v = draw(st.sampled_from(vpps), label="vpp")
    sp = draw(st.booleans(), label="sp") if (t > 1 and m.seq_len % t == 0) else False
    rc = draw(st.integers(0, 2), label="recompute")
    c = draw(st.sampled_from([1] + [x for x in (2, 4) if m.seq_len % (2 * x) == 0]), label="cp") if not cp1 else 1
    sp = sp and (m.seq_len // c) % t == 0
    z = draw(st.integers(0, 3), label="zero") if d * c > 1 else 0
    k = draw(st.integers(0, max(mid // v, 1)), label="rc_layers") if rc == 2 else 0     # 0: every layer
    # hybrid sharding: a replicate degree dividing DP that leaves a shard group of 2 or more ranks
    r = draw(st.sampled_from([x for x in divisors(d) if d // x * c >= 2]), label="dp_replicate") if z else 1
    return (dict(tp=t, cp=c, pp=p, dp=d, micro_batch=b, vpp=v, sp=sp, recompute=rc, rc_layers=k, zero=z,
                 dp_replicate=r), d * b * n_mb)


def cols_of(*rows):
    absent = {"dp_replicate": 1}                          # and rc_layers 0
    cols = {k: np.array([r.get(k, absent.get(k, 0)) for r in rows], dtype=np.int64) for k in KNOBS}
    cols["sp"] = cols["sp"].astype(bool)
    return cols


def job_for(m, layout, batch):
    return Job(gpus=layout["tp"] * layout["cp"] * layout["pp"] * layout["dp"], seq_len=m.seq_len, global_batch=batch)


def memory_parts(m, hw, job, layout):
    parts, _ = memory_columns(m, hw, job, cols_of(layout))
    return {k: float(v[0]) for k, v in parts.items()}


def memory_total(m, hw, job, layout):
    return sum(memory_parts(m, hw, job, layout).values())


REL = 1e-12      # float noise allowance for "never increases"


# --- memory monotonicity ---------------------------------------------------------------------------------------------

@PROPS
@given(data=st.data(), m=models(), hw=st.sampled_from(HARDWARE))
def test_memory_never_increases_when_tp_doubles(data, m, hw):
    pairs = [t for t in valid_tps(m) if 2 * t in valid_tps(m)]
    assume(pairs)
    t = data.draw(st.sampled_from(pairs), label="tp")
    layout, batch = data.draw(layouts(m, tp=t), label="layout")
    job = job_for(m, layout, batch)
    before = memory_total(m, hw, job, layout)
    after = memory_total(m, hw, job, {**layout, "tp": 2 * t})      # SP, PP, DP, batch, ... unchanged
    assert after <= before * (1 + REL), (t, layout, before, after)


@PROPS
@given(data=st.data(), m=models(), hw=st.sampled_from(FUSED))
def test_memory_never_increases_when_cp_doubles(data, m, hw):
    """Context parallelism halves every activation per rank (exactly, on one stage) and lets ZeRO shard over twice
    the replicas (on hardware with fused attention, the only one CP runs on: constraints.rules)."""
    layout, batch = data.draw(layouts(m, pp=1), label="layout")
    c = layout["cp"]
    assume(m.seq_len % (4 * c) == 0)
    job = job_for(m, layout, batch)
    before, after = memory_parts(m, hw, job, layout), memory_parts(m, hw, job, {**layout, "cp": 2 * c})
    assert after["activations"] == pytest.approx(before["activations"] / 2, rel=1e-9), (c, layout)
    for part in ("weights", "gradients", "optimizer", "gathered", "other"):
        assert after[part] <= before[part] * (1 + REL), (part, c, layout)


@PROPS
@given(data=st.data(), m=models(), hw=st.sampled_from(HARDWARE))
def test_memory_never_increases_when_pp_doubles_with_even_splits(data, m, hw):
    pairs = [p for p in valid_pps(m, even=True) if m.layers % (2 * p) == 0]
    assume(pairs)
    p = data.draw(st.sampled_from(pairs), label="pp")
    layout, batch = data.draw(layouts(m, pp=p, vpp1=True), label="layout")        # 1F1B: see the module docstring
    job = job_for(m, layout, batch)
    before = memory_total(m, hw, job, layout)
    after = memory_total(m, hw, job, {**layout, "pp": 2 * p})
    # except that the first stage holds one more micro-batch's token ids (and embedding dropout mask) per stage in
    # flight (formulas.md §3.4): a few bytes per token, which only a toy model's smaller stages do not outweigh
    from planner.cost.memory import embedding_input_bytes
    n_mb = batch // (layout["dp"] * layout["micro_batch"])
    inputs = float(embedding_input_bytes(m, m.seq_len / layout["cp"], layout["micro_batch"], layout["tp"],
                                         layout["sp"]))
    extra = (min(n_mb, 2 * p) - min(n_mb, p)) * inputs
    assert after <= before * (1 + REL) + extra, (p, layout, before, after)


@PROPS
@given(data=st.data(), m=models(), hw=st.sampled_from(HARDWARE))
def test_memory_never_increases_with_the_zero_stage(data, m, hw):
    layout, batch = data.draw(layouts(m), label="layout")
    d = layout["dp"] * layout["cp"] // layout["dp_replicate"]       # the ranks one ZeRO shard group spans
    job = job_for(m, layout, batch)
    totals = [memory_total(m, hw, job, {**layout, "zero": z}) for z in range(4)]
    assert totals[1] <= totals[0] * (1 + REL) and totals[2] <= totals[1] * (1 + REL), totals
    if zero3_pays_off(m, layout["tp"], layout["pp"], d):      # see the module docstring
        assert totals[3] <= totals[2] * (1 + REL), (layout, totals)
    if d > 1:      # model states alone shrink strictly on every stage (the peak stage itself may change)
        from planner.cost.memory import stage_state_bytes

        per_zero = [stage_state_bytes(m, layout["tp"], layout["pp"], d, z) for z in range(4)]
        for stage in range(3):
            states = [float(sum(per_zero[z][stage].values())) for z in range(4)]
            assert states[0] > states[1] > states[2] > states[3], (stage, states)


def test_zero3_exception_is_real():
    """The restriction above is needed: with d = 2 and 2 layers per stage, ZeRO-3 costs more than it saves."""
    m = ModelFile(name="tiny", layers=2, hidden=1024, ffn_hidden=4096, heads=8, vocab=1000, seq_len=256).to_spec()
    hw = planner.load_hardware("h100-sxm")
    job = Job(gpus=2, seq_len=256, global_batch=2)
    layout = dict(tp=1, cp=1, pp=1, dp=2, micro_batch=1, vpp=1, sp=False, recompute=0, zero=2)
    z2 = memory_total(m, hw, job, layout)
    z3 = memory_total(m, hw, job, {**layout, "zero": 3})
    assert not zero3_pays_off(m, 1, 1, 2)      # outside the region where the property is claimed...
    assert z3 > z2                             # ...and indeed ZeRO-3 needs more memory here


def test_mfu_bound_needs_attention_not_to_dominate():
    """The restriction of the MFU property is needed: at s = 2^20 >> 4h, PaLM's full-s^2 attention FLOPs exceed what
    FlashAttention computes (the causal half) by more than the kernels' inefficiency, and MFU > 1, on an H100 whose
    attention runs at FlashAttention-3's 75% of peak (Shah et al. 2024: "up to 740 TFLOPs/s (75% utilization)")."""
    import dataclasses

    s = 2**20
    m = ModelFile(name="long", layers=32, hidden=1024, ffn_hidden=2048, heads=32, kv_heads=1, vocab=32000,
                  seq_len=s, gated_mlp=False).to_spec()
    layout = dict(tp=1, cp=1, pp=1, dp=1, micro_batch=1, vpp=1, sp=False, recompute=0, zero=0)
    fa3 = dataclasses.replace(planner.load_hardware("h100-sxm"), attention_efficiency=0.75)
    out = step_columns(m, fa3, Job(gpus=1, seq_len=s, global_batch=8), cols_of(layout))
    assert float(out["mfu"][0]) > 1


@PROPS
@given(data=st.data(), m=models(), hw=st.sampled_from(HARDWARE))
def test_activations_never_increase_with_stronger_recompute(data, m, hw):
    """none >= selective >= full. With unfused attention (V100) full recompute of only some layers of a chunk can
    keep more than selective: the other layers keep their s x s scores, which selective drops everywhere."""
    layout, batch = data.draw(layouts(m), label="layout")
    job = job_for(m, layout, batch)
    acts = [memory_parts(m, hw, job, {**layout, "recompute": rc})["activations"] for rc in (0, 1, 2)]
    assert acts[0] >= acts[1] * (1 - REL), (layout, acts)
    if hw.fused_attention or layout["rc_layers"] == 0:
        assert acts[1] >= acts[2] * (1 - REL), (layout, acts)
    assert acts[2] > 0


# --- faster hardware ------------------------------------------------------------------------------------------------

@PROPS
@given(data=st.data(), m=models(realistic=True), hw=st.sampled_from(HARDWARE),
       field=st.sampled_from(["inter_bw_bytes_per_s", "intra_bw_bytes_per_s", "peak_flops", "hbm_bw_bytes_per_s"]),
       factor=st.sampled_from([1.01, 1.25, 2.0, 8.0]), inter=st.sampled_from([0.0, 0.002, 0.05]))
def test_step_never_slower_on_faster_hardware(data, m, hw, field, factor, inter):
    """A faster network, NVLink, GEMM peak or HBM never lengthens the step of a fixed layout: overlapped
    communication slows compute per byte moved, so a link that moves the same bytes faster cannot disturb it more.
    Also with a network overlap value of the profile's own (the bundled ones fit 0), which counts per second."""
    layout, batch = data.draw(layouts(m), label="layout")
    job = job_for(m, layout, batch)
    hw = dataclasses.replace(hw, overlap_slowdown_inter=inter)
    faster = dataclasses.replace(hw, **{field: getattr(hw, field) * factor})
    slow = float(step_columns(m, hw, job, cols_of(layout))["step_time_s"][0])
    fast = float(step_columns(m, faster, job, cols_of(layout))["step_time_s"][0])
    assert fast <= slow * (1 + REL), (field, factor, layout, slow, fast)


# --- pipeline bubble -------------------------------------------------------------------------------------------------

@settings(max_examples=max(100, EXAMPLES), deadline=None)
@given(p=st.lists(st.integers(1, 256), min_size=1, max_size=20), m=st.integers(1, 10_000),
       dm=st.integers(0, 10_000), v=st.integers(1, 32), dv=st.integers(0, 32))
def test_bubble_fraction_in_unit_interval_and_non_increasing(p, m, dm, v, dv):
    pp = np.array(p)
    f = bubble_fraction(pp, m, v)
    assert np.all(f >= 0) and np.all(f < 1)
    assert np.all(f[pp == 1] == 0)
    assert np.all(bubble_fraction(pp, m + dm, v) <= f)
    assert np.all(bubble_fraction(pp, m, v + dv) <= f)
    # vectorised over p equals one call per p
    assert [float(x) for x in f] == [float(bubble_fraction(x, m, v)) for x in p]


# --- one layout through step_columns ---------------------------------------------------------------------------------

@PROPS
@given(data=st.data(), m=models(realistic=True), hw=st.sampled_from(HARDWARE))
def test_parts_finite_non_negative_and_summing_to_the_totals(data, m, hw):
    layout, batch = data.draw(layouts(m), label="layout")
    job = job_for(m, layout, batch)
    out = step_columns(m, hw, job, cols_of(layout))
    times = {k: float(out[f"{k}_s"][0]) for k in TIME_PARTS}
    mem = {k: float(out[f"mem_{k}_bytes"][0]) for k in MEMORY_PARTS}
    for name, value in [*times.items(), *mem.items()]:
        assert math.isfinite(value) and value >= 0, (name, value, layout)
    step, memory = float(out["step_time_s"][0]), float(out["memory_bytes"][0])
    assert step > 0 and times["compute"] > 0 and mem["weights"] > 0 and mem["activations"] > 0
    assert sum(times.values()) == pytest.approx(step, rel=1e-12)
    assert sum(mem.values()) == pytest.approx(memory, rel=1e-12)
    mfu, hfu = float(out["mfu"][0]), float(out["hfu"][0])
    assert 0 < mfu <= 1, (mfu, layout, m)
    assert mfu <= hfu * (1 + 1e-12) and hfu > 0
    assert float(out["tokens_per_s"][0]) == pytest.approx(batch * job.seq_len / step, rel=1e-12)
    assert int(out["num_microbatches"][0]) * layout["micro_batch"] * layout["dp"] == batch


@st.composite
def batch_of_layouts(draw, m):
    """Several layouts of one model sharing one job (global batch 2^k, DP and micro-batch powers of two)."""
    k = draw(st.integers(6, 12), label="log2 batch")
    batch = 2**k
    rows = []
    for _ in range(draw(st.integers(2, 12), label="rows")):
        t = draw(st.sampled_from(valid_tps(m)))
        p = draw(st.sampled_from(valid_pps(m)))
        i = draw(st.integers(0, min(6, k)))
        j = draw(st.integers(0, min(2, k - i)))
        d, b = 2**i, 2**j
        n_mb = batch // (d * b)
        first, mid, last = (int(x) for x in stage_layers(m.layers, p))
        v = draw(st.sampled_from(divisors(mid) if (p > 1 and first == mid == last and n_mb % p == 0) else [1]))
        sp = draw(st.booleans()) if (t > 1 and m.seq_len % t == 0) else False
        c = draw(st.sampled_from([1] + [x for x in (2, 4) if m.seq_len % (2 * x) == 0 and (m.seq_len // x) % t == 0]))
        rows.append(dict(tp=t, cp=c, pp=p, dp=d, micro_batch=b, vpp=v, sp=sp, recompute=draw(st.integers(0, 2)),
                         zero=draw(st.integers(0, 3)) if d > 1 else 0))
    return rows, batch


@PROPS
@given(data=st.data(), m=models(), hw=st.sampled_from(HARDWARE))
def test_scalar_and_vectorised_evaluation_agree_exactly(data, m, hw):
    rows, batch = data.draw(batch_of_layouts(m), label="rows")
    job = Job(gpus=1, seq_len=m.seq_len, global_batch=batch)    # step_columns takes the GPU count from the columns
    vec = step_columns(m, hw, job, cols_of(*rows))
    for i, row in enumerate(rows):
        one = step_columns(m, hw, job, cols_of(row))
        assert set(one) == set(vec)
        for key in vec:
            a, b = np.asarray(vec[key])[i], np.asarray(one[key])[0]
            assert a == b, (key, row, a, b)


# --- the search ------------------------------------------------------------------------------------------------------

@settings(max_examples=max(20, EXAMPLES // 4) if EXAMPLES > 80 else 20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(PRESETS), gpus=st.sampled_from([8, 16, 32, 64, 128, 256, 512]),
       hw=st.sampled_from(HARDWARE), pick=st.integers(0, 10**6))
def test_search_rows_are_valid_and_evaluate_reproduces_them(name, gpus, hw, pick):
    result = planner.run_search(name, gpus, hardware=hw, find_min_gpus=False)
    table, m = result.table, result.model
    capacity_gib = result.capacity_bytes / GIB
    if len(table) == 0:
        # nothing fits: the valid layouts are reported as the closest ones, each over the limit
        closest = result.closest
        assert len(closest) or sum(result.rejected.values()) == result.considered
        assert (closest["tp"] * closest["cp"] * closest["pp"] * closest["dp"] == gpus).all()
        assert (closest["memory_gib"] > capacity_gib).all() and not closest["fits"].any()
        return
    assert (table["tp"] * table["cp"] * table["pp"] * table["dp"] == gpus).all()
    assert table["fits"].all() and (table["memory_gib"] <= capacity_gib).all()
    assert (result.job.seq_len % (2 * table["cp"]) == 0)[table["cp"] > 1].all()
    assert (table["tp"] <= hw.gpus_per_node).all()
    assert (m.heads % table["tp"] == 0).all()
    assert (table["global_batch"] % (table["dp"] * table["micro_batch"]) == 0).all()
    speeds = table["tokens_per_s"].to_numpy()
    assert np.all(speeds[:-1] >= speeds[1:])                                   # ranked best first
    n = len(table)
    for i in sorted({0, 1, 2, n - 1, pick % n} & set(range(n))):
        row = table.iloc[i].to_dict()
        ev = planner.evaluate(name, gpus, hardware=hw, tp=int(row["tp"]), cp=int(row["cp"]), pp=int(row["pp"]),
                              dp=int(row["dp"]),
                              micro_batch=int(row["micro_batch"]), vpp=int(row["vpp"]),
                              sequence_parallel=bool(row["sequence_parallel"]), recompute=str(row["recompute"]),
                              recompute_layers=int(row["recompute_layers"]), zero_stage=int(row["zero_stage"]),
                              dp_replicate=int(row["dp_replicate"]))
        assert set(ev.row) == set(row)
        diff = {k: (row[k], ev.row[k]) for k in row if row[k] != ev.row[k]}
        assert not diff, (name, gpus, hw.name, i, diff)
