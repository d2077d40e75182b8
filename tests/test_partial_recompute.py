"""Partial full recompute (Megatron --recompute-method block --recompute-num-layers k): the first k layers of each
pipeline chunk are recomputed, the others keep all their activations. Between none and full in memory and time."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli import app
from planner.cost import memory
from planner.cost.pipeline import chunk_layers, stage_layers
from planner.cost.step import step_columns
from planner.candidates import Pins
from planner.search import run_search
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model
from planner.specs.strategy import Job, Precision

HW = load_hardware("h100-sxm")
runner = CliRunner()


def _cols(m, tp, pp, dp, vpp, recompute, k, micro_batch=1):
    return {"tp": np.array([tp]), "cp": np.array([1]), "pp": np.array([pp]), "dp": np.array([dp]),
            "micro_batch": np.array([micro_batch]), "vpp": np.array([vpp]), "sp": np.array([tp > 1]),
            "recompute": np.array([recompute]), "rc_layers": np.array([k]), "zero": np.array([1])}


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["llama-3.1-8b", "gpt3-175b", "llama-3.1-70b"]), pp=st.sampled_from([1, 2, 4, 8]),
       tp=st.sampled_from([1, 2, 8]))
def test_more_recomputed_layers_less_memory_more_time(name, pp, tp):
    m = load_model(name)
    chunk = int(stage_layers(m.layers, pp)[1])
    job = Job(gpus=tp * pp * 2, seq_len=m.seq_len, global_batch=64)
    ks = list(range(chunk + 1))
    out = step_columns(m, HW, job, {k: np.concatenate([_cols(m, tp, pp, 2, 1, 2, x)[k] for x in ks])
                                    for k in _cols(m, tp, pp, 2, 1, 2, 0)})
    mem, step = out["memory_bytes"], out["step_time_s"]
    assert np.all(np.diff(mem[1:]) <= 1e-6 * mem[1:-1]) and np.all(np.diff(step[1:]) >= -1e-9 * step[1:-1])
    assert mem[-1] == pytest.approx(mem[0]) and step[-1] == pytest.approx(step[0])      # k = chunk: every layer


def test_activations_mix_linearly():
    """Half of each chunk recomputed (10 of the 20 layers of a PP 4 stage): the stored activations are the mean of
    none and full (logits aside); 5 layers recomputed sit a quarter of the way from none to full."""
    m = load_model("llama-3.1-70b")

    def acts(recompute, layers):
        parts, _ = memory.memory_breakdown(m, 8192, 4, 4, 4, 1, 16, 1, True, recompute, 1, Precision(), True, 0.0,
                                           "layer", 1, layers)
        return float(parts["activations"])

    none, full, half, quarter = acts(0, 0), acts(2, 0), acts(2, 10), acts(2, 5)
    assert full < half < quarter < none
    assert half == pytest.approx((none + full) / 2, rel=1e-12)
    assert quarter == pytest.approx(none - (none - full) / 4, rel=1e-12)


def test_recompute_time_is_the_fraction_of_a_full_recompute():
    """TP 1 and no CP, so the only difference is the recomputed forward: k of 10 layers per stage costs k/10 of a
    full recompute (Llama 3 70B, PP 8: 10 layers per stage)."""
    m = load_model("llama-3.1-70b")
    job = Job(gpus=16, seq_len=8192, global_batch=64)
    rows = [(0, 0), (2, 0), (2, 3), (2, 5)]
    cols = {k: np.concatenate([_cols(m, 1, 8, 2, 1, rc, x)[k] for rc, x in rows]) for k in _cols(m, 1, 8, 2, 1, 0, 0)}
    compute = step_columns(m, HW, job, cols)["compute_s"]
    none, full = compute[0], compute[1]
    assert compute[2] - none == pytest.approx(0.3 * (full - none), rel=1e-9)
    assert compute[3] - none == pytest.approx(0.5 * (full - none), rel=1e-9)


def test_the_search_recomputes_part_of_each_chunk_when_that_is_best():
    """Llama 3 70B on 64 H100s at TP 4 x PP 2 x DP 8: no recompute does not fit, recomputing every layer costs a
    third more work; part of each chunk fits and wins (by 11%)."""
    result = run_search("70b", 64, find_min_gpus=False, pins=Pins(tp=4, pp=2, dp=8))
    top = result.table.iloc[0]
    assert (result.table["recompute"] == "full").all()                        # nothing fits without recompute
    assert top["recompute"] == "full" and 0 < top["recompute_layers"] < chunk_layers(80, 2, int(top["vpp"]))
    full = result.table[(result.table["recompute"] == "full") & (result.table["recompute_layers"] == 0)]
    assert top["step_time_s"] < full["step_time_s"].min()


def test_cli_pins_labels_and_exports_partial_recompute(capsys):
    args = ["--model", "70b", "--gpus", "64", "--tp", "4", "--pp", "4", "--dp", "4", "--recompute-layers", "2"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0 and "full(2)" in out.stdout
    data = json.loads(runner.invoke(app, args + ["--format", "json"]).stdout)
    assert data["recompute"] == "full" and data["recompute_layers"] == 2
    megatron = runner.invoke(app, args + ["--export", "megatron"]).stdout
    assert "--recompute-method block" in megatron and "--recompute-num-layers 2" in megatron
    from cli_contract import assert_mentions, bad
    assert_mentions(bad(capsys, *args, "--recompute", "none"), "--recompute-layers", "--recompute full")
    assert_mentions(bad(capsys, *args[:-1], "99"), "--recompute-layers", "layers per pipeline chunk",
                    "with PP 4 a chunk has 20 layers, so --recompute-layers is at most 20")
    assert_mentions(bad(capsys, "--model", "70b", "--gpus", "64", "--recompute-layers", "99"),
                    "a chunk has at most 80 layers (PP 1), so --recompute-layers is at most 80")
    assert_mentions(bad(capsys, *args[:-1], "0"), "--recompute-layers", "positive integer")


@pytest.mark.parametrize("k, expected", [(2, ['mode = "selective"', 'selective_ac_option = "10"']),
                                         (4, ['mode = "selective"', 'selective_ac_option = "5"']),
                                         (3, ['mode = "selective"', 'selective_ac_option = "6"']),
                                         (7, ['mode = "full"', "not the first 7"])])
def test_torchtitan_export_writes_every_nth_layer_when_the_share_is_the_same(k, expected):
    """70B (80 layers) on PP 4: 20-layer chunks; 2 of 20 is every 10th layer (torchtitan's layer SAC), 3 of 20 every
    6th (blocks 6, 12, 18); no N checkpoints 7 of 20, so full AC is written with a note. (At 4K tokens: at 8K the
    unsharded gradients torchtitan keeps under PP leave room only for interleaved layouts.)"""
    args = ["--model", "70b", "--gpus", "64", "--tp", "4", "--pp", "4", "--dp", "4", "--recompute-layers", str(k),
            "--seq-len", "4096"]
    out = runner.invoke(app, args + ["--export", "torchtitan"])
    assert out.exit_code == 0
    assert all(text in out.stdout for text in expected), out.stdout


def test_recompute_fraction_counts_layers_per_chunk():
    """70B: 80 layers on PP 8 are 10 per stage, 5 per chunk with VPP 2; 2 of 5 is 0.4; 0 (every layer) is 1; a k
    past the chunk is capped at all of it."""
    from planner.cost.step import recompute_fraction
    m = load_model("70b")
    c = {"pp": np.array([8, 8, 8, 8]), "vpp": np.array([2, 2, 1, 2]), "rc_layers": np.array([2, 0, 2, 9])}
    assert np.allclose(recompute_fraction(m, c), [0.4, 1.0, 0.2, 1.0])


def test_an_edge_stage_one_layer_short_recomputes_its_share():
    """405B on PP 4: (126 + 2)/4 = 32 slots, the edge stages hold 31 layers. k = 31 of a 32-layer chunk is every
    layer of an edge stage; with VPP 2 (16-layer chunks, one of 15 on an edge stage) k = 8 is 16 of 31 there.
    70B on PP 6 (explicit edges of 12 around 14): with VPP 2 the edge stage's chunks are 6 and 6, so k = 4 is 8
    of 12."""
    from planner.cost.pipeline import block_recompute_share
    assert block_recompute_share(31, 31) == 1.0 and block_recompute_share(32, 31) == 31 / 32
    assert block_recompute_share(31, 8, 2) == 16 / 31 and block_recompute_share(32, 8, 2) == 0.5
    assert block_recompute_share(31, 0) == 1.0
    assert block_recompute_share(12, 4, 2) == 8 / 12 and block_recompute_share(14, 4, 2) == 8 / 14


def test_what_if_interleaving_keeps_the_share_of_a_partial_recompute():
    """70B TP2 PP8: 10-layer chunks, full(5). With VPP 2 the chunks hold 5 layers: the advice recomputes 3 of 5
    (the share rounded up), not 5 of 5 (every layer) as a kept count would."""
    from planner.evaluate import evaluate
    from planner.whatif import _variants
    ev = evaluate("70b", 64, tp=2, pp=8, dp=4, micro_batch=1, zero_stage=1, recompute="full", recompute_layers=5,
                  vpp=1)
    labels = {label: v for label, v in _variants(ev.row, ev.result.model)}
    vpp2 = labels["VPP 2 interleaving, full recompute of 3 of 5 layers per chunk"]
    assert vpp2["vpp"] == 2 and vpp2["rc_layers"] == 3


def test_edge_stage_memory_and_time_use_their_own_share():
    """405B on PP 4 ((126 + 2)/4 = 32 slots; edge stages hold 31 layers) with k = 8: the first stage, the peak,
    recomputes 8 of its 31 layers (8 of 32 is the middle share). An 8B with 6 layers and a 256K vocabulary on
    PP 4 ((6 + 2)/4 = 2 slots, 1-layer edge stages) with k = 1: the last stage recomputes its one layer where the
    middle share is 1/2, and with the large logits it paces the step."""
    from planner.cost.compute import logits_time_s
    from planner.cost.pipeline import in_flight_layers
    from planner.cost.layer import layer_times
    from planner.cost.step import step_columns
    from planner.specs.strategy import Runtime
    m = load_model("llama-3.1-405b")
    parts, stage = memory.memory_breakdown(m, 8192, 8, 4, 16, 1, 32, 1, True, 2, 1, Precision(), recompute_layers=8)
    full, none = (memory.activation_bytes_per_layer(m, 8192, 1, 8, True, rc) for rc in (2, 0))
    per_mb = 8 * full + 23 * none + 8 * 8192          # + the micro-batch's token ids (Llama: no embedding dropout)
    assert stage == 0 and parts["activations"] == pytest.approx(in_flight_layers(31, 0, 4, 32, 1) / 31 * per_mb,
                                                                rel=1e-12)
    m = dataclasses.replace(load_model("llama-3.1-8b"), layers=6, vocab=256_000)
    job = Job(gpus=64, seq_len=8192, global_batch=512)
    cols = _cols(m, 1, 4, 16, 1, 2, 1)
    out = step_columns(m, HW, job, cols, Precision())
    fwd, bwd, tp_fwd, _ = layer_times(m, HW, job, {**cols, "rc_frac": np.array([1 / 2])}, Runtime())
    last = 1 * (fwd + bwd) + 1 * (1 - 1 / 2) * (fwd + tp_fwd) + logits_time_s(m, 8192, 1, 1, HW)
    assert out["compute_s"][0] / out["num_microbatches"][0] == pytest.approx(last[0], rel=1e-9)
    # with CP 2 the extra recomputed forward also repeats its K/V exchange (cp_layer_times' forward)
    from planner.cost.layer import cp_layer_times
    cp_cols = {**_cols(m, 1, 4, 8, 1, 2, 1), "cp": np.array([2])}
    out = step_columns(m, HW, job, cp_cols, Precision())
    cp_cols["rc_frac"] = np.array([1 / 2])
    fwd, bwd, tp_fwd, _ = layer_times(m, HW, job, cp_cols, Runtime())
    cp_fwd = cp_layer_times(m, HW, job, cp_cols, Runtime())[0]
    assert cp_fwd[0] > 0
    last = (fwd + bwd) + (1 - 1 / 2) * (fwd + tp_fwd + cp_fwd) + logits_time_s(m, 8192 / 2, 1, 1, HW)
    assert out["compute_s"][0] / out["num_microbatches"][0] == pytest.approx(last[0], rel=1e-9)


def test_hfu_counts_each_stage_share():
    """405B on PP 16 with k = 2: edge stages recompute 2 of 7, the 14 middle ones 2 of 8: 32 of 126 layers."""
    from planner.cost.pipeline import model_recompute_share
    assert model_recompute_share(126, 16, 2) == pytest.approx(32 / 126)
    assert model_recompute_share(126, 16, 0) == 1.0 and model_recompute_share(80, 1, 10) == pytest.approx(10 / 80)


@pytest.mark.parametrize("k, expected", [(1, ['selective_ac_option = "5"']), (2, ['mode = "full"', "not the first 2"])])
def test_torchtitan_counts_every_nth_block_over_the_rank(k, expected):
    """70B on PP 8 with VPP 2: two 5-layer chunks per rank and one block counter: every 5th block is 2 of the
    rank's 10 (k = 1 per chunk); no N checkpoints 4 of 10 (every 2nd is 5), so k = 2 stays full AC."""
    args = ["--model", "70b", "--gpus", "128", "--tp", "4", "--pp", "8", "--dp", "4", "--vpp", "2", "--micro-batch",
            "1", "--recompute-layers", str(k), "--export", "torchtitan"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0 and all(text in out.stdout for text in expected), out.stdout


def test_exports_launch_what_was_priced():
    """Checked against the frameworks' sources: Megatron-FSDP asserts --ckpt-format fsdp_dtensor and
    CUDA_DEVICE_MAX_CONNECTIONS != 1, TP/CP without it == 1 (megatron/training/arguments.py validate_args);
    torchtitan's "default" reshard keeps parameters gathered when PP is on, and its DDP runs on a 1-D mesh only
    (torchtitan/models/llama3/infra/parallelize.py); DeepSpeed's activation_checkpointing block recomputes nothing
    unless the model calls deepspeed.checkpointing.checkpoint."""
    def export(*args, model="70b"):
        out = runner.invoke(app, ["--model", model, "--gpus", "64", *args])
        return out.exit_code, out.stdout + (out.stderr if out.stderr_bytes is not None else "")

    code, text = export("--tp", "2", "--pp", "1", "--dp", "32", "--zero", "3", "--export", "megatron")
    assert code == 0 and "--ckpt-format fsdp_dtensor" in text and "CUDA_DEVICE_MAX_CONNECTIONS unset or > 1" in text
    code, text = export("--tp", "8", "--pp", "1", "--dp", "8", "--zero", "1", "--export", "megatron")
    assert code == 0 and "--ckpt-format" not in text and "CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    # under PP torchtitan's FSDP is the plan's ZeRO-1: its default keeps the weights gathered (8B: 70B's stages
    # would not fit whole)
    code, text = export("--tp", "2", "--pp", "4", "--dp", "8", "--zero", "1", "--export", "torchtitan", model="8b")
    assert code == 0 and "fsdp_reshard_after_forward" not in text and "the plan's ZeRO-1" in text
    code, text = export("--tp", "8", "--pp", "1", "--dp", "8", "--zero", "3", "--export", "torchtitan")
    assert code == 0 and "fsdp_reshard_after_forward" not in text                  # without PP "default" reshards
    out = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--tp", "2", "--pp", "1", "--dp", "8", "--zero", "0",
                              "--export", "torchtitan"])
    assert out.exit_code == 2 and "one-dimensional mesh" in out.output
    code, text = export("--tp", "1", "--pp", "1", "--dp", "64", "--zero", "3", "--recompute", "full", "--export",
                        "deepspeed")
    assert code == 0 and "deepspeed.checkpointing.checkpoint" in text


