"""How the shared dataset's free-text fields become a run's configuration (planner.shared_fields and the era rules
in planner.shared_runs): GPU names, recompute and ZeRO wording, hybrid degrees, FlashAttention generations, FLOP
conventions, years, and the runtime features each framework and year had."""

import pytest
from helpers import flat_run as _run

from planner.shared_runs import convert_run
from planner.validate import predict

@pytest.mark.parametrize("gpu, profile", [
    ("A100-SXM4-80GB (Selene)", "a100-80gb"), ("A100 40GB", "a100-40gb"),
    ("H100 (SXM, variant not stated)", "h100-sxm"),
    ("H200 SXM 141GB", "h200-sxm"), ("B200", "b200"), ("GB200 NVL72", "gb200"), ("V100 (DGX-2)", "v100-sxm"),
    ("MI300X", "mi300x"),
])
def test_gpu_names_pick_the_profile(gpu, profile):
    converted, why = convert_run(_run(gpu=gpu, num_gpus=128, pp=16, tp=8))
    assert why is None and converted["hardware"] == profile


@pytest.mark.parametrize("source, framework, profile", [
    ("Megatron-LM README (Sept 2020)", "Megatron-LM", "a100-40gb"),       # before the 80 GB part existed
    ("a 2022 paper", "Megatron-LM", "a100-80gb"),
    ("s", "", "a100-80gb"),                                               # no year: today's A100
])
def test_an_a100_of_unstated_memory_is_the_part_of_its_year(source, framework, profile):
    converted, why = convert_run(_run(gpu="A100 (DGX-A100, memory size not stated)", source=source,
                                      framework=framework, num_gpus=128, pp=16, tp=8))
    assert why is None and converted["hardware"] == profile
    assert "memory not stated" in converted["assumptions"]["hardware"]
    stated, _ = convert_run(_run(gpu="A100 40GB", source="a 2022 paper", num_gpus=128, pp=16, tp=8))
    assert stated["hardware"] == "a100-40gb" and "not stated" not in stated["assumptions"]["hardware"]


@pytest.mark.parametrize("text, zero, replicas", [("FSDP HYBRID_SHARD, dp_replicate=4", 3, 4),
                                                  ("HSDP (4 replicas), ZeRO-2", 2, 4),
                                                  ("distributed optimizer, replicate_degree: 2", 1, 2),
                                                  ("FSDP _HYBRID_SHARD_ZERO2 x 2 replicas", 2, 2),
                                                  ("distributed optimizer, num_distributed_optimizer_instances=4", 1,
                                                   4)])
def test_a_stated_hybrid_degree_is_imported(text, zero, replicas):
    """Hybrid sharding whose degree the free text states becomes layout.dp_replicate (FSDP HYBRID_SHARD: ZeRO-3 in
    groups; its ZeRO-2 variant or Megatron's distributed-optimizer instances where the text says so) and is
    predicted."""
    from planner.runs_file import ValidationRun
    from planner.validate import predict

    converted, why = convert_run(_run(zero_stage=text, tp=8, pp=16 if zero < 3 else 1))    # no ZeRO-3 under PP
    assert why is None
    assert (converted["layout"]["zero_stage"], converted["layout"]["dp_replicate"]) == (zero, replicas)
    pred = predict(ValidationRun.model_validate(converted))
    assert pred.error is None and pred.evaluation.row["dp_replicate"] == replicas
    # words a stage digit sits beside are not a degree, and "no replica" is no hybrid sharding
    assert "unstated degree" in convert_run(_run(zero_stage="ZeRO-3 hybrid, replicated across nodes"))[1]
    assert convert_run(_run(zero_stage="ZeRO-1 (no replica)"))[0]["layout"]["zero_stage"] == 1
    odd, _ = convert_run(_run(zero_stage="HSDP, dp_replicate=3", tp=8, pp=1))      # DP is 128: 3 does not divide it
    assert "DP-replicate to divide DP" in predict(ValidationRun.model_validate(odd)).error


