"""The candidate enumeration: every TP x CP x PP x DP factorization, and each layout's rows in the order the
search relies on (itertools.product of its knobs, then its half-chunk recompute rows)."""

import pytest

from planner.candidates import Pins, enumerate_candidates, make_job
from planner.specs.model import load_model


def test_enumeration_covers_every_factorization():
    job = make_job(load_model("8b"), 64)
    cols = enumerate_candidates(load_model("8b"), job)
    triples = {(int(t), int(c), int(p)) for t, c, p in zip(cols["tp"], cols["cp"], cols["pp"])}
    powers = (1, 2, 4, 8, 16, 32, 64)
    expected = {(t, c, p) for t in powers for c in powers for p in powers if t * c * p <= 64}
    assert triples == expected                              # 8B: sequence 8192 splits into 2 x CP chunks for CP <= 64
    assert (cols["tp"] * cols["cp"] * cols["pp"] * cols["dp"] == 64).all()


@pytest.mark.parametrize("model, gpus, pins", [("8b", 16, Pins()), ("70b", 64, Pins(tp=8)),
                                               ("70b", 64, Pins(recompute="full", recompute_layers=2)),
                                               ("8b", 32, Pins(zero_stage=3, dp_replicate=2, micro_batch=2))])
def test_enumeration_is_each_layouts_product_then_its_half_chunk_rows(model, gpus, pins):
    """The vectorised enumeration against a plain loop: per TP x CP x PP x DP layout, itertools.product of its
    micro-batches, VPP degrees, SP, recompute and sharding choices (the last fastest), then, when recompute is
    open, the same rows under full recompute of half of each chunk (where a chunk has more than one layer)."""
    import itertools

    from planner.candidates import _divisors, _micro_batches, _shardings
    from planner.cost.pipeline import chunk_layers, stage_layers
    from planner.specs.strategy import RECOMPUTE, SEARCHED_RECOMPUTE

    m = load_model(model)
    job = make_job(m, gpus)
    full = RECOMPUTE.index("full")
    rcs = [full] if pins.recompute else [RECOMPUTE.index(r) for r in SEARCHED_RECOMPUTE]
    expected = []
    for tp, cp, pp in itertools.product(_divisors(gpus), repeat=3):
        if gpus % (tp * cp * pp) or (pins.tp and tp != pins.tp) or (cp > 1 and job.seq_len % (2 * cp)):
            continue
        dp, mid = gpus // (tp * cp * pp), int(stage_layers(m.layers, pp)[1])
        mbs = [pins.micro_batch] if pins.micro_batch else _micro_batches(job.global_batch, dp)
        vpps = _divisors(mid) if pp > 1 else [1]
        sps = [0, 1][:1 + (tp > 1)]
        rows = [(tp, cp, pp, dp, b, v, s, rc, pins.recompute_layers if rc == full and pins.recompute_layers else 0,
                 z, r) for b, v, s, rc, (z, r) in itertools.product(mbs, vpps, sps, rcs, _shardings(pins, dp * cp > 1))]
        expected += rows
        if pins.recompute is None:
            for row in rows:
                chunk = int(chunk_layers(m.layers, pp, row[5]))
                if row[7] == full and -(-chunk // 2) < chunk:
                    expected.append(row[:8] + (-(-chunk // 2),) + row[9:])
    cols = enumerate_candidates(m, job, pins)
    got = list(zip(*(cols[k].tolist() for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "sp", "recompute",
                                               "rc_layers", "zero", "dp_replicate"))))
    assert got == expected
