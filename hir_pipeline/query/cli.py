"""``hir query similar|cluster|recommend|versions``: the command line over :mod:`hir_pipeline.query.api`.

Results go to stdout as a table (or JSON with ``--json``); an unknown ID or a missing publication prints one
line on stderr and exits with :data:`EXIT_UNKNOWN`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from dataclasses import asdict
from typing import Any

from hir_pipeline.contracts import ENTITY_TYPES, MANIFEST_TABLE, OUTPUT_TABLES, manifest_version_column
from hir_pipeline.query.api import (
    RECOMMENDABLE_TYPES,
    ClusterView,
    Publication,
    QueryError,
    Recommendation,
    hierarchy_settings,
)
from hir_pipeline.retrieval import RETRIEVALS, HierarchicalSettings

#: ``hir query`` exit code for an unknown ID or a missing publication.
EXIT_UNKNOWN = 2


QUERY_EXAMPLES = """examples:
  hir query versions                          # every publication: run date, model version, table versions
  hir query similar 'movie:50' -k 10          # nearest entities in the shared space (latest publication)
  hir query cluster 0 3 --as-of 1998-04-22    # a cluster's profile and members as of a run date
  hir query recommend 'user:196' --version 4  # a user's items as published at publications Delta version 4
  hir query recommend 'user:196' --retrieval hierarchical --clusters 4 --candidates 200  # coarse to fine
  hir query similar p1 --lake s3://bucket/lake --storage-option AWS_REGION=eu-west-1 --json"""


def _storage_option(value: str) -> tuple[str, str]:
    """``--storage-option``'s type: ``KEY=VALUE``."""
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key, val


def _print_publications(rows: list[dict], snapshot, as_json: bool, out) -> int:
    """``hir query versions``: one line (or JSON object) per publication of the manifest version read."""
    if as_json:
        print(json.dumps({"manifest_version": snapshot.versions[MANIFEST_TABLE], "lake": snapshot.lake,
                          "publications": rows}, indent=2, default=str), file=out)
        return 0
    print(f"# {MANIFEST_TABLE}@v{snapshot.versions[MANIFEST_TABLE]} lake={snapshot.lake}", file=out)
    for row in rows:
        tables = " ".join(f"{t}@v{row[manifest_version_column(t)]}" for t in OUTPUT_TABLES)
        print(f"{row['run_date']}  model {row['model_version']}  published {row.get('published_at')}  {tables}",
              file=out)
    return 0


def _date(value: str) -> dt.date:
    """``--as-of``'s type: a YYYY-MM-DD date, or a usage error naming the value."""
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD)") from None


def add_query_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``query similar|cluster|recommend`` to the ``hir`` command line; the handler is
    :func:`run_query` (set as ``func``), which returns the exit code."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--lake", default=None, help="Delta lake root (default: HIR_LAKE or .hir/lake)")
    common.add_argument("--as-of", dest="as_of", type=_date, default=None, metavar="YYYY-MM-DD",
                        help="newest publication on or before this run date (default: the newest)")
    common.add_argument("--version", type=int, default=None, metavar="N",
                        help=f"Delta version of the {MANIFEST_TABLE} manifest to time-travel to: the publications "
                             "as they stood then, each table read at the version it records (default: the latest)")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument("--storage-option", dest="storage_options", action="append", type=_storage_option,
                        default=None, metavar="KEY=VALUE",
                        help="delta-rs storage option of an object-store lake, repeatable (e.g. AWS_REGION=eu-west-1; "
                             "credentials also come from the store's usual environment variables)")

    examples = argparse.RawDescriptionHelpFormatter
    query = subparsers.add_parser("query", help="query the published tables (no Spark)",
                                  description="Query the published Delta tables with deltalake + numpy.",
                                  formatter_class=examples, epilog=QUERY_EXAMPLES)
    sub = query.add_subparsers(dest="query_command", required=True)
    sub.add_parser("versions", parents=[common], help="the publications: run dates, models, table versions",
                   formatter_class=examples, epilog="example:\n  hir query versions --lake s3://bucket/lake "
                   "--storage-option AWS_REGION=eu-west-1")
    sim = sub.add_parser("similar", parents=[common], help="entities nearest to an entity (dot product)")
    sim.add_argument("entity_id")
    sim.add_argument("--type", default=None, choices=ENTITY_TYPES, help="only entities of this type")
    sim.add_argument("-k", type=int, default=20, help="number of results (default 20)")
    clu = sub.add_parser("cluster", parents=[common], help="a cluster's profile, members and neighbours")
    clu.add_argument("level", type=int)
    clu.add_argument("cluster_id", type=int)
    clu.add_argument("--members", type=int, default=20, help="members listed (default 20)")
    rec = sub.add_parser("recommend", parents=[common], help="items for a user (dot product)")
    rec.add_argument("user_id")
    rec.add_argument("-k", type=int, default=20, help="number of results (default 20)")
    rec.add_argument("--type", dest="types", action="append", choices=ENTITY_TYPES,
                     help=f"item type to rank, repeatable (default: {', '.join(RECOMMENDABLE_TYPES)})")
    rec.add_argument("--include-seen", action="store_true", help="keep items the user already interacted with")
    default = HierarchicalSettings()
    rec.add_argument("--retrieval", choices=RETRIEVALS, default="exact",
                     help="exact: score every item (default); hierarchical: score only the members of the user's "
                          "clusters at the routing level (its own cluster, then the clusters whose centroids are "
                          "nearest), ranked by the dot product")
    rec.add_argument("--level", type=int, default=None,
                     help=f"hierarchical: routing level, 0 = coarsest (default {default.level})")
    rec.add_argument("--clusters", type=int, default=None,
                     help=f"hierarchical: clusters probed at the routing level (default {default.clusters})")
    rec.add_argument("--candidates", type=int, default=None,
                     help=f"hierarchical: most items scored, 0 = no cap by count (default {default.candidates}); "
                          "over a cap, the members of the finest-level clusters nearest the user are kept")
    rec.add_argument("--candidate-share", dest="candidate_share", type=float, default=None,
                     help="hierarchical: most items scored as a share of the rankable items, 0 = no cap by share "
                          f"(default {default.candidate_share:g}); with --candidates the smaller cap applies")
    rec.add_argument("--neighbours", type=int, default=None,
                     help="hierarchical: also probe this many strongest interest_supergraph neighbours of the user's "
                          f"own cluster (default {default.neighbours})")
    query.set_defaults(func=run_query)
    return query


