"""A FIFO memory of the engagement pairs' embeddings of the last steps: the cross-batch negatives of Wang et al.
2021, "Cross-Batch Negative Sampling for Training Two-Tower Recommenders" (SIGIR), a recommender's version of
MoCo's queue (He et al. 2020).

An in-batch softmax of ``P`` pairs contrasts each user with ``P - 1`` items; the queue adds the items (and users)
of the last steps for one more matrix product, without embedding them again. Entries carry no gradient and were
embedded by an earlier student, which is why the queue is short compared with an epoch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class PairQueue:
    """Ring buffer of the last ``size`` pairs' ``(user_emb, item_emb, user_id, item_id)``.

    Args:
        size: capacity in pairs (``> 0``).
        dim: embedding width.
        device: where the rows live (the model's device).
    """

    def __init__(self, size: int, dim: int, device: torch.device | str = "cpu") -> None:
        if size <= 0:
            raise ValueError(f"queue size must be > 0, got {size}")
        self.size = int(size)
        self.user_emb = torch.zeros(size, dim, device=device)
        self.item_emb = torch.zeros(size, dim, device=device)
        self.user_ids = torch.full((size,), -1, dtype=torch.long, device=device)
        self.item_ids = torch.full((size,), -1, dtype=torch.long, device=device)
        self.filled = 0
        self.head = 0  # next slot to write

    def __len__(self) -> int:
        return self.filled

    @torch.no_grad()
    def push(self, user_emb: Tensor, item_emb: Tensor, user_ids: Tensor, item_ids: Tensor) -> None:
        """Add a step's pairs (detached), overwriting the oldest once full; of a batch larger than the queue only
        its last ``size`` pairs are kept.

        Args:
            user_emb: ``[P, D]`` the pairs' user embeddings.
            item_emb: ``[P, D]`` their item embeddings.
            user_ids: ``[P]`` user node ids.
            item_ids: ``[P]`` item node ids.
        """
        user_emb, item_emb = user_emb[-self.size:], item_emb[-self.size:]
        user_ids, item_ids = user_ids[-self.size:], item_ids[-self.size:]
        slots = (self.head + torch.arange(len(user_ids), device=self.user_ids.device)) % self.size
        self.user_emb[slots] = user_emb.detach().float()
        self.item_emb[slots] = item_emb.detach().float()
        self.user_ids[slots] = user_ids.long()
        self.item_ids[slots] = item_ids.long()
        self.head = int((self.head + len(user_ids)) % self.size)
        self.filled = min(self.size, self.filled + len(user_ids))

    def entries(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(user_emb, item_emb, user_ids, item_ids)`` of the filled slots (``Q = len(self)`` rows)."""
        n = self.filled
        return self.user_emb[:n], self.item_emb[:n], self.user_ids[:n], self.item_ids[:n]

    def state_dict(self) -> dict[str, Any]:
        return {"user_emb": self.user_emb.clone(), "item_emb": self.item_emb.clone(),
                "user_ids": self.user_ids.clone(), "item_ids": self.item_ids.clone(),
                "filled": self.filled, "head": self.head}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("user_emb", "item_emb", "user_ids", "item_ids"):
            getattr(self, name).copy_(state[name])
        self.filled, self.head = int(state["filled"]), int(state["head"])
