"""Configuration of the interaction graph and its sampled views (one frozen dataclass).

The funnel, its stage weights and ``max_dist`` are read from here by every stage that needs them (ingestion,
the graph, the model, the evaluation), through the ``graph_settings`` resource, so they always agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hir_pipeline.contracts import DEFAULT_FUNNEL, DEFAULT_MAX_DIST

#: Ways to compute ``graph_nodes.structure_embedding`` (``GraphConfig.structure_method``).
STRUCTURE_METHODS = ("spectral", "fastrp")


@dataclass(frozen=True)
class GraphConfig:
    """How the typed, weighted, time-decayed interaction graph and its views are built.

    Args:
        funnel: event types, shallow to deep (``contracts.DEFAULT_FUNNEL``): the event types ingestion accepts;
            a user -> entity edge is typed by the deepest stage the user reached on that entity.
        stage_weights: weight of one event of each funnel stage, aligned with ``funnel`` (default impression
            0.1, click 1, add_to_cart 3, conversion 10), in the graph's edges and in the evaluation baselines'
            training matrix.
        half_life_days: half life of the exponential time decay ``2 ** (-age_days / half_life_days)``; age is
            counted in whole days from the event date to the run date (never the wall clock).
        lookback_days: only events with ``run_date - lookback_days < event_date <= run_date`` are used;
            ``None`` (default) applies no window: decay down-weights old activity, it never removes it.
        broad_fanout: neighbours sampled per node at each hop of the broad (teacher) view; its length is the
            number of hops (default 2 hops: 16 then 4 per node).
        narrow_fanout: same for the narrow (student) view (default 1 hop of 8).
        max_dist: shortest-path distances are truncated here (1..126); unreachable pairs get ``max_dist + 1``.
            The model's attention has one distance bias per value, so it follows this one.
        max_view_nodes: hard cap on the nodes of one view (anchor included); nodes sampled at later hops and
            with larger sampling keys are dropped first and the view is marked ``truncated``.
        hub_cap: at most this many candidate neighbours of one node are considered when sampling from it
            (chosen once per node by a seeded weighted sample), so a hub with 1e5 events costs ``hub_cap``
            rows per visit, not 1e5.
        centrality_buckets: number of weighted-degree quantile buckets in ``graph_nodes.centrality_bucket``.
        seed: seed of every sampling decision (hash-based, so results do not depend on partitioning), including
            the random projection of the structure embedding.
        structure_embedding: compute the structure embedding of every node (``graph_nodes.structure_embedding``);
            ``False`` leaves it null.
        structure_method: ``"spectral"`` (default): the top eigenvectors of the normalised adjacency, a truncated
            SVD on a user-item graph, iterated on the driver (:mod:`spark_jobs.graph.spectral`); ``"fastrp"``: FastRP's
            random-projection sketch, all in Spark jobs (:mod:`spark_jobs.graph.fastrp`; for graphs whose nodes do not
            fit the driver's memory).
        structure_dim: width ``d`` of the structure embedding.
        structure_power_iterations: spectral only: subspace iterations ``X = orth(M X)`` (more: closer to the
            exact eigenvectors; one sparse matrix product each, on the driver).
        structure_weight_exponent: spectral only: a connected pair's summed edge weight is raised to this power
            (0: every connected pair counts once, whatever its funnel stage).
        structure_normalisation_exponent: spectral only: ``a`` of ``D^-a W D^-a`` (0.5: symmetric normalisation;
            smaller values keep more of popular nodes' weight).
        structure_iteration_weights: FastRP only: weight ``alpha_t`` of propagation step ``t = 1..k`` in the embedding
            ``rownorm(sum_t alpha_t X_t)``; its length is the number of steps ``k`` (default 3, equal weights).
        structure_sparsity: ``s`` of the very sparse random projection: an entry is non-zero with probability
            ``1 / s`` (default 3, Achlioptas' sparse projection).
        structure_degree_exponent: FastRP only: ``beta`` of the initial vectors ``deg^beta R`` (weighted degree);
            negative values lower the weight of hubs (default 0: plain FastRP).
    """

    funnel: tuple[str, ...] = DEFAULT_FUNNEL
    stage_weights: tuple[float, ...] = (0.1, 1.0, 3.0, 10.0)
    half_life_days: float = 30.0
    lookback_days: int | None = None
    broad_fanout: tuple[int, ...] = (16, 4)
    narrow_fanout: tuple[int, ...] = (8,)
    max_dist: int = DEFAULT_MAX_DIST
    max_view_nodes: int = 96
    hub_cap: int = 32
    centrality_buckets: int = 10
    seed: int = 0
    structure_embedding: bool = True
    structure_method: str = "spectral"
    structure_dim: int = 32
    structure_power_iterations: int = 6
    structure_weight_exponent: float = 0.0
    structure_normalisation_exponent: float = 0.25
    structure_iteration_weights: tuple[float, ...] = (1.0, 1.0, 1.0)
    structure_sparsity: float = 3.0
    structure_degree_exponent: float = 0.0

    def __post_init__(self) -> None:
        if len(self.stage_weights) != len(self.funnel):
            raise ValueError(f"stage_weights has {len(self.stage_weights)} entries for {len(self.funnel)} stages")
        if any(not w > 0 for w in self.stage_weights):
            raise ValueError("stage_weights must be positive")
        if not self.half_life_days > 0:
            raise ValueError("half_life_days must be positive")
        if self.lookback_days is not None and self.lookback_days < 1:
            raise ValueError("lookback_days must be >= 1 or None")
        for name in ("broad_fanout", "narrow_fanout"):
            fan = getattr(self, name)
            if not fan or any(k < 1 for k in fan):
                raise ValueError(f"{name} needs at least one hop with fan-out >= 1")
        if not 1 <= self.max_dist <= 126:
            raise ValueError("max_dist must be in 1..126 (distances are stored as int8)")
        if self.max_view_nodes < 1 or self.hub_cap < 1 or self.centrality_buckets < 1:
            raise ValueError("max_view_nodes, hub_cap and centrality_buckets must be >= 1")
        if self.structure_method not in STRUCTURE_METHODS:
            raise ValueError(f"structure_method must be one of {', '.join(STRUCTURE_METHODS)}, "
                             f"not {self.structure_method!r}")
        if self.structure_dim < 1:
            raise ValueError("structure_dim must be >= 1")
        if self.structure_power_iterations < 1:
            raise ValueError("structure_power_iterations must be >= 1")
        for name in ("structure_weight_exponent", "structure_normalisation_exponent"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        alphas = self.structure_iteration_weights
        if not alphas or any(not (math.isfinite(a) and a >= 0) for a in alphas) or not sum(alphas) > 0:
            raise ValueError("structure_iteration_weights needs at least one step, weights finite, >= 0, not all 0")
        if not self.structure_sparsity >= 1:
            raise ValueError("structure_sparsity must be >= 1 (an entry is non-zero with probability 1 / s)")
        if not math.isfinite(self.structure_degree_exponent):
            raise ValueError("structure_degree_exponent must be finite")

    @property
    def broad_hops(self) -> int:
        return len(self.broad_fanout)

    @property
    def narrow_hops(self) -> int:
        return len(self.narrow_fanout)

    def views(self) -> dict[str, tuple[int, ...]]:
        """Fan-out per hop of every view, by view name (``contracts.VIEW_BROAD`` / ``VIEW_NARROW``)."""
        from hir_pipeline.contracts import VIEW_BROAD, VIEW_NARROW

        return {VIEW_BROAD: self.broad_fanout, VIEW_NARROW: self.narrow_fanout}
