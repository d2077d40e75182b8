"""A parallel residual (GPT-J, GPT-NeoX's use_parallel_residual / gpt_j_residual, PaLM): attention and MLP read the
same layer input and their outputs are summed before one TP reduction (GPT-NeoX megatron/model/transformer.py:
the row-parallel layers skip their reductions and the layer reduces the sum once). Worked by hand for a GPT-NeoX-20B
layer (h = 6144, s = 2048, b = 4) at TP 2 on one A100 node: NVLink 300 GB/s per direction x NCCL busbw 0.78 =
234 GB/s, collective base latency 14 us, 1.9 us per NVLink ring step (hardware_specs/a100-40gb.yaml)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.cost.compute import layer_elementwise_bytes, layer_kernel_count
from planner.cost.layer import layer_times
from planner.cost.memory import activation_bytes_per_layer
from planner.cost.params import total_params
from planner.specs.hardware import load_hardware
from planner.specs.model import ModelSpec
from planner.specs.strategy import Job, Runtime

SEQUENTIAL = ModelSpec(name="neox-20b-block", layers=44, hidden=6144, ffn_hidden=24576, heads=64, kv_heads=64,
                       vocab=50432, seq_len=2048, global_batch_tokens=2048 * 1536, head_dim=96, gated_mlp=False,
                       norm="layernorm", bias=True)
PARALLEL = dataclasses.replace(SEQUENTIAL, parallel_residual=True)
HW = load_hardware("a100-40gb")
JOB = Job(gpus=2, seq_len=2048, global_batch=8)
S = 2 * 2048 * 4 * 6144                       # one b·s·h bf16 activation: 100,663,296 bytes
W = 300e9 * 0.78
ALL_REDUCE = 2 * (1 / 2) * S / W + 14e-6 + 2 * 1.9e-6       # 2 ranks: 447.99 us
ALL_GATHER = (1 / 2) * S / W + 14e-6 + 1.9e-6               # (or reduce-scatter) 230.99 us
NO_OVERLAP = Runtime(tp_bwd_overlap=False, tp_comm_overlap=False)


def _tp(m, sp):
    cols = {"tp": np.array([2]), "micro_batch": np.array([4]), "sp": np.array([sp]), "recompute": np.array([0])}
    _, _, fwd, bwd = layer_times(m, HW, JOB, cols, NO_OVERLAP)
    return float(fwd[0]), float(bwd[0])


def test_one_forward_reduction_per_layer_by_hand():
    """Without SP: forward 2 all-reduces -> 1 (447.99 us, not 895.97); backward keeps both, since each column-parallel
    layer (QKV, MLP in) all-reduces its own input gradient."""
    assert ALL_REDUCE == pytest.approx(447.985e-6, rel=1e-5)
    seq, par = _tp(SEQUENTIAL, False), _tp(PARALLEL, False)
    assert seq[0] == pytest.approx(2 * ALL_REDUCE, rel=1e-9) and par[0] == pytest.approx(ALL_REDUCE, rel=1e-9)
    assert par[1] == pytest.approx(seq[1], rel=1e-12) == pytest.approx(2 * ALL_REDUCE, rel=1e-9)


def test_with_sequence_parallelism_by_hand():
    """With SP: forward each branch all-gathers its normed input and one reduce-scatter sums both outputs (3 of
    230.99 us, not 4); backward, one all-gather of that output's gradient instead of two, and the column-parallel
    layers' reduce-scatters and re-gathered inputs (4) as before."""
    seq, par = _tp(SEQUENTIAL, True), _tp(PARALLEL, True)
    assert seq[0] == pytest.approx(4 * ALL_GATHER, rel=1e-9) and par[0] == pytest.approx(3 * ALL_GATHER, rel=1e-9)
    assert seq[1] == pytest.approx(6 * ALL_GATHER, rel=1e-9) and par[1] == pytest.approx(5 * ALL_GATHER, rel=1e-9)


def test_the_second_norm_reads_the_kept_layer_input():
    """Activations: the second norm's input is the layer input the first already keeps, so one b·s·h tensor less
    (S bytes, replicated at TP 2 without SP; S/2 with SP). Element-wise traffic, GPT-NeoX's three kernels: bias-dropout
    of the attention output (read 1, write 1: 4h bytes per token), bias-dropout-add of the MLP output onto it (6h), the
    input added after the reduction (6h), for two residual adds of 6h: without SP 16h - 12h = 4h x 8,192 tokens =
    201,326,592 bytes more; with SP the first two stay whole (the ranks' partial sums, before the reduction):
    10h + 6h/2 against 12h/2, 7h more; one kernel more."""
    for sp, kept in ((False, S), (True, S / 2)):
        seq = float(activation_bytes_per_layer(SEQUENTIAL, 2048, 4, 2, sp, 0))
        par = float(activation_bytes_per_layer(PARALLEL, 2048, 4, 2, sp, 0))
        assert seq - par == pytest.approx(kept, rel=1e-12)
    more = float(layer_elementwise_bytes(PARALLEL, 2048, 4, 2, False)) - float(
        layer_elementwise_bytes(SEQUENTIAL, 2048, 4, 2, False))
    assert more == pytest.approx(4 * 6144 * 2048 * 4, rel=1e-12) == 201_326_592
    more_sp = float(layer_elementwise_bytes(PARALLEL, 2048, 4, 2, True)) - float(
        layer_elementwise_bytes(SEQUENTIAL, 2048, 4, 2, True))
    assert more_sp == pytest.approx(7 * 6144 * 2048 * 4, rel=1e-12)
    assert layer_kernel_count(PARALLEL, True) - layer_kernel_count(SEQUENTIAL, True) == 1


def test_same_weights_and_nothing_changes_at_tp_1():
    """The same parameters (two norms, as GPT-NeoX), and at TP 1 no collective to save."""
    assert total_params(PARALLEL) == total_params(SEQUENTIAL)
    one = {"tp": np.array([1]), "micro_batch": np.array([4]), "sp": np.array([False]), "recompute": np.array([0])}
    assert layer_times(PARALLEL, HW, JOB, one, NO_OVERLAP)[2:] == layer_times(SEQUENTIAL, HW, JOB, one, NO_OVERLAP)[2:]
