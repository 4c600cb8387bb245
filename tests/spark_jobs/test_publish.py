"""The publication DataFrames on a hand-made two-level model output."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from pyspark.sql import functions as F

from hir_pipeline.contracts import output_ddl
from spark_jobs.publish import (
    MixedModelVersions,
    PublishInputs,
    PublishSettings,
    build_publication,
    long_assignments,
    model_version_of,
    next_cluster_ids,
    previous_run_date,
)

DAY1, DAY2 = dt.date(2024, 5, 1), dt.date(2024, 5, 2)
# level 0: 0 = sports, 1 = coffee; level 1: 0 running, 1 yoga (sports), 2 espresso, 3 tea (coffee);
# model cluster 4 (level 1, parent 1) and 2 (level 0) are empty and not published.
PARENTS = {0: 0, 1: 0, 2: 1, 3: 1, 4: 1}
ITEMS = {  # product -> (fine cluster, title)
    "p0": (0, "Trail running shoes"), "p1": (0, "Running shoes for road"), "p2": (1, "Yoga mat"),
    "p3": (1, "Yoga blocks cork"), "p4": (2, "Espresso machine"), "p5": (2, "Espresso grinder burr"),
    "p6": (3, "Green tea leaves"), "p7": (3, "Oolong tea"),
}
USERS = {"u0": 0, "u1": 0, "u2": 1, "u3": 2, "u4": 3, "u5": 3}


def _rows(perm0=None, perm1=None, version="1"):
    perm0 = perm0 or {i: i for i in range(3)}
    perm1 = perm1 or {i: i for i in range(5)}
    rng = np.random.default_rng(0)
    rows = []
    for eid, fine in [*((e, f) for e, (f, _) in ITEMS.items()), *USERS.items()]:
        emb = rng.normal(size=4)
        rows.append((eid, "product" if eid[0] == "p" else "user", (emb / np.linalg.norm(emb)).tolist(),
                     [perm0[PARENTS[fine]], perm1[fine]], [0.9, float(0.5 + 0.05 * int(eid[1:]))], True, version))
    return rows


def _tables(spark, day, perm0=None, perm1=None, version="1"):
    outputs = spark.createDataFrame(
        _rows(perm0, perm1, version),
        "entity_id string, entity_type string, embedding array<float>, cluster_ids array<int>, "
        "confidences array<float>, has_view boolean, model_version string",
    ).withColumn("run_date", F.lit(day))
    perm0 = perm0 or {i: i for i in range(3)}
    perm1 = perm1 or {i: i for i in range(5)}
    hier = [(0, perm0[c], None, [float(c == 0), float(c == 1), float(c == 2), 0.0], version) for c in range(3)]
    hier += [(1, perm1[c], perm0[p], [0.0, 0.0, 0.0, 1.0 + c], version) for c, p in PARENTS.items()]
    hierarchy = spark.createDataFrame(
        hier, "level int, cluster_id int, parent_cluster_id int, prototype array<float>, model_version string",
    ).withColumn("run_date", F.lit(day))
    return outputs, hierarchy


@pytest.fixture(scope="module")
def catalog(spark):
    entities = spark.createDataFrame(
        [(e, "product", t, f"{t} - the best deal") for e, (_, t) in ITEMS.items()]
        + [(u, "user", None, None) for u in USERS],
        "entity_id string, entity_type string, title string, description string",
    )
    fwd = [(u, p, 1.0 + i) for i, (u, f) in enumerate(USERS.items()) for p, (g, _) in ITEMS.items() if g == f]
    fwd.append(("u0", "p4", 0.5))  # a sports user who bought an espresso machine
    edges = spark.createDataFrame(
        [(s, d, "click", w) for s, d, w in fwd] + [(d, s, "rev_click", w) for s, d, w in fwd],
        "src_id string, dst_id string, edge_type string, weight double",
    )
    return entities, edges, sum(w for _, _, w in fwd) * 2


def _collect(pub):
    return {name: df.collect() for name, df in pub.tables.items()}


@pytest.mark.slow
def test_first_publication(spark, catalog):
    entities, edges, total_weight = catalog
    outputs, hierarchy = _tables(spark, DAY1)
    pub = build_publication(spark, PublishInputs(outputs, hierarchy, entities, edges), DAY1,
                            settings=PublishSettings(top_members=2))
    t = _collect(pub)
    n = len(ITEMS) + len(USERS)
    assert pub.model_version == "1" and pub.previous_run_date is None
    for name, df in pub.tables.items():  # the published schema (contracts.OUTPUT_SCHEMAS), column for column
        assert df.schema.simpleString() == spark.createDataFrame([], output_ddl(name)).schema.simpleString(), name
    assert len(t["node_embeddings"]) == n
    assert len(t["cluster_assignments"]) == 2 * n
    assert {r.run_date for rows in t.values() for r in rows} == {DAY1}
    # first version: published IDs follow model order; empty model clusters are not published
    profiles = {(r.level, r.cluster_id): r for r in t["cluster_profiles"]}
    assert set(profiles) == {(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3)}
    assert all(r.match == "fresh" for r in profiles.values())
    for (level, _), r in profiles.items():
        assert (r.parent_cluster_id is None) == (level == 0)
        if level:
            assert (0, r.parent_cluster_id) in profiles
    assert profiles[(1, 2)].parent_cluster_id == 1 and profiles[(1, 0)].parent_cluster_id == 0
    assert sum(r.size for (lvl, _), r in profiles.items() if lvl == 0) == n
    assert profiles[(0, 0)].size_by_type == {"product": 4, "user": 3}
    # labels come from member text; the boilerplate shared by every product never wins
    assert profiles[(1, 0)].label.split(" / ")[:2] == ["running", "shoes"]
    assert profiles[(1, 2)].label.startswith("espresso")
    assert all("deal" not in r.label_terms for r in profiles.values())
    # top members: content entities only, highest confidence first (p1 0.55 > p0 0.5)
    assert profiles[(1, 0)].top_members == ["p1", "p0"]
    assert len(profiles[(0, 1)].top_members) == 2
    assert len(profiles[(1, 1)].prototype) == 4
    # super-graph: every edge's weight lands in exactly one cluster pair per level; symmetric
    sg = t["interest_supergraph"]
    for level in (0, 1):
        assert sum(r.weight for r in sg if r.level == level) == pytest.approx(total_weight)
    w = {(r.level, r.src_cluster, r.dst_cluster): r.weight for r in sg}
    assert w[(0, 0, 1)] == w[(0, 1, 0)] == pytest.approx(0.5)
    assert w[(1, 0, 2)] == pytest.approx(0.5)
    assert pub.stable.stability() == {0: None, 1: None}


@pytest.mark.slow
def test_permuted_version_keeps_ids_and_new_cluster_gets_fresh_id(spark, catalog, tmp_path):
    entities, edges, _ = catalog
    outputs, hierarchy = _tables(spark, DAY1)
    first = build_publication(spark, PublishInputs(outputs, hierarchy, entities, edges), DAY1)
    prev_a = first.tables["cluster_assignments"].localCheckpoint()
    prev_p = first.tables["cluster_profiles"].localCheckpoint()
    before = {(r.entity_id, r.level): r.cluster_id for r in prev_a.collect()}

    outputs2, hierarchy2 = _tables(spark, DAY2, perm0={0: 2, 1: 0, 2: 1}, perm1={0: 3, 1: 4, 2: 0, 3: 1, 4: 2},
                                   version="2")
    assert previous_run_date(prev_p, DAY2) == DAY1 and previous_run_date(prev_p, DAY1) is None
    next_ids = next_cluster_ids(prev_p, DAY2, 2)
    assert next_ids == [2, 4]
    previous = PublishInputs(outputs2, hierarchy2, entities, edges, prev_a, prev_p, DAY1, next_ids)
    second = build_publication(spark, previous, DAY2)
    after = {(r.entity_id, r.level): r.cluster_id for r in second.tables["cluster_assignments"].collect()}
    assert after == before
    assert second.stable.stability() == {0: 1.0, 1: 1.0}
    profiles2 = {(r.level, r.cluster_id): (r.parent_cluster_id, r.label, r.match)
                 for r in second.tables["cluster_profiles"].collect()}
    profiles1 = {(r.level, r.cluster_id): (r.parent_cluster_id, r.label) for r in prev_p.collect()}
    assert {k: v[:2] for k, v in profiles2.items()} == profiles1
    assert {v[2] for v in profiles2.values()} == {"overlap"}
    # fresh IDs count only earlier dates: re-running DAY1 after DAY2 was published mints the same IDs again
    both = prev_p.unionByName(second.tables["cluster_profiles"])
    assert next_cluster_ids(both, DAY1, 2) == [0, 0]
    assert next_cluster_ids(both, DAY2 + dt.timedelta(days=1), 2) == [2, 4]

    # a third version splits tea: u4 stays in model cluster 3, the rest of tea moves to the empty cluster 4.
    # Cluster 4 holds most of old cluster 3 (Jaccard 3/4) and keeps its ID; cluster 3 (1/4) is new (fresh ID).
    moved = {"p6", "p7", "u5"}
    rows = [(*r[:3], [r[3][0], 4 if r[0] in moved else r[3][1]], *r[4:]) for r in _rows(version="3")]
    outputs3 = spark.createDataFrame(rows, outputs.drop("run_date").schema).withColumn("run_date", F.lit(DAY2))
    hierarchy3 = _tables(spark, DAY2, version="3")[1]
    third = build_publication(spark, PublishInputs(outputs3, hierarchy3, entities, edges, prev_a, prev_p, DAY1, [5, 9]),
                              DAY2)
    got = {(r.entity_id, r.level): r.cluster_id for r in third.tables["cluster_assignments"].collect()}
    assert got[("p6", 1)] == got[("u5", 1)] == before[("p6", 1)] and got[("u4", 1)] == 9
    assert got[("p0", 1)] == before[("p0", 1)]
    assert third.stable.levels[1].method == {0: "overlap", 1: "overlap", 2: "overlap", 4: "overlap", 3: "fresh"}
    assert third.stable.stability() == {0: 1.0, 1: pytest.approx(13 / 14)}


def test_long_assignments_and_model_version(spark):
    outputs, hierarchy = _tables(spark, DAY1)
    rows = long_assignments(outputs.where("entity_id = 'p4'")).collect()
    assert [(r.level, r.model_cluster_id) for r in rows] == [(0, 1), (1, 2)]
    assert model_version_of(outputs) == model_version_of(outputs, hierarchy) == "1"
    with pytest.raises(MixedModelVersions, match="one model version"):
        model_version_of(outputs.withColumn("model_version", F.col("entity_id")))
    # embeddings of one model next to clusters of another: refused, not published as a pair
    with pytest.raises(MixedModelVersions, match=r"'model_outputs': \['1'\], 'model_hierarchy': \['2'\]"):
        model_version_of(outputs, _tables(spark, DAY1, version="2")[1])


@pytest.mark.slow
def test_empty_clusters_are_not_published_and_orphans_follow_their_members(spark, catalog):
    entities, edges, _ = catalog
    outputs, hierarchy = _tables(spark, DAY1)
    # every entity sits in coarse cluster 0: model cluster 1 (coffee) is empty at level 0, its children are not
    outputs = outputs.withColumn("cluster_ids", F.array(F.lit(0), F.col("cluster_ids")[1]))
    pub = build_publication(spark, PublishInputs(outputs, hierarchy, entities, edges), DAY1)
    profiles = {(r.level, r.cluster_id): r for r in pub.tables["cluster_profiles"].collect()}
    assert set(profiles) == {(0, 0), (1, 0), (1, 1), (1, 2), (1, 3)}
    assert all(r.size > 0 for r in profiles.values())
    assert {r.parent_cluster_id for (lvl, _), r in profiles.items() if lvl == 1} == {0}
    # the four level-1 clusters are now siblings: no two share a label term
    terms = [t for (lvl, _), r in profiles.items() if lvl == 1 for t in r.label_terms]
    assert len(terms) == len(set(terms)) > 0


def test_entity_terms_match_the_in_memory_twin(spark):
    from hir_pipeline.publish.labels import entity_terms as python_terms
    from spark_jobs.publish import entity_terms

    rows = [("m1", "product", "Heat (1995)", "Movie. Genres: Crime.", '{"genres": ["Crime", "Noir"], "id": 7}'),
            ("a1", "advertiser", "Acme", None, '{"brand": "Acme Toys", "department": "Kitchen"}'),
            ("u1", "user", None, None, '{"occupation": "engineer"}')]
    df = spark.createDataFrame(rows, "entity_id string, entity_type string, title string, description string, "
                                     "attributes string")
    got: dict[str, set[str]] = {}
    for r in entity_terms(df, ("product", "advertiser")).collect():
        got.setdefault(r.entity_id, set()).add(r.term)
    assert got == {e: python_terms(t, d, a) for e, typ, t, d, a in rows if typ != "user"}
    assert "noir" in got["m1"] and "kitchen" in got["a1"] and "department" not in got["a1"]


@pytest.mark.parametrize("comparison", ["catalogue", "parent"])
def test_label_counts_and_labels_match_the_in_memory_twin(spark, comparison):
    from hir_pipeline.publish.labels import ancestor_chains, count_level_terms, entity_terms, level_labels
    from spark_jobs.publish.transform import entity_terms as spark_terms
    from spark_jobs.publish.transform import level_term_counts

    # movies carry a template, the companies do not; level 1: crime (0) and animation (1) films under coarse
    # cluster 0, the companies in 2 and 3 under coarse cluster 1, and an only child (4) under coarse cluster 2
    genres = ["Crime Thriller", "Crime Drama", "Crime Mystery", "Animation Family", "Animation Musical", "Family"]
    rows = [(f"m{i}", "movie", f"Title{i}", f"Movie. Genres: {g}. Released 1995.", f'{{"genres": "{g}"}}')
            for i, g in enumerate(genres)]
    rows += [(f"s{i}", "company", f"Studio{i}", "Production company.", '{"country": "France"}') for i in range(5)]
    fine = {**{f"m{i}": 0 if i < 3 else 1 for i in range(6)}, "s0": 2, "s1": 2, "s2": 3, "s3": 4, "s4": 4}
    parents = [{0: None, 1: None, 2: None}, {0: 0, 1: 0, 2: 1, 3: 1, 4: 2}]
    coarse = {e: parents[1][c] for e, c in fine.items()}
    entities = spark.createDataFrame(rows, "entity_id string, entity_type string, title string, description string, "
                                           "attributes string")
    long = [(e, lvl, c) for lvl, level in enumerate((coarse, fine)) for e, c in level.items()]
    assignments = spark.createDataFrame(long, "entity_id string, level int, cluster_id int")
    got = level_term_counts(assignments, spark_terms(entities, ("movie", "company")), parents, max_terms=200,
                            comparison=comparison)
    terms = {e: entity_terms(t, d, a) for e, _, t, d, a in rows}
    types = {e: typ for e, typ, *_ in rows}
    for level, clusters in enumerate((coarse, fine)):
        chains = ancestor_chains(parents, level, set(clusters.values()))
        want = count_level_terms(terms, clusters, chains, types, comparison)
        counts, spark_chains = got[level]
        assert spark_chains == chains and counts.clusters == want.clusters
        for c, own in want.clusters.items():  # the comparison sets, for the terms the cluster brought
            assert counts.references[c].members == want.references[c].members
            ref, want_ref = counts.references[c].terms, want.references[c].terms
            assert {t: ref[t] for t in own.terms} == {t: want_ref[t] for t in own.terms}
        labels = level_labels(counts, chains, 3)
        assert labels == level_labels(want, chains, 3)
        assert not {"movie", "genres", "released"} & {t for got in labels.values() for t in got}
