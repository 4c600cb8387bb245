"""The user x item data of one evaluation split, as sparse matrices over dense local indices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

#: Split names: ``warm`` targets are held-out items that have training events, ``cold`` targets are
#: items whose every event was withheld from training.
WARM, COLD = "warm", "cold"


@dataclass
class EvalData:
    """Training engagement and held-out targets of one split.

    Args:
        user_ids: entity id of each user row.
        item_ids: entity id of each item column.
        train: float32 ``[U, I]`` CSR, funnel-weighted training engagement (``> 0`` where engaged).
        targets: per split name, a binary ``[U, I]`` CSR of held-out target pairs.
        candidates: per split name, bool ``[I]``: the items ranked for that split (warm: items with
            training events; cold: the withheld items).
        tuning: the inner split a baseline's grid search scores its points on (split ``validation``), drawn from
            this data's *training events* by the same rules as the reported split
            (:func:`spark_jobs.evaluation.run.inner_split`); ``None``: a seeded random hold-out of the training
            pairs (:func:`validation_split`), for data without event times.
    """

    user_ids: list[str]
    item_ids: list[str]
    train: sp.csr_matrix
    targets: dict[str, sp.csr_matrix] = field(default_factory=dict)
    candidates: dict[str, np.ndarray] = field(default_factory=dict)
    tuning: EvalData | None = None

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def splits(self) -> list[str]:
        return list(self.targets)

    def renamed(self, names: Mapping[str, str]) -> EvalData:
        """The same data with splits renamed (e.g. ``{"validation": "warm"}``); unnamed splits keep their name.

        Args:
            names: old split name -> new split name.
        """
        return EvalData(self.user_ids, self.item_ids, self.train,
                        {names.get(s, s): t for s, t in self.targets.items()},
                        {names.get(s, s): c for s, c in self.candidates.items()}, self.tuning)

    def only(self, split: str, name: str | None = None) -> EvalData:
        """The same data with one split kept (renamed ``name`` when given) and no tuning split.

        Args:
            split: the split kept.
            name: its new name (default: unchanged).
        """
        name = name or split
        return EvalData(self.user_ids, self.item_ids, self.train, {name: self.targets[split]},
                        {name: self.candidates[split]})

    @classmethod
    def from_pairs(
        cls,
        train: tuple[Sequence[str], Sequence[str], Sequence[float]],
        targets: Mapping[str, tuple[Sequence[str], Sequence[str]]],
        items: Sequence[str],
        cold_items: Sequence[str] = (),
        users: Sequence[str] = (),
    ) -> EvalData:
        """Index string ids and build the matrices.

        Args:
            train: ``(user_id, item_id, weight)`` arrays of training engagement; duplicates add up.
            targets: per split, ``(user_id, item_id)`` arrays of target pairs. Pairs that cannot be ranked are
                dropped: unknown items, items that are not candidates of the split, items the user engaged
                with in training (rankers exclude those).
            items: every item that may be ranked (the item universe).
            cold_items: items withheld from training: candidates of the ``cold`` split, never of ``warm``.
            users: extra users to index (users seen in ``train`` or ``targets`` are always indexed).
        """
        item_ids = sorted(set(items))
        item_pos = {e: i for i, e in enumerate(item_ids)}
        user_ids = sorted(set(users) | set(train[0]) | {u for us, _ in targets.values() for u in us})
        user_pos = {u: i for i, u in enumerate(user_ids)}

        def matrix(us: Sequence[str], its: Sequence[str], values: Sequence[float] | None) -> sp.csr_matrix:
            keep = [k for k, it in enumerate(its) if it in item_pos]
            rows = np.fromiter((user_pos[us[k]] for k in keep), dtype=np.int64, count=len(keep))
            cols = np.fromiter((item_pos[its[k]] for k in keep), dtype=np.int64, count=len(keep))
            vals = (np.ones(len(keep), np.float32) if values is None
                    else np.asarray(values, dtype=np.float32)[np.asarray(keep, dtype=np.int64)])
            m = sp.csr_matrix((vals, (rows, cols)), shape=(len(user_ids), len(item_ids)), dtype=np.float32)
            m.sum_duplicates()
            if values is None:
                m.data[:] = 1.0
            m.eliminate_zeros()
            return m

        train_m = matrix(list(train[0]), list(train[1]), list(train[2]))
        cold = np.zeros(len(item_ids), dtype=bool)
        cold[[item_pos[e] for e in cold_items if e in item_pos]] = True
        warm = np.asarray(train_m.getnnz(axis=0) > 0) & ~cold
        cands = {name: (cold if name == COLD else warm) for name in targets}
        engaged = train_m.astype(bool)
        target_m = {}
        for name, (us, its) in targets.items():
            # a target must be rankable: a candidate of its split that the user did not engage with in training
            m = matrix(list(us), list(its), None).multiply(sp.csr_matrix(cands[name][None, :].astype(np.float32)))
            m = sp.csr_matrix(m - m.multiply(engaged))
            m.eliminate_zeros()
            target_m[name] = m
        return cls(user_ids, item_ids, train_m, target_m, cands)


#: Split name of the inner validation split that baselines tune their grid on.
VALIDATION = "validation"


def validation_split(data: EvalData, fraction: float = 0.1, seed: int = 0, cold_fraction: float = 0.0) -> EvalData:
    """Hold out a seeded random ``fraction`` of every user's training pairs (users with at least two).

    Grid searches tune on this inner split so that the reported targets are never looked at: ALS picks its grid
    point on it, and HIR's settings are chosen on the same split (``benchmarks/hir_ablations.py --split
    validation``), with a share of cold items carved out too so that cold-start recall can be tuned.

    Args:
        data: the evaluation data; only ``train`` is used.
        fraction: share of each user's training pairs moved to the ``validation`` targets.
        seed: seed of the choice.
        cold_fraction: share of the items that keep training pairs after the hold-out that become cold: every
            pair on them (kept or held out) leaves ``train`` and becomes a ``cold`` target, as the outer split
            withholds its cold items. The warm hold-out is drawn first and the same whatever this share, so the
            ``validation`` pairs are ALS's grid-search pairs less those on the new cold items. 0: no ``cold``
            split (ALS's grid search).

    Returns:
        New data whose ``train`` lacks the held-out pairs and whose splits are ``validation`` (candidates: items
        that still have training pairs) and, when ``cold_fraction > 0``, ``cold`` (candidates: the new cold
        items).
    """
    if not 0.0 <= cold_fraction < 1.0:
        raise ValueError(f"cold_fraction must be in [0, 1), got {cold_fraction}")
    rng = np.random.default_rng(seed)
    train = data.train.tocsr()
    coo = train.tocoo()
    hold = np.zeros(coo.nnz, dtype=bool)
    for u in range(train.shape[0]):
        lo, hi = train.indptr[u], train.indptr[u + 1]
        n_hold = int(np.floor((hi - lo) * fraction))
        if hi - lo >= 2 and n_hold > 0:
            hold[lo + rng.choice(hi - lo, size=n_hold, replace=False)] = True
    cold = np.zeros(train.shape[1], dtype=bool)
    if cold_fraction > 0:
        # a stream of its own: the warm hold-out above stays ALS's whatever the cold share
        kept = np.flatnonzero(np.bincount(coo.col[~hold], minlength=train.shape[1]) > 0)
        n_cold = int(round(len(kept) * cold_fraction))
        cold[np.random.default_rng([seed, 1]).choice(kept, size=n_cold, replace=False)] = True
    on_cold = cold[coo.col]
    # tocoo of a canonical CSR keeps the row-major order, so positions line up with indptr
    keep = ~hold & ~on_cold
    fit = sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=train.shape)
    val_pairs = hold & ~on_cold
    val = sp.csr_matrix((np.ones(int(val_pairs.sum()), np.float32), (coo.row[val_pairs], coo.col[val_pairs])),
                        shape=train.shape)
    warm = np.asarray(fit.getnnz(axis=0) > 0)
    val = sp.csr_matrix(val.multiply(sp.csr_matrix(warm[None, :].astype(np.float32))))
    val.eliminate_zeros()
    targets, candidates = {VALIDATION: val}, {VALIDATION: warm}
    if cold_fraction > 0:
        targets[COLD] = sp.csr_matrix((np.ones(int(on_cold.sum()), np.float32), (coo.row[on_cold], coo.col[on_cold])),
                                      shape=train.shape)
        candidates[COLD] = cold
    return EvalData(list(data.user_ids), list(data.item_ids), fit, targets, candidates)
