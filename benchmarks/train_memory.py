"""Memory of the training stage vs event count: what the driver collects, and each rank's peak.

For one size of the synthetic source (``--events``, impressions requested from the generator; one size per process,
since peaks are process-lifetime), the graph tables are built as the graph assets build them
(``spark_jobs.graph``), a content vector of ``--content-dim`` floats is given to every non-user entity (random: the
memory, not the values, is measured), and then:

1. **Driver collect**: ``spark_jobs.model.inputs.load_model_inputs`` collects nodes, structure embeddings, views,
   content and engagement pairs to the driver, as ``interest_model`` does. Reported: the Python driver's peak RSS
   during the collect (``VmHWM``, reset just before it through ``/proc/self/clear_refs``), the JVM's peak over the
   whole run, and the size of every structure held on the driver (``ModelInputs.nbytes`` and per part) and of the
   pickled hand-off file the ranks load (``inputs.pkl``).
2. **Ranks**: ``--processes`` (default ``1,2``) spawned gloo ranks each load the whole inputs file, build the
   trainer with ``config/cpu_sample.yaml``'s settings and run ``--steps`` training steps
   (``benchmarks/train_throughput.py``'s ``run_parallel``); reported: the largest rank's peak RSS and its median
   step.

Usage: python benchmarks/train_memory.py --events N [--work DIR] [--content-dim 704] [--steps 6]
[--processes 1,2] [--driver-memory 6g] [--max-result-size 4g] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

MB = 1024 * 1024


def _status_mb(pid: int | str, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak(pid: int | str = "self") -> None:
    """Start ``VmHWM`` over from the current RSS (Linux: ``5`` to ``/proc/PID/clear_refs``)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def write_content(source: Path, out: Path, dim: int, seed: int = 0, chunk: int = 20_000) -> int:
    """A ``content_embeddings``-like parquet (``entity_id``, ``embedding``) with a random unit vector of ``dim``
    floats for every non-user entity of ``source``, written in chunks; returns its row count."""
    if out.exists():
        return pq.ParquetFile(out).metadata.num_rows
    entities = pq.read_table(source / "entities", columns=["entity_id", "entity_type"])
    ids = entities.filter(pa.compute.not_equal(entities["entity_type"], "user"))["entity_id"]
    rng = np.random.default_rng(seed)
    schema = pa.schema([("entity_id", pa.string()), ("embedding", pa.list_(pa.float32()))])
    tmp = out.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, schema) as writer:
        for start in range(0, len(ids), chunk):
            part = ids.slice(start, chunk)
            v = rng.standard_normal((len(part), dim), dtype=np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            values = pa.ListArray.from_arrays(pa.array(np.arange(0, v.size + 1, dim, dtype=np.int32)),
                                              pa.array(v.reshape(-1)))
            writer.write_table(pa.table({"entity_id": part, "embedding": values}, schema=schema))
    tmp.rename(out)
    return len(ids)


def part_sizes(inputs) -> dict[str, float]:
    """MB of each structure :class:`~hir_pipeline.training.inputs.ModelInputs` holds on the driver."""
    def views_mb(views) -> float:
        return sum(np.asarray(v[k]).nbytes for v in views for k in ("nodes", "node_types", "dist", "edge_types")) / MB

    return {
        "views_broad_mb": views_mb(inputs.broad_views), "views_narrow_mb": views_mb(inputs.narrow_views),
        "content_mb": inputs.content.nbytes / MB,
        "structure_mb": 0.0 if inputs.structure is None else inputs.structure.nbytes / MB,
        "engagement_mb": sum(np.asarray(a).nbytes for a in (*inputs.engagement, *(inputs.seen_pairs or ()))) / MB,
        "nodes_mb": sum(np.asarray(a).nbytes for a in (inputs.node_type, inputs.degree_bucket, inputs.has_history,
                                                          inputs.has_content)) / MB,
    }


def run_size(spark, args) -> dict:
    from graph_build import _jvm_peak_mb, _read_bronze
    from train_throughput import run_parallel

    from spark_jobs.graph import GraphConfig, build_edges, build_nodes, build_views
    from spark_jobs.graph.views import GraphSnapshot
    from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source
    from spark_jobs.model.inputs import load_model_inputs

    work: Path = args.work
    src = work / f"synthetic_{args.events}"
    write_synthetic_source(spark, SyntheticConfig(n_events=args.events), src)
    content_path = work / f"content_{args.events}_{args.content_dim}.parquet"
    n_content = write_content(src, content_path, args.content_dim)
    bronze = _read_bronze(spark, src)
    run_date: dt.date = bronze["events"].agg({"event_date": "max"}).first()[0]
    cfg = GraphConfig()
    t0 = time.perf_counter()
    edges = build_edges(bronze["entities"], bronze["relations"], bronze["events"], run_date, cfg).cache()
    n_edges = edges.count()
    nodes = build_nodes(bronze["entities"], edges, run_date, cfg).cache()
    n_nodes = nodes.count()
    views_path = work / f"train_memory_views_{args.events}"
    build_views(nodes, edges, run_date, cfg).write.mode("overwrite").parquet(str(views_path))
    graph_s = time.perf_counter() - t0
    views = spark.read.parquet(str(views_path))

    _reset_peak()
    rss_before = _status_mb("self", "VmRSS")
    t0 = time.perf_counter()
    inputs = load_model_inputs(GraphSnapshot(run_date=run_date, nodes=nodes, edges=edges, views=views),
                               spark.read.parquet(str(content_path)))
    collect_s = time.perf_counter() - t0
    driver_collect_peak = _status_mb("self", "VmHWM")
    driver_held = _status_mb("self", "VmRSS") - rss_before
    sizes = part_sizes(inputs)
    cache = work / f"train_memory_inputs_{args.events}.pkl"
    t0 = time.perf_counter()
    with cache.open("wb") as f:  # as training.inputs.save_inputs writes the ranks' hand-off file
        pickle.dump({"inputs": inputs}, f, protocol=pickle.HIGHEST_PROTOCOL)
    pickle_s = time.perf_counter() - t0
    n_views = len(inputs.broad_views) + len(inputs.narrow_views)
    row = {"events": args.events, "nodes": n_nodes, "edges": n_edges, "views": n_views, "content_rows": n_content,
           "engagement_pairs": len(inputs.engagement[0]), "graph_s": round(graph_s, 1),
           "collect_s": round(collect_s, 1), "inputs_mb": round(inputs.nbytes() / MB, 1),
           **{k: round(v, 1) for k, v in sizes.items()},
           "pickle_mb": round(cache.stat().st_size / MB, 1), "pickle_s": round(pickle_s, 1),
           "driver_rss_before_mb": round(rss_before), "driver_collect_peak_mb": round(driver_collect_peak),
           "driver_held_mb": round(driver_held),
           "jvm_peak_mb": round(_jvm_peak_mb(spark)), "ranks": []}
    del inputs
    edges.unpersist()
    nodes.unpersist()
    bench = argparse.Namespace(cache=cache, set=[f"{k}={json.dumps(v)}" for k, v in args.settings.items()],
                               steps=args.steps, warmup=1, threads=args.threads, prepared_inputs=None)
    for world in (int(x) for x in args.processes.split(",")):
        r = run_parallel(args.backend, world, 0, bench)
        row["ranks"].append({"processes": world, "rank_peak_mb": r["peak_rss_mb"], "step_ms": r["step_ms"]})
    cache.unlink()
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, required=True, help="impressions requested from the synthetic generator")
    p.add_argument("--work", type=Path, default=None, help="sources, content and views (default: a temp dir)")
    p.add_argument("--content-dim", type=int, default=704, help="content vector width (the sample's fused width)")
    p.add_argument("--steps", type=int, default=6, help="training steps per rank (the first one not timed)")
    p.add_argument("--processes", default="1,2", help="comma-separated rank counts")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--backend", default="chunked", help="attention backend of the ranks")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model/train setting override")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--max-result-size", default="4g",
                   help="spark.driver.maxResultSize: the views collected at 10^7 events exceed Spark's default 1g")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.work = args.work or Path(tempfile.mkdtemp(prefix="bench_train_memory_"))
    args.work.mkdir(parents=True, exist_ok=True)
    args.settings = dict(s.split("=", 1) for s in args.set)
    args.settings = {k: json.loads(v) for k, v in args.settings.items()}

    from hir_pipeline.settings import cache_dir
    from spark_jobs.session import build_spark_session, ensure_delta_jars

    spark = build_spark_session(
        jars=ensure_delta_jars(cache_dir()), master="local[*]", app_name="bench-train-memory",
        conf={"spark.driver.memory": args.driver_memory, "spark.driver.maxResultSize": args.max_result_size,
              "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        row = run_size(spark, args)
    finally:
        spark.stop()
    from train_throughput import emit_json, print_table

    print_table([row], ["events", "nodes", "edges", "inputs_mb", "pickle_mb", "collect_s", "driver_rss_before_mb",
                        "driver_collect_peak_mb", "driver_held_mb", "jvm_peak_mb"], width=22)
    print_table(row["ranks"], ["processes", "rank_peak_mb", "step_ms"], width=22)
    emit_json(row, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
