"""A planted toy for the evaluation tests: users and items in communities, plus content that reveals them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hir_pipeline.evaluation.data import COLD, WARM, EvalData


def planted_data(n_comm: int = 4, users_per: int = 30, items_per: int = 20, per_user: int = 8, p_in: float = 0.9,
                 cold_per: int = 3, zipf: float = 1.0, seed: int = 0) -> tuple[EvalData, np.ndarray, dict[str, int]]:
    """Users engage mostly inside their community, with Zipf(``zipf``) item popularity inside it; the last
    ``cold_per`` items of each community are cold.

    Returns ``(data, item_content, community_of_entity)``: item content is the community centroid plus noise.
    """
    rng = np.random.default_rng(seed)
    items = [f"i{c}_{j}" for c in range(n_comm) for j in range(items_per)]
    comm = {f"i{c}_{j}": c for c in range(n_comm) for j in range(items_per)}
    cold = [f"i{c}_{j}" for c in range(n_comm) for j in range(items_per - cold_per, items_per)]
    warm_by = {c: [f"i{c}_{j}" for j in range(items_per - cold_per)] for c in range(n_comm)}
    cold_by = {c: [f"i{c}_{j}" for j in range(items_per - cold_per, items_per)] for c in range(n_comm)}
    tu, ti, tw, wu, wi, cu, ci = [], [], [], [], [], [], []
    for c in range(n_comm):
        for k in range(users_per):
            u = f"u{c}_{k}"
            comm[u] = c
            picks = set()
            while len(picks) < per_user + 3:
                cc = c if rng.random() < p_in else int(rng.integers(n_comm))
                pool = warm_by[cc]
                p = (np.arange(len(pool)) + 1.0) ** -zipf
                picks.add(str(rng.choice(pool, p=p / p.sum())))
            picks = sorted(picks)
            rng.shuffle(picks)
            for it in picks[:per_user]:
                tu.append(u), ti.append(it), tw.append(float(rng.choice([0.1, 1.0, 10.0])))
            for it in picks[per_user:]:
                wu.append(u), wi.append(it)
            cu.append(u), ci.append(str(rng.choice(cold_by[c])))
    data = EvalData.from_pairs((tu, ti, tw), {WARM: (wu, wi), COLD: (cu, ci)}, items, cold)
    centroids = rng.normal(size=(n_comm, 8))
    content = np.stack([centroids[comm[i]] + 0.3 * rng.normal(size=8) for i in data.item_ids]).astype(np.float32)
    return data, content, comm


@pytest.fixture(scope="module")
def planted():
    return planted_data()


@pytest.fixture(autouse=True)
def _few_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
