"""The DeepSpeed export: its JSON config and the notes on what DeepSpeed runs otherwise than the plan prices
(gradient traffic, stage split, pipeline sends, gradient accumulation)."""

import json

import pytest

import planner
from planner.errors import PlannerError
from planner.export import best_supported, blockers, export


def _best(model="405b", gpus=512, **pins):
    return planner.evaluate(model, gpus, **pins)


def test_deepspeed_json_keys_and_batch_arithmetic():
    ev = _best("70b", 64, tp=4, pp=2, dp=8, zero_stage=1, vpp=1)
    text, notes = export("deepspeed", ev.row, ev.result.model, ev.result.job)
    cfg = json.loads(text)
    assert set(cfg) >= {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                        "zero_optimization", "bf16"}
    assert cfg["zero_optimization"]["stage"] == 1
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 8
    assert any("PipelineModule(num_stages=2)" in n for n in notes)


def test_deepspeed_bf16_without_zero_is_zero_0_only_without_pp():
    """DeepSpeed's pipeline engine runs bf16 without ZeRO through BF16_Optimizer, which shards the optimizer state over
    DP: a priced ZeRO-0 pipeline would not be what runs. Without PP, DeepSpeed >= 0.17.6 keeps it unsharded
    (DDP_BFLOAT16, engine.py _do_optimizer_sanity_check), so it is exported with a note on its bf16 gradients."""
    from planner.export import unsupported

    row = _best("8b", 64, tp=2, pp=4, dp=8, zero_stage=0, vpp=1).row
    assert "BF16_Optimizer" in unsupported("deepspeed", row, "bf16")
    assert unsupported("deepspeed", row, "fp16") is None            # FP16_Optimizer keeps it whole
    ev = _best("8b", 64, tp=2, pp=1, dp=32, zero_stage=0)
    assert unsupported("deepspeed", ev.row, "bf16") is None
    text, notes = export("deepspeed", ev.row, ev.result.model, ev.result.job)
    assert json.loads(text)["zero_optimization"]["stage"] == 0
    assert any("DeepSpeed >= 0.17.6" in n and "bf16 gradients" in n for n in notes)


def test_deepspeed_zero_1_accumulates_fp32_gradients_as_priced():
    """The plan prices fp32 main gradients; DeepSpeed accumulates in bf16 unless data_types says fp32, which for
    ZeRO-1 selects BF16_Optimizer (the same sharding). ZeRO-2/3 keep their own gradient partitions: not set."""
    for zero, expected in ((1, {"grad_accum_dtype": "fp32"}), (2, None)):
        ev = _best("8b", 64, tp=2, pp=1, dp=32, zero_stage=zero)
        text, _ = export("deepspeed", ev.row, ev.result.model, ev.result.job)
        assert json.loads(text).get("data_types") == expected


def test_deepspeed_partitions_checkpointed_activations_only_where_tp_ranks_hold_them_whole():
    """partition_activations splits each checkpointed layer input over the TP ranks: right without SP, wrong with it
    (each rank holds its own slice; Megatron refuses distribute_saved_activations with SP). Megatron-DeepSpeed
    configures deepspeed.checkpointing from its launcher flags, which override the JSON: the notes name them."""
    for sp, partition in ((False, True), (True, False)):
        ev = _best("70b", 64, tp=4, pp=2, dp=8, zero_stage=1, vpp=1, recompute="full", sequence_parallel=sp)
        text, notes = export("deepspeed", ev.row, ev.result.model, ev.result.job)
        assert json.loads(text)["activation_checkpointing"]["partition_activations"] is partition
        flag = [n for n in notes if n.startswith("Megatron-DeepSpeed configures deepspeed.checkpointing")]
        assert flag and flag[0].endswith("--deepspeed-activation-checkpointing"
                                         + (" --partition-activations" if partition else
                                            " without --partition-activations"))
    ev = _best("70b", 64, tp=1, pp=2, dp=32, zero_stage=1, vpp=1, recompute="full")
    assert json.loads(export("deepspeed", ev.row, ev.result.model, ev.result.job)[0])[
        "activation_checkpointing"]["partition_activations"] is False