@pytest.mark.parametrize("gpu, flash", [("V100 (DGX-2)", False), ("A100 80GB", True)])
def test_flash_attention_from_2023_only_where_the_gpu_runs_it(gpu, flash):
    """FlashAttention 1 and 2 and Transformer Engine's fused attention do not run on V100 (its profile's
    gpu.fused_attention): a 2024 V100 run gets unfused attention, and is predicted rather than rejected."""
    converted, why = convert_run(_run(gpu=gpu, group="Megatron-Core 2024", num_gpus=128, pp=16, tp=8))
    assert why is None and converted["runtime"]["flash_attention"] is flash
    from planner.runs_file import ValidationRun

    assert predict(ValidationRun.model_validate(converted)).error is None


@pytest.mark.parametrize("text, code", [
    ("full (DeepSpeed activation checkpointing)", "full"), ("none", "none"), ("selective", "selective"),
    ("selective (attention core: QK^T, softmax, dropout, attn-over-V)", "selective"), (True, "full"),
    (False, "none"), ("activation checkpointing: full", "full"), ("selective (Megatron)", "selective"),
    ("recompute_granularity=selective", "selective"), ("AC: none", "none"), ("none (no AC)", "none"),
    ("full (checkpoint-activations, 1 layer)", "full"), ("activation checkpointing", "full"),
    ("selective op", "op"), ("op-level SAC", "op"), ("per-op selective checkpointing", "op"),
    ("selective (core attention ops)", "selective"),                        # Megatron's, in plain words
    ("every layer", "full"), ("uniform", "full"), ("Megatron uniform, every 4 layers", "full"),
    ("selective, every layer", "selective"), ("selective recompute on every layer", "selective"), ("full, every 1 layer", "full"),
    ("full (uniform method, 2 layers per checkpoint)", "full"),             # Megatron uniform: all, grouped
    ("every block", "full"), ("full (every transformer block checkpointed)", "full"), ("each layer", "full"),
    ("activation checkpointing of each decoder block", "full"),            # PyTorch's words for every layer
])
def test_recompute_words(text, code):
    assert convert_run(_run(recompute=text))[0]["layout"]["recompute"] == code


@pytest.mark.parametrize("text, stage", [("FSDP FULL_SHARD", 3), ("FSDP2", 3), ("3", 3), (1, 1),
                                         ("ZeRO-1 (BF16_Optimizer's own stage-1 sharding)", 1),
                                         ("distributed optimizer", 1), ("--use-distributed-optimizer", 1),
                                         ("none", 0), ("FSDP NO_SHARD", 0), ("DDP", 0),
                                         ("FSDP (parameters not resharded after forward)", 2),
                                         ("dist-opt", 1), ("optimizer state sharding", 1), ("sharded optimizer", 1),
                                         ("ZeRO-3, no offload", 3)])
def test_zero_stage_words(text, stage):
    # without PP: FSDP under PP holds ZeRO-1's states (test_fsdp_under_pp_is_imported_as_what_it_holds)
    assert convert_run(_run(zero_stage=text, pp=1))[0]["layout"]["zero_stage"] == stage


@pytest.mark.parametrize("field", ["zero_stage", "recompute"])
@pytest.mark.parametrize("text", ["N/A", "unknown", "not stated", "null"])
def test_words_for_unstated_leave_the_knob_searched(field, text):
    converted, why = convert_run(_run(**{field: text}, pp=1))
    assert why is None and field not in converted["layout"]
    assert convert_run(_run(**{field: None}, pp=1))[0]["layout"] == converted["layout"]


@pytest.mark.parametrize("field, text", [("zero_stage", "ZeRO-2 + CPU offload"), ("zero_stage", "ZeRO-Infinity"),
                                         ("framework", "DeepSpeed ZeRO-Offload"), ("zero_stage", "FSDP (CPUOffload)"),
                                         ("precision", "bf16, optimizer offloaded to NVMe")])
