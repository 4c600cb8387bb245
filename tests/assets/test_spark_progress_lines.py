"""Spark progress in a real Dagster run log, with the real Spark session: only what always happens is asserted.

Whether a stage is caught running at a poll is timing (the poll lines are tested with a scripted status source in
tests/spark_jobs/test_progress.py); the last line of a block, which summarises its Spark jobs, is always written.
"""

import re

import dagster as dg

from assets.progress import GROUP_PROPERTY, spark_progress


def test_a_block_ends_with_one_line_summarising_its_spark_jobs(spark):
    @dg.asset
    def counted(context: dg.AssetExecutionContext) -> None:
        # every_s: no poll falls inside the block, so the summary is the block's only line
        with spark_progress(context, spark, "counted: count", every_s=3600):
            assert spark.range(1_000, numPartitions=4).count() == 1_000
            assert spark.range(10, numPartitions=2).collect()
        spark.range(5).count()  # after the block: not one of its jobs

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([counted], instance=instance)
    assert result.success
    lines = [e.user_message for e in instance.all_logs(result.run_id)
             if e.step_key == "counted" and e.user_message.startswith("counted: count")]
    assert len(lines) == 1, lines
    match = re.fullmatch(r"counted: count: \d+s, (\d+) Spark jobs \((\d+) succeeded\), ([\d,]+) tasks", lines[0])
    assert match, lines[0]
    jobs, succeeded, tasks = (int(g.replace(",", "")) for g in match.groups())
    assert jobs == succeeded >= 2 and tasks >= 6  # two actions over 4 + 2 partitions, all succeeded
    assert spark.sparkContext.getLocalProperty(GROUP_PROPERTY) is None  # the job group ends with the block
