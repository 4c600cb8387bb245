"""Building a Delta-enabled SparkSession, with the Delta jars cached for offline runs.

The jars are resolved once from Maven Central by Spark's own Ivy resolver in a child process
(the parent JVM must start with them on its classpath), then copied into ``<cache>/jars``. Every
later session puts those files on ``spark.jars`` directly and needs no network.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from hir_pipeline.data.integrity import IntegrityError, verify_download
from hir_pipeline.settings import DELTA_VERSION, SCALA_BINARY_VERSION

log = logging.getLogger(__name__)

DELTA_PACKAGE = f"io.delta:delta-spark_{SCALA_BINARY_VERSION}:{DELTA_VERSION}"
#: Jars Delta needs beyond Spark's own (delta-spark depends on delta-storage; antlr comes with Spark).
DELTA_JARS = (
    f"io.delta_delta-spark_{SCALA_BINARY_VERSION}-{DELTA_VERSION}.jar",
    f"io.delta_delta-storage-{DELTA_VERSION}.jar",
)

#: Settings every session gets: Delta, UTC (run dates are UTC dates), modest local parallelism.
BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    # Delta rebuilds a table's state with 50 tasks per snapshot by default, sized for clusters; on a local session
    # every read of a small table then pays 50 tasks. Raise it with the shuffle partitions on a cluster.
    "spark.databricks.delta.snapshotPartitions": "8",
    # Delta's VACUUM lists a table's files with this many tasks; Spark's default (10,000) made each VACUUM of a
    # small local table take a minute (docs/results.md). Raise it with the shuffle partitions on a cluster.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    # The Spark UI has no authentication: nobody may kill a nightly job's stages from it.
    "spark.ui.killEnabled": "false",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # pandas writes nanosecond timestamps, which Spark cannot read as timestamps: read them as epoch nanoseconds
    # (spark_jobs.ingestion.reader.as_timestamp converts them).
    "spark.sql.legacy.parquet.nanosAsLong": "true",
}

_RESOLVE_SCRIPT = """
import sys
from pyspark.sql import SparkSession
s = (SparkSession.builder.master("local[1]").appName("hir-resolve-delta-jars")
     .config("spark.jars.packages", sys.argv[1]).config("spark.jars.ivy", sys.argv[2])
     .config("spark.ui.enabled", "false").getOrCreate())
s.stop()
"""


class DeltaJarsUnavailable(RuntimeError):
    """The Delta jars are neither cached nor resolvable (offline on a fresh machine)."""


class JavaUnavailable(RuntimeError):
    """No Java, or a Java older than Spark needs, for the Spark driver."""


#: Java versions Spark 4.0 runs on.
SUPPORTED_JAVA = (17, 21)


def check_java() -> int:
    """The major version of the Java Spark will start (``JAVA_HOME``'s, else the one on ``PATH``).

    Raises:
        JavaUnavailable: none found, or one Spark does not support; the message is one line saying how to fix it.
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    where = f"JAVA_HOME={home}" if home else "PATH"
    if not java or not Path(java).exists():
        raise JavaUnavailable(f"no Java found (looked at {where}); Spark needs Java {SUPPORTED_JAVA[0]} or "
                              f"{SUPPORTED_JAVA[1]}: install one (e.g. apt-get install openjdk-17-jre-headless) "
                              "or set JAVA_HOME")
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    text = proc.stderr + proc.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    major = None if match is None else int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0" is Java 8
        major = int(match.group(2))
    if major not in SUPPORTED_JAVA:
        found = f"Java {major}" if major else "a Java whose version could not be read"
        raise JavaUnavailable(f"{found} at {java}; Spark needs Java {SUPPORTED_JAVA[0]} or {SUPPORTED_JAVA[1]}: "
                              "install one or point JAVA_HOME at it")
    return major


def ensure_delta_jars(cache_dir: Path) -> list[Path]:
    """Return the cached Delta jars, resolving them from Maven Central the first time.

    Args:
        cache_dir: the project cache (``hir_pipeline.settings.cache_dir()``); jars go to
            ``cache_dir/jars`` and Ivy's own cache to ``cache_dir/ivy``.
    """
    jars_dir = cache_dir / "jars"
    wanted = [jars_dir / name for name in DELTA_JARS]
    if all(p.exists() for p in wanted):
        return wanted
    check_java()
    ivy_dir = cache_dir / "ivy"
    ivy_dir.mkdir(parents=True, exist_ok=True)
    log.info("Resolving %s into %s (one time, needs Maven Central)", DELTA_PACKAGE, ivy_dir)
    proc = subprocess.run(
        [sys.executable, "-c", _RESOLVE_SCRIPT, DELTA_PACKAGE, str(ivy_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": ""} if "PYSPARK_SUBMIT_ARGS" in os.environ else None,
    )
    resolved = [ivy_dir / "jars" / name for name in DELTA_JARS]
    if proc.returncode != 0 or not all(p.exists() for p in resolved):
        raise DeltaJarsUnavailable(
            f"Could not resolve {DELTA_PACKAGE} from Maven Central into {ivy_dir}: "
            f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no jars produced'}"
        )
    incoming = jars_dir / ".incoming"  # checked here before it enters the cache
    incoming.mkdir(parents=True, exist_ok=True)
    for src, dst in zip(resolved, wanted, strict=True):
        shutil.copy2(src, incoming / dst.name)
        try:
            verify_download(incoming / dst.name)
        except IntegrityError:
            src.unlink(missing_ok=True)  # never resolve from a bad Ivy cache entry again
            raise
        os.replace(incoming / dst.name, dst)
    return wanted


def build_spark_session(
    *,
    jars: list[Path],
    master: str = "local[*]",
    app_name: str = "hir-pipeline",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Create (or return the running) Delta-enabled SparkSession.

    Args:
        jars: Delta jars from :func:`ensure_delta_jars`.
        master: Spark master URL, e.g. ``local[*]`` or ``spark://host:7077``.
        app_name: application name shown in the Spark UI.
        conf: extra Spark settings; they override :data:`BASE_CONF`.
    """
    # Python workers (pandas UDFs, mapInPandas) must run this interpreter, not whatever is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        # The driver (and its unauthenticated UI) listen on loopback only: a local run serves nobody else.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if SparkSession.getActiveSession() is None:
        check_java()  # one clear line instead of a JVM launch error
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {**BASE_CONF, "spark.jars": ",".join(str(j) for j in jars), **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextmanager
def temporary_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set one runtime conf of ``spark`` for the ``with`` block, then restore its previous value (or unset it).

    Args:
        spark: the session.
        key: a runtime (SQL) conf, read when a job is planned, e.g. ``spark.sql.execution.arrow.maxRecordsPerBatch``.
        value: its value inside the block.
    """
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)
