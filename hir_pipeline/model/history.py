"""A node is its history: funnel-weighted pooling over each node's engagement neighbours (SVD++, Koren 2008;
FISM, Kabbur et al. 2013).

:class:`NeighbourHistory` holds every node's engagement neighbours as CSR arrays, built once from the
``(user, item, weight)`` engagement pairs (a user's neighbours are its items, an item's its users, weights
summed over duplicate pairs), optionally capped to the heaviest neighbours. :func:`pooled_history` computes
``pool(v) = sum_j w_vj * T[j] / sum_j w_vj`` for the nodes of a batch with one
``torch.nn.functional.embedding_bag`` per table, and can leave one neighbour out of a token's pool
(subtracting its term and renormalising): the engagement pair scored in a training step must not be visible
in the pools of its own two ends, or the model would learn to read the answer off the input.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class NeighbourHistory:
    """Engagement neighbours of every node, CSR rows sorted by neighbour.

    Args:
        offsets: long ``[N + 1]``; node ``v``'s neighbours are ``neighbours[offsets[v]:offsets[v + 1]]``.
        neighbours: long ``[E]`` neighbour node indices.
        weights: float32 ``[E]`` summed funnel weight of each (node, neighbour) pair, > 0.
        keys: long ``[E]`` ``owner * N + neighbour`` of each entry, ascending (pair look-ups).
        total: float32 ``[N]`` sum of each node's kept weights (0 for nodes without history).
    """

    offsets: Tensor
    neighbours: Tensor
    weights: Tensor
    keys: Tensor
    total: Tensor

    @classmethod
    def from_engagement(cls, users: np.ndarray, items: np.ndarray, weights: np.ndarray, num_nodes: int,
                        max_neighbours: int = 0) -> NeighbourHistory:
        """Build from engagement pairs (both directions).

        Args:
            users: int ``[P]`` user node of each pair.
            items: int ``[P]`` item node of each pair.
            weights: float ``[P]`` funnel weight of each pair; pairs of weight <= 0 are ignored.
            num_nodes: ``N``.
            max_neighbours: keep each node's ``max_neighbours`` heaviest neighbours (ties: lowest index); 0 = all.
        """
        u = np.asarray(users, dtype=np.int64)
        i = np.asarray(items, dtype=np.int64)
        w = np.asarray(weights, dtype=np.float64)
        keep = w > 0
        owner = np.concatenate([u[keep], i[keep]])
        nbr = np.concatenate([i[keep], u[keep]])
        w2 = np.concatenate([w[keep], w[keep]])
        if len(owner) and not (min(owner.min(), nbr.min()) >= 0 and max(owner.max(), nbr.max()) < num_nodes):
            raise ValueError("engagement pair outside the node range")
        key, inverse = np.unique(owner * num_nodes + nbr, return_inverse=True)
        wsum = np.bincount(inverse, weights=w2, minlength=len(key))
        owner, nbr = key // max(num_nodes, 1), key % max(num_nodes, 1)
        if max_neighbours > 0 and len(key):
            order = np.lexsort((nbr, -wsum, owner))  # per owner: heaviest first, then lowest neighbour index
            first = np.searchsorted(owner[order], owner[order], side="left")
            kept = np.sort(order[np.arange(len(order)) - first < max_neighbours])
            key, owner, nbr, wsum = key[kept], owner[kept], nbr[kept], wsum[kept]
        counts = np.bincount(owner, minlength=num_nodes)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        total = np.bincount(owner, weights=wsum, minlength=num_nodes)
        return cls(offsets=torch.from_numpy(offsets.astype(np.int64)), neighbours=torch.from_numpy(nbr),
                   weights=torch.from_numpy(wsum.astype(np.float32)), keys=torch.from_numpy(key),
                   total=torch.from_numpy(total.astype(np.float32)))

    @property
    def num_nodes(self) -> int:
        return int(self.offsets.numel()) - 1

    def to(self, device: torch.device | str) -> NeighbourHistory:
        return NeighbourHistory(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def entries(self, nodes: Tensor) -> tuple[Tensor, Tensor]:
        """``(flat entry index [E'], bag offsets [len(nodes)])`` of the neighbour lists of ``nodes``, concatenated."""
        start = self.offsets[nodes]
        length = self.offsets[nodes + 1] - start
        bag_offsets = torch.cumsum(length, 0) - length
        total = int(length.sum())
        within = torch.arange(total, device=nodes.device) - torch.repeat_interleave(bag_offsets, length,
                                                                                   output_size=total)
        return torch.repeat_interleave(start, length, output_size=total) + within, bag_offsets

    def pair_weight(self, owner: Tensor, neighbour: Tensor) -> Tensor:
        """Weight of ``neighbour`` in ``owner``'s (capped) history, 0 where it is not there."""
        if self.keys.numel() == 0:
            return torch.zeros(owner.shape, dtype=self.weights.dtype, device=owner.device)
        query = owner * self.num_nodes + neighbour
        pos = torch.searchsorted(self.keys, query).clamp_max(self.keys.numel() - 1)
        return torch.where(self.keys[pos] == query, self.weights[pos], torch.zeros_like(self.weights[pos]))


def pooled_history(history: NeighbourHistory, node_idx: Tensor, tables: list[tuple[Tensor, Tensor | None]],
                   exclude: Tensor | None = None) -> tuple[list[Tensor], Tensor]:
    """Funnel-weighted mean of table rows over each token's neighbours.

    Args:
        history: the neighbour CSR.
        node_idx: long ``[S]`` node of each token.
        tables: ``(table [R, D], row_of_node long [N] or None)`` pairs: neighbour ``j`` reads
            ``table[row_of_node[j]]`` (``table[j]`` when ``None``).
        exclude: long ``[S]`` neighbour left out of each token's pool (-1: none), e.g. the other end of the
            engagement pair a training view is scored on.

    Returns:
        ``(pools, has_pool)``: per table ``[S, D]`` pooled rows (zero where the token's pool is empty) and bool
        ``[S]`` whether it is not.
    """
    uniq, inverse = torch.unique(node_idx, return_inverse=True)
    entry, bag_offsets = history.entries(uniq)
    nbr = history.neighbours[entry]
    weight = history.weights[entry]
    den = history.total[node_idx]
    drop_w = drop_node = None
    if exclude is not None:
        has = exclude >= 0
        drop_node = torch.where(has, exclude, torch.zeros_like(exclude))
        drop_w = torch.where(has, history.pair_weight(node_idx, drop_node), torch.zeros_like(den))
        den = den - drop_w
    # Guard the renormalisation against the rounding left when every neighbour was removed.
    has_pool = den > 1e-6 * history.total[node_idx]
    scale = torch.where(has_pool, 1.0 / den.clamp_min(1e-12), torch.zeros_like(den)).unsqueeze(-1)
    pools = []
    for table, row_of_node in tables:
        rows = nbr if row_of_node is None else row_of_node[nbr]
        summed = F.embedding_bag(rows, table, bag_offsets, mode="sum", per_sample_weights=weight.to(table.dtype))
        summed = summed[inverse]
        if drop_w is not None:
            drop_rows = drop_node if row_of_node is None else row_of_node[drop_node]
            summed = summed - drop_w.unsqueeze(-1).to(table.dtype) * table[drop_rows]
        pools.append(summed * scale.to(table.dtype))
    return pools, has_pool


def pair_exclusions(node_idx: Tensor, view_id: Tensor, view_user: Tensor, view_item: Tensor) -> Tensor:
    """Per token, the neighbour to leave out of its pool when views are scored on engagement pairs.

    In a view scored on pair ``(u, i)`` every token of ``u`` leaves ``i`` out of its pool and every token of ``i``
    leaves ``u`` out, whichever of the two anchors the view.

    Args:
        node_idx: long ``[S]`` node of each token.
        view_id: int ``[S]`` view of each token (``PackedLayout.view_id``; padding tokens may point one past
            the last view).
        view_user: long ``[V]`` user of the pair each view is scored on (-1: none).
        view_item: long ``[V]`` item of that pair (-1: none).

    Returns:
        long ``[S]`` neighbour to leave out (-1: none), for ``PackedBatch.history_exclude``.
    """
    pad = torch.full((1,), -1, dtype=torch.long, device=node_idx.device)
    vid = view_id.long()
    user = torch.cat([view_user.long(), pad])[vid.clamp_max(len(view_user))]
    item = torch.cat([view_item.long(), pad])[vid.clamp_max(len(view_item))]
    none = torch.full_like(node_idx, -1)
    out = torch.where((user >= 0) & (node_idx == user), item, none)
    return torch.where((item >= 0) & (node_idx == item), user, out)
