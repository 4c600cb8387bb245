"""Global per-node input features of the graph transformer (indexed by ``graph_nodes.node_idx``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor


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


@dataclass
class NodeFeatures:
    """Per-node features for all ``N`` nodes of the graph.

    Args:
        node_type: long ``[N]``, index into ``ENTITY_TYPES``.
        degree_bucket: long ``[N]``, ``0..DEGREE_BUCKETS-1``.
        has_history: bool ``[N]``, took part in any event edge (only those get an ID embedding).
        id_bucket: long ``[N]``, hashed id bucket (:func:`hash_id_buckets`).
        content: float ``[N, Dc]`` pretrained content embeddings (zero rows where absent).
        has_content: bool ``[N]``.
        structure: float ``[N, Ds]`` graph-wide structure embeddings (``graph_nodes.structure_embedding``; zero
            rows where absent, ``Ds`` may be 0).
    """

    node_type: Tensor
    degree_bucket: Tensor
    has_history: Tensor
    id_bucket: Tensor
    content: Tensor
    has_content: Tensor
    structure: Tensor

    @classmethod
    def from_arrays(
        cls,
        entity_ids: Sequence[str],
        node_type: Sequence[int] | np.ndarray,
        degree_bucket: Sequence[int] | np.ndarray,
        has_history: Sequence[bool] | np.ndarray,
        id_buckets: int,
        content: np.ndarray | Tensor | None = None,
        has_content: Sequence[bool] | np.ndarray | None = None,
        content_dim: int | None = None,
        structure: np.ndarray | Tensor | None = None,
    ) -> NodeFeatures:
        """Build from columns of ``graph_nodes`` (and ``content_embeddings``), rows ordered by ``node_idx``.

        Args:
            entity_ids: entity id per node (hashed into ``id_buckets``).
            node_type, degree_bucket, has_history: ``graph_nodes`` columns.
            id_buckets: number of hashed-ID buckets (``ModelConfig.id_buckets``).
            content: ``[N, Dc]`` content embeddings, or ``None`` (then ``content_dim`` zero columns).
            has_content: which rows of ``content`` are real; default: non-zero rows.
            content_dim: ``Dc`` when ``content`` is ``None``.
            structure: ``[N, Ds]`` structure embeddings (zero rows where absent), or ``None`` (``Ds = 0``).
        """
        n = len(entity_ids)
        if content is None:
            content_t = torch.zeros(n, content_dim or 0)
        else:
            content_t = torch.as_tensor(np.asarray(content, dtype=np.float32))
        if has_content is None:
            has_content_t = content_t.abs().sum(-1) > 0
        else:
            has_content_t = torch.as_tensor(np.asarray(has_content, dtype=bool))
        return cls(
            node_type=torch.as_tensor(np.asarray(node_type, dtype=np.int64)),
            degree_bucket=torch.as_tensor(np.asarray(degree_bucket, dtype=np.int64)),
            has_history=torch.as_tensor(np.asarray(has_history, dtype=bool)),
            id_bucket=hash_id_buckets(entity_ids, id_buckets),
            content=content_t * has_content_t[:, None].to(content_t.dtype),
            has_content=has_content_t,
            structure=torch.zeros(n, 0) if structure is None else torch.as_tensor(
                np.asarray(structure, dtype=np.float32)),
        )

    @property
    def num_nodes(self) -> int:
        return int(self.node_type.numel())

    def to(self, device: torch.device | str) -> NodeFeatures:
        return NodeFeatures(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})
