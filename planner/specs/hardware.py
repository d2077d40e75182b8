"""Hardware profiles: one YAML per system in `hardware_specs/`, validated into an immutable SI-unit spec.

The YAML uses human units named in its keys (GB/s, TFLOP/s, GiB), as its schema in `specs/hardware_file.py` states
them; everything inside the planner is SI (bytes, seconds, FLOP/s). These two modules are the only places that
convert between them.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from planner.checks import is_int, is_real
from planner.errors import PlannerError, library_api
from planner.specs._files import read_mapping, validate
from planner.specs.hardware_file import GIB, RANGES, TOPOLOGIES, HardwareFile, bytes_to_gbit, gbit_to_bytes

# --- the spec (inside: SI units) -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator system, SI units. Bandwidths are per GPU per direction."""

    name: str
    description: str
    peak_flops: float                       # dense 16-bit FLOP/s per GPU: bf16, or fp16 where there is no bf16
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    tdp_w: float
    gpus_per_node: int                      # GPUs sharing the NVLink-class fabric (the "node" of the collectives)
    intra_bw_bytes_per_s: float             # NVLink-class fabric, per GPU per direction (all its links)
    inter_bw_bytes_per_s: float             # NIC bandwidth per GPU per direction
    intra_step_latency_s: float             # alpha per ring step inside a node
    inter_step_latency_s: float             # alpha per ring step across nodes
    collective_base_latency_s: float        # fixed cost of launching one collective
    intra_half_bw_bytes: float              # bytes per call at which NVLink collectives reach half their busbw
    inter_half_bw_bytes: float              # the same for the cross-node step (0 in every bundled profile)
    gemm_efficiency: float                  # achievable fraction of peak on large GEMMs
    hbm_efficiency: float                   # achievable fraction of HBM bandwidth (memory-bound kernels)
    intra_busbw_efficiency: float           # measured NCCL busbw / link bandwidth inside a node
    inter_busbw_efficiency: float           # measured NCCL busbw / NIC bandwidth across nodes
    kernel_overhead_s: float                # fixed cost per kernel (launch, ramp-up, tail) on top of the roofline
    gemm_k_half: float                      # inner dimension at which a GEMM reaches half its large-K efficiency
    attention_efficiency: float             # achievable fraction of peak inside fused attention kernels
    overlap_slowdown_intra: float           # share of overlapped NVLink-collective time that still delays compute
    overlap_slowdown_inter: float           # the same for collectives that cross the network
    framework_overhead_bytes: float         # CUDA context, workspaces, NCCL buffers
    price_usd_per_gpu_hour: float | None
    peak_flops_by_dtype: tuple[tuple[str, float], ...] = ()
    gpus_per_host: int = 0                  # GPUs allocated together (0: a whole node); GB200 NVL72: a 4-GPU tray
    fused_attention: bool = True            # FlashAttention / fused attention kernels run here (Runtime.for_hardware)
    attention_gen3_rate: float | None = None  # FlashAttention-3-class kernels' rate over the FA2 class (None: none)
    mixed_precision: str = "bf16"           # 16-bit format of mixed precision: "fp16" (with loss scaling) on a GPU
                                            # without bf16, i.e. a profile with no bf16 peak (V100)
    intra_topology: str = "switch"          # "mesh": a direct link per peer, so k GPUs use k-1 of n-1 links
    price_provider: str = ""                # who charges price_usd_per_gpu_hour ("" when there is no price)
    domain_gpus: int = 0                    # the whole NVLink domain when a job sees a segment of it (for_job);
                                            # 0: gpus_per_node is the domain

    def __post_init__(self):
        """The file schema's physical rules, for a spec built or changed in Python (dataclasses.replace): positive
        finite rates and sizes, efficiencies in (0, 1], slowdowns in [0, 1]; the error names the field."""
        def bad(f, expected):
            raise PlannerError(f"hardware {self.name}: {f}", f"got {getattr(self, f)!r}, expected {expected}")

        for f in ("peak_flops", "hbm_bytes", "hbm_bw_bytes_per_s", "tdp_w", "intra_bw_bytes_per_s",
                  "inter_bw_bytes_per_s"):
            low, high = RANGES[f]
            if not (is_real(getattr(self, f)) and low < getattr(self, f) < high):
                bad(f, f"a number between {low:g} and {high:g} (SI units: bytes, bytes/s, FLOP/s, W)")
        for f in ("intra_step_latency_s", "inter_step_latency_s", "collective_base_latency_s", "intra_half_bw_bytes",
                  "inter_half_bw_bytes", "kernel_overhead_s", "gemm_k_half", "framework_overhead_bytes"):
            if not (is_real(getattr(self, f)) and 0 <= getattr(self, f) < math.inf):
                bad(f, "a finite number >= 0")
        for f in ("gemm_efficiency", "hbm_efficiency", "intra_busbw_efficiency", "inter_busbw_efficiency",
                  "attention_efficiency"):
            if not (is_real(getattr(self, f)) and 0 < getattr(self, f) <= 1):
                bad(f, "a fraction in (0, 1]")
        for f in ("overlap_slowdown_intra", "overlap_slowdown_inter"):
            if not (is_real(getattr(self, f)) and 0 <= getattr(self, f) <= 1):
                bad(f, "a fraction in [0, 1]")
        if not is_int(self.gpus_per_node) or self.gpus_per_node < 1:
            bad("gpus_per_node", "a positive integer")
        if self.intra_topology not in TOPOLOGIES:
            bad("intra_topology", "switch or mesh")
        price = self.price_usd_per_gpu_hour
        if price is not None and not (is_real(price) and 0 < price < math.inf):
            bad("price_usd_per_gpu_hour", "None or a positive finite number")
        if not is_int(self.gpus_per_host) or self.gpus_per_host < 0 or (
                self.gpus_per_host and self.gpus_per_node % self.gpus_per_host):
            bad("gpus_per_host", f"0 (a whole node) or a divisor of gpus_per_node ({self.gpus_per_node})")
        if self.mixed_precision not in ("bf16", "fp16"):
            bad("mixed_precision", "bf16 or fp16")
        if not is_int(self.domain_gpus) or not (self.domain_gpus == 0 or self.domain_gpus >= self.gpus_per_node):
            bad("domain_gpus", f"0 or at least gpus_per_node ({self.gpus_per_node})")

    def for_job(self, gpus: int) -> "HardwareSpec":
        """The node as a job of `gpus` GPUs sees it: the GPUs its consecutive ranks fill before the network.

        Where hosts are smaller than the NVLink domain (GB200 NVL72: 4-GPU trays in a 72-GPU domain), Slurm's
        topology/block plugin packs a job into as few domains as it can, and its --segment option splits it into
        equal groups of hosts, each inside one domain; NVIDIA recommends 16-tray (64-GPU) segments for jobs of 128
        GPUs or more (NVIDIA technical blog, "Achieving peak system and workload efficiency on NVIDIA GB200 NVL72
        with Slurm block scheduling"). So a job larger than a domain that is a multiple of that segment (the largest
        power-of-two number of hosts a domain holds) but not of the domain fills 64-GPU segments: 128, 256, 512
        GB200s; any other job fills whole domains in order (144 = 2 x 72; 100 = 72 + 28, its groups that straddle
        the edge priced as placed). A job inside one domain fills it."""
        domain = self.domain_gpus or self.gpus_per_node
        host = self.gpus_per_host
        node = domain
        if host and host < domain and is_int(gpus) and gpus > domain and gpus % domain:
            segment = host * 2 ** int(math.log2(domain // host))         # 16 trays of 4 in a 72-GPU domain
            if gpus % segment == 0:
                node = segment
        if node == self.gpus_per_node:
            return self
        return replace(self, gpus_per_node=node, domain_gpus=domain)

    def with_network(self, nics_per_node: int, nic_bytes_per_s: float) -> "HardwareSpec":
        """This GPU and node on another cluster's network: `nics_per_node` NICs of `nic_bytes_per_s` each per
        direction in each server, shared by its GPUs (a non-DGX build: GPT-NeoX-20B's servers had 4 HDR HCAs for
        8 GPUs, BLOOM's Jean Zay nodes 4 Omni-Path links). A server is the allocation unit: the node, or the host
        where the profile's NVLink domain spans several (a GB200 compute tray of 4 GPUs). The network's latencies
        and busbw fraction stay the profile's. Collectives see a node's aggregate (NICs x rate) as they do on the
        profile's one-NIC-per-GPU nodes; point-to-point traffic gets each GPU's even share, as when every GPU of a
        server sends at once (pipeline stages do)."""
        field = f"hardware {self.name}: network"
        if not is_int(nics_per_node) or nics_per_node < 1:
            raise PlannerError(f"{field}.nics_per_node", f"got {nics_per_node!r}, expected a positive integer")
        if not is_real(nic_bytes_per_s) or not 0 < nic_bytes_per_s < math.inf:
            raise PlannerError(f"{field}.nic_bytes_per_s", f"got {nic_bytes_per_s!r}, expected a positive rate in "
                                                           "bytes/s")
        per_gpu = nics_per_node * nic_bytes_per_s / self.alloc_gpus
        low, high = RANGES["inter_bw_bytes_per_s"]
        if not low < per_gpu < high:
            nics = f"{nics_per_node} NIC{'s' if nics_per_node != 1 else ''}"
            def gbit(bytes_per_s):
                return f"{bytes_to_gbit(bytes_per_s):g}"

            give = "gives" if nics_per_node == 1 else "give"
            raise PlannerError(field, f"{nics} of {gbit(nic_bytes_per_s)} Gb/s for {self.alloc_gpus} GPUs per "
                                      f"server {give} {gbit(per_gpu)} Gb/s per GPU, expected more than {gbit(low)} "
                                      f"and less than {gbit(high)}")
        return replace(self, inter_bw_bytes_per_s=per_gpu)

    @property
    def alloc_gpus(self) -> int:
        """The granularity in which GPUs are allocated: a host (compute tray) when the profile says so, else a node."""
        return self.gpus_per_host or self.gpus_per_node

    @classmethod
    def from_file(cls, f: HardwareFile) -> "HardwareSpec":
        intra, inter = f.node.intra_node, f.node.inter_node      # each with its own bandwidth key (_Node checks)
        peaks = tuple((k, v * 1e12) for k, v in f.gpu.peak_tflops_dense.model_dump().items() if v is not None)
        return cls(
            name=f.name,
            description=f.description,
            peak_flops=(f.gpu.peak_tflops_dense.bf16 or f.gpu.peak_tflops_dense.fp16) * 1e12,
            hbm_bytes=f.gpu.hbm_capacity_gib * GIB,
            hbm_bw_bytes_per_s=f.gpu.hbm_bandwidth_tb_per_s * 1e12,
            tdp_w=f.gpu.tdp_w,
            gpus_per_node=f.node.gpus_per_node,
            gpus_per_host=f.node.gpus_per_host or 0,
            intra_bw_bytes_per_s=intra.bandwidth_gb_per_s_per_direction * 1e9,
            inter_bw_bytes_per_s=gbit_to_bytes(inter.bandwidth_gbit_per_s_per_gpu_per_direction),
            intra_step_latency_s=intra.step_latency_us * 1e-6,
            inter_step_latency_s=inter.step_latency_us * 1e-6,
            collective_base_latency_s=f.node.collective_base_latency_us * 1e-6,
            intra_half_bw_bytes=intra.half_bandwidth_mb * 1e6,
            inter_half_bw_bytes=inter.half_bandwidth_mb * 1e6,
            gemm_efficiency=f.efficiency.gemm_fraction_of_peak,
            hbm_efficiency=f.efficiency.hbm_fraction_of_peak,
            intra_busbw_efficiency=f.efficiency.intra_node_busbw_fraction,
            inter_busbw_efficiency=f.efficiency.inter_node_busbw_fraction,
            kernel_overhead_s=f.efficiency.kernel_overhead_us * 1e-6,
            gemm_k_half=f.efficiency.gemm_k_half,
            attention_efficiency=f.efficiency.attention_fraction_of_peak or f.efficiency.gemm_fraction_of_peak,
            overlap_slowdown_intra=f.efficiency.overlap_slowdown_intra_node,
            overlap_slowdown_inter=f.efficiency.overlap_slowdown_inter_node,
            framework_overhead_bytes=f.memory.framework_overhead_gib * GIB,
            price_usd_per_gpu_hour=f.price_usd_per_gpu_hour,
            peak_flops_by_dtype=peaks,
            fused_attention=f.gpu.fused_attention,
            attention_gen3_rate=f.efficiency.attention_gen3_relative_rate,
            mixed_precision="bf16" if f.gpu.peak_tflops_dense.bf16 is not None else "fp16",
            intra_topology=intra.topology,
            price_provider=f.price_provider or ("unspecified" if f.price_usd_per_gpu_hour is not None else ""),
        )


# --- lookup -------------------------------------------------------------------------------------------------------

def hardware_dir() -> Path:
    """The bundled profiles: inside the installed package, or the top-level folder of a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "hardware_specs", here.parent / "hardware_specs"):
        if candidate.is_dir():
            return candidate
    raise PlannerError("hardware", f"bundled hardware_specs/ not found next to {here}")  # a broken install


@lru_cache(maxsize=None)
def _bundled() -> dict[str, Path]:
    """Name and alias -> bundled file. Names only ever resolve to files in this index, never to arbitrary paths."""
    index: dict[str, Path] = {}
    for path in sorted(hardware_dir().glob("*.yaml")):
        data = read_mapping(path, f"hardware file {path.name}")
        index[path.stem] = path
        for alias in [data.get("name", path.stem), *(data.get("aliases") or [])]:
            index.setdefault(str(alias).lower(), path)
    return index


def bundled_names() -> frozenset[str]:
    """Every name and alias (lower case) that --hardware resolves to a bundled profile."""
    return frozenset(_bundled())


def hardware_aliases() -> dict[str, list[str]]:
    """Each bundled profile's name -> the other names --hardware takes for it (as `plan models` lists a preset's)."""
    by_path: dict[Path, list[str]] = {}
    for key, path in _bundled().items():
        by_path.setdefault(path, []).append(key)
    names = {path: load_hardware_file(path).name for path in by_path}
    return {names[path]: [k for k in keys if k != names[path].lower()] for path, keys in by_path.items()}


def list_hardware() -> list[HardwareSpec]:
    """All bundled profiles, one per file."""
    return [load_hardware_file(p) for p in sorted(set(_bundled().values()))]


def load_hardware_file(path: Path) -> HardwareSpec:
    """Load a profile; cached per file version (path, size, mtime), so an edited file is re-read."""
    try:
        st = Path(path).stat()
        version = (st.st_size, st.st_mtime_ns)
    except (OSError, ValueError):
        version = None                            # read_mapping reports the problem
    return _load_hardware_file(Path(path), version)


@lru_cache(maxsize=64)
def _load_hardware_file(path: Path, version) -> HardwareSpec:
    data = read_mapping(path, "--hardware")
    spec = HardwareSpec.from_file(validate(HardwareFile, data, f"hardware file {path.name}"))
    if path.resolve().parent != hardware_dir().resolve() and spec.name.lower() in _bundled():
        # a user's copy of a bundled profile that kept its name: say whose numbers these are (the path as given,
        # so two copies in different folders stay apart); a link to a bundled file is that file
        spec = replace(spec, name=f"{spec.name} ({path})")
    return spec


@library_api
def load_hardware(name_or_path: str | Path | HardwareSpec) -> HardwareSpec:
    """A bundled profile by name or alias (case-insensitive), or a path to a YAML file."""
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    text = str(name_or_path).strip()
    if text.endswith((".yaml", ".yml")) or "/" in text or "\\" in text:
        return load_hardware_file(Path(text).expanduser())
    key = text.lower()
    direct = hardware_dir() / f"{key}.yaml"
    if key and not key.startswith(".") and direct.is_file():   # a bundled file's own name: no need to index them all
        return load_hardware_file(direct)
    index = _bundled()
    if key in index:
        return load_hardware_file(index[key])
    close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    names = ", ".join(sorted(p.stem for p in set(index.values())))
    raise PlannerError("--hardware", f"unknown hardware {text!r}{hint} (built-in: {names}; or a path to a YAML file)")


def parse_hardware_list(text: str) -> list[str]:
    """--hardware a,b: the profile names to compare, each once (an empty or repeated entry is a mistake)."""
    names = [h.strip() for h in str(text).split(",")]
    if "" in names:
        raise PlannerError("--hardware", f"got {text!r}, expected profile names separated by commas, none empty")
    seen = [n.lower() for n in names]
    repeated = next((n for i, n in enumerate(names) if seen[i] in seen[:i]), None)
    if repeated is not None:
        raise PlannerError("--hardware", f"got {text!r}: {repeated!r} is listed twice; expected each profile once")
    return names
