"""Pipeline parallelism: stage split, bubble and in-flight micro-batches (formulas.md §3.3, §5, §7).

p pipeline stages, v virtual stages (model chunks) per rank, m micro-batches per pipeline per step.
All functions take scalars or numpy arrays and broadcast.
"""

from __future__ import annotations

import numpy as np


def stage_split_valid(layers, pp):
    """Layers split evenly (L % p == 0), or with Megatron's embedding/loss accounting: (L + 2) % p == 0 with both
    `--account-for-embedding-in-pipeline-split` and `--account-for-loss-in-pipeline-split` (the first and last stage
    each count the embedding or the loss as one layer; Llama-3 405B's 126 = 16·8 − 2), or (L + 1) % p == 0 with the
    loss flag alone (validate_args adds one layer per flag; torchtitan's `*_stage_less_layers` the same)."""
    layers, pp = np.asarray(layers), np.asarray(pp)
    return (pp <= layers) & ((layers % pp == 0) | ((layers + 2) % pp == 0) | ((layers + 1) % pp == 0))


def stage_layers(layers, pp):
    """(layers on the first stage, on a middle stage, on the last stage). Even split: all L/p; else (L+2)/p − 1 on
    the two edge stages and (L+2)/p in the middle (both accounting flags); else (L+1)/p everywhere but the last
    stage, which counts the loss as a layer and has one fewer (the loss flag alone: the stage that also computes
    the logits is the one to lighten)."""
    layers, pp = np.asarray(layers), np.asarray(pp)
    even, both = layers % pp == 0, (layers + 2) % pp == 0
    mid = np.where(even, layers // pp, np.where(both, (layers + 2) // pp, (layers + 1) // pp))
    last = np.where(even, mid, mid - 1)
    first = np.where(even | ~both, mid, mid - 1)
    return first, mid, last


def chunk_layers(layers, pp, vpp=1):
    """Layers per pipeline chunk (a middle stage's layers over its vpp virtual chunks, at least 1): the unit of
    Megatron's block recompute (--recompute-num-layers counts layers per chunk)."""
    return np.maximum(stage_layers(layers, pp)[1] // np.maximum(np.asarray(vpp), 1), 1)


def block_recompute_share(layers_on_stage, k, chunk, vpp=1):
    """Share of a stage's layers Megatron's block method (--recompute-num-layers k) recomputes: the first min(k,
    chunk) of each of its vpp chunks; an edge stage one layer short (the embedding/loss accounting) has one chunk
    of chunk − 1 layers, of which min(k, chunk − 1). k = 0 means every layer."""
    n, k, chunk, v = (np.asarray(x) for x in (layers_on_stage, k, chunk, vpp))
    short = np.clip(v * chunk - n, 0, 1)
    done = (v - short) * np.minimum(k, chunk) + short * np.minimum(k, np.maximum(chunk - 1, 0))
    return np.where(k > 0, done / np.maximum(n, 1), 1.0)


def model_recompute_share(layers, pp, k, vpp=1):
    """Share of all the model's layers the block method recomputes, stage by stage (block_recompute_share): the
    HFU numerator's recompute term. A first and a last stage (one stage when pp = 1) and pp − 2 middle ones."""
    p = np.asarray(pp)
    first_n, mid_n, last_n = stage_layers(layers, p)
    chunk = chunk_layers(layers, p, vpp)
    lasts, mids = np.where(p == 1, 0, 1), np.maximum(p - 2, 0)
    done = (first_n * block_recompute_share(first_n, k, chunk, vpp)
            + lasts * last_n * block_recompute_share(last_n, k, chunk, vpp)
            + mids * mid_n * block_recompute_share(mid_n, k, chunk, vpp))
    return done / np.maximum(first_n + lasts * last_n + mids * mid_n, 1)


def every_nth_layers(rank_layers, n):
    """Layers of a rank that checkpointing every n-th block recomputes (torchtitan's layer SAC: one block counter
    per process, over all of the rank's pipeline chunks, checkpointing when count % n == 0): ⌊layers/n⌋, which is
    0 when n exceeds the rank's layers (the counter never reaches n)."""
    return np.asarray(rank_layers) // np.asarray(n)


def layers_per_stage(layers, pp):
    """Layers on the (first, middle, last) stage, the three the memory and time maxima look at. One stage holds
    all L (the split is even); two stages have no middle one, so its entry repeats the first."""
    first, mid, last = stage_layers(layers, pp)
    return first, np.where(np.asarray(pp) > 2, mid, first), last


def bubble_ratio(pp, num_microbatches, vpp=1):
    """Idle time relative to the ideal (bubble-free) time: (p − 1)/(v·m).

    Narayanan et al. 2021 §2.2.1 (1F1B/GPipe: (p−1)/m) and §2.2.2 (interleaved: (p−1)/(v·m)).
    """
    return (np.asarray(pp) - 1) / (np.asarray(vpp) * np.asarray(num_microbatches))


def bubble_fraction(pp, num_microbatches, vpp=1):
    """Share of the step spent in the bubble: r/(1 + r) with r = (p−1)/(v·m); in [0, 1)."""
    r = bubble_ratio(pp, num_microbatches, vpp)
    return r / (1.0 + r)


def first_chunk_in_flight(pp, num_microbatches, vpp=1):
    """Micro-batches whose inputs the first model chunk of the first stage (the one with the embedding) holds at its
    peak: min(m, p) under 1F1B; interleaved, Megatron's warm-up of 2(p − 1) + (v − 1)·p chunk forwards runs chunk 0
    on micro-batches 0..p−1 and again on p..2p−1 before chunk 0's first backward (chunks take turns in groups of
    p): min(m, 2p)."""
    pp, m, v = (np.asarray(x) for x in (pp, num_microbatches, vpp))
    return np.minimum(m, np.where(v > 1, 2 * pp, pp))


def in_flight_layers(layers_on_stage, stage, pp, num_microbatches, vpp=1):
    """Layer-micro-batches whose activations stage `stage` (0-based) holds at its peak.

    1F1B (v = 1): min(m, p − r) micro-batches × layers (Korthikanti et al. 2022 §4, pipeline subsection: stage 0
    holds p micro-batches, i.e. L layers' worth). Interleaved (v > 1): Megatron's warm-up of
    2(p − r − 1) + (v − 1)·p chunk forwards, +1 in steady state, each chunk holding layers/v; for r = 0 this is
    L·(1 + (p − 1)/(p·v)), Korthikanti's interleaving penalty. Capped at all m·v chunks of the step.
    """
    stage, pp, m, v = (np.asarray(x) for x in (stage, pp, num_microbatches, vpp))
    plain = np.minimum(m, pp - stage) * layers_on_stage
    chunks = np.minimum(m * v, 2 * (pp - stage - 1) + (v - 1) * pp + 1)
    return np.where(v > 1, chunks * layers_on_stage / v, plain)
