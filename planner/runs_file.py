"""Measured training runs as files: the run schema (strict pydantic), loading the planner's own format or the shared
dataset's (planner.shared_runs), and each run's measured step time.

A run states what its source states; what it leaves out (micro-batch, VPP, ...) is searched when it is predicted
(planner.validate). The measured throughput becomes a step time with the FLOP convention the source uses (Narayanan
2021 counts the recompute forward: 96-form; Korthikanti/PaLM/torchtitan/MosaicML count model FLOPs), so predicted
and measured compare like with like.
"""

from __future__ import annotations

import re
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, create_model, field_validator, model_validator

from planner.cost import flops
from planner.cost.params import total_params
from planner.errors import PlannerError
from planner.shared_runs import convert_run, is_shared_format
from planner.specs._files import read_mapping, validate
from planner.specs.hardware import bundled_names, load_hardware
from planner.specs.hardware_file import GIB, RANGES, bytes_to_gbit
from planner.specs.model import ModelFile, preset_file
from planner.specs.strategy import FLASH_GENERATIONS, MAX_GPUS, MAX_SEQ_LEN, Layout, check_knobs

BUNDLED_RUNS = Path(__file__).resolve().parent / "data" / "published_runs.yaml"
_FIELD_TYPES = {"int": int, "bool": bool, "str": str}     # Layout's annotations (strings under __future__)
THROUGHPUT_KEYS = ("iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu")


class _Strict(BaseModel):
    """Strict types, as model and hardware files: `micro_batch: true`, `tp: "8"` or `flash_attention: "on"` is an
    error naming the field, never 1, 8 or True. (An integer is a valid float.)"""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _check_layout(run_layout: BaseModel) -> BaseModel:
    try:
        check_knobs(run_layout.model_dump())
    except PlannerError as exc:
        raise ValueError(str(exc)) from None
    return run_layout


# The knobs a source states, one per Layout field (absent = searched); values are checked by Layout's own rules.
RunLayout = create_model(
    "RunLayout", __base__=_Strict, __validators__={"_check": model_validator(mode="after")(_check_layout)},
    **{f.name: (_FIELD_TYPES[f.type] | None, None) for f in fields(Layout)})


class RunRuntime(_Strict):
    flash_attention: bool
    tp_comm_overlap: bool
    tp_bwd_overlap: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    dp_bucket_bytes: float | None = Field(default=None, gt=0)
    zero3_gather_unit: Literal["layer", "matrix"] | None = None
    hierarchical_collectives: bool | None = None
    pp_scatter_gather: bool | None = None
    cp_comm_overlap: bool | None = None
    eager_elementwise: bool | None = None      # torchtitan without torch.compile (Runtime.eager_elementwise)
    fused_cross_entropy: bool | None = None    # false: PyTorch's cross_entropy on fp32 logits (torchtitan)
    microbatch_groups: bool | None = None      # false: Megatron-LM before its micro-batch groups (Runtime)
    grad_accumulation_fusion: bool | None = None  # false: a separate gradient add per micro-batch (Runtime)
    zero1_all_reduce: bool | None = None       # true: ZeRO-1 all-reduces the gradients (DeepSpeed BF16_Optimizer)
    flash_attention_gen: StrictInt | None = Field(default=None, ge=min(FLASH_GENERATIONS),
                                                  le=max(FLASH_GENERATIONS))   # 1 or 2, not true or 1.0
    # A run was launched in one rank order: every framework's default puts DP next to TP (Megatron tp-cp-ep-dp-pp,
    # DeepSpeed, torchtitan); "pp-dp" is Megatron's --use-tp-pp-dp-mapping. A plan takes the cheaper of the two.
    rank_order: Literal["dp-pp", "pp-dp"] = "dp-pp"


