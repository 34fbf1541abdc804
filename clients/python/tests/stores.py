"""Throwaway Redis and PostgreSQL servers for the binding tests: each on a
free loopback port, its files in a temporary directory, started within
START_TIMEOUT_S and stopped (then the directory removed) by its fixture.
Like the Creek clusters, they are registered with `cluster.kill_all`, so the
watchdog and the exit handler kill them too.

The programs are `$REDIS_SERVER` (else `redis-server` on the PATH) and
`$PG_BIN` (else the newest `/usr/lib/postgresql/*/bin`, Debian's layout, or
`pg_config --bindir`). A missing one makes `find_*` return a reason, which
the fixtures turn into a skip (or a failure where CREEK_TEST_STORES=required,
as in CI).

PostgreSQL refuses to run as root: as root, its programs run as the user
`postgres` through `setpriv`, and the directory is handed to that user (as
`creek bench peers` does, crates/creek/src/bench_peers/postgres.rs).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple, Union

from cluster import STOP_TIMEOUT_S, _PROCS, _spawn, free_ports

#: Longest wait for a server to accept connections (initdb included).
START_TIMEOUT_S = 30.0
#: The role the tests connect as (initdb's superuser, trust auth).
PG_USER = "creek"


def find_redis() -> Union[Path, str]:
    """The redis-server program, or why there is none."""
    path = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if path and Path(path).is_file():
        return Path(path)
    return "no redis-server (apt-get install redis-server, or set REDIS_SERVER)"


def find_pg_bin() -> Union[Path, str]:
    """PostgreSQL's bin directory (with initdb and postgres), or why there is none."""
    candidates = [os.environ.get("PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10)
        candidates.append(out.stdout.strip())
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "postgres").is_file():
            return Path(c)
    return "no PostgreSQL server (apt-get install postgresql, or set PG_BIN to the directory of initdb)"


def _version(bin_dir: str) -> Tuple[int, ...]:
    parts = Path(bin_dir).parent.name.split(".")
    return tuple(int(p) for p in parts if p.isdigit())


def _run_as_postgres() -> Optional[str]:
    """Whom PostgreSQL runs as: None (ourselves), or "postgres" when we
    are root. `RuntimeError` if root has no such user."""
    if os.geteuid() != 0:
        return None
    if subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
        raise RuntimeError("PostgreSQL refuses to run as root and there is no user 'postgres' to run it as")
    return "postgres"


def _as(user: Optional[str], argv: List[str]) -> List[str]:
    if user is None:
        return argv
    return ["setpriv", "--reuid", user, "--regid", user, "--init-groups", "--", *argv]


class _Server:
    """One server process in its own temporary directory, started by
    `_launch` (which sets `port` and `proc`), stopped by `stop`."""

    name: str
    port: int
    proc: Optional[subprocess.Popen] = None
    #: The signal that stops it quickly.
    stop_signal: int = signal.SIGTERM

    def __init__(self, program: Path):
        self.dir = Path(tempfile.mkdtemp(prefix=f"creek-py-{self.name}-"))
        try:
            self._launch(program)
        except BaseException:
            self.stop()
            raise

    def _launch(self, program: Path) -> None:
        raise NotImplementedError

    def _spawn(self, argv: List[str], ready) -> None:
        """Start `argv`, logging to NAME.log, and wait until `ready()`."""
        self.proc = _spawn(argv, self.dir / f"{self.name}.log", dict(os.environ))
        self._wait_ready(ready)

    def _wait_ready(self, ready) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            if ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        log = self.dir / f"{self.name}.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            _PROCS.discard(proc)
            if proc.poll() is None:
                proc.send_signal(self.stop_signal)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=STOP_TIMEOUT_S)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisServer(_Server):
    """redis-server without persistence."""

    name = "redis"

    def _launch(self, program: Path) -> None:
        self.port = free_ports(1)[0]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._spawn(
            [str(program), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            self._pings,
        )

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class PostgresServer(_Server):
    """A PostgreSQL cluster made by initdb (trust auth, no fsync: the data
    is thrown away)."""

    name = "postgres"
    # Fast shutdown: does not wait for clients to disconnect.
    stop_signal = signal.SIGINT

    def _launch(self, bin_dir: Path) -> None:
        user = _run_as_postgres()
        if user is not None:
            shutil.chown(self.dir, user, user)
        data = self.dir / "data"
        initdb = _as(user, [str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER, "--auth=trust",
                            "--no-locale", "-E", "UTF8", "--no-sync"])
        out = subprocess.run(initdb, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed ({out.returncode}):\n{out.stdout}{out.stderr}")
        self.port = free_ports(1)[0]
        self.dsn = f"host=127.0.0.1 port={self.port} user={PG_USER} dbname=postgres"
        # The log is written by us, not by the server's user.
        self._spawn(
            _as(user, [str(bin_dir / "postgres"), "-D", str(data), "-k", str(self.dir),
                       "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                       "-c", "fsync=off", "-c", "synchronous_commit=off",
                       "-c", "full_page_writes=off", "-c", "max_connections=20"]),
            self._accepts,
        )

    def _accepts(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.dsn, connect_timeout=1).close()
            return True
        except psycopg.OperationalError:
            return False
