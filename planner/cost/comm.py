"""Collective communication times with the alpha-beta model on a two-level (node / network) fabric.

formulas.md §4: Thakur, Rabenseifner & Gropp 2005 (ring: (n−1)/n·S/W per reduce-scatter or all-gather, twice that
for all-reduce); NCCL busbw convention (nccl-tests PERFORMANCE.md): the achievable per-link bandwidth is the link
speed times the measured busbw fraction; across nodes (§4.3) the ring streams through NVLink and the NICs at once,
so the slower sets the time (_phase_times; it reproduces the measured multi-node busbw of hardware.md §3).
Latency: NCCL's tuner model (tuning.cc): a base cost plus one step latency per ring step. All-reduce across many
nodes can use NCCL's double binary tree, whose latency grows with log2(nodes); reduce-scatter and all-gather are
rings, whose latency grows with the group size.
A collective issued as `count` calls (buckets, per-layer gathers) pays the latency `count` times.

A group is `size` ranks placed `stride` ranks apart in the global rank order (TP innermost). S is the size of the
full (unsharded) buffer in bytes. All functions take scalars or numpy arrays and broadcast. The node's fabric is a
switch (NVSwitch) or a full mesh (MI300X), whose bandwidth depends on how many of its GPUs take part
(node_bandwidth). A new network shape (e.g. a TPU torus) adds its own `_span`/`_bandwidths` pair here; callers do
not change.
"""

from __future__ import annotations

import numpy as np

from planner.checks import checked_array
from planner.specs.hardware import HardwareSpec


