"""Hardware profiles: bundled files load, peaks match hardware.md, units are SI, bad files are rejected.

Expected numbers come from /work/shared/reference/hardware.md (§1 dense BF16 table, §2 link bandwidths) and the
unit conventions in the YAML key names (GB = 1e9 B, Gbit = 1e9 bit, GiB = 2^30 B, TFLOP/s = 1e12 FLOP/s).
"""

import math
from dataclasses import replace

import pytest
from helpers import rel

from planner.errors import PlannerError
from planner.specs.hardware import hardware_dir, list_hardware, load_hardware

GIB = 2**30


def test_every_bundled_profile_loads_and_includes_the_main_parts():
    profiles = list_hardware()
    names = {hw.name for hw in profiles}
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x"} <= names
    assert len(profiles) == len(list(hardware_dir().glob("*.yaml")))  # one spec per file


@pytest.mark.parametrize("name, dense_bf16_tflops", [
    # hardware.md §1 table, dense BF16 column (NVIDIA/AMD sparse marketing figures halved).
    ("a100-40gb", 312.0),
    ("a100-80gb", 312.0),
    ("h100-sxm", 989.4),
    ("h200-sxm", 989.4),
    ("b200", 2250.0),
    ("gb200", 2500.0),
    ("mi300x", 1307.4),
])
def test_dense_bf16_peak_matches_hardware_md(name, dense_bf16_tflops):
    hw = load_hardware(name)
    assert rel(hw.peak_flops, dense_bf16_tflops * 1e12) < 1e-12


def test_h100_units_are_si():
    hw = load_hardware("h100-sxm")
    assert rel(hw.peak_flops, 9.894e14) < 1e-12                 # 989.4 TFLOP/s
    assert rel(hw.intra_bw_bytes_per_s, 450e9) < 1e-12          # NVLink 4: 900 GB/s bidirectional / 2 (hardware.md §2)
    assert rel(hw.inter_bw_bytes_per_s, 400e9 / 8) < 1e-12      # one NDR 400 Gbit/s NIC per GPU = 50 GB/s
    assert rel(hw.hbm_bw_bytes_per_s, 3.35e12) < 1e-12          # 3.35 TB/s HBM3
    assert rel(hw.hbm_bytes, 79.65 * GIB) < 1e-12               # 81559 MiB reported by nvidia-smi (hardware.md §0)
    assert hw.gpus_per_node == 8
    assert rel(hw.intra_step_latency_s, 1.9e-6) < 1e-12         # 1.9 µs in the YAML
    assert rel(hw.collective_base_latency_s, 14e-6) < 1e-12
    assert rel(hw.framework_overhead_bytes, 2 * GIB) < 1e-12


def test_a100_40gb_units_are_si():
    hw = load_hardware("a100-40gb")
    assert rel(hw.intra_bw_bytes_per_s, 300e9) < 1e-12          # 600 GB/s bidirectional / 2
    assert rel(hw.inter_bw_bytes_per_s, 200e9 / 8) < 1e-12      # HDR 200 Gbit/s
    assert rel(hw.hbm_bw_bytes_per_s, 1.555e12) < 1e-12


def test_aliases_and_case():
    assert load_hardware("H100") == load_hardware("h100-sxm") == load_hardware("dgx-h100")


def test_unknown_hardware_raises_with_suggestion():
    with pytest.raises(PlannerError) as info:
        load_hardware("h100-sxn")
    assert isinstance(info.value, ValueError)
    assert "did you mean" in str(info.value) and "h100-sxm" in str(info.value)


# --- user YAML files -----------------------------------------------------------------------------------------------

def h100_text():
    return (hardware_dir() / "h100-sxm.yaml").read_text()


def test_user_yaml_path_loads_with_changed_number(tmp_path):
    text = h100_text()
    assert "bf16: 989.4" in text and "bandwidth_gb_per_s_per_direction: 450" in text
    path = tmp_path / "my-h100.yaml"
    path.write_text(text.replace("bf16: 989.4", "bf16: 500").replace("name: h100-sxm", "name: my-h100")
                    .replace("bandwidth_gb_per_s_per_direction: 450", "bandwidth_gb_per_s_per_direction: 225"))
    hw = load_hardware(str(path))
    assert hw.name == "my-h100"
    assert rel(hw.peak_flops, 500e12) < 1e-12
    assert rel(hw.intra_bw_bytes_per_s, 225e9) < 1e-12
    assert rel(hw.inter_bw_bytes_per_s, 50e9) < 1e-12  # unchanged


