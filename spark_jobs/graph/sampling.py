"""Per-batch kernels of the views stage: weighted hop-by-hop sampling, induced edges and structure in numpy.

The graph is held as flat CSR arrays (:class:`ViewGraph`): the hub-capped sampling adjacency of
:func:`spark_jobs.graph.views.sampling_adjacency` and the degree-oriented pairs of
:func:`spark_jobs.graph.views.oriented_pairs`, both indexed by ``node_idx``. Every function here works on a
*batch* of anchors at once with whole-array numpy operations (gathers of CSR slices, lexsorts, searchsorted
membership tests), so the Python overhead is per batch, not per candidate.

Sampling keys are Efraimidis-Spirakis keys ``-ln(u) / w`` with ``u`` from a splitmix64 mix (Steele, Lea &
Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014) of ``(seed, view, anchor hash, hop,
neighbour hash)``; the hashes are ``xxhash64(entity_id)`` computed by Spark, so a key depends on entity ids
only (not on node indices, batches or partitions).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from spark_jobs.graph.structure import batch_structure

#: Version of the sampling scheme (hashes, keys, tie-breaking). Part of the ``graph_views`` settings fingerprint
#: (``spark_jobs.graph.snapshots.views_fingerprint``): views drawn by another version differ, so an increment must
#: not carry them over next to freshly sampled ones.
SAMPLER_VERSION = "splitmix64-es-2"

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 output for state ``x`` (elementwise, wrapping ``uint64`` arithmetic).

    ``mix64(0) == 0xE220A8397B1DCDAF``, the first output of splitmix64 seeded with 0.
    """
    z = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def view_code(view: str) -> int:
    """A fixed 64-bit code of a view name (BLAKE2b; Python's ``hash`` of a str is salted per process)."""
    return int.from_bytes(hashlib.blake2b(view.encode(), digest_size=8).digest(), "little")


def unit_interval(h: np.ndarray) -> np.ndarray:
    """A uniform number in (0, 1) from each 64-bit hash, as ``float64``.

    The 52 high bits, centred: ``(m + 0.5) / 2**52`` is exact, so 0 and 1 never occur (``-ln(u)`` stays finite
    and positive).
    """
    return ((np.asarray(h, dtype=np.uint64) >> np.uint64(12)).astype(np.float64) + 0.5) / float(2**52)


def _as_u64(a: np.ndarray) -> np.ndarray:
    """Reinterpret signed 64-bit hashes as unsigned (same bits)."""
    return np.ascontiguousarray(a, dtype=np.int64).view(np.uint64)


def hop_prefix(seed: int, view: str, anchor_hash: np.ndarray, hop: int) -> np.ndarray:
    """Hash state of ``(seed, view, anchor, hop)``, one per anchor; :func:`sample_keys` mixes in the neighbour."""
    base = mix64(np.array([(seed & _MASK64) ^ view_code(view)], dtype=np.uint64))
    return mix64(mix64(base ^ _as_u64(anchor_hash)) ^ np.uint64(hop))


