"""The hardware YAML file's schema, in the human units its keys name (GB/s, Gb/s, TFLOP/s, GiB), and the physical
ranges every profile must fall in. `planner.specs.hardware` builds the SI-unit HardwareSpec from a validated file;
these two modules are the only places that convert between the units.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GIB = 2**30
TOPOLOGIES = ("switch", "mesh")          # a node's fabric: NVSwitch-like, or a direct link per peer (MI300X)


def gbit_to_bytes(gbit_per_s: float) -> float:
    """A network rate as quoted (Gb/s, decimal giga, bits) in SI bytes/s: the one place the edge converts it."""
    return gbit_per_s * 1e9 / 8


def bytes_to_gbit(bytes_per_s: float) -> float:
    """SI bytes/s back to Gb/s for messages and file ranges (divides first: 1e300 Gb/s stays finite)."""
    return bytes_per_s / 1e9 * 8


# Physical ranges, SI (exclusive): the file schema states them in its own units and HardwareSpec checks a spec built
# or changed in Python against the same ones (HBM typed in GiB where bytes are expected is an error either way).
RANGES = {"peak_flops": (1e12, 1e17), "hbm_bytes": (2**30, 4096 * 2**30), "hbm_bw_bytes_per_s": (0.05e12, 100e12),
          "tdp_w": (10, 10_000), "intra_bw_bytes_per_s": (0.1e9, 100e12),
          "inter_bw_bytes_per_s": (gbit_to_bytes(1), gbit_to_bytes(100e3))}


class _Strict(BaseModel):
    """Strict types, as in the model file schema (specs/model.py): `gpus_per_node: true`, `tdp_w: "700"` or
    `gpus_per_node: 8.0` is an error naming the field, never 1, 700.0 or 8. (An integer is a valid float.)"""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Peaks(_Strict):
    bf16: float | None = Field(default=None, gt=RANGES["peak_flops"][0] / 1e12, lt=RANGES["peak_flops"][1] / 1e12,
                               description="dense BF16 tensor TFLOP/s; absent where the GPU has no BF16 (V100)")
    fp16: float | None = Field(default=None, gt=RANGES["peak_flops"][0] / 1e12, lt=RANGES["peak_flops"][1] / 1e12)
    fp8: float | None = Field(default=None, gt=RANGES["peak_flops"][0] / 1e12, lt=RANGES["peak_flops"][1] / 1e12)
    tf32: float | None = Field(default=None, gt=RANGES["peak_flops"][0] / 1e12, lt=RANGES["peak_flops"][1] / 1e12)

    @model_validator(mode="after")
    def _sixteen_bit(self) -> "_Peaks":
        if self.bf16 is None and self.fp16 is None:
            raise ValueError("gpu.peak_tflops_dense needs bf16 (dense BF16 TFLOP/s), or fp16 where the GPU has no BF16")
        return self


class _Gpu(_Strict):
    peak_tflops_dense: _Peaks
    hbm_capacity_gib: float = Field(gt=RANGES["hbm_bytes"][0] / 2**30, lt=RANGES["hbm_bytes"][1] / 2**30)
    hbm_bandwidth_tb_per_s: float = Field(gt=RANGES["hbm_bw_bytes_per_s"][0] / 1e12,
                                          lt=RANGES["hbm_bw_bytes_per_s"][1] / 1e12)
    tdp_w: float = Field(gt=RANGES["tdp_w"][0], lt=RANGES["tdp_w"][1])
    fused_attention: bool = True     # FlashAttention-class kernels run here (false: V100, sm70)


class _Link(_Strict):
    name: str = ""
    # How the GPUs of a node are wired (intra_node only): "switch" (NVSwitch: every GPU reaches any peer at its
    # full bandwidth) or "mesh" (a direct link to every other GPU, MI300X: a peer gets 1/(n-1) of it).
    topology: Literal[TOPOLOGIES] = "switch"
    bandwidth_gb_per_s_per_direction: float | None = Field(default=None, gt=RANGES["intra_bw_bytes_per_s"][0] / 1e9,
                                                           lt=RANGES["intra_bw_bytes_per_s"][1] / 1e9)
    bandwidth_gbit_per_s_per_gpu_per_direction: float | None = Field(
        default=None, gt=bytes_to_gbit(RANGES["inter_bw_bytes_per_s"][0]),
        lt=bytes_to_gbit(RANGES["inter_bw_bytes_per_s"][1]))
    step_latency_us: float = Field(ge=0, lt=10_000)
    half_bandwidth_mb: float = Field(default=0.0, ge=0, lt=1e6)


class _Node(_Strict):
    gpus_per_node: int = Field(ge=1, le=1024)
    gpus_per_host: int | None = Field(default=None, ge=1, le=1024)   # allocation unit when smaller than the node
    intra_node: _Link
    inter_node: _Link
    collective_base_latency_us: float = Field(ge=0, lt=10_000)

    @model_validator(mode="after")
    def _host_divides_node(self) -> "_Node":
        if self.gpus_per_host is not None and self.gpus_per_node % self.gpus_per_host:
            raise ValueError(f"gpus_per_host ({self.gpus_per_host}) must divide gpus_per_node ({self.gpus_per_node})")
        if self.inter_node.topology != "switch":
            raise ValueError("inter_node.topology: only the intra-node fabric can be a mesh; expected switch")
        # Each link takes its bandwidth in its own unit; the other link's key would be silently unused.
        if self.intra_node.bandwidth_gbit_per_s_per_gpu_per_direction is not None:
            raise ValueError("intra_node.bandwidth_gbit_per_s_per_gpu_per_direction: the in-node fabric is given in "
                             "GB/s per GPU per direction; expected intra_node.bandwidth_gb_per_s_per_direction")
        if self.inter_node.bandwidth_gb_per_s_per_direction is not None:
            raise ValueError("inter_node.bandwidth_gb_per_s_per_direction: the network is given as the NIC speed in "
                             "Gbit/s per GPU per direction; expected "
                             "inter_node.bandwidth_gbit_per_s_per_gpu_per_direction")
        if self.intra_node.bandwidth_gb_per_s_per_direction is None:
            raise ValueError("intra_node.bandwidth_gb_per_s_per_direction: required field is missing")
        if self.inter_node.bandwidth_gbit_per_s_per_gpu_per_direction is None:
            raise ValueError("inter_node.bandwidth_gbit_per_s_per_gpu_per_direction: required field is missing")
        return self


class _Efficiency(_Strict):
    gemm_fraction_of_peak: float = Field(gt=0, le=1)
    hbm_fraction_of_peak: float = Field(gt=0, le=1)
    intra_node_busbw_fraction: float = Field(gt=0, le=1)
    inter_node_busbw_fraction: float = Field(gt=0, le=1)
    kernel_overhead_us: float = Field(default=0.0, ge=0, lt=1000)
    gemm_k_half: float = Field(default=0.0, ge=0, lt=1e6)
    attention_fraction_of_peak: float | None = Field(default=None, gt=0, le=1)
    # FlashAttention-3-class kernels (Hopper's FA3, cuDNN's fused attention) relative to the FA2 class; none: not
    # measured on this hardware, so flash_attention_gen 3 is refused
    attention_gen3_relative_rate: float | None = Field(default=None, ge=1, le=4)
    overlap_slowdown_intra_node: float = Field(default=0.0, ge=0, le=1)
    overlap_slowdown_inter_node: float = Field(default=0.0, ge=0, le=1)


class _Memory(_Strict):
    framework_overhead_gib: float = Field(ge=0, lt=64)


class HardwareFile(_Strict):
    """Schema of a hardware YAML file (see hardware_specs/h100-sxm.yaml for the annotated template)."""

    name: str = Field(min_length=1)
    description: str = ""
    aliases: list[str] = []
    gpu: _Gpu
    node: _Node
    efficiency: _Efficiency
    memory: _Memory
    price_usd_per_gpu_hour: float | None = Field(default=None, gt=0, lt=1000)
    # Who charges that price (e.g. Lambda, AWS): prices of different providers are not like for like, and a
    # comparison that mixes them says so. Optional ("unspecified" when a price has none).
    price_provider: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _provider_of_a_price(self) -> "HardwareFile":
        if self.price_provider is not None and self.price_usd_per_gpu_hour is None:
            raise ValueError("price_provider names who charges price_usd_per_gpu_hour, which is not given")
        return self
