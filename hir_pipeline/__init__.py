"""hir-pipeline: hierarchical interest representations for ad and recommendation platforms."""

__version__ = "0.1.0"