def sample_keys(prefix: np.ndarray, neighbour_hash: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Efraimidis-Spirakis keys ``-ln(u) / w``: the ``k`` smallest are a weighted sample without replacement."""
    u = unit_interval(mix64(prefix ^ _as_u64(neighbour_hash)))
    return -np.log(u) / np.asarray(weight, dtype=np.float64)


class NodeRows(NamedTuple):
    """``graph_nodes`` rows of :meth:`ViewGraph.from_arrays`, in any order (``node_idx`` dense).

    Attributes:
        node_idx: node index of each row.
        node_hash: ``xxhash64(entity_id)`` of each row (``int64``).
        node_type: ``graph_nodes.node_type`` of each row.
    """

    node_idx: np.ndarray
    node_hash: np.ndarray
    node_type: np.ndarray


class AdjacencyRows(NamedTuple):
    """Sampling-adjacency rows of :meth:`ViewGraph.from_arrays`, in any order (each ``(src, dst)`` at most once).

    Attributes:
        src, dst: the entry's node and neighbour (``node_idx``).
        w: sampling weight.
        capped: ``src`` had more than ``hub_cap`` neighbours.
    """

    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray
    capped: np.ndarray


class PairRows(NamedTuple):
    """Oriented-pair rows of :meth:`ViewGraph.from_arrays`, in any order (each ``(src, dst)`` at most once).

    Attributes:
        src, dst: the pair from its lower-degree endpoint ``src`` (``node_idx``).
        fwd, bwd: highest edge type id of each direction (0 if absent).
    """

    src: np.ndarray
    dst: np.ndarray
    fwd: np.ndarray
    bwd: np.ndarray


@dataclass(frozen=True)
class ViewGraph:
    """The graph the views are drawn from, as CSR arrays over ``node_idx`` in ``0..N-1``.

    Memory: ``10 N`` bytes of node arrays, 12 bytes per sampling-adjacency entry (at most ``N * hub_cap``)
    and 6 bytes per undirected connected pair (12 if edge type ids exceed 255), plus two ``8 (N + 1)`` offset
    arrays.

    Attributes:
        node_hash: ``xxhash64(entity_id)`` of every node (``int64``).
        node_type: ``graph_nodes.node_type`` (``int8``).
        adj_ptr, adj_dst, adj_w: the sampling adjacency (``int64`` offsets, ``int32`` neighbours, ``float64``
            weights), neighbours of ``i`` at ``adj_ptr[i]:adj_ptr[i + 1]``, sorted by neighbour.
        capped: the node had more than ``hub_cap`` neighbours (``bool``).
        pair_ptr, pair_dst, pair_fwd, pair_bwd: each undirected pair once, from its lower-degree endpoint, with
            the highest edge type id of each direction (0 if absent; ``uint8``, or ``int32`` when ids exceed 255
            so that :func:`~spark_jobs.graph.structure.batch_structure` reports them).
    """

    node_hash: np.ndarray
    node_type: np.ndarray
    adj_ptr: np.ndarray
    adj_dst: np.ndarray
    adj_w: np.ndarray
    capped: np.ndarray
    pair_ptr: np.ndarray
    pair_dst: np.ndarray
    pair_fwd: np.ndarray
    pair_bwd: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.node_hash)

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f.name).nbytes for f in fields(self))

    @classmethod
    def from_arrays(cls, nodes: NodeRows, adjacency: AdjacencyRows, pairs: PairRows) -> ViewGraph:
        """Build the CSR arrays from row lists in any order (node_idx dense; each (src, dst) at most once).

        Args:
            nodes: the node rows.
            adjacency: the sampling-adjacency rows.
            pairs: the oriented-pair rows (empty arrays when structure is not needed).
        """
        node_idx = np.asarray(nodes.node_idx, dtype=np.int64)
        n = int(node_idx.max()) + 1 if len(node_idx) else 0
        hashes = np.zeros(n, dtype=np.int64)
        hashes[node_idx] = nodes.node_hash
        types = np.zeros(n, dtype=np.int8)
        types[node_idx] = nodes.node_type
        adj_ptr, order = _csr(n, adjacency.src, adjacency.dst)
        capped = np.zeros(n, dtype=bool)
        capped[np.asarray(adjacency.src, dtype=np.int64)] = np.asarray(adjacency.capped, dtype=bool)
        pair_ptr, porder = _csr(n, pairs.src, pairs.dst)
        fwd, bwd = np.asarray(pairs.fwd), np.asarray(pairs.bwd)
        type_dtype = np.uint8 if max(fwd.max(initial=0), bwd.max(initial=0)) <= 255 else np.int32
        return cls(
            node_hash=hashes, node_type=types,
            adj_ptr=adj_ptr, adj_dst=np.asarray(adjacency.dst, dtype=np.int32)[order],
            adj_w=np.asarray(adjacency.w, dtype=np.float64)[order], capped=capped,
            pair_ptr=pair_ptr, pair_dst=np.asarray(pairs.dst, dtype=np.int32)[porder],
            pair_fwd=fwd.astype(type_dtype)[porder], pair_bwd=bwd.astype(type_dtype)[porder],
        )


def edges_among(src: np.ndarray, dst: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Mask of the edge rows whose two endpoints are nodes (``present[node_idx]``; any other id is not).

    ``graph_edges``' blocking check reports the others (dangling endpoints); the driver-side stages leave them
    out, as a join with the node table would.
    """
    outside = len(present)
    flags = np.r_[np.asarray(present, dtype=bool), False]
    known = flags[np.where((src >= 0) & (src < outside), src, outside)]
    return known & flags[np.where((dst >= 0) & (dst < outside), dst, outside)]


def sampling_adjacency(
    src: np.ndarray, dst: np.ndarray, weight: np.ndarray, node_hash: np.ndarray, hub_cap: int, seed: int
) -> AdjacencyRows:
    """Candidate neighbours of every node: at most ``hub_cap``, its own seeded weighted sample.

    Multi-edges between a pair are merged (weights add up); self-loops are dropped (a node never samples
    itself). A node keeps the ``hub_cap`` neighbours of smallest Efraimidis-Spirakis key (ties by ``node_idx``),
    keyed like a view's hop (:func:`hop_prefix` of the view name ``"pool"``, hop 0) from the entity-id hashes.

    Args:
        src, dst, weight: ``graph_edges`` rows between known nodes (:func:`edges_among`).
        node_hash: ``xxhash64(entity_id)`` by ``node_idx``.
        hub_cap: candidates kept per node.
        seed: sampling seed.
    """
    n = len(node_hash)
    loop = src == dst
    w = sp.csr_matrix((np.asarray(weight, dtype=np.float64)[~loop], (src[~loop], dst[~loop])), shape=(n, n))
    w.sum_duplicates()  # rows by node, neighbours ascending, a pair's weights summed
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(w.indptr))
    key = sample_keys(hop_prefix(seed, "pool", node_hash, 0)[row], node_hash[w.indices], w.data)
    order = np.lexsort((key, row))  # stable: equal keys stay in neighbour order
    rank = np.arange(len(order)) - w.indptr[row[order]]
    keep = order[rank < hub_cap]
    return AdjacencyRows(row[keep], w.indices[keep].astype(np.int64), w.data[keep],
                         (np.diff(w.indptr) > hub_cap)[row[keep]])


