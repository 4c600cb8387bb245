"""Published node rows: the transformer embedding and the weighted structure embedding, made unit-norm so that a
user's dot product with an item ranks items by ``h_u . h_i + kappa s_u . s_i``.

``h`` is the L2-normalised transformer embedding, ``s`` the graph-wide structure embedding (a truncated SVD of
the normalised graph by default, :mod:`spark_jobs.graph.spectral`), whose row norms carry popularity, and
``kappa`` is ``ModelConfig.structure_score_weight``. Why both: a unit-norm embedding cannot say how popular an item
is except through its direction, while a spectral row says it through its length; the transformer adds content,
history and the sampled neighbourhood, and is what cold items and the clusters stand on. With
``z = [h, sqrt(kappa) s]`` the score is ``z_u . z_i``, a maximum-inner-product search over rows of unequal norm.
The output contract wants unit-norm rows scored by the dot product, so the rows are transformed as in Bachrach
et al., "Speeding Up the Xbox Recommender System Using a Euclidean Transformation for Inner-Product Spaces"
(RecSys 2014):

* a user (the query side): ``[z_u / |z_u|, 0]``; scaling a user's row does not change the order of its items;
* any other node: ``[z_i / R, sqrt(1 - |z_i|^2 / R^2)]`` with ``R = max |z|`` over the non-user nodes.

So ``user . item = z_u . z_i / (|z_u| R)``: per user, the order of the score, exactly. Between two non-user
rows the dot product orders neighbours as the Euclidean distance between their ``z`` does (all rows being unit
norm); between two users it is the cosine of their ``z``.
"""

from __future__ import annotations

import numpy as np


def published_rows(embeddings: np.ndarray, structure: np.ndarray, kappa: float, is_user: np.ndarray) -> np.ndarray:
    """Unit-norm published rows ``[N, D + Ds + 1]`` (see the module docstring).

    Args:
        embeddings: float ``[N, D]`` L2-normalised transformer embeddings ``h``.
        structure: float ``[N, Ds]`` structure embeddings ``s`` (zero rows where absent).
        kappa: the structure part's weight (``> 0``).
        is_user: bool ``[N]``: the query-side rows.
    """
    z = np.concatenate([embeddings.astype(np.float64), np.sqrt(kappa) * structure.astype(np.float64)], axis=1)
    norm = np.linalg.norm(z, axis=1)
    out = np.zeros((len(z), z.shape[1] + 1))
    users = np.asarray(is_user, dtype=bool)
    out[users, :-1] = z[users] / np.maximum(norm[users], 1e-12)[:, None]
    others = ~users
    if others.any():
        radius = max(float(norm[others].max()), 1e-12)
        out[others, :-1] = z[others] / radius
        out[others, -1] = np.sqrt(np.clip(1.0 - (norm[others] / radius) ** 2, 0.0, None))
    return out.astype(np.float32)
