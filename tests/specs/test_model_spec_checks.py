"""Specs built or changed in Python are checked as files are: a bad field is a PlannerError naming it, never a NaN
row ranked as if it fit (a search on heads=0 returned 2,801 'fitting' rows with NaN step times)."""

import dataclasses

import pytest

import planner
from planner.errors import PlannerError


@pytest.mark.parametrize("change, field", [(dict(heads=0), "heads"), (dict(vocab=-5), "vocab"),
                                           (dict(layers=2.5), "layers"), (dict(gated_mlp="yes"), "gated_mlp"),
                                           (dict(kv_heads=3), "kv_heads"), (dict(norm="batchnorm"), "norm"),
                                           (dict(sliding_window=0), "sliding_window")])
def test_model_spec_fields_are_checked(change, field):
    with pytest.raises(PlannerError) as info:
        dataclasses.replace(planner.load_model("8b"), **change)
    assert info.value.field.endswith(f": {field}")


@pytest.mark.parametrize("change, field", [(dict(intra_bw_bytes_per_s=-1.0), "intra_bw_bytes_per_s"),
                                           (dict(gemm_efficiency=1.5), "gemm_efficiency"),
                                           (dict(overlap_slowdown_inter=float("nan")), "overlap_slowdown_inter"),
                                           (dict(peak_flops=float("inf")), "peak_flops"),
                                           (dict(gpus_per_node=0), "gpus_per_node"),
                                           (dict(intra_topology="torus"), "intra_topology"),
                                           (dict(price_usd_per_gpu_hour=-1.0), "price_usd_per_gpu_hour"),
                                           (dict(gpus_per_host=3), "gpus_per_host"),
                                           (dict(mixed_precision="fp8"), "mixed_precision"),
                                           # units: HBM in GiB where bytes are expected, NIC in Gbit/s as bytes/s
                                           (dict(hbm_bytes=80), "hbm_bytes"),
                                           (dict(inter_bw_bytes_per_s=400.0), "inter_bw_bytes_per_s"),
                                           (dict(peak_flops=989.4), "peak_flops")])
def test_hardware_spec_fields_are_checked(change, field):
    with pytest.raises(PlannerError) as info:
        dataclasses.replace(planner.load_hardware("h100-sxm"), **change)
    assert info.value.field.endswith(f": {field}")


def test_every_bundled_spec_passes_its_checks():
    for f in planner.list_models():                  # raises PlannerError if a preset breaks a check
        assert planner.load_model(f.name).name == f.name
    for h in planner.list_hardware():
        assert planner.load_hardware(h.name).name == h.name


def test_readme_model_file_section_names_every_field():
    """README "Model files" lists every field a model file may hold, and its YAML block is a valid model file."""
    import re
    from pathlib import Path

    import yaml

    from planner.specs._files import validate
    from planner.specs.model import ModelFile
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("### Model files", 1)[1].split("\n### ", 1)[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    fields = set(ModelFile.model_fields)
    assert fields <= set(re.findall(r"[a-z_]+", block)), fields - set(re.findall(r"[a-z_]+", block))
    validate(ModelFile, yaml.safe_load(block), "README").to_spec()      # its keys are fields, its values valid
