"""Typer options that `plan` and `plan sweep` share, defined once: each call returns a fresh OptionInfo, since typer
needs one per command; and the help's layout (what each flag takes, wrapping)."""

from __future__ import annotations

import typer
import typer.core


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
    return typer.Option(None, "--flash-attention-gen", help="FlashAttention generation: 2 (default: FlashAttention-2 "
                        "class), 1 (FlashAttention-1, its Triton port: half the rate) or 3 (FlashAttention-3, cuDNN's "
                        "fused attention on Hopper: 1.5x).")


def cp_comm_opt():
    return typer.Option("ring", "--cp-comm", help="CP's K/V exchange: ring (Megatron-Core, overlapped with "
                        "attention) or allgather (Llama 3, torchtitan: exposed).")


def eager_loss_opt():
    return typer.Option(False, "--eager-loss", help="Price the loss as PyTorch's cross_entropy on fp32 logits "
                        "(torchtitan): 12 bytes per logit as the backward starts; default: a fused kernel's 4 "
                        "(Megatron).")


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


# What each flag takes, as help shows it (the flags are read as text, to name the flag in any error, so typer would
# print <str> for all of them). One table for every command, but `plan sweep --gpus` takes a list.
_METAVARS = {
    "--model": "NAME|FILE", "--gpus": "N", "--hardware": "NAME|FILE", "--nics-per-node": "N",
    "--nic-gbit-per-s": "GBIT", "--seq-len": "TOKENS", "--global-batch": "SEQS", "--global-batch-tokens": "TOKENS",
    "--top": "N", "--tp": "N", "--cp": "N", "--pp": "N", "--dp": "N", "--micro-batch": "SEQS", "--vpp": "N",
    "--recompute": "MODE", "--recompute-layers": "N", "--zero": "STAGE", "--dp-replicate": "N",
    "--headroom-gib": "GIB", "--flash-attention-gen": "1|2|3", "--cp-comm": "ring|allgather", "--tokens": "TOKENS",
    "--price-per-gpu-hour": "USD", "--pue": "RATIO", "--sort": "KEY", "--output": "FILE", "--export": "FORMAT",
    "--plot": "FILE", "--group": "TEXT",
}
_COMMAND_METAVARS = {("sweep", "--gpus"): "LIST", ("validate", "--hardware"): "NAME"}

# U+2011 (non-breaking hyphen) is as wide as "-" and is not a break point for textwrap
_NO_BREAK_HYPHEN = "\u2011"


def _with_metavars(params, command):
    for param in params:
        flag = next((o for o in param.opts if o.startswith("--")), None)
        if getattr(param, "metavar", None) is None and not getattr(param, "is_flag", False) and flag:
            param.metavar = _COMMAND_METAVARS.get((command, flag), _METAVARS.get(flag))
    return params


_Context = typer.core.TyperCommand.context_class          # click's, or the copy recent typer vendors


class _Formatter(_Context.formatter_class):
    def write_dl(self, rows, col_max=30, col_spacing=2):
        """Wrap descriptions at spaces only: click's wrapper also breaks after hyphens, which split flag names such
        as --nic-gbit-per-s across lines."""
        start = len(self.buffer)
        super().write_dl([(first, second.replace("-", _NO_BREAK_HYPHEN)) for first, second in rows],
                         col_max, col_spacing)
        self.buffer[start:] = [text.replace(_NO_BREAK_HYPHEN, "-") for text in self.buffer[start:]]


class _HelpContext(_Context):
    formatter_class = _Formatter


class HelpGroup(typer.core.TyperGroup):
    """`plan`'s help: what each flag takes (_METAVARS), descriptions wrapped at spaces."""
    context_class = _HelpContext

    def get_params(self, ctx):
        return _with_metavars(super().get_params(ctx), self.name)


class HelpCommand(typer.core.TyperCommand):
    """A subcommand's help, as HelpGroup's."""
    context_class = _HelpContext

    def get_params(self, ctx):
        return _with_metavars(super().get_params(ctx), self.name)