def oriented_pairs(src: np.ndarray, dst: np.ndarray, type_id: np.ndarray) -> PairRows:
    """Each undirected connected pair once, from the endpoint of lower (degree, node_idx).

    Args:
        src, dst, type_id: ``graph_edges`` rows between known nodes (:func:`edges_among`); a node's degree is its
            number of rows, as in ``graph_nodes.degree``.

    Returns:
        The pairs with the highest edge type id of each direction (0 if absent).
    """
    degree = np.bincount(src, minlength=int(max(src.max(initial=-1), dst.max(initial=-1))) + 1)
    loop = src == dst
    src, dst, type_id = src[~loop], dst[~loop], np.asarray(type_id, dtype=np.int64)[~loop]
    lo_first = (degree[src] < degree[dst]) | ((degree[src] == degree[dst]) & (src < dst))
    a, b = np.where(lo_first, src, dst), np.where(lo_first, dst, src)  # a row's pair, from its first endpoint
    pair = a * len(degree) + b
    order = np.argsort(pair, kind="stable")
    a, b, type_id, forward = a[order], b[order], type_id[order], lo_first[order]
    starts = _group_starts(pair[order])
    fwd = np.maximum.reduceat(np.where(forward, type_id, 0), starts) if len(starts) else np.zeros(0, np.int64)
    bwd = np.maximum.reduceat(np.where(forward, 0, type_id), starts) if len(starts) else np.zeros(0, np.int64)
    return PairRows(a[starts], b[starts], fwd, bwd)


def _csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of rows grouped by ``src`` and the permutation sorting rows by ``(src, dst)``."""
    src = np.asarray(src, dtype=np.int64)
    order = np.argsort(src * max(n, 1) + np.asarray(dst, dtype=np.int64), kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, order


def _gather(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR entries of ``rows``: ``(owner, entry)``, owner indexing ``rows``, entries in row order."""
    starts = ptr[rows]
    counts = ptr[rows + 1] - starts
    owner = np.repeat(np.arange(len(rows)), counts)
    offsets = np.cumsum(counts) - counts
    entry = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(offsets - starts, counts)
    return owner, entry


def _contains(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which ``keys`` occur in ``sorted_keys``, and where (valid where found)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), dtype=bool), np.zeros(len(keys), dtype=np.int64)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[at] == keys, at


def _group_starts(sorted_group: np.ndarray) -> np.ndarray:
    """Indices where a new value starts in a sorted array."""
    if len(sorted_group) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])