def test_offload_is_refused_with_its_words(field, text):
    """Offloaded states move over PCIe and their optimizer step runs on the CPU: priced in HBM, the run would be
    far too fast, so it is skipped, naming the words; "no offload" is no offload."""
    converted, why = convert_run(_run(**{field: text}))
    assert converted is None and "offload to CPU or NVMe" in why and text.lower() in why
    assert convert_run(_run(zero_stage="ZeRO-1 (no offload)"))[1] is None


def test_era_defaults_fill_what_older_stacks_could_not_do():
    """A 2021 Megatron-LM run that does not state recompute, SP or ZeRO ran full recompute, no SP, no sharding."""
    old = convert_run(_run(source="Narayanan et al. 2021", framework="Megatron-LM", recompute=None))[0]
    assert old["layout"]["recompute"] == "full" and old["layout"]["sequence_parallel"] is False
    assert old["layout"]["zero_stage"] == 0 and old["runtime"]["flash_attention"] is False
    assert old["model"]["dropout"] is True and old["model"]["tied_embeddings"] is True
    new = convert_run(_run(source="2024 benchmark", recompute=None))[0]
    assert "recompute" not in new["layout"] and "zero_stage" not in new["layout"]   # searched
    assert new["runtime"]["flash_attention"] is True and new["model"]["dropout"] is False


@pytest.mark.parametrize("text, layers, pp, vpp, expected", [
    ("selective layer", 96, 1, None, 48),                      # torchtitan's default: every 2nd
    ("every 4 layers", 96, 4, None, 6), ("every 2 layers", 96, 4, 2, 6), ("every other layer", 96, 4, None, 12),
    ("every 2nd layer", 96, 4, None, 12), ("every third layer", 96, 4, None, 8),
    ("selective layer, selective_ac_option 4", 96, 4, None, 6), ("selective layer (ac_freq=3)", 96, 4, None, 8),
    ("every 3 layers", 30, 4, None, 2),                        # (30 + 2)/4 = 8 slots: blocks 3 and 6
    ("every 2nd block", 96, 4, None, 12), ("every other transformer block", 96, 4, None, 12),
    ("selective layer", 25, 1, None, 12),                      # torchtitan: blocks 2, 4, ..., 24
    ("recompute_num_layers 2 (block)", 96, 4, None, 2), ("full (block method, first 5 layers)", 96, 4, 2, 5),
])
def test_partial_recompute_phrasings_become_layers_per_chunk(text, layers, pp, vpp, expected):
    """GPT 175B has 96 layers: every 2nd of a PP-1 stage is 48, every 4th of a 24-layer stage 6, of a 12-layer chunk
    (VPP 2) every 2nd is 6. torchtitan checkpoints block n, 2n, ...: floor(chunk / n) of a chunk. Megatron's block
    method states its layers per chunk."""
    run = _run(recompute=text, layers=layers, pp=pp, tp=8, vpp=vpp, num_gpus=8 * pp * 16)
    layout = convert_run(run)[0]["layout"]
    assert layout["recompute"] == "full" and layout["recompute_layers"] == expected


def test_every_nth_layer_beyond_the_rank_recomputes_nothing():
    """torchtitan checkpoints block n, 2n, ... of a rank: with n above the rank's 8 layers (30 layers, PP 4) the
    counter never reaches n, so nothing is recomputed; n = 8 takes one layer."""
    from planner.cost.pipeline import every_nth_layers
    assert every_nth_layers(8, 9) == 0 and every_nth_layers(8, 8) == 1 and every_nth_layers(8, 3) == 2
    layout = convert_run(_run(recompute="every 9 layers", layers=30, pp=4, tp=8, num_gpus=512))[0]["layout"]
    assert layout["recompute"] == "none" and "recompute_layers" not in layout


