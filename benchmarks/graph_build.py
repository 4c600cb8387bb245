"""Benchmark of the interaction graph (spark_jobs.graph): time and peak memory per stage vs event count.

Stages, each materialised before the next (``cache().count()`` / a ``noop`` write) so its time is its own:
``edges`` (build_edges), ``nodes`` (build_nodes, the spectral structure embedding included: collect + driver-side
iterations), ``views`` (build_views: the graph collected to the driver and broadcast, then sampling + induced
subgraph + per-view shortest paths in numpy for all anchors, and the write; ``views_collect_seconds``, column
``collect_s``, is its first part). ``shortest_paths`` then compares the BFS kernel
(``spark_jobs.graph.structure.batch_structure``, in batches of the stage's size) with scipy.sparse.csgraph
and networkx on the *same* views, on the driver (up to ``--sample-views`` views collected back), checking that all
three agree.

Source: ``spark_jobs.ingestion.sources.synthetic.write_synthetic_source`` (power-law users and items, full funnel),
generated once per size under ``--work`` and not timed.

Memory: ``peak_rss_mb`` = peak RSS of the Python driver (``ru_maxrss``) + peak RSS of the Spark JVM
(``VmHWM`` of the py4j gateway process, which runs the executors in local mode); Python UDF workers are
reported separately (``worker_peak_rss_mb``: the largest ``VmHWM`` among the JVM's descendant processes right
after the views stage, while its idle Python workers, each holding a copy of the broadcast graph, are still
alive). Peaks are process-lifetime, so sizes run in one process report the running maximum: run one
``--events N`` per process for clean figures.

Usage: python benchmarks/graph_build.py [--events N] [--json PATH] [--work DIR] [--driver-memory 6g]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
from scipy.sparse import csr_matrix  # noqa: E402
from scipy.sparse.csgraph import shortest_path  # noqa: E402

SIZES = (100_000, 1_000_000, 10_000_000)


def _jvm_peak_mb(spark) -> float:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _workers_peak_mb(spark) -> float:
    """Largest peak RSS among the live descendants of the Spark JVM (pyspark.daemon and its Python workers)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    todo, peak = [spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()], 0.0
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            try:
                hwm = [ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmHWM:")]
            except OSError:
                continue
            if hwm:
                peak = max(peak, int(hwm[0].split()[1]) / 1024)
    return peak


def _py_peak_mb(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def _read_bronze(spark, root: Path):
    from pyspark.sql import functions as F

    from hir_pipeline.contracts import SOURCE_TABLES

    out = {}
    for table, cols in SOURCE_TABLES.items():
        df = spark.read.parquet(str(root / table))
        df = df.select(*[(F.col(c.name) if c.name in df.columns else F.lit(None)).cast(c.ddl).alias(c.name)
                         for c in cols])
        if table == "events":
            df = df.withColumn("event_date", F.to_date("event_ts"))
        out[table] = df
    return out


def _compare_sp(rows, max_dist: int) -> dict:
    from spark_jobs.graph.structure import batch_structure
    from spark_jobs.graph.views import ANCHOR_BATCH

    views = []
    for r in rows:
        n = len(r.nodes)
        et = np.frombuffer(r.edge_types, np.uint8).reshape(n, n)
        src, dst = np.nonzero(et)
        views.append((n, src, dst, et[src, dst], np.frombuffer(r.dist, np.int8).reshape(n, n)))
    t0 = time.perf_counter()
    ours = []
    for lo in range(0, len(views), ANCHOR_BATCH):  # batches of the stage's size
        batch = views[lo:lo + ANCHOR_BATCH]
        ptr = np.r_[0, np.cumsum([len(v[1]) for v in batch])].astype(np.int64)
        cat = [np.concatenate([v[i] for v in batch]) for i in (1, 2, 3)]
        ours += batch_structure(np.array([v[0] for v in batch]), ptr, *cat, np.zeros_like(cat[2]), max_dist)[0]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    sp = []
    for n, s, d, _, _ in views:
        m = csr_matrix((np.ones(len(s)), (s, d)), shape=(n, n))
        full = shortest_path(m, method="D", directed=False, unweighted=True)
        sp.append(np.where(np.isinf(full) | (full > max_dist), max_dist + 1, full).astype(np.int8))
    t_scipy = time.perf_counter() - t0
    t0 = time.perf_counter()
    nxd = []
    for n, s, d, _, _ in views:
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from(zip(s.tolist(), d.tolist(), strict=True))
        out = np.full((n, n), max_dist + 1, np.int8)
        for a, lengths in nx.all_pairs_shortest_path_length(g, cutoff=max_dist):
            for b, v in lengths.items():
                out[a, b] = v
        nxd.append(out)
    t_nx = time.perf_counter() - t0
    agree = all(np.array_equal(a, b) and np.array_equal(a, c) and np.array_equal(a, v[4])
                for a, b, c, v in zip(ours, sp, nxd, views, strict=True))
    k = max(len(views), 1)
    return {"views": len(views), "mean_nodes": float(np.mean([v[0] for v in views])) if views else 0.0,
            "numpy_bfs_us_per_view": 1e6 * t_ours / k, "scipy_csgraph_us_per_view": 1e6 * t_scipy / k,
            "networkx_us_per_view": 1e6 * t_nx / k, "all_agree_with_spark_output": bool(agree)}


def run_size(spark, n_events: int, work: Path, sample_views: int) -> dict:
    from spark_jobs.graph import GraphConfig, build_edges, build_nodes, build_views
    from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source

    src = work / f"synthetic_{n_events}"
    t0 = time.perf_counter()
    write_synthetic_source(spark, SyntheticConfig(n_events=n_events), src)
    t_gen = time.perf_counter() - t0
    bronze = _read_bronze(spark, src)
    n_read = bronze["events"].count()
    run_date = bronze["events"].agg({"event_date": "max"}).first()[0]
    cfg = GraphConfig()
    stages: dict[str, float] = {}
    t = time.perf_counter()
    edges = build_edges(bronze["entities"], bronze["relations"], bronze["events"], run_date, cfg).cache()
    n_edges = edges.count()
    stages["edges"] = time.perf_counter() - t
    t = time.perf_counter()
    nodes = build_nodes(bronze["entities"], edges, run_date, cfg).cache()
    n_nodes = nodes.count()
    stages["nodes"] = time.perf_counter() - t
    t = time.perf_counter()
    views = build_views(nodes, edges, run_date, cfg)  # collects and broadcasts the graph now
    t_collect = time.perf_counter() - t
    out = work / f"views_{n_events}"
    views.write.mode("overwrite").parquet(str(out))
    stages["views"] = time.perf_counter() - t
    workers_peak = _workers_peak_mb(spark)
    written = spark.read.parquet(str(out))
    n_views = written.count()
    sample = written.where("view = 'broad'").orderBy("anchor_idx").limit(sample_views).collect()
    baseline = _compare_sp(sample, cfg.max_dist)
    total = sum(stages.values())
    edges.unpersist()
    nodes.unpersist()
    return {"events": int(n_read), "impressions_requested": n_events, "nodes": n_nodes, "edges": n_edges,
            "views": n_views, "generate_seconds": t_gen, "seconds_total": total, "stages": stages,
            "views_collect_seconds": t_collect,
            "peak_rss_mb": _py_peak_mb() + _jvm_peak_mb(spark), "driver_py_peak_mb": _py_peak_mb(),
            "jvm_peak_mb": _jvm_peak_mb(spark), "worker_peak_rss_mb": workers_peak,
            "baseline": baseline}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, help="one size (impressions requested from the generator)")
    p.add_argument("--json", type=Path)
    p.add_argument("--work", type=Path, default=None, help="where sources and views go (default: a temp dir)")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--sample-views", type=int, default=2000)
    args = p.parse_args(argv)

    from hir_pipeline.settings import cache_dir
    from spark_jobs.session import build_spark_session, ensure_delta_jars

    spark = build_spark_session(
        jars=ensure_delta_jars(cache_dir()), master="local[*]", app_name="bench-graph",
        conf={"spark.driver.memory": args.driver_memory, "spark.ui.enabled": "false",
              "spark.sql.shuffle.partitions": "8"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_graph_"))
    results = [run_size(spark, n, work, args.sample_views) for n in ([args.events] if args.events else SIZES)]
    hdr = f"{'events':>10} {'nodes':>8} {'edges':>9} {'edges_s':>8} {'nodes_s':>8} {'views_s':>8} {'collect_s':>9} " \
          f"{'total_s':>8} " \
          f"{'peak_mb':>8} {'bfs_us':>7} {'scipy_us':>8} {'nx_us':>7} agree"
    print(hdr)
    for r in results:
        s, b = r["stages"], r["baseline"]
        print(f"{r['events']:>10} {r['nodes']:>8} {r['edges']:>9} {s['edges']:>8.1f} {s['nodes']:>8.1f} "
              f"{s['views']:>8.1f} {r['views_collect_seconds']:>9.1f} {r['seconds_total']:>8.1f} "
              f"{r['peak_rss_mb']:>8.0f} "
              f"{b['numpy_bfs_us_per_view']:>7.0f} {b['scipy_csgraph_us_per_view']:>8.0f} "
              f"{b['networkx_us_per_view']:>7.0f} {b['all_agree_with_spark_output']}")
    if args.json:
        args.json.write_text(json.dumps(results[0] if len(results) == 1 else results, indent=2, default=str))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
