"""Querying the published tables without Spark: the ``deltalake`` package (delta-rs) and numpy.

A *publication* is what one publish run wrote for one run date. The run writes the four tables, then one row of
the ``publications`` manifest (:data:`~hir_pipeline.contracts.MANIFEST_TABLE`) recording the Delta version of each.
A reader resolves through the manifest and reads every table at its recorded version, filtered by the row's
``run_date`` and ``model_version``: a publish run killed half-way (or still running) wrote no manifest row, so it is
never seen, and the four tables always come from the same run.

* latest: the latest manifest, its newest run date;
* ``as_of=DATE``: the newest run date on or before ``DATE``;
* ``version=N``: the manifest as of its Delta version ``N`` (time travel: the publications as they stood then).

Functions: :func:`similar`, :func:`cluster`, :func:`recommend` (shortcuts over :class:`Publication`). Unknown
IDs raise :class:`UnknownIdError`; the command line is :mod:`hir_pipeline.query.cli`.

:func:`recommend` ranks by exact search (every item's dot product with the user, the default) or, with
``retrieval="hierarchical"``, coarse to fine: the user's clusters at a routing level (``cluster_assignments``, and
optionally the strongest ``interest_supergraph`` neighbours of the user's own cluster) select the candidates that
the dot product ranks (:func:`hir_pipeline.retrieval.hierarchical_top_k`, the implementation the evaluation report
and ``benchmarks/hierarchical_retrieval.py`` measure).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hir_pipeline.contracts import ENTITY_TYPES, MANIFEST_TABLE, OUTPUT_TABLES, manifest_version_column
from hir_pipeline.retrieval import (
    RETRIEVALS,
    HierarchicalSettings,
    Retrieval,
    Retrieved,
    hierarchical_top_k,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: Entity types :func:`recommend` ranks by default.
RECOMMENDABLE_TYPES: tuple[str, ...] = ("ad", "product")


class QueryError(LookupError):
    """Nothing to answer from: no publication, an unknown ID or type, a version that does not exist."""


class UnknownIdError(QueryError):
    """An entity, user or cluster ID that the publication does not hold."""


@dataclass(frozen=True)
class Snapshot:
    """What a query reads.

    Attributes:
        lake: lake root.
        run_date: the publication's run date.
        model_version: the published model version of that run date.
        versions: table -> Delta version read: the four output tables as recorded by the manifest, and the
            manifest's own version (key ``publications``).
    """

    lake: str
    run_date: dt.date
    model_version: str
    versions: dict[str, int]


@dataclass(frozen=True)
class Hit:
    """One ranked entity: ``score`` is the dot product of the (L2-normalised) embeddings."""

    entity_id: str
    entity_type: str
    score: float


@dataclass(frozen=True)
class Recommendation:
    """A user's ranked items and what ranking them cost.

    Attributes:
        hits: the ranked items, best first.
        retrieval: ``exact`` or ``hierarchical``.
        scored: items whose dot product with the user was computed.
        rankable: items that could be ranked (of the requested types, not excluded as seen).
        level: routing level (hierarchical), else ``None``.
        clusters_probed: clusters whose members were candidates (hierarchical), else 0.
    """

    hits: list[Hit]
    retrieval: str
    scored: int
    rankable: int
    level: int | None = None
    clusters_probed: int = 0


@dataclass(frozen=True)
class Member:
    """A member of a cluster and its assignment confidence."""

    entity_id: str
    entity_type: str
    confidence: float


@dataclass
class ClusterView:
    """A published cluster: its profile, highest-confidence members, children and super-graph neighbours."""

    level: int
    cluster_id: int
    parent_cluster_id: int | None
    size: int
    label: str
    top_members: list[str]
    members: list[Member] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    neighbours: list[tuple[int, float]] = field(default_factory=list)


def _path(lake: str, table: str) -> str:
    return f"{lake.rstrip('/')}/{table}"


@contextlib.contextmanager
def _readable(lake: str, table: str) -> Iterator[None]:
    """Turn a failure to read ``table`` of ``lake`` (a broken Delta log, a missing or corrupt data file, a folder
    that cannot be listed) into a one-line :class:`QueryError` naming them."""
    import pyarrow as pa
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (DeltaError, OSError, pa.ArrowException) as exc:
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise QueryError(f"{table} in lake {lake!r} cannot be read: {reason}") from exc


def _parse_date(value: dt.date | str | None) -> dt.date | None:
    if value is None or isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(value)


class Publication:
    """The published tables of one run date, resolved once and read with ``deltalake``.

    Args:
        lake: lake root (default: ``HIR_LAKE`` or ``.hir/lake``); a local folder or any URI delta-rs reads.
        as_of: newest run date on or before this date (default: the newest).
        version: Delta version of the ``publications`` manifest to time-travel to (default: the latest).
        storage_options: delta-rs storage options (credentials of an object store).
    """

    def __init__(self, lake: str | None = None, as_of: dt.date | str | None = None, version: int | None = None,
                 storage_options: dict[str, str] | None = None) -> None:
        from hir_pipeline.settings import default_lake_root

        self.lake = lake or default_lake_root()
        self._options = storage_options
        self._pinned: dict[tuple[str, int], DeltaTable] = {}  # (table, version) -> table: each log loaded once
        self.snapshot = self._resolve(_parse_date(as_of), version)

    # --- resolution ---------------------------------------------------------------------------------

    def _table(self, table: str, version: int | None = None) -> DeltaTable:
        """``table`` at Delta ``version`` (default the latest); a version whose log is gone is a :class:`QueryError`."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        if version is None:
            with _readable(self.lake, table):
                return DeltaTable(_path(self.lake, table), storage_options=self._options)
        if (table, version) not in self._pinned:
            try:
                self._pinned[table, version] = DeltaTable(_path(self.lake, table), version=version,
                                                          storage_options=self._options)
            except DeltaError as exc:
                raise QueryError(f"{table} Delta version {version} is gone from the Delta log (log retention) "
                                 f"in lake {self.lake!r}: {exc}") from exc
        return self._pinned[table, version]

    def _dataset(self, table: str, version: int | None = None):
        """A pyarrow dataset of ``table`` (at ``version``) read through pyarrow's own filesystem.

        deltalake's default filesystem is a Python handler over its Rust runtime; pyarrow's scanner threads can
        outlive it at interpreter exit and abort the process ("terminate called without an active exception",
        delta-rs issue 2184). pyarrow's native filesystems (local, S3, GCS, HDFS) have no such problem; with
        ``storage_options`` or a URI pyarrow cannot open, the default handler is used.
        """
        import pyarrow.fs as pa_fs

        delta = self._table(table, version)
        filesystem = None
        if self._options is None:
            try:
                fs, root = pa_fs.FileSystem.from_uri(_path(self.lake, table))
                filesystem = pa_fs.SubTreeFileSystem(root, fs)
            except (ValueError, OSError):  # pyarrow.ArrowInvalid is a ValueError: a scheme pyarrow lacks
                filesystem = None
        return delta.to_pyarrow_dataset(filesystem=filesystem)

    def _scan(self, table: str, version: int | None = None, **to_table):
        """``table`` (at ``version``) read into a pyarrow Table; ``to_table``: columns and filter."""
        with _readable(self.lake, table):
            return self._dataset(table, version).to_table(**to_table)

    def _exists(self, table: str) -> bool:
        from deltalake import DeltaTable

        with _readable(self.lake, table):
            return DeltaTable.is_deltatable(_path(self.lake, table), storage_options=self._options)

    def _resolve(self, as_of: dt.date | None, version: int | None) -> Snapshot:
        """The manifest row of the newest run date on or before ``as_of``, in manifest ``version``."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        if not self._exists(MANIFEST_TABLE):
            raise QueryError(f"nothing published yet in lake {self.lake!r} (no {MANIFEST_TABLE} table): "
                             "materialize the publish assets")
        latest = self._table(MANIFEST_TABLE).version()
        if version is not None and not 0 <= version <= latest:
            raise QueryError(f"{MANIFEST_TABLE} has no Delta version {version} (versions 0..{latest})")
        version = latest if version is None else version
        flt = None if as_of is None else ds.field("run_date") <= pa.scalar(as_of, pa.date32())
        rows = self._scan(MANIFEST_TABLE, version, filter=flt).to_pylist()
        if not rows:
            when = "" if as_of is None else f" on or before {as_of}"
            raise QueryError(f"no publication{when} in {MANIFEST_TABLE} v{version} of lake {self.lake!r}")
        row = max(rows, key=lambda r: r["run_date"])
        versions = {t: int(row[manifest_version_column(t)]) for t in OUTPUT_TABLES}
        for table, v in versions.items():  # fail now, naming the publication, rather than half-way through a query
            try:
                self._table(table, v)
            except QueryError as exc:
                raise QueryError(f"the publication of {row['run_date']} ({MANIFEST_TABLE} v{version}) cannot be "
                                 f"read: {exc}") from exc
        return Snapshot(self.lake, row["run_date"], row["model_version"], {**versions, MANIFEST_TABLE: version})

    def publications(self) -> list[dict]:
        """Every publication of the manifest version this reader resolved, oldest run date first: its manifest row
        (``run_date``, ``model_version``, the Delta version of each published table, ``published_at``)."""
        rows = self._scan(MANIFEST_TABLE, self.snapshot.versions[MANIFEST_TABLE]).to_pylist()
        return sorted(rows, key=lambda r: r["run_date"])

    # --- reading ------------------------------------------------------------------------------------

    def read(self, table: str, columns: Sequence[str] | None = None, where=None):
        """The publication's rows of ``table`` as a pyarrow Table: the recorded Delta version, filtered by the
        publication's ``run_date`` and ``model_version``.

        Args:
            table: one of the four published tables.
            columns: columns to read (default all).
            where: an extra ``pyarrow.dataset`` filter expression.
        """
        import pyarrow as pa
        import pyarrow.dataset as ds

        if table not in OUTPUT_TABLES:
            raise QueryError(f"{table!r} is not a published table; published: {', '.join(OUTPUT_TABLES)}")
        s = self.snapshot
        flt = ds.field("run_date") == pa.scalar(s.run_date, pa.date32())
        flt &= ds.field("model_version") == s.model_version
        if where is not None:
            flt = flt & where
        return self._scan(table, s.versions[table], columns=list(columns) if columns else None, filter=flt)

    def _embeddings(self):
        t = self.read("node_embeddings", ["entity_id", "entity_type", "embedding"])
        ids = np.asarray(t.column("entity_id").to_pylist(), dtype=object)
        types = np.asarray(t.column("entity_type").to_pylist(), dtype=object)
        emb = t.column("embedding").combine_chunks()
        flat = np.asarray(emb.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        return ids, types, flat.reshape(len(ids), -1) if len(ids) else flat.reshape(0, 0)

    def _where(self) -> str:
        s = self.snapshot
        return f"the publication of {s.run_date} (model version {s.model_version}) in {s.lake}"

    # --- queries ------------------------------------------------------------------------------------

    def similar(self, entity_id: str, type: str | None = None, k: int = 20) -> list[Hit]:
        """The ``k`` entities whose embeddings have the highest dot product with ``entity_id``'s.

        Args:
            entity_id: the query entity.
            type: only rank entities of this type (default: every type).
            k: number of results.
        """
        if type is not None and type not in ENTITY_TYPES:
            raise QueryError(f"unknown entity type {type!r}; known: {', '.join(ENTITY_TYPES)}")
        ids, types, emb = self._embeddings()
        row = np.flatnonzero(ids == entity_id)
        if not len(row):
            raise UnknownIdError(f"unknown entity {entity_id!r}: not in {self._where()}")
        mask = ids != entity_id
        if type is not None:
            mask &= types == type
        return _top(ids, types, emb @ emb[row[0]], mask, k)

    def recommend(self, user_id: str, k: int = 20, types: Sequence[str] = RECOMMENDABLE_TYPES,
                  exclude_seen: bool = True, retrieval: Retrieval | HierarchicalSettings = "exact") -> list[Hit]:
        """The ``k`` items with the highest dot product with the user's embedding (:meth:`retrieve`'s hits).

        Args:
            user_id, k, types, exclude_seen, retrieval: as :meth:`retrieve`.
        """
        return self.retrieve(user_id, k, types, exclude_seen, retrieval).hits

    def retrieve(self, user_id: str, k: int = 20, types: Sequence[str] = RECOMMENDABLE_TYPES,
                 exclude_seen: bool = True, retrieval: Retrieval | HierarchicalSettings = "exact") -> Recommendation:
        """The ``k`` items with the highest dot product with the user's embedding, and how many were scored.

        Args:
            user_id: an entity of type ``user``.
            k: number of results.
            types: entity types to rank (default ads and products).
            exclude_seen: leave out items the user already has an edge to in ``graph_edges`` (the snapshot of
                the publication's run date or the latest before it; nothing is excluded without the table).
            retrieval: ``exact`` scores every item (default); ``hierarchical`` scores the members of the user's
                clusters at the routing level only (:func:`hir_pipeline.retrieval.hierarchical_top_k`: the
                user's own cluster, then the clusters whose member centroids are nearest the user, and
                ``neighbours`` of its own cluster's strongest ``interest_supergraph`` neighbours; capped candidates
                kept by their finest-level cluster's centroid; ranked by the dot product) with the default
                :class:`~hir_pipeline.retrieval.HierarchicalSettings`; a ``HierarchicalSettings`` is hierarchical
                retrieval with those settings (:func:`hierarchy_settings` builds one).
        """
        settings = retrieval if isinstance(retrieval, HierarchicalSettings) else None
        if settings is None and retrieval not in RETRIEVALS:
            raise QueryError(f"unknown retrieval {retrieval!r}; known: {', '.join(RETRIEVALS)}")
        ids, etypes, emb = self._embeddings()
        row = np.flatnonzero(ids == user_id)
        if not len(row):
            raise UnknownIdError(f"unknown user {user_id!r}: not in {self._where()}")
        if etypes[row[0]] != "user":
            raise UnknownIdError(f"{user_id!r} is a {etypes[row[0]]}, not a user")
        mask = np.isin(etypes, list(types))
        if exclude_seen:
            mask &= ~np.isin(ids, list(self.seen(user_id)))
        rankable = int(mask.sum())
        if retrieval == "exact":
            return Recommendation(_top(ids, etypes, emb @ emb[row[0]], mask, k), "exact", rankable, rankable)
        settings = settings or HierarchicalSettings()
        levels = self._cluster_levels(ids)
        if not levels:
            raise QueryError(f"no cluster_assignments in {self._where()}: hierarchical retrieval needs them")
        try:
            level = settings.routing_level(len(levels))
        except ValueError as exc:
            raise QueryError(f"{exc} in {self._where()}") from None
        own = levels[level][row[0]]
        extra = [self._neighbours(level, int(own), settings.neighbours)] if own >= 0 and settings.neighbours else None
        items = np.isin(etypes, list(types))  # centroids of the items of these types (seen ones included) only
        item_levels = [np.where(items, clusters, -1) for clusters in levels]
        got = hierarchical_top_k(emb[row[:1]], emb, item_levels, k, settings, allowed=mask,
                                 user_clusters=np.array([own]), extra_clusters=extra)
        return Recommendation(self._hits(ids, etypes, got), "hierarchical", int(got.scored[0]),
                              int(got.rankable[0]), level, int(got.probed[0]))

    @staticmethod
    def _hits(ids: np.ndarray, types: np.ndarray, got: Retrieved) -> list[Hit]:
        return [Hit(str(ids[i]), str(types[i]), float(s)) for i, s in zip(got.items[0], got.scores[0], strict=True)
                if i >= 0]

    def _cluster_levels(self, ids: np.ndarray) -> list[np.ndarray]:
        """Per published level (coarsest first), int ``[N]`` cluster of each embedding row (``-1``: none)."""
        t = self.read("cluster_assignments", ["entity_id", "level", "cluster_id"])
        if not t.num_rows:
            return []
        pos = {e: i for i, e in enumerate(ids.tolist())}
        rows = np.array([pos.get(e, -1) for e in t.column("entity_id").to_pylist()], dtype=np.int64)
        level = np.asarray(t.column("level").to_numpy(zero_copy_only=False), dtype=np.int64)
        cluster = np.asarray(t.column("cluster_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        out = []
        for lvl in range(int(level.max()) + 1):
            col = np.full(len(ids), -1, dtype=np.int64)
            sel = (level == lvl) & (rows >= 0)
            col[rows[sel]] = cluster[sel]
            out.append(col)
        return out

    def _neighbours(self, level: int, cluster_id: int, n: int) -> list[int]:
        """The ``n`` strongest super-graph neighbours of a cluster (self-loop excluded; ties by cluster ID)."""
        import pyarrow.dataset as ds

        sel = (ds.field("level") == level) & (ds.field("src_cluster") == cluster_id) \
            & (ds.field("dst_cluster") != cluster_id)
        edges = self.read("interest_supergraph", ["dst_cluster", "weight"], sel).to_pylist()
        edges.sort(key=lambda e: (-e["weight"], e["dst_cluster"]))
        return [int(e["dst_cluster"]) for e in edges[:n]]

    def seen(self, user_id: str) -> set[str]:
        """Entities ``user_id`` has an edge to in ``graph_edges`` as of the publication (empty without it)."""
        import pyarrow.dataset as ds

        if not self._exists("graph_edges"):
            return set()
        table = self._table("graph_edges")
        dates = sorted(dt.date.fromisoformat(p["run_date"]) for p in table.partitions())
        dates = [d for d in dates if d <= self.snapshot.run_date]
        if not dates:
            return set()
        import pyarrow as pa

        flt = (ds.field("run_date") == pa.scalar(dates[-1], pa.date32())) & (ds.field("src_id") == user_id)
        return set(self._scan("graph_edges", columns=["dst_id"], filter=flt).column(0).to_pylist())

    def cluster(self, level: int, cluster_id: int, members: int = 20, neighbours: int = 10) -> ClusterView:
        """A cluster's profile, its ``members`` highest-confidence members, children and strongest neighbours.

        Args:
            level: 0 = coarsest.
            cluster_id: published cluster ID.
            members: members listed (by confidence).
            neighbours: super-graph neighbours listed (by weight, self-loop excluded).
        """
        import pyarrow.dataset as ds

        profiles = self.read("cluster_profiles", ["level", "cluster_id", "parent_cluster_id", "size", "label",
                                                  "top_members"]).to_pylist()
        match = [p for p in profiles if p["level"] == level and p["cluster_id"] == cluster_id]
        if not match:
            levels = sorted({p["level"] for p in profiles})
            raise UnknownIdError(f"unknown cluster {cluster_id} at level {level}: not in {self._where()} "
                                 f"(levels {levels[0] if levels else '-'}..{levels[-1] if levels else '-'})")
        p = match[0]
        sel = (ds.field("level") == level) & (ds.field("cluster_id") == cluster_id)
        rows = self.read("cluster_assignments", ["entity_id", "entity_type", "confidence"], sel).to_pylist()
        rows.sort(key=lambda r: (-r["confidence"], r["entity_id"]))
        view = ClusterView(
            level=level, cluster_id=cluster_id, parent_cluster_id=p["parent_cluster_id"], size=int(p["size"]),
            label=p["label"], top_members=list(p["top_members"] or []),
            members=[Member(r["entity_id"], r["entity_type"], float(r["confidence"])) for r in rows[:members]],
            children=sorted(c["cluster_id"] for c in profiles
                            if c["level"] == level + 1 and c["parent_cluster_id"] == cluster_id),
        )
        sel = (ds.field("level") == level) & (ds.field("src_cluster") == cluster_id) \
            & (ds.field("dst_cluster") != cluster_id)
        edges = self.read("interest_supergraph", ["dst_cluster", "weight"], sel).to_pylist()
        edges.sort(key=lambda e: (-e["weight"], e["dst_cluster"]))
        view.neighbours = [(int(e["dst_cluster"]), float(e["weight"])) for e in edges[:neighbours]]
        return view


def _top(ids: np.ndarray, types: np.ndarray, scores: np.ndarray, mask: np.ndarray, k: int) -> list[Hit]:
    """The ``k`` best-scoring rows among ``mask``, best first (ties by entity ID)."""
    cand = np.flatnonzero(mask)
    if k <= 0 or not len(cand):
        return []
    if len(cand) > k:  # partial sort first: O(N) instead of O(N log N) on a large catalog
        cand = cand[np.argpartition(-scores[cand], k - 1)[:k]]
    order = sorted(cand, key=lambda i: (-float(scores[i]), ids[i]))
    return [Hit(str(ids[i]), str(types[i]), float(scores[i])) for i in order[:k]]


# --- module-level shortcuts ------------------------------------------------------------------------


def similar(entity_id: str, type: str | None = None, k: int = 20, *, lake: str | None = None,
            as_of: dt.date | str | None = None, version: int | None = None) -> list[Hit]:
    """:meth:`Publication.similar` on the latest publication (or ``as_of`` / ``version``)."""
    return Publication(lake, as_of, version).similar(entity_id, type, k)


def cluster(level: int, cluster_id: int, *, members: int = 20, lake: str | None = None,
            as_of: dt.date | str | None = None, version: int | None = None) -> ClusterView:
    """:meth:`Publication.cluster` on the latest publication (or ``as_of`` / ``version``)."""
    return Publication(lake, as_of, version).cluster(level, cluster_id, members)


def recommend(user_id: str, k: int = 20, *, lake: str | None = None, as_of: dt.date | str | None = None,
              version: int | None = None, types: Sequence[str] = RECOMMENDABLE_TYPES,
              exclude_seen: bool = True, retrieval: Retrieval | HierarchicalSettings = "exact") -> list[Hit]:
    """:meth:`Publication.recommend` on the latest publication (or ``as_of`` / ``version``); ``retrieval`` is
    ``exact``, ``hierarchical`` or a :class:`~hir_pipeline.retrieval.HierarchicalSettings`
    (:func:`hierarchy_settings`)."""
    return Publication(lake, as_of, version).recommend(user_id, k, types, exclude_seen, retrieval)


def hierarchy_settings(level: int | None = None, clusters: int | None = None, candidates: int | None = None,
                       candidate_share: float | None = None, neighbours: int | None = None) -> HierarchicalSettings:
    """:class:`~hir_pipeline.retrieval.HierarchicalSettings` with the given values (``None``: the default); a bad
    value is a :class:`QueryError`.

    Args:
        level: routing level, 0 = coarsest.
        clusters: clusters probed.
        candidates: most items scored (0: no cap by count).
        candidate_share: most items scored as a share of the rankable items (0: no cap by share).
        neighbours: strongest super-graph neighbours of the user's own cluster probed on top.
    """
    given = {"level": level, "clusters": clusters, "candidates": candidates, "candidate_share": candidate_share,
             "neighbours": neighbours}
    try:
        return HierarchicalSettings(**{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise QueryError(f"hierarchical retrieval: {exc}") from None
