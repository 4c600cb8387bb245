"""Whole-source problems stop with one clear line naming the table and column."""

from __future__ import annotations

import pytest

from spark_jobs.ingestion.reader import RAW_COLUMN, SourceError, read_source


def _write(spark, root, entities_ddl="entity_id string, entity_type string",
           entities_rows=(("u1", "user"),)):
    spark.createDataFrame(list(entities_rows), entities_ddl).write.parquet(str(root / "entities"))
    spark.createDataFrame([("u1", "u1", "x")], "src_id string, dst_id string, relation string") \
        .write.parquet(str(root / "relations"))
    spark.createDataFrame(
        [("u1", "p1", "click", "2024-01-01 00:00:00", "extra")],
        "user_id string, entity_id string, event_type string, event_ts string, something string",
    ).write.format("delta").save(str(root / "events"))


def test_reads_parquet_and_delta_with_defaults(spark, tmp_path):
    _write(spark, tmp_path)
    tables = read_source(spark, str(tmp_path))
    assert set(tables) == {"entities", "relations", "events"}
    ev = tables["events"]
    assert "something" not in ev.columns and "value" in ev.columns and "event_id" in ev.columns
    row = ev.first()
    assert row["value"] is None and '"something":"extra"' in row[RAW_COLUMN]


def test_missing_folder(spark, tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        read_source(spark, str(tmp_path / "nope"))


def test_missing_table(spark, tmp_path):
    _write(spark, tmp_path)
    import shutil

    shutil.rmtree(tmp_path / "relations")
    with pytest.raises(SourceError, match="missing table 'relations'"):
        read_source(spark, str(tmp_path))


def test_wrong_type_names_table_column_and_fix(spark, tmp_path):
    _write(spark, tmp_path, "entity_id string, entity_type long", (("u1", 1),))
    with pytest.raises(SourceError, match=r"^entities\.entity_type: expected string, found long; write it as text "
                                          r"\(pandas: df\[col\]\.astype\('string'\)\)$"):
        read_source(spark, str(tmp_path))


def test_missing_required_column(spark, tmp_path):
    _write(spark, tmp_path, "entity_id string", (("u1",),))
    with pytest.raises(SourceError, match=r"entities\.entity_type: required column is missing"):
        read_source(spark, str(tmp_path))


# --- sources as users write them: plain pandas / pyarrow defaults ------------------------------------------------

def _pandas_source(root, variant: str) -> None:
    """A three-table source written with ``DataFrame.to_parquet()`` defaults, altered as ``variant`` says."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    entities = pd.DataFrame({
        "entity_id": ["u1", "u2", "i1", "i2"], "entity_type": ["user", "user", "product", "product"],
        "title": [None, None, "red shoe", "blue hat"], "description": [None] * 4, "image_uri": [None] * 4,
        "attributes": [None, None, '{"price": 3}', None],
        "created_at": pd.to_datetime(["2024-01-01", "2024-01-01", "2024-01-02 06:30", "2024-01-03"], format="ISO8601")})
    relations = pd.DataFrame({"src_id": ["i1"], "dst_id": ["i2"], "relation": ["similar_to"], "weight": [1.0]})
    events = pd.DataFrame({
        "event_id": ["e1", "e2", "e3"], "user_id": ["u1", "u1", "u2"], "entity_id": ["i1", "i2", "i1"],
        "event_type": ["click", "conversion", "impression"],
        "event_ts": pd.to_datetime(["2024-03-01 10:00", "2024-03-02 11:00:00.123456", "2024-03-02 12:00"],
                                   format="ISO8601"),
        "value": [1.0, 2.0, 0.5]})
    tables = {"entities": entities, "relations": relations, "events": events}
    if variant == "tz_aware":
        events["event_ts"] = events["event_ts"].dt.tz_localize("Europe/Paris")  # 1 hour ahead of UTC in March
    elif variant == "numeric_ids":  # int64 ids, and float64 ones as pandas writes integers with gaps
        entities["entity_id"] = [1, 2, 3, 4]
        events["user_id"] = [1.0, 1.0, 2.0]
        events["entity_id"] = [3, 4, 3]
        relations["src_id"], relations["dst_id"] = [3], [4]
    elif variant == "narrow_numbers":
        events["value"] = events["value"].astype("float32")
        relations["weight"] = np.array([1], dtype="int32")
    elif variant == "dictionary_strings":
        events["event_type"] = events["event_type"].astype("category")
    elif variant == "epoch_seconds":
        events["event_ts"] = events["event_ts"].astype("int64") // 10**9
    for name, df in tables.items():
        if variant == "large_string":
            table = pa.Table.from_pandas(df, preserve_index=False)
            table = table.cast(pa.schema([pa.field(f.name, pa.large_string() if pa.types.is_string(f.type)
                                                   else f.type) for f in table.schema]))
            pq.write_table(table, root / f"{name}.parquet")
        elif variant == "folder_of_files":  # the users' rows in one file: its title column is all null
            (root / name).mkdir()
            half = (len(df) + 1) // 2
            df.iloc[:half].to_parquet(root / name / "part-0.parquet")
            df.iloc[half:].to_parquet(root / name / "part-1.parquet")
        else:
            df.to_parquet(root / f"{name}.parquet")


@pytest.mark.parametrize("variant", ["defaults", "tz_aware", "numeric_ids", "narrow_numbers", "dictionary_strings",
                                     "large_string", "folder_of_files", "epoch_seconds"])
def test_pandas_written_sources_read_correctly(spark, tmp_path, variant):
    from spark_jobs.ingestion.reader import as_timestamp

    _pandas_source(tmp_path, variant)
    tables = read_source(spark, str(tmp_path))
    ev, en = tables["events"], tables["entities"]
    events = ev.select("event_id", "user_id", "entity_id", "event_type", F_double(ev, "value"),
                       as_timestamp(ev, "event_ts").cast("string").alias("ts")).orderBy("event_id").collect()
    hour = "09" if variant == "tz_aware" else "10"
    micros = "" if variant == "epoch_seconds" else ".123456"
    user, item = ("1", "3") if variant == "numeric_ids" else ("u1", "i1")
    assert [tuple(r) for r in events][0] == ("e1", user, item, "click", 1.0, f"2024-03-01 {hour}:00:00")
    assert events[1]["ts"] == f"2024-03-02 {int(hour) + 1}:00:00{micros}"
    assert [r["event_type"] for r in events] == ["click", "conversion", "impression"]
    entities = en.select("entity_id", "title", "description", as_timestamp(en, "created_at").cast("string")
                         .alias("c")).orderBy("entity_id").collect()
    assert [r["title"] for r in entities if r["title"]] == ["red shoe", "blue hat"]
    assert all(r["description"] is None for r in entities)
    assert "2024-01-02 06:30:00" in [r["c"] for r in entities]
    assert tables["relations"].first()["weight"] == 1


def F_double(df, name):  # noqa: N802 - reads like the functions module it stands in for
    from pyspark.sql import functions as F

    return F.col(name).cast("double").alias(name)


def test_missing_float_id_is_null_and_invalid_utf8_is_replaced(spark, tmp_path):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    _pandas_source(tmp_path, "defaults")
    events = pd.DataFrame({"user_id": [1.0, float("nan")], "entity_id": ["i1", "i1"],
                           "event_type": ["click", "click"], "event_ts": pd.to_datetime(["2024-03-01"] * 2)})
    events.to_parquet(tmp_path / "events.parquet")
    bad = pa.array([b"ok", b"caf\xe9"], type=pa.binary()).cast(pa.string(), safe=False)  # latin-1 bytes
    pq.write_table(pa.table({"entity_id": ["u1", "i1"], "entity_type": ["user", "product"], "title": bad}),
                   tmp_path / "entities.parquet")
    tables = read_source(spark, str(tmp_path))
    assert [r["user_id"] for r in tables["events"].collect()] == ["1", None]
    assert tables["entities"].orderBy("entity_id").collect()[0]["title"] == "caf\ufffd"


def test_timestamps_as_users_write_them(spark):
    from spark_jobs.ingestion.reader import as_timestamp

    text = {
        "2024-03-01": "2024-03-01 00:00:00", " 2024-3-1 ": "2024-03-01 00:00:00",
        "2024-03-01T10:00:00.123+02:00": "2024-03-01 08:00:00.123", "2024-03-01T10:00:00Z": "2024-03-01 10:00:00",
        "2024/03/01": "2024-03-01 00:00:00", "2024/3/1 10:05": "2024-03-01 10:05:00",
        "20240301": "2024-03-01 00:00:00", "1709287200": "2024-03-01 10:00:00",
        "1709287200123": "2024-03-01 10:00:00.123", "1709287200123456999": "2024-03-01 10:00:00.123456",
        "03/01/2024": None, "2024-02-30": None, "NaT": None, "": None, "9999999999999999999": None,
    }
    df = spark.createDataFrame([(k,) for k in text], "v string")
    got = {r["v"]: r["t"] for r in df.select("v", as_timestamp(df, "v").cast("string").alias("t")).collect()}
    assert got == text
    epochs = {1709287200: "2024-03-01 10:00:00", 1709287200123: "2024-03-01 10:00:00.123",
              1709287200123456: "2024-03-01 10:00:00.123456", 1709287200123456789: "2024-03-01 10:00:00.123456"}
    df = spark.createDataFrame([(k,) for k in epochs], "v long")
    assert {r["v"]: r["t"] for r in df.select("v", as_timestamp(df, "v").cast("string").alias("t")).collect()} \
        == epochs


def test_a_backfill_run_date_ignores_future_events_and_is_never_in_the_future(spark):
    import datetime as dt

    from spark_jobs.ingestion.reader import event_date_span

    today = dt.datetime.now(dt.UTC).date()
    tomorrow = today + dt.timedelta(days=1)
    rows = [("2024-03-01 10:00:00",), ("2023-11-05 23:59:59",), ("2099-01-01 00:00:00",), ("garbage",)]
    events = spark.createDataFrame(rows, "event_ts string")
    assert event_date_span(events, not_after=dt.datetime(2025, 1, 1)) == (dt.date(2023, 11, 5), dt.date(2024, 3, 1))
    events = spark.createDataFrame([*rows, (f"{tomorrow} 01:00:00",)], "event_ts string")
    assert event_date_span(events, not_after=dt.datetime.combine(tomorrow, dt.time(12))) == (
        dt.date(2023, 11, 5), today)
    assert event_date_span(spark.createDataFrame([("x",)], "event_ts string"), dt.datetime(2025, 1, 1)) is None


def test_a_folder_whose_files_disagree_on_types_reads_as_text_where_needed(spark, tmp_path):
    """One file with string ids and an all-null created_at, another with int ids and timestamps; int32 and float64
    weights; an all-null value in one file only."""
    import numpy as np
    import pandas as pd

    from spark_jobs.ingestion.reader import as_timestamp

    for t in ("entities", "relations", "events"):
        (tmp_path / t).mkdir()
    pd.DataFrame({"entity_id": ["u1", "i1"], "entity_type": ["user", "product"], "created_at": [None, None]}) \
        .to_parquet(tmp_path / "entities" / "a.parquet")
    pd.DataFrame({"entity_id": [7, 8], "entity_type": ["user", "product"],
                  "created_at": pd.to_datetime(["2024-01-01", "2024-01-02"])}) \
        .to_parquet(tmp_path / "entities" / "b.parquet")
    pd.DataFrame({"src_id": ["i1"], "dst_id": ["8"], "relation": ["r"], "weight": np.array([1], dtype="int32")}) \
        .to_parquet(tmp_path / "relations" / "a.parquet")
    pd.DataFrame({"src_id": ["8"], "dst_id": ["i1"], "relation": ["r"], "weight": [2.5]}) \
        .to_parquet(tmp_path / "relations" / "b.parquet")
    pd.DataFrame({"user_id": ["u1"], "entity_id": ["i1"], "event_type": ["click"],
                  "event_ts": pd.to_datetime(["2024-03-01"]), "value": np.array([3], dtype="int32")}) \
        .to_parquet(tmp_path / "events" / "a.parquet")
    pd.DataFrame({"user_id": ["7"], "entity_id": ["8"], "event_type": ["click"],
                  "event_ts": pd.to_datetime(["2024-03-02"]), "value": [None]}) \
        .to_parquet(tmp_path / "events" / "b.parquet")
    tables = read_source(spark, str(tmp_path))
    en = tables["entities"]
    assert sorted(tuple(r) for r in en.select("entity_id", as_timestamp(en, "created_at").cast("string")).collect()) \
        == [("7", "2024-01-01 00:00:00"), ("8", "2024-01-02 00:00:00"), ("i1", None), ("u1", None)]
    assert sorted(tuple(r) for r in tables["relations"].select("src_id", "weight").collect()) == [("8", 2.5),
                                                                                                  ("i1", 1.0)]
    assert sorted(tuple(r) for r in tables["events"].select("user_id", "value").collect()) == [("7", None),
                                                                                              ("u1", 3)]
