"""Hybrid sharding (HSDP, Layout.dp_replicate): ZeRO within groups of DP x CP / r ranks, replicated r times."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.cost.memory import stage_params
from planner.export import export, unsupported

runner = CliRunner()
H100 = planner.load_hardware("h100-sxm")
NO_LATENCY = dataclasses.replace(H100, intra_step_latency_s=0.0, inter_step_latency_s=0.0,
                                 collective_base_latency_s=0.0, kernel_overhead_s=0.0)
SERIAL = planner.Runtime(overlap_grad_reduce=False, overlap_param_gather=False)


def _eval(gpus=16, hardware=H100, runtime=planner.Runtime(), **pins):
    layout = dict(tp=1, pp=1, dp=gpus, micro_batch=1, recompute="full", sequence_parallel=False, vpp=1,
                  recompute_layers=0)
    return planner.evaluate("8b", gpus, hardware=hardware, seq_len=4096, global_batch=4 * gpus, runtime=runtime,
                            **{**layout, **pins})


def test_states_are_sharded_within_the_group():
    """ZeRO-3 over 64 ranks in 8 groups of 8: every state is 1/8 per GPU, as ZeRO-3 on 8 ranks (ZeRO §5, Table 1:
    (2 + 2 + K)Ψ/N_d with N_d the shard group); here bf16 weights 2, fp32 grads 4, Adam 12 bytes per parameter."""
    params = float(stage_params(planner.load_model("8b"), 1, 1)[0])
    ev = _eval(64, zero_stage=3, dp_replicate=8)
    gib = 2**30
    assert ev.memory_gib["weights"] == pytest.approx(params * 2 / 8 / gib, rel=1e-12)
    assert ev.memory_gib["gradients"] == pytest.approx(params * 4 / 8 / gib, rel=1e-12)
    assert ev.memory_gib["optimizer"] == pytest.approx(params * 12 / 8 / gib, rel=1e-12)
    # ZeRO-1: only the optimizer states shrink with the group
    one = _eval(64, zero_stage=1, dp_replicate=8).memory_gib
    assert (one["weights"], one["optimizer"]) == pytest.approx((params * 2 / gib, params * 12 / 8 / gib), rel=1e-12)


def test_zero1_hsdp_traffic_by_hand():
    """16 GPUs on two 8-GPU nodes, ZeRO-1 in 2 groups of 8 (one node each), nothing overlapped, no latency: the
    gradients are reduce-scattered inside the node, (7/8)·G/W_node; each rank's 1/8 shard is all-reduced with its
    peer on the other node over its own NIC, 2·(1/2)·(G/8)/W_net; the parameters are all-gathered inside the node,
    (7/8)·P/W_node (formulas.md §4.1: ring RS/AG (n−1)/n·S/W, AR twice that)."""
    params = float(stage_params(planner.load_model("8b"), 1, 1)[0])
    grads, weights = 4 * params, 2 * params
    w_node = H100.intra_bw_bytes_per_s * H100.intra_busbw_efficiency
    w_net = H100.inter_bw_bytes_per_s * H100.inter_busbw_efficiency
    expected = 7 / 8 * grads / w_node + 2 * (1 / 2) * (grads / 8) / w_net + 7 / 8 * weights / w_node
    ev = _eval(16, hardware=NO_LATENCY, runtime=SERIAL, zero_stage=1, dp_replicate=2)
    assert ev.time_s["dp_comm"] == pytest.approx(expected, rel=1e-9)
    # the same ranks as one group of 16: NCCL rings over both nodes, RS and AG each max((15/16)·S/W_node,
    # (15/16)·S/(8·W_net)) (comm._phase_times: NVLink and NICs stream at once)
    flat = sum(max(15 / 16 * x / w_node, 15 / 16 * x / (8 * w_net)) for x in (grads, weights))
    ev1 = _eval(16, hardware=NO_LATENCY, runtime=SERIAL, zero_stage=1, dp_replicate=1)
    assert ev1.time_s["dp_comm"] == pytest.approx(flat, rel=1e-9)


def test_node_local_groups_move_fewer_network_bytes_with_16_bit_gradients():
    """ZeRO-3 gathers the weights for every micro-batch. Sharded over all 64 ranks on 8 nodes, the rings send
    (63/64)·(2P + G)/8 per GPU per micro-batch over the NICs (two all-gathers and a reduce-scatter); in groups of
    one node, only the all-reduce of the gradient shard, 2·(7/8)·G/8. With 16-bit gradients (P = G) that is 41%
    less, and on 4 x 100 Gb/s per node the step is faster for more memory. With fp32 gradients (G = 2P) it is 11%
    less, but the group's own NVLink collectives now run before the all-reduce instead of beside the network:
    by hand, serial and without latency, per micro-batch flat 2·max(a(P), b(P)) + max(a(G), b(G)) with
    a(S) = (63/64)·S/W_node and b(S) = (63/64)·S/(8·W_net); hybrid (7/8)·(2P + G)/W_node + 2·(7/8)·(G/8)/W_net."""
    thin = H100.with_network(4, 100e9 / 8)
    bf16 = planner.Precision(grad_bytes=2)
    full = _eval(64, hardware=thin, zero_stage=3, dp_replicate=1, recompute="none", precision=bf16)
    hybrid = _eval(64, hardware=thin, zero_stage=3, dp_replicate=8, recompute="none", precision=bf16)
    assert hybrid.time_s["dp_comm"] < 2 / 3 * full.time_s["dp_comm"]
    assert hybrid.row["step_time_s"] < full.row["step_time_s"]
    assert hybrid.row["memory_gib"] > full.row["memory_gib"]
    hw = dataclasses.replace(NO_LATENCY, inter_bw_bytes_per_s=thin.inter_bw_bytes_per_s)
    fp32 = [_eval(64, hardware=hw, runtime=SERIAL, zero_stage=3, dp_replicate=r, recompute="none") for r in (1, 8)]
    p_bytes = 2 * float(stage_params(planner.load_model("8b"), 1, 1)[0])
    g_bytes = 2 * p_bytes
    w_node = hw.intra_bw_bytes_per_s * hw.intra_busbw_efficiency
    w_net = hw.inter_bw_bytes_per_s * hw.inter_busbw_efficiency

    def a(x):
        return 63 / 64 * x / w_node

    def b(x):
        return 63 / 64 * x / (8 * w_net)

    m = fp32[0].row["num_microbatches"]
    flat = m * (2 * max(a(p_bytes), b(p_bytes)) + max(a(g_bytes), b(g_bytes)))
    hybrid = m * (7 / 8 * (2 * p_bytes + g_bytes) / w_node + 2 * 7 / 8 * g_bytes / 8 / w_net)
    assert fp32[0].time_s["dp_comm"] == pytest.approx(flat, rel=1e-9)
    assert fp32[1].time_s["dp_comm"] == pytest.approx(hybrid, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(zero=st.integers(1, 3), cp=st.sampled_from([1, 2]), dp_log=st.integers(1, 6))
def test_memory_never_falls_and_optimizer_step_never_shortens_as_groups_shrink(zero, cp, dp_log):
    m, job_dp = planner.load_model("8b"), 2**dp_log
    from planner.cost.step import step_columns

    degrees = np.array([r for r in (1, 2, 4, 8, 16, 32, 64) if job_dp % r == 0 and job_dp // r * cp >= 2])
    n = len(degrees)
    cols = dict(tp=np.ones(n, int), cp=np.full(n, cp), pp=np.ones(n, int), dp=np.full(n, job_dp),
                micro_batch=np.ones(n, int), vpp=np.ones(n, int), sp=np.zeros(n, bool), recompute=np.full(n, 2),
                zero=np.full(n, zero), dp_replicate=degrees)
    job = planner.Job(gpus=job_dp * cp, seq_len=4096, global_batch=4 * job_dp)
    out = step_columns(m, H100, job, cols)
    assert np.all(np.diff(out["memory_bytes"]) >= 0)
    assert np.all(np.diff(out["optimizer_s"]) >= 0)


def test_search_keeps_only_hybrid_degrees_that_buy_speed():
    """Every hybrid row of a search is faster than its layout sharded over all ranks, and is that layout's only
    hybrid row (its fastest degree); the rest are counted among the rejected, so the counts still add up."""
    r = planner.run_search("8b", 512, find_min_gpus=False)
    t = r.table
    knobs = [k for k in planner.Layout.knobs() if k != "dp_replicate"]
    hybrid = t[t["dp_replicate"] > 1]
    assert len(hybrid)
    assert not hybrid.duplicated(knobs).any()
    base = t[t["dp_replicate"] == 1].set_index(knobs)["step_time_s"]
    paired = hybrid.join(base.rename("base_step_s"), on=knobs)
    assert (paired["step_time_s"] < paired["base_step_s"]).all()
    assert r.considered == len(t) + sum(r.rejected.values())


@pytest.mark.parametrize("args, flag, words", [
    (["--dp", "64", "--dp-replicate", "3"], "--dp-replicate", "divide DP"),
    (["--dp", "64", "--zero", "0", "--dp-replicate", "2"], "--dp-replicate", "needs optimizer sharding"),
    (["--dp", "64", "--zero", "3", "--dp-replicate", "64"], "--dp-replicate", "at least 2 ranks"),
    (["--dp", "64", "--dp-replicate", "0"], "--dp-replicate", "expected"),
    (["--dp-replicate", "18446744073709551617"], "--dp-replicate", "expected at most 64"),    # the fuzz found it
])
def test_bad_hybrid_pins_are_one_line(args, flag, words):
    res = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--tp", "1", "--pp", "1", *args])
    assert res.exit_code == 2, res.output
    assert flag in res.output and words in res.output and "Traceback" not in res.output


def test_pinned_hybrid_layout_reports_and_exports():
    args = ["--model", "8b", "--gpus", "64", "--tp", "1", "--pp", "1", "--dp", "64", "--zero", "3",
            "--dp-replicate", "8"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "ZeRO-3 HSDP 8x8" in table.output
    assert "hybrid sharding: ZeRO within groups of 8 ranks, inside one node" in table.output
    assert "all-reduced across the 8 groups: across 8 nodes, one rank per node" in table.output
    doc = json.loads(runner.invoke(app, args + ["--format", "json"]).stdout)
    assert doc["dp_replicate"] == 8
    mg = runner.invoke(app, args + ["--export", "megatron"]).stdout
    assert "--num-distributed-optimizer-instances 8" in mg and "--use-megatron-fsdp" in mg
    assert "all-reduces the gradient shards across the 8 groups once per step" in mg
    tt = runner.invoke(app, args + ["--export", "torchtitan"]).stdout
    assert "data_parallel_replicate_degree = 8" in tt and "data_parallel_shard_degree = 8" in tt
    ds = runner.invoke(app, args + ["--export", "deepspeed"])
    assert ds.exit_code == 2 and "MiCS" in ds.output


def test_full_sharding_exports_are_unchanged():
    ev = _eval(64, zero_stage=3, dp_replicate=1)
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    assert "--num-distributed-optimizer-instances" not in text
    assert unsupported("deepspeed", ev.row) is None


def test_a_run_file_states_hybrid_sharding_and_an_unstated_one_is_full_sharding(tmp_path):
    """plan validate: layout.dp_replicate is a run's own knob; where a run leaves it out, it shards over all ranks
    (every framework's default), never a searched hybrid degree."""
    import yaml

    from planner.runs_file import load_runs
    from planner.validate import predict

    run = next(r for r in load_runs() if r.layout.zero_stage == 3 and (r.layout.dp or 1) % 4 == 0)
    assert predict(run).evaluation.row["dp_replicate"] == 1
    data = run.model_dump(mode="json", exclude_none=True)
    data["layout"]["dp_replicate"] = 4
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [data]}))
    hybrid = predict(load_runs(path)[0])
    row = hybrid.evaluation.row
    assert row["dp_replicate"] == 4
    assert row["optimizer_gib"] == pytest.approx(4 * predict(run).evaluation.row["optimizer_gib"], rel=1e-9)


