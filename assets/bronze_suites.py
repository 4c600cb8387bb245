"""Great Expectations suites of the bronze tables: what must hold after ingestion.

Ingestion already quarantines bad rows, so these suites guard the *tables*: a failure means a bug
or a contract change upstream, and it blocks every downstream asset.
"""

from hir_pipeline.contracts import DEFAULT_FUNNEL, ENTITY_TYPES


def bronze_suites(entity_types=ENTITY_TYPES, funnel=DEFAULT_FUNNEL) -> dict[str, list]:
    """Expectations per bronze table (``events`` is validated over the run's ingestion window)."""
    import great_expectations.expectations as gxe  # seconds to import: not at code-location load

    return {
        "entities": [
            gxe.ExpectTableRowCountToBeBetween(min_value=1),
            gxe.ExpectColumnValuesToNotBeNull(column="entity_id"),
            gxe.ExpectColumnValuesToBeUnique(column="entity_id"),
            gxe.ExpectColumnValuesToBeInSet(column="entity_type", value_set=list(entity_types)),
        ],
        "relations": [
            gxe.ExpectColumnValuesToNotBeNull(column="src_id"),
            gxe.ExpectColumnValuesToNotBeNull(column="dst_id"),
            gxe.ExpectColumnValuesToNotBeNull(column="relation"),
            gxe.ExpectCompoundColumnsToBeUnique(column_list=["src_id", "dst_id", "relation"]),
            gxe.ExpectColumnValuesToBeBetween(column="weight", min_value=0, strict_min=True),
        ],
        "events": [
            gxe.ExpectColumnValuesToNotBeNull(column="user_id"),
            gxe.ExpectColumnValuesToNotBeNull(column="entity_id"),
            gxe.ExpectColumnValuesToNotBeNull(column="event_ts"),
            gxe.ExpectColumnValuesToBeUnique(column="event_id"),
            gxe.ExpectColumnValuesToBeInSet(column="event_type", value_set=list(funnel)),
        ],
    }