def test_edited_hardware_yaml_is_re_read(tmp_path):
    """The profile cache is keyed by the file's version: an edit takes effect without a restart."""
    path = tmp_path / "my-hw.yaml"
    path.write_text(h100_text())
    assert rel(load_hardware(str(path)).peak_flops, 989.4e12) < 1e-12
    path.write_text(h100_text().replace("bf16: 989.4", "bf16: 500"))
    assert rel(load_hardware(str(path)).peak_flops, 500e12) < 1e-12
    path.write_text(h100_text().replace("bf16: 989.4", "bf16: -1"))
    with pytest.raises(PlannerError, match="bf16"):
        load_hardware(str(path))


@pytest.mark.parametrize("old, new, field", [
    ("memory:\n", "memory:\n  typo_field: 1\n", "typo_field"),                                  # unknown field
    ("bandwidth_gb_per_s_per_direction: 450", "bandwidth_gb_per_s_per_direction: -450",
     "bandwidth_gb_per_s_per_direction"),                                                        # negative bandwidth
    ("hbm_capacity_gib: 79.65", "hbm_capacity_gib: 85899345920", "hbm_capacity_gib"),           # 80 GiB in bytes
    ("bf16: 989.4", "bf16: 9.894e14", "bf16"),                                                   # FLOP/s not TFLOP/s
    ("gpus_per_node: 8\n", "gpus_per_node: 8\n  gpus_per_host: 3\n", "gpus_per_host"),       # host must divide node
    # strict types, like model files: no bool -> int, str -> number or float -> int coercion
    ("gpus_per_node: 8\n", "gpus_per_node: true\n", "node.gpus_per_node"),                     # was 1 GPU per node
    ("gpus_per_node: 8\n", "gpus_per_node: 8.0\n", "node.gpus_per_node"),
    ("tdp_w: 700", "tdp_w: '700'", "gpu.tdp_w"),
    ("gemm_fraction_of_peak: 0.56", "gemm_fraction_of_peak: '0.56'", "efficiency.gemm_fraction_of_peak"),
    # each link takes its bandwidth in its own unit: the other link's key was silently unused
    ("bandwidth_gbit_per_s_per_gpu_per_direction: 400", "bandwidth_gbit_per_s_per_gpu_per_direction: 400\n"
     "    bandwidth_gb_per_s_per_direction: 5", "expected inter_node.bandwidth_gbit_per_s_per_gpu_per_direction"),
    ("bandwidth_gbit_per_s_per_gpu_per_direction: 400", "bandwidth_gb_per_s_per_direction: 50",
     "expected inter_node.bandwidth_gbit_per_s_per_gpu_per_direction"),
    ("bandwidth_gbit_per_s_per_gpu_per_direction: 400\n", "",
     "bad.yaml: node: inter_node.bandwidth_gbit_per_s_per_gpu_per_direction: required field is missing"),
])
def test_bad_user_yaml_raises_naming_the_field(tmp_path, old, new, field):
    text = h100_text()
    assert old in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(PlannerError) as info:
        load_hardware(str(path))
    assert field in str(info.value)


def test_top_level_unknown_field_raises(tmp_path):
    path = tmp_path / "bad2.yaml"
    path.write_text(h100_text() + "\nextra_thing: 3\n")
    with pytest.raises(PlannerError, match="extra_thing"):
        load_hardware(str(path))


