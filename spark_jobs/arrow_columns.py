"""Dense matrices as Arrow list columns, without a Python object per row.

The driver-side stages (the spectral structure embedding, the model's outputs) move ``[N, D]`` matrices from
numpy to Spark through Arrow; a list column built from one flat buffer and offsets costs one copy, where
``pandas`` rows of arrays cost one Python object each.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def list_column(matrix: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    """A ``[N, D]`` matrix as an Arrow list column (one list of ``D`` values per row)."""
    n, d = matrix.shape
    offsets = pa.array(np.arange(0, (n + 1) * d, d, dtype=np.int32) if n else np.zeros(1, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(matrix).reshape(-1), type=value_type))
