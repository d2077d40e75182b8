"""Attention kernels follow the hardware: V100 (sm70) runs no FlashAttention and no Transformer Engine fused
attention (FlashAttention README: FlashAttention-2 "currently supports: Ampere, Ada, or Hopper GPUs", FlashAttention
1.x "Turing or Ampere GPUs"; Transformer Engine's fused-attention backend needs sm80+), so its plans use unfused
attention: no context parallelism, no FlashAttention memory savings, no op-level recompute. Asking for FlashAttention
there is an error naming the flag (or field) and the hardware, in the CLI and in the API alike."""

import json

import pytest
from cli_contract import assert_mentions, bad, run, write

import planner
from planner.errors import PlannerError
from planner.specs.hardware import hardware_dir, list_hardware, load_hardware
from planner.specs.strategy import Runtime
from planner.runs_file import load_runs
from planner.validate import predict_all

V100 = ["--model", "8b", "--gpus", "16", "--hardware", "v100-sxm"]


def _json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_only_v100_lacks_fused_attention():
    assert {hw.name for hw in list_hardware() if not hw.fused_attention} == {"v100-sxm"}


def test_default_follows_the_hardware():
    assert Runtime().for_hardware(load_hardware("v100-sxm")).flash_attention is False
    assert Runtime().for_hardware(load_hardware("h100-sxm")).flash_attention is True
    assert Runtime().for_hardware(load_hardware("h100-sxm")).flash_attention_gen == 2
    assert Runtime(flash_attention=False).for_hardware(load_hardware("h100-sxm")).flash_attention is False


def test_v100_plan_has_no_context_parallelism_cli(capsys):
    """The reviewer's command ranked a CP=2 layout first at 72% MFU, priced with FlashAttention."""
    doc = _json(capsys, *V100, "--top", "50")
    assert doc["configs"] and all(c["cp"] == 1 for c in doc["configs"])
    assert doc["configs"][0]["mfu"] < 0.6
    assert any(r.startswith("context parallelism needs fused (flash) attention, which v100-sxm does not have")
               for r in doc["rejected"])
    # the default is exactly --no-flash-attention
    assert _json(capsys, *V100, "--top", "50", "--no-flash-attention") == doc


def test_v100_plan_has_no_context_parallelism_api():
    result = planner.run_search("8b", 16, hardware="v100-sxm", find_min_gpus=False)
    assert result.runtime.flash_attention is False
    assert (result.table["cp"] == 1).all() and (result.table["recompute"] != "op").all()
    df = planner.search("8b", 16, hardware="v100-sxm")
    explicit = planner.search("8b", 16, hardware="v100-sxm", runtime=Runtime(flash_attention=False))
    assert df.head(20).equals(explicit.head(20))


def test_v100_keeps_the_attention_scores_in_memory():
    """Unfused attention stores the a x s x s softmax output (Korthikanti Table 2's 5as/h term), FlashAttention only
    its log-sum-exp: with no recompute, a V100 layout holds far more activations than the same layout on A100."""
    pins = dict(tp=8, pp=2, dp=1, micro_batch=1, recompute="none", zero_stage=0, sequence_parallel=True, vpp=1)
    v100 = planner.evaluate("8b", 16, hardware="v100-sxm", **pins)
    a100 = planner.evaluate("8b", 16, hardware="a100-40gb", **pins)
    assert v100.memory_gib["activations"] > 2 * a100.memory_gib["activations"]


@pytest.mark.parametrize("flag, field", [(["--flash-attention"], "--flash-attention"),
                                         (["--flash-attention-gen", "1"], "--flash-attention-gen"),
                                         (["--flash-attention-gen", "2"], "--flash-attention-gen")])
def test_explicit_flash_attention_on_v100_is_an_error_cli(capsys, flag, field):
    line = bad(capsys, *V100, *flag)
    assert_mentions(line, f"error: {field}:", "v100-sxm", "no fused attention kernels")
    # also when V100 is one of several profiles compared (the flag, not a row, is wrong), and for a pinned layout
    assert_mentions(bad(capsys, "--model", "8b", "--gpus", "16", "--hardware", "h100-sxm,v100-sxm", *flag),
                    f"error: {field}:", "v100-sxm")
    assert_mentions(bad(capsys, *V100, "--tp", "4", "--pp", "1", "--dp", "4", *flag), field, "v100-sxm")


def test_explicit_flash_attention_on_v100_is_an_error_api():
    with pytest.raises(PlannerError) as info:
        planner.search("8b", 16, hardware="v100-sxm", runtime=Runtime(flash_attention=True))
    assert info.value.field == "flash_attention" and "v100-sxm" in info.value.message
    with pytest.raises(PlannerError, match="flash_attention_gen: v100-sxm"):
        planner.evaluate("8b", 16, hardware="v100-sxm", tp=4, pp=1, dp=4, runtime=Runtime(flash_attention_gen=1))
    with pytest.raises(PlannerError, match="flash_attention: got 'yes'"):
        Runtime(flash_attention="yes")
    # a comparison that includes such a profile refuses the request too (as the CLI does), not as one row's reason
    with pytest.raises(PlannerError) as info:
        planner.compare_hardware("8b", 16, "h100-sxm,v100-sxm", runtime=Runtime(flash_attention=True))
    assert info.value.field == "flash_attention" and "v100-sxm" in info.value.message
    # FlashAttention where the hardware runs it stays available
    assert planner.evaluate("8b", 16, hardware="a100-80gb", tp=2, cp=2, pp=1, dp=4,
                            runtime=Runtime(flash_attention=True)).row["cp"] == 2


@pytest.mark.parametrize("pin, flag", [(["--cp", "2"], "--cp"), (["--recompute", "op"], "--recompute")])
def test_what_needs_fused_attention_names_the_hardware(capsys, pin, flag):
    assert_mentions(bad(capsys, *V100, *pin), f"error: {flag}:", "fused (flash) attention",
                    "which v100-sxm does not have")


def test_fused_attention_is_a_strict_bool_in_the_profile(capsys, tmp_path):
    text = (hardware_dir() / "v100-sxm.yaml").read_text()
    assert "fused_attention: false" in text
    path = write(tmp_path / "v.yaml", text.replace("fused_attention: false", "fused_attention: 'no'"))
    assert_mentions(bad(capsys, "--model", "8b", "--gpus", "8", "--hardware", path),
                    "hardware file v.yaml: gpu.fused_attention", "boolean", "'no'")


def test_v100_validation_runs_state_unfused_attention():
    """The bundled V100 runs say they ran without fused attention, so the hardware-following default does not
    change their predictions; they all still predict."""
    v100 = [r for r in load_runs() if load_hardware(r.hardware).name == "v100-sxm"]
    assert v100 and all(r.runtime.flash_attention is False for r in v100)
    assert all(p.error is None for p in predict_all(v100))
