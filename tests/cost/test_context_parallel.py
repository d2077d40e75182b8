"""Context parallelism (CP): each formula against hand arithmetic on h100-sxm, and what CP buys a long-context job.

h100-sxm numbers (see tests/cost/test_comm.py): NVLink 450 GB/s x 0.82, NIC 50 GB/s x 0.94, base latency 14 µs,
step latency 1.9 µs (NVLink) / 4.0 µs (network), FlashAttention at 0.35 of the 989 TFLOP/s dense peak.
"""

import dataclasses

import numpy as np
import pytest
from cli_contract import run

import planner
from planner.cost import compute, memory
from planner.cost.comm import nested_span, placement_strides, pp_crosses_nodes
from planner.cost.layer import cp_layer_times
from planner.export import deepspeed_config, megatron_args, torchtitan_toml, unsupported
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model
from planner.specs.strategy import Job, Precision, Runtime

HW = load_hardware("h100-sxm")
M8B = load_model("llama-3.1-8b")                       # q_dim 4096, kv_dim 1024, 32 layers
W_NODE, W_NET = 450e9 * 0.82, 50e9 * 0.94
BASE, A_INTRA, A_INTER = 14e-6, 1.9e-6, 4.0e-6


def test_attention_on_a_cp_rank_is_its_share_of_the_work():
    """s = 8192, cp = 4: 4·b·s²·q/2 (causal, FlashAttention) / 4 FLOPs; Q and O of s/4 tokens, K and V of all s."""
    flops = 4 * 8192 * 8192 * 4096 * 0.5 / 4
    assert flops == 137_438_953_472
    t = compute.attention_core_time_s(M8B, 8192, 1, 1, True, HW, cp=4)
    assert HW.attention_efficiency == 0.35 and HW.peak_flops == pytest.approx(989e12, rel=1e-3)
    assert float(t) == pytest.approx(flops / (0.35 * HW.peak_flops), rel=1e-12)   # compute-bound
    whole = compute.attention_core_time_s(M8B, 8192, 1, 1, True, HW)
    assert float(whole) == pytest.approx(4 * float(t), rel=1e-12)
    # Memory-bound at s = 16: bytes 2·b·s·(2q/cp + 2kv) = 2·16·(2048 + 2048) = 131,072 read once.
    tiny = compute.attention_core_time_s(M8B, 16, 1, 1, True, HW, cp=4)
    assert float(tiny) == pytest.approx(131_072 / (HW.hbm_efficiency * HW.hbm_bw_bytes_per_s), rel=1e-12)


def _cp_times(cp, tp=1, recompute=0, overlap=True, seq_len=8192, hw=HW):
    job = Job(gpus=cp * tp, seq_len=seq_len, global_batch=1)
    cols = {"tp": np.array([tp]), "cp": np.array([cp]), "micro_batch": np.array([1]), "sp": np.array([False]),
            "recompute": np.array([recompute])}
    fwd, bwd = cp_layer_times(M8B, hw, job, cols, Runtime(cp_comm_overlap=overlap))
    return float(fwd[0]), float(bwd[0])


def test_cp_kv_all_gather_by_hand():
    """CP 2 inside a node, exposed (Llama 3's all-gather CP): K and V of the whole sequence, 2·e·b·s·kv =
    2·2·8192·1024 = 33,554,432 bytes; the ring all-gather moves (k-1)/k of it over NVLink: 16,777,216 / (450e9·0.82)
    + 14 µs + 1.9 µs. Backward gathers again and reduce-scatters the gradients (2x); full recompute adds a forward."""
    gather = 16_777_216 / W_NODE + BASE + A_INTRA
    fwd, bwd = _cp_times(2, overlap=False)
    assert fwd == pytest.approx(gather, rel=1e-12) and bwd == pytest.approx(2 * gather, rel=1e-12)
    assert _cp_times(2, recompute=2, overlap=False)[1] == pytest.approx(3 * gather, rel=1e-12)
    # CP 16 with TP 8: every CP rank on its own node, K/V of 1 KV head each (kv 1024 / 8 = 128): 2·2·8192·128 =
    # 4,194,304 bytes, 15/16 of it over the NICs, 14 µs + 15 steps of 4 µs.
    net = 15 / 16 * 4_194_304 / W_NET + BASE + 15 * A_INTER
    assert _cp_times(16, tp=8, overlap=False)[0] == pytest.approx(net, rel=1e-12)


