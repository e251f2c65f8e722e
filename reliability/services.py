"""Private PostgreSQL and Redis servers for a drill: own ports, own directories, own processes.

The drill restarts, crashes and stops these at will, so it never touches a shared server.
Both listen on 127.0.0.1 only. PostgreSQL refuses to run as root; as root the drill runs its
binaries as the ``postgres`` OS user, in a directory that user owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import redis
from psycopg import sql

from harness.servers import free_port

PG_BIN_CANDIDATES = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin")
PG_OS_USER = "postgres"
START_TIMEOUT_SECONDS = 60


class ServiceError(RuntimeError):
    """A private server could not be started or stopped."""


def find_pg_bin(explicit: str | None = None) -> Path | None:
    """The directory of initdb/pg_ctl: given, else the Debian locations, else on PATH."""
    candidates = [explicit] if explicit else [*PG_BIN_CANDIDATES]
    for candidate in candidates:
        if candidate and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path and not explicit else None


def missing_tools(pg_bin: Path | None) -> list[str]:
    """What this machine lacks to run a drill (empty: nothing)."""
    problems = []
    if pg_bin is None:
        problems.append("PostgreSQL server binaries (initdb, pg_ctl) not found")
    if shutil.which("redis-server") is None:
        problems.append("redis-server not found")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(PG_OS_USER)
        except KeyError:
            problems.append(f"running as root but there is no {PG_OS_USER!r} OS user")
    return problems


def _run(command: list[str], *, timeout: float = START_TIMEOUT_SECONDS) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise ServiceError(f"{' '.join(command)} failed: {result.stdout}{result.stderr}")
    return result.stdout


class PrivatePostgres:
    """A PostgreSQL cluster of the drill's own, in ``root``, on a free loopback port."""

    def __init__(self, root: Path, pg_bin: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.bin = pg_bin
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        self.restarts = 0

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """initdb (first time only), then start and wait until it accepts connections."""
        if not self.data.exists():
            self._prepare_root()
            self._pg("initdb", "-U", "postgres", "--auth=trust", "-E", "UTF8", "-D", str(self.data))
        self._pg_ctl("start", "-l", str(self.log), "-o", self._options())
        self._wait_ready()

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart``: every connection is cut; ``immediate`` skips the shutdown
        checkpoint, so the server recovers from its WAL like after a crash."""
        self._pg_ctl("restart", "-m", mode, "-l", str(self.log), "-o", self._options())
        self._wait_ready()
        self.restarts += 1

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop", "-m", mode)

    def cleanup_command(self) -> list[str]:
        """How the watchdog stops this cluster if the drill itself dies."""
        return self._command("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")

    # --- use ---------------------------------------------------------------------------------

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create ``name`` (a copy of ``template`` if given); returns its SQLAlchemy URL."""
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        with psycopg.connect(self._libpq("postgres"), autocommit=True) as connection:
            connection.execute(statement)
        return self.url(name)

    def accepts_connections(self) -> bool:
        try:
            with psycopg.connect(self._libpq("postgres"), connect_timeout=2) as connection:
                connection.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    # --- internals ---------------------------------------------------------------------------

    def _libpq(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _options(self) -> str:
        return f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"

    def _prepare_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._as_postgres:
            user = pwd.getpwnam(PG_OS_USER)
            # The drill's own temp dir (root's, mode 0700) must be traversable by postgres.
            parent = self.root.parent
            parent.chmod(parent.stat().st_mode | 0o711)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.root.chmod(0o700)

    def _command(self, program: str, *args: str) -> list[str]:
        command = [str(self.bin / program), *args]
        return ["runuser", "-u", PG_OS_USER, "--", *command] if self._as_postgres else command

    def _pg(self, program: str, *args: str) -> str:
        return _run(self._command(program, *args))

    def _pg_ctl(self, action: str, *args: str) -> str:
        timeout = str(START_TIMEOUT_SECONDS)
        return self._pg("pg_ctl", action, "-D", str(self.data), "-w", "-t", timeout, *args)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self.accepts_connections():
            if time.monotonic() > deadline:
                raise ServiceError(f"PostgreSQL on port {self.port} is not ready; see {self.log}")
            time.sleep(0.1)


class PrivateRedis:
    """A Redis server of the drill's own, persisting to an append-only file in ``root``
    (as compose.yaml configures production Redis), so a restart keeps queued messages."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        command = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--dir",
            str(self.root),
            "--logfile",
            str(self.root / "redis.log"),
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self.accepts_connections():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"Redis on port {self.port} did not start; see {self.root}")
            time.sleep(0.05)

    def stop(self) -> None:
        """A graceful shutdown (SIGTERM, as ``docker stop``): the append-only file is synced."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """A crash (SIGKILL): writes of the last second may be lost (appendfsync everysec)."""
        self._end(signal.SIGKILL)

    def restart(self, *, crash: bool = False) -> None:
        self.kill() if crash else self.stop()
        self.start()
        self.restarts += 1

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2)

    def accepts_connections(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _end(self, signum: int) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signum)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
