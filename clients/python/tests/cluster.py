"""Real Creek clusters for the tests: `creek dev` (three replicas, each its
own process) and separate `creek serve` processes (one per replica, so a test
can kill one). Every process is killed when its cluster stops, and dies with
the test run: an exit handler and the per-test watchdog (conftest.py) kill
whatever is left.

The binary is `$CREEK_BIN`, else `target/debug/creek` of this repository.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

import grpc

from creek._pb import creek_pb2 as pb
from creek._pb import creek_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[3]
#: Longest wait for a cluster to elect a leader.
START_TIMEOUT_S = 30.0
#: Longest wait for a process to stop after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 10.0


def creek_bin() -> Path:
    path = Path(os.environ.get("CREEK_BIN") or REPO / "target" / "debug" / "creek")
    if not path.is_file():
        raise RuntimeError(f"no creek binary at {path}: run `cargo build -p creek` or set CREEK_BIN")
    return path


# Every process started here, so a watchdog or exit handler can kill them
# all (see conftest.py). No `preexec_fn` tricks: forking a process that
# runs gRPC threads is unsafe, so children are spawned plainly.
_PROCS: "set[subprocess.Popen]" = set()


def _spawn(args: List[str], log_path: Path, env: dict) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log, env=env, stdin=subprocess.DEVNULL)
    _PROCS.add(proc)
    return proc


def kill_all() -> None:
    """SIGKILL every process still running (watchdog and exit paths)."""
    for proc in list(_PROCS):
        if proc.poll() is None:
            proc.kill()
    _PROCS.clear()


atexit.register(kill_all)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_ports(n: int) -> List[int]:
    """`n` distinct free ports (all held open until each is chosen, so none
    repeats; another process may still take one before a replica binds it,
    which `start` retries)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_run(n: int, avoid: List[int] = ()) -> int:
    """The first of `n` consecutive free ports."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - n)
        ports = range(base, base + n)
        if not any(p in avoid for p in ports) and all(_port_free(p) for p in ports):
            return base
    raise RuntimeError(f"no run of {n} free ports found")


def status(address: str, timeout: float = 1.0) -> Optional[pb.StatusReply]:
    """The replica's status, or None if it does not answer."""
    with grpc.insecure_channel(address) as channel:
        try:
            return pb_grpc.CreekStub(channel).Status(pb.StatusRequest(), timeout=timeout)
        except grpc.RpcError:
            return None


def set_faults(address: str, links: List[pb.LinkFault]) -> None:
    with grpc.insecure_channel(address) as channel:
        pb_grpc.AdminStub(channel).SetFaults(pb.SetFaultsRequest(links=links), timeout=5)


class StartFailed(RuntimeError):
    """A replica exited while the cluster started (e.g. its port was taken)."""


def start(kind, attempts: int = 3):
    """`kind()` (a cluster class), retried when a replica exits at start."""
    for attempt in range(attempts):
        try:
            return kind()
        except StartFailed:
            if attempt == attempts - 1:
                raise


class _Cluster:
    dir: Path
    clients: List[str]
    ids: List[int]

    def __len__(self) -> int:
        return len(self.clients)

    def wait_for_leader(self, within: float = START_TIMEOUT_S, live: Optional[List[int]] = None) -> int:
        """Index of the leader, once every live replica answers and knows it."""
        live = list(range(len(self))) if live is None else live
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.exited():
                raise StartFailed(f"a replica exited while starting; logs in {self.dir}:\n{self.log_tail(5)}")
            replies = [status(self.clients[i]) for i in live]
            if all(r is not None for r in replies):
                leaders = {r.leader for r in replies}
                roles = [r.role for r in replies]
                if len(leaders) == 1 and 0 not in leaders and "leader" in roles:
                    return live[roles.index("leader")]
            time.sleep(0.05)
        raise RuntimeError(f"no leader within {within} s; logs in {self.dir}")

    def exited(self) -> bool:
        """Whether a process that should be running has exited."""
        raise NotImplementedError

    def isolate(self, i: int, partitioned: bool = True) -> None:
        """Cut replica `i` off from every other replica (or heal it)."""
        links = [
            pb.LinkFault(peer=self.ids[j], partitioned=True)
            for j in range(len(self))
            if j != i and partitioned
        ]
        set_faults(self.clients[i], links)

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for log in sorted(self.dir.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)


