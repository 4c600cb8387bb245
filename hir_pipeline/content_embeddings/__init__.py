"""World-knowledge content embeddings: text (MiniLM), image (EfficientNet-Lite0), video (evenly sampled frames
through the image model, mean-pooled; decoded with PyAV), structured metadata (feature hashing), fused into one unit
vector per content entity. Torch + transformers only; the Spark job that runs this at scale is
:mod:`spark_jobs.content_embeddings`.
"""

from hir_pipeline.content_embeddings.config import EmbeddingConfig, FusionConfig

__all__ = ["EmbeddingConfig", "FusionConfig"]
