"""torchtitan's per-op activation checkpointing (--recompute op; selective_ac_option "op"): every matmul's output is
saved but every second one (K, the output projection, the MLP's second matmul), and the attention kernel's; the rest
of the layer is recomputed in the backward pass. Between none and full in memory and time."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli_contract import assert_mentions, bad
from planner.cli import app
from planner.cost import flops, memory
from planner.cost.step import step_columns
from planner.candidates import Pins
from planner.search import run_search
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model
from planner.specs.strategy import Job, Precision

HW = load_hardware("a100-80gb")
runner = CliRunner()
NONE, SELECTIVE, FULL, OP = 0, 1, 2, 3


def test_recomputed_flops_by_hand():
    """Llama 3 8B: K 4096x1024, output 4096x4096, up 4096x14336 = 79,691,776 weights; 2 FLOPs each, 32 layers."""
    m = load_model("llama-3.1-8b")
    assert flops.recompute_flops_per_token(m, 8192, OP) == 32 * 2 * 79_691_776
    hardware = flops.hardware_flops_per_token(m, 8192, OP)
    assert flops.hardware_flops_per_token(m, 8192, NONE) < hardware < flops.hardware_flops_per_token(m, 8192, FULL)


def test_saved_bytes_by_hand():
    """Per token, bf16, no TP: input 4096 + Q 4096 + V 1024 + attention output 4096 + gate 14336 + down 4096
    = 31,744 values (63,488 bytes) + the fp32 log-sum-exp of 32 heads (128 bytes). With TP 2 and SP: input,
    Q, V, attention output and gate halve, the down projection's partial sum stays whole (8,192 bytes) and the two
    reduce-scatter outputs add 2 x 4,096 bytes."""
    m = load_model("llama-3.1-8b")
    assert memory.activation_bytes_per_layer(m, 1, 1, 1, False, OP) == 63_488 + 128
    assert memory.activation_bytes_per_layer(m, 1, 1, 2, True, OP) == 4_096 + 22_528 + 1_024 + 64 + 8_192 + 8_192


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["llama-3.1-8b", "gpt3-175b", "llama-3.1-70b", "llama-3.1-405b"]),
       tp=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), seq=st.sampled_from([2048, 8192]))
def test_op_sits_between_none_and_full(name, tp, sp, seq):
    m = load_model(name)
    sp = sp and tp > 1
    act = [memory.activation_bytes_per_layer(m, seq, 1, tp, sp, rc) for rc in (FULL, OP, NONE)]
    # Under TP the saved down projection is every rank's full-width partial sum: at TP 8 it can outweigh what
    # no recompute keeps, so only full < op holds for every TP.
    assert act[0] < act[1] and (tp > 1 or act[1] < act[2])
    job = Job(gpus=8 * tp, seq_len=seq, global_batch=64)
    cols = {k: np.array([v] * 3) for k, v in dict(tp=tp, cp=1, pp=1, dp=8, micro_batch=1, vpp=1, sp=sp,
                                                   zero=1, rc_layers=0).items()}
    cols["recompute"] = np.array([NONE, OP, FULL])
    out = step_columns(m, HW, job, cols, Precision())
    assert out["step_time_s"][0] < out["step_time_s"][1] < out["step_time_s"][2]
    assert out["mfu"][0] > out["mfu"][1] and out["hfu"][1] > out["mfu"][1]


def test_the_search_tries_op_only_when_pinned():
    kwargs = dict(hardware="a100-80gb", seq_len=8192, global_batch=64, find_min_gpus=False)
    assert "op" not in set(run_search("8b", 64, **kwargs).table["recompute"])
    pinned = run_search("8b", 64, pins=Pins(recompute="op"), **kwargs).table
    assert len(pinned) and set(pinned["recompute"]) == {"op"}


def test_cli_pins_exports_and_refuses(capsys):
    args = ["--model", "8b", "--gpus", "64", "--tp", "1", "--pp", "1", "--zero", "3", "--recompute", "op"]
    data = json.loads(runner.invoke(app, args + ["--format", "json"]).stdout)
    assert data["configs"][0]["recompute"] == "op"
    toml = runner.invoke(app, args + ["--export", "torchtitan"]).stdout
    assert 'mode = "selective"' in toml and 'selective_ac_option = "op"' in toml and "costlier" not in toml
    assert_mentions(bad(capsys, *args, "--export", "megatron"), "--export", "per-op")
    assert_mentions(bad(capsys, *args, "--no-flash-attention"), "--recompute", "flash")


@pytest.mark.parametrize("run_id", ["torchtitan_a100_01", "torchtitan_a100_05", "torchtitan_a100_06"])
def test_torchtitan_op_runs_are_bundled(run_id):
    from planner.runs_file import load_runs
    run = next(r for r in load_runs() if r.id == run_id)
    assert run.layout.recompute == "op" and run.flops_convention == "all_params"


def test_recompute_time_is_the_three_unsaved_matmuls_and_the_elementwise_kernels():
    """K (h x kv/t), output projection (q/t x h), up projection (h x F/t), plus the element-wise kernels' forward
    time and one launch per recomputed kernel (3 GEMMs, 2 norms, 2 adds, the activation, RoPE)."""
    from planner.cost.compute import gemm_time_s, op_recompute_time_s
    m, hw, n = load_model("llama-3.1-70b"), load_hardware("h100-sxm"), 8192
    gemms = gemm_time_s(n, 8192, 1024 / 2, hw) + gemm_time_s(n, 8192 / 2, 8192, hw) + gemm_time_s(n, 8192, 28672 / 2, hw)
    assert op_recompute_time_s(m, 8192, 1, 2, hw, elementwise_s=1e-3) == pytest.approx(
        gemms + 1e-3 + 9 * hw.kernel_overhead_s, rel=1e-12)


def test_op_repeats_half_the_forward_tp_collectives():
    """With TP + SP the forward moves two all-gathers and two reduce-scatters; the per-op policy keeps the
    reduce-scatter outputs and repeats the all-gathers in the backward."""
    from planner.cost.layer import layer_times
    from planner.specs.strategy import Runtime
    m, hw, job = load_model("llama-3.1-70b"), load_hardware("h100-sxm"), Job(gpus=8, seq_len=8192, global_batch=8)
    cols = {"tp": np.array([8, 8]), "micro_batch": np.array([1, 1]), "sp": np.array([True, True]),
            "recompute": np.array([NONE, OP]), "cp": np.array([1, 1])}
    _, _, tp_fwd, tp_bwd = layer_times(m, hw, job, cols, Runtime())
    assert tp_bwd[1] - tp_bwd[0] == pytest.approx(0.5 * tp_fwd[0], rel=1e-12)


def test_op_recompute_rules(capsys):
    """torchtitan runs TP only with SP, and its policy saves aten.mm outputs of a bias-free, dropout-free model."""
    assert_mentions(bad(capsys, "--model", "8b", "--gpus", "64", "--recompute", "op", "--tp", "8",
                        "--no-sequence-parallel", "--pp", "1"), "sequence parallelism")
    assert_mentions(bad(capsys, "--model", "gpt3-175b", "--gpus", "1024", "--recompute", "op"), "biases")


def test_working_memory_is_never_negative():
    """At TP 8 the per-op policy keeps more than no recompute (the down projection's partial sum): no transient."""
    m = load_model("llama-3.1-405b")
    assert memory.recompute_working_bytes(m, 8192, 1, 8, True, OP) == 0.0
    assert memory.recompute_working_bytes(m, 8192, 1, 1, False, OP) > 0.0
