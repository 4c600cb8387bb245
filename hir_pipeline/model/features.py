"""Global per-node input features of the graph transformer (indexed by ``graph_nodes.node_idx``)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from hir_pipeline.model.history import NeighbourHistory


def hash_id_buckets(entity_ids: Sequence[str], num_buckets: int) -> Tensor:
    """Stable hashed-ID bucket of each entity id (blake2b, 8 bytes, mod ``num_buckets``).

    Python's ``hash`` is salted per process; blake2b gives the same bucket in every run and on every host.

    Args:
        entity_ids: entity id strings.
        num_buckets: number of buckets.
    """
    out = np.empty(len(entity_ids), dtype=np.int64)
    for i, eid in enumerate(entity_ids):
        digest = hashlib.blake2b(str(eid).encode("utf-8"), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") % num_buckets
    return torch.from_numpy(out)


def id_rows(entity_ids: Sequence[str], has_history: np.ndarray, num_rows: int, exact: bool = True) -> Tensor:
    """ID-table row of each node: exact while the nodes with history fit in ``num_rows``, hashed beyond.

    Exact: the ``H <= num_rows`` nodes with history get rows ``0..H-1`` in ``node_idx`` order (no collisions).
    Otherwise (or with ``exact=False``) every node gets :func:`hash_id_buckets`. Nodes without history get row 0
    in exact mode; the model never reads their ID row.

    Args:
        entity_ids: entity id per node.
        has_history: bool ``[N]``.
        num_rows: rows of the ID table (``ModelConfig.id_buckets``).
        exact: allow exact rows.
    """
    hist = np.asarray(has_history, dtype=bool)
    if exact and int(hist.sum()) <= num_rows:
        rows = np.zeros(len(hist), dtype=np.int64)
        rows[hist] = np.arange(int(hist.sum()))
        return torch.from_numpy(rows)
    return hash_id_buckets(entity_ids, num_rows)


class NodeColumns(NamedTuple):
    """The ``graph_nodes`` columns :meth:`NodeFeatures.from_arrays` reads, rows ordered by ``node_idx``.

    Args:
        entity_ids: entity id per node (hashed into the ID table, :func:`id_rows`).
        node_type: ``graph_nodes.node_type``, index into ``ENTITY_TYPES``.
        degree_bucket: ``graph_nodes.degree_bucket``.
        has_history: ``graph_nodes.has_history``.
    """

    entity_ids: Sequence[str]
    node_type: Sequence[int] | np.ndarray
    degree_bucket: Sequence[int] | np.ndarray
    has_history: Sequence[bool] | np.ndarray


@dataclass
class NodeFeatures:
    """Per-node features for all ``N`` nodes of the graph.

    Args:
        node_type: long ``[N]``, index into ``ENTITY_TYPES``.
        degree_bucket: long ``[N]``, ``0..DEGREE_BUCKETS-1``.
        has_history: bool ``[N]``, took part in any event edge (only those get an ID embedding).
        id_bucket: long ``[N]``, row of the node in the ID and history tables (:func:`id_rows`).
        content: float ``[N, Dc]`` pretrained content embeddings (zero rows where absent).
        has_content: bool ``[N]``.
        structure: float ``[N, Ds]`` graph-wide structure embeddings (``graph_nodes.structure_embedding``; zero
            rows where absent, ``Ds`` may be 0).
        history: each node's engagement neighbours (pooled into its token), or ``None``.
    """

    node_type: Tensor
    degree_bucket: Tensor
    has_history: Tensor
    id_bucket: Tensor
    content: Tensor
    has_content: Tensor
    structure: Tensor
    history: NeighbourHistory | None = None

    @classmethod
    def from_arrays(
        cls,
        nodes: NodeColumns,
        id_buckets: int,
        content: np.ndarray | Tensor | None = None,
        has_content: Sequence[bool] | np.ndarray | None = None,
        content_dim: int | None = None,
        exact_ids: bool = True,
        structure: np.ndarray | Tensor | None = None,
    ) -> NodeFeatures:
        """Build from columns of ``graph_nodes`` (and ``content_embeddings``), rows ordered by ``node_idx``.

        The result has no engagement history; :meth:`with_history` adds it.

        Args:
            nodes: the ``graph_nodes`` columns.
            id_buckets: rows of the ID table (``ModelConfig.id_buckets``).
            content: ``[N, Dc]`` content embeddings, or ``None`` (then ``content_dim`` zero columns).
            has_content: which rows of ``content`` are real; default: non-zero rows.
            content_dim: ``Dc`` when ``content`` is ``None``.
            exact_ids: exact ID rows while the nodes with history fit (:func:`id_rows`).
            structure: ``[N, Ds]`` structure embeddings (zero rows where absent), or ``None`` (``Ds = 0``).
        """
        n = len(nodes.entity_ids)
        if content is None:
            content_t = torch.zeros(n, content_dim or 0)
        else:
            content_t = torch.as_tensor(np.asarray(content, dtype=np.float32))
        if has_content is None:
            has_content_t = content_t.abs().sum(-1) > 0
        else:
            has_content_t = torch.as_tensor(np.asarray(has_content, dtype=bool))
        has_history = np.asarray(nodes.has_history, dtype=bool)
        return cls(
            node_type=torch.as_tensor(np.asarray(nodes.node_type, dtype=np.int64)),
            degree_bucket=torch.as_tensor(np.asarray(nodes.degree_bucket, dtype=np.int64)),
            has_history=torch.as_tensor(has_history),
            id_bucket=id_rows(nodes.entity_ids, has_history, id_buckets, exact_ids),
            content=content_t * has_content_t[:, None].to(content_t.dtype),
            has_content=has_content_t,
            structure=torch.zeros(n, 0) if structure is None else torch.as_tensor(
                np.asarray(structure, dtype=np.float32)),
        )

    @property
    def num_nodes(self) -> int:
        return int(self.node_type.numel())

    def with_history(self, engagement: tuple[np.ndarray, np.ndarray, np.ndarray],
                     max_neighbours: int = 0) -> NodeFeatures:
        """A copy whose history is built from ``engagement`` (see :meth:`NeighbourHistory.from_engagement`).

        Args:
            engagement: ``(user_idx, item_idx, weight)`` pairs.
            max_neighbours: cap of each node's history (``ModelConfig.history_max_neighbours``); 0 = all.
        """
        users, items, weights = (np.asarray(a) for a in engagement)
        history = NeighbourHistory.from_engagement(users, items, weights, self.num_nodes, max_neighbours)
        return dataclasses.replace(self, history=history)

    def to(self, device: torch.device | str) -> NodeFeatures:
        return NodeFeatures(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                               for f in fields(self)})
