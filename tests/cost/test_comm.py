"""Collective times with the alpha-beta model (formulas.md §4.1-4.3), computed by hand on h100-sxm.

h100-sxm.yaml numbers used below (asserted in `test_h100_numbers_used_here`): NVLink 450 GB/s per direction at
busbw fraction 0.82; NIC 400 Gbit/s = 50 GB/s at 0.94; base latency 14 µs; step latency 1.9 µs (NVLink) and
4.0 µs (network) (NCCL tuning.cc LL128 values).
"""

import numpy as np
import pytest

from planner.cost.comm import (all_gather_time_s, all_reduce_time_s, group_span, p2p_time_s,
                               reduce_scatter_time_s)
from planner.specs.hardware import load_hardware

HW = load_hardware("h100-sxm")
W_NODE = 450e9 * 0.82
W_NET = 400e9 / 8 * 0.94
BASE, A_INTRA, A_INTER = 14e-6, 1.9e-6, 4.0e-6
S = 268_435_456  # bytes: 2·s·b·h for Llama-405B (8192·16384·2), formulas.md §9 "268 MB"


def test_h100_numbers_used_here():
    assert HW.intra_bw_bytes_per_s * HW.intra_busbw_efficiency == pytest.approx(W_NODE, rel=1e-12)
    assert HW.inter_bw_bytes_per_s * HW.inter_busbw_efficiency == pytest.approx(W_NET, rel=1e-12)
    assert (HW.collective_base_latency_s, HW.intra_step_latency_s, HW.inter_step_latency_s) == \
        pytest.approx((BASE, A_INTRA, A_INTER), rel=1e-12)
    assert HW.gpus_per_node == 8
    assert S == 2 * 8192 * 16384


def test_ring_all_reduce_inside_one_node():
    # Thakur et al. 2005 ring AR: 2(n−1)α + 2(n−1)/n·S/W, n = 8 (formulas.md §4.1), plus NCCL's base latency.
    expected = BASE + 2 * 7 * A_INTRA + 2 * (7 / 8) * S / (450e9 * 0.82)
    assert float(all_reduce_time_s(S, 8, 1, HW)) == pytest.approx(expected, rel=1e-12)
    # ≈ 1.27 ms: the bandwidth term dominates
    assert 2 * (7 / 8) * S / W_NODE / expected > 0.95


def test_reduce_scatter_and_all_gather_inside_one_node():
    # ring RS / AG: (n−1)α + (n−1)/n·S/W (formulas.md §4.1)
    expected = BASE + 7 * A_INTRA + (7 / 8) * S / W_NODE
    assert float(reduce_scatter_time_s(S, 8, 1, HW)) == pytest.approx(expected, rel=1e-12)
    assert float(all_gather_time_s(S, 8, 1, HW)) == pytest.approx(expected, rel=1e-12)
    sizes = np.array([2, 4, 8, 16, 64, 512])
    assert np.array_equal(all_gather_time_s(S, sizes, 1, HW), reduce_scatter_time_s(S, sizes, 1, HW))


@pytest.mark.parametrize("n", [2, 4])
def test_smaller_groups_inside_a_node(n):
    expected = BASE + 2 * (n - 1) * A_INTRA + 2 * (n - 1) / n * S / W_NODE
    assert float(all_reduce_time_s(S, n, 1, HW)) == pytest.approx(expected, rel=1e-12)


def test_hierarchical_all_reduce_64_ranks_on_8_nodes():
    # NCCL's ring over 8 nodes of 8 (formulas.md §4.3; hardware.md §3): every GPU moves 2·(63/64)·S, 1/8 of it over
    # its NIC; a node's 8 NICs carry one GPU's worth. The links stream at once: the slower sets the time, each GPU
    # at most at its one-node ring rate, max(2·(63/64)·S/W_node, 2·(63/64)·S/(8·W_net)): here NVLink (369 of 376 GB/s).
    # Latency: NCCL tree (tuning.cc, formulas.md §4.2): base + 2·((ppn − 1)·intraLat + log2(nodes)·interLat).
    node = 2 * (63 / 64) * S / W_NODE
    net = 2 * (63 / 64) * S / (8 * W_NET)
    assert node > net
    expected = node + BASE + 2 * 7 * A_INTRA + 2 * 3 * A_INTER
    assert float(all_reduce_time_s(S, 64, 1, HW)) == pytest.approx(expected, rel=1e-12)


