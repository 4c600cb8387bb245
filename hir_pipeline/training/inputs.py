"""Everything the trainer needs about one graph, as compact numpy arrays (torch / numpy only).

:class:`ModelInputs` is the hand-off between the data layer (``spark_jobs.model.inputs`` collects it from
the ``graph_nodes``, ``graph_views``, ``graph_edges`` and ``content_embeddings`` tables) and the model
(:func:`hir_pipeline.training.fit.fit_and_embed`). It holds no Spark or Dagster objects, so it can be built
by hand in a test, pickled to another machine, or built from a train split for evaluation.

Views are the view dicts of ``hir_pipeline.model.batch``; their arrays are slices of a few shared flat
buffers (see :func:`views_from_flat`), so a view costs its bytes plus one small dict, not a Python list per node.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # numpy-only module: Spark jobs and the code location import it without torch
    from hir_pipeline.model.config import ModelConfig
    from hir_pipeline.model.features import NodeFeatures

#: Engagement pairs: ``(user_idx int64[P], item_idx int64[P], weight float32[P])``.
Engagement = tuple[np.ndarray, np.ndarray, np.ndarray]
#: Pairs seen but not engaged (an activity edge whose deepest stage has engagement weight 0, e.g. impressions):
#: ``(user_idx int64[Q], item_idx int64[Q])``.
SeenPairs = tuple[np.ndarray, np.ndarray]


def views_from_flat(
    anchor_idx: np.ndarray,
    node_offsets: np.ndarray,
    nodes: np.ndarray,
    node_types: np.ndarray,
    pair_offsets: np.ndarray,
    dist: np.ndarray,
    edge_types: np.ndarray,
) -> list[dict[str, Any]]:
    """View dicts over flat (Arrow-style offsets + values) buffers, without copying them.

    Args:
        anchor_idx: int ``[V]`` anchor node of each view.
        node_offsets: int ``[V + 1]``; view ``i`` holds ``nodes[node_offsets[i]:node_offsets[i + 1]]``.
        nodes: int64 flat node indices (``nodes[node_offsets[i]] == anchor_idx[i]``).
        node_types: int flat node types, aligned with ``nodes``.
        pair_offsets: int ``[V + 1]`` offsets into ``dist`` / ``edge_types`` (``n * n`` entries per view).
        dist: int8 flat row-major distance matrices.
        edge_types: uint8 flat row-major edge-type matrices.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    node_types = np.asarray(node_types)
    dist = np.asarray(dist).view(np.int8)
    edge_types = np.asarray(edge_types).view(np.uint8)
    out = []
    for i, anchor in enumerate(np.asarray(anchor_idx, dtype=np.int64).tolist()):
        a, b = int(node_offsets[i]), int(node_offsets[i + 1])
        p, q = int(pair_offsets[i]), int(pair_offsets[i + 1])
        out.append({"anchor_idx": anchor, "nodes": nodes[a:b], "node_types": node_types[a:b],
                    "dist": dist[p:q], "edge_types": edge_types[p:q]})
    return out


