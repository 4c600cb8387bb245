"""LightGCN (He et al., SIGIR 2020) with ``torch_geometric.nn.models.LightGCN``, trained briefly with BPR."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np

from hir_pipeline.evaluation.data import EvalData

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LightGCNConfig:
    """LightGCN settings.

    Args:
        embedding_dim: embedding width.
        num_layers: propagation layers.
        epochs: passes over the training pairs.
        batch_size: (user, positive, negative) triples per step.
        lr: Adam learning rate.
        lambda_reg: L2 weight of the BPR loss on the batch's initial embeddings.
        weighted_positives: sample positive pairs proportionally to their funnel weight (a conversion is
            drawn more often than an impression), instead of uniformly.
        seed: seed of initialisation and sampling (the evaluation sets it to its own ``seed``).
    """

    embedding_dim: int = 64
    num_layers: int = 3
    epochs: int = 30
    batch_size: int = 2048
    lr: float = 5e-3
    lambda_reg: float = 1e-4
    weighted_positives: bool = True
    seed: int = 0


class LightGCNScorer:
    """LightGCN on the user-item training graph; the score is the dot product of final embeddings.

    Args:
        config: model and training settings.
    """

    name = "lightgcn"

    def __init__(self, config: LightGCNConfig | None = None) -> None:
        self.config = config or LightGCNConfig()
        self.user_emb: np.ndarray | None = None
        self.item_emb: np.ndarray | None = None
        self.losses: list[float] = []

    def fit(self, data: EvalData) -> LightGCNScorer:
        import torch  # here, not at module level: the code location imports this module's config
        from torch_geometric.nn.conv.gcn_conv import gcn_norm
        from torch_geometric.nn.models import LightGCN
        from torch_geometric.utils import to_torch_csr_tensor

        c = self.config
        n_users, n_items = data.n_users, data.n_items
        coo = data.train.tocoo()
        users = torch.as_tensor(coo.row, dtype=torch.long)
        items = torch.as_tensor(coo.col, dtype=torch.long) + n_users
        edge_index = torch.cat([torch.stack([users, items]), torch.stack([items, users])], 1)
        n_nodes = n_users + n_items
        # the symmetric normalisation D^-1/2 A D^-1/2 is computed once, not in every forward: each step then
        # propagates with one sparse CSR product per layer
        norm_index, norm_weight = gcn_norm(edge_index, None, n_nodes, add_self_loops=False)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": the product used here is stable
            warnings.simplefilter("ignore", UserWarning)
            adj = to_torch_csr_tensor(norm_index, norm_weight, size=(n_nodes, n_nodes))
        warm_items = np.flatnonzero(np.asarray(data.train.getnnz(axis=0)) > 0)
        gen = torch.Generator().manual_seed(c.seed)
        torch.manual_seed(c.seed)
        model = LightGCN(n_nodes, c.embedding_dim, c.num_layers, normalize=False)
        opt = torch.optim.Adam(model.parameters(), lr=c.lr)
        n_pairs = coo.nnz
        probs = torch.as_tensor(coo.data / coo.data.sum() if c.weighted_positives else np.full(n_pairs, 1 / n_pairs),
                                dtype=torch.float64)
        warm = torch.as_tensor(warm_items + n_users, dtype=torch.long)
        steps = max(1, n_pairs // c.batch_size)
        for epoch in range(c.epochs):
            total = 0.0
            for _ in range(steps):
                pick = torch.multinomial(probs, c.batch_size, replacement=True, generator=gen)
                u, pos = users[pick], items[pick]
                neg = warm[torch.randint(len(warm), (c.batch_size,), generator=gen)]
                label_index = torch.cat([torch.stack([u, pos]), torch.stack([u, neg])], 1)
                rank = model(adj, label_index)
                pos_rank, neg_rank = rank[:c.batch_size], rank[c.batch_size:]
                loss = model.recommendation_loss(pos_rank, neg_rank, node_id=torch.unique(label_index),
                                                 lambda_reg=c.lambda_reg)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item()
            self.losses.append(total / steps)
            log.debug("LightGCN epoch %d: BPR loss %.4f", epoch, self.losses[-1])
        with torch.no_grad():
            emb = model.get_embedding(adj).numpy()
        self.user_emb, self.item_emb = emb[:n_users], emb[n_users:]
        return self

    def score(self, users: np.ndarray) -> np.ndarray:
        assert self.user_emb is not None and self.item_emb is not None, "fit first"
        return self.user_emb[users] @ self.item_emb.T
