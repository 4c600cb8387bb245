"""Querying the published tables without Spark: the ``deltalake`` package (delta-rs) and numpy.

A *publication* is what one publish run wrote for one run date. The publish asset writes
``node_embeddings`` last, so its Delta version is the publication's commit marker: the other tables are read
as they stood when that version was committed (latest Delta version whose commit timestamp is not later).
That keeps a reader consistent even while (or after) a publish run was killed half-way.

* latest: the newest ``node_embeddings`` version, newest run date in it;
* ``as_of=DATE``: the newest run date on or before ``DATE``;
* ``version=N``: ``node_embeddings`` Delta version ``N`` (time travel), the other tables as of its commit.

Functions: :func:`similar`, :func:`cluster`, :func:`recommend` (shortcuts over :class:`Publication`). Unknown
IDs raise :class:`UnknownIdError`; the command line is :mod:`hir_pipeline.query.cli`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hir_pipeline.contracts import ENTITY_TYPES

#: The publication's commit marker: written last by the publish asset.
MARKER_TABLE = "node_embeddings"
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
        versions: table -> Delta version read (None: the table did not exist at the marker's commit).
    """

    lake: str
    run_date: dt.date
    model_version: str
    versions: dict[str, int | None]


@dataclass(frozen=True)
class Hit:
    """One ranked entity: ``score`` is the dot product of the (L2-normalised) embeddings."""

    entity_id: str
    entity_type: str
    score: float


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


def _parse_date(value: dt.date | str | None) -> dt.date | None:
    if value is None or isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(value)


class Publication:
    """The published tables of one run date, resolved once and read with ``deltalake``.

    Args:
        lake: lake root (default: ``HIR_LAKE`` or ``.hir/lake``); a local folder or any URI delta-rs reads.
        as_of: newest run date on or before this date (default: the newest).
        version: Delta version of ``node_embeddings`` to time-travel to (default: the latest).
        storage_options: delta-rs storage options (credentials of an object store).
    """

    def __init__(self, lake: str | None = None, as_of: dt.date | str | None = None, version: int | None = None,
                 storage_options: dict[str, str] | None = None) -> None:
        from hir_pipeline.settings import default_lake_root

        self.lake = lake or default_lake_root()
        self._options = storage_options
        self.snapshot = self._resolve(_parse_date(as_of), version)

    # --- resolution ---------------------------------------------------------------------------------

    def _table(self, table: str, version: int | None = None):
        from deltalake import DeltaTable

        return DeltaTable(_path(self.lake, table), version=version, storage_options=self._options)

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

    def _exists(self, table: str) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(_path(self.lake, table), storage_options=self._options)

    def _resolve(self, as_of: dt.date | None, version: int | None) -> Snapshot:
        if not self._exists(MARKER_TABLE):
            raise QueryError(f"no publication in lake {self.lake!r}: table {MARKER_TABLE} does not exist")
        marker = self._table(MARKER_TABLE)
        latest = marker.version()
        if version is not None and not 0 <= version <= latest:
            raise QueryError(f"{MARKER_TABLE} has no Delta version {version} (versions 0..{latest})")
        version = latest if version is None else version
        commits = {h["version"]: h for h in marker.history() if "version" in h}
        if version not in commits:
            raise QueryError(f"{MARKER_TABLE} version {version} is no longer in the Delta log (log retention)")
        at = commits[version]["timestamp"]
        marker = self._table(MARKER_TABLE, version)
        dates = sorted({dt.date.fromisoformat(p["run_date"]) for p in marker.partitions()})
        eligible = [d for d in dates if as_of is None or d <= as_of]
        if not eligible:
            raise QueryError(f"no publication on or before {as_of} in {MARKER_TABLE} v{version} "
                             f"(run dates: {', '.join(map(str, dates)) or 'none'})")
        run_date = eligible[-1]
        versions: dict[str, int | None] = {MARKER_TABLE: version}
        for table in ("cluster_assignments", "interest_supergraph", "cluster_profiles"):
            versions[table] = self._version_at(table, at)
        model_versions = self._read_at(MARKER_TABLE, version, run_date, ["model_version"]).column(0).unique()
        return Snapshot(self.lake, run_date, str(model_versions[0]) if len(model_versions) else "",
                        versions)

    def _version_at(self, table: str, timestamp_ms: int) -> int | None:
        """Newest version of ``table`` committed no later than ``timestamp_ms``."""
        if not self._exists(table):
            return None
        found = [h["version"] for h in self._table(table).history() if "version" in h
                 and h.get("timestamp", 0) <= timestamp_ms]
        return max(found) if found else None

    # --- reading ------------------------------------------------------------------------------------

    def _read_at(self, table: str, version: int, run_date: dt.date, columns: Sequence[str] | None = None,
                 where=None):
        import pyarrow as pa
        import pyarrow.dataset as ds

        flt = ds.field("run_date") == pa.scalar(run_date, pa.date32())
        if where is not None:
            flt = flt & where
        return self._dataset(table, version).to_table(columns=list(columns) if columns else None, filter=flt)

    def read(self, table: str, columns: Sequence[str] | None = None, where=None):
        """The snapshot's rows of ``table`` as a pyarrow Table.

        Args:
            table: one of the four published tables.
            columns: columns to read (default all).
            where: an extra ``pyarrow.dataset`` filter expression.
        """
        version = self.snapshot.versions.get(table)
        if version is None:
            raise QueryError(f"table {table} is missing from the publication of {self.snapshot.run_date}")
        return self._read_at(table, version, self.snapshot.run_date, columns, where)

    def _embeddings(self):
        t = self.read(MARKER_TABLE, ["entity_id", "entity_type", "embedding"])
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
                  exclude_seen: bool = True) -> list[Hit]:
        """The ``k`` items with the highest dot product with the user's embedding.

        Args:
            user_id: an entity of type ``user``.
            k: number of results.
            types: entity types to rank (default ads and products).
            exclude_seen: leave out items the user already has an edge to in ``graph_edges`` (the snapshot of
                the publication's run date or the latest before it; nothing is excluded without the table).
        """
        ids, etypes, emb = self._embeddings()
        row = np.flatnonzero(ids == user_id)
        if not len(row):
            raise UnknownIdError(f"unknown user {user_id!r}: not in {self._where()}")
        if etypes[row[0]] != "user":
            raise UnknownIdError(f"{user_id!r} is a {etypes[row[0]]}, not a user")
        mask = np.isin(etypes, list(types))
        if exclude_seen:
            mask &= ~np.isin(ids, list(self.seen(user_id)))
        return _top(ids, etypes, emb @ emb[row[0]], mask, k)

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
        return set(self._dataset("graph_edges").to_table(columns=["dst_id"], filter=flt).column(0).to_pylist())

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
        if self.snapshot.versions.get("interest_supergraph") is not None:
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
              exclude_seen: bool = True) -> list[Hit]:
    """:meth:`Publication.recommend` on the latest publication (or ``as_of`` / ``version``)."""
    return Publication(lake, as_of, version).recommend(user_id, k, types, exclude_seen)
