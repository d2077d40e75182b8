"""step_columns: the composed model is internally consistent and vectorized evaluation equals scalar evaluation.

Identities checked (module docstring, formulas.md §2.5 and §5): step = compute + tp_comm + pp_comm + dp_comm +
bubble + optimizer; memory = weights + gradients + optimizer + activations + other; tokens/s = B·s/step;
MFU = model FLOPs/(step·N·C_peak) (PaLM App. B); HFU adds recompute FLOPs.
"""

import math

import numpy as np
import pytest

from planner.cost import flops
from planner.cost.memory import MEMORY_PARTS
from planner.cost.step import KNOBS, TIME_PARTS, step_columns
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model
from planner.specs.strategy import Job, Runtime

# (tp, pp, dp, micro_batch, vpp, sp, recompute, zero) — all multiply to 64 GPUs, valid for Llama-3.1-8B (L = 32,
# a = 32, g = 8) and for gpt-22b (L = 48, a = 64).
ROWS = [
    (8, 1, 8, 1, 1, True, 1, 1),
    (4, 2, 8, 1, 1, True, 0, 0),
    (2, 4, 8, 2, 2, False, 2, 2),
    (1, 8, 8, 1, 2, False, 0, 3),
    (8, 8, 1, 1, 1, True, 2, 0),
    (1, 1, 64, 1, 1, False, 2, 3),
    (2, 2, 16, 4, 1, True, 1, 1),
    (8, 4, 2, 1, 1, True, 1, 2),
]


ROW_KNOBS = ("tp", "pp", "dp", "micro_batch", "vpp", "sp", "recompute", "zero")     # the ROWS tuples; cp = 1


def columns(rows):
    arr = list(zip(*rows))
    cols = {k: np.array(v) for k, v in zip(ROW_KNOBS, arr)}
    cols["sp"] = cols["sp"].astype(bool)
    cols["cp"] = np.ones_like(cols["tp"])
    cols["rc_layers"] = np.zeros_like(cols["tp"])      # full recompute: every layer
    cols["dp_replicate"] = np.ones_like(cols["tp"])    # ZeRO over all DP ranks
    assert set(cols) == set(KNOBS)
    return cols


CASES = [
    ("llama-3.1-8b", "h100-sxm", Job(gpus=64, seq_len=4096, global_batch=256), Runtime()),
    ("gpt-22b", "a100-80gb", Job(gpus=64, seq_len=2048, global_batch=128),
     Runtime(flash_attention=False, overlap_grad_reduce=False, overlap_param_gather=False)),
    ("llama-3.1-8b", "b200", Job(gpus=64, seq_len=8192, global_batch=64),
     Runtime(tp_comm_overlap=True, causal_flops_halved=True)),
]


@pytest.fixture(scope="module", params=range(len(CASES)), ids=[f"{c[0]}-{c[1]}" for c in CASES])
def case(request):
    name, hw_name, job, rt = CASES[request.param]
    m, hw = load_model(name), load_hardware(hw_name)
    cols = columns(ROWS)
    return m, hw, job, rt, cols, step_columns(m, hw, job, cols, runtime=rt)


def test_all_parts_finite_and_non_negative(case):
    *_, out = case
    for k in [f"{p}_s" for p in TIME_PARTS] + [f"mem_{p}_bytes" for p in MEMORY_PARTS]:
        v = np.asarray(out[k], dtype=float)
        assert v.shape == (len(ROWS),), k
        assert np.isfinite(v).all() and (v >= 0).all(), k
    assert (out["compute_s"] > 0).all() and (out["mem_weights_bytes"] > 0).all()
    assert (out["mem_activations_bytes"] > 0).all()


def test_step_time_is_sum_of_time_parts(case):
    *_, out = case
    parts = sum(out[f"{p}_s"] for p in TIME_PARTS)
    assert np.allclose(out["step_time_s"], parts, rtol=1e-14, atol=0)


def test_memory_is_sum_of_memory_parts(case):
    *_, out = case
    parts = sum(out[f"mem_{p}_bytes"] for p in MEMORY_PARTS)
    assert np.allclose(out["memory_bytes"], parts, rtol=1e-14, atol=0)


