"""Dagster software-defined assets, one module per group.

Each module holds the assets and asset checks of one group; :data:`ASSET_MODULES` is what the
definitions load, in pipeline order.
"""

from assets import content_embeddings, evaluation, graph, ingestion, maintenance, model, publish

ASSET_MODULES = [ingestion, graph, content_embeddings, model, publish, evaluation, maintenance]