def test_every_nth_layer_pins_vpp_and_hfu_needs_every_layer():
    """A share pinned as a count must not move with a searched VPP; an HFU-only figure cannot say how much of a
    partial recompute it counted."""
    converted, _ = convert_run(_run(recompute="every 2nd layer", pp=4, num_gpus=512))
    assert converted["layout"]["vpp"] == 1 and "vpp" in converted["assumptions"]
    hfu_only = dict(iteration_time_s=None, measured_hfu=0.5, recompute="every 2nd layer")
    assert "HFU alone" in convert_run(_run(**hfu_only))[1]
    counted = dict(iteration_time_s=None, measured_tflops_per_gpu=150.0, flops_accounting="96*B*s*l*h^2",
                   recompute="recompute_num_layers 4 (block)")
    assert "partial recompute" in convert_run(_run(**counted))[1]


@pytest.mark.parametrize("source, framework, gen", [
    ("2023 benchmark", "Composer / llm-foundry", 1),                 # FlashAttention-2 had not reached the stacks
    ("2023 benchmark", "Megatron-LM with FlashAttention-2", 2),      # unless the source names it
    ("2024 benchmark", "Megatron-Core", 2),
    ("2024 benchmark", "llm-foundry, Triton FlashAttention", 1),     # the Triton port is first-generation
    ("Narayanan et al. 2021", "Megatron-LM", None),                  # no fused attention at all
    ("2023 benchmark", "PyTorch 2.1, flash-attn==2.3.3", 2),         # version pins name the generation
    ("2023 benchmark", "Megatron-LM + Transformer Engine (FA-2)", 2),
    ("2023 benchmark", "NeMo, cuDNN fused attention", 2),            # FlashAttention-2-class kernels
    ("2024 benchmark", "FlashAttention-1 (flash-attn 1.0.4)", 1),    # a named generation beats the year
    ("2023 benchmark", "llm-foundry, Triton FlashAttention-2", 2),   # Triton, but the second generation
    ("2024 benchmark", "NeMo, TE attention, Triton kernels for RoPE", 2),   # Triton not for attention
    ("2023 benchmark", "Megatron-LM + Transformer Engine", 1),      # TE ran on flash-attn 1.x until 2024
    ("2023 benchmark", "PyTorch 2.1, cuDNN 8.9", 1),                 # cuDNN, but not its attention
    ("2023 benchmark", "flash_attn_2_cuda kernels", 2),
    ("2023 benchmark", "ROCm flash-attention CK (v2)", 2),
    ("2024 benchmark", "FA (Triton)", 1),
    ("2024 benchmark", "FlashAttention, Triton layernorm", 2),      # the clause ends at the comma
])
def test_flash_attention_generation_follows_the_year_and_the_framework(source, framework, gen):
    runtime = convert_run(_run(source=source, framework=framework))[0]["runtime"]
    assert runtime.get("flash_attention_gen") == gen and runtime["flash_attention"] is (gen is not None)


@pytest.mark.parametrize("accounting, convention", [
    ("Paper eq.(3): F = 96*B*s*l*h^2*(1 + ...)", "model_plus_full_recompute"),
    ("HFU includes recompute (hardware FLOPs)", "model_plus_full_recompute"),
    ("MFU per PaLM", "model"), ("MFU: model FLOPs eq.(7) (excludes recompute); HFU: eq.(8)", "model"),
    ("MFU (6ND)", "six_n"), ("torchtitan: 6N + 12*L*h*s per token", "all_params"),   # N with the embeddings
    ("torchtitan get_num_flop_per_token, 6N excluding embedding + 12Lhs", "model"),   # later torchtitan
])
def test_flops_accounting_picks_the_convention(accounting, convention):
    tflops = dict(iteration_time_s=None, measured_tflops_per_gpu=140.0)
    assert convert_run(_run(**tflops, flops_accounting=accounting))[0]["flops_convention"] == convention


def test_stated_year_not_arxiv_ids_and_the_latest_year():
    """arXiv 2010.12345 is not the year 2010; a source that cites older work dates from its latest year."""
    new = convert_run(_run(source="Some Lab 2024 (arXiv:2010.12345), building on Narayanan et al. 2021"))[0]
    assert new["runtime"]["flash_attention"] is True