def test_throughput_and_utilisation_identities(case):
    m, hw, job, rt, cols, out = case
    step = out["step_time_s"]
    n_gpus = cols["tp"] * cols["pp"] * cols["dp"]
    assert (n_gpus == job.gpus).all()
    tokens = job.global_batch * job.seq_len
    assert np.allclose(out["tokens_per_s"], tokens / step, rtol=1e-14, atol=0)
    model_flops = flops.model_flops_per_step(m, job.seq_len, job.global_batch, rt.causal_flops_halved)
    mfu = model_flops / (step * n_gpus * hw.peak_flops)
    assert np.allclose(out["mfu"], mfu, rtol=1e-14, atol=0)
    assert np.allclose(out["tflops_per_gpu"], model_flops / (step * n_gpus) / 1e12, rtol=1e-14, atol=0)
    hw_flops = tokens * flops.hardware_flops_per_token(m, job.seq_len, cols["recompute"], rt.causal_flops_halved)
    assert np.allclose(out["hfu"], hw_flops / (step * n_gpus * hw.peak_flops), rtol=1e-14, atol=0)
    assert ((out["mfu"] > 0) & (out["mfu"] < 1)).all()
    # HFU ≥ MFU, equal exactly when nothing is recomputed
    assert (out["hfu"][cols["recompute"] == 0] == out["mfu"][cols["recompute"] == 0]).all()
    assert (out["hfu"][cols["recompute"] > 0] > out["mfu"][cols["recompute"] > 0]).all()


