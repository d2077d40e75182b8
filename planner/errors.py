"""The one user-facing exception type, and the names its fields go by on the command line and in Python."""

from __future__ import annotations

import functools


class PlannerError(ValueError):
    """Bad input: names the offending field or flag, what it got and what was expected.

    The CLI prints ``str(error)`` as one line on stderr and exits with code 2; the library raises it as is.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


# The library's keyword arguments and the CLI flags that set them. Checks deep inside raise the flag (most input
# arrives through the CLI); the library's entry points (library_api) rename it to the keyword a notebook user typed,
# and the CLI renames keywords back (flag_name). Message texts keep the flags they suggest.
KEYWORD_FLAGS = {
    "model": "--model", "gpus": "--gpus", "hardware": "--hardware", "seq_len": "--seq-len",
    "global_batch": "--global-batch", "global_batch_tokens": "--global-batch-tokens", "headroom_gib": "--headroom-gib",
    "tp": "--tp", "cp": "--cp", "pp": "--pp", "dp": "--dp", "micro_batch": "--micro-batch", "vpp": "--vpp",
    "sequence_parallel": "--sequence-parallel", "recompute": "--recompute", "recompute_layers": "--recompute-layers",
    "zero_stage": "--zero", "tokens": "--tokens", "price_usd_per_gpu_hour": "--price-per-gpu-hour", "pue": "--pue",
    "sort": "--sort", "allow_cross_node_tp": "--allow-cross-node-tp", "flash_attention": "--flash-attention",
    "flash_attention_gen": "--flash-attention-gen", "dp_replicate": "--dp-replicate",
}
_FLAG_KEYWORDS = {flag: kw for kw, flag in KEYWORD_FLAGS.items()}


def _renamed(field: str, table: dict[str, str]) -> str:
    """`field` with its leading name (before ': ', as in '--model: layers') looked up in `table`."""
    head, sep, rest = field.partition(": ")
    return table.get(head, head) + sep + rest


def flag_name(field: str) -> str:
    """The CLI's name for an error field: a library keyword becomes its flag."""
    return _renamed(field, KEYWORD_FLAGS)


def library_api(fn):
    """A public library function: a PlannerError about an argument names the keyword (seq_len), not the flag."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PlannerError as exc:
            field = _renamed(exc.field, _FLAG_KEYWORDS)
            if field == exc.field:
                raise
            raise PlannerError(field, exc.message) from None
    return wrapper
