"""How a job is split and run: the training job, the parallel layout, precision and runtime features.

One small dataclass owns the layout knobs (torchtitan's ParallelDims idea): `Layout`'s fields are the knob list.
The search's pins (candidates.Pins), the knobs of a validation run (runs_file.RunLayout) and the cost layer's candidate
columns (KNOB_COLUMNS, cost.step.KNOBS) are derived from them. A parallel dimension is a Layout field and a name in
`PARALLEL_DIMS`, with its enumeration (candidates.enumerate_candidates), its validity rules (constraints) and its cost
terms: context parallelism (cp) was added that way, and expert parallelism will be. Hybrid sharding (dp_replicate)
was added the same way as a split of an existing dimension: DP into replicas of ZeRO shard groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from planner.checks import checked_int, integral, is_int, is_real
from planner.errors import PlannerError

# Parallel dimensions, innermost (fastest-varying rank) first. Their product is the GPU count. CP sits next to TP
# (Megatron-Core's tp-cp-dp-pp order); DP and PP take either order (cost.comm.placement_strides).
PARALLEL_DIMS = ("tp", "cp", "pp", "dp")

# Stored as 0-3 in candidate columns. "op" is torchtitan's per-op policy (selective_ac_option "op"): Megatron and
# DeepSpeed cannot run it, so the search tries it only when pinned.
RECOMPUTE = ("none", "selective", "full", "op")
SEARCHED_RECOMPUTE = ("none", "selective", "full")
FLASH_GENERATIONS = (1, 2, 3)                # FlashAttention-1 (and its Triton port); FlashAttention-2 class;
                                             # FlashAttention-3 class (FA3, cuDNN's fused attention on Hopper)
DEFAULT_FLASH_GENERATION = 2                 # when FlashAttention runs and no generation is given
ZERO3_GATHER_UNITS = ("layer", "matrix")     # ZeRO-3 gathers per layer (FSDP blocks) or per weight (DeepSpeed)
# Rank orders after TP (and CP): DP next, PP outermost (Megatron's default tp-cp-ep-dp-pp, torchtitan's mesh
# [pp, dp, cp, tp], DeepSpeed's [pipe, data, model]), or PP next (Megatron --use-tp-pp-dp-mapping).
RANK_ORDERS = ("dp-pp", "pp-dp")


def pp_next_launchable(cp, pp, zero):
    """Where PP may sit next to TP (rank order pp-dp): only Megatron launches it (--use-tp-pp-dp-mapping), and not
    with CP or EP (validate_args: "context_parallel and expert_model_parallel can't be used with tp-pp-dp
    mapping"), nor with ZeRO-2 under PP, which Megatron does not run (torchtitan and Llama 3's stack put PP
    outermost; ZeRO-3 under PP is no layout: constraints). Arrays broadcast."""
    return (np.asarray(cp) == 1) & ~((np.asarray(zero) >= 2) & (np.asarray(pp) > 1))
ZERO_STAGES = (0, 1, 2, 3)                  # 0 none, 1 optimizer (Megatron distributed optimizer), 2 +grads, 3 +params


def shard_group(dp, cp, dp_replicate):
    """Ranks one ZeRO shard group spans: the DP x CP ranks that hold the same weights, or under hybrid sharding the
    inner DP / dp_replicate of them with their CP ranks. A degree that does not divide DP (a validity rule) rounds
    down, to at least one DP rank. Arrays broadcast."""
    return np.maximum(np.asarray(dp) // np.asarray(dp_replicate), 1) * np.asarray(cp)


def recompute_label(recompute: str, layers: int = 0) -> str:
    """none, selective, full, op, or full(k): full recompute of the first k layers of each pipeline chunk."""
    return f"{recompute}({int(layers)})" if layers else str(recompute)


def recompute_code(value: str | int) -> int:
    """0 none, 1 selective, 2 full, 3 op; the name (any case) or the code itself."""
    if isinstance(value, str) and value.lower() in RECOMPUTE:
        return RECOMPUTE.index(value.lower())
    if is_int(value) and value in range(len(RECOMPUTE)):       # a whole number, as every other knob (2.0 is not)
        return int(value)
    raise PlannerError("recompute", f"got {value!r}, expected one of {', '.join(RECOMPUTE)}")


def recompute_codes(recompute) -> np.ndarray:
    """Recompute as codes 0-3 for the cost functions: a name, a code, or an array of either (validated, so that a
    name or an out-of-range code is not silently read as no recompute)."""
    rc = np.asarray(recompute)
    if rc.dtype.kind == "O" and all(isinstance(x, str) for x in rc.ravel()):   # a DataFrame column of names
        rc = rc.astype(str)
    if rc.dtype.kind in "US":
        code = {name: i for i, name in enumerate(RECOMPUTE)}
        rc = np.array([code.get(str(n).lower(), -1) for n in rc.ravel()], dtype=int).reshape(rc.shape)
    rc = integral(rc)                                # 2.0 from a float table column is the code 2
    if rc.dtype.kind not in "iu" or np.any((rc < 0) | (rc >= len(RECOMPUTE))):
        given = np.asarray(recompute)
        # the first value that is neither a name nor a code, not numpy's repr of the whole column
        bad = next((x for x, c in zip(given.ravel().tolist(), rc.ravel().tolist())
                    if not isinstance(c, (int, np.integer)) or not 0 <= c < len(RECOMPUTE)), recompute)
        shown = f"{'an array holding ' if given.ndim else ''}{bad!r}"
        raise PlannerError("recompute", f"got {shown}, expected codes 0-3 or names {', '.join(RECOMPUTE)}")
    return rc


def zero_code(value: str | int) -> int:
    """0-3, also written 'zero3' or 'zero-3'."""
    import re

    # True/False would read as 1/0 and a 1.0 as 1: neither is a stage (checked before the text match)
    match = (None if isinstance(value, (bool, np.bool_, float, np.floating))
             else re.fullmatch(r"(?:zero-?)?([0-3])", str(value).strip().lower()))
    if not match:
        raise PlannerError("zero_stage", f"got {value!r}, expected a ZeRO stage 0, 1, 2 or 3")
    return int(match.group(1))


MAX_GPUS, MAX_SEQ_LEN, MAX_GLOBAL_BATCH = 2**24, 2**24, 2**32     # sanity bounds of a job (flags and files)
MAX_LAYERS = 10_000                        # a model's layers (model files), so any layer count a knob names


@dataclass(frozen=True)
class Job:
    """What to train: GPU count, sequence length and global batch (sequences per optimizer step)."""

    gpus: int
    seq_len: int
    global_batch: int

    def __post_init__(self):
        for name, value, upper in (("gpus", self.gpus, MAX_GPUS), ("seq_len", self.seq_len, MAX_SEQ_LEN),
                                   ("global_batch", self.global_batch, MAX_GLOBAL_BATCH)):
            value = checked_int(value, name)               # named as the keyword; the CLI names its flag
            object.__setattr__(self, name, value)
            if value > upper:
                raise PlannerError(name, f"got {value:,}, expected at most {upper:,}")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


MASTER_BYTES = 4      # fp32 master weights, part of Precision.optimizer_bytes


@dataclass(frozen=True)
class Precision:
    """Bytes per element. Default: bf16 weights and activations, fp32 main grads, fp32 Adam (master, m, v).

    Megatron's default for bf16 keeps a 4-byte fp32 gradient buffer (formulas.md §3.1, Megatron distributed
    optimizer docs: 18 bytes/param unsharded, 6 + 12/d sharded). The ZeRO paper's 16 bytes/param is grad_bytes=2.
    `params_are_master`: the stored parameters are the optimizer's fp32 master weights (4 of `optimizer_bytes`) and
    the 16-bit weights only their casts for forward and backward (PyTorch FSDP/FSDP2 mixed precision with
    param_dtype=bf16: torchtitan, Composer), so ZeRO-3 keeps no 16-bit shard: 16 bytes/param/d, not 18.
    """

    param_bytes: int = 2
    grad_bytes: int = 4
    optimizer_bytes: int = 12
    activation_bytes: int = 2
    params_are_master: bool = False

    def __post_init__(self):
        for f in fields(self):            # bytes per element: positive (optimizer state may be 0: plain SGD)
            value, least = getattr(self, f.name), 0 if f.name == "optimizer_bytes" else 1
            if f.name == "params_are_master":
                if not isinstance(value, (bool, np.bool_)):
                    raise PlannerError(f.name, f"got {value!r}, expected true or false")
            elif not is_real(value) or not least <= value <= 16:
                raise PlannerError(f.name, f"got {value!r}, expected bytes per element from {least} to 16")
        if self.params_are_master and self.optimizer_bytes < MASTER_BYTES:
            raise PlannerError("optimizer_bytes", f"got {self.optimizer_bytes!r}, expected at least {MASTER_BYTES} "
                                                  "with params_are_master (the fp32 master weights are counted in it)")


@dataclass(frozen=True)
class Runtime:
    """Implementation features of the training stack: they change cost, not the layout.

    Defaults describe a current Megatron-Core/TransformerEngine stack. Older stacks (Megatron-LM 2021-22: no
    FlashAttention) are expressed by switching these off, never by a per-run correction. The attention kernels
    default to what the hardware runs (`for_hardware`): fused where the profile has them, unfused on V100.
    """

    flash_attention: bool | None = None  # attention scores never materialised (Dao et al. 2022); None: follow the
                                         # hardware (HardwareSpec.fused_attention)
    flash_attention_gen: int | None = None  # 2 (None: the default): FlashAttention-2-class kernels (mid-2023 on: FA2,
                                            # TE fused attention off Hopper); 1: FlashAttention-1 or its Triton port;
                                            # 3: FlashAttention-3 class (FA3, cuDNN's fused attention on Hopper)
    tp_comm_overlap: bool = False       # TP collectives hidden behind GEMMs (Megatron --tp-comm-overlap)
    tp_bwd_overlap: bool = True         # backward TP collectives overlap the weight-gradient (and, with SP, the
                                        # data-gradient) GEMMs: Megatron's async TP all-reduce (since late 2021)
    cp_comm_overlap: bool = True        # CP's K/V exchange runs as a ring overlapped with attention (Megatron-Core);
                                        # False: K/V all-gathered before attention, exposed (Llama 3 §3.3.2)
    overlap_grad_reduce: bool = True    # DP gradient reduction overlaps the last backward (Megatron, DDP buckets)
    overlap_param_gather: bool = True   # sharded-parameter all-gather overlaps the next forward
    eager_elementwise: bool = False     # element-wise ops as separate eager PyTorch kernels (torchtitan without
                                        # torch.compile: fp32 RMSNorm, SiLU and gate apart, complex RoPE, GQA's
                                        # repeat_kv; compute.eager_extra_bytes); False: fused kernels (Megatron/TE,
                                        # torch.compile)
    fused_cross_entropy: bool = True    # the loss as one fused kernel on fp32 logits, 4 bytes per logit (Megatron's
                                        # vocab-parallel cross-entropy; Korthikanti's 4sbV); False: PyTorch's
                                        # cross_entropy on logits cast to fp32 (torchtitan), 12 bytes per logit
                                        # (memory.logits_bytes)
    causal_flops_halved: bool = False   # MFU convention: PaLM counts the full s^2 attention (False)
    hierarchical_collectives: bool = True  # DP collectives use NVLink inside nodes and all NICs (NCCL rings/trees);
                                           # False: a topology-unaware ring whose every step crosses the network
    # Collective granularity (each call pays the collective latency once):
    dp_bucket_bytes: float | None = None  # gradient bucket size; None: Megatron-Core's default, max(40M, 1M x DP·CP)
                                          # gradient elements (DistributedDataParallelConfig.bucket_size: larger DP
                                          # groups get larger buckets); PyTorch DDP: 25e6
    zero3_gather_unit: str = "layer"    # ZeRO-3 gathers one layer per call (FSDP block wrapping) or one weight
                                        # matrix per call ("matrix": DeepSpeed stage 3 fetches per module)
    pp_scatter_gather: bool = False     # without SP, each TP rank sends 1/t of a stage's output and the next stage
                                        # all-gathers it (Megatron-LM 2021-22 --scatter-gather-tensors-in-pipeline,
                                        # Narayanan §4.1; DeepSpeed's pipeline engine partitions it too); False:
                                        # Megatron-Core sends the whole activation unless SP already splits it
    microbatch_groups: bool = True      # interleaving takes a micro-batch count PP does not divide, the chunks taking
                                        # turns in groups (Megatron-Core --microbatch-group-size-per-virtual-pipeline-
                                        # stage, torch's Interleaved1F1B rounds); False: a multiple of PP (Megatron-LM
                                        # 2021-24, whose schedule refused any other count)
    grad_accumulation_fusion: bool = True  # the weight-gradient GEMM accumulates into the fp32 main grads itself
                                        # (Megatron --gradient-accumulation-fusion, in the autograd function of its
                                        # async TP backward, late 2021 on; TE); False: each micro-batch's 16-bit
                                        # weight gradient is added to the accumulation buffer by a memory-bound
                                        # kernel of its own (Megatron-LM before it, the Megatron-DeepSpeed forks,
                                        # DeepSpeed's engine, PyTorch DDP/FSDP)
    zero1_all_reduce: bool = False      # ZeRO-1 reduces the gradients with a whole all-reduce, each rank then
                                        # updating its shard and all-gathering the weights (DeepSpeed's
                                        # BF16_Optimizer: engine.allreduce_gradients); False: a reduce-scatter
                                        # (Megatron's distributed optimizer, DeepSpeed's ZeRO stage 1)
    rank_order: str | None = None       # "dp-pp" or "pp-dp" (RANK_ORDERS) to price one order; None: the cheaper
                                        # of the two where some framework launches pp-dp (pp_next_launchable)

    def __post_init__(self):
        gen, fa = self.flash_attention_gen, self.flash_attention
        if gen is not None and (not is_int(gen) or gen not in FLASH_GENERATIONS):
            raise PlannerError("flash_attention_gen", f"got {self.flash_attention_gen!r}, expected 1, 2 or 3")
        if fa is not None and not isinstance(fa, (bool, np.bool_)):
            raise PlannerError("flash_attention", f"got {fa!r}, expected True, False or None (follow the hardware)")
        if fa is False and gen is not None:
            raise PlannerError("flash_attention_gen", f"got {gen!r} with FlashAttention off; the generation names "
                                                      "fused kernels: drop it or turn FlashAttention on")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, (bool, np.bool_)):
                raise PlannerError(f.name, f"got {value!r}, expected True or False")
        if self.dp_bucket_bytes is not None and (not is_real(self.dp_bucket_bytes)
                                                 or not 0 < self.dp_bucket_bytes < math.inf):
            raise PlannerError("dp_bucket_bytes", f"got {self.dp_bucket_bytes!r}, expected a positive size in bytes "
                                                  "or None (Megatron-Core's default)")
        if self.rank_order is not None and self.rank_order not in RANK_ORDERS:
            raise PlannerError("rank_order", f"got {self.rank_order!r}, expected one of {', '.join(RANK_ORDERS)} "
                                             "or None (the cheaper per layout)")
        if self.zero3_gather_unit not in ZERO3_GATHER_UNITS:
            raise PlannerError("zero3_gather_unit", f"got {self.zero3_gather_unit!r}, expected one of "
                                                    f"{', '.join(ZERO3_GATHER_UNITS)}")

    def for_hardware(self, hw) -> "Runtime":
        """This runtime on `hw` (a HardwareSpec): FlashAttention where the user left it open follows the hardware's
        fused-attention kernels; asking for them on hardware without any (V100: FlashAttention 1 and 2 and
        Transformer Engine's fused attention need sm75/sm80 or newer) is an error naming the field and the profile."""
        fa, gen = self.flash_attention, self.flash_attention_gen
        if not hw.fused_attention and (fa or gen is not None):
            field = "flash_attention" if fa else "flash_attention_gen"
            raise PlannerError(field, f"{hw.name} has no fused attention kernels (its profile: gpu.fused_attention "
                                      "false; FlashAttention 1 and 2 and Transformer Engine's fused attention do not "
                                      "run on it); leave FlashAttention unset (the default follows the hardware) "
                                      "or turn it off")
        if gen == 3 and hw.attention_gen3_rate is None:
            raise PlannerError("flash_attention_gen", f"3 (FlashAttention-3 class) has no measured rate on {hw.name} "
                                                      "(its profile: efficiency.attention_gen3_relative_rate; FA3 "
                                                      "and its measurements are Hopper's); use 2 or 1")
        fa = hw.fused_attention if fa is None else bool(fa)
        gen = DEFAULT_FLASH_GENERATION if gen is None and fa else gen     # None without fused kernels (checked)
        if fa is self.flash_attention and gen == self.flash_attention_gen:
            return self
        return replace(self, flash_attention=fa, flash_attention_gen=gen)


@dataclass(frozen=True)
class Layout:
    """One parallel layout. Degrees multiply to the GPU count; the message restates the arithmetic."""

    tp: int = 1
    cp: int = 1             # context parallelism: the sequence split over cp ranks (Megatron-Core, Llama 3)
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    vpp: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    recompute_layers: int = 0   # full recompute of only the first k layers of each pipeline chunk (Megatron
                                # --recompute-method block --recompute-num-layers k); 0: every layer
    zero_stage: int = 0
    dp_replicate: int = 1   # hybrid sharding (HSDP): ZeRO shards over dp/dp_replicate x cp ranks, replicated this
                            # many times (torchtitan data_parallel_replicate_degree, Megatron
                            # --num-distributed-optimizer-instances, FSDP HYBRID_SHARD); 1: over all DP x CP ranks

    def __post_init__(self):
        for f in ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "dp_replicate"):
            object.__setattr__(self, f, checked_int(getattr(self, f), f))
        k = self.recompute_layers
        if not is_int(k) or k < 0:
            raise PlannerError("recompute_layers", f"got {k!r}, expected a non-negative integer (0: every layer)")
        if k > MAX_LAYERS:                  # past any model's layers (and past int64 in the candidate columns)
            raise PlannerError("recompute_layers", f"got {k:,}, expected at most {MAX_LAYERS:,}")
        object.__setattr__(self, "recompute_layers", int(k))
        if not isinstance(self.sequence_parallel, (bool, np.bool_)):
            raise PlannerError("sequence_parallel", f"got {self.sequence_parallel!r}, expected True or False")
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        object.__setattr__(self, "recompute", RECOMPUTE[recompute_code(self.recompute)])
        object.__setattr__(self, "zero_stage", zero_code(self.zero_stage))

    @classmethod
    def knobs(cls) -> tuple[str, ...]:
        """The knob names, in order: a search table's layout columns."""
        return tuple(f.name for f in fields(cls))

    @property
    def world_size(self) -> int:
        return math.prod(getattr(self, d) for d in PARALLEL_DIMS)

    def check_gpus(self, gpus: int) -> None:
        if self.world_size != gpus:
            terms = " * ".join(f"{d}({getattr(self, d)})" for d in PARALLEL_DIMS)
            raise PlannerError("layout", f"{terms} = {self.world_size} != gpus({gpus})")

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# The knob list, in Layout's order, and each knob's candidate-column name in the cost layer (two are shortened).
LAYOUT_KNOBS: tuple[str, ...] = Layout.knobs()
KNOB_COLUMNS: dict[str, str] = {k: {"sequence_parallel": "sp", "zero_stage": "zero", "recompute_layers": "rc_layers"}
                                  .get(k, k) for k in LAYOUT_KNOBS}


def check_knobs(values: dict) -> Layout:
    """Check the given knobs (a partial layout; absent or None = open) with Layout's own rules; the error names the
    knob as written in files and keyword arguments (``tp``, not ``--tp``)."""
    given = {k: v for k, v in values.items() if v is not None}
    for name, value in given.items():
        try:
            Layout(**{name: value})
        except PlannerError as exc:
            raise PlannerError(name, exc.message) from None
    return Layout(**given)
