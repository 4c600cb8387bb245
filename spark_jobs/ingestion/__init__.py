"""The ingestion stage in Spark: a source folder -> bronze rows and quarantined rows.

* :mod:`spark_jobs.ingestion.reader` - reading a source folder that follows the source contract (schema problems
  stop the run before anything is written);
* :mod:`spark_jobs.ingestion.labels` - row-level validation: each row accepted or quarantined with a reason;
* :mod:`spark_jobs.ingestion.sources` - the built-in sources (MovieLens-100k, a synthetic ad ecosystem), written
  as source-contract folders.

Nothing is imported here: import the submodule that holds a name.
"""
