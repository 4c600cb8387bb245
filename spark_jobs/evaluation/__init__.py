"""The evaluation stage in Spark: the split, the data the evaluation collects, and one evaluation run.

* :mod:`spark_jobs.evaluation.split` - the evaluation split of the nightly run (temporal hold-out, deep-funnel
  targets, cold items);
* :mod:`spark_jobs.evaluation.data` - Spark -> numpy: the split's pairs and item content, on the driver;
* :mod:`spark_jobs.evaluation.run` - one evaluation run without Dagster
  (:func:`~spark_jobs.evaluation.run.evaluate_run`), the inner validation split, and the ``evaluation_metrics``
  reads and writes.

Nothing is imported here: import the submodule that holds a name.
"""