class DevCluster(_Cluster):
    """`creek dev`: three replicas, each its own process; with shards, each
    shard's replicas and then the directory group's three."""

    def __init__(self, replicas: int = 3, shards: int = 1):
        self.dir = Path(tempfile.mkdtemp(prefix="creek-py-dev-"))
        in_shards = replicas * shards
        n = in_shards + (3 if shards > 1 else 0)
        client_port = free_port_run(n)
        peer_port = free_port_run(n, avoid=list(range(client_port, client_port + n)))
        self.clients = [f"127.0.0.1:{client_port + i}" for i in range(n)]
        self.ids = list(range(1, n + 1))
        self.proc = _spawn(
            [
                str(creek_bin()), "dev",
                "--replicas", str(replicas),
                "--shards", str(shards),
                "--data-dir", str(self.dir / "data"),
                "--client-port", str(client_port),
                "--peer-port", str(peer_port),
                "--metrics-port", "0",
                "--allow-fault-injection",
            ],
            self.dir / "dev.log",
            {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        try:
            # Each shard is a group of its own, with its own leader, and so
            # is the directory.
            for k in range(shards):
                self.wait_for_leader(live=list(range(k * replicas, (k + 1) * replicas)))
            if n > in_shards:
                self.wait_for_leader(live=list(range(in_shards, n)))
        except StartFailed:
            self.stop()
            raise
        except BaseException:
            self.stop(keep_logs=True)
            raise

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def stop(self, keep_logs: bool = False) -> None:
        _stop(self.proc)
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)


class ServeCluster(_Cluster):
    """One `creek serve` process per replica, with fault injection on."""

    def __init__(self, replicas: int = 3, settings: Sequence[str] = ()):
        # Extra `name = value` lines for every replica's configuration.
        self.settings = list(settings)
        self.dir = Path(tempfile.mkdtemp(prefix="creek-py-serve-"))
        ports = free_ports(2 * replicas)
        self.clients = [f"127.0.0.1:{p}" for p in ports[:replicas]]
        self.peers = [f"127.0.0.1:{p}" for p in ports[replicas:]]
        self.ids = list(range(1, replicas + 1))
        self.procs: List[Optional[subprocess.Popen]] = [None] * replicas
        for i in range(replicas):
            self._write_config(i)
            self._spawn(i)
        try:
            self.wait_for_leader()
        except StartFailed:
            self.stop()
            raise
        except BaseException:
            self.stop(keep_logs=True)
            raise

    def _write_config(self, i: int) -> None:
        toml = [
            f"id = {self.ids[i]}",
            f'data_dir = "{self.dir / f"r{self.ids[i]}"}"',
            "allow_fault_injection = true",
            "workers = 1",
            *self.settings,
        ]
        for j in range(len(self)):
            toml += [
                "[[replicas]]",
                f"id = {self.ids[j]}",
                f'peer_addr = "{self.peers[j]}"',
                f'client_addr = "{self.clients[j]}"',
            ]
        (self.dir / f"r{self.ids[i]}.toml").write_text("\n".join(toml) + "\n")

    def _spawn(self, i: int) -> None:
        self.procs[i] = _spawn(
            [str(creek_bin()), "serve", "--config", str(self.dir / f"r{self.ids[i]}.toml")],
            self.dir / f"r{self.ids[i]}.log",
            {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")},
        )

    def kill(self, i: int) -> None:
        """SIGKILL replica `i`."""
        proc, self.procs[i] = self.procs[i], None
        if proc is not None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
            _PROCS.discard(proc)

    def exited(self) -> bool:
        return any(p is not None and p.poll() is not None for p in self.procs)

    def live(self) -> List[int]:
        return [i for i, p in enumerate(self.procs) if p is not None]

    def stop(self, keep_logs: bool = False) -> None:
        for i, proc in enumerate(self.procs):
            if proc is not None:
                _stop(proc)
                self.procs[i] = None
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    _PROCS.discard(proc)
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
