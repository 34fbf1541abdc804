"""Fixtures: real clusters (see cluster.py), throwaway Redis and PostgreSQL
servers (stores.py) and a bounded `run` for async test bodies. Every test is bounded: a watchdog dumps every thread's stack,
kills the `creek` processes and ends the run if one hangs. SIGTERM to the
run kills them too."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import cluster  # noqa: E402
import stores  # noqa: E402
from cluster import DevCluster, ServeCluster, start  # noqa: E402

#: Hard limit for one test, fixtures included.
TEST_TIMEOUT_S = 180


def run(coro, timeout: float = 60.0):
    """Run an async test body on a fresh event loop, within `timeout` s."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


_watchdog = None


def _hung(name: str) -> None:
    sys.stderr.write(f"\n{name} ran longer than {TEST_TIMEOUT_S} s: stacks, then the run ends\n")
    faulthandler.dump_traceback(all_threads=True)
    cluster.kill_all()
    os._exit(3)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    global _watchdog
    _watchdog = threading.Timer(TEST_TIMEOUT_S, _hung, args=(item.nodeid,))
    _watchdog.daemon = True
    _watchdog.start()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if _watchdog is not None:
        _watchdog.cancel()


def pytest_configure(config):
    # SIGTERM ends the run like Ctrl-C: fixtures stop their clusters.
    signal.signal(signal.SIGTERM, signal.default_int_handler)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.failed_call = rep.failed


@pytest.fixture(scope="session")
def dev():
    """A `creek dev` cluster shared by the tests that do not inject faults
    (each uses its own keys)."""
    cluster = start(DevCluster)
    yield cluster
    cluster.stop()


@pytest.fixture
def serve(request):
    """Three `creek serve` processes, for tests that partition or kill."""
    cluster = start(ServeCluster)
    yield cluster
    failed = getattr(request.node, "failed_call", False)
    if failed:
        print(cluster.log_tail())
    cluster.stop(keep_logs=failed)


def _missing(why: str) -> None:
    """Skip, with why; fail instead where the stores are required (CI)."""
    if os.environ.get("CREEK_TEST_STORES") == "required":
        pytest.fail(f"{why} (CREEK_TEST_STORES=required)", pytrace=False)
    pytest.skip(why)


def _needs_module(name: str) -> None:
    try:
        __import__(name)
    except ImportError:
        _missing(f"no Python module {name}: pip install './clients/python[redis,postgres]'")


def _start_store(module: str, find, server_class):
    """A server of `server_class`, once its Python client `module` and
    its program (`find()`) are found; a skip (or failure) saying which is
    missing otherwise."""
    _needs_module(module)
    found = find()
    if isinstance(found, str):
        _missing(found)
    return server_class(found)


@pytest.fixture(scope="session")
def redis_server():
    """A redis-server on a free loopback port, for the session."""
    server = _start_store("redis", stores.find_redis, stores.RedisServer)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server on a free loopback port, for the session."""
    server = _start_store("psycopg", stores.find_pg_bin, stores.PostgresServer)
    yield server
    server.stop()
