"""Fixtures of these tests."""

from tests.hir_pipeline.torch_threads import _single_torch_thread  # noqa: F401 - autouse fixture
