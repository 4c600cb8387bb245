"""Write-audit-publish for the Delta tables an asset step writes before its blocking checks run.

Dagster evaluates an asset's checks after the step wrote its tables. A failed blocking check stops the rest of
*that* run, but the rows stay in the lake, where a later run (the refresh sensor, a downstream asset launched from
the UI, ``hir query``) would read them. A step therefore records each table's version before writing
(:meth:`WriteAudit.begin`) and the version it wrote (:meth:`WriteAudit.wrote`); once its checks are known,
:meth:`WriteAudit.settle` keeps the writes when every blocking check passed and otherwise undoes them in one
commit per table (:func:`spark_jobs.delta_io.roll_back`), so the lake holds again what it held before the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import dagster as dg
from pyspark.sql import SparkSession

from resources import LakeResource
from spark_jobs.delta_io import latest_version, roll_back


@dataclass
class WriteAudit:
    """The tables one asset step writes, with their versions before and after its writes.

    Args:
        session: the Spark session of the step.
        paths: table name -> Delta path, for every table the step may write.
        before: table name -> version before the step wrote (None: no table yet).
        written: table name -> the last version the step wrote (tables not written yet are absent).
    """

    session: SparkSession
    paths: dict[str, str]
    before: dict[str, int | None]
    written: dict[str, int] = field(default_factory=dict)

    @classmethod
    def begin(cls, session: SparkSession, lake: LakeResource, tables: Sequence[str]) -> WriteAudit:
        """Record the current version of each of ``tables`` (call before the first write)."""
        paths = {t: lake.path(t) for t in tables}
        return cls(session, paths, {t: latest_version(session, p) for t, p in paths.items()})

    def wrote(self, table: str) -> int:
        """Record ``table``'s version right after the step's write to it; returns that version."""
        version = latest_version(self.session, self.paths[table])
        if version is None:
            raise ValueError(f"{table}: no Delta table at {self.paths[table]} after the write")
        self.written[table] = version
        return version

    def settle(self, context: dg.AssetExecutionContext, results: Iterable[dg.AssetCheckResult]) -> dict:
        """Keep the writes if every blocking (ERROR severity) check in ``results`` passed, else roll them back.

        Returns:
            Materialization metadata: ``{}`` when the writes are kept, else ``{"rolled_back": {table: {"to_version",
            "rollback_version"}}}``.
        """
        failed = [r.check_name for r in results if not r.passed and r.severity == dg.AssetCheckSeverity.ERROR]
        if not failed:
            return {}
        undone = {}
        for table, version in reversed(self.written.items()):
            undone[table] = {"to_version": self.before[table],
                             "rollback_version": roll_back(self.session, self.paths[table], self.before[table],
                                                           version)}
        context.log.error(f"blocking checks failed ({', '.join(failed)}): the writes of this step are rolled back, "
                          f"downstream readers keep what the lake held before: {undone}")
        return {"rolled_back": dg.MetadataValue.json(undone)}
