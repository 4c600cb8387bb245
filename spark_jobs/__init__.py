"""Distributed data jobs: pure functions from DataFrames to DataFrames (no Dagster here)."""