def test_cp_ring_hides_behind_attention_and_nothing_without_cp():
    """Megatron-Core's ring overlaps the exchange with attention: at 8K tokens the ~60 µs ring hides behind a
    ~0.8 ms attention kernel, leaving only the overlap slowdown's share of it (the profile's NVLink slowdown);
    CP 1 has nothing to exchange."""
    def slowed(u):
        return _cp_times(2, hw=dataclasses.replace(HW, overlap_slowdown_intra=u))

    assert slowed(0.0) == (0.0, 0.0)
    assert slowed(0.2)[0] > 0 and slowed(0.1)[0] == pytest.approx(slowed(0.2)[0] / 2, rel=1e-12)
    assert _cp_times(2) == slowed(HW.overlap_slowdown_intra)
    assert _cp_times(1, overlap=False) == (0.0, 0.0)
    # At 512 tokens attention is short (a few µs) and the 14 µs latency alone stays exposed.
    assert _cp_times(2, seq_len=512)[0] > 0


def test_cp_shards_activations_and_zero_shards_over_dp_times_cp():
    s, b = 8192, 1

    def parts(cp, dp, zero):
        return memory.memory_breakdown(M8B, s, 1, 1, dp, b, 1, 1, False, 0, zero, Precision(), True, 0.0, "layer",
                                       cp)[0]

    one, two = parts(1, 2, 1), parts(2, 2, 1)
    assert float(two["activations"]) == pytest.approx(float(one["activations"]) / 2, rel=1e-12)
    params = float(np.maximum.reduce(memory.stage_params(M8B, 1, 1)))
    assert float(one["optimizer"]) == pytest.approx(params * 12 / 2, rel=1e-12)     # ZeRO-1 over DP 2
    assert float(two["optimizer"]) == pytest.approx(params * 12 / 4, rel=1e-12)     # ... over DP 2 x CP 2
    assert float(two["weights"]) == float(one["weights"])                             # CP does not shard weights


def test_cp_placement_by_hand():
    """TP 2 x CP 2 x DP 4 (x PP 4) on 8-GPU nodes. DP next to CP: the DP x CP group (8 ranks, TP stride 2) has
    4 members per node on 2 nodes. PP next: DP ranks sit 16 apart, so each node holds one CP pair of the group."""
    assert tuple(int(x) for x in placement_strides(2, 4, 4, True, 2)) == (4, 16)
    assert tuple(int(x) for x in placement_strides(2, 4, 4, False, 2)) == (16, 4)
    assert tuple(int(x) for x in nested_span(2, 2, 4, 4, HW)) == (4, 2)
    assert tuple(int(x) for x in nested_span(2, 2, 4, 16, HW)) == (2, 4)
    assert not pp_crosses_nodes(2, 1, 4, False, 8, 2) and pp_crosses_nodes(2, 4, 1, False, 8, 2)


def test_cp_makes_long_context_training_possible():
    """405B at 128K tokens on 16,384 H100s (Llama 3's long-context stage): without CP the best layout pipelines a
    single micro-batch per step (MFU of a few %); CP frees DP for micro-batches and shards the activations."""
    kw = dict(seq_len=131072, global_batch_tokens=2**24, find_min_gpus=False)
    with_cp = planner.run_search("405b", 16384, **kw).table.iloc[0]
    no_cp = planner.run_search("405b", 16384, pins=planner.Pins(cp=1), **kw).table.iloc[0]
    assert with_cp["cp"] > 1 and with_cp["mfu"] > 0.3
    assert no_cp["mfu"] < with_cp["mfu"] / 3


def test_exports_carry_cp_and_deepspeed_refuses_it():
    m = load_model("405b")
    job = Job(gpus=16384, seq_len=131072, global_batch=128)
    row = {"tp": 8, "cp": 16, "pp": 16, "dp": 8, "vpp": 1, "micro_batch": 1, "sequence_parallel": True,
           "recompute": "none", "zero_stage": 1}
    assert "--context-parallel-size 16" in megatron_args(row, m, job)
    assert "TP 8 x CP 16 x PP 16 x DP 8 = 16384 GPUs" in megatron_args(row, m, job)
    assert "context_parallel_degree = 16" in torchtitan_toml(row, m, job)
    assert "context parallelism" in unsupported("deepspeed", row)
    assert "context_parallel" not in str(deepspeed_config({**row, "cp": 1}, m, job))