def test_the_fastest_degree_that_does_not_fit_leaves_room_for_one_that_does():
    """Per layout the search keeps the fastest degree that fits, if it beats sharding over all ranks; a faster one
    that does not fit (another pipeline stage may peak once the states grow) must not displace it (a reviewer found
    the search dropping the fitting one). By hand on fastest_gain, then end to end: 405B, TP8 DP512 ZeRO-3 on 4,096
    H100s, where 64 replicas would be faster still but need 117 GiB: the search keeps 32."""
    from planner.candidates import fastest_gain

    rows = np.array([0, 0, 0, 1, 1])                     # two layouts: degrees 2, 4, 8 of the first, 2, 4 of the second
    step = np.array([9.0, 8.0, 7.0, 11.0, 12.0])
    fits = np.array([True, True, False, True, True])
    base = np.array([10.0, 10.0])                        # each layout sharded over all ranks
    assert list(fastest_gain(step, fits, base, rows)) == [False, True, False, False, False]
    pins = dict(tp=8, cp=1, pp=1, dp=512, micro_batch=1, recompute="full", zero_stage=3, vpp=1,
                sequence_parallel=True)
    result = planner.run_search("405b", 4096, pins=planner.Pins(**pins), find_min_gpus=False)
    capacity_gib = result.capacity_bytes / 2**30
    best = result.table.iloc[0]
    assert best["dp_replicate"] == 32 and best["memory_gib"] <= capacity_gib
    sixty_four = planner.evaluate("405b", 4096, dp_replicate=64, **pins)
    assert not sixty_four.fits and sixty_four.row["step_time_s"] < best["step_time_s"]
    assert (result.table["memory_gib"] <= capacity_gib).all()


def test_a_hybrid_pin_without_data_parallelism_names_the_flag():
    res = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--tp", "8", "--pp", "8", "--dp", "1",
                              "--dp-replicate", "2"])
    assert res.exit_code == 2 and "--dp-replicate" in res.output and "hybrid sharding" in res.output


def test_sweep_pins_hybrid_sharding_and_whatif_says_when_a_trade_drops_it():
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "64,128", "--zero", "3", "--dp-replicate", "2",
                              "--format", "json"])
    rows = json.loads(res.stdout)["rows"]
    assert res.exit_code == 0 and all(r["dp_replicate"] == 2 for r in rows)
    out = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--tp", "1", "--pp", "1", "--dp", "64", "--zero", "1",
                              "--dp-replicate", "32"]).output
    assert "(no hybrid sharding" in out
