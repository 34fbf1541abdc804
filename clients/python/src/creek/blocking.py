"""`BlockingClient`: the twin of `Client` for scripts without asyncio.

It runs a `Client` on a private event loop in a daemon thread. Its calls
return the same `Correctable`s; read them with the `*_blocking` methods
(`final_blocking()`, `preliminary_blocking()`, `views_blocking()`) or with
callbacks. Speculation functions that are plain functions run in a worker
thread, so they may block (e.g. on another call's `final_blocking()`).
"""

from __future__ import annotations

import asyncio
import threading
from typing import List, Optional, Sequence, Union

from ._pb import creek_pb2 as pb
from .builtins import Builtins
from .cache import CACHE_BYTES_MAX_DEFAULT, CachedWrite
from .client import DEFAULT, Client
from .correctable import Correctable
from .procedures import DEFINITION_TIMEOUT_S, Keyspace, KeyspaceLabel, ProcedureSource, Registered
from .views import BOTH, STRONG, LevelsArg

#: Longest wait for the private loop to run a short step (creating a call).
STEP_TIMEOUT_S = 30.0


class BlockingClient(Builtins):
    """A client of a Creek cluster for blocking code. Same arguments as
    `Client`; close it (or use `with`) to stop its thread.

        with creek.BlockingClient(["127.0.0.1:7001"]) as c:
            print(c.kv_incr("visits", 1).final_blocking().value)
    """

    def __init__(
        self,
        addresses: Union[str, Sequence[str]],
        *,
        timeout: Optional[float] = None,
        client_id: Optional[int] = None,
        ca: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        token: Optional[str] = None,
        cache: bool = True,
        cache_bytes_max: int = CACHE_BYTES_MAX_DEFAULT,
    ):
        self._client = Client(
            addresses,
            timeout=timeout,
            client_id=client_id,
            ca=ca,
            cert=cert,
            key=key,
            token=token,
            cache=cache,
            cache_bytes_max=cache_bytes_max,
        )
        self._client._fns_in_thread = True
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="creek-client", daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def client_id(self) -> int:
        return self._client.client_id

    @property
    def replica_address(self) -> str:
        """The replica calls currently go to."""
        return self._client.replica_address

    @property
    def read_time(self) -> int:
        """`Client.read_time`."""
        return self._client.read_time

    @property
    def dep_time(self) -> int:
        """`Client.dep_time`."""
        return self._client.dep_time

    def cache_entries(self) -> List[CachedWrite]:
        """`Client.cache_entries`."""
        return self._step(self._client.cache_entries)

    def invoke(
        self,
        procedure: str,
        *args,
        levels: LevelsArg = BOTH,
        weak_final: bool = False,
        timeout=DEFAULT,
        durability: str = "none",
        revision: Optional[int] = None,
    ) -> Correctable:
        """`Client.invoke`: returns the Correctable once the call started."""
        return self._step(
            lambda: self._client.invoke(
                procedure,
                *args,
                levels=levels,
                weak_final=weak_final,
                timeout=timeout,
                durability=durability,
                revision=revision,
            )
        )

    def invoke_weak(self, procedure: str, *args, weak_final: bool = False, timeout=DEFAULT) -> Correctable:
        return self._client_call(self._client.invoke_weak, procedure, *args, weak_final=weak_final, timeout=timeout)

    def invoke_strong(self, procedure: str, *args, timeout=DEFAULT) -> Correctable:
        return self._client_call(self._client.invoke_strong, procedure, *args, timeout=timeout)

    def call(self, procedure: str, *args, levels: LevelsArg = STRONG, timeout=DEFAULT):
        """Invoke and return the closing view's result (by default a strong
        op's final view); `ProcedureAborted` if it aborted."""
        return self.invoke(procedure, *args, levels=levels, timeout=timeout).final_blocking().result()

    def status(self, timeout: Optional[float] = 5.0) -> pb.StatusReply:
        """`Client.status`."""
        return self._await(self._client.status(timeout=timeout))

    def members(self, timeout: Optional[float] = 5.0) -> pb.MembersReply:
        """`Client.members`."""
        return self._await(self._client.members(timeout=timeout))

    def add_replica(self, replica: int, peer_addr: str, client_addr: str) -> pb.MembersReply:
        """`Client.add_replica`."""
        return self._await(self._client.add_replica(replica, peer_addr, client_addr))

    def remove_replica(self, replica: int) -> pb.MembersReply:
        """`Client.remove_replica`."""
        return self._await(self._client.remove_replica(replica))

    # ------------------------------------------------- user procedures

    def procedures(self, timeout: Optional[float] = 5.0) -> List[pb.ProcedureInfo]:
        """`Client.procedures`: the built-ins and the user procedures, with
        their signatures (user ones with version, `writes_strong` and
        keyspace labels)."""
        return self._await(self._client.procedures(timeout=timeout))

    def register_procedures(
        self, source: Union[str, bytes], *, timeout: Optional[float] = DEFINITION_TIMEOUT_S
    ) -> List[Registered]:
        """`Client.register_procedures`: each procedure's name and version;
        `NotRegistered` with the compiler's `line L:C: message` lines if the
        file does not compile (nothing changed)."""
        return self._await(self._client.register_procedures(source, timeout=timeout))

    def drop_procedure(self, name: Union[str, bytes], *, timeout: Optional[float] = DEFINITION_TIMEOUT_S) -> None:
        """`Client.drop_procedure`: `Refused` if there is no such user
        procedure (nothing changed)."""
        return self._await(self._client.drop_procedure(name, timeout=timeout))

    def show_procedure(
        self, name: Union[str, bytes], *, timeout: Optional[float] = DEFINITION_TIMEOUT_S
    ) -> Optional[ProcedureSource]:
        """`Client.show_procedure`: its version and source, or None."""
        return self._await(self._client.show_procedure(name, timeout=timeout))

    def create_keyspace(
        self,
        name: Union[str, bytes],
        label: Union[KeyspaceLabel, str],
        *,
        timeout: Optional[float] = DEFINITION_TIMEOUT_S,
    ) -> None:
        """`Client.create_keyspace`: `Refused` if it exists with the other
        label or the name is not a name."""
        return self._await(self._client.create_keyspace(name, label, timeout=timeout))

    def list_keyspaces(self, *, timeout: Optional[float] = DEFINITION_TIMEOUT_S) -> List[Keyspace]:
        """`Client.list_keyspaces`: every keyspace with its label."""
        return self._await(self._client.list_keyspaces(timeout=timeout))

    def close(self) -> None:
        """Close the connections and stop the thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._await(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=STEP_TIMEOUT_S)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> "BlockingClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------- internals

    def _client_call(self, method, *args, **kwargs) -> Correctable:
        return self._step(lambda: method(*args, **kwargs))

    def _step(self, fn):
        """Run `fn()` in the loop's thread (the async client's calls must be
        made there) and return its result or raise its exception."""

        async def run():
            return fn()

        return self._await(run())

    def _await(self, coro):
        if self._closed and not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
