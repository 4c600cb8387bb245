"""The graph settings: one resource read by every asset that builds the interaction graph or its views.

``graph_edges``, ``graph_nodes``, ``graph_views`` and ``evaluation_report`` (which rebuilds the graph from its
training split) all take :class:`GraphSettingsResource` under the key ``graph_settings``, so the tables they
write are built with the same settings by construction. Override it for a run under ``resources:`` of the run
config (``resources: {graph_settings: {config: {half_life_days: 14}}}``) or in the code location.
"""

import dagster as dg
from pydantic import Field

from hir_pipeline.contracts import DEFAULT_FUNNEL
from spark_jobs.graph import GraphConfig

_D = GraphConfig()


class GraphSettingsResource(dg.ConfigurableResource):
    """How the typed, weighted, time-decayed interaction graph and its sampled views are built.

    The fields of :class:`spark_jobs.graph.GraphConfig` (validated there: :meth:`graph_config` raises on a bad
    value, so a run fails before any work). Edges use the funnel, stage weights, half life and lookback; nodes
    the funnel and centrality buckets; views the fan-outs, ``max_dist``, ``max_view_nodes``, ``hub_cap`` and
    seed; the evaluation all of them, for the graph it trains on.
    """

    funnel: list[str] = Field(list(DEFAULT_FUNNEL), description="Event types, shallow to deep; a user -> entity "
                              "edge is typed by the deepest stage the user reached on that entity.")
    stage_weights: list[float] = Field(list(_D.stage_weights), description="Weight of one event of each funnel "
                                       "stage, aligned with funnel (impression 0.1, click 1, add_to_cart 3, "
                                       "conversion 10).")
    half_life_days: float = Field(_D.half_life_days, description="Half life of the exponential time decay, in "
                                  "days from the event date to the run date (never the wall clock).")
    lookback_days: int | None = Field(_D.lookback_days, description="Only events of the last lookback_days days "
                                      "before the run date count; None: no window (decay only, nothing removed).")
    broad_fanout: list[int] = Field(list(_D.broad_fanout), description="Neighbours sampled per node at each hop "
                                    "of the broad (teacher) view; its length is the number of hops.")
    narrow_fanout: list[int] = Field(list(_D.narrow_fanout), description="Same for the narrow (student) view.")
    max_dist: int = Field(_D.max_dist, description="Shortest-path distances are truncated here (1..126); "
                          "unreachable pairs get max_dist + 1.")
    max_view_nodes: int = Field(_D.max_view_nodes, description="Hard cap on the nodes of one view, anchor "
                                "included (the view is then marked truncated).")
    hub_cap: int = Field(_D.hub_cap, description="At most this many candidate neighbours of one node are "
                         "considered when sampling from it (a seeded weighted sample, once per node).")
    centrality_buckets: int = Field(_D.centrality_buckets, description="Number of weighted-degree quantile "
                                    "buckets in graph_nodes.centrality_bucket.")
    seed: int = Field(_D.seed, description="Seed of every sampling decision (hash-based: independent of "
                      "partitioning).")

    def graph_config(self) -> GraphConfig:
        """The Spark jobs' config (validated there: a bad value raises ``ValueError`` before any work)."""
        return GraphConfig(
            funnel=tuple(self.funnel), stage_weights=tuple(self.stage_weights), half_life_days=self.half_life_days,
            lookback_days=self.lookback_days, broad_fanout=tuple(self.broad_fanout),
            narrow_fanout=tuple(self.narrow_fanout), max_dist=self.max_dist, max_view_nodes=self.max_view_nodes,
            hub_cap=self.hub_cap, centrality_buckets=self.centrality_buckets, seed=self.seed,
        )