def run_query(args: argparse.Namespace, out=None, err=None) -> int:
    """Run a parsed ``hir query`` command: results on ``out``; on an unknown ID a message on ``err``, exit 2."""
    out, err = out or sys.stdout, err or sys.stderr
    rec: Recommendation | None = None
    try:
        pub = Publication(args.lake, args.as_of, args.version, dict(args.storage_options or []) or None)
        if args.query_command == "versions":
            result: Any = pub.publications()
        elif args.query_command == "similar":
            result = pub.similar(args.entity_id, args.type, args.k)
        elif args.query_command == "recommend":
            retrieval = args.retrieval if args.retrieval == "exact" else hierarchy_settings(
                args.level, args.clusters, args.candidates, args.candidate_share, args.neighbours)
            rec = pub.retrieve(args.user_id, args.k, tuple(args.types or RECOMMENDABLE_TYPES), not args.include_seen,
                               retrieval)
            result = rec.hits
        else:
            result = pub.cluster(args.level, args.cluster_id, args.members)
    except QueryError as exc:
        print(f"hir query: {exc}", file=err)
        return EXIT_UNKNOWN
    s = pub.snapshot
    if args.query_command == "versions":
        return _print_publications(result, s, args.json, out)
    if args.json:
        payload = {"run_date": str(s.run_date), "model_version": s.model_version, "versions": s.versions,
                   "result": asdict(result) if isinstance(result, ClusterView) else [asdict(h) for h in result]}
        if rec is not None:
            payload["retrieval"] = _retrieval_facts(rec)
        print(json.dumps(payload, indent=2), file=out)
        return 0
    print(f"# run_date={s.run_date} model_version={s.model_version} "
          f"{MANIFEST_TABLE}@v{s.versions[MANIFEST_TABLE]} lake={s.lake}"
          + ("" if rec is None else " " + " ".join(f"{k}={v}" for k, v in _retrieval_facts(rec).items())),
          file=out)
    if isinstance(result, ClusterView):
        print(f"level {result.level} cluster {result.cluster_id}: {result.label}", file=out)
        print(f"  parent: {result.parent_cluster_id}  size: {result.size}  children: {result.children}", file=out)
        print(f"  top members: {', '.join(result.top_members)}", file=out)
        print("  neighbours: " + ", ".join(f"{c} ({w:.3g})" for c, w in result.neighbours), file=out)
        for m in result.members:
            print(f"  {m.confidence:8.4f}  {m.entity_type:<10} {m.entity_id}", file=out)
    else:
        for rank, hit in enumerate(result, 1):
            print(f"{rank:4d}  {hit.score:8.4f}  {hit.entity_type:<10} {hit.entity_id}", file=out)
    return 0


def _retrieval_facts(rec: Recommendation) -> dict[str, Any]:
    """How a recommendation was retrieved: mode, items scored of the rankable ones, routing level and clusters."""
    facts: dict[str, Any] = {"retrieval": rec.retrieval, "scored": rec.scored, "rankable": rec.rankable}
    if rec.retrieval == "hierarchical":
        facts |= {"level": rec.level, "clusters_probed": rec.clusters_probed}
    return facts
