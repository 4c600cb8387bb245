"""The model stage in Spark: the graph and content tables in, the model's results out.

* :mod:`spark_jobs.model.inputs` - graph and content Delta tables -> :class:`~hir_pipeline.training.inputs.ModelInputs`
  (numpy arrays, collected on the driver);
* :mod:`spark_jobs.model.outputs` - numpy model results -> the ``model_outputs`` and ``model_hierarchy`` tables.

Nothing is imported here: import the submodule that holds a name.
"""
