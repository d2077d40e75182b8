"""Pipeline parallelism: stage split, bubble and in-flight micro-batches (formulas.md §3.3, §5, §7).

p pipeline stages, v virtual stages (model chunks) per rank, m micro-batches per pipeline per step.
All functions take scalars or numpy arrays and broadcast.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from planner.checks import checked_array


def _edge_split(layers, pp):
    """(middle, edges): Megatron's uneven split (--decoder-first/last-pipeline-num-layers) as the planner sets it when
    none of the accounting splits applies: the p − 2 middle stages carry ⌈(L + 2)/p⌉ layers each (the accounting
    splits' load, the embedding and the loss counted as a layer) and the two edge stages share the E = L − (p − 2)·mid
    others, at most mid − 1 each."""
    mid = -(-(layers + 2) // np.maximum(pp, 1))
    return mid, layers - np.maximum(pp - 2, 0) * mid


def _split(layers, pp):
    """(kind, first, middle, last) for split_kind and stage_layers, elementwise."""
    p = np.maximum(pp, 1)
    edge_mid, edges = _edge_split(layers, pp)
    even = layers % p == 0
    both = ~even & ((layers + 2) % p == 0)          # the first kind that applies, in order
    loss = (layers + 1) % p == 0
    explicit = ~(even | both | loss)
    kind = np.where(even, 0, np.where(both, 1, np.where(loss, 2, np.where((pp >= 3) & (edges >= 2), 3, -1))))
    mid = np.where(explicit, edge_mid, (layers + np.where(even, 0, np.where(both, 2, 1))) // p)
    first = np.where(explicit, (edges + 1) // 2, mid - both)
    last = np.where(explicit, edges // 2, mid - ~even)
    return np.where(pp <= layers, kind, -1), first, mid, last


@lru_cache(maxsize=4096)
def _split_one(layers: int, pp: int) -> tuple[int, int, int, int]:
    return tuple(int(x) for x in _split(np.int64(layers), np.int64(pp)))


def _splits(layers, pp):
    """_split on scalars through a cache (the search asks per PP degree, hundreds of times); on a column of PP
    degrees for one model, once per degree up to the largest and gathered (a search's columns hold a few dozen
    distinct degrees in 10^5 rows); else elementwise."""
    if np.ndim(layers) == 0:
        if np.ndim(pp) == 0:
            return tuple(np.int64(x) for x in _split_one(int(layers), int(pp)))
        pp = np.asarray(pp)
        if pp.dtype.kind in "iu" and pp.size > 64 and 0 <= pp.min() and pp.max() < pp.size:
            return tuple(column[pp] for column in _split(layers, np.arange(pp.max() + 1)))
    return _split(np.asarray(layers), np.asarray(pp))


def split_kind(layers, pp):
    """How the L layers are split over p stages: 0 evenly (L/p), 1 with Megatron's embedding and loss accounting
    ((L + 2)/p slots: `--account-for-embedding-in-pipeline-split` and `--account-for-loss-in-pipeline-split`; the
    first and last stage each count the embedding or the loss as one layer; Llama-3 405B's 126 = 16·8 − 2), 2 with the
    loss accounting alone ((L + 1)/p; validate_args adds one layer per flag; torchtitan's `*_stage_less_layers` the
    same), 3 with explicit edge-stage sizes (`--decoder-first/last-pipeline-num-layers`: Megatron-Core TransformerConfig
    takes any first and last >= 1 whose remaining layers the p − 2 middle stages divide; _edge_split), -1 none."""
    return _splits(layers, pp)[0]


def stage_split_valid(layers, pp):
    """The layers split over the p stages in one of the ways split_kind names."""
    return split_kind(layers, pp) >= 0


def stage_layers(layers, pp):
    """(layers on the first stage, on a middle stage, on the last stage), by split_kind: all L/p; (L+2)/p − 1 on the
    two edge stages and (L+2)/p in the middle; (L+1)/p everywhere but the last stage, which counts the loss as a
    layer and has one fewer (the stage that also computes the logits is the one to lighten); explicit edges:
    ⌈E/2⌉ first and ⌊E/2⌋ last (_edge_split; the last stage, with the logits, again the lighter)."""
    return _splits(checked_array(layers, "layers", whole=True), checked_array(pp, "pp", whole=True))[1:]


def chunk_layers(layers, pp, vpp=1):
    """Layers per pipeline chunk (a middle stage's layers over its vpp virtual chunks, at least 1): the unit of
    Megatron's block recompute (--recompute-num-layers counts layers per chunk)."""
    return np.maximum(stage_layers(layers, pp)[1] // np.maximum(np.asarray(vpp), 1), 1)


def block_recompute_share(layers_on_stage, k, vpp=1):
    """Share of a stage's layers Megatron's block method (--recompute-num-layers k) recomputes: the first min(k, c)
    of each of its v chunks of c layers. A stage splits into chunks of ⌈n/v⌉ layers but for one, which has what is
    left: an edge stage one layer short (the embedding/loss accounting) has one chunk of ⌈n/v⌉ − 1, one with
    explicit edge sizes v equal ones (v divides them). k = 0 means every layer."""
    n, k, v = np.broadcast_arrays(*(np.asarray(x) for x in (layers_on_stage, k, vpp)))
    share = np.ones(n.shape)
    some = k > 0                    # few rows recompute only some layers: the integer divisions only for those
    if some.any():
        n, k, v = n[some], k[some], v[some]
        big = -(-n // np.maximum(v, 1))
        done = (v - 1) * np.minimum(k, big) + np.minimum(k, np.maximum(n - (v - 1) * big, 0))
        share[some] = done / np.maximum(n, 1)
    return share


def model_recompute_share(layers, pp, k, vpp=1):
    """Share of all the model's layers the block method recomputes, stage by stage (block_recompute_share): the
    HFU numerator's recompute term. A first and a last stage (one stage when pp = 1) and pp − 2 middle ones."""
    p = np.asarray(pp)
    first_n, mid_n, last_n = stage_layers(layers, p)
    lasts, mids = np.where(p == 1, 0, 1), np.maximum(p - 2, 0)
    done = (first_n * block_recompute_share(first_n, k, vpp)
            + lasts * last_n * block_recompute_share(last_n, k, vpp)
            + mids * mid_n * block_recompute_share(mid_n, k, vpp))
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
    p, v, m = (checked_array(x, k) for x, k in ((pp, "pp"), (vpp, "vpp"), (num_microbatches, "num_microbatches")))
    return (p - 1) / (v * m)


def bubble_fraction(pp, num_microbatches, vpp=1):
    """Share of the step spent in the bubble: r/(1 + r) with r = (p−1)/(v·m); in [0, 1)."""
    r = bubble_ratio(pp, num_microbatches, vpp)
    return r / (1.0 + r)


def interleave_group_size(pp, num_microbatches, vpp=2):
    """Micro-batches each model chunk runs in a row before the next chunk takes over (Megatron-Core's
    --microbatch-group-size-per-virtual-pipeline-stage N; pipeline_parallel/schedules.py): the smallest N in [p, m]
    with m mod N = 0 or m mod N >= p (a last group smaller than p would leave dependency bubbles). N = p (the
    default) when p divides m; N = m (one group) always qualifies, so any m >= p interleaves. torch's
    ScheduleInterleaved1F1B runs m / max(1, ⌊m/p⌋) per round, the same N wherever it accepts m. p where v = 1 (no
    interleaving) or m < p (no valid group)."""
    p, m, v = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (pp, num_microbatches, vpp)))
    n = p.copy()
    todo = np.flatnonzero((v > 1) & (m >= p) & (m % np.maximum(p, 1) != 0))
    cand = p.flat[todo]
    while todo.size:                # only rows p does not divide; ends by N = m at the latest
        cand = cand + 1
        rem = m.flat[todo] % cand
        done = (rem == 0) | (rem >= p.flat[todo])
        n.flat[todo[done]] = cand[done]
        todo, cand = todo[~done], cand[~done]
    return n


def last_group_size(pp, num_microbatches, vpp=2, group=None):
    """Micro-batches in the schedule's last group (get_schedule_table): N, or m mod N when that is not 0. `group`:
    N where the caller has it (interleave_group_size of the same arguments)."""
    n = interleave_group_size(pp, num_microbatches, vpp) if group is None else group
    rem = np.asarray(num_microbatches) % n
    return np.where(rem == 0, n, rem)


def first_chunk_in_flight(pp, num_microbatches, vpp=1, group=None):
    """Micro-batches whose inputs the first model chunk of the first stage (the one with the embedding) holds at its
    peak: min(m, p) under 1F1B. Interleaved, the first stage's warm-up runs 2(p − 1) + (v − 1)·N chunk forwards
    (N = interleave_group_size) and chunk 0's first backward comes (v − 1)·N backwards later, after
    X = 2(p − 1) + 2(v − 1)·N + 1 forwards, taken from the schedule in groups of N micro-batches per chunk, chunk 0
    first: chunk 0 ran ⌊X/(vN)⌋·N + min(X mod vN, N) of them (2p for N = p), at most m. `group`: N, as in
    last_group_size."""
    pp, m, v = (np.asarray(x) for x in (pp, num_microbatches, vpp))
    n = interleave_group_size(pp, m, v) if group is None else group
    x = 2 * (pp - 1) + 2 * (v - 1) * n + 1
    per_round = np.maximum(v * n, 1)
    chunk0 = x // per_round * n + np.minimum(x % per_round, n)
    return np.minimum(m, np.where(v > 1, chunk0, pp))


def in_flight_layers(layers_on_stage, stage, pp, num_microbatches, vpp=1, group=None):
    """Layer-micro-batches whose activations stage `stage` (0-based) holds at its peak.

    1F1B (v = 1): min(m, p − r) micro-batches × layers (Korthikanti et al. 2022 §4, pipeline subsection: stage 0
    holds p micro-batches, i.e. L layers' worth). Interleaved (v > 1): Megatron-Core's warm-up of
    2(p − r − 1) + (v − 1)·N chunk forwards (get_pp_rank_microbatches; N = interleave_group_size, p when p divides
    m), +1 in steady state, each chunk holding layers/v; for r = 0 and N = p this is L·(1 + (p − 1)/(p·v)),
    Korthikanti's interleaving penalty. Capped at all m·v chunks of the step. `group`: N, as in last_group_size.
    """
    stage, pp, m, v = (np.asarray(x) for x in (stage, pp, num_microbatches, vpp))
    plain = np.minimum(m, pp - stage) * layers_on_stage
    n = interleave_group_size(pp, m, v) if group is None else group
    chunks = np.minimum(m * v, 2 * (pp - stage - 1) + (v - 1) * n + 1)
    return np.where(v > 1, chunks * layers_on_stage / v, plain)