@pytest.mark.parametrize("framework, eager", [
    ("torchtitan (FSDP2)", True), ("torchtitan, compile = false", True), ("torchtitan, no torch.compile", True),
    ("torchtitan without compile", True), ("torchtitan + torch.compile", None), ("torchtitan (compile = true)", None),
    ("torchtitan, compiled", None), ("Megatron-LM", None)])
def test_torchtitan_runs_eager_kernels_unless_compile_is_on(framework, eager):
    """torchtitan's presets set compile = false: its element-wise ops run as eager PyTorch kernels unless the text
    says compile was on; a compile that is turned off is not compile. Otherwise the field is left out: fused, the
    default."""
    run = _run(model="Llama 3 8B", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256,
               seq_len=8192, num_gpus=64, tp=1, pp=1, dp=64, zero_stage=3, global_batch=64, framework=framework,
               source="torchtitan 2024")
    converted, why = convert_run(run)
    assert why is None and converted["runtime"].get("eager_elementwise") is eager


@pytest.mark.parametrize("framework, source, groups", [
    ("Megatron-LM", "Narayanan et al. 2021", False), ("NeMo", "NVIDIA 2024", False),
    ("Megatron-Core", "NVIDIA 2025", None), ("Megatron-DeepSpeed", "Smith et al. 2022", None)])
def test_megatron_runs_before_2025_have_no_micro_batch_groups(framework, source, groups):
    """Megatron-LM's interleaved schedule took only a micro-batch count PP divides until its micro-batch groups
    (NVIDIA/Megatron-LM#675): a Megatron or NeMo run of 2024 or before says so; a later one, or DeepSpeed's own
    pipeline engine, leaves the field out (groups, the default)."""
    converted, why = convert_run(_run(framework=framework, source=source, vpp=2))
    assert why is None and converted["runtime"].get("microbatch_groups") is groups


@pytest.mark.parametrize("framework, source, fused", [
    ("Megatron-LM", "Narayanan et al. 2021", False), ("Megatron-LM", "Korthikanti et al. 2022", True),
    ("Megatron-DeepSpeed", "Smith et al. 2022", False), ("GPT-NeoX (Megatron + DeepSpeed)", "Black et al. 2022", False),
    ("Megatron-Core", "NVIDIA 2024", True), ("PyTorch FSDP", "Meta 2024", False), ("torchtitan", "PyTorch 2024", False),
    (None, "NVIDIA 2024", True)])
def test_gradient_accumulation_fusion_follows_the_async_tp_backward(framework, source, fused):
    """Megatron's gradient-accumulation fusion shares the autograd function of its async TP backward: from 2022, and
    never in the Megatron-DeepSpeed forks nor in a stack named as PyTorch's own (a separate gradient add per
    micro-batch, Runtime.grad_accumulation_fusion); an unnamed framework is the default stack, Megatron-Core."""
    converted, why = convert_run(_run(framework=framework, source=source))
    rt = converted["runtime"]
    assert why is None and rt["grad_accumulation_fusion"] is fused
    if framework and "Megatron" in framework:
        assert rt["tp_bwd_overlap"] is fused


@pytest.mark.parametrize("framework, source, zero, precision, whole", [
    ("Megatron-DeepSpeed", "BigScience 2022", "1", "bf16", True), ("Megatron-DeepSpeed", "BigScience 2022", "1",
                                                                     "fp16", None),
    ("Megatron-DeepSpeed", "Smith et al. 2021", "1", "bf16", None), ("Megatron-Core", "NVIDIA 2024", "1", "bf16", None)])
def test_deepspeed_bf16_zero1_all_reduces_the_gradients(framework, source, zero, precision, whole):
    """DeepSpeed's BF16_Optimizer (2022 on) runs ZeRO-1 with a whole-gradient all-reduce: a DeepSpeed bf16 ZeRO-1
    run of 2022 or later says so; fp16 (DeepSpeed's ZeRO stage 1 reduce-scatter), an earlier one or Megatron's
    distributed optimizer leave the field out (a reduce-scatter, the default)."""
    converted, why = convert_run(_run(framework=framework, source=source, zero_stage=zero, precision=precision))
    assert why is None and converted["runtime"].get("zero1_all_reduce") is whole


