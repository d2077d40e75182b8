"""Typer options that `plan` and `plan sweep` share, defined once: each call returns a fresh OptionInfo, since typer
needs one per command."""

from __future__ import annotations

import typer


def vpp_opt():
    return typer.Option(None, "--vpp", help="Pin virtual pipeline stages per rank.")


def recompute_layers_opt():
    return typer.Option(None, "--recompute-layers", help="Full recompute of only the first N layers of each pipeline "
                        "chunk (Megatron block method).")


def sequence_parallel_opt():
    return typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help="Pin sequence parallelism on or off.")


def cross_node_tp_opt():
    return typer.Option(False, "--allow-cross-node-tp", help="Let TP span nodes.")


def tp_comm_overlap_opt():
    return typer.Option(False, "--tp-comm-overlap/--no-tp-comm-overlap",
                        help="Hide TP collectives behind GEMMs (Megatron --tp-comm-overlap).")


def flash_attention_opt():
    return typer.Option(None, "--flash-attention/--no-flash-attention", help="FlashAttention kernels (no s x s "
                        "scores in memory); default: the hardware's (none on V100).")


def flash_gen_opt():
    return typer.Option(None, "--flash-attention-gen", help="FlashAttention generation: 2 (default: FlashAttention-2, "
                        "cuDNN fused attention) or 1 (FlashAttention-1, its Triton port: half the rate).")


def cp_comm_opt():
    return typer.Option("ring", "--cp-comm", help="CP's K/V exchange: ring (Megatron-Core, overlapped with "
                        "attention) or allgather (Llama 3, torchtitan: exposed).")


def eager_opt():
    return typer.Option(False, "--eager-elementwise", help="Price norms, activations and RoPE as eager PyTorch "
                        "kernels (torchtitan without torch.compile); default: fused (Megatron/Transformer Engine, "
                        "torch.compile).")


def microbatch_groups_opt():
    return typer.Option(True, "--microbatch-groups/--no-microbatch-groups", help="Interleave any micro-batch count "
                        ">= PP in groups (Megatron-Core --microbatch-group-size-per-virtual-pipeline-stage, the "
                        "default); --no-microbatch-groups: only multiples of PP (Megatron-LM before the groups).")


def grad_accumulation_fusion_opt():
    return typer.Option(True, "--grad-accumulation-fusion/--no-grad-accumulation-fusion", help="The weight-gradient "
                        "GEMM accumulates into the fp32 main grads (Megatron --gradient-accumulation-fusion, the "
                        "default); --no-grad-accumulation-fusion: a separate gradient add per micro-batch (Megatron-LM "
                        "before late 2021, Megatron-DeepSpeed, DeepSpeed's engine, PyTorch DDP/FSDP).")


def zero1_all_reduce_opt():
    return typer.Option(False, "--zero1-all-reduce", help="ZeRO-1 all-reduces the whole gradients and then "
                        "all-gathers the updated weights (DeepSpeed's BF16_Optimizer); default: a reduce-scatter "
                        "(Megatron's distributed optimizer).")


def fp32_params_opt():
    return typer.Option(False, "--fp32-params", help="Parameters kept in fp32 as the optimizer's master weights and "
                        "cast to bf16 for compute (PyTorch FSDP/FSDP2 mixed precision: torchtitan, Composer): ZeRO-3 "
                        "stores 16 bytes/param/DP, not 18; default: bf16 parameters beside an fp32 master copy "
                        "(Megatron, DeepSpeed).")


def pp_scatter_gather_opt():
    return typer.Option(False, "--pp-scatter-gather", help="Without SP, split each pipeline send over the TP ranks "
                        "and all-gather it on the receiver (Megatron-LM 2021-22, DeepSpeed's pipeline engine); "
                        "default: whole sends, as Megatron-Core.")