def test_an_unknown_framework_is_refused_not_read_as_deepspeed():
    row = {"tp": 8, "cp": 1, "pp": 2, "dp": 4, "vpp": 1, "zero_stage": 1, "dp_replicate": 1, "recompute": "none",
           "sequence_parallel": True, "micro_batch": 1}
    nothing_fits = planner.run_search("8b", 1)                 # refused before best_supported looks at its rows
    assert len(nothing_fits.table) == 0
    for call in (lambda: blockers("nemo", row), lambda: export("nemo", row, None, None),
                 lambda: best_supported("nemo", nothing_fits)):
        with pytest.raises(PlannerError, match="framework.*got 'nemo', expected one of megatron, torchtitan, deepspeed"):
            call()


@pytest.mark.parametrize("zero, says", [(1, "BF16_Optimizer all-reduces the fp32 gradients"),
                                        (2, "reduces gradients in bf16"), (3, "reduces gradients in bf16")])
def test_deepspeed_notes_how_its_gradient_traffic_differs_from_the_plan(zero, says):
    """DeepSpeed's engine communicates in the model's 16-bit dtype unless communication_data_type says otherwise
    (engine.py), so ZeRO-2/3 move half the planned fp32 gradient bytes; its ZeRO-1 with fp32 accumulation is
    BF16_Optimizer, whose all-reduce and all-gather are not overlapped."""
    ev = _best("8b", 64, tp=1, pp=1, dp=64, zero_stage=zero)
    _, notes = export("deepspeed", ev.row, ev.result.model, ev.result.job)
    assert sum(says in n for n in notes) == 1
    other = "reduces gradients in bf16" if zero == 1 else "BF16_Optimizer all-reduces"
    assert not any(other in n for n in notes)


def test_deepspeed_says_how_to_place_the_planned_stage_split():
    """405B's 126 layers on PP 16: the plan's 7/8/7; DeepSpeed's block-balanced partition keeps at most
    ceil(126/16) = 8 per stage, the plan's middle stages."""
    ev = _best("405b", 512, tp=8, pp=16, dp=4, zero_stage=1, vpp=1)
    _, notes = export("deepspeed", ev.row, ev.result.model, ev.result.job)
    split = [n for n in notes if n.startswith("stage split")]
    assert len(split) == 1 and "7, 8 and 7 layers" in split[0] and "at most 8 per stage" in split[0]
    flat = _best("8b", 64, tp=1, pp=1, dp=64, zero_stage=1)
    assert not any(n.startswith("stage split") for n in export("deepspeed", flat.row, flat.result.model,
                                                                flat.result.job)[1])


def test_deepspeed_export_says_its_gradient_accumulation_is_not_fused():
    """DeepSpeed's engine adds each micro-batch's weight gradient in a kernel of its own: a plan priced with
    Megatron's fusion (the default) and several micro-batches says to expect a slower step; one priced without it
    (Runtime(grad_accumulation_fusion=False)) or with one micro-batch says nothing."""
    from planner.specs.strategy import Runtime

    ev = _best("8b", 64, tp=1, pp=1, dp=64, zero_stage=1)
    assert int(ev.row["num_microbatches"]) > 1
    note = "separate kernel"
    assert any(note in n for n in export("deepspeed", ev.row, ev.result.model, ev.result.job)[1])
    assert not any(note in n for n in export("deepspeed", ev.row, ev.result.model, ev.result.job,
                                             Runtime(grad_accumulation_fusion=False))[1])
    one = _best("8b", 64, tp=1, pp=1, dp=64, zero_stage=1, global_batch=64)
    assert int(one.row["num_microbatches"]) == 1
    assert not any(note in n for n in export("deepspeed", one.row, one.result.model, one.result.job)[1])
