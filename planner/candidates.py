"""The candidate layouts: a job from flags, the user's pins, and every TP x CP x PP x DP factorization with the other
knobs, as one numpy column per knob (the search checks, prices and ranks them).

Hybrid sharding's degrees are not enumerated here for every layout: `hybrid_variants` derives them from the layouts
that leave memory for them, once those are priced.
"""

from __future__ import annotations

import math
from dataclasses import field, fields, make_dataclass, replace
from functools import cache

import numpy as np

from planner.cost.pipeline import chunk_layers, stage_layers
from planner.cost.step import KNOBS
from planner.checks import checked_int, parse_count
from planner.errors import PlannerError
from planner.specs.model import ModelSpec
from planner.specs.strategy import (PARALLEL_DIMS, RECOMPUTE, SEARCHED_RECOMPUTE, ZERO_STAGES, Job, Layout,
                                    recompute_code, shard_group, zero_code)

MAX_MICRO_BATCH = 1024

Pins = make_dataclass("Pins", [(f.name, f"{f.type} | None", field(default=None)) for f in fields(Layout)],
                      frozen=True,
                      namespace={"__doc__": "Knobs the user fixed, one per Layout field; None = search over it."})
Pins.__module__ = __name__       # picklable (results go through multiprocessing and caches); 3.12 has module=



