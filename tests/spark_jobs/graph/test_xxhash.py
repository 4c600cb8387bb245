"""numpy twin of Spark's xxhash64 on bigint columns (spark_jobs.graph.xxhash), against a real local Spark."""

from __future__ import annotations

import numpy as np
from pyspark.sql import functions as F

from spark_jobs.graph.xxhash import xxhash64_longs


def test_equals_spark_xxhash64_bit_for_bit(spark):
    rng = np.random.default_rng(0)
    a = np.r_[rng.integers(-2**63, 2**63 - 1, 300, dtype=np.int64), 0, -1, np.iinfo(np.int64).min,
              np.iinfo(np.int64).max]
    b = rng.integers(0, 100, len(a))
    frame = spark.createDataFrame([(int(x), int(y)) for x, y in zip(a, b, strict=True)], "a long, b long")
    got = frame.select(F.xxhash64("a").alias("one"), F.xxhash64(F.lit(5).cast("long"), "a", "b").alias("three"),
                       "a", "b").toPandas()
    np.testing.assert_array_equal(xxhash64_longs(got["a"].to_numpy()), got["one"].to_numpy())
    np.testing.assert_array_equal(xxhash64_longs(5, got["a"].to_numpy(), got["b"].to_numpy()), got["three"].to_numpy())