def test_num_microbatches_and_trivial_parts(case):
    m, hw, job, rt, cols, out = case
    # m = B/(b·d) (formulas.md §0)
    assert (out["num_microbatches"] == job.global_batch // (cols["micro_batch"] * cols["dp"])).all()
    # no pipeline -> no bubble and no P2P; no data parallelism -> no DP communication; TP1 -> no TP comm
    assert (out["bubble_s"][cols["pp"] == 1] == 0).all() and (out["pp_comm_s"][cols["pp"] == 1] == 0).all()
    assert (out["dp_comm_s"][cols["dp"] == 1] == 0).all()
    assert (out["tp_comm_s"][cols["tp"] == 1] == 0).all()


def test_bubble_is_p_minus_1_over_v_micro_batches_of_the_stage(case):
    # Narayanan §2.2: bubble = (p − 1)/v × (t_F + t_B) of one micro-batch on the stage; compute + TP comm of the
    # step are m micro-batches of the same stage -> bubble/(compute + tp) = (p − 1)/(v·m).
    m, hw, job, rt, cols, out = case
    ratio = (cols["pp"] - 1) / (cols["vpp"] * out["num_microbatches"])
    assert np.allclose(out["bubble_s"], ratio * (out["compute_s"] + out["tp_comm_s"]), rtol=1e-13, atol=0)


def test_vectorized_and_scalar_evaluation_agree_exactly(case):
    m, hw, job, rt, cols, out = case
    for i in range(len(ROWS)):
        one = {k: v[i:i + 1] for k, v in cols.items()}
        single = step_columns(m, hw, job, one, runtime=rt)
        for key, value in out.items():
            got = np.asarray(single[key])
            assert got.shape in ((1,), ()), key
            assert got.reshape(-1)[0] == np.asarray(value)[i], (i, key)


def test_zero_dim_scalar_columns_agree_with_vector_rows():
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    job = Job(gpus=64, seq_len=4096, global_batch=256)
    cols = columns(ROWS)
    out = step_columns(m, hw, job, cols)
    i = 2
    scalar = {k: (bool(v[i]) if k == "sp" else int(v[i])) for k, v in cols.items()}
    single = step_columns(m, hw, job, scalar)
    for key, value in out.items():
        assert float(np.asarray(single[key])) == float(np.asarray(value)[i]), key


def test_reordering_rows_does_not_change_results():
    m, hw = load_model("gpt-22b"), load_hardware("h100-sxm")
    job = Job(gpus=64, seq_len=2048, global_batch=128)
    out = step_columns(m, hw, job, columns(ROWS))
    rev = step_columns(m, hw, job, columns(ROWS[::-1]))
    for key in out:
        assert np.array_equal(np.asarray(out[key]), np.asarray(rev[key])[::-1]), key


def test_memory_columns_are_gib_sane_for_llama_8b():
    # Loose physical sanity (formulas.md §3): TP8·DP8 ZeRO-1 with selective recompute keeps the 8B model's states
    # at (6 + 12/8)·8.03e9/8 ≈ 7.5 GB (the 65 RMSNorms of 4096, whole on every TP rank, add 7/8 of themselves),
    # and everything fits well within 80 GB.
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    out = step_columns(m, hw, Job(gpus=64, seq_len=4096, global_batch=256), columns(ROWS[:1]))
    states = out["mem_weights_bytes"] + out["mem_gradients_bytes"] + out["mem_optimizer_bytes"]
    norms = 65 * 4096
    assert float(states[0]) == pytest.approx((6 + 12 / 8) * (8_030_261_248 + 7 * norms) / 8, rel=1e-12)
    assert math.isfinite(float(out["memory_bytes"][0])) and float(out["memory_bytes"][0]) < 80e9


def test_interleaved_dp_overlap_window_by_formula():
    """Megatron-Core syncs each chunk's gradients after its last backward and prefetches each chunk's parameters
    (schedules.py grad_sync_func / param_sync_func): with v > 1 chunks the DP collectives hide behind (v − 1)·p/v
    micro-batch passes of the stage and the last chunk's 1/v share stays exposed; without interleaving, behind one
    pass with one bucket exposed. Checked for ZeRO-1 (reduce-scatter grads + all-gather params) against that
    formula written out from the stage's per-layer times and the ring collectives; without overlap v changes
    nothing."""
    from planner.cost import comm, memory
    from planner.cost.pipeline import stage_layers
    from planner.cost.layer import layer_times

    m, hw = load_model("405b"), load_hardware("h100-sxm")
    t, p, d = 8, 4, 16
    job = Job(gpus=512, seq_len=1024, global_batch=64)        # 4 short micro-batches: the window, not the floor, binds
    vs = (1, 2, 4, 8)                                         # (126 + 2)/4 = 32 layer slots per stage
    rows = [(t, p, d, 1, v, True, 0, 1) for v in vs]
    out = step_columns(m, hw, job, columns(rows), runtime=Runtime())
    assert out["dp_inner"].all()                              # DP next to TP: ranks 8 apart
    fwd, bwd, tp_fwd, tp_bwd = layer_times(m, hw, job, {"tp": t, "micro_batch": 1, "sp": True, "recompute": 0},
                                           Runtime())
    layers = int(stage_layers(m.layers, p)[1])
    stage_fwd, stage_bwd = layers * (fwd + tp_fwd), layers * (bwd + tp_bwd)
    params = float(np.maximum.reduce(memory.stage_params(m, t, p)))
    buckets = math.ceil(params * 4 / 160e6)
    rs = comm.reduce_scatter_time_s(params * 4, d, t, hw, count=buckets)
    ag = comm.all_gather_time_s(params * 2, d, t, hw, count=buckets)
    # DP ranks are 8 apart: one per node, all on the network, where the overlapped share that still slows compute
    # is NVLink's 0.1 scaled by the bandwidth ratio, 47 / 369 GB/s, per byte: over the time the bytes take, not the
    # latencies (per bucket 14 us + 15 network steps of 4 us)
    u = 0.1 * (400 / 8 * 0.94) / (450 * 0.82)
    latency = buckets * (14e-6 + 15 * 4.0e-6)

    def exposed(comm_s, window_s):
        return comm_s - min(comm_s, window_s) * (1 - u * (comm_s - latency) / comm_s)

    for v, got in zip(vs, out["dp_comm_s"]):
        passes, edge = ((v - 1) * p / v, v) if v > 1 else (1.0, buckets)
        expected = max(exposed(rs, passes * stage_bwd), rs / edge) + max(exposed(ag, passes * stage_fwd), ag / edge)
        assert got == pytest.approx(float(expected), rel=1e-9), v
    # here the reduce-scatter outlasts the widest window, so the window formula itself decides the exposed time
    assert all(rs > (v - 1) * p / v * stage_bwd for v in vs[1:])
    plain = step_columns(m, hw, job, columns(rows),
                         runtime=Runtime(overlap_grad_reduce=False, overlap_param_gather=False))
    assert np.allclose(plain["dp_comm_s"], plain["dp_comm_s"][0], rtol=1e-12)


def _one(m, hw, job, row, rt=Runtime()):
    return step_columns(m, hw, job, columns([row]), runtime=rt)


def test_pp_and_dp_communication_by_hand():
    """Two communication terms worked out by hand from the H100 profile (NVLink 450 GB/s per direction x NCCL busbw
    0.82 = 369 GB/s; collective base latency 14 us; NVLink step 1.9 us), Llama 3.1 8B (h = 4096, s = 4096).

    PP, TP1 PP4 DP1 on one node, b = 1, B = 8 -> m = 8: each send is 2·s·b·h = 33,554,432 bytes, one send takes
    14 + 1.9 us + 33,554,432 / 369e9 s = 106.83 us, and 1F1B sends forward and backward (m + p − 1) = 11 times:
    2 x 11 x 106.83 us = 2.3503 ms (Narayanan §4.1).
    DP, TP1 PP1 DP8 on one node, plain all-reduce without overlap: 8,030,261,248 params x 4-byte grads =
    32,121,044,992 bytes; ring 2·(7/8)·S/W = 0.152336 s, in one call (Megatron-Core does not bucket a reduction it
    does not overlap) paying 14 + 2·7·1.9 = 40.6 us of latency: 0.152377 s; in 160 MB buckets, ceil(S / 160 MB) =
    201 calls: 8.1606 ms of latency -> 0.160496 s (Thakur et al. 2005; NCCL tuning model)."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    pp = _one(m, hw, Job(gpus=4, seq_len=4096, global_batch=8), (1, 4, 1, 1, 1, False, 0, 0))
    assert pp["pp_comm_s"][0] == pytest.approx(2 * 11 * (15.9e-6 + 33_554_432 / 369e9), rel=1e-9)
    assert pp["pp_comm_s"][0] == pytest.approx(2.3503e-3, rel=1e-4)
    dp = _one(m, hw, Job(gpus=8, seq_len=4096, global_batch=8), (1, 1, 8, 1, 1, False, 0, 0),
              Runtime(overlap_grad_reduce=False, overlap_param_gather=False))
    s_bytes = 8_030_261_248 * 4
    assert dp["dp_comm_s"][0] == pytest.approx(1.75 * s_bytes / 369e9 + 40.6e-6, rel=1e-9)
    assert dp["dp_comm_s"][0] == pytest.approx(0.152377, rel=1e-5)
    dp = _one(m, hw, Job(gpus=8, seq_len=4096, global_batch=8), (1, 1, 8, 1, 1, False, 0, 0),
              Runtime(overlap_grad_reduce=False, overlap_param_gather=False, dp_bucket_bytes=160e6))
    assert dp["dp_comm_s"][0] == pytest.approx(1.75 * s_bytes / 369e9 + 201 * 40.6e-6, rel=1e-9)
    assert dp["dp_comm_s"][0] == pytest.approx(0.160496, rel=1e-5)


def test_gradient_buckets_follow_megatron_cores_default():
    """Megatron-Core's DDP buckets hold max(40M, 1M x DP·CP) gradient elements (DistributedDataParallelConfig
    .bucket_size): 160 MB of fp32 gradients up to 40 replicas, 512 MB at DP 128 (formulas.md §3.5), when the
    reduction overlaps the backward; without overlap it sets bucket_size None: one call. Llama 3.1 8B, TP1 PP1 DP128
    on 16 nodes: 32,121,044,992 bytes in ceil(S / 512 MB) = 63 buckets; plain, one call paying the tree's latency
    once. A run's own bucket size (PyTorch DDP: 25 MB) replaces the default either way."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    job, row = Job(gpus=128, seq_len=4096, global_batch=128), (1, 1, 128, 1, 1, False, 0, 0)
    s_bytes = 8_030_261_248 * 4
    assert math.ceil(s_bytes / 512e6) == 63

    def dp_s(**rt):
        return _one(m, hw, job, row, Runtime(**rt))["dp_comm_s"][0]

    assert dp_s() == pytest.approx(dp_s(dp_bucket_bytes=512e6), rel=1e-12)       # overlapped: 512 MB buckets
    # On 100 Gb/s NICs the reduction outlasts the backward, and the bucket count shows (on the profile's NICs it
    # hides, and only its bytes slow the compute: any bucket size then costs the same)
    slow = hw.with_network(8, 100e9 / 8)

    def slow_s(**rt):
        return _one(m, slow, job, row, Runtime(**rt))["dp_comm_s"][0]

    assert slow_s() == pytest.approx(slow_s(dp_bucket_bytes=512e6), rel=1e-12)
    assert slow_s() != pytest.approx(slow_s(dp_bucket_bytes=160e6), rel=1e-6)
    plain = dict(overlap_grad_reduce=False, overlap_param_gather=False)
    per_call = 14e-6 + 2 * 7 * 1.9e-6 + 2 * 4 * 4.0e-6          # tree over 16 nodes: 2·(7 NVLink + log2 16 network)
    assert dp_s(**plain) == pytest.approx(dp_s(dp_bucket_bytes=1e15, **plain), rel=1e-12)     # one call
    assert dp_s(dp_bucket_bytes=160e6, **plain) - dp_s(**plain) == pytest.approx((201 - 1) * per_call, rel=1e-9)