def test_megatron_export_carries_the_priced_cp_exchange(capsys):
    """The all-gather CP the plan priced is Megatron-LM's --cp-comm-type all_gather (megatron/training/arguments.py:
    p2p, the default, is the overlapped ring; the value is Transformer Engine's spelling, all_gather, from
    megatron/core/transformer/transformer_config.py cp_comm_type); CLI and API give the same flags."""
    m, job = load_model("8b"), Job(gpus=16, seq_len=8192, global_batch=2048)
    row = {"tp": 2, "cp": 2, "pp": 1, "dp": 4, "vpp": 1, "micro_batch": 1, "sequence_parallel": True,
           "recompute": "none", "zero_stage": 1}
    assert "--cp-comm-type all_gather" in megatron_args(row, m, job, Runtime(cp_comm_overlap=False))
    assert "--cp-comm-type" not in megatron_args(row, m, job, Runtime())                  # p2p is the default
    assert "--cp-comm-type" not in megatron_args({**row, "cp": 1, "dp": 8}, m, job, Runtime(cp_comm_overlap=False))
    argv = ["--model", "8b", "--gpus", "16", "--tp", "2", "--cp", "2", "--pp", "1", "--dp", "4", "--export", "megatron"]
    code, out, err = run(capsys, *argv, "--cp-comm", "allgather")
    assert code == 0, err
    assert "--cp-comm-type all_gather" in out
    assert "--cp-comm-type" not in run(capsys, *argv)[1]
    # torchtitan all-gathers by default: the note asking to price that appears only when the ring was priced
    titan = [a if a != "megatron" else "torchtitan" for a in argv]
    assert "plan with --cp-comm allgather" in run(capsys, *titan)[1]
    assert "plan with --cp-comm allgather" not in run(capsys, *titan, "--cp-comm", "allgather")[1]


def _cols(**kw):
    base = dict(tp=1, cp=1, pp=1, dp=1, micro_batch=1, vpp=1, sp=False, recompute=0, zero=0)
    return {k: np.array([v]) for k, v in {**base, **kw}.items()}


def _step(seq_len, rt=Runtime(), batch=8, **kw):
    from planner.cost.step import step_columns

    cols = _cols(**kw)
    gpus = int(cols["tp"][0] * cols["cp"][0] * cols["pp"][0] * cols["dp"][0])
    out = step_columns(M8B, HW, Job(gpus=gpus, seq_len=seq_len, global_batch=batch), cols, runtime=rt)
    return {k: float(np.asarray(v)[0]) for k, v in out.items()}


def test_every_token_wise_term_sees_s_over_cp():
    """A CP-2 rank at s = 8192 does the token-wise work of a CP-1 rank at s = 4096: GEMMs, element-wise traffic, TP
    collectives (TP 2 + SP), pipeline sends, activations and the recompute working set; attention and the kernel
    count are what differ."""
    from planner.cost.layer import layer_times

    rt = Runtime()
    two = layer_times(M8B, HW, Job(gpus=4, seq_len=8192, global_batch=1),
                      _cols(tp=2, cp=2, sp=True, recompute=2), rt)
    one = layer_times(M8B, HW, Job(gpus=2, seq_len=4096, global_batch=1), _cols(tp=2, sp=True, recompute=2), rt)
    assert float(two[2][0]) == pytest.approx(float(one[2][0]), rel=1e-12)          # TP forward
    assert float(two[3][0]) == pytest.approx(float(one[3][0]), rel=1e-12)          # TP backward (+ recompute)
    attn2 = float(compute.attention_core_time_s(M8B, 8192, 1, 2, True, HW, cp=2))
    attn1 = float(compute.attention_core_time_s(M8B, 4096, 1, 2, True, HW))
    launch = HW.kernel_overhead_s * 2                                                # one ring step more: 2 kernels
    assert float(two[0][0]) - attn2 - launch == pytest.approx(float(one[0][0]) - attn1, rel=1e-12)
    assert compute.layer_kernel_count(M8B, True, 4) - compute.layer_kernel_count(M8B, True, 1) == 6

    # One stage: compute = m x (L x (forward + backward) + the logits of the rank's s/cp tokens).
    lt = layer_times(M8B, HW, Job(gpus=2, seq_len=8192, global_batch=8), _cols(cp=2), rt)
    logits = float(compute.logits_time_s(M8B, 4096, 1, 1, HW))
    assert _step(8192, cp=2)["compute_s"] == pytest.approx(8 * (32 * float(lt[0][0] + lt[1][0]) + logits), rel=1e-12)

    a = _step(8192, tp=1, cp=2, pp=2)             # PP neighbours share a node in both layouts
    b = _step(4096, tp=1, cp=1, pp=2)
    assert a["pp_comm_s"] == pytest.approx(b["pp_comm_s"], rel=1e-12)
    for part in ("activations", "other"):
        full = dict(recompute=2, zero=0)
        assert _step(8192, cp=2, **full)[f"mem_{part}_bytes"] == pytest.approx(
            _step(4096, cp=1, **full)[f"mem_{part}_bytes"], rel=1e-12), part


