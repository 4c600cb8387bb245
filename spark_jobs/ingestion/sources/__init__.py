"""Built-in sources (MovieLens-100k, a synthetic ad ecosystem) written as source-contract folders.

A built-in source is written exactly like a user's folder (ARCHITECTURE.md "Source contract"):
``<out>/entities``, ``<out>/relations`` and ``<out>/events`` as Spark Parquet holding only the contract
columns with their contract types, so the generic reader treats both alike. Writing goes to a
temporary sibling folder that is renamed at the end, and a :data:`SUCCESS_MARKER` file (JSON: the row
counts and the generator's settings) makes a complete folder recognisable; a complete folder is a
cache hit and is never rewritten.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.contracts import SOURCE_TABLES

SUCCESS_MARKER = "_SUCCESS_SOURCE"
CONTRACT_TABLES: tuple[str, ...] = ("entities", "relations", "events")


def to_contract(table: str, df: DataFrame) -> DataFrame:
    """Select the contract columns of ``table`` in contract order, cast to their contract types.

    Args:
        table: ``entities``, ``relations`` or ``events``.
        df: a DataFrame holding at least the required columns; absent optional ones become null.
    """
    present = set(df.columns)
    return df.select(*[
        (F.col(c.name) if c.name in present else F.lit(None)).cast(c.ddl).alias(c.name)
        for c in SOURCE_TABLES[table]
    ])


def read_marker(out: Path) -> dict[str, Any] | None:
    """The JSON of ``out``'s success marker, or None when ``out`` is not a complete source."""
    marker = Path(out) / SUCCESS_MARKER
    if not marker.is_file():
        return None
    return json.loads(marker.read_text())


def write_source_folder(
    spark: SparkSession,
    out: Path,
    build: Callable[[Path], Mapping[str, DataFrame]],
    settings: Mapping[str, Any],
) -> dict[str, int]:
    """Write a source folder atomically, or return the counts of the complete one already there.

    Args:
        spark: the session (reads the written tables back to count them).
        out: the source folder to produce.
        build: called with the temporary folder (so it can write side files such as images there);
            returns ``{table: DataFrame}`` for the three contract tables plus any extra Parquet tables
            (e.g. ``ground_truth``), which are written as they are.
        settings: JSON-serialisable generator settings stored in the marker; a complete ``out`` made
            with different settings is an error rather than a silent stale cache hit.

    Returns:
        Row counts: ``<table>`` for every table written, ``events.<event_type>`` and
        ``entities.<entity_type>`` per type.
    """
    out = Path(out).resolve()
    settings = json.loads(json.dumps(dict(settings), default=str))
    done = read_marker(out)
    if done is not None:
        if done.get("settings") != settings:
            raise ValueError(f"{out} holds a source generated with other settings "
                             f"({done.get('settings')} != {settings}); use another folder or delete it")
        return done["counts"]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        tmp.mkdir()
        tables = dict(build(tmp))
        missing = [t for t in CONTRACT_TABLES if t not in tables]
        if missing:
            raise ValueError(f"source builder returned no {missing}")
        for name, df in tables.items():
            frame = to_contract(name, df) if name in CONTRACT_TABLES else df
            frame.write.mode("overwrite").parquet(str(tmp / name))
        counts = count_tables(spark, tmp, list(tables))
        (tmp / SUCCESS_MARKER).write_text(json.dumps({"counts": counts, "settings": settings}, indent=1))
        if read_marker(out) is not None:  # a concurrent writer finished first: keep its (equal) result
            return read_marker(out)["counts"]  # type: ignore[index]
        if out.exists():  # an interrupted earlier attempt
            shutil.rmtree(out)
        os.replace(tmp, out)
        return counts
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def count_tables(spark: SparkSession, root: Path, tables: list[str]) -> dict[str, int]:
    """Row counts of the Parquet tables under ``root`` (total, and per type for events/entities)."""
    counts: dict[str, int] = {}
    for name in tables:
        df = spark.read.parquet(str(root / name))
        counts[name] = df.count()
        type_col = {"events": "event_type", "entities": "entity_type"}.get(name)
        if type_col:
            for row in df.groupBy(type_col).count().collect():
                counts[f"{name}.{row[type_col]}"] = int(row["count"])
    return counts
