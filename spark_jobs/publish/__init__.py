"""Publishing in Spark: the model's internal tables -> the four versioned tables of the output contract.

* :mod:`spark_jobs.publish.transform` builds the tables (long form, labels, profiles, super-graph);
* :mod:`spark_jobs.publish.matching` decides the published cluster IDs (stable across model versions);
* :mod:`spark_jobs.publish.io` reads a run date's inputs from the lake and writes the four tables, then the
  ``publications`` manifest row that records them.

The names used by the publish asset and the tests are re-exported here.
"""

from spark_jobs.publish.io import (
    MANIFEST_TABLE,
    WRITE_ORDER,
    MissingInput,
    last_commit,
    publish,
    read_inputs,
    read_picture_data,
    write_publication,
    write_publication_table,
    write_publications_row,
)
from spark_jobs.publish.matching import ClusterIds, next_cluster_ids, previous_run_date, stable_mapping
from spark_jobs.publish.transform import (
    MixedModelVersions,
    PublicationFrames,
    PublishInputs,
    PublishSettings,
    build_publication,
    cluster_assignments,
    cluster_labels,
    cluster_profiles,
    entity_terms,
    interest_supergraph,
    long_assignments,
    model_version_of,
    node_embeddings,
)

__all__ = [
    "MANIFEST_TABLE",
    "WRITE_ORDER",
    "ClusterIds",
    "MissingInput",
    "MixedModelVersions",
    "PublicationFrames",
    "PublishInputs",
    "PublishSettings",
    "build_publication",
    "cluster_assignments",
    "cluster_labels",
    "cluster_profiles",
    "entity_terms",
    "interest_supergraph",
    "last_commit",
    "long_assignments",
    "model_version_of",
    "next_cluster_ids",
    "node_embeddings",
    "previous_run_date",
    "publish",
    "read_inputs",
    "read_picture_data",
    "stable_mapping",
    "write_publication",
    "write_publication_table",
    "write_publications_row",
]
