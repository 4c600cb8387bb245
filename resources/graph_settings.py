"""The graph settings: one resource read by every asset that needs the funnel or builds the interaction graph.

``bronze_tables`` (the accepted event types), ``graph_edges``, ``graph_nodes``, ``graph_views``,
``interest_model`` (the funnel of its engagement pairs, and ``max_dist``: the model's distance biases follow the
views') and ``evaluation_report`` (which rebuilds the graph from its training split; its baselines weigh events
by ``stage_weights``) all take :class:`GraphSettingsResource` under the key ``graph_settings``, so what they
write agrees by construction. Override it for a run under ``resources:`` of the run config
(``resources: {graph_settings: {config: {half_life_days: 14}}}``) or in the code location.
"""

import dagster as dg

from resources.config_schema import config_class
from spark_jobs.graph import GraphConfig


class GraphSettingsResource(config_class(GraphConfig, base=dg.ConfigurableResource, name="GraphSettings")):
    """How the typed, weighted, time-decayed interaction graph and its sampled views are built, and the funnel
    every stage shares.

    The fields of :class:`spark_jobs.graph.GraphConfig`, derived from it (defaults, descriptions and validation
    are that class's: a bad value fails the run as it starts, before any work).
    """

    def graph_config(self) -> GraphConfig:
        """The Spark jobs' config."""
        return self.to_dataclass()
