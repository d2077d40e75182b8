"""Mixed precision follows the GPU: V100 has no BF16 (its datasheet lists FP16 tensor performance only; hardware.md
§1 "125 (FP16 only)"), so its profile has no bf16 peak and its exports train in FP16 with dynamic loss scaling:
Megatron-LM `--fp16` (arguments.py: `--loss-scale` None is dynamic scaling; fp32 main gradients only for bf16
unless `--accumulate-allreduce-grads-in-fp32`), DeepSpeed `"fp16": {"enabled": true, "loss_scale": 0}` (0 is
dynamic). torchtitan's `training.mixed_precision_param` is bfloat16 or float32 only, so it refuses V100."""

import json

import pytest
from cli_contract import assert_mentions, bad, run, write

import planner
from planner.errors import PlannerError
from planner.export import best_supported, blockers, export
from planner.specs.hardware import hardware_dir, list_hardware, load_hardware

V100 = ["--model", "8b", "--gpus", "16", "--hardware", "v100-sxm"]
H100 = ["--model", "8b", "--gpus", "16", "--hardware", "h100-sxm"]


def _out(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


def test_v100_profile_states_it_has_no_bf16():
    hw = load_hardware("v100-sxm")
    assert hw.mixed_precision == "fp16" and hw.peak_flops == 125e12       # the FP16 tensor-core peak
    assert dict(hw.peak_flops_by_dtype) == {"fp16": 125e12}                 # no bf16 figure at all
    assert {h.name for h in list_hardware() if h.mixed_precision != "bf16"} == {"v100-sxm"}


def test_a_profile_needs_a_16_bit_peak(capsys, tmp_path):
    text = (hardware_dir() / "v100-sxm.yaml").read_text()
    path = write(tmp_path / "v.yaml", text.replace("    fp16: 125\n", "    fp8: 125\n"))
    assert_mentions(bad(capsys, "--model", "8b", "--gpus", "8", "--hardware", path),
                    "hardware file v.yaml: gpu.peak_tflops_dense", "bf16", "fp16")


def test_megatron_export_is_fp16_on_v100_cli(capsys):
    text = _out(capsys, *V100, "--export", "megatron")
    assert "--fp16" in text and "--accumulate-allreduce-grads-in-fp32" in text and "--bf16" not in text
    assert "dynamic loss scaling" in text
    h100 = _out(capsys, *H100, "--export", "megatron")
    assert "--bf16" in h100 and "--fp16" not in h100


def test_megatrons_local_implementation_takes_torchs_rmsnorm_as_it_is(capsys):
    """Without Transformer Engine (V100) Megatron builds RMSNorm from PyTorch's (LocalSpecProvider: WrappedTorchNorm),
    which asserts persist_layer_norm off (on by default: arguments.py --no-persist-layer-norm) and refuses sequence
    parallelism; LayerNorm models keep Megatron's own fused norm."""
    text = _out(capsys, *V100, "--export", "megatron")
    assert "--transformer-impl local" in text and "--no-persist-layer-norm" in text
    assert "--sequence-parallel" not in text
    assert "--no-persist-layer-norm" not in _out(capsys, *H100, "--export", "megatron")
    assert "--no-persist-layer-norm" not in _out(capsys, "--model", "gpt-1.7b", "--gpus", "16", "--hardware",
                                                 "v100-sxm", "--export", "megatron")
    assert_mentions(bad(capsys, *V100, "--sequence-parallel", "--export", "megatron"), "error: --export:",
                    "RMSNorm", "sequence parallelism")
    row = planner.evaluate("8b", 16, hardware="v100-sxm", tp=2, pp=1, dp=8, sequence_parallel=True).row
    m = planner.load_model("8b")
    assert blockers("megatron", row, "fp16", model=m, transformer_engine=False) == [
        "Megatron without Transformer Engine builds RMSNorm from PyTorch's, which refuses sequence parallelism"]
    assert blockers("megatron", row, model=m) == []


def test_deepspeed_export_is_fp16_with_dynamic_loss_scaling_on_v100_cli(capsys):
    code, out, err = run(capsys, *V100, "--export", "deepspeed")
    assert code == 0, err
    cfg = json.loads(out)
    assert cfg["fp16"] == {"enabled": True, "loss_scale": 0} and "bf16" not in cfg
    assert "dynamic loss scaling" in err
    h100 = json.loads(_out(capsys, *H100, "--export", "deepspeed"))
    assert h100["bf16"] == {"enabled": True} and "fp16" not in h100


def test_torchtitan_refuses_v100_cli(capsys):
    assert_mentions(bad(capsys, *V100, "--export", "torchtitan"), "error: --export:", "torchtitan", "v100-sxm",
                    "bf16", "megatron or deepspeed")
    assert "[parallelism]" in _out(capsys, *H100, "--export", "torchtitan")


def test_exports_follow_the_hardware_api():
    result = planner.run_search("8b", 16, hardware="v100-sxm", find_min_gpus=False)
    text, _ = best_supported("megatron", result)
    assert "--fp16" in text and "--bf16" not in text
    text, notes = best_supported("deepspeed", result)
    assert json.loads(text)["fp16"]["loss_scale"] == 0 and any("fp16" in n for n in notes)
    with pytest.raises(PlannerError, match="torchtitan cannot train on v100-sxm"):
        best_supported("torchtitan", result)
    row, m, job = result.table.iloc[0], result.model, result.job
    assert "--fp16" in export("megatron", row, m, job, dtype="fp16")[0]
    assert "--bf16" in export("megatron", row, m, job)[0]                           # the default: bf16
    with pytest.raises(PlannerError, match="dtype: got 'fp32'"):
        export("megatron", row, m, job, dtype="fp32")


def test_mfu_legend_names_the_peak_it_divides_by(capsys):
    assert "dense fp16 peak" in _out(capsys, *V100, "--top", "1")
    assert "dense bf16 peak" in _out(capsys, *H100, "--top", "1")


def test_fp32_parameters_shrink_zero3_states_by_two_bytes_per_param_per_shard(capsys):
    """--fp32-params (PyTorch FSDP mixed precision): the fp32 parameters are the master weights, so a ZeRO-3 rank
    stores 16 bytes/param/d, not 18. Llama 3.1 70B at TP 2 x CP 2 x DP 16 shards over DP x CP = 32 ranks: the
    weights part becomes the fp32 master (4/32 per param) and the optimizer part m, v (8/32); the step is the same."""
    pins = ["--model", "70b", "--gpus", "64", "--tp", "2", "--cp", "2", "--pp", "1", "--dp", "16",
            "--micro-batch", "1", "--recompute", "none", "--sequence-parallel"]
    mega = json.loads(_out(capsys, *pins, "--zero", "3", "--format", "json"))
    fsdp = json.loads(_out(capsys, *pins, "--zero", "3", "--format", "json", "--fp32-params"))
    mw, fw = mega["memory_breakdown_gib"], fsdp["memory_breakdown_gib"]
    params_gib = mw["weights"] * 32 / 2                     # Megatron: bf16 shard, 2 bytes/param / 32
    assert fw["weights"] == pytest.approx(params_gib * 4 / 32, rel=1e-12)
    assert fw["optimizer"] == pytest.approx(params_gib * 8 / 32, rel=1e-12)
    assert mw["optimizer"] == pytest.approx(params_gib * 12 / 32, rel=1e-12)
    assert fw["gradients"] == mw["gradients"] and fw["activations"] == mw["activations"]
    assert mega["memory_gib"] - fsdp["memory_gib"] == pytest.approx(params_gib * 2 / 32, rel=1e-9)
    assert fsdp["step_time_s"] == mega["step_time_s"]
    assert fsdp["precision"]["params_are_master"] and not mega["precision"]["params_are_master"]
    table = _out(capsys, *pins, "--zero", "3", "--fp32-params")
    assert "Weights are the fp32 parameters, the optimizer's master copy" in " ".join(table.split())
    assert_mentions(bad(capsys, *pins, "--zero", "1", "--fp32-params"), "--fp32-params", "ZeRO-3", "--zero 1")