def test_multi_node_bus_bandwidth_is_the_measured_one():
    """hardware.md §3, nccl-tests ring busbw on 8-GPU nodes with a NIC per GPU, large messages: DGX A100 multi-node
    ~192 GB/s; 4 x 8 H200 364.7; 4 x 8 B200 381.8; 248 x 8 H200 ~350; H100 8x NDR 368-392 (derived). The model's
    busbw is min(8·W_net, W_node): A100 192, H100/H200 369, B200 376 (within 6% of each measurement, and never
    above the one-node figure). Adding the NVLink and network phases instead gave 115-300 GB/s."""
    measured = {("a100-80gb", 16): 192e9, ("h200-sxm", 4): 364.7e9, ("b200", 4): 381.8e9, ("h200-sxm", 248): 350e9,
                ("h100-sxm", 16): 380e9}
    big = 16e9
    for (name, nodes), busbw in measured.items():
        hw = load_hardware(name)
        n = 8 * nodes
        lat = all_reduce_time_s(1.0, n, 1, hw)           # the latency part: one byte
        model = big * 2 * (n - 1) / n / (float(all_reduce_time_s(big, n, 1, hw)) - float(lat))
        assert model == pytest.approx(busbw, rel=0.08), (name, nodes, model / 1e9)


def test_hierarchical_reduce_scatter_64_ranks():
    # Reduce-scatter is a ring in NCCL (no tree): the links stream at once, max((63/64)·S/W_node,
    # (63/64)·S/(8·W_net)); NCCL's tuner (tuning.cc) counts its 63 steps, 7 across the node edges and the other
    # 8 x 7 = 56 on NVLink.
    expected = max((63 / 64) * S / W_NODE, (63 / 64) * S / (8 * W_NET)) + BASE + 56 * A_INTRA + 7 * A_INTER
    assert float(reduce_scatter_time_s(S, 64, 1, HW)) == pytest.approx(expected, rel=1e-12)


def test_one_member_per_node_16_ranks_stride_8():
    # DP group of a TP8 layout: every member on its own node, all traffic on the NIC: 2·(15/16)·S/W_net;
    # latency base + 2·log2(16)·α_net (tree).
    expected = 2 * (15 / 16) * S / W_NET + BASE + 2 * 4 * A_INTER
    assert float(all_reduce_time_s(S, 16, 8, HW)) == pytest.approx(expected, rel=1e-12)
    # the network path is ~7x slower than NVLink for the same group size
    assert float(all_reduce_time_s(S, 16, 8, HW)) > 5 * float(all_reduce_time_s(S, 8, 1, HW))


def test_size_one_group_costs_nothing():
    for fn in (all_reduce_time_s, reduce_scatter_time_s, all_gather_time_s):
        assert float(fn(S, 1, 1, HW)) == 0.0
        assert float(fn(S, 1, 8, HW)) == 0.0
    got = all_reduce_time_s(S, np.array([1, 8, 1]), 1, HW)
    assert got[0] == 0.0 and got[2] == 0.0 and got[1] > 0


@pytest.mark.parametrize("size, stride, k, nodes", [
    (8, 1, 8, 1),     # one full node
    (2, 1, 2, 1),
    (4, 2, 4, 1),     # ranks 0, 2, 4, 6
    (64, 1, 8, 8),
    (16, 2, 4, 4),    # ranks 0, 2, ..., 30: four per node
    (16, 8, 1, 16),   # one per node
    (4, 16, 1, 4),    # stride larger than a node
    (1, 1, 1, 1),
])
def test_group_span(size, stride, k, nodes):
    got_k, got_nodes = group_span(size, stride, 8)
    assert (int(got_k), int(got_nodes)) == (k, nodes)