def test_fsdp_under_pp_is_imported_as_what_it_holds():
    """torch's pipelining keeps FSDP's weights gathered and its gradients whole until the last micro-batch, so an
    FSDP run with PP (torchtitan's 2D/3D) holds ZeRO-1's states, not ZeRO-3's (which the planner refuses under PP):
    it is imported as ZeRO-1 with a note, and predicted; without PP it stays ZeRO-3, and a stated ZeRO-3 is kept."""
    converted, why = convert_run(_run(zero_stage="FSDP", framework="torchtitan", tp=8, pp=4))
    assert why is None and converted["layout"]["zero_stage"] == 1
    assert "torch pipelining" in converted["assumptions"]["zero_stage"]
    from planner.runs_file import ValidationRun
    assert predict(ValidationRun.model_validate(converted)).error is None
    flat, _ = convert_run(_run(zero_stage="FSDP", framework="torchtitan", tp=8, pp=1))
    assert flat["layout"]["zero_stage"] == 3
    stated, _ = convert_run(_run(zero_stage="ZeRO-3", tp=8, pp=4))
    assert stated["layout"]["zero_stage"] == 3


@pytest.mark.parametrize("gpu", ["H100 96GB HBM2e (Grand Teton, 500 W)", "H100 94GB", "H100 (HBM2e)"])
def test_an_h100_that_is_not_the_80_gb_sxm_part_has_no_profile(gpu):
    """torchtitan's H100s have 96 GB of HBM2e at 500 W, a peak "between SXM and NVL" (its performance.md); 94 GB
    is the NVL card. Priced as the 80 GB SXM profile, their measured memory would not fit and their compute would
    be too fast, so the run is skipped with the reason; the 80 GB part is still the profile."""
    converted, why = convert_run(_run(gpu=gpu, num_gpus=128, pp=16, tp=8))
    assert converted is None and "H100 with 94 or 96 GB" in why
    assert convert_run(_run(gpu="H100 80GB (96 nodes)", num_gpus=128, pp=16, tp=8))[0]["hardware"] == "h100-sxm"


def test_torchtitan_selective_is_its_per_op_policy():
    """torchtitan has no attention-core-only mode: its shipped Llama 3 configs set selective_ac_option = 'op'.
    Megatron's "selective" stays the attention core, and torchtitan's "selective layer" every 2nd layer."""
    fields = dict(framework="torchtitan (FSDP2)", tp=1, pp=1, num_gpus=8, zero_stage="FSDP", global_batch=16)
    converted = convert_run(_run(recompute="selective", **fields))[0]
    assert converted["layout"]["recompute"] == "op" and "per-op" in converted["assumptions"]["recompute"]
    assert converted["runtime"]["fused_cross_entropy"] is False            # its loss: PyTorch's, on fp32 logits
    megatron = convert_run(_run(recompute="selective"))[0]
    assert megatron["layout"]["recompute"] == "selective" and "fused_cross_entropy" not in megatron["runtime"]
    assert convert_run(_run(recompute="selective layer", **fields))[0]["layout"]["recompute_layers"] == 48


def test_numbers_given_as_text_and_a_bare_16_bit_precision_are_read():
    """YAML authors quote numbers ("8") and write precision 16: both mean what they say. An MFU written as a
    percentage is refused with the hint that it is a fraction."""
    converted, why = convert_run(_run(tp="8", pp="16", ep="1", num_gpus="1024", precision=16))
    assert why is None and converted["layout"]["tp"] == 8 and converted["gpus"] == 1024
    _, why = convert_run(_run(iteration_time_s=None, measured_mfu=45))
    assert "mfu is a fraction: 0.45 for 45%" in why