def test_hardware_yaml_not_a_mapping_or_empty_raises(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(PlannerError, match="empty"):
        load_hardware(str(empty))
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(PlannerError, match="mapping"):
        load_hardware(str(lst))


def test_every_bundled_file_cites_a_source():
    files = sorted(hardware_dir().glob("*.yaml"))
    assert len(files) >= 6
    for path in files:
        assert "source" in path.read_text().lower(), path.name


def test_gb200_nvlink_domain_is_the_node():
    """GB200 NVL72: the planner's node is the 72-GPU NVLink domain (hardware.md §2), so a 64-rank DP group at stride 1
    stays on NVLink and TP may exceed 8 GPUs without crossing the network; the NIC is one CX-7 400 Gb/s per GPU.
    Ranks fill a domain in order: on 128 GPUs packed into domains the second 64-rank group would hold ranks
    64..127, 8 on the first domain and 56 on the next, and its 8 would pace its network phase like 8 nodes of 8. A
    job of 128 is placed in two 64-GPU segments instead (for_job), and every 64-rank group stays inside one."""
    from planner.cost.comm import group_nodes, group_span

    hw = load_hardware("gb200-nvl72")
    assert hw.gpus_per_node == 72 and rel(hw.intra_bw_bytes_per_s, 900e9) < 1e-12
    assert rel(hw.inter_bw_bytes_per_s, 400e9 / 8) < 1e-12
    assert tuple(int(x) for x in group_span(64, 1, hw.gpus_per_node, world=64)) == (64, 1)
    assert tuple(int(x) for x in group_span(64, 1, hw.gpus_per_node, world=128)) == (8, 8)
    assert group_nodes(64, 1, hw.gpus_per_node, 128) == (2, 8, 56)
    assert group_nodes(16, 8, hw.gpus_per_node, 128) == (2, 7, 9)          # ranks 0..120 or 7..127: 9 + 7
    seg = hw.for_job(128)
    assert seg.gpus_per_node == 64 and seg.domain_gpus == 72
    assert tuple(int(x) for x in group_span(64, 1, seg.gpus_per_node, world=128)) == (64, 1)
    # GPUs are allocated in 4-GPU trays, not whole 72-GPU domains; other profiles allocate whole nodes
    assert hw.alloc_gpus == 4 and load_hardware("h100-sxm").alloc_gpus == 8


@pytest.mark.parametrize("gpus, node", [
    (8, 72), (72, 72),            # inside one domain: the job fills it
    (128, 64), (256, 64), (512, 64), (1024, 64),     # multiples of NVIDIA's 16-tray segment: 64-GPU segments
    (144, 72), (1152, 72),        # multiples of the domain: whole domains
    (96, 72), (100, 72), (76, 72), (88, 72),         # anything else: whole domains in order, the rest on the next
])
def test_a_job_beyond_one_gb200_domain_fills_equal_segments(gpus, node):
    """HardwareSpec.for_job: 64-GPU segments (16 trays, a power of two that fits the 72-GPU domain) for a job that
    is a multiple of them and not of the domain, else whole domains in order. TP 8 tiles either. Profiles whose
    host is the node (H100: 8-GPU nodes) are unchanged, whatever the count."""
    hw = load_hardware("gb200")
    seg = hw.for_job(gpus)
    assert seg.gpus_per_node == node and node % 8 == 0
    assert (seg.domain_gpus, seg.alloc_gpus) == ((72, 4) if node != 72 else (0, 4))
    assert seg.for_job(gpus) is seg and seg.for_job(72).gpus_per_node == 72      # from the domain, not the segment
    h100 = load_hardware("h100-sxm")
    assert h100.for_job(gpus * 8) is h100


def test_smallest_fitting_gpu_count_steps_in_allocation_units():
    """405B does not fit on 32 GPUs; the suggested count is a whole number of allocation units: 4-GPU GB200 trays
    (so not the next 72-GPU domain), 8-GPU H100 nodes, and no smaller one fits."""
    from planner.search import run_search

    gb = run_search("405b", 32, hardware="gb200")
    h1 = run_search("405b", 32, hardware="h100-sxm")
    assert len(gb.table) == 0 and gb.min_gpus_that_fit % 4 == 0 and 32 < gb.min_gpus_that_fit < 72
    assert len(h1.table) == 0 and h1.min_gpus_that_fit % 8 == 0
    # it is the smallest: one unit fewer does not fit, even when the scan had to double past it (8 -> 128 on H100)
    for hw, count in (("gb200", gb.min_gpus_that_fit), ("h100-sxm", h1.min_gpus_that_fit)):
        unit = load_hardware(hw).alloc_gpus
        assert len(run_search("405b", count, hardware=hw).table) > 0
        assert len(run_search("405b", count - unit, hardware=hw, find_min_gpus=False).table) == 0
    assert run_search("405b", 8, hardware="h100-sxm").min_gpus_that_fit == h1.min_gpus_that_fit


def test_a_copy_of_a_bundled_profile_that_keeps_its_name_is_told_apart(tmp_path):
    """A user's edited h100-sxm.yaml with the name unchanged was reported as h100-sxm (and a comparison with the
    bundled one refused as 'the same profile'): its file name now goes with the name."""
    path = tmp_path / "h100copy.yaml"
    path.write_text(h100_text().replace("bandwidth_gbit_per_s_per_gpu_per_direction: 400",
                                        "bandwidth_gbit_per_s_per_gpu_per_direction: 100"))
    hw = load_hardware(str(path))
    assert hw.name == f"h100-sxm ({path})" and rel(hw.inter_bw_bytes_per_s, 12.5e9) < 1e-12
    assert load_hardware("h100-sxm").name == "h100-sxm"
    from planner import compare_hardware
    df = compare_hardware("8b", 64, ["h100-sxm", str(path)])
    assert set(df["hardware"]) == {"h100-sxm", f"h100-sxm ({path})"}
    # two copies with one file name in two folders stay apart; a link to the bundled file is the bundled profile
    (tmp_path / "b").mkdir()
    other = tmp_path / "b" / "h100copy.yaml"
    other.write_text(h100_text())
    assert len(set(compare_hardware("8b", 64, [str(path), str(other)])["hardware"])) == 2
    from planner.specs.hardware import hardware_dir
    link = tmp_path / "link.yaml"
    link.symlink_to(hardware_dir() / "h100-sxm.yaml")
    assert load_hardware(str(link)).name == "h100-sxm"


def test_another_clusters_network_is_its_nics_shared_by_the_node():
    """BLOOM's Jean Zay nodes: 4 Omni-Path links of 100 Gb/s for 8 A100s -> 4 x 12.5e9 / 8 = 6.25e9 bytes/s per GPU
    per direction (the DGX profile: 25e9); the GPU, NVLink and the network's latencies stay the profile's."""
    hw = load_hardware("a100-80gb")
    jz = hw.with_network(4, 100e9 / 8)
    assert jz.inter_bw_bytes_per_s == pytest.approx(6.25e9, rel=1e-12)
    assert hw.inter_bw_bytes_per_s == pytest.approx(25e9, rel=1e-12)
    assert replace(jz, inter_bw_bytes_per_s=hw.inter_bw_bytes_per_s) == hw
    assert hw.with_network(8, 200e9 / 8) == hw                  # the profile's own build changes nothing
    # GB200: a server is a 4-GPU compute tray with 4 NICs, not the 72-GPU NVLink domain the profile calls its node
    gb = load_hardware("gb200")
    assert gb.with_network(4, 400e9 / 8) == gb and gb.with_network(2, 400e9 / 8).inter_bw_bytes_per_s == 25e9


@pytest.mark.parametrize("nics, rate, field", [
    (0, 12.5e9, "nics_per_node"), (True, 12.5e9, "nics_per_node"), (2.0, 12.5e9, "nics_per_node"),
    (4, 0.0, "nic_bytes_per_s"), (4, math.inf, "nic_bytes_per_s"), (4, "100G", "nic_bytes_per_s"),
])
def test_a_bad_network_names_the_argument(nics, rate, field):
    with pytest.raises(PlannerError, match=field):
        load_hardware("a100-80gb").with_network(nics, rate)


def test_a_network_outside_the_physical_range_says_so_per_gpu():
    """Each number may be plausible and the share per GPU not: 1 NIC of 2 Gb/s for 8 GPUs is 0.25 Gb/s each."""
    with pytest.raises(PlannerError, match=r"network.*1 NIC of 2 Gb/s for 8 GPUs per server gives 0.25 Gb/s per "
                                           r"GPU, expected more than 1 and less than 100000"):
        load_hardware("a100-80gb").with_network(1, 2e9 / 8)