def make_job(model: ModelSpec, gpus, seq_len=None, global_batch=None, global_batch_tokens=None) -> Job:
    """Resolve the sequence length and the global batch (sequences) from flags or the model's defaults."""
    if global_batch is not None and global_batch_tokens is not None:
        raise PlannerError("--global-batch", "give either --global-batch (sequences) or --global-batch-tokens, not both")
    s = checked_int(model.seq_len if seq_len is None else seq_len, "--seq-len")
    if model.learned_positions and s > model.seq_len:       # no position embedding beyond the table
        raise PlannerError("--seq-len", f"got {s:,}, expected at most {model.seq_len:,}: {model.name} learns "
                                        f"{model.seq_len:,} positions")
    if global_batch is None:
        tokens = model.global_batch_tokens if global_batch_tokens is None else global_batch_tokens
        if isinstance(tokens, str):                          # '16M': the command line's suffix rule
            tokens = parse_count(tokens, "--global-batch-tokens", binary=True)
        tokens = checked_int(tokens, "--global-batch-tokens")
        global_batch = max(1, round(tokens / s))
        if global_batch_tokens is not None and global_batch * s != tokens:
            raise PlannerError("--global-batch-tokens", f"{tokens:,} tokens is not a whole number of "
                                                        f"{s}-token sequences")
    return Job(gpus=gpus, seq_len=s, global_batch=global_batch)


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def _micro_batches(global_batch: int, dp: int) -> list[int]:
    """Divisors of the per-replica batch; if DP does not divide the batch, powers of two (rejected with a reason)."""
    if global_batch % dp == 0:
        return [x for x in _divisors(global_batch // dp) if x <= MAX_MICRO_BATCH]
    return [2**i for i in range(int(math.log2(max(global_batch // dp, 1))) + 1)]


def normalized_pins(pins: Pins) -> Pins:
    """The pinned knobs as Layout checks and stores them (Python ints and bools, recompute by name): a numpy uint8
    would overflow in the search's arithmetic, and an array where a number belongs is the one-line error here."""
    given = {k: v for k, v in pins.__dict__.items() if v is not None}
    layout = Layout(**given)
    return replace(pins, **{k: getattr(layout, k) for k in given})


def check_pins(pins: Pins, job: Job) -> None:
    """Pinned knobs must have the right type and range, and the degrees must be able to multiply to the GPU count."""
    layout = Layout(**{k: v for k, v in pins.__dict__.items() if v is not None})   # types and ranges, as any layout
    if layout.recompute_layers and pins.recompute is not None and layout.recompute != "full":
        raise PlannerError("--recompute-layers", f"recomputes layers fully; expected --recompute full, got "
                                                 f"{layout.recompute}")
    upper = {"tp": job.gpus, "cp": job.gpus, "pp": job.gpus, "dp": job.gpus, "micro_batch": job.global_batch,
             "vpp": 1024, "dp_replicate": job.gpus}
    for name, limit in upper.items():
        value = getattr(pins, name)
        if value is not None and value > limit:
            raise PlannerError(f"--{name.replace('_', '-')}", f"got {value:,}, expected at most {limit:,}")
    n = job.gpus
    pinned = {k: getattr(pins, k) for k in PARALLEL_DIMS if getattr(pins, k) is not None}
    if len(pinned) == len(PARALLEL_DIMS):
        layout.check_gpus(n)
    elif n % math.prod(pinned.values()):
        alone = next((k for k, v in pinned.items() if n % v), None)
        if alone is not None:                    # one pinned degree is the culprit on its own: name its flag
            raise PlannerError(f"--{alone}", f"{alone}({pinned[alone]}) does not divide gpus({n})")
        terms = " * ".join(f"{k}({v})" for k, v in pinned.items())
        raise PlannerError("layout", f"{terms} = {math.prod(pinned.values())} does not divide gpus({n})")


def enumerate_candidates(model: ModelSpec, job: Job, pins: Pins = Pins()) -> dict[str, np.ndarray]:
    """Every TP x CP x PP x DP factorization of the GPU count x micro-batch x VPP x SP x recompute x ZeRO, as columns.

    Micro-batches: divisors of the per-replica batch. VPP: divisors of the layer slots per stage. CP: divisors of
    the GPUs left by TP that split the sequence into 2·CP equal chunks (the load-balanced causal split).
    """
    n = job.gpus
    rcs = ([recompute_code(pins.recompute)] if pins.recompute is not None
           else [RECOMPUTE.index(r) for r in SEARCHED_RECOMPUTE])
    if pins.recompute_layers:                  # recomputing k layers of each chunk is full recompute, partially
        rcs = [c for c in rcs if c == RECOMPUTE.index("full")]
    degrees = []
    for tp in [pins.tp] if pins.tp is not None else _divisors(n):
        if n % tp:
            continue
        cps = [pins.cp] if pins.cp is not None else \
            [c for c in _divisors(n // tp) if c == 1 or job.seq_len % (2 * c) == 0]
        for cp in cps:
            if (n // tp) % cp:
                continue
            for pp in [pins.pp] if pins.pp is not None else _divisors(n // (tp * cp)):
                if (n // (tp * cp)) % pp:
                    continue
                dp = n // (tp * cp * pp)
                if pins.dp is None or dp == pins.dp:
                    degrees.append((tp, cp, pp, dp))
    if not degrees:
        return {k: np.zeros(0, dtype=np.int64) for k in KNOBS}
    return _blocks(model, job, pins, rcs, np.asarray(degrees, dtype=np.int64))


def _blocks(model: ModelSpec, job: Job, pins: Pins, rcs: list[int], degrees: np.ndarray) -> dict:
    """The candidates of each TP x CP x PP x DP factorization (a row of `degrees`), block after block, as columns by
    knob: every combination of its micro-batches, VPP degrees, SP, recompute and sharding in itertools.product's
    order (the last varies fastest), then the same under full recompute of half of each pipeline chunk.

    Layers recomputed per chunk (rc_layers): under full recompute every layer (0); when recompute is open, also
    half of each chunk (Megatron's block method), a step between none and full (any other count is a pin away: it
    would cost the search a candidate per count), for the VPP degrees whose chunks have more than one layer. A
    pinned "full" means every layer, as Megatron's --recompute-granularity full does, unless the layers are pinned
    too."""
    tp, cp, pp, dp = degrees.T
    full = RECOMPUTE.index("full")
    mids = np.broadcast_to(stage_layers(model.layers, pp)[1], pp.shape).tolist()
    halves = pins.recompute is None and pins.recompute_layers is None and full in rcs

    @cache
    def half_chunk(p: int, v: int) -> int:
        """Half (rounded up) of a pipeline chunk's layers, or 0 where that is the whole chunk (one layer)."""
        chunk = int(chunk_layers(model.layers, p, v))
        half = -(-chunk // 2)
        return half if half < chunk else 0

    # Each block's choices, as ragged lists laid end to end (offset, count) per knob; SP only means something with
    # TP > 1, ZeRO only with DP x CP > 1 (the ranks that hold replicas): unpinned, those are not enumerated. VPP
    # choices carry the layers they recompute per chunk; each block is followed by its half-chunk rows.
    choices: dict[str, list] = {"micro_batch": [], "vpp": [], "sp": [], "recompute": [], "sharding": []}
    for t, c, p, d, mid in zip(tp.tolist(), cp.tolist(), pp.tolist(), dp.tolist(), mids):
        mbs = [pins.micro_batch] if pins.micro_batch is not None else _micro_batches(job.global_batch, d)
        vpps = [pins.vpp] if pins.vpp is not None else (_divisors(mid) if p > 1 and mid > 0 else [1])
        sps = [pins.sequence_parallel] if pins.sequence_parallel is not None else [False, True][:1 + (t > 1)]
        shardings = _shardings(pins, d * c > 1)
        base = [(v, pins.recompute_layers or 0) for v in vpps]
        half = [(v, h) for v, h in ((v, half_chunk(p, v)) for v in vpps) if h]
        for vpp_k, rc in [(base, rcs)] + ([(half, [full])] if halves else []):
            for key, value in zip(choices, (mbs, vpp_k, sps, rc, shardings)):
                choices[key].append(value)
    counts = {k: np.array([len(v) for v in lists], dtype=np.int64) for k, lists in choices.items()}
    starts = {k: np.cumsum(c) - c for k, c in counts.items()}
    flat = {k: np.array([x for v in lists for x in v], dtype=np.int64).reshape(sum(counts[k]), -1)
            for k, lists in choices.items()}
    rows = np.prod(np.stack(list(counts.values())), axis=0)
    sub = np.repeat(np.arange(len(rows)), rows)                   # each row's (sub-)block
    j = np.arange(int(rows.sum())) - np.repeat(np.cumsum(rows) - rows, rows)      # the row within it
    picked = {}
    for k in reversed(choices):                                # unravel j, the last knob fastest
        count = counts[k][sub]
        picked[k] = flat[k][starts[k][sub] + j % count]
        j = j // count
    block = sub // (2 if halves else 1)
    rc = picked["recompute"][:, 0]
    return {"tp": tp[block], "cp": cp[block], "pp": pp[block], "dp": dp[block],
            "micro_batch": picked["micro_batch"][:, 0], "vpp": picked["vpp"][:, 0], "sp": picked["sp"][:, 0],
            "recompute": rc, "rc_layers": np.where(rc == full, picked["vpp"][:, 1], 0),
            "zero": picked["sharding"][:, 0], "dp_replicate": picked["sharding"][:, 1]}


def _shardings(pins: Pins, replicas: bool) -> list[tuple[int, int]]:
    """(ZeRO stage, hybrid-sharding degree) choices of a block. Hybrid sharding: as pinned (a pinned degree above 1
    needs a ZeRO stage: no ZeRO-0 unless pinned too); open, 1 here, and the search adds the hybrid variants of the
    layouts that leave memory for them (hybrid_variants)."""
    zs = [zero_code(pins.zero_stage)] if pins.zero_stage is not None else list(ZERO_STAGES)[:1 + 3 * replicas]
    r = 1 if pins.dp_replicate is None else pins.dp_replicate
    # the last: no ZeRO is possible (DP x CP = 1), so the rules reject the pinned degree with its reason
    return [(z, r) for z in zs if z or r == 1 or pins.zero_stage is not None] or [(z, r) for z in zs]


def hybrid_variants(cols: dict, parts: dict, capacity_bytes: float) -> tuple[dict, np.ndarray]:
    """The hybrid-sharding (HSDP) variants of ZeRO layouts sharded over all DP x CP ranks (dp_replicate 1) that
    may still fit: every degree r > 1 that divides DP and leaves a shard group of two or more ranks, as long as the
    sharded states, r times larger, stay within `capacity_bytes`. `parts` are the layouts' memory parts (bytes, on
    the most loaded stage): states sharded by stage z (optimizer from 1, gradients from 2, weights at 3) grow by
    (r - 1) x their share; another stage may then peak, so the caller still checks the variants' own memory.
    Hybrid sharding never saves memory, so a layout that does not fit sharded over all ranks has no variant.
    Returns the variants' columns and, per variant, the index of its layout in `cols` (variants of one layout are
    adjacent, by increasing r)."""
    z, d, cp = cols["zero"], cols["dp"], cols["cp"]
    sharded = (parts["optimizer"] * (z >= 1) + parts["gradients"] * (z >= 2) + parts["weights"] * (z >= 3))
    slack = capacity_bytes - sum(parts.values())
    base = (cols["dp_replicate"] == 1) & (z >= 1) & (slack > 0) & (d > 1)
    idx = np.flatnonzero(base)
    if not len(idx):
        return {k: v[:0] for k, v in cols.items()}, idx
    r_max = np.floor(1 + slack[idx] / np.maximum(sharded[idx], 1e-300))
    rows, degrees = [], []
    for dp_value in np.unique(d[idx]):
        options = np.array(_divisors(int(dp_value))[1:], dtype=np.int64)
        here = idx[d[idx] == dp_value]
        keep = (options[None, :] <= r_max[d[idx] == dp_value][:, None]) & \
            (shard_group(dp_value, cp[here][:, None], options[None, :]) >= 2)
        i, j = np.nonzero(keep)
        rows.append(here[i])
        degrees.append(options[j])
    rows, degrees = np.concatenate(rows), np.concatenate(degrees)
    order = np.lexsort((degrees, rows))
    rows, degrees = rows[order], degrees[order]
    out = {k: v[rows] for k, v in cols.items()}
    out["dp_replicate"] = degrees
    return out, rows


def fastest_gain(step_s, fits, base_step_s, rows):
    """Per hybrid variant: is it the fastest fitting degree of its layout (the smallest on a tie: less memory) and
    faster than the layout sharded over all ranks? The search keeps those two: the least memory and the best step.
    (A faster degree may not fit: another stage can peak once the states grow.)"""
    key = np.where(fits, step_s, np.inf)
    order = np.lexsort((key, rows))                     # by layout, then step; degrees ascend within a tie (stable)
    first = np.ones(len(rows), dtype=bool)
    first[1:] = rows[order][1:] != rows[order][:-1]
    best = np.zeros(len(rows), dtype=bool)
    best[order[first]] = True
    return best & fits & (step_s < base_step_s[rows])
