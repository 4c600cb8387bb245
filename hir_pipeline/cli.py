"""The ``hir`` command line: set-up, whole-graph materialization, queries and evaluation.

``hir materialize`` runs the same Dagster job the nightly schedule runs, in-process, against the
project's Dagster instance (``DAGSTER_HOME``), so every run it makes shows up in ``dagster dev``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import shutil
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, NoReturn

from dotenv import dotenv_values

from hir_pipeline.profiles import PROFILE_CHOICES, choose_profile
from hir_pipeline.run_console import native_stderr_to
from hir_pipeline.settings import cache_dir, default_lake_root, project_root, state_dir

if TYPE_CHECKING:
    import dagster as dg

log = logging.getLogger("hir")


def dagster_home() -> Path:
    """The project's Dagster instance folder, created if missing; also exported as ``DAGSTER_HOME``.

    The folder is ``DAGSTER_HOME`` if set, else the one the project's ``.env`` names (which ``hir setup`` writes,
    so that ``dg dev`` / ``dagster dev`` in the project root open this same instance), else ``.hir/dagster``.
    When the folder has no ``dagster.yaml`` yet, the committed one (SQLite storage) is copied in; an existing one
    gets the committed sections it lacks of :data:`MERGED_INSTANCE_SECTIONS`.
    """
    named = os.environ.get("DAGSTER_HOME") or dotenv_values(project_root() / ".env").get("DAGSTER_HOME")
    home = Path(named or state_dir() / "dagster").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    committed = project_root() / "dagster.yaml"
    if not config.exists() and committed.exists():
        shutil.copyfile(committed, config)
    elif committed.exists():
        add_missing_sections(config, committed, MERGED_INSTANCE_SECTIONS)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


#: Sections of the committed ``dagster.yaml`` that an instance made before they existed gets added: without
#: ``python_logs`` the project's Python loggers would not reach the run log.
MERGED_INSTANCE_SECTIONS: tuple[str, ...] = ("python_logs",)


def add_missing_sections(config: Path, committed: Path, sections: Sequence[str]) -> list[str]:
    """Append to the instance file ``config`` each of ``sections`` that it lacks, as ``committed`` sets it.

    The file is only appended to (its other settings and comments stay as they are); a section it already has,
    whatever its value, is the instance owner's choice and is left alone.

    Args:
        config: the instance's ``dagster.yaml``.
        committed: the project's ``dagster.yaml``.
        sections: top-level keys to add when missing.

    Returns:
        The sections added.
    """
    import yaml

    present = yaml.safe_load(config.read_text()) or {}
    wanted = yaml.safe_load(committed.read_text()) or {}
    added = {key: wanted[key] for key in sections if key in wanted and key not in present}
    if added:
        with config.open("a", encoding="utf-8") as fh:
            fh.write(f"\n# Added by hir from {committed}:\n{yaml.safe_dump(added, sort_keys=False)}")
        print(f"hir: added {', '.join(added)} of {committed} to the Dagster instance {config}", flush=True)
    return list(added)


def write_dagster_env(folder: Path, values: Mapping[str, str]) -> Path:
    """Set ``values`` in ``folder/.env``, keeping every other line (created if missing).

    Dagster's command-line tools (``dagster dev``, ``dg dev``, ``dagster definitions validate``,
    ``dagster-daemon run``) load the ``.env`` of the folder they start in, before they look for
    ``DAGSTER_HOME``; its values take precedence over the environment's.
    """
    from dotenv import set_key

    path = folder / ".env"
    path.touch(exist_ok=True)
    for key, value in values.items():
        set_key(path, key, value, quote_mode="never")
    return path


def ui_command() -> str:
    """How to open this run's instance in the Dagster UI.

    In the project root Dagster's tools open the instance the root's ``.env`` names (it overrides the
    environment); any other instance is opened from its own folder.
    """
    home = os.environ["DAGSTER_HOME"]
    named = dotenv_values(project_root() / ".env").get("DAGSTER_HOME")
    if named and Path(named).expanduser().resolve() == Path(home):
        return f"cd {project_root()} && .venv/bin/dg dev"
    return f"cd {home} && DAGSTER_HOME={home} {project_root()}/.venv/bin/dagster dev -m hir_pipeline.definitions"


def cmd_setup(args: argparse.Namespace) -> int:
    """Resolve the Delta jars and fetch the sample data into the cache (idempotent, needs network once)."""
    from hir_pipeline.data.fetch import movielens_files
    from spark_jobs.session import check_java, ensure_delta_jars

    cache = cache_dir()
    print(f"Java:             {check_java()}")
    print(f"Delta jars:       {', '.join(p.name for p in ensure_delta_jars(cache))}")
    files = movielens_files(cache)
    print(f"MovieLens-100k:   {files['inter'].parent}")
    if not args.skip_images:
        print(f"Fashion-MNIST:    {images_line(cache)}")
    home = dagster_home()
    env_file = write_dagster_env(project_root(), {"DAGSTER_HOME": str(home)})
    print(f"Dagster instance: {home}   (named in {env_file} for `dg dev` in the project root)")
    return 0


def images_line(cache: Path) -> str:
    """``hir setup``'s Fashion-MNIST line: the folder, or, where it cannot be fetched (no ``apt-get``, no network),
    a one-line notice: the images are optional (MovieLens has none; synthetic products then get no image)."""
    from hir_pipeline.data.fetch import DataUnavailable, fetch_fashion_mnist

    try:
        return str(fetch_fashion_mnist(cache))
    except DataUnavailable as exc:
        return f"not fetched, optional ({exc}); synthetic products get no images"


def _resolve_partition(source: str, partition: str | None) -> tuple[str, str, str]:
    """(partition key, ingestion window, the source's first event date): the given day, or the source's latest event
    date as a backfill.

    The source's schema is checked here, before any run starts, so a broken source fails with one
    line naming the table and column and nothing is written.
    """
    from hir_pipeline.settings import default_spark_master
    from resources import SourceResource, SparkResource
    from spark_jobs.ingestion.labels import IngestConfig
    from spark_jobs.ingestion.reader import check_source_folder, event_date_span, read_source
    from spark_jobs.ingestion.sources.spec import BUILTIN_SOURCES

    if source not in BUILTIN_SOURCES:
        check_source_folder(source)  # before Spark starts: a mistyped path fails at once
    if partition:  # fail fast on a malformed date
        try:
            dt.date.fromisoformat(partition)
        except ValueError:
            raise ValueError(f"--partition {partition!r} is not a date (YYYY-MM-DD)") from None
    spark = SparkResource(master=default_spark_master()).get_session()
    events = read_source(spark, SourceResource(location=source).prepare(spark))["events"]
    today = dt.datetime.now(dt.UTC).date()
    span = event_date_span(events, not_after=IngestConfig().bounds(today).latest)
    if partition:
        first = partition if span is None else min(span[0].isoformat(), partition)
        return partition, "day", first
    if span is None:
        raise ValueError(f"source {source!r} has no event with a parseable event_ts")
    return span[1].isoformat(), "all", span[0].isoformat()


def start_partitions_at(lake: str, first_event_date: str) -> None:
    """Make the run calendar of this process start at the source's first event date when the lake records none yet
    (its first ingestion; later the lake's record is read, ``assets.partitions``) and no ``HIR_PARTITIONS_START``
    is set. Must run before the asset modules are imported."""
    from spark_jobs.ingestion.lake_source import recorded_lake_source

    if not os.environ.get("HIR_PARTITIONS_START") and recorded_lake_source(f"{lake.rstrip('/')}/events") is None:
        os.environ["HIR_PARTITIONS_START"] = first_event_date


#: Tags ``hir materialize`` puts on its in-process runs, so that a later ``hir`` can tell a dead one.
PID_TAG, HOST_TAG = "hir/pid", "hir/host"


def _process_tags() -> dict[str, str]:
    import socket

    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def _died(run) -> bool:
    """Whether ``run`` was executed in-process by a ``hir`` on this machine whose process is gone."""
    import socket

    pid, host = run.tags.get(PID_TAG), run.tags.get(HOST_TAG)
    if not pid or host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def refuse_concurrent_run(instance, partition: str) -> None:
    """Raise ``ValueError`` naming the run when a run for ``partition`` is queued or in progress on ``instance``.

    Two runs of one date would replace each other's rows half-way; the daemon's one-run queue does not see runs
    that ``hir`` executes in-process, so the check is made here. A run of a ``hir`` process on this machine that
    died (killed, machine lost) is marked failed instead, so that it never blocks the next night.
    """
    import dagster as dg

    active = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=active, tags={"dagster/partition": partition})):
        if _died(run):
            instance.report_run_failed(run, f"the hir process {run.tags[PID_TAG]} that ran it is gone")
            print(f"hir: run {run.run_id} for {partition} was left by a process that died; marked failed",
                  file=sys.stderr)
            continue
        raise ValueError(f"run {run.run_id} for {partition} is {run.status.value.lower()} on this Dagster instance; "
                         "wait for it, or cancel it in the UI, before starting another")


def cmd_materialize(args: argparse.Namespace) -> int:
    """Run the whole asset graph (or ``--select``) for one run date, in-process, through Dagster.

    The console gets one line per asset step (``-v``: everything); the full log, Spark's console included, goes to a
    file that the last line names.
    """
    return _logged_run(args, "materialize", _materialize)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Ingest the source, embed its content and run ``evaluation_report``; print the comparison table.

    The graph, training and publishing assets are not needed: the evaluation builds its own graph from
    the training split and trains its own model with the production settings. The run is the nightly job's
    subset of those assets, run as ``hir materialize`` runs it (same console lines, log file and run config).
    """
    return _logged_run(args, "evaluate", _evaluate)


def _logged_run(args: argparse.Namespace, command: str, run: Callable[[argparse.Namespace, Path, IO[str]], bool]
                ) -> int:
    """Run ``run(args, log_path, err)`` with the console of :mod:`hir_pipeline.run_console`: ``err`` is where error
    lines go; unless ``--verbose``, this process's file descriptor 2 (the JVM's console) goes to the log file."""
    dagster_home()
    read_run_config(args.config)  # a missing or broken file fails before Spark starts
    log_path = run_log_path(command)
    with contextlib.ExitStack() as stack:
        # Quiet: Spark's JVM, started inside, and native libraries write their console output into the log file.
        err = sys.stderr if args.verbose else stack.enter_context(native_stderr_to(log_path))
        succeeded = run(args, log_path, err)
    print(f"hir: full log: {log_path}", file=sys.stdout if succeeded else sys.stderr)
    return 0 if succeeded else 1


def _materialize(args: argparse.Namespace, log_path: Path, err: IO[str]) -> bool:
    import dagster as dg

    selection = dg.AssetSelection.from_string(args.select) if args.select else None
    result = _execute(args, log_path, err, selection)
    if result is None:
        return False
    lake = args.lake or default_lake_root()
    print(f"\nhir: run {result.run_id} succeeded for {result.dagster_run.tags['dagster/partition']}.")
    print(f"  Delta lake:   {lake}   (tables: node_embeddings, cluster_assignments, interest_supergraph, "
          "cluster_profiles, ...)")
    print(f"  MLflow:       mlflow ui --backend-store-uri {os.environ.get('MLFLOW_TRACKING_URI') or _mlflow_uri()}")
    print(f"  Dagster UI:   {ui_command()}   (then open http://127.0.0.1:3000)")
    return True


def _evaluate(args: argparse.Namespace, log_path: Path, err: IO[str]) -> bool:
    import dagster as dg

    selection = evaluate_selection()
    overrides = {"evaluation_report": {"epochs": args.epochs}} if args.epochs is not None else {}
    result = _execute(args, log_path, err, selection, overrides)
    if result is None:
        return False
    reports = [e for e in result.get_asset_materialization_events()
               if e.asset_key == dg.AssetKey("evaluation_report")]
    if not reports:
        print(f"hir: run {result.run_id} wrote no evaluation report; inspect it in the UI ({ui_command()})", file=err)
        return False
    meta = reports[-1].materialization.metadata
    table = meta["comparison"].value
    print(f"\nEvaluation of {result.dagster_run.tags['dagster/partition']} (model version "
          f"{meta['model_version'].value}):\n\n{table}")
    print(f"\nDelta: {meta['path'].value} (version {meta['delta_version'].value}); "
          f"MLflow run {meta['mlflow_run_id'].value}")
    if args.report:
        Path(args.report).write_text(table + "\n")
    return True


def _execute(args: argparse.Namespace, log_path: Path, err: IO[str], selection: dg.AssetSelection | None = None,
             overrides: Mapping[str, Mapping] | None = None) -> dg.ExecuteInProcessResult | None:
    """Run the nightly job (its assets in ``selection``, a Dagster ``AssetSelection``; ``None``: all of them) for the
    run date of ``--partition`` or the source's latest event, in-process, with the run log of ``log_path``.

    Args:
        args: ``--source``, ``--lake``, ``--partition``, ``--profile``, ``--config``, ``--verbose``.
        log_path: the run's log file.
        err: where failure lines go.
        selection: the assets to run.
        overrides: per asset, op config set over the run-config file's (command-line options such as ``--epochs``).

    Returns:
        The successful run's result, or ``None`` when the run failed (its failed checks and how to inspect it
        printed to ``err``).
    """
    lake = args.lake or default_lake_root()
    partition, window, first_event = _resolve_partition(args.source, args.partition)
    profile = choose_profile(args.profile)
    print(f"hir: source={args.source} lake={lake} run date={partition} ingestion window={window} "
          f"profile={profile}", flush=True)
    start_partitions_at(lake, first_event)
    import dagster as dg

    from hir_pipeline.definitions import build_definitions

    defs = build_definitions(lake_root=lake, source=args.source, profile=profile)
    nightly, job = nightly_subset(defs, selection)
    run_config = load_run_config(args.config, job, known_ops=nightly.graph.node_dict)
    refuse_concurrent_run(dg.DagsterInstance.get(), partition)
    ops = run_config.setdefault("ops", {})
    if _selects_ingestion(job):
        ops.setdefault("bronze_tables", {}).setdefault("config", {})["window"] = window
    for op, values in (overrides or {}).items():
        ops.setdefault(op, {}).setdefault("config", {}).update(values)
    job, run_config = with_run_log(job, run_config, log_path, verbose=args.verbose)
    result = job.execute_in_process(
        partition_key=partition, instance=dg.DagsterInstance.get(), run_config=run_config, raise_on_error=False,
        tags=_process_tags(),
    )
    failed_checks = [e for e in result.get_asset_check_evaluations() if not e.passed]
    for check in failed_checks:
        print(f"hir: check failed: {check.asset_key.to_user_string()}:{check.check_name}", file=err)
    if not result.success:
        print(f"hir: run {result.run_id} failed; inspect it in the UI ({ui_command()})", file=err)
        return None
    return result


def nightly_subset(defs: dg.Definitions, selection: dg.AssetSelection | None) -> tuple[dg.JobDefinition,
                                                                                        dg.JobDefinition]:
    """``(nightly job, the job that runs)``: the nightly job of ``defs`` and its subset of ``selection``'s assets
    (the whole job for ``None``)."""
    from hir_pipeline.definitions import NIGHTLY_JOB

    nightly = defs.resolve_job_def(NIGHTLY_JOB)
    if selection is None:
        return nightly, nightly
    return nightly, nightly.get_subset(asset_selection=set(selection.resolve(defs.resolve_asset_graph())))


def run_log_path(command: str) -> Path:
    """A new log file of one ``hir`` run: ``<state>/logs/<command>-<UTC time>.log``."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return state_dir() / "logs" / f"{command}-{stamp}.log"


def with_run_log(job, run_config: dict, log_path: Path, verbose: bool):
    """``job`` with the CLI's loggers: every record into ``log_path``, the console lines of
    :class:`~hir_pipeline.run_console.RunConsole` on standard output, and with ``verbose`` Dagster's own console
    logger at DEBUG too. Returns the job and the run config (with the console logger's level when verbose)."""
    import dagster as dg

    from hir_pipeline.run_console import RunConsole, log_file_handler

    run_log = logging.getLogger(f"hir.run.{log_path.stem}")
    run_log.setLevel(logging.DEBUG)
    run_log.propagate = False  # not the root logger's handlers: the run log has its own
    run_log.handlers[:] = [log_file_handler(log_path), RunConsole(sys.stdout)]
    loggers = {"hir_run_log": dg.LoggerDefinition(lambda _init: run_log,
                                                  description="hir's console lines and full log file")}
    chosen: dict = {"hir_run_log": {}}  # Dagster starts only the loggers that the run config names
    if verbose:
        loggers["console"] = dg.colored_console_logger
        chosen["console"] = {"config": {"log_level": "DEBUG"}}
    return job.with_logger_defs(loggers), {**run_config, "loggers": {**run_config.get("loggers", {}), **chosen}}


def read_run_config(path: str | None) -> dict:
    """The run-config YAML file at ``path`` (``ops: {asset: {config: ...}}``, ``resources: ...``), or ``{}``.

    Raises:
        ValueError: the file is missing or unreadable, is not YAML, or is not a mapping (one clear line).
    """
    if not path:
        return {}
    import yaml

    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ValueError(f"run config {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"run config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise ValueError(f"run config {path}: expected a mapping with 'ops' and/or 'resources'")
    return config


def load_run_config(path: str | None, job, known_ops: Collection[str] | None = None) -> dict:
    """Dagster run config from a YAML file (``ops: {asset: {config: ...}}``), keeping only selected assets.

    Args:
        path: the YAML file, or ``None``.
        job: the job that runs (possibly a subset of the nightly job).
        known_ops: the ops of the whole job; an op of the file that is not one of them is an error naming it,
            never silently ignored (default: ``job``'s own).
    """
    if not path:
        return {}
    config = read_run_config(path)
    selected = set(job.graph.node_dict)
    known = set(known_ops) if known_ops is not None else selected
    ops = config.get("ops") or {}
    unknown = sorted(set(ops) - known)
    if unknown:
        raise ValueError(f"run config {path}: unknown op(s) {unknown} under 'ops' (known: {sorted(known)})")
    resources = set(job.resource_defs) - {"io_manager"}
    unknown = sorted(set(config.get("resources") or {}) - resources)
    if unknown:
        raise ValueError(f"run config {path}: unknown resource(s) {unknown} (known: {sorted(resources)})")
    config["ops"] = {op: value for op, value in ops.items() if op in selected}
    return config


def evaluate_selection() -> dg.AssetSelection:
    """The assets ``hir evaluate`` runs: the ingestion group, ``content_embeddings`` and ``evaluation_report``."""
    import dagster as dg

    return dg.AssetSelection.groups("ingestion") | dg.AssetSelection.assets("content_embeddings", "evaluation_report")


def _mlflow_uri() -> str:
    from hir_pipeline.settings import default_mlflow_tracking_uri

    return default_mlflow_tracking_uri()


def _selects_ingestion(job) -> bool:
    return any(node.name == "bronze_tables" for node in job.graph.node_dict.values())


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hir-pipeline")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2), like every other ``hir`` error:
    argparse's default prints the whole usage first. Sub-command parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


SETUP_EXAMPLES = """examples:
  hir setup                 # Delta jars, MovieLens-100k and Fashion-MNIST into .cache (idempotent)
  hir setup --skip-images   # without the Fashion-MNIST images (the MovieLens sample needs none)"""
MATERIALIZE_EXAMPLES = """examples:
  hir materialize                                  # backfill the MovieLens sample, run as of its latest event
  hir materialize --source /data/exports           # any folder following the source contract
  hir materialize --partition 2024-06-30           # the nightly increment: ingest that day, run as of it
  hir materialize --select "group:ingestion"       # a Dagster asset selection only
  hir materialize --config my_run.yaml --profile gpu   # run config over the production schedule
  hir -v materialize                               # every Dagster event and Spark line on the console"""
EVALUATE_EXAMPLES = """examples:
  hir evaluate                                     # HIR vs the baselines on MovieLens
  hir evaluate --source synthetic --report out.md  # on the synthetic source (planted hierarchy: NMI too)
  hir evaluate --epochs 4                          # a shorter schedule for the evaluation model"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="hir", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="everything on the console (Dagster DEBUG events, Spark's console); by default "
                        "one line per"
                        " asset step, the rest in the log file the last line names")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    examples = argparse.RawDescriptionHelpFormatter
    setup = sub.add_parser("setup", help="resolve Delta jars and fetch sample data into the local cache",
                           formatter_class=examples, epilog=SETUP_EXAMPLES)
    setup.add_argument("--skip-images", action="store_true", help="do not fetch Fashion-MNIST")
    setup.set_defaults(func=cmd_setup)

    mat = sub.add_parser("materialize", help="run the whole asset graph for one run date",
                         formatter_class=examples, epilog=MATERIALIZE_EXAMPLES)
    mat.add_argument("--source", default=os.environ.get("HIR_SOURCE", "movielens"),
                     help="movielens, synthetic, or a folder following the source contract (default: movielens)")
    mat.add_argument("--lake", default=None, help="Delta lake root (default: HIR_LAKE or .hir/lake)")
    mat.add_argument("--partition", default=None, metavar="YYYY-MM-DD",
                     help="ingest that day's events and run as of it (default: backfill the whole source "
                          "and run as of its latest event date)")
    mat.add_argument("--select", default=None,
                     help="Dagster asset selection, e.g. 'group:ingestion' or 'key:entities+' (default: all)")
    mat.add_argument("--config", default=None, metavar="YAML",
                     help="Dagster run config (ops: {asset: {config: ...}}, resources: ...), applied over the "
                          "profile's settings")
    mat.add_argument("--profile", choices=PROFILE_CHOICES, default=None,
                    help="model settings that fit the machine: cpu (small model, short schedule, schedule budget) "
                         "or gpu (the production schedule); default: HIR_PROFILE, else gpu when one is visible")
    mat.set_defaults(func=cmd_materialize)

    ev = sub.add_parser("evaluate", help="evaluate HIR against the baselines on a source, without a nightly run",
                        formatter_class=examples, epilog=EVALUATE_EXAMPLES)
    ev.add_argument("--source", default=os.environ.get("HIR_SOURCE", "movielens"),
                    help="movielens, synthetic, or a source folder (default: movielens)")
    ev.add_argument("--lake", default=None, help="Delta lake root (default: HIR_LAKE or .hir/lake)")
    ev.add_argument("--partition", default=None, metavar="YYYY-MM-DD",
                    help="run date (default: backfill and evaluate as of the latest event date)")
    ev.add_argument("--config", default=None, metavar="YAML",
                    help="Dagster run config, as for materialize (the config of assets that evaluate does not run "
                         "is left out), e.g. config/cpu_sample.yaml")
    ev.add_argument("--profile", choices=PROFILE_CHOICES, default=None,
                    help="model settings that fit the machine: cpu (small model, short schedule, schedule budget) "
                         "or gpu (the production schedule); default: HIR_PROFILE, else gpu when one is visible")
    ev.add_argument("--epochs", type=int, default=None, help="override the evaluation model's training epochs")
    ev.add_argument("--report", default=None, metavar="PATH", help="also write the comparison table (markdown)")
    ev.set_defaults(func=cmd_evaluate)

    from hir_pipeline.query.cli import add_query_parser

    add_query_parser(sub)
    return parser


def configure_root_logging(verbose: bool) -> None:
    """Python's root logging of a ``hir`` process: WARNING and above on stderr (everything with ``verbose``).

    Third-party libraries (GX, py4j) are chatty at INFO; Dagster's own run logs still print. The level is set on the
    root *handler* too: a record of a logger with its own level (Dagster sets the run's managed loggers, ours among
    them, to INFO) propagates to the root handler whatever the root logger's level, and stderr goes to the run log,
    where every such line would then appear twice.
    """
    level = logging.DEBUG if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_root_logging(args.verbose)
    from hir_pipeline.data.integrity import IntegrityError
    from spark_jobs.ingestion.reader import SourceError
    from spark_jobs.session import JavaUnavailable

    try:
        return int(args.func(args) or 0)
    except (SourceError, ValueError, JavaUnavailable, IntegrityError) as exc:  # bad input or machine: one line
        print(f"hir: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        import dagster as dg

        if not isinstance(exc, dg.DagsterInvalidConfigError):
            raise
        errors = "; ".join(e.message for e in exc.errors) or str(exc).splitlines()[0]
        print(f"hir: error: invalid run config: {errors}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