class RunNetwork(_Strict):
    """The run's node network where its cluster is not the profile's build (HardwareSpec.with_network): NICs per
    server (node; on GB200 a 4-GPU compute tray) and each NIC's rate per direction, as the source states them."""

    nics_per_node: int = Field(ge=1, le=1024)
    nic_gbit_per_s: float = Field(gt=bytes_to_gbit(RANGES["inter_bw_bytes_per_s"][0]),
                                  lt=bytes_to_gbit(RANGES["inter_bw_bytes_per_s"][1]))
    name: str = ""

    @property
    def label(self) -> str:
        return f"{self.nics_per_node}x{self.nic_gbit_per_s:g}G NICs"


class RunPrecision(_Strict):
    """Bytes per element where the run differs from the bf16/fp32-main-grad default (e.g. fp16 with 16-bit grads)."""

    param_bytes: int = Field(default=2, ge=1, le=4)
    grad_bytes: int = Field(default=4, ge=1, le=4)
    optimizer_bytes: int = Field(default=12, ge=0, le=32)
    params_are_master: bool = False    # PyTorch FSDP/DDP mixed precision: the fp32 parameters are the master weights


class Measured(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    iteration_time_s: float | None = Field(default=None, gt=0)
    tokens_per_s: float | None = Field(default=None, gt=0)
    tokens_per_s_per_gpu: float | None = Field(default=None, gt=0)
    tflops_per_gpu: float | None = Field(default=None, gt=0, lt=1e5)
    mfu: float | None = Field(default=None, gt=0, le=1)
    memory_gib: float | None = Field(default=None, gt=0)

    @property
    def throughput(self) -> tuple[str, float]:
        given = [(k, getattr(self, k)) for k in THROUGHPUT_KEYS if getattr(self, k) is not None]
        return given[0]


class ValidationRun(_Strict):
    """One measured run: its configuration, what was measured, and how its source counts FLOPs."""

    id: str
    group: str
    source: str
    source_locator: str = ""
    model: ModelFile
    hardware: str
    network: RunNetwork | None = None        # absent: the profile's node network
    gpus: int = Field(ge=1, le=MAX_GPUS)
    layout: RunLayout = RunLayout()
    runtime: RunRuntime
    precision: RunPrecision = RunPrecision()
    measured: Measured
    flops_convention: Literal["model", "model_plus_full_recompute", "gpt_neox_2021", "six_n", "all_params"] | None = None
    peak_tflops: float | None = Field(default=None, gt=0)
    other_reported: dict = {}
    assumptions: dict = {}
    notes: list[str] = []

    @model_validator(mode="before")
    @classmethod
    def _preset_model(cls, data):
        """`model: {preset: llama-3.1-8b, global_batch: 64}`: a bundled preset's architecture under the run's own
        fields (a batch given either way replaces the preset's)."""
        model = data.get("model") if isinstance(data, dict) else None
        if not (isinstance(model, dict) and "preset" in model):
            return data
        fields = dict(model)
        name = fields.pop("preset")
        base = preset_file(name) if isinstance(name, str) else None
        if base is None:
            raise ValueError(f"model.preset: got {name!r}, expected a preset name or alias (see `plan models`)")
        merged = base.model_dump(exclude_defaults=True)
        if {"global_batch", "global_batch_tokens"} & fields.keys():
            for key in ("global_batch", "global_batch_tokens"):
                merged.pop(key, None)
        return {**data, "model": {**merged, **fields}}

    @field_validator("hardware")
    @classmethod
    def _profile_name(cls, text: str) -> str:
        """A bundled profile's alias (h100) as its name (h100-sxm), so that one profile shows under one name; a
        path, or a name no profile has (reported when the run is predicted), stays as given."""
        if text.strip().lower() in bundled_names():
            return load_hardware(text).name
        return text

    @model_validator(mode="after")
    def _complete(self) -> "ValidationRun":
        given = [k for k in THROUGHPUT_KEYS if getattr(self.measured, k) is not None]
        if len(given) != 1:
            raise ValueError(f"measured must give exactly one of {', '.join(THROUGHPUT_KEYS)}, got {given or 'none'}")
        if given[0] in ("tflops_per_gpu", "mfu") and self.flops_convention is None:
            raise ValueError(f"measured {given[0]} needs flops_convention (model, model_plus_full_recompute, "
                             "gpt_neox_2021, six_n or all_params)")
        if given[0] == "mfu" and self.peak_tflops is None:
            raise ValueError("measured mfu needs peak_tflops (the peak the source divides by)")
        return self


class LayerTime(_Strict):
    """One transformer layer's measured forward and backward time (Korthikanti Table 4 style)."""

    id: str
    source: str
    model: str
    hardware: str
    tp: int = Field(ge=1)
    micro_batch: int = Field(ge=1)
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)
    sequence_parallel: bool
    recompute: Literal["none", "selective", "full"]
    flash_attention: bool = False
    tp_bwd_overlap: bool = True
    forward_ms: float = Field(gt=0)
    backward_ms: float = Field(gt=0)


