"""Hand-written model tables for publishing tests: the planted hierarchy of the tiny synthetic source.

The publish asset reads ``model_outputs`` / ``model_hierarchy`` (written by the training asset in a real run).
Here they are written directly: clusters are the ground truth of the synthetic source (4 coarse, 16 mid,
64 fine interests) and embeddings are noisy copies of per-interest centres, so the tests do not wait for
training. ``permute`` renumbers every level's model clusters the way a retrained model would.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import SparkSession

from hir_pipeline.settings import project_root
from resources import LakeResource, MLflowResource
from spark_jobs.delta_io import read_table, replace_run_date
from spark_jobs.graph import build_edges

LEVEL_SIZES = (4, 16, 64)
DIM = 16
OUTPUTS_DDL = ("entity_id string, entity_type string, embedding array<float>, cluster_ids array<int>, "
               "confidences array<float>, has_view boolean, model_version string, run_date date")
HIERARCHY_DDL = "level int, cluster_id int, parent_cluster_id int, prototype array<float>, model_version string, " \
                "run_date date"


def ground_truth(spark: SparkSession, source: Path) -> list[tuple[str, str, tuple[int, int, int]]]:
    """(entity_id, entity_type, (coarse, mid, fine)); mid-level-only entities get the first fine child."""
    rows = spark.read.parquet(str(Path(source) / "ground_truth")).collect()
    out = []
    for r in sorted(rows, key=lambda r: r.entity_id):
        fine = r.level2 if r.level2 is not None else r.level1 * 4
        out.append((r.entity_id, r.entity_type, (int(r.level0), int(r.level1), int(fine))))
    return out


def permutations(seed: int | None) -> list[np.ndarray]:
    """Per level, model index -> new model index (identity for ``seed=None``)."""
    if seed is None:
        return [np.arange(k) for k in LEVEL_SIZES]
    rng = np.random.default_rng(seed)
    return [rng.permutation(k) for k in LEVEL_SIZES]


def write_model_tables(spark: SparkSession, lake: LakeResource, truth, day: dt.date, model_version: str,
                       permute: int | None = None, seed: int = 0) -> None:
    """Write ``model_outputs`` and ``model_hierarchy`` for ``day`` (replacing that date's rows)."""
    rng = np.random.default_rng(seed)
    centres = [rng.normal(size=(k, DIM)) * s for k, s in zip(LEVEL_SIZES, (3.0, 1.5, 0.7), strict=True)]
    perm = permutations(permute)
    outputs = []
    for eid, etype, (c0, c1, c2) in truth:
        vec = centres[0][c0] + centres[1][c1] + centres[2][c2] + rng.normal(size=DIM) * 0.3
        vec /= np.linalg.norm(vec)
        conf = [float(x) for x in rng.uniform(0.4, 1.0, size=3)]
        outputs.append((eid, etype, vec.astype(np.float32).tolist(),
                        [int(perm[0][c0]), int(perm[1][c1]), int(perm[2][c2])], conf, True, model_version, day))
    hierarchy = []
    for level, k in enumerate(LEVEL_SIZES):
        for c in range(k):
            parent = None if level == 0 else int(perm[level - 1][c // 4])
            proto = centres[level][c] / np.linalg.norm(centres[level][c])
            hierarchy.append((level, int(perm[level][c]), parent, proto.astype(np.float32).tolist(), model_version,
                              day))
    for table, rows, ddl in (("model_outputs", outputs, OUTPUTS_DDL), ("model_hierarchy", hierarchy, HIERARCHY_DDL)):
        replace_run_date(spark.createDataFrame(rows, ddl), lake.path(table), day)


def copy_inputs(spark: SparkSession, source_lake: LakeResource, lake: LakeResource, day: dt.date) -> None:
    """Copy bronze ``entities`` into ``lake`` and build its ``graph_edges`` snapshot of ``day``."""
    bronze = {t: read_table(spark, source_lake.path(t)) for t in ("entities", "relations", "events")}
    bronze["entities"].write.format("delta").mode("overwrite").save(lake.path("entities"))
    (build_edges(bronze["entities"], bronze["relations"], bronze["events"], day)
     .write.format("delta").mode("overwrite").partitionBy("run_date").save(lake.path("graph_edges")))


def tag_training_run(mlflow: MLflowResource, day: dt.date, model_version: str, gate: str | None = "passed") -> str:
    """A finished 'training' run tagged like the model asset's, and a registered model version for it (tagged with
    its run date, like the model asset's, and with the promotion gate's verdict ``gate``; ``None``: no verdict)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    experiment_id = mlflow.activate()
    client = MlflowClient()
    run = client.create_run(experiment_id, run_name=f"train-{day}",
                            tags={"hir.run_date": str(day), "hir.model_version": model_version})
    client.set_terminated(run.info.run_id)
    with contextlib.suppress(MlflowException):  # already registered by an earlier version
        client.create_registered_model(mlflow.registered_model)
    tags = {"hir.run_date": str(day), **({"hir.gate": gate} if gate else {})}
    mv = client.create_model_version(mlflow.registered_model, source=f"runs:/{run.info.run_id}/model",
                                     run_id=run.info.run_id, tags=tags)
    assert str(mv.version) == model_version, f"the registry gave version {mv.version}, the tables say {model_version}"
    return run.info.run_id


def spawn(args: list[str], log: Path) -> subprocess.Popen:
    """Start ``python *args`` in the project root, in its own process group (for :func:`kill_when`).

    Output goes to the file ``log`` (a pipe nobody reads would fill up and stall the child).
    """
    env = {**os.environ, "PYTHONPATH": str(project_root())}
    with open(log, "w") as out:
        # own session: the kill takes the Python driver and its Spark JVM together, like a lost machine
        proc = subprocess.Popen([sys.executable, *args], cwd=project_root(), env=env, start_new_session=True,
                                stdout=out, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def kill_when(proc: subprocess.Popen, ready, timeout_s: float = 420.0) -> None:
    """SIGKILL ``proc``'s process group as soon as ``ready()`` is true; fail if it exits or times out first."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"child exited ({proc.returncode}) before the kill point:\n{proc.log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("kill point not reached in time")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def logged_images(client, run_id: str) -> dict[tuple[str, int], str]:
    """``{(key, step): artifact path}`` of a run's full-resolution MLflow images, read back from the artifact names
    that MLflow's UI reads them from (``images/<key, / as ~>+step+<step>+timestamp+<ms>+<uuid>.png``)."""
    found = {}
    for artifact in client.list_artifacts(run_id, "images"):
        name = artifact.path.rsplit("/", 1)[-1]
        if name.endswith(".png"):
            key, _, step, *_ = name[: -len(".png")].split("+")
            found[(key.replace("~", "/"), int(step))] = artifact.path
    return found
