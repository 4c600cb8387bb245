"""The HIR model and training settings: one resource read by ``interest_model`` and ``evaluation_report``.

``interest_model`` trains with them; ``evaluation_report`` trains its model on the evaluation split with the
settings the run date's training run logged, and falls back to this same resource when there is none (or when
``use_production_config`` is off), so the two never drift apart. Override it for a run under ``resources:``
of the run config (``resources: {model_settings: {config: {train: {epochs: 8}}}}``) or in the code location.

The fields are those of :class:`~hir_pipeline.model.config.ModelConfig` (section ``model``) and
:class:`~hir_pipeline.model.config.TrainConfig` (section ``train``), derived from them, except the few set from
elsewhere (:data:`MODEL_SET_ELSEWHERE`, :data:`TRAIN_SET_ELSEWHERE`).
"""

import dagster as dg

from hir_pipeline.model.config import ModelConfig, TrainConfig
from resources.config_schema import config_class, section
from spark_jobs.graph import GraphConfig

#: ModelConfig fields not configured here: the content width and the two vocabularies come from the data and the
#: contract, ``max_dist`` from the graph settings (the distance biases must match the views).
MODEL_SET_ELSEWHERE = ("content_dim", "num_node_types", "degree_buckets", "max_dist")
#: TrainConfig fields the assets set: where the epoch checkpoints go, and resuming from them.
TRAIN_SET_ELSEWHERE = ("checkpoint_dir", "resume", "keep_checkpoints")

ModelSection = config_class(ModelConfig, exclude=MODEL_SET_ELSEWHERE)
TrainSection = config_class(TrainConfig, exclude=TRAIN_SET_ELSEWHERE)


class ModelSettingsResource(dg.ConfigurableResource):
    """The hierarchical interest model's settings and how it is trained (shared by ``interest_model`` and the
    evaluation's fallback)."""

    model: ModelSection = section(ModelSection)
    train: TrainSection = section(TrainSection)

    def model_config_for(self, graph: GraphConfig) -> ModelConfig:
        """The model settings, with ``max_dist`` of the graph the model reads.

        Args:
            graph: the graph settings the views were built with.
        """
        return self.model.to_dataclass(max_dist=graph.max_dist)

    def train_config(self) -> TrainConfig:
        """The training settings (checkpoint folder and resuming are the asset's)."""
        return self.train.to_dataclass()