def test_what_if_offers_the_fewest_recomputed_layers_that_fit():
    """405B TP8 PP16 on 128 GPUs (DP 1, so no DP to trade for CP) without recompute needs 115 GiB of the H100's 74
    (8-layer chunks). Of every partial count, the advice names the fastest that fits, the fewest layers; one layer
    fewer does not fit, and no other count gets a line. (On 512 GPUs, DP 4, trading DP 2 for CP 2 fits faster and in
    less memory than any partial count, so none is advised there.)"""
    from planner.evaluate import evaluate
    from planner.whatif import PARTIAL, suggestions

    layout = dict(tp=8, pp=16, dp=1, micro_batch=1, zero_stage=0, vpp=1, sequence_parallel=True)
    ev = evaluate("405b", 128, recompute="none", **layout)
    assert not ev.fits
    partial = [t for t in suggestions(ev, limit=100) if t.startswith(PARTIAL)]
    assert len(partial) == 1, partial
    k = int(partial[0].removeprefix(PARTIAL).split()[0])
    assert 1 < k < 8 and partial[0].startswith(f"{PARTIAL}{k} of 8 layers per chunk: ")
    assert evaluate("405b", 128, recompute="full", recompute_layers=k, **layout).fits
    assert not evaluate("405b", 128, recompute="full", recompute_layers=k - 1, **layout).fits
