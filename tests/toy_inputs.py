"""Model inputs of a planted toy graph (``hir_pipeline.training.toy``), as the graph stage would hand them over
(test helper only)."""

from __future__ import annotations

import numpy as np

from hir_pipeline.contracts import ENTITY_TYPES
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
