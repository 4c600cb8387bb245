"""Public datasets behind the built-in sources: fetched into the cache, never committed."""

from hir_pipeline.data.fetch import (
    DataUnavailable,
    fetch_fashion_mnist,
    fetch_recbole_wheel,
    load_fashion_mnist,
    movielens_files,
)

__all__ = ["DataUnavailable", "fetch_fashion_mnist", "fetch_recbole_wheel", "load_fashion_mnist", "movielens_files"]
