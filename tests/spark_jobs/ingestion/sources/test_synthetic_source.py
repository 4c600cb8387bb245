"""The synthetic ad ecosystem: determinism, contract, planted hierarchy, funnel, images, scale.

Tests over a generated source folder are slow; the configuration and the Zipf rank column are fast.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pyspark.sql import functions as F

from hir_pipeline.contracts import ENTITY_TYPES, SOURCE_TABLES
from hir_pipeline.data import DataUnavailable, fetch_fashion_mnist, load_fashion_mnist
from hir_pipeline.settings import cache_dir
from spark_jobs.ingestion.reader import read_source
from spark_jobs.ingestion.sources.synthetic import (
    CLIP_FRAMES,
    CLIP_SIZE,
    SyntheticConfig,
    _catalog,
    _zipf_rank,
    interest_vocabularies,
    read_interest_vocabularies,
    synthetic_tables,
    synthetic_window,
    write_synthetic_source,
)
from tests.prerequisites import missing

# Higher funnel rates than the defaults so a small test sees enough deep events for tight bounds.
CFG = SyntheticConfig(seed=11, n_events=20_000, n_users=300, n_products=300, n_advertisers=16,
                      campaigns_per_advertiser=4, ads_per_campaign=2, days=10, click_rate=0.1,
                      cart_rate=0.3, conversion_rate=0.5, interest_match_lift=2.0)


@pytest.fixture(scope="module")
def images_dir():
    try:
        return fetch_fashion_mnist(cache_dir())
    except DataUnavailable:
        return None


@pytest.fixture(scope="module")
def source(spark, tmp_path_factory, images_dir):
    out = tmp_path_factory.mktemp("syn") / "synthetic"
    counts = write_synthetic_source(spark, CFG, out, images_dir)
    return out, counts


def _table(spark, out, name):
    return spark.read.parquet(str(out / name))


def _within(observed: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    return abs(observed - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1


def test_config_validates():
    with pytest.raises(ValueError, match="fine interests"):
        SyntheticConfig(n_products=10)
    with pytest.raises(ValueError, match="branching"):
        SyntheticConfig(branching=(4, 4))
    assert SyntheticConfig(end_date="2024-01-31").end_date.isoformat() == "2024-01-31"


@pytest.mark.slow
def test_contract_schema_and_references(spark, source):
    out, counts = source
    for table, columns in SOURCE_TABLES.items():
        df = _table(spark, out, table)
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
            (c.name, c.ddl) for c in columns]
    read_source(spark, str(out))
    ent, rel, ev = (_table(spark, out, t) for t in ("entities", "relations", "events"))
    assert ent.count() == ent.select("entity_id").distinct().count()
    assert {r.entity_type for r in ent.select("entity_type").distinct().collect()} == set(ENTITY_TYPES)
    assert counts["entities.user"] == CFG.users and counts["entities.product"] == CFG.n_products
    ids = ent.select("entity_id", "entity_type")
    for col in ("src_id", "dst_id"):
        assert rel.join(ids, rel[col] == ids["entity_id"], "left_anti").count() == 0
    typed = (rel.join(ids.toDF("src_id", "src_type"), "src_id").join(ids.toDF("dst_id", "dst_type"), "dst_id")
             .select("relation", "src_type", "dst_type").distinct().collect())
    assert {(r.relation, r.src_type, r.dst_type) for r in typed} == {
        ("product_in_category", "product", "category"), ("ad_of_campaign", "ad", "campaign"),
        ("campaign_of_advertiser", "campaign", "advertiser"), ("ad_promotes_product", "ad", "product")}
    users = ev.join(ids, ev["user_id"] == ids["entity_id"]).select("entity_type").distinct().collect()
    assert [r.entity_type for r in users] == ["user"]
    items = ev.join(ids.toDF("entity_id", "t"), "entity_id").select("t").distinct().collect()
    assert {r.t for r in items} == {"ad", "product"}
    assert ev.select("event_id").distinct().count() == ev.count()
    start, end = synthetic_window(CFG)
    b = ev.agg(F.min("event_ts").alias("lo"), F.max("event_ts").alias("hi")).first()
    assert start <= b.lo.replace(tzinfo=start.tzinfo) and b.hi.replace(tzinfo=end.tzinfo) < end
    assert ev.where("event_type = 'conversion' and (value is null or value <= 0)").count() == 0


@pytest.mark.slow
def test_funnel_rates(source):
    _, c = source
    n = CFG.n_events
    assert c["events.impression"] == n
    assert _within(c["events.click"], n, CFG.click_rate)
    assert _within(c["events.add_to_cart"], c["events.click"], CFG.cart_rate)
    assert _within(c["events.conversion"], c["events.add_to_cart"], CFG.conversion_rate)


@pytest.mark.slow
def test_funnel_chains_are_consistent(spark, source):
    out, _ = source
    ev = _table(spark, out, "events").withColumn("imp", F.regexp_extract("event_id", r"^syn:(\d+):", 1))
    chains = ev.groupBy("imp").agg(F.collect_set("event_type").alias("stages"),
                                   F.countDistinct("user_id", "entity_id").alias("pairs"),
                                   F.min("event_ts").alias("t0"),
                                   F.max(F.when(F.col("event_type") == "impression", F.col("event_ts"))).alias("ti"))
    assert chains.where("pairs != 1 or t0 != ti").count() == 0  # one user/item per chain; impression first
    bad = chains.where("(array_contains(stages, 'conversion') and not array_contains(stages, 'add_to_cart')) "
                       "or (array_contains(stages, 'add_to_cart') and not array_contains(stages, 'click')) "
                       "or not array_contains(stages, 'impression')")
    assert bad.count() == 0


@pytest.mark.slow
def test_interest_vocabularies_real_words_then_pseudo_words():
    vocab = interest_vocabularies((5, 4, 4))
    assert len(vocab) == 80
    assert vocab[0].real_words and {"running", "shoes", "marathon", "cushioning"} <= vocab[0].terms
    assert not vocab[64].real_words and "goods" in vocab[64].terms  # a fifth coarse interest: invented words
    assert vocab[0].terms.isdisjoint(vocab[1].terms)
    assert interest_vocabularies((5, 4, 4)) == vocab  # independent of the seed, recoverable from the settings


@pytest.mark.slow
def test_vocabularies_from_the_source_marker_match_the_product_text(spark, source):
    from hir_pipeline.publish.labels import entity_terms

    out, _ = source
    vocab = read_interest_vocabularies(out)
    assert vocab == interest_vocabularies(CFG.branching)
    assert read_interest_vocabularies(out.parent) is None  # not a synthetic source folder
    products = _table(spark, out, "entities").where("entity_type = 'product'").join(
        _table(spark, out, "ground_truth"), "entity_id").collect()
    for r in products:
        terms = entity_terms(r.title, r.description, r.attributes)
        own = terms & vocab[r.level2].terms
        assert len(own) >= 3  # name words and three keywords (multi-word keywords give more)
        # vocabularies may share a word ("wireless", "gaming"), but a product speaks its own interest's most
        assert all(len(terms & v.terms) < len(own) for i, v in vocab.items() if i != r.level2)


@pytest.mark.slow
def test_ground_truth_hierarchy(spark, source):
    out, _ = source
    gt = _table(spark, out, "ground_truth")
    ent = _table(spark, out, "entities")
    b0, b1, b2 = CFG.branching
    covered = ent.where("entity_type in ('user', 'product', 'ad', 'campaign')").join(gt, "entity_id", "left_anti")
    assert covered.count() == 0
    fine = gt.where("level2 is not null")
    for finer, coarser in (("level2", "level1"), ("level1", "level0"), ("level2", "level0")):
        assert fine.groupBy(finer).agg(F.countDistinct(coarser).alias("k")).where("k != 1").count() == 0
    agg = fine.agg(F.countDistinct("level2").alias("f"), F.countDistinct("level1").alias("m"),
                   F.countDistinct("level0").alias("c"), F.max("level2").alias("fmax")).first()
    assert (agg.f, agg.m, agg.c, agg.fmax) == (b0 * b1 * b2, b0 * b1, b0, b0 * b1 * b2 - 1)
    # catalog edges stay inside the hierarchy: an ad's products share its fine interest, etc.
    rel = _table(spark, out, "relations")
    lv = gt.select("entity_id", "level1", "level2")
    joined = (rel.join(lv.toDF("src_id", "s1", "s2"), "src_id").join(lv.toDF("dst_id", "d1", "d2"), "dst_id"))
    assert joined.where("s1 != d1").count() == 0
    assert joined.where("relation in ('ad_of_campaign', 'ad_promotes_product') and s2 != d2").count() == 0


@pytest.mark.slow
def test_users_mostly_act_on_their_interest(spark, source):
    out, _ = source
    gt = _table(spark, out, "ground_truth").select("entity_id", "level0", "level1", "level2")
    ev = _table(spark, out, "events")
    j = (ev.join(gt.toDF("user_id", "u0", "u1", "u2"), "user_id").join(gt.toDF("entity_id", "i0", "i1", "i2"),
                                                                      "entity_id"))
    imp = j.where("event_type = 'impression'").agg(
        F.avg((F.col("u2") == F.col("i2")).cast("double")).alias("fine"),
        F.avg((F.col("u1") == F.col("i1")).cast("double")).alias("mid"),
        F.avg((F.col("u0") == F.col("i0")).cast("double")).alias("coarse")).first()
    q = CFG.match_probability()
    assert abs(imp.fine - q) < 0.02
    assert imp.fine < imp.mid < imp.coarse
    clicks = j.where("event_type = 'click'").agg(F.avg((F.col("u2") == F.col("i2")).cast("double"))).first()[0]
    lifted = q * CFG.interest_match_lift / (q * CFG.interest_match_lift + 1 - q)
    assert abs(clicks - lifted) < 0.04 and clicks > imp.fine


@pytest.mark.slow
def test_popularity_is_heavy_tailed(spark, source):
    out, _ = source
    per_item = (_table(spark, out, "events").where("event_type = 'impression'")
                .groupBy("entity_id").count().toPandas()["count"].sort_values(ascending=False).to_numpy())
    top = per_item[: max(1, len(per_item) // 10)].sum() / per_item.sum()
    assert top > 0.3  # the top 10% of items take far more than 10% of impressions


def test_zipf_rank_in_column(spark):
    df = spark.range(40_000).select(_zipf_rank(F.rand(3), 50, 1.2).alias("r"))
    counts = np.bincount(df.toPandas()["r"].to_numpy(), minlength=50)
    assert counts.size == 50 and counts.min() >= 0
    assert counts[0] > counts[1] > counts[4] > counts[20]
    # continuous approximation of P(r) ~ (r+1)^-1.2 : the head/tail ratio has the right order
    assert 3.0 < counts[0] / counts[4:6].mean() < 12.0


@pytest.mark.slow
def test_images_are_real_fashion_mnist(spark, source, images_dir):
    out, _ = source
    ent = _table(spark, out, "entities")
    if images_dir is None:
        assert ent.where("image_uri is not null").count() == 0
        missing("dataset-fashion-mnist", "run .venv/bin/hir setup on a Debian system")
    rows = ent.where("entity_type = 'product'").select("image_uri").collect()
    assert all(r.image_uri and r.image_uri.startswith(str(out)) for r in rows)
    assert len(list((out / "images").glob("*.png"))) == CFG.n_products
    images, _labels = load_fashion_mnist(images_dir, "train")
    flat = images.reshape(len(images), -1)
    for r in rows[:5]:
        with Image.open(r.image_uri) as im:
            assert im.size == (28, 28) and im.mode == "L"
            pixels = np.asarray(im).reshape(-1)
        assert (flat == pixels).all(axis=1).any()  # byte-identical to a Fashion-MNIST training image
    ads = ent.where("entity_type = 'ad'")
    assert ads.where("image_uri is null").count() == 0


def test_a_seeded_share_of_ads_get_a_short_clip_and_nothing_else_changes(tmp_path):
    from hir_pipeline.content_embeddings.video import load_frames

    cfg = SyntheticConfig(seed=5, n_events=1_000, n_products=64, n_advertisers=16, video_share=0.25)
    start, _ = synthetic_window(cfg)
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        runs.append(_catalog(cfg, start, None, None, None, tmp_path / name, tmp_path / name)["entities"])
    ads = [e for e in runs[0] if e["entity_type"] == "ad"]
    clips = [e["video_uri"] for e in ads if e["video_uri"]]
    assert _within(len(clips), len(ads), cfg.video_share)
    assert all(e["video_uri"] is None for e in runs[0] if e["entity_type"] != "ad")
    for uri in clips[:3]:
        frames = load_frames(uri, 8)
        assert len(frames) == CLIP_FRAMES and frames[0].size == (CLIP_SIZE, CLIP_SIZE)
        twin = uri.replace(str(tmp_path / "a"), str(tmp_path / "b"))
        assert Path(uri).read_bytes() == Path(twin).read_bytes()  # same seed, same bytes
    # the clips come from generators of their own: without them the catalogue is the same, clip columns aside
    plain = _catalog(dataclasses.replace(cfg, video_share=0.0), start, None, None, None)["entities"]
    assert [{**e, "video_uri": None} for e in runs[0]] == plain
    with pytest.raises(ValueError, match="video_share"):
        SyntheticConfig(video_share=1.5)


@pytest.mark.slow
def test_some_ads_have_a_clip_in_the_source_folder(spark, source):
    out, _ = source
    ent = _table(spark, out, "entities")
    clips = [r.video_uri for r in ent.where("video_uri is not null").select("video_uri", "entity_type").collect()
             if r.entity_type == "ad"]
    assert ent.where("video_uri is not null and entity_type != 'ad'").count() == 0
    n_ads = ent.where("entity_type = 'ad'").count()
    assert _within(len(clips), n_ads, CFG.video_share)
    assert sorted(p.name for p in (out / "videos").glob("*.mp4")) == sorted(u.rsplit("/", 1)[1] for u in clips)
    assert all(u.startswith(str(out)) for u in clips)


@pytest.mark.slow
def test_same_seed_same_output_and_cache(spark, source, tmp_path, images_dir):
    out, counts = source
    again = tmp_path / "again"
    assert write_synthetic_source(spark, CFG, again, images_dir) == counts
    for table in ("entities", "relations", "events", "ground_truth"):
        a, b = _table(spark, out, table), _table(spark, again, table)
        for uri in ("image_uri", "video_uri"):  # absolute paths differ by folder; compare file names
            if uri in a.columns:
                a, b = (d.withColumn(uri, F.regexp_extract(uri, r"[^/]*$", 0)) for d in (a, b))
        assert a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0
    assert write_synthetic_source(spark, CFG, out, images_dir) == counts  # complete: cache hit
    with pytest.raises(ValueError, match="other settings"):
        write_synthetic_source(spark, dataclasses.replace(CFG, seed=12), out, images_dir)
    other = tmp_path / "other"
    (other / "events").mkdir(parents=True)  # an interrupted earlier write: no marker, junk inside
    (other / "events" / "junk.parquet").write_text("not parquet")
    write_synthetic_source(spark, dataclasses.replace(CFG, seed=12, n_events=2_000), other, None)
    assert not (other / "events" / "junk.parquet").exists()
    assert _table(spark, other, "events").where("event_type = 'impression'").count() == 2_000
    assert _table(spark, other, "entities").where("image_uri is not null").count() == 0


@pytest.mark.slow
def test_scale_smoke_1e5_events(spark, tmp_path):
    cfg = SyntheticConfig(seed=3, n_events=100_000)
    # the event and user tables are planned from spark.range, never from driver-side rows
    tables = synthetic_tables(spark, cfg, tmp_path, tmp_path, None)
    for name in ("events", "entities"):
        plan = tables[name]._jdf.queryExecution().analyzed().toString()
        assert "Range (0, " in plan
    t = time.perf_counter()
    counts = write_synthetic_source(spark, cfg, tmp_path / "big", None)
    seconds = time.perf_counter() - t
    print(f"synthetic 1e5 impressions -> {counts['events']} event rows in {seconds:.1f}s")
    assert counts["events.impression"] == 100_000
    assert counts["entities.user"] == 2_000