class RunsFile(_Strict):
    meta: dict = {}
    runs: list[ValidationRun]
    layer_times: list[LayerTime] = []
    # Shared-dataset files only (planner.shared_runs): runs the planner cannot express, id -> why.
    skipped: dict[str, str] = {}
    shared_format: bool = False

    @model_validator(mode="after")
    def _unique_ids(self) -> "RunsFile":
        seen = set()
        for run in self.runs:
            if run.id in seen:
                raise ValueError(f"run id {run.id!r} is given twice; expected each run once")
            seen.add(run.id)
        return self


def load_runs_file(path: str | Path | None = None) -> RunsFile:
    """The planner's own runs format, or the shared dataset's flat format (converted by planner.shared_runs)."""
    if path is None:
        return _bundled_runs()
    return _read_runs_file(Path(path).expanduser())


@lru_cache(maxsize=1)
def _bundled_runs() -> RunsFile:
    """The bundled file, read once per process (validate reads it for the runs and for the fit groups' ids; a
    RunsFile is frozen)."""
    return _read_runs_file(BUNDLED_RUNS)


def _read_runs_file(p: Path) -> RunsFile:
    data = read_mapping(p, "runs file")
    if is_shared_format(data):
        return _from_shared(data, p.name)
    try:
        runs = validate(RunsFile, data, f"runs file {p.name}")
    except PlannerError as exc:                # a problem inside runs.N: name that run's id too
        index = re.match(r".*: runs\.(\d+)(\.|$)", exc.field)
        raw = data.get("runs")
        run = raw[int(index.group(1))] if index and isinstance(raw, list) and int(index.group(1)) < len(raw) else None
        if isinstance(run, dict) and run.get("id") is not None:
            raise PlannerError(exc.field, f"{exc.message} (run {run['id']})") from None
        raise
    for i, run in enumerate(runs.runs):
        check_measured(run, f"runs file {p.name}: runs.{i}.")
    return runs


def check_measured(run: "ValidationRun", prefix: str) -> None:
    """A measured rate above what the GPU can execute (its highest dense peak) is a typo, not a measurement: it
    would make the measured step impossibly short. An unknown hardware name is reported when the run is predicted."""
    m = run.measured
    if m.tflops_per_gpu is None and m.mfu is None and m.memory_gib is None:
        return
    try:
        hw = load_hardware(run.hardware)
    except PlannerError:
        return
    if m.memory_gib is not None and m.memory_gib * GIB > hw.hbm_bytes * (1 + 1e-9):
        raise PlannerError(f"{prefix}measured.memory_gib", f"run {run.id}: {m.memory_gib:,.6g} GiB per GPU is more "
                                                           f"than {hw.name}'s {hw.hbm_bytes / GIB:,.4g} GiB of HBM")
    if m.tflops_per_gpu is None and m.mfu is None:
        return
    dtype, peak = max(hw.peak_flops_by_dtype, key=lambda kv: kv[1])
    if m.tflops_per_gpu is not None:
        key, got, rate = "tflops_per_gpu", f"{m.tflops_per_gpu:,.6g} TFLOP/s per GPU", m.tflops_per_gpu
    else:
        key, got = "mfu", f"mfu {m.mfu:g} of peak_tflops {run.peak_tflops:,.6g} = {m.mfu * run.peak_tflops:,.6g} TFLOP/s"
        rate = m.mfu * run.peak_tflops
    if rate * 1e12 > peak * (1 + 1e-9):
        raise PlannerError(f"{prefix}measured.{key}", f"run {run.id}: {got} is above {hw.name}'s dense {dtype} peak "
                                                       f"of {peak / 1e12:,.6g} TFLOP/s; expected at most that")