def _by_slot(slot: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Stable order of the elements by ``slot`` (after ``order``, if given): a radix sort for batch-sized slots."""
    if order is None:
        order = np.arange(len(slot))
    small = slot[order].astype(np.int16) if len(slot) and slot.max() < 2**15 else slot[order]
    return order[np.argsort(small, kind="stable")]


class SampledViews(NamedTuple):
    """Views of a batch of anchors: view ``b`` is ``nodes[ptr[b]:ptr[b + 1]]`` (anchor first)."""

    ptr: np.ndarray  #: int64, ``B + 1`` offsets
    nodes: np.ndarray  #: int64 node indices, ordered by (hop, key, node_idx) within a view
    trunc: np.ndarray  #: bool per member: a cap or fan-out dropped a candidate on its way in, or the view overflowed
    truncated: np.ndarray  #: bool per view: any member's ``trunc``


def sample_batch(
    graph: ViewGraph,
    anchors: np.ndarray,
    fanout: tuple[int, ...],
    *,
    seed: int,
    view: str,
    max_view_nodes: int,
) -> SampledViews:
    """Hop-by-hop weighted samples of one view for a batch of anchors.

    At each hop every frontier node keeps the ``k`` candidates (its sampling-adjacency neighbours not yet in
    the view) with the smallest (key, node_idx); a node kept by several parents is kept once, with its
    smallest key, and the truncation flags of the dropped copies move onto it. A kept node is
    truncated when its parent had more than ``k`` candidates or more than ``hub_cap`` neighbours. The view is
    the anchor then every kept node by (hop, key, node_idx), cut at ``max_view_nodes``.

    Args:
        graph: the CSR graph.
        anchors: node indices (distinct), one view each.
        fanout: neighbours kept per frontier node at each hop.
        seed: sampling seed.
        view: view name (part of the hash: the two views are independent samples).
        max_view_nodes: cap on the nodes of one view, anchor included.
    """
    anchors = np.asarray(anchors, dtype=np.int64)
    b, n = len(anchors), max(graph.num_nodes, 1)
    slots = np.arange(b, dtype=np.int64)
    anchor_hash = graph.node_hash[anchors]
    # one part per hop: (slot, node, key, trunc), each ordered by (slot, key, node_idx)
    parts = [(slots, anchors, np.zeros(b), np.zeros(b, dtype=bool))]
    visited = np.sort(slots * n + anchors)
    for hop, k in enumerate(fanout, start=1):
        f_slot, f_node = parts[-1][0], parts[-1][1]
        if len(f_node) == 0:
            break
        owner, entry = _gather(graph.adj_ptr, f_node)
        c_slot, c_node = f_slot[owner], graph.adj_dst[entry].astype(np.int64)
        # never sample back into the view: a wasted slot, and the node's hop would be ambiguous
        seen, _ = _contains(visited, c_slot * n + c_node)
        owner, entry, c_slot, c_node = owner[~seen], entry[~seen], c_slot[~seen], c_node[~seen]
        key = sample_keys(hop_prefix(seed, view, anchor_hash, hop)[c_slot], graph.node_hash[c_node],
                          graph.adj_w[entry])
        # Per parent (= frontier row) the k smallest (key, node_idx). A row holds the parent's candidates in
        # node order (CSR), so a stable sort of the row by key breaks ties by node_idx; the NaN padding sorts
        # after every real key (NaN ones included, which thus count as the largest).
        per_parent = np.bincount(owner, minlength=len(f_node))
        first = np.cumsum(per_parent) - per_parent
        width = int(per_parent.max(initial=0))
        rows = np.full((len(f_node), width), np.nan)
        rows[owner, np.arange(len(owner)) - first[owner]] = key
        top = np.argsort(rows, axis=1, kind="stable")[:, :k]
        parent, col = np.nonzero(np.arange(top.shape[1]) < per_parent[:, None])
        pick = first[parent] + top[parent, col]
        trunc = (per_parent[parent] > k) | graph.capped[f_node[parent]]
        c_slot, c_node, key = c_slot[pick], c_node[pick], key[pick]
        # A node kept by several parents: once, with its smallest key; the flags of the dropped copies move onto it.
        order = np.argsort(c_slot * n + c_node, kind="stable")
        starts = _group_starts((c_slot * n + c_node)[order])
        if len(starts):
            key = np.fmin.reduceat(key[order], starts)
            trunc = np.logical_or.reduceat(trunc[order], starts)
        c_slot, c_node = c_slot[order[starts]], c_node[order[starts]]
        order = _by_slot(c_slot, np.argsort(key, kind="stable"))  # rows are in node order: ties by node_idx
        parts.append((c_slot[order], c_node[order], key[order], trunc[order]))
        visited = np.sort(np.concatenate([visited, c_slot * n + c_node]))
    slot, node, trunc = (np.concatenate([p[i] for p in parts]) for i in (0, 1, 3))
    order = _by_slot(slot)  # parts are hop by hop, each by (slot, key, node): now (slot, hop, key, node)
    slot, node, trunc = slot[order], node[order], trunc[order]
    size = np.bincount(slot, minlength=b)
    pos = np.arange(len(slot)) - (np.cumsum(size) - size)[slot]
    keep = pos < max_view_nodes
    slot, node, trunc = slot[keep], node[keep], trunc[keep] | (size > max_view_nodes)[slot[keep]]
    ptr = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(np.minimum(size, max_view_nodes), out=ptr[1:])
    truncated = np.bincount(slot[trunc], minlength=b) > 0
    return SampledViews(ptr, node, trunc, truncated)


class InducedEdges(NamedTuple):
    """Edges among each view's nodes: those of view ``b`` at ``ptr[b]:ptr[b + 1]``, by position in the view."""

    ptr: np.ndarray
    src: np.ndarray  #: position of the pair's lower-degree endpoint
    dst: np.ndarray  #: position of the other endpoint
    fwd: np.ndarray  #: highest edge type id src -> dst (0 if absent)
    bwd: np.ndarray  #: highest edge type id dst -> src (0 if absent)


def induced_edges(graph: ViewGraph, views: SampledViews) -> InducedEdges:
    """The connected pairs among each view's nodes, looked up from each member's degree-oriented pair list.

    Each undirected pair is stored once, from its lower-degree endpoint, so a hub member costs only its few
    pairs towards even bigger hubs. The candidate pairs of the whole batch are gathered at once; membership is
    then tested per view with a node -> position scratch array (a few numpy calls per view).
    """
    b = len(views.ptr) - 1
    owner, entry = _gather(graph.pair_ptr, views.nodes)
    cand_ptr = np.searchsorted(owner, views.ptr)  # candidates of view i: cand_ptr[i]:cand_ptr[i + 1]
    other = graph.pair_dst[entry]
    where = np.full(graph.num_nodes, -1, dtype=np.int32)
    hits, pos_other, counts = [], [], np.zeros(b, dtype=np.int64)
    for i in range(b):
        lo, hi = views.ptr[i], views.ptr[i + 1]
        members = views.nodes[lo:hi]
        where[members] = np.arange(hi - lo, dtype=np.int32)
        c_lo, c_hi = cand_ptr[i], cand_ptr[i + 1]
        p = where[other[c_lo:c_hi]]
        found = np.flatnonzero(p >= 0)
        hits.append(found + c_lo)
        pos_other.append(p[found])
        counts[i] = len(found)
        where[members] = -1
    hit = np.concatenate(hits) if hits else np.zeros(0, dtype=np.int64)
    ptr = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    src = owner[hit] - np.repeat(views.ptr[:-1], counts)
    dst = np.concatenate(pos_other).astype(np.int64) if pos_other else np.zeros(0, dtype=np.int64)
    return InducedEdges(ptr, src, dst, graph.pair_fwd[entry[hit]], graph.pair_bwd[entry[hit]])


class ViewRows(NamedTuple):
    """``graph_views`` columns of a batch of views (one list entry per view)."""

    nodes: list[np.ndarray]
    node_types: list[np.ndarray]
    dist: list[bytes]
    edge_types: list[bytes]
    truncated: np.ndarray


def build_view_batch(
    graph: ViewGraph,
    anchors: np.ndarray,
    fanout: tuple[int, ...],
    *,
    seed: int,
    view: str,
    max_view_nodes: int,
    max_dist: int,
) -> ViewRows:
    """Sample one view of every anchor and compute its structure (distances, edge types) on the induced subgraph."""
    views = sample_batch(graph, anchors, fanout, seed=seed, view=view, max_view_nodes=max_view_nodes)
    edges = induced_edges(graph, views)
    dist, edge_types = batch_structure(np.diff(views.ptr), edges.ptr, edges.src, edges.dst, edges.fwd, edges.bwd,
                                       max_dist)
    nodes = [views.nodes[lo:hi] for lo, hi in zip(views.ptr[:-1], views.ptr[1:], strict=True)]
    return ViewRows(nodes, [graph.node_type[m] for m in nodes], [d.tobytes() for d in dist],
                    [t.tobytes() for t in edge_types], views.truncated)