def test_recompute_names_price_the_same_as_codes(case):
    m, hw, job, rt, cols, out = case
    names = np.array(["none", "selective", "full", "op"])[cols["recompute"]]
    by_name = step_columns(m, hw, job, {**cols, "recompute": names}, runtime=rt)
    for k in ("step_time_s", "compute_s", "mem_activations_bytes", "hfu"):
        assert np.array_equal(by_name[k], out[k]), k


@pytest.mark.parametrize("knob, value", [("sp", np.array(["False"])), ("zero", np.array(["3"])),
                                         ("tp", np.array([2.5])), ("zero", np.array([4])), ("sp", np.array([2])),
                                         ("recompute", np.array(["everything"])), ("pp", np.array([-1])),
                                         ("tp", np.array([0])), ("micro_batch", np.array([0]))])
def test_a_knob_column_of_the_wrong_kind_is_an_error_naming_it(knob, value):
    from planner.errors import PlannerError

    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    cols = {k: v[:1] for k, v in columns(ROWS).items()}
    with pytest.raises(PlannerError) as err:
        step_columns(m, hw, CASES[0][2], {**cols, knob: value})
    assert err.value.field == knob


def test_narrow_integer_columns_price_as_int64():
    """int16 or uint8 knob columns (a notebook's own arrays) gave wrapped products: TP 8 x PP 32 x DP 128 in int16
    made MFU negative."""
    m, hw = load_model("llama-3.1-405b"), load_hardware("h100-sxm")
    job = Job(gpus=32768, seq_len=8192, global_batch=2048)
    cols = dict(tp=[8], cp=[1], pp=[32], dp=[128], micro_batch=[1], vpp=[1], sp=[True], recompute=[1], zero=[1],
                rc_layers=[0])
    wide = step_columns(m, hw, job, {k: np.array(v) for k, v in cols.items()})
    for dtype in (np.int16, np.uint8, np.int32):
        narrow = {k: np.array(v, dtype=bool if k == "sp" else dtype) for k, v in cols.items() if
                  k == "sp" or max(v) <= np.iinfo(dtype).max}
        if len(narrow) < len(cols):
            narrow = {**{k: np.array(v) for k, v in cols.items()}, **narrow}
        got = step_columns(m, hw, job, narrow)
        assert np.array_equal(got["mfu"], wide["mfu"]) and wide["mfu"][0] > 0, dtype