@dataclass
class ModelInputs:
    """Per-node features, views and engagement pairs of one graph, rows indexed by ``node_idx`` ``0..N-1``.

    Args:
        entity_ids: str ``[N]`` entity id of each node.
        entity_types: str ``[N]`` entity type of each node.
        node_type: int64 ``[N]`` index into ``contracts.ENTITY_TYPES``.
        degree_bucket: int64 ``[N]`` (``graph_nodes.degree_bucket``).
        has_history: bool ``[N]`` took part in any event edge.
        content: float32 ``[N, Dc]`` content embeddings, zero rows where absent (``Dc`` may be 0).
        has_content: bool ``[N]``.
        broad_views: teacher view dicts, at most one per anchor.
        narrow_views: student view dicts, at most one per anchor.
        engagement: funnel-weighted ``(user_idx, item_idx, weight)`` pairs, sorted by (user, item).
        max_edge_type: highest edge type id in the views (0 when they hold no edge).
        provenance: free-form description of where the inputs came from (table versions, ...).
        structure: float32 ``[N, Ds]`` graph-wide structure embeddings (``graph_nodes.structure_embedding``), zero
            rows where absent; ``None`` = none (``Ds = 0``).
        seen_pairs: ``(user_idx, item_idx)`` pairs seen but not engaged, sorted by (user, item), or ``None``
            (they feed cross-entity distillation at a low weight, never the engagement loss).
        engagement_recency: int32 ``[P]`` aligned with ``engagement``: how many of the user's engaged items it
            last acted on later (0 = its latest; ties share a rank), or ``None`` when the graph has no event
            times. :meth:`with_recency` turns it into weights.
    """

    entity_ids: np.ndarray
    entity_types: np.ndarray
    node_type: np.ndarray
    degree_bucket: np.ndarray
    has_history: np.ndarray
    content: np.ndarray
    has_content: np.ndarray
    broad_views: list[dict[str, Any]]
    narrow_views: list[dict[str, Any]]
    engagement: Engagement
    max_edge_type: int = 0
    provenance: dict[str, Any] = field(default_factory=dict)
    structure: np.ndarray | None = None
    seen_pairs: SeenPairs | None = None
    engagement_recency: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.entity_ids)
        if self.structure is not None and (self.structure.ndim != 2 or len(self.structure) != n):
            raise ValueError(f"structure must be [{n}, Ds], got shape {self.structure.shape}")
        for name in ("entity_types", "node_type", "degree_bucket", "has_history", "content", "has_content"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} rows for {n} nodes")
        for name in ("broad_views", "narrow_views"):
            anchors = [int(v["anchor_idx"]) for v in getattr(self, name)]
            if len(set(anchors)) != len(anchors):
                raise ValueError(f"{name} holds more than one view for some anchor")
            if anchors and not 0 <= min(anchors) <= max(anchors) < n:
                raise ValueError(f"{name} has an anchor outside 0..{n - 1}")
        users, items, weight = self.engagement
        if not len(users) == len(items) == len(weight):
            raise ValueError("engagement arrays differ in length")
        if len(users) and not (min(users.min(), items.min()) >= 0 and max(users.max(), items.max()) < n):
            raise ValueError("engagement pair outside the node range")
        if self.seen_pairs is not None:
            s_users, s_items = self.seen_pairs
            if len(s_users) != len(s_items):
                raise ValueError("seen_pairs arrays differ in length")
            if len(s_users) and not (min(s_users.min(), s_items.min()) >= 0 and max(s_users.max(), s_items.max()) < n):
                raise ValueError("seen pair outside the node range")
        if self.engagement_recency is not None and len(self.engagement_recency) != len(users):
            raise ValueError(f"engagement_recency has {len(self.engagement_recency)} rows for {len(users)} pairs")

    def with_recency(self, half_life: float | None) -> ModelInputs:
        """These inputs with each engagement pair's weight multiplied by ``2 ** (-rank / half_life)``, ``rank``
        being :attr:`engagement_recency`: a user's latest items weigh most, in the engagement loss's sampling and
        in every history pool (a user's next actions follow its recent ones more than its old ones).

        Calendar decay (``GraphConfig.half_life_days``) cannot tell apart the items of one busy day; this counts
        the user's own actions. ``None`` (or inputs without event times) returns ``self``.

        Args:
            half_life: rank at which a pair's weight halves, > 0; ``None`` = no recency weighting.
        """
        if half_life is None or self.engagement_recency is None:
            return self
        if not half_life > 0:
            raise ValueError(f"recency half life must be > 0, got {half_life}")
        users, items, weight = self.engagement
        factor = np.exp2(-np.asarray(self.engagement_recency, dtype=np.float64) / float(half_life))
        return replace(self, engagement=(users, items, (weight * factor).astype(np.float32)))

    @property
    def num_nodes(self) -> int:
        return len(self.entity_ids)

    @property
    def content_dim(self) -> int:
        return int(self.content.shape[1]) if self.content.ndim == 2 else 0

    @property
    def structure_dim(self) -> int:
        return 0 if self.structure is None else int(self.structure.shape[1])

    def features(self, model_cfg: ModelConfig | int) -> NodeFeatures:
        """The model's :class:`NodeFeatures`, with the engagement history and structure embedding of every node.

        Args:
            model_cfg: the (resolved) model configuration: ``id_buckets``, ``exact_ids`` and
                ``history_max_neighbours`` are read from it; a bare ``int`` is ``id_buckets`` with the other two
                at their defaults.
        """
        from hir_pipeline.model.config import ModelConfig
        from hir_pipeline.model.features import NodeColumns, NodeFeatures

        cfg = ModelConfig(id_buckets=model_cfg) if isinstance(model_cfg, int) else model_cfg
        nodes = NodeColumns(self.entity_ids.tolist(), self.node_type, self.degree_bucket, self.has_history)
        features = NodeFeatures.from_arrays(nodes, cfg.id_buckets, self.content, self.has_content,
                                            content_dim=self.content_dim, exact_ids=cfg.exact_ids,
                                            structure=self.structure)
        return features.with_history(self.engagement, cfg.history_max_neighbours)

    def summary(self) -> dict[str, int]:
        """Counts worth logging: nodes, views, pairs, content coverage, collected bytes."""
        return {
            "num_nodes": self.num_nodes,
            "num_broad_views": len(self.broad_views),
            "num_narrow_views": len(self.narrow_views),
            "num_engagement_pairs": len(self.engagement[0]),
            "num_seen_pairs": 0 if self.seen_pairs is None else len(self.seen_pairs[0]),
            "nodes_with_content": int(np.count_nonzero(self.has_content)),
            "nodes_with_history": int(np.count_nonzero(self.has_history)),
            "content_dim": self.content_dim,
            "structure_dim": self.structure_dim,
            "max_edge_type": int(self.max_edge_type),
            "array_bytes": self.nbytes(),
        }

    def nbytes(self) -> int:
        """Bytes held by the numpy arrays (views counted once; Python object overhead not included)."""
        total = sum(np.asarray(a).nbytes for a in (self.node_type, self.degree_bucket, self.has_history,
                                                   self.content, self.has_content, *self.engagement,
                                                   *(self.seen_pairs or ())))
        total += 0 if self.structure is None else self.structure.nbytes
        for views in (self.broad_views, self.narrow_views):
            for v in views:
                total += sum(np.asarray(v[k]).nbytes for k in ("nodes", "node_types", "dist", "edge_types"))
        return int(total)

    def fingerprint(self) -> str:
        """Content hash of every array (blake2b): equal inputs give equal fingerprints on every host.

        Used to refuse resuming from a checkpoint trained on other data. Cost: one pass over the bytes.
        """
        h = hashlib.blake2b(digest_size=16)

        def add(arr: Any) -> None:
            a = np.ascontiguousarray(arr)
            h.update(str(a.dtype).encode())
            h.update(str(a.shape).encode())
            h.update(a.tobytes())

        h.update("\x1f".join(map(str, self.entity_ids)).encode("utf-8"))
        h.update("\x1f".join(map(str, self.entity_types)).encode("utf-8"))
        for arr in (self.node_type, self.degree_bucket, self.has_history, self.content, self.has_content,
                    *self.engagement):
            add(arr)
        for name in ("broad_views", "narrow_views"):
            h.update(name.encode())
            for v in sorted(getattr(self, name), key=lambda v: int(v["anchor_idx"])):
                h.update(int(v["anchor_idx"]).to_bytes(8, "little", signed=True))
                add(np.asarray(v["nodes"], dtype=np.int64))
                add(np.asarray(v["node_types"], dtype=np.int64))
                add(_raw(v["dist"], np.int8))
                add(_raw(v["edge_types"], np.uint8))
        h.update(str(int(self.max_edge_type)).encode())
        if self.structure_dim:  # absent: the fingerprint of inputs without the structure embedding is unchanged
            h.update(b"structure")
            add(np.asarray(self.structure, dtype=np.float32))
        if self.seen_pairs is not None:  # absent -> the fingerprint of inputs collected before seen pairs existed
            h.update(b"seen_pairs")
            for arr in self.seen_pairs:
                add(arr)
        if self.engagement_recency is not None:
            h.update(b"engagement_recency")
            add(np.asarray(self.engagement_recency, dtype=np.int32))
        return h.hexdigest()