def _from_shared(data: dict, name: str) -> RunsFile:
    runs, skipped = [], {}
    if not data["runs"]:
        raise PlannerError(f"runs file {name}", "`runs` is empty; expected at least one run")
    for i, raw in enumerate(data["runs"]):
        if not isinstance(raw, dict):
            skipped[f"runs.{i}"] = f"not a mapping of fields (got {type(raw).__name__})"
            continue
        run_id = str(raw.get("id") or f"runs.{i}")
        if run_id in skipped or any(r.id == run_id for r in runs):
            run_id = f"{run_id} (runs.{i})"                   # duplicate ids: keep both
        converted, why = convert_run({**raw, "id": run_id})
        if converted is None:
            skipped[run_id] = why
            continue
        try:
            run = validate(ValidationRun, converted, f"run {run_id}")
            check_measured(run, f"run {run_id}: ")
            runs.append(run)
        except PlannerError as exc:
            skipped[run_id] = str(exc)
    if not runs:
        first = next(iter(skipped.items()))
        raise PlannerError(f"runs file {name}",
                           f"none of its {len(skipped)} runs can be expressed (e.g. {first[0]}: {first[1]})")
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    return RunsFile(meta=meta, runs=runs, skipped=skipped, shared_format=True)


def load_runs(path: str | Path | None = None) -> list[ValidationRun]:
    """The bundled published runs, or a user's file in the same format."""
    return list(load_runs_file(path).runs)


def _convention_flops(run: ValidationRun, spec) -> float:
    """FLOPs per step as the source counts them. gpt_neox_2021: GPT-NeoX's logger before 2023
    (megatron/logging.py get_flops: 6 x total parameters + 60·s·h·L per token, no recompute term; replaced by the
    Megatron-DeepSpeed 96-form in gpt-neox PR #1044, Sept 2023). all_params: torchtitan's get_num_flop_per_token
    with every parameter counted (6N + 12·L·h·s, N with the embeddings; later versions exclude them)."""
    s, b = spec.seq_len, run.model.global_batch
    if run.flops_convention == "model_plus_full_recompute":
        return float(b * s * flops.hardware_flops_per_token(spec, s, 2))
    if run.flops_convention == "six_n":                       # 6 x parameters per token, no attention term
        return float(b * s * 6.0 * total_params(spec))
    if run.flops_convention == "gpt_neox_2021":
        return float(b * s * (6.0 * total_params(spec) + 60.0 * s * spec.hidden * spec.layers))
    if run.flops_convention == "all_params":                  # torchtitan's early train.py: 6 x every parameter,
        attn = flops.attention_score_flops_per_token(spec, s)  # embeddings included, + the attention scores
        return float(b * s * (6.0 * total_params(spec) + 3.0 * spec.layers * attn))
    return float(flops.model_flops_per_step(spec, s, b))


def measured_step_time_s(run: ValidationRun) -> float:
    """The measured step time implied by the source's metric and FLOP convention."""
    spec = run.model.to_spec()
    key, value = run.measured.throughput
    tokens = spec.seq_len * run.model.global_batch
    if key == "iteration_time_s":
        return value
    if key == "tokens_per_s":
        return tokens / value
    if key == "tokens_per_s_per_gpu":
        return tokens / (value * run.gpus)
    f = _convention_flops(run, spec)
    if key == "tflops_per_gpu":
        return f / (value * 1e12 * run.gpus)
    return f / (value * run.peak_tflops * 1e12 * run.gpus)
