"""Real services the operations tests drive: Dagster (webserver, daemon), Chromium, PostgreSQL, Spark standalone.

Every service runs as a child process of the test on loopback with a free port, logs to a file under the test's
temporary folder, and is stopped by process group at the end (only the processes started here). A service that
cannot be started because its program is not installed makes the test skip with the reason; one that is installed
but fails to come up fails the test with the tail of its log.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.prerequisites import missing

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = 40) -> str:
    """Last ``lines`` lines of a log file (for failure messages)."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, every_s: float = 1.0,
             proc: subprocess.Popen | None = None, log: Path | None = None) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned); fail after ``timeout_s`` seconds.

    Args:
        predicate: called repeatedly; exceptions count as "not yet".
        timeout_s: give up after this many seconds.
        what: what is awaited, for the failure message.
        every_s: polling interval.
        proc: a process that must stay alive meanwhile (its death fails at once).
        log: that process's log, quoted on failure.
    """
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # not up yet
            last_error = exc
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: process exited with {proc.returncode}\n{log_tail(log) if log else ''}")
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what} (last error: {last_error})\n"
                f"{log_tail(log) if log else ''}")


class Service:
    """A child process in its own process group, logging to ``log``; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, args: list[str], log: Path, env: Mapping[str, str] | None = None, cwd: Path = REPO):
        self.args, self.log = args, log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = log.open("ab")
        self.proc = subprocess.Popen(args, cwd=cwd, env=dict(env) if env is not None else None,
                                     stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, timeout_s: float = 30) -> None:
        """Terminate the process group this service started (gracefully first)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # children of the group may outlive the leader (code servers, run workers): end them too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log_file.close()


# --- Dagster -------------------------------------------------------------------------------------------------------


def dagster_env(home: Path, lake: Path, source: str | Path, state: Path, **extra: str) -> dict[str, str]:
    """Environment of a Dagster process over temporary folders (instance, lake, state, source)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "HIR_"))}
    env.update({
        "DAGSTER_HOME": str(home), "HIR_LAKE": str(lake), "HIR_SOURCE": str(source), "HIR_STATE_DIR": str(state),
        "HIR_CACHE_DIR": str(REPO / ".cache"), "SPARK_LOCAL_IP": "127.0.0.1",
        "HIR_SPARK_MASTER": "local[2]", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


#: The packages of the project root (linked into :func:`project_root_copy`).
PROJECT_PACKAGES = ("hir_pipeline", "assets", "resources", "spark_jobs")


def project_root_copy(folder: Path, dagster_home: Path | None = None) -> Path:
    """A project root as a clone has it, for Dagster's tools to start in, apart from the checkout's own.

    ``pyproject.toml`` and ``dagster.yaml`` are copied and the packages linked; with ``dagster_home``, the ``.env``
    that ``hir setup`` writes names that instance (so the checkout's ``.env`` and instance are never used).
    """
    from hir_pipeline.cli import write_dagster_env

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "dagster.yaml"):
        shutil.copyfile(REPO / name, folder / name)
    for package in PROJECT_PACKAGES:
        (folder / package).symlink_to(REPO / package, target_is_directory=True)
    if dagster_home is not None:
        write_dagster_env(folder, {"DAGSTER_HOME": str(dagster_home)})
    return folder


class DagsterUI:
    """``dagster dev`` / ``dg dev`` (webserver + daemon) or ``dagster-webserver`` alone, reached through HTTP."""

    def __init__(self, env: Mapping[str, str], log: Path, daemon: bool = True,
                 target: tuple[str, ...] = ("-m", "hir_pipeline.definitions"), root: Path | None = None,
                 project: Path | None = None):
        """Start it (returns at once; see :meth:`wait_ready`).

        Args:
            env: the processes' environment (:func:`dagster_env`).
            log: file receiving their output.
            daemon: ``dagster dev`` (webserver and daemon) when true, else ``dagster-webserver`` alone.
            target: the code location arguments (not with ``project``).
            root: the test folder the instance, lake and state live in (for the test's own use); the processes
                start in it, away from the checkout's ``.env``.
            project: start ``dg dev`` in this project root (:func:`project_root_copy`), as the README says,
                instead.
        """
        self.root = root or log.parent
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        where = ["--host", "127.0.0.1", "--port", str(self.port)]
        if project is not None:
            args = [str(VENV_BIN / "dg"), "dev", *where]
        elif daemon:
            args = [str(VENV_BIN / "dagster"), "dev", *target, *where]
        else:
            args = [str(VENV_BIN / "dagster-webserver"), *target, *where]
        self.service = Service(args, log, env, cwd=project or self.root)

    def wait_ready(self, timeout_s: float = 420) -> None:
        """Until the webserver answers and its code location has loaded."""
        wait_for(lambda: requests.get(f"{self.url}/server_info", timeout=5).ok, timeout_s, "dagster webserver",
                 every_s=2, proc=self.service.proc, log=self.service.log)
        query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
        query += "locationOrLoadError { __typename ... on PythonError { message } } } } } }"

        def loaded() -> bool:
            entries = self.graphql(query)["workspaceOrError"]["locationEntries"]
            errors = [e for e in entries if e["locationOrLoadError"]
                      and e["locationOrLoadError"]["__typename"] == "PythonError"]
            if errors:
                pytest.fail(f"code location failed to load: {errors}")
            return bool(entries) and all(e["loadStatus"] == "LOADED" and e["locationOrLoadError"] for e in entries)

        wait_for(loaded, timeout_s, "code location loaded", every_s=2, proc=self.service.proc, log=self.service.log)

    def graphql(self, query: str, variables: Mapping[str, Any] | None = None) -> dict:
        """POST a GraphQL query; returns ``data`` (fails on GraphQL errors)."""
        response = requests.post(f"{self.url}/graphql", json={"query": query, "variables": dict(variables or {})},
                                 timeout=60)
        response.raise_for_status()
        body = response.json()
        if body.get("errors"):
            raise AssertionError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def location_name(self) -> str:
        entries = self.graphql("{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")
        return entries["workspaceOrError"]["locationEntries"][0]["name"]

    def stop(self) -> None:
        self.service.stop()

    @contextlib.contextmanager
    def daemon_held(self) -> Iterator[None]:
        """Freeze ``dagster dev``'s daemon process (SIGSTOP) for the block, then let it go on (SIGCONT).

        Everything the daemon does (dequeuing runs, retrying failed ones, sensors, schedules) waits meanwhile; runs
        already launched go on, their workers are children of the code server. A test uses it to order its own
        steps before the daemon's next move instead of racing it.
        """
        import psutil

        daemons = [p for p in psutil.Process(self.service.proc.pid).children(recursive=True)
                   if "dagster._daemon" in " ".join(p.cmdline())]
        assert len(daemons) == 1, f"expected one dagster daemon process under dagster dev, found {daemons}"
        daemons[0].send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            daemons[0].send_signal(signal.SIGCONT)


RUN_QUERY = """
query Run($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { id status tags { key value } }
    ... on PythonError { message }
  }
}
"""

TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


def run_status(ui: DagsterUI, run_id: str) -> tuple[str, dict[str, str]]:
    """(status, tags) of a run as the webserver reports it."""
    run = ui.graphql(RUN_QUERY, {"runId": run_id})["runOrError"]
    assert run["__typename"] == "Run", run
    return run["status"], {t["key"]: t["value"] for t in run["tags"]}


def wait_run(ui: DagsterUI, run_id: str, timeout_s: float, every_s: float = 2) -> str:
    """Poll until the run is finished; returns its terminal status."""
    return wait_for(lambda: (s := run_status(ui, run_id)[0]) in TERMINAL and s, timeout_s,
                    f"run {run_id} to finish", every_s=every_s, proc=ui.service.proc, log=ui.service.log)


# --- Chromium through the DevTools protocol ------------------------------------------------------------------------


def chromium_binary() -> str | None:
    """Debian's Chromium (installed by scripts/install_test_services.sh), if present."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """Headless Chromium driven over the Chrome DevTools Protocol with ``websockets`` (no browser download).

    One page; :meth:`call` sends a CDP command and waits for its reply, ignoring events.
    """

    def __init__(self, profile: Path, log: Path, width: int = 1600, height: int = 1000):
        binary = chromium_binary()
        if binary is None:
            missing("Debian's chromium", "run scripts/install_test_services.sh (apt-get install chromium)")
        profile.mkdir(parents=True, exist_ok=True)
        self.profile = profile
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)  # a stale one from an earlier browser would point at a dead port
        # --no-sandbox: the tests run as root in a container, where Chromium's sandbox cannot start.
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--window-size={width},{height}", "about:blank"]
        self.service = Service(args, log)
        try:
            self._connect(port_file, log, width, height)
        except BaseException:
            self.service.stop(timeout_s=10)  # never leave a browser behind a failed start
            raise

    def _connect(self, port_file: Path, log: Path, width: int, height: int) -> None:
        port = wait_for(lambda: port_file.exists() and port_file.read_text().split("\n")[0].strip(), 60,
                        "chromium DevTools port", every_s=0.5, proc=self.service.proc, log=log)
        self.devtools = f"http://127.0.0.1:{port}"
        pages = wait_for(lambda: [t for t in requests.get(f"{self.devtools}/json/list", timeout=5).json()
                                  if t["type"] == "page"], 30, "chromium page", proc=self.service.proc, log=log)
        from websockets.sync.client import connect

        self._ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self._ids = itertools.count(1)
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.resize(width, height)

    def resize(self, width: int, height: int) -> None:
        """Set the viewport's size (the asset graph renders only the nodes inside it)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def call(self, method: str, timeout_s: float = 60, **params: Any) -> dict:
        """Send one CDP command; returns its ``result``."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == msg_id:
                if "error" in message:
                    raise AssertionError(f"CDP {method} failed: {message['error']}")
                return message.get("result", {})

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """Value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"JS error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self) -> str:
        """The page's visible text plus SVG text (asset graph labels live in SVG foreignObjects)."""
        return self.evaluate("document.body ? document.body.innerText + '\\n' + "
                             "Array.from(document.querySelectorAll('svg text')).map(t => t.textContent).join('\\n')"
                             " : ''") or ""

    def wait_text(self, needles: list[str], timeout_s: float, what: str) -> str:
        """Poll the page until every string in ``needles`` is in its text; returns the text."""
        state: dict[str, Any] = {}

        def ready() -> str | None:
            text = self.text()
            state["missing"] = [n for n in needles if n not in text]
            return None if state["missing"] else text

        try:
            return wait_for(ready, timeout_s, what, every_s=1, proc=self.service.proc, log=self.service.log)
        except pytest.fail.Exception as exc:
            shot = self.screenshot(self.profile.parent / f"not-rendered-{int(time.time())}.png")
            raise AssertionError(f"{what}: not rendered: {state.get('missing')} (see {shot})") from exc

    def screenshot(self, path: Path) -> Path:
        """Save a PNG of the viewport."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()
        self.service.stop(timeout_s=10)


@contextlib.contextmanager
def browser(tmp: Path) -> Iterator[Browser]:
    b = Browser(tmp / "chromium-profile", tmp / "chromium.log")
    try:
        yield b
    finally:
        b.close()


# --- PostgreSQL ----------------------------------------------------------------------------------------------------


def postgres_bin_dir() -> Path | None:
    """``bin`` folder of Debian's PostgreSQL server (highest version installed), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


class Postgres:
    """A throwaway PostgreSQL cluster on loopback: ``initdb`` into a fresh folder, ``pg_ctl start``.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` system user (created by
    the Debian package) and every server command runs through ``runuser``.
    """

    def __init__(self, root: Path, user: str = "dagster", password: str = "dagster-test"):
        """Create and start the cluster.

        Args:
            root: a fresh folder that every user can traverse to (as root it is handed to ``postgres``).
            user: the superuser ``initdb`` creates (password authentication, also on loopback).
            password: its password.
        """
        bindir = postgres_bin_dir()
        if bindir is None:
            missing("Debian's postgresql", "run scripts/install_test_services.sh (apt-get install postgresql)")
        self.bindir, self.user, self.password = bindir, user, password
        self.port = free_port()
        # A folder the server's user owns: pytest's tmp folders are private to root.
        root.mkdir(parents=True, exist_ok=True)
        self.data = root / "pgdata"
        self.sockets = root / "sockets"
        self.log = root / "postgres.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            import pwd

            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                missing("a 'postgres' user to run PostgreSQL as (running as root)",
                        "apt-get install postgresql creates it")
            self._as = ["runuser", "-u", "postgres", "--"]
            blocked = [p for p in root.parents if not p.stat().st_mode & 0o001]
            if blocked:  # pytest's tmp folders are private to root: use one under /tmp
                raise ValueError(f"{root}: the postgres user cannot traverse {blocked[0]}")
            self.sockets.mkdir()
            os.chown(root, owner.pw_uid, owner.pw_gid)
            os.chown(self.sockets, owner.pw_uid, owner.pw_gid)
        else:
            self.sockets.mkdir()
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n")
        if self._as:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        self._run(["initdb", "-D", str(self.data), "-U", user, f"--pwfile={pwfile}", "-A", "scram-sha-256",
                   "-E", "UTF8", "--no-sync"])
        self.start()

    def _run(self, args: list[str]) -> None:
        cmd = [*self._as, str(self.bindir / args[0]), *args[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n"
                        f"{log_tail(self.log)}")

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.sockets} -c fsync=off"
        self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "120", "start"])

    def stop(self) -> None:
        self._run(["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def create_database(self, name: str) -> None:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()

    def env(self, db: str) -> dict[str, str]:
        """The ``DAGSTER_PG_*`` variables deploy/dagster.postgres.yaml reads."""
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USER": self.user,
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": db}


# --- Spark standalone ----------------------------------------------------------------------------------------------


def spark_home() -> Path:
    """pyspark's package folder: it ships ``bin/spark-class`` and ``sbin/spark-daemon.sh``."""
    import pyspark

    return Path(pyspark.__file__).parent


class SparkStandalone:
    """A Spark standalone master and one worker on loopback, started with pyspark's ``sbin/spark-daemon.sh``.

    The pip wheel of pyspark ships ``sbin/spark-daemon.sh`` but not the ``start-master.sh`` / ``start-worker.sh``
    wrappers, so this does what those wrappers do: ``spark-daemon.sh start <Master|Worker class> 1 ...``.
    The worker gets its own work folder and the venv interpreter for Python workers.
    """

    MASTER = "org.apache.spark.deploy.master.Master"
    WORKER = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, root: Path, cores: int = 2, memory: str = "2g"):
        self.root = root
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.ui = f"http://127.0.0.1:{self.ui_port}"
        self.work_dir = root / "work"
        self.conf_dir = root / "conf"
        self.conf_dir.mkdir(parents=True, exist_ok=True)  # empty: no spark-env.sh / defaults from elsewhere
        home = spark_home()
        self.daemon = home / "sbin" / "spark-daemon.sh"
        self.env = {
            # none of the driver's settings: executors must get everything they need from the driver
            **{k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "HIR_", "DAGSTER_"))},
            "SPARK_HOME": str(home), "SPARK_CONF_DIR": str(self.conf_dir), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(root / "logs"), "SPARK_PID_DIR": str(root / "pids"),
            "SPARK_IDENT_STRING": f"hirtest{self.port}", "SPARK_WORKER_DIR": str(self.work_dir),
            "PYSPARK_PYTHON": sys.executable,
        }
        self._daemon("start", self.MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                     "--webui-port", str(self.ui_port))
        self._daemon("start", self.WORKER, "--host", "127.0.0.1", "--webui-port", str(self.worker_ui_port),
                     "--cores", str(cores), "--memory", memory, "--work-dir", str(self.work_dir), self.url)
        wait_for(lambda: self.state()["aliveworkers"] >= 1, 240, "spark worker registered with the master",
                 every_s=2, log=self.logs()[-1] if self.logs() else None)

    def _daemon(self, action: str, cls: str, *args: str) -> None:
        proc = subprocess.run([str(self.daemon), action, cls, "1", *args], env=self.env, capture_output=True,
                              text=True, timeout=120)
        if proc.returncode != 0:
            pytest.fail(f"spark-daemon.sh {action} {cls} failed: {proc.stdout}{proc.stderr}")

    def logs(self) -> list[Path]:
        return sorted((self.root / "logs").glob("*.out"))

    def state(self) -> dict:
        """The master's JSON status (workers, active and completed applications)."""
        return requests.get(f"{self.ui}/json/", timeout=5).json()

    def stop(self) -> None:
        self._daemon("stop", self.WORKER)
        self._daemon("stop", self.MASTER)
