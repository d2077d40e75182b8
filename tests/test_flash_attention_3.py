"""FlashAttention-3-class kernels (FA3, cuDNN's fused attention on Hopper): the Hopper profiles price them at 1.5x
the FlashAttention-2 class (Shah et al. 2024: "1.5-2.0x with FP16" on H100), asked for with flash_attention_gen 3
or --flash-attention-gen 3; a profile without that measured rate refuses them, naming the field."""

import json

import numpy as np
import pytest
from cli_contract import assert_mentions, bad, run
from helpers import flat_run

from planner.cost import compute
from planner.errors import PlannerError
from planner.shared_runs import convert_run
from planner.specs.hardware import list_hardware, load_hardware
from planner.specs.model import load_model
from planner.specs.strategy import Runtime


def test_only_hopper_profiles_carry_the_rate():
    rates = {hw.name: hw.attention_gen3_rate for hw in list_hardware() if hw.attention_gen3_rate is not None}
    assert rates == {"h100-sxm": 1.5, "h200-sxm": 1.5}


@pytest.mark.parametrize("backward", [False, True])
def test_generation_3_runs_attention_at_the_rate(backward):
    """Math-bound attention (FlashAttention at 8K tokens): 1.5x faster forward and backward; generation 1 half."""
    m, hw = load_model("8b"), load_hardware("h100-sxm")
    t = {g: compute.attention_core_time_s(m, 8192, 1, 1, True, hw, backward=backward, flash_gen=g) for g in (1, 2, 3)}
    assert t[2] / t[3] == pytest.approx(1.5, rel=1e-12) and t[1] / t[2] == pytest.approx(2.0, rel=1e-12)
    mixed = compute.attention_core_time_s(m, 8192, 1, 1, True, hw, backward=backward, flash_gen=np.array([2, 3]))
    assert mixed.tolist() == pytest.approx([t[2], t[3]], rel=1e-12)        # per row, as the search evaluates


def test_the_runtime_checks_the_generation_against_the_hardware():
    assert Runtime(flash_attention_gen=3).for_hardware(load_hardware("h100-sxm")).flash_attention_gen == 3
    for name in ("a100-80gb", "b200", "mi300x"):
        with pytest.raises(PlannerError) as info:
            Runtime(flash_attention_gen=3).for_hardware(load_hardware(name))
        assert info.value.field == "flash_attention_gen" and name in info.value.message
    with pytest.raises(PlannerError, match="expected 1, 2 or 3"):
        Runtime(flash_attention_gen=4)


def test_the_flag_speeds_up_long_sequences_and_is_refused_off_hopper(capsys):
    args = ["--model", "8b", "--gpus", "8", "--seq-len", "32768", "--global-batch", "16", "--tp", "1", "--cp", "1",
            "--pp", "1", "--dp", "8", "--format", "json"]
    code, out, err = run(capsys, *args)
    fa2 = json.loads(out)
    code3, out3, err3 = run(capsys, *args, "--flash-attention-gen", "3")
    fa3 = json.loads(out3)
    assert code == code3 == 0 and fa3["step_time_s"] < 0.9 * fa2["step_time_s"]
    assert fa3["runtime"]["flash_attention_gen"] == 3
    assert_mentions(bad(capsys, *args, "--hardware", "a100-80gb", "--flash-attention-gen", "3"),
                    "error: --flash-attention-gen:", "a100-80gb", "use 2 or 1")


@pytest.mark.parametrize("gpu, framework, gen", [
    ("H100 80GB", "NeMo 24.09 (Transformer Engine, cuDNN fused attention)", 3),
    ("H100 80GB", "Megatron-Core, NVTE_FUSED_ATTN=1", 3),
    ("H100 80GB", "torchtitan, flash-attn 3 (flash_attn_interface)", 3),
    ("H200 141GB", "FlashAttention-3", 3),
    ("H100 80GB", "Megatron-Core, FlashAttention-2", 2),
    ("A100 80GB", "NeMo, cuDNN fused attention", 2),                  # Ampere: FA2 class
    ("B200", "NeMo, cuDNN fused attention", 2),                       # no measured FA3-class rate on Blackwell
])
def test_shared_format_reads_fa3_and_cudnn_on_hopper(gpu, framework, gen):
    converted, why = convert_run(flat_run(gpu=gpu, framework=framework, source="2024 benchmark", num_gpus=1024))
    assert why is None and converted["runtime"]["flash_attention_gen"] == gen


def test_the_megatron_export_says_how_to_run_cudnn_attention(capsys):
    code, out, err = run(capsys, "--model", "8b", "--gpus", "64", "--flash-attention-gen", "3", "--export",
                         "megatron")
    assert code == 0 and "FlashAttention-3-class kernels" in out and "NVTE_FUSED_ATTN=1" in out
