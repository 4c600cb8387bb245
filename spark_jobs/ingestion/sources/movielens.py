"""MovieLens-100k as a source-contract folder.

MovieLens-100k (Harper & Konstan, TiiS 2015; 943 users, 1,682 movies, 100,000 ratings) in RecBole's
atomic-file form, plus RecBole's Freebase knowledge graph (KB4Rec) for the production companies. Files
come from :func:`hir_pipeline.data.movielens_files`. The mapping onto the ad-platform contract:

* users -> ``user`` entities ``user:<id>``; attributes JSON ``{age, gender, occupation, zip}``.
* movies -> ``product`` entities ``movie:<id>``: title, genres and year in the description and in the
  attributes JSON; ``created_at`` is 1 January of the release year (RecBole keeps only the year; when
  that field is unparseable the year in the title's "(YYYY)" is used, else null).
* genres -> ``category`` entities ``genre:<name>`` + ``product_in_category`` (movie -> genre).
* production companies -> ``advertiser`` entities ``advertiser:<freebase mid>`` +
  ``advertiser_produces_product`` (company -> movie), from the KG relation
  ``film.film.production_companies`` (film -> company) joined through ``ml-100k.link``. The KG holds
  Freebase ids only, no names, so an advertiser's title is its id. 251 companies, 880 movies.
* each rating -> funnel events on the movie: ``click`` always, ``add_to_cart`` when rating >= 4,
  ``conversion`` when rating == 5; ``value`` = rating, ``event_ts`` = the rating's unix time (UTC),
  ``event_id`` = ``ml:<user>:<item>:<stage>`` (a user rates a movie at most once, so ids are unique).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.ingestion.sources import write_source_folder

#: Ratings are mapped to the funnel by these thresholds: stage -> minimum rating.
RATING_STAGES: tuple[tuple[str, int], ...] = (("click", 1), ("add_to_cart", 4), ("conversion", 5))
#: The KG relation naming a film's production company (head = film, tail = company).
PRODUCTION_COMPANY_RELATION = "film.film.production_companies"
#: Bumped whenever the mapping above changes, so cached folders of an older mapping are not reused.
MAPPING_VERSION = 1


def _read_tsv(spark: SparkSession, path: Path, ddl: str) -> DataFrame:
    # RecBole atomic files: tab-separated, one typed header line, no quoting (titles hold commas).
    return spark.read.csv(str(path), sep="\t", header=True, schema=ddl, quote="", mode="FAILFAST")


def movielens_tables(spark: SparkSession, files: dict[str, Path]) -> dict[str, DataFrame]:
    """The contract tables (not yet cast) of MovieLens-100k.

    Args:
        spark: the session to read with.
        files: the paths from :func:`hir_pipeline.data.movielens_files` (keys ``inter``, ``item``,
            ``user``, ``kg``, ``link``).
    """
    inter = _read_tsv(spark, files["inter"], "user_id string, item_id string, rating double, ts double")
    items = _read_tsv(spark, files["item"], "item_id string, title string, year string, genres string")
    users = _read_tsv(spark, files["user"], "user_id string, age int, gender string, occupation string, zip string")
    kg = _read_tsv(spark, files["kg"], "head string, relation string, tail string")
    link = _read_tsv(spark, files["link"], "item_id string, mid string")

    user_entities = users.select(
        F.concat(F.lit("user:"), "user_id").alias("entity_id"),
        F.lit("user").alias("entity_type"),
        F.to_json(F.struct("age", "gender", "occupation", "zip")).alias("attributes"),
    )

    year = F.coalesce(
        F.when(F.col("year").rlike(r"^\d{4}$"), F.col("year").cast("int")),
        F.nullif(F.regexp_extract("title", r"\((\d{4})\)", 1), F.lit("")).cast("int"),
    )
    genre_list = F.split(F.trim("genres"), " +")
    movies = items.select("item_id", "title", year.alias("year"), genre_list.alias("genres"))
    movie_entities = movies.select(
        F.concat(F.lit("movie:"), "item_id").alias("entity_id"),
        F.lit("product").alias("entity_type"),
        F.col("title"),
        F.concat_ws(
            "", F.lit("Movie. Genres: "), F.array_join("genres", ", "),
            F.when(F.col("year").isNotNull(), F.concat(F.lit(". Released "), F.col("year").cast("string"))),
            F.lit("."),
        ).alias("description"),
        F.to_json(F.struct(F.col("item_id").alias("movielens_id"), "year", "genres")).alias("attributes"),
        F.make_timestamp(F.col("year"), F.lit(1), F.lit(1), F.lit(0), F.lit(0), F.lit(0), F.lit("UTC"))
        .alias("created_at"),
    )

    movie_genre = movies.select("item_id", F.explode("genres").alias("genre")).where(F.col("genre") != "")
    genre_entities = movie_genre.select("genre").distinct().select(
        F.concat(F.lit("genre:"), "genre").alias("entity_id"),
        F.lit("category").alias("entity_type"),
        F.col("genre").alias("title"),
        F.concat(F.lit("Movie genre: "), "genre").alias("description"),
        F.to_json(F.struct(F.col("genre").alias("genre"))).alias("attributes"),
    )
    in_category = movie_genre.select(
        F.concat(F.lit("movie:"), "item_id").alias("src_id"),
        F.concat(F.lit("genre:"), "genre").alias("dst_id"),
        F.lit("product_in_category").alias("relation"),
        F.lit(1.0).alias("weight"),
    )

    produced = (
        kg.where(F.col("relation") == PRODUCTION_COMPANY_RELATION)
        .join(link, kg["head"] == link["mid"])
        .select("item_id", F.col("tail").alias("company"))
        .distinct()
    )
    company_entities = produced.select("company").distinct().select(
        F.concat(F.lit("advertiser:"), "company").alias("entity_id"),
        F.lit("advertiser").alias("entity_type"),
        F.concat(F.lit("Production company "), "company").alias("title"),
        F.lit("Film production company (Freebase id; no name in the knowledge graph).").alias("description"),
        F.to_json(F.struct(F.col("company").alias("freebase_mid"))).alias("attributes"),
    )
    produces = produced.select(
        F.concat(F.lit("advertiser:"), "company").alias("src_id"),
        F.concat(F.lit("movie:"), "item_id").alias("dst_id"),
        F.lit("advertiser_produces_product").alias("relation"),
        F.lit(1.0).alias("weight"),
    )

    stages = F.array(*[
        F.when(F.col("rating") >= threshold, F.lit(stage)) for stage, threshold in RATING_STAGES
    ])
    events = (
        inter.select("*", F.explode(F.filter(stages, lambda s: s.isNotNull())).alias("event_type"))
        .select(
            F.concat_ws(":", F.lit("ml"), "user_id", "item_id", "event_type").alias("event_id"),
            F.concat(F.lit("user:"), "user_id").alias("user_id"),
            F.concat(F.lit("movie:"), "item_id").alias("entity_id"),
            "event_type",
            F.timestamp_seconds(F.col("ts").cast("long")).alias("event_ts"),
            F.col("rating").alias("value"),
        )
    )
    entities = (user_entities.unionByName(movie_entities, allowMissingColumns=True)
                .unionByName(genre_entities, allowMissingColumns=True)
                .unionByName(company_entities, allowMissingColumns=True))
    return {"entities": entities, "relations": in_category.unionByName(produces), "events": events}


def write_movielens_source(spark: SparkSession, files: dict[str, Path], out: Path) -> dict[str, int]:
    """Write MovieLens-100k as a source folder at ``out`` (a no-op when ``out`` is already complete).

    Args:
        spark: the session to write with.
        files: the paths from :func:`hir_pipeline.data.movielens_files`.
        out: the source folder; gets ``entities/``, ``relations/``, ``events/`` and the success marker.

    Returns:
        Row counts per table and per entity/event type (see :func:`spark_jobs.ingestion.sources.write_source_folder`).
    """
    settings = {"source": "movielens-100k", "mapping_version": MAPPING_VERSION}
    return write_source_folder(spark, out, lambda _tmp: movielens_tables(spark, files), settings)
