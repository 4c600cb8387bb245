"""Model inputs of a planted toy graph (``hir_pipeline.training.toy``), as the graph stage would hand them over, and
a benchmark's prepared splits of it (test helpers only)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from hir_pipeline.contracts import ENTITY_TYPES
from hir_pipeline.evaluation.data import COLD, VALIDATION, WARM, EvalData, validation_split
from hir_pipeline.training.inputs import ModelInputs
from hir_pipeline.training.toy import ToyGraphSettings, make_toy_graph


def toy_model_inputs(settings: ToyGraphSettings, without_view: int = 0) -> ModelInputs:
    """The toy graph's :class:`ModelInputs`; its last ``without_view`` nodes get no view (embedded from their own
    features only).

    Args:
        settings: the toy graph.
        without_view: how many of the last nodes have neither a broad nor a narrow view.
    """
    toy = make_toy_graph(settings)
    f = toy.features
    keep = len(toy.broad_views) - without_view
    return ModelInputs(
        entity_ids=np.asarray(toy.entity_ids, dtype=object),
        entity_types=np.asarray([ENTITY_TYPES[t] for t in f.node_type.tolist()], dtype=object),
        node_type=f.node_type.numpy(), degree_bucket=f.degree_bucket.numpy(), has_history=f.has_history.numpy(),
        content=f.content.numpy(), has_content=f.has_content.numpy(),
        broad_views=toy.broad_views[:keep], narrow_views=toy.narrow_views[:keep],
        engagement=toy.engagement, max_edge_type=10,
    )


def write_toy_prepared_splits(path: Path) -> Path:
    """A toy 'prepared splits' pickle, as ``benchmarks/hir_ablations.py --cache`` holds them: HIR inputs of a planted
    graph, evaluation data with warm and cold targets (the last product of each community is cold), and its inner
    validation split; returns ``path``.

    Args:
        path: the pickle to write.
    """
    settings = ToyGraphSettings(num_communities=2, users_per=8, items_per=5, content_dim=8, broad_cap=12,
                                narrow_cap=6, id_buckets=64, seed=0)
    toy = make_toy_graph(settings)
    f = toy.features
    inputs = toy_model_inputs(settings)
    ids = np.asarray(toy.entity_ids)
    products = [i for i, t in enumerate(f.node_type.tolist()) if ENTITY_TYPES[t] == "product"]
    cold = [i for i in products if i + 1 >= len(ids) or ENTITY_TYPES[int(f.node_type[i + 1])] != "product"]
    u, i, w = toy.engagement
    trained = ~np.isin(i, cold)
    rng = np.random.default_rng(0)
    users = sorted(set(u.tolist()))
    own = {c: [p for p in products if toy.community[p] == c and p not in cold] for c in set(toy.community.tolist())}
    warm_t = [(x, int(rng.choice(own[toy.community[x]]))) for x in users]
    cold_t = [(x, next(p for p in cold if toy.community[p] == toy.community[x])) for x in users]
    data = EvalData.from_pairs(
        (ids[u[trained]].tolist(), ids[i[trained]].tolist(), w[trained].tolist()),
        {WARM: ([ids[a] for a, _ in warm_t], [ids[b] for _, b in warm_t]),
         COLD: ([ids[a] for a, _ in cold_t], [ids[b] for _, b in cold_t])},
        ids[products].tolist(), ids[cold].tolist())
    pos = {e: k for k, e in enumerate(toy.entity_ids)}
    content = f.content.numpy()[[pos[e] for e in data.item_ids]]
    inner = validation_split(data, 0.25, 0, 0.2).renamed({VALIDATION: WARM})
    path.write_bytes(pickle.dumps({
        "data": data, "inputs": inputs, "item_content": content, "note": "toy",
        "validation": {"data": inner, "inputs": inputs, "fraction": 0.25, "seed": 0, "cold_fraction": 0.2}}))
    return path
