"""Gemma 2/3's decoder block: norms after attention and the MLP too (post_norms), Gemma 2's logit soft-capping
(final_softcap), each priced term by term against the same model without it."""

from dataclasses import replace

import pytest

from planner.cost import compute, memory, params
from planner.errors import PlannerError
from planner.specs.hardware import load_hardware
from planner.specs.model import load_model

BASE = load_model("llama-3.1-8b")
POST = replace(BASE, post_norms=True)
S, B, H = 8192, 2, 4096


def test_post_norms_add_two_rmsnorms_of_h_per_layer():
    assert params.norm_params(POST) - params.norm_params(BASE) == 2 * H
    assert params.total_params(POST) - params.total_params(BASE) == 2 * H * 32


@pytest.mark.parametrize("tp, sp", [(1, False), (4, False), (4, True)])
def test_post_norms_keep_their_inputs_and_move_their_bytes(tp, sp):
    # each post-norm keeps its 16-bit input, the reduced attention or MLP output (b·s·h, split by SP only), and
    # reads and writes h per token
    share = tp if sp else 1
    for rc in ("none", "selective"):
        gap = (memory.activation_bytes_per_layer(POST, S, B, tp, sp, rc)
               - memory.activation_bytes_per_layer(BASE, S, B, tp, sp, rc))
        assert gap == pytest.approx(2 * 2 * S * B * H / share)
    gap = compute.layer_elementwise_bytes(POST, S, B, tp, sp) - compute.layer_elementwise_bytes(BASE, S, B, tp, sp)
    assert gap == pytest.approx(2 * (2 * 2 * H) * S * B / share)
    # full recompute keeps the layer input alone, with or without them
    assert (memory.activation_bytes_per_layer(POST, S, B, tp, sp, "full")
            == memory.activation_bytes_per_layer(BASE, S, B, tp, sp, "full"))


def test_final_softcap_keeps_the_tanh_output_and_moves_26_bytes_per_logit():
    capped = replace(BASE, final_softcap=True)
    logits = S * B * BASE.vocab / 2
    for fused in (True, False):
        gap = (memory.logits_bytes(capped, S, B, 2, True, fused_cross_entropy=fused)
               - memory.logits_bytes(BASE, S, B, 2, True, fused_cross_entropy=fused))
        assert gap == pytest.approx(2 * logits)
    hw = load_hardware("h100-sxm")
    gap = compute.logits_time_s(capped, S, B, 2, hw) - compute.logits_time_s(BASE, S, B, 2, hw)
    assert gap == pytest.approx(compute.elementwise_time_s(26 * logits, hw))


def test_post_norms_and_a_parallel_residual_are_refused_together():
    with pytest.raises(PlannerError) as info:
        replace(POST, parallel_residual=True)
    assert info.value.field.endswith("post_norms")