def test_pipeline_sends_are_split_over_tp_ranks_only_with_sp_or_scatter_gather():
    """TP2 PP4 on one H100 node, Llama 3.1 8B (h = 4096, s = 4096), b = 1, m = 8: a stage's output is
    2·s·b·h = 33,554,432 bytes. Megatron-Core sends all of it from each TP rank without SP
    (schedules.get_tensor_shapes), 1/t of it with SP; Megatron-LM 2021-22's scatter/gather (Narayanan §4.1) and
    DeepSpeed's pipeline engine split it without SP too (Runtime.pp_scatter_gather), and the receiver all-gathers
    the halves over NVLink before using them: (2 − 1)/2 of the whole at 369 GB/s plus NCCL's 14 + 1.9 us, the cost
    of the send itself here. 1F1B sends 2 x (m + p − 1) = 22 times, each 14 + 1.9 us + bytes / 369 GB/s."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    job = Job(gpus=8, seq_len=4096, global_batch=8)

    def pp_s(sp, rt=Runtime()):
        return _one(m, hw, job, (2, 4, 1, 1, 1, sp, 0, 0), rt)["pp_comm_s"][0]

    whole, half = 33_554_432, 33_554_432 / 2
    assert pp_s(False) == pytest.approx(22 * (15.9e-6 + whole / 369e9), rel=1e-9)
    assert pp_s(True) == pytest.approx(22 * (15.9e-6 + half / 369e9), rel=1e-9)
    assert pp_s(False, Runtime(pp_scatter_gather=True)) == pytest.approx(
        22 * (15.9e-6 + half / 369e9) + 22 * (15.9e-6 + whole / 2 / 369e9), rel=1e-9)     # send + all-gather
    assert pp_s(True, Runtime(pp_scatter_gather=True)) == pytest.approx(pp_s(True), rel=1e-12)


def test_tp_backward_with_sp_keeps_the_row_parallel_gradient_all_gathers_on_the_critical_path():
    """Korthikanti §4.2.2 / Megatron-Core: with SP the column-parallel layers (QKV, MLP-in) re-gather their input
    behind their data-gradient GEMM and reduce-scatter their input gradient behind their weight-gradient GEMM; the
    row-parallel layers' output gradient is all-gathered synchronously (the backward of the forward's
    reduce-scatter) before their data-gradient GEMM. By hand for GPT-3 175B, TP8 on one A100 node, s = 2048, b = 1:
    each all-gather moves 7/8 of the 2·s·h-byte activation at the NVLink ring rate, plus its latency; two of them
    (one per row-parallel layer) are exposed whole, the four others hide in a window of 2 x the column-parallel
    GEMMs' forward time, each overlapped second costing the profile's slowdown (a reviewer found all six hidden).
    Without SP the two input-gradient all-reduces hide behind the column-parallel weight-gradient GEMMs only."""
    from planner.cost import compute
    from planner.cost.layer import layer_times

    m, hw = load_model("gpt3-175b"), load_hardware("a100-80gb")
    job = Job(gpus=8, seq_len=2048, global_batch=1)
    rt = Runtime(flash_attention=False)
    w = hw.intra_bw_bytes_per_s * hw.intra_busbw_efficiency
    one_ag = 7 / 8 * 2 * 2048 * 12288 / w + hw.collective_base_latency_s + 7 * hw.intra_step_latency_s
    column = compute.column_parallel_gemm_time_s(m, 2048, 1, 8, hw)
    u = hw.overlap_slowdown_intra
    assert 4 * one_ag < 2 * column                     # the window holds the four asynchronous collectives
    _, _, _, tp_bwd = layer_times(m, hw, job, {"tp": 8, "micro_batch": 1, "sp": True, "recompute": 0}, rt)
    assert tp_bwd == pytest.approx(2 * one_ag + u * 4 * one_ag, rel=1e-9)
    # no async backward: all six on the critical path
    off = Runtime(flash_attention=False, tp_bwd_overlap=False)
    assert layer_times(m, hw, job, {"tp": 8, "micro_batch": 1, "sp": True, "recompute": 0}, off)[3] == \
        pytest.approx(6 * one_ag, rel=1e-9)


def test_gradient_accumulation_without_fusion_by_hand():
    """Without gradient-accumulation fusion (Megatron-LM 2021's main_grad.add_ hook, Megatron-DeepSpeed) every
    micro-batch after the first adds its 16-bit weight gradient (read 2 bytes) into the fp32 main grads (read and
    write 4): 10 bytes per parameter, memory-bound at the H100 profile's 3.35 TB/s x 0.89 = 2.9815e12 B/s.
    Llama 3.1 8B, TP1 PP1 DP8, b = 1, B = 64 -> m = 8: 7 x 8,030,261,248 x 10 / 2.9815e12 = 0.188535 s more
    compute; ZeRO-2 and ZeRO-3 accumulate their 1/8 shard of the gradients (0.023567 s); one micro-batch only
    writes it (nothing more). Under PP the add is part of every micro-batch's stage time, so the bubble's p - 1
    slots carry it too: (p - 1) adds where the compute carries m - 1."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    job = Job(gpus=8, seq_len=4096, global_batch=64)
    for zero, extra in ((1, 0.188535), (2, 0.188535 / 8), (3, 0.188535 / 8)):
        fused = _one(m, hw, job, (1, 1, 8, 1, 1, False, 0, zero))
        apart = _one(m, hw, job, (1, 1, 8, 1, 1, False, 0, zero), Runtime(grad_accumulation_fusion=False))
        assert apart["compute_s"][0] - fused["compute_s"][0] == pytest.approx(extra, rel=1e-5)
        assert apart["step_time_s"][0] - fused["step_time_s"][0] == pytest.approx(extra, rel=1e-5)
        assert all(apart[f"{k}_s"][0] == fused[f"{k}_s"][0] for k in TIME_PARTS if k != "compute")
    piped = [_one(m, hw, job, (1, 2, 4, 1, 1, False, 0, 1), rt) for rt in (Runtime(),
                                                                           Runtime(grad_accumulation_fusion=False))]
    adds = (piped[1]["compute_s"][0] - piped[0]["compute_s"][0]) / (16 - 1)     # m = 64 / 4 = 16
    assert adds > 0 and piped[1]["bubble_s"][0] - piped[0]["bubble_s"][0] == pytest.approx(adds, rel=1e-9)
    single = Job(gpus=8, seq_len=4096, global_batch=8)
    assert _one(m, hw, single, (1, 1, 8, 1, 1, False, 0, 1), Runtime(grad_accumulation_fusion=False))[
        "step_time_s"][0] == _one(m, hw, single, (1, 1, 8, 1, 1, False, 0, 1))["step_time_s"][0]


def test_zero1_all_reduce_by_hand():
    """DeepSpeed's BF16_Optimizer runs ZeRO-1 with a whole all-reduce of the fp32 gradients where Megatron's
    distributed optimizer reduce-scatters them; both then all-gather the weights. Llama 3.1 8B, TP1 PP1 DP8 on one
    H100 node, no overlap: S = 8,030,261,248 x 4 bytes; the all-reduce (2·(7/8)·S/369e9 + 14 + 2·7·1.9 us) is one
    reduce-scatter's pass (7/8·S/369e9 + 14 + 7·1.9 us) longer, by 7/8·S/369e9 + 13.3 us = 0.0761811 s; ZeRO-0
    and ZeRO-3 do not change."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    job = Job(gpus=8, seq_len=4096, global_batch=8)
    rt = dict(overlap_grad_reduce=False, overlap_param_gather=False)
    for zero, extra in ((1, 0.875 * 8_030_261_248 * 4 / 369e9 + 13.3e-6), (0, 0.0), (3, 0.0)):
        base = _one(m, hw, job, (1, 1, 8, 1, 1, False, 0, zero), Runtime(**rt))
        whole = _one(m, hw, job, (1, 1, 8, 1, 1, False, 0, zero), Runtime(**rt, zero1_all_reduce=True))
        assert whole["dp_comm_s"][0] - base["dp_comm_s"][0] == pytest.approx(extra, rel=1e-6, abs=1e-12)
    assert 0.875 * 8_030_261_248 * 4 / 369e9 + 13.3e-6 == pytest.approx(0.0761811, rel=1e-6)
