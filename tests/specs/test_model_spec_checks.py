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