def _enumerated(size, stride, g, world):
    """Every group of the job by enumeration: the ranks sharing r // (stride·size) and r % stride. Returns the most
    nodes a group spans and the fewest and most members per node among the groups that leave their node."""
    r = np.arange(world)
    group = (r // (stride * size)) * stride + r % stride
    nodes, fewest, most = 1, size, 0
    for key in np.unique(group):
        _, counts = np.unique(r[group == key] // g, return_counts=True)
        if len(counts) > 1:
            nodes, fewest, most = max(nodes, len(counts)), min(fewest, counts.min()), max(most, counts.max())
    return nodes, fewest, (most if nodes > 1 else size)


@pytest.mark.parametrize("g", [6, 8, 72])
def test_group_span_matches_enumerating_every_group(g):
    """Any node size, stride, group size and job size (a whole number of blocks): group_span's (k, M) is the
    fewest members per node among the groups that leave their node, and size/k (exactly the hierarchical
    formulas' network time for that node: (1 - k/n)·S/k); group_nodes reports the real span. The closed form for
    blocks that tile the nodes and the offset scan for those that do not (NVL72) both meet this oracle."""
    from planner.cost.comm import group_nodes
    checked = 0
    for stride in (1, 2, 3, 4, 8, 12, 16, 64):
        for size in (2, 3, 4, 5, 8, 9, 16, 64):
            for blocks in (1, 2, 3, 5):
                world = stride * size * blocks
                if world > 3000:
                    continue
                nodes, fewest, most = _enumerated(size, stride, g, world)
                k, m = group_span(size, stride, g, world)
                assert (float(k), float(m)) == pytest.approx((fewest, size / fewest)), (stride, size, world)
                assert group_nodes(size, stride, g, world) == (nodes, fewest, most), (stride, size, world)
                checked += 1
    assert checked > 200
    # vectorised over configurations: the same as one call each
    sizes, strides = np.array([64, 9, 4, 16]), np.array([1, 16, 8, 8])
    k, m = group_span(sizes, strides, 72, world=np.array([128, 144, 128, 128]))
    one = [group_span(int(a), int(b), 72, world=w) for a, b, w in zip(sizes, strides, [128, 144, 128, 128])]
    assert list(k) == [float(x[0]) for x in one] and list(m) == [float(x[1]) for x in one]


def test_p2p_times():
    # one send: base + one step latency + S/W on the link (NVLink inside a node, the GPU's NIC across nodes)
    nbytes = 33_554_432  # 2·s·b·h/t for Llama-405B, formulas.md §9 "33.5 MB per boundary"
    assert float(p2p_time_s(nbytes, False, HW)) == pytest.approx(BASE + A_INTRA + nbytes / W_NODE, rel=1e-12)
    assert float(p2p_time_s(nbytes, True, HW)) == pytest.approx(BASE + A_INTER + nbytes / W_NET, rel=1e-12)
    # formulas.md §9: ≈ 0.67 ms at 50 GB/s (nominal); with the 0.94 busbw fraction ≈ 0.73 ms
    assert 0.6e-3 < float(p2p_time_s(nbytes, True, HW)) < 0.8e-3


def test_all_reduce_is_twice_reduce_scatter_bandwidth():
    # AR = RS + AG in one collective: twice the RS bandwidth term (latency differs: AR may use a tree; on 1 PB the
    # hundreds of microseconds of latency are below 1e-6 of the time).
    big = 1e15
    for size, stride in [(8, 1), (64, 1), (16, 8), (32, 4)]:
        ar, rs = float(all_reduce_time_s(big, size, stride, HW)), float(reduce_scatter_time_s(big, size, stride, HW))
        assert ar - BASE == pytest.approx(2 * (rs - BASE), rel=1e-6)
    # 64 ranks on 8 nodes: the ring all-reduce would take 2 x (56 NVLink + 7 network) steps, the tree 2 x (7 + 3):
    # NCCL's tuner picks the tree
    ar, rs = float(all_reduce_time_s(S, 64, 1, HW)), float(reduce_scatter_time_s(S, 64, 1, HW))
    assert ar - 2 * (rs - BASE - 56 * A_INTRA - 7 * A_INTER) == pytest.approx(BASE + 14 * A_INTRA + 6 * A_INTER,
                                                                              rel=1e-9)
    # 12 nodes (GPT-NeoX-20B's cluster): the tree's depth is tuning.cc's log2i(12) = 3 network steps per round
    ar, rs = float(all_reduce_time_s(S, 96, 1, HW)), float(reduce_scatter_time_s(S, 96, 1, HW))
    assert ar - 2 * (rs - BASE - 84 * A_INTRA - 11 * A_INTER) == pytest.approx(BASE + 14 * A_INTRA + 6 * A_INTER,
                                                                               rel=1e-9)
    # Inside one node both are rings: exactly twice the steps as well.
    ar, rs = float(all_reduce_time_s(S, 8, 1, HW)), float(reduce_scatter_time_s(S, 8, 1, HW))
    assert ar - BASE == pytest.approx(2 * (rs - BASE), rel=1e-12)


def test_count_pays_latency_per_call():
    # 10 buckets: same bandwidth term, ten times the latency (base + 7 intra steps for RS in a node).
    one, ten = float(reduce_scatter_time_s(S, 8, 1, HW)), float(reduce_scatter_time_s(S, 8, 1, HW, count=10))
    assert ten - one == pytest.approx(9 * (BASE + 7 * A_INTRA), rel=1e-9)


def test_placement_strides_and_pp_crossing_by_hand():
    """Rank order TP innermost: with DP next (tp-dp-pp), TP8 DP4 PP16 puts DP ranks 8 apart and PP ranks 32 apart,
    so every stage boundary crosses a node; with PP next (tp-pp-dp), TP2 PP4 keeps a pipeline inside one 8-GPU node."""
    from planner.cost.comm import placement_strides, pp_crosses_nodes

    assert tuple(int(x) for x in placement_strides(8, 16, 4, True)) == (8, 32)
    assert tuple(int(x) for x in placement_strides(2, 4, 64, False)) == (8, 2)
    assert pp_crosses_nodes(8, 16, 4, True, 8) and not pp_crosses_nodes(2, 4, 64, False, 8)
    assert pp_crosses_nodes(2, 4, 64, True, 8)           # DP next: PP ranks 128 apart
    # 16-rank pipelines (TP4 PP4, PP next) on 72-GPU NVL72 nodes: the block at ranks 64-79 straddles the node edge
    assert pp_crosses_nodes(4, 4, 9, False, 72) and not pp_crosses_nodes(4, 4, 4, False, 72)   # 64 GPUs: one node
    assert not pp_crosses_nodes(4, 2, 9, False, 72)      # 8-rank blocks tile 72


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_data_parallel_scaling_never_exceeds_one(zero):
    """Doubling DP at a fixed per-GPU load (8B, micro-batch 1, 16 micro-batches per rank) never shortens the step
    but for the optimizer update, which ZeRO shards over DP: leaving the node adds a network phase, it cannot
    remove the NVLink phase's overlap cost (latency and last-bucket terms move it by less than 0.1%; charging the
    network's slowdown to the whole collective once it left the node shortened the ZeRO-3 step by 5% here)."""
    from planner.evaluate import evaluate
    steps = []
    for dp in (4, 8, 16, 32, 64):
        ev = evaluate("8b", dp, tp=1, pp=1, dp=dp, micro_batch=1, recompute="none", zero_stage=zero, dp_replicate=1,
                      global_batch=16 * dp, seq_len=4096, hardware="h100-sxm")
        steps.append(ev.row["step_time_s"] - ev.row["optimizer_s"])
    assert all(b >= a * (1 - 1e-3) for a, b in zip(steps, steps[1:])), steps


@pytest.mark.parametrize("hardware", ["a100-80gb", "h100-sxm"])
def test_context_parallel_ring_scaling_never_exceeds_one(hardware):
    """A CP ring that leaves the node waits for the NIC at every step; its NVLink hops are busy only W_net/W_node of
    it. Per sequence, doubling CP (8B, 128K tokens) never shortens the step but for the ZeRO-sharded optimizer."""
    from planner.evaluate import evaluate
    work = []
    for cp in (2, 4, 8, 16, 32):
        ev = evaluate("8b", 2 * cp, hardware=hardware, tp=1, cp=cp, pp=1, dp=2, micro_batch=1, recompute="full",
                      zero_stage=1, seq_len=131072, global_batch=8)
        work.append((ev.row["step_time_s"] - ev.row["optimizer_s"]) * cp)
    assert all(b >= a * (1 - 1e-4) for a, b in zip(work, work[1:])), work   # the old rule: -0.08% at CP 16


def test_overlap_slowdown_by_hand():
    """H100 profile: NVLink 0.1, network 0. Inside a node: 0.1. Bytes crossing the network pass through the GPU too,
    W_net/W_node as fast: at least 0.1 x W_net/W_node (the profile's 0 would make a network phase free, and a node
    with less NVLink faster). A hierarchical all-gather over 8 nodes mixes the two by its NVLink share; a CP ring
    over 2 nodes waits for its NIC hop, so its NVLink hops are busy W_net/W_node of each step: the same value."""
    from planner.cost.comm import overlap_slowdown
    u = HW.overlap_slowdown_intra
    assert (u, HW.overlap_slowdown_inter) == (0.1, 0.0)
    net = u * W_NET / W_NODE
    assert net == pytest.approx(0.1 * 47 / 369, rel=1e-12)                 # 0.0127: 47 of 369 GB/s
    assert overlap_slowdown((8, 1), HW) == u and overlap_slowdown((8, 1), HW, ring=True) == u
    # 64 ranks on 8 nodes, 1 TB: the NVLink bytes (7/8 of each GPU's), (63/64)·(7/8)·S/W_node of NVLink time, at
    # the NVLink value, the network's, (63/64)·S/(8 W_net), at the per-byte floor, the ring's 56 NVLink and 7
    # network step latencies at the network value (0); over the collective's time, max((63/64)·S/W_node, wire)
    node, wire = 63 / 64 * 7 / 8 * 1e12 / W_NODE, 63 / 64 * 1e12 / 8 / W_NET
    lat = BASE + 56 * A_INTRA + 7 * A_INTER
    total = max(63 / 64 * 1e12 / W_NODE, wire) + lat
    assert overlap_slowdown((8, 8), HW) == pytest.approx((u * node + net * wire) / total, rel=1e-12)
    assert overlap_slowdown((1, 8), HW) == pytest.approx(net, rel=1e-5)    # one GPU per node: all network
    assert overlap_slowdown((8, 2), HW, ring=True) == pytest.approx(net, rel=1e-5)


def test_network_overlap_slowdown_is_charged_per_byte_not_per_latency():
    """A 1 MB all-gather over 8 nodes of one GPU each: 7/8·1 MB/W_net = 18.6 µs of bytes on the wire, 14 + 7 x 4 µs
    of latency. The per-byte floor 0.1·W_net/W_node covers the 18.6 µs only (the profile's network value is 0), so
    0.0127 x 18.6/60.6 = 0.0039 of the whole time. Charged over the latency too, a faster NIC (the same bytes in less
    time at a proportionally higher per-second value) would slow compute more: a reviewer's 8B on 64 H100s was
    0.02% faster with half the NIC bandwidth."""
    from planner.cost.comm import overlap_slowdown
    bw = 7 / 8 * 1e6 / W_NET
    lat = BASE + 7 * A_INTER
    assert bw == pytest.approx(18.6e-6, rel=1e-2) and lat == pytest.approx(42e-6)
    expected = 0.1 * W_NET / W_NODE * bw / (bw + lat)
    assert float(overlap_slowdown((1, 8), HW, nbytes=1e6)) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.0039, abs=5e-5)
    # all-reduce (2 rounds, tree latency over 8 nodes: 2·log2 8 = 6 steps): twice the bytes, its own latency
    bw2, lat2 = 2 * bw, BASE + 6 * A_INTER
    assert float(overlap_slowdown((1, 8), HW, nbytes=1e6, rounds=2)) == pytest.approx(
        0.1 * W_NET / W_NODE * bw2 / (bw2 + lat2), rel=1e-12)
    # a profile with a network value of its own (the bundled ones fit 0): per second over the network phase's whole
    # time, latencies included, unless the per-byte floor is larger
    import dataclasses
    hw = dataclasses.replace(HW, overlap_slowdown_inter=0.05)
    assert float(overlap_slowdown((1, 8), hw, nbytes=1e6)) == pytest.approx(0.05, rel=1e-12)
    low = dataclasses.replace(HW, overlap_slowdown_inter=0.002)
    assert float(overlap_slowdown((1, 8), low, nbytes=1e6)) == pytest.approx(
        max(0.002 * (bw + lat), 0.1 * W_NET / W_NODE * bw) / (bw + lat), rel=1e-12)
    assert float(overlap_slowdown((1, 8), low, nbytes=1e12)) == pytest.approx(0.1 * W_NET / W_NODE, rel=1e-5)
    assert float(overlap_slowdown((8, 2), hw, nbytes=1e6, ring=True, size=16)) == pytest.approx(0.05, rel=1e-12)
    # a CP ring of 16 over 2 nodes: 15 steps of S/16 on the NIC, 14 µs + 15 x 4 µs of latency
    bw_r, lat_r = 15 * 1e6 / 16 / W_NET, BASE + 15 * A_INTER
    assert float(overlap_slowdown((8, 2), HW, nbytes=1e6, ring=True, size=16)) == pytest.approx(
        0.1 * W_NET / W_NODE * bw_r / (bw_r + lat_r), rel=1e-12)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_less_nvlink_is_never_faster(zero):
    """The same job on nodes of one GPU (every byte on the network) cannot beat nodes of eight: the network phase
    of an overlapped collective slows compute at least as much per second as NVLink's, scaled by bandwidth (a
    reviewer found 1 GPU per node 1.2% faster when network overlap was free)."""
    import dataclasses

    from planner.evaluate import evaluate
    pins = dict(tp=1, pp=1, dp=16, micro_batch=1, recompute="none", zero_stage=zero, dp_replicate=1)
    eight = evaluate("8b", 16, hardware=HW, **pins).row["step_time_s"]
    for smaller in (1, 2, 4):     # 4-GPU nodes were 0.02% faster when in-node ring latencies slowed compute
        node = dataclasses.replace(HW, gpus_per_node=smaller)
        # (equal, to rounding, where every collective hides: a ring moves the same bytes through each GPU)
        assert evaluate("8b", 16, hardware=node, **pins).row["step_time_s"] >= eight * (1 - 1e-12), smaller


def test_a_mesh_node_gives_a_group_only_its_links():
    """MI300X: a direct Infinity Fabric link to each of the 7 peers (no switch). A group of k GPUs uses k - 1 of
    them: the profile's fraction reproduces the measured 8-GPU RCCL busbw (316.82 GB/s) by construction, and the
    2-GPU busbw measured independently (47.67 GB/s, ml-engineering) within 5%; a point-to-point send gets one link.
    Behind NVSwitch the group size does not matter."""
    from planner.cost.comm import node_bandwidth, ring_exchange_time_s

    mi = load_hardware("mi300x")
    base, step = mi.collective_base_latency_s, mi.intra_step_latency_s
    busbw = {k: 8e9 * 2 * (k - 1) / k / (all_reduce_time_s(8e9, k, 1, mi) - base - 2 * (k - 1) * step)
             for k in (2, 4, 8)}
    assert busbw[8] == pytest.approx(316.82e9, rel=0.01)
    assert busbw[2] == pytest.approx(47.67e9, rel=0.05)
    assert busbw[4] == pytest.approx(3 * busbw[2], rel=1e-9)
    assert p2p_time_s(1e9, False, mi) == pytest.approx(base + step + 1e9 / busbw[2], rel=1e-9)
    assert ring_exchange_time_s(8e9, 8, 1, mi) == pytest.approx(base + 7 * (1e9 / busbw[2] + step), rel=1e-9)
    assert np.allclose(node_bandwidth(np.array([2, 4, 8]), HW), W_NODE, rtol=1e-12)
    assert np.allclose(node_bandwidth(np.array([[2], [8]]), mi), [[busbw[2]], [busbw[8]]], rtol=1e-9)


def test_a_mesh_group_across_nodes_sends_only_its_in_node_share_over_its_links():
    """Across nodes a GPU's ring bytes leave 1/k through its NIC and (k-1)/k over the fabric. On a mesh, k of a node's
    GPUs have only k - 1 links, which carry that (k-1)/k share (a reviewer found 8 ranks, 2 per node, slower than 8
    ranks one per node when the whole share was charged to the one link). By hand, a 1 GB all-reduce over 8 MI300X,
    2 per node on 4 nodes: the link side 2 x 7/8 x 1/2 GB at W/7 and the NIC side 2 x 7/8 GB over 2 NICs at W_net
    each; the slower sets the time. Ranks added in the node never slow it; behind a switch nothing changes."""
    mi = load_hardware("mi300x")
    link = mi.intra_bw_bytes_per_s * mi.intra_busbw_efficiency / 7
    nic = mi.inter_bw_bytes_per_s * mi.inter_busbw_efficiency
    bandwidth_s = max(2 * 7 / 8 * 0.5e9 / link, 2 * 7 / 8 * 1e9 / (2 * nic))
    latency_s = all_reduce_time_s(1.0, 8, 4, mi)          # one byte: the step latencies alone
    assert all_reduce_time_s(1e9, 8, 4, mi) - latency_s == pytest.approx(bandwidth_s, rel=1e-6)
    times = [all_reduce_time_s(1e9, 8, stride, mi) for stride in (8, 4, 2, 1)]          # 1, 2, 4, 8 per node
    assert all(later <= earlier for earlier, later in zip(times, times[1:])), times
    # behind NVSwitch the in-node side stays at the node's one-node ring rate (hardware.md §3's measured busbw)
    w = HW.intra_bw_bytes_per_s * HW.intra_busbw_efficiency
    assert all_reduce_time_s(1e9, 32, 1, HW) >= 2 * 31 / 32 * 1e9 / w