def group_span(size, stride, gpus_per_node, world=None):
    """(k, M): members of the group per node and the number of nodes it spans, as the collectives see them.

    A group of n ranks `stride` apart lies in an aligned block of stride·n ranks (which holds `stride` such groups).
    When blocks tile the nodes (every bundled node size but NVL72's 72), k = min(g/stride, n) and M = n/k exactly.
    Otherwise (16-rank TP groups, or 32-rank DP blocks, on 72-GPU NVL72 nodes) some groups straddle a node edge
    with unequal shares (64 ranks on 128 GPUs: 8 on one node, 56 on the next). A ring sends one GPU's share,
    (n−1)/n·S per pass, through every node's NICs, so the node with the fewest members, and NICs, paces the network:
    (k_min, n/k_min) gives exactly that network time (_phase_times), k_min over the job's groups (`world` ranks; by
    default every offset the block size can reach) that leave their node. The NVLink side and the step latencies
    then see k_min members and n/k_min nodes too: an approximation for uneven nodes (8 + 56 ranks: 7 network steps
    for 2 nodes)."""
    size, stride = np.asarray(size), np.asarray(stride)
    g = gpus_per_node
    k = np.clip(g // np.maximum(stride, 1), 1, size)
    nodes = np.ceil(size / k)
    block = stride * size
    ragged = (stride < g) & ((g % np.maximum(stride, 1) != 0) | ((g % block != 0) & (block % g != 0)))
    if world is not None:
        ragged = ragged & (np.asarray(world) > g)
    if not np.any(ragged):
        return k, nodes
    shape = np.broadcast_shapes(size.shape, stride.shape, np.shape(world) if world is not None else ())
    w = 0 if world is None else world
    n, st, w, mask, k, nodes = (np.broadcast_to(np.asarray(x), shape).ravel()
                                for x in (size, stride, w, ragged, k, nodes))
    k, nodes = k.astype(float), nodes.astype(float)
    # a few distinct (size, stride, world) shapes among many rows, each enumerated once; one world (a search's)
    # makes (size, stride) one 50-bit key (both < 2^25 > MAX_GPUS), far faster to sort than rows of three
    rows = np.stack([n[mask], st[mask], w[mask]], axis=1).astype(np.int64)
    if np.all(rows[:, 2] == rows[0, 2]):
        keys, inverse = np.unique((rows[:, 0] << 25) | rows[:, 1], return_inverse=True)
        shapes = [(int(key >> 25), int(key & (2**25 - 1)), int(rows[0, 2])) for key in keys]
    else:
        uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
        shapes = [tuple(int(x) for x in row) for row in uniq]
    k_min = np.array([_group_spread(*shape, g)[1] for shape in shapes])
    k[mask] = k_min[inverse.ravel()]
    nodes[mask] = n[mask] / k[mask]
    return k.reshape(shape), nodes.reshape(shape)


def group_nodes(size: int, stride: int, gpus_per_node: int, world: int | None = None) -> tuple[int, int, int]:
    """(nodes, fewest, most members per node) of the group of one layout that spans most nodes, for reports."""
    if size <= 1:
        return 1, 1, 1
    if stride >= gpus_per_node:                        # every member on its own node
        return size, 1, 1
    return _group_spread(size, stride, world or 0, gpus_per_node)


def _group_spread(n, stride, world, g):
    """(nodes, fewest, most members per node) over the groups of n ranks `stride` apart (stride < g) that leave
    their node, or (1, n, n) when none does. Blocks of stride·n ranks start at multiples of stride·n (their offsets
    in a node repeat after g blocks); the groups inside a block start 0..stride−1 further. world = 0: every
    reachable offset."""
    blocks = world // (stride * n) if world else g
    starts = (np.arange(min(max(blocks, 1), g))[:, None] * stride * n + np.arange(stride)[None, :]) % g
    offsets = np.unique(starts)
    node = (offsets[:, None] + stride * np.arange(n)[None, :]) // g          # each offset's members' nodes
    node -= node[:, :1]
    counts = np.stack([np.bincount(row, minlength=n) for row in node])     # members per node, 0 past the group
    spans = (counts > 0).sum(axis=1)
    cross = spans > 1
    if not cross.any():
        return 1, n, n
    present = np.where(counts > 0, counts, n + 1)[cross]
    return int(spans.max()), int(present.min()), int(counts[cross].max())


def placement_strides(tp, pp, dp, dp_inner, cp=1):
    """(DP group stride, PP group stride) in the global rank order: TP innermost, then CP (whose group has stride
    TP), then DP then PP (Megatron's default tp-cp-dp-pp order, dp_inner) or PP then DP."""
    t, p, d = np.asarray(tp), np.asarray(pp), np.asarray(dp)
    tc = t * np.asarray(cp)
    return np.where(dp_inner, tc, tc * p), np.where(dp_inner, tc * d, tc)


def pp_crosses_nodes(tp, pp, dp, dp_inner, gpus_per_node, cp=1):
    """True where some pipeline's neighbouring stages sit on different nodes (the slowest pipeline paces the step):
    the PP group spans more than one node (group_span: a block of stride x PP ranks that outgrows a node or, when
    blocks do not tile the nodes, as 16-rank blocks on 72-GPU NVL72 nodes, straddles a node edge)."""
    world = np.asarray(tp) * np.asarray(cp) * np.asarray(pp) * np.asarray(dp)
    stride = placement_strides(tp, pp, dp, dp_inner, cp)[1]
    return group_span(pp, stride, gpus_per_node, world)[1] > 1


def nested_span(inner_size, inner_stride, outer_size, outer_stride, hw: HardwareSpec, hierarchical=True,
                world=None):
    """(k, M) of the group made of two placed groups, e.g. DP x CP, which reduce gradients together (Megatron's
    data-parallel group with CP). When the outer group's stride is the inner block (DP next to CP) the two make one
    group of inner·outer ranks at the inner stride; otherwise (PP between them) the outer group's nodes each hold
    inner groups: nodes multiply, members per node too."""
    gpn = hw.gpus_per_node
    size = np.asarray(inner_size) * np.asarray(outer_size)
    _, m_in = group_span(inner_size, inner_stride, gpn, world)
    _, m_out = group_span(outer_size, outer_stride, gpn, world)
    k_one, m_one = group_span(size, inner_stride, gpn, world)
    one = np.asarray(outer_stride) == np.asarray(inner_stride) * np.asarray(inner_size)
    nodes = np.where(one, m_one, m_in * m_out)
    k = np.where(one, k_one, size / nodes)
    if hierarchical:
        return k, nodes
    flat = nodes > 1
    return np.where(flat, 1, k), np.where(flat, size, nodes)


def span(size, stride, hw: HardwareSpec, hierarchical=True, world=None):
    """(k, M) as the collectives see them; pass it as `span=` to reuse it across collectives of one group."""
    return _span(size, stride, hw, hierarchical, world)


def _span(size, stride, hw: HardwareSpec, hierarchical, world=None):
    k, nodes = group_span(size, stride, hw.gpus_per_node, world)
    if hierarchical:
        return k, nodes
    flat = nodes > 1
    return np.where(flat, 1, k), np.where(flat, np.asarray(size), nodes)


def overlap_slowdown(span, hw: HardwareSpec, nbytes=1e12, count=1, rounds=1, ring=False, size=None):
    """Share of an overlapped collective's time that still delays compute (Calculon's processor_usage), for a
    collective of `nbytes` in `count` calls, `rounds` 1 (RS/AG) or 2 (all-reduce). Inside a node: the profile's
    NVLink value over the whole time. Across nodes the network phase slows compute by the profile's network value
    per second, but at least by the NVLink value per byte moved: the GPU copies and reduces the same bytes either
    way, only W_net/W_node as fast, so a network phase cannot disturb compute less per byte than NVLink. Charged per
    byte, that floor covers the bandwidth time only (not the step latencies, during which no bytes move): a faster
    NIC moves the same bytes in less time and never slows compute more. A collective across nodes charges its
    NVLink bytes at the NVLink value, its network bytes at least at the floor, and its step latencies, NVLink steps
    included, at the network value, over its time (_slowdown). A ring exchange (CP) that leaves the node waits for
    its NIC hop at every step (ring_exchange_time_s): the NVLink-hop ranks are busy W_net/W_node of each step's
    transfer, the NIC rank at the network value: the slower rank sets the pace (`size`: the ring's ranks, by
    default k·M)."""
    nodes = np.asarray(span[1])
    u_node = hw.overlap_slowdown_intra
    if np.all(nodes <= 1):
        return np.full(nodes.shape, u_node)
    per_byte = u_node * _network_byte_ratio(hw)
    if ring:
        bw, lat = _ring_parts(nbytes, np.asarray(span[0]) * nodes if size is None else size, nodes > 1, hw)
        busy = np.maximum(hw.overlap_slowdown_inter * (bw + lat), per_byte * bw)
        return np.where(nodes > 1, busy / np.maximum(bw + lat, 1e-300), u_node)
    return _slowdown(_collective_parts(nbytes, span, hw, count, rounds), span, hw)


def _slowdown(parts, span, hw: HardwareSpec):
    """overlap_slowdown of a collective from its (in-node, network, in-node latency, network latency) times
    (_collective_parts), over its time (_collective_total: the two links stream at once). Across nodes the bytes
    are charged (NVLink's at the NVLink value, the network's at least at the per-byte floor) and the ring's step
    latencies, NVLink hops included, at the network value: the ring waits on its NIC hops, and a byte costs compute
    the same whether it crosses the node on NVLink or on a NIC (nodes of one GPU then never beat nodes of eight)."""
    k, nodes = np.asarray(span[0]), np.asarray(span[1])
    u_node = hw.overlap_slowdown_intra
    if np.all(nodes <= 1):                         # inside a node: the NVLink value, nothing to mix
        return np.full(nodes.shape, u_node)
    node, net, lat_node, lat_net = parts
    node = node * np.where(nodes > 1, (k - 1) / np.maximum(k, 1), 1.0)   # the bytes that cross NVLink
    per_byte = u_node * _network_byte_ratio(hw)
    busy = u_node * node + np.maximum(hw.overlap_slowdown_inter * (net + lat_node + lat_net), per_byte * net)
    total = _collective_total(parts)
    return np.where(nodes > 1, np.minimum(busy / np.maximum(total, 1e-300), 1.0), u_node)


def _network_byte_ratio(hw: HardwareSpec):
    """W_net/W_node: how much longer the in-node fabric would take to move a byte the network moves."""
    w_node, w_net = _bandwidths(hw)
    return w_net / w_node


def _bandwidths(hw: HardwareSpec):
    """(in-node, network) achievable bandwidth per GPU per direction, the in-node one over all of a GPU's links."""
    return (hw.intra_bw_bytes_per_s * hw.intra_busbw_efficiency,
            hw.inter_bw_bytes_per_s * hw.inter_busbw_efficiency)


def node_bandwidth(k, hw: HardwareSpec):
    """Achievable in-node bandwidth per GPU for traffic among k GPUs of one node (k = 2: a point-to-point send).
    Behind a switch (NVSwitch) any peer is reached at the GPU's full bandwidth. On a full mesh (MI300X: one
    Infinity Fabric link to each of the n − 1 other GPUs) a group of k uses k − 1 of the n − 1 links: RCCL's
    measured busbw is 316.82 GB/s on 8 MI300X (7 links) and 47.67 GB/s on 2 (one link; this model: 45.4)."""
    w_node = _bandwidths(hw)[0]
    if hw.intra_topology != "mesh":
        return np.full(np.shape(k), w_node) if np.ndim(k) else w_node
    links = max(hw.gpus_per_node - 1, 1)
    return w_node * np.clip(np.asarray(k, dtype=float) - 1, 1, links) / links


def _latency_parts(k, nodes, hw: HardwareSpec, rounds, tree):
    """NCCL's tuner latency (tuning.cc), (in-node, network): base + steps x per-step latency; `rounds` is 1 for
    RS/AG, 2 for all-reduce. A ring of k·M ranks takes rounds·(k·M − 1) steps, rounds·(M − 1) of them across nodes
    and the rest, rounds·M·(k − 1), on NVLink; the double binary tree (all-reduce across nodes, `tree`) takes
    rounds·(k − 1) NVLink steps and rounds·floor(log2 M) network steps. The lower latency is taken; NCCL's tuner
    also weighs bandwidth, but here both algorithms move their bytes at the ring's bus bandwidth, so across nodes
    an all-reduce gets the tree's latency. The launch goes with the first phase (the network's when the group has
    one GPU per node)."""
    k, nodes = np.asarray(k), np.asarray(nodes)
    intra, inter = hw.intra_step_latency_s, hw.inter_step_latency_s
    ring_node, ring_net = rounds * nodes * (k - 1) * intra, rounds * (nodes - 1) * inter
    if tree:
        tree_node = rounds * (k - 1) * intra
        tree_net = rounds * np.floor(np.log2(np.maximum(nodes, 1))) * inter      # tuning.cc's log2i
        use_tree = tree_node + tree_net < ring_node + ring_net
        ring_node, ring_net = np.where(use_tree, tree_node, ring_node), np.where(use_tree, tree_net, ring_net)
    base = hw.collective_base_latency_s
    return np.where(k > 1, base, 0.0) + ring_node, np.where(k > 1, 0.0, base) + ring_net


def _phase_times(nbytes, span, hw: HardwareSpec, count, rounds):
    """(in-node, network) bandwidth time of a collective of S bytes in `count` calls over k GPUs on each of M nodes,
    each slowed for small calls (see below).

    Inside one node: the ring's rounds·(k−1)/k·S/W_node (formulas.md §4.1). Across nodes NCCL's ring runs through
    the node's k GPUs and out over their k NICs: every GPU moves rounds·(n−1)/n·S (n = k·M), 1/k of it over its NIC,
    and a node's NICs carry one GPU's worth, so the network takes rounds·(n−1)/n·S/(k·W_net). The chunks stream
    through NVLink and the NICs at once, so the slower sets the time (the scaling book's max(S/W_gpu_egress,
    S/W_node_egress), formulas.md §4.3), each GPU's side at most at its one-node ring rate: rounds·(n−1)/n·S/W_node
    when k > 1 (no NVLink with one member per node). The bus bandwidth min(k·W_net, W_node) reproduces the
    measured multi-node ring busbw of hardware.md §3 (DGX A100 ~192 GB/s; 4 x 8 H200 364.7; 4 x 8 B200 381.8;
    248 x 8 H200 ~350), never above the one-node figure (as measured), where running the two phases one after the
    other priced 115-300 GB/s (_collective_total). On a full mesh a group of k < n per node has only k − 1 links
    (node_bandwidth), which carry the (k−1)/k of a GPU's bytes that stay in the node: its fabric side is
    rounds·(n−1)/n·(k−1)/k·S over those links, or the whole-node rate above if that is slower (behind a switch it
    always is). The overlap slowdown charges each link's bytes (_slowdown): only (k−1)/k of them cross NVLink, and
    the GPU copies and reduces the same bytes whether or not the links run at once."""
    k, nodes = span
    (w_full, w_net), w_node = _bandwidths(hw), node_bandwidth(k, hw)
    s = np.asarray(nbytes, dtype=float)
    call = s / np.maximum(count, 1)
    n = k * nodes
    across = nodes > 1
    # seconds per byte of a GPU's ring traffic on the in-node side when the group spans nodes
    fabric = np.maximum((k - 1) / np.maximum(k, 1) / w_node, 1.0 / w_full)
    node = rounds * np.where(across, np.where(k > 1, (n - 1) / n * fabric, 0.0), (k - 1) / k / w_node) * s
    net = np.where(across, rounds * (n - 1) / n * s / (k * w_net), 0.0)
    if hw.intra_half_bw_bytes:                 # the bundled profiles leave both at 0 (the plateau)
        node = node * (1 + hw.intra_half_bw_bytes / np.maximum(call, 1.0))
    if hw.inter_half_bw_bytes:
        net = net * (1 + hw.inter_half_bw_bytes / np.maximum(call / k, 1.0))
    return node, net


def _collective_time_s(nbytes, size, stride, hw: HardwareSpec, count, hierarchical, rounds, span=None):
    """rounds = 1: reduce-scatter or all-gather; 2: all-reduce (RS + AG, tree latency across nodes).

    Each call moves S/count bytes. NCCL reaches its plateau bandwidth only for large messages (a 58 MB all-reduce
    on 8 H100s gets ~150 of ~370 GB/s, scaling book "GPUs"; formulas.md §4.2), so a profile may set a
    half-bandwidth size H per fabric (`half_bandwidth_mb`): the bus bandwidth then falls as W·x/(x + H) for a call
    of x bytes at that level (S/count inside the node, S/(k·count) across nodes). The bundled profiles leave H at
    0, the plateau: the references hold no measured curve per fabric, so collectives of a few MB are optimistic.
    """
    size = checked_array(size, "size", whole=True)               # 1: no collective (0 s); 0 or less: an error
    checked_array(nbytes, "nbytes", 0)
    span = span if span is not None else _span(size, stride, hw, hierarchical)
    return np.where(np.asarray(size) > 1, _collective_total(_collective_parts(nbytes, span, hw, count, rounds)), 0.0)


def _collective_total(parts):
    """A collective's time from its parts: the in-node and network phases stream at once (the slower sets the pace,
    _phase_times), then the step latencies."""
    node, net, lat_node, lat_net = parts
    return np.maximum(node, net) + lat_node + lat_net


def _collective_parts(nbytes, span, hw: HardwareSpec, count, rounds):
    """(in-node bandwidth, network bandwidth, in-node latency, network latency) time of a collective, s."""
    k, nodes = span
    node, net = _phase_times(nbytes, span, hw, count, rounds)
    lat_node, lat_net = _latency_parts(k, nodes, hw, rounds, rounds == 2)
    return node, net, count * lat_node, count * lat_net


def overlapped_collective(nbytes, size, stride, hw: HardwareSpec, count=1, rounds=1, span=None, hierarchical=True):
    """(time, overlap_slowdown) of one collective from one set of terms: rounds 1 for a reduce-scatter or an
    all-gather, 2 for an all-reduce (the time as reduce_scatter_time_s / all_reduce_time_s)."""
    span = span if span is not None else _span(size, stride, hw, hierarchical)
    parts = _collective_parts(nbytes, span, hw, count, rounds)
    return np.where(np.asarray(size) > 1, _collective_total(parts), 0.0), _slowdown(parts, span, hw)


def reduce_scatter_time_s(nbytes, size, stride, hw: HardwareSpec, count=1, hierarchical=True, span=None):
    """Reduce-scatter (or all-gather: same cost) of S bytes in total over `size` ranks, issued as `count` calls.

    Across M nodes of k members (n = k·M): max((n−1)/n·S/W_node, (n−1)/n·S/(k·W_net)), NVLink and the NICs
    streaming at once (_phase_times; formulas.md §4.1, §4.3).
    A topology-unaware ring (hierarchical=False) crosses the network at every step: k = 1 once the group leaves a node.
    """
    return _collective_time_s(nbytes, size, stride, hw, count, hierarchical, 1, span)


all_gather_time_s = reduce_scatter_time_s


def all_reduce_time_s(nbytes, size, stride, hw: HardwareSpec, count=1, hierarchical=True, span=None):
    """All-reduce = reduce-scatter + all-gather: 2(n−1)/n·S/W, across nodes as reduce_scatter_time_s (formulas.md
    §4.1, §4.3)."""
    return _collective_time_s(nbytes, size, stride, hw, count, hierarchical, 2, span)


def ring_exchange_time_s(nbytes, size, stride, hw: HardwareSpec, world=None):
    """A ring of point-to-point steps that circulates `size` chunks of S/size bytes (Ring Attention; Megatron-Core
    context parallelism): size − 1 steps, each as slow as the slowest link of the ring, which is a NIC once the group
    leaves its node (every step waits for the rank that sends across the boundary, so the node's other NICs do not
    help, unlike a hierarchical all-gather)."""
    size = checked_array(size, "size", whole=True)
    _, nodes = group_span(size, stride, hw.gpus_per_node, world)
    bw, lat = _ring_parts(nbytes, size, nodes > 1, hw)
    return np.where(size > 1, bw + lat, 0.0)


def _ring_parts(nbytes, size, cross, hw: HardwareSpec):
    """(bandwidth, latency) time of a ring exchange: (size − 1)·S/size/W over the slowest hop, and the launch plus
    size − 1 step latencies."""
    w_node, w_net = node_bandwidth(2, hw), _bandwidths(hw)[1]       # each step goes to one neighbour
    steps = np.maximum(np.asarray(size) - 1, 0)
    bw = steps * np.asarray(nbytes, dtype=float) / np.maximum(size, 1) / np.where(cross, w_net, w_node)
    lat = hw.collective_base_latency_s + steps * np.where(cross, hw.inter_step_latency_s, hw.intra_step_latency_s)
    return bw, lat


def p2p_time_s(nbytes, cross_node, hw: HardwareSpec):
    """One point-to-point send of S bytes: latency + S/W over NVLink (one link on a mesh) or, between nodes, the
    GPU's NIC."""
    w_node, w_net = node_bandwidth(2, hw), _bandwidths(hw)[1]
    cross = np.asarray(cross_node, dtype=bool)
    bw = np.where(cross, w_net, w_node)
    lat = hw.collective_base_latency_s + np.where(cross, hw.inter_step_latency_s, hw.intra_step_latency_s)
    return lat + np.asarray(nbytes, dtype=float) / bw
