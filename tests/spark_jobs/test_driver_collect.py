"""Collecting to the driver: a result over ``spark.driver.maxResultSize`` is one clear error naming what was being
collected and the settings to raise, not Spark's stack trace (a session of its own, with a 1 MB limit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from spark_jobs.driver_collect import to_arrow

_PROGRAM = textwrap.dedent("""
    from pyspark.sql import SparkSession, functions as F
    from spark_jobs.driver_collect import DriverResultTooLarge, to_arrow

    spark = (SparkSession.builder.master("local[1]").config("spark.driver.maxResultSize", "1m")
             .config("spark.ui.enabled", "false").getOrCreate())
    small = to_arrow(spark.range(10), "ten rows")
    assert small.num_rows == 10
    big = spark.range(0, 300_000, numPartitions=3).select(F.sha2(F.col("id").cast("string"), 256).alias("h"))
    try:
        to_arrow(big, "the test's hashes")
    except DriverResultTooLarge as exc:
        print("CAUGHT:", exc)
    spark.stop()
""")


def test_a_collect_within_the_limit_is_the_frame(spark):
    assert to_arrow(spark.range(3), "three rows").column("id").to_pylist() == [0, 1, 2]


@pytest.mark.slow
def test_a_collect_over_max_result_size_names_what_and_the_settings():
    proc = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("CAUGHT:")]
    assert "collecting the test's hashes to the driver exceeds spark.driver.maxResultSize" in line
    assert "limit 1024.0 KiB" in line and "spark.driver.memory" in line and "Memory model" in line
