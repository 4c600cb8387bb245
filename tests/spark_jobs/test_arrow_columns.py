"""Matrices as Arrow list columns (spark_jobs.arrow_columns)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_jobs.arrow_columns import list_column


def test_one_list_per_row_in_row_order():
    m = np.arange(12, dtype=np.float64).reshape(4, 3) / 7
    col = list_column(m[:, ::-1], pa.float32())  # a strided view is copied, not misread
    assert col.type == pa.list_(pa.float32())
    np.testing.assert_allclose(np.array(col.to_pylist()), m[:, ::-1], rtol=1e-7)
    assert list_column(np.zeros((0, 5)), pa.float64()).to_pylist() == []