def test_gradients_and_optimizer_shard_over_dp_times_cp():
    """DP 2 x CP 2 reduces gradients and shards ZeRO-1 like DP 4 (4 ranks in one node either way)."""
    plain = Runtime(overlap_grad_reduce=False, overlap_param_gather=False)
    a = _step(8192, rt=plain, cp=2, dp=2, zero=1)
    b = _step(8192, rt=plain, cp=1, dp=4, zero=1)
    assert a["dp_comm_s"] == pytest.approx(b["dp_comm_s"], rel=1e-12) and a["dp_comm_s"] > 0
    assert a["optimizer_s"] == pytest.approx(b["optimizer_s"], rel=1e-12)
    assert a["mem_optimizer_bytes"] == pytest.approx(b["mem_optimizer_bytes"], rel=1e-12)
    assert _step(8192, rt=plain, cp=2, dp=1, zero=0)["dp_comm_s"] > 0              # CP ranks alone reduce too


def test_exposed_cp_time_is_charged_per_micro_batch_and_in_the_bubble():
    """All-gather CP (exposed): cp_comm = m x layers x (forward + backward) and the bubble's per-micro-batch pass
    includes it; selective recompute repeats the forward exchange."""
    rt = Runtime(cp_comm_overlap=False)
    out = _step(8192, rt=rt, batch=8, cp=2, pp=2)
    fwd, bwd = _cp_times(2, overlap=False)
    layers = 16                                                   # 32 layers on 2 stages
    assert out["cp_comm_s"] == pytest.approx(8 * layers * (fwd + bwd), rel=1e-9)
    per_mb = (out["compute_s"] + out["tp_comm_s"] + out["cp_comm_s"]) / 8
    assert out["bubble_s"] == pytest.approx(per_mb, rel=1e-9)     # (p - 1) / v = 1
    assert _cp_times(2, recompute=1, overlap=False)[1] == pytest.approx(3 * fwd, rel=1e-12)


def test_the_ring_waits_for_the_rank_that_leaves_the_node():
    """Megatron's P2P ring over CP 16 with TP 1 (2 nodes): 15 steps of the 1/16 chunk, each over a NIC, although
    only 2 of the 16 ranks send across: (cp-1)/cp·S/W_net, not the hierarchical all-gather's S/k."""
    from planner.cost.comm import all_gather_time_s, ring_exchange_time_s

    S = 2 * 2 * 32768 * 1024                                       # K and V, s = 32K, kv 1024, bf16
    ring = float(ring_exchange_time_s(S, 16, 1, HW))
    assert ring == pytest.approx(BASE + 15 * (S / 16 / W_NET + A_INTER), rel=1e-12)
    assert ring > 4 * float(all_gather_time_s(S, 16, 1, HW))
    assert float(ring_exchange_time_s(S, 4, 1, HW)) == pytest.approx(BASE + 3 * (S / 4 / W_NODE + A_INTRA),
                                                                      rel=1e-12)