def _raw(value: Any, dtype: type) -> np.ndarray:
    if isinstance(value, bytes | bytearray | memoryview):
        return np.frombuffer(value, dtype=dtype)
    return np.asarray(value).astype(dtype, copy=False)


def engagement_arrays(users: Sequence[int], items: Sequence[int], weights: Sequence[float]) -> Engagement:
    """Engagement arrays in canonical order (sorted by user, then item), so sampling does not depend on the
    order rows were collected in.

    Args:
        users: user node index of each pair.
        items: item node index of each pair.
        weights: funnel weight of each pair.
    """
    u = np.asarray(users, dtype=np.int64)
    i = np.asarray(items, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float32)
    order = np.lexsort((i, u))
    return u[order], i[order], w[order]


def recency_ranks(users: np.ndarray, times: np.ndarray) -> np.ndarray:
    """int32 rank of each pair among its user's pairs by time, latest first: how many of the user's pairs are
    strictly later (0 = the latest; pairs at the same time share a rank).

    Args:
        users: user of each pair.
        times: time of each pair's latest event (any orderable numbers, e.g. epoch microseconds).
    """
    users, times = np.asarray(users), np.asarray(times)
    ranks = np.zeros(len(users), dtype=np.int32)
    if not len(users):
        return ranks
    order = np.lexsort((-times, users))  # by user, latest first
    u, t = users[order], times[order]
    pos = np.arange(len(u))
    user_start = np.maximum.accumulate(np.where(np.r_[True, u[1:] != u[:-1]], pos, 0))
    block_start = np.maximum.accumulate(np.where(np.r_[True, (u[1:] != u[:-1]) | (t[1:] != t[:-1])], pos, 0))
    ranks[order] = (block_start - user_start).astype(np.int32)
    return ranks


def save_inputs(inputs: ModelInputs, path: str | os.PathLike) -> Path:
    """Pickle ``inputs`` for :func:`train_rank` (written to a temp file, then renamed).

    Args:
        inputs: the training inputs.
        path: destination file.
    """
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as f:
        pickle.dump(inputs, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    return path


def load_inputs(path: str | os.PathLike) -> ModelInputs:
    """The :class:`ModelInputs` written by :func:`save_inputs` (a trusted file of this pipeline).

    Args:
        path: the pickle file.
    """
    with Path(path).open("rb") as f:
        inputs = pickle.load(f)  # noqa: S301 - our own hand-off file, never user input
    if not isinstance(inputs, ModelInputs):
        raise TypeError(f"{path} holds a {type(inputs).__name__}, not ModelInputs")
    return inputs
