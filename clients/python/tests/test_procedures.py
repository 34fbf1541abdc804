"""User procedures from Python against a real `creek dev` cluster
(docs/procedures.md): keyspaces created, a source file registered, its
procedures listed with signatures and labels and called by name; a file the
compiler rejects and a weak call of a strong-writing procedure fail with
clear, typed errors and change nothing; re-registration and drop. The
cluster is shared, so each test uses its own groups, keyspaces and names."""

from __future__ import annotations

import uuid

import pytest

import creek
from cluster import REPO
from conftest import run

T = 20.0  # seconds: bound of every call here
EXAMPLES = REPO / "examples" / "procedures"


def unique(name: str) -> str:
    return f"{name}_{uuid.uuid4().hex[:8]}"


def test_message_groups_register_call_and_refuse(dev):
    groups = (EXAMPLES / "message_groups.creek").read_text()
    unsafe = (EXAMPLES / "unsafe_contest.creek").read_text()
    group = unique("g")

    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            # The keyspaces the file declares, by hand (a no-op if they exist
            # with these labels).
            await c.create_keyspace("members", creek.KeyspaceLabel.STRONG)
            await c.create_keyspace("inboxes", "weak")
            keyspaces = await c.list_keyspaces()
            assert creek.Keyspace("members", creek.KeyspaceLabel.STRONG) in keyspaces
            assert creek.Keyspace("inboxes", creek.KeyspaceLabel.WEAK) in keyspaces
            with pytest.raises(creek.Refused, match="keyspace members already exists as strong, not weak"):
                await c.create_keyspace("members", creek.KeyspaceLabel.WEAK)
            with pytest.raises(ValueError, match="'strong' or 'weak'"):
                await c.create_keyspace("members", "eventual")

            before = {p.name: p.version for p in await c.procedures() if p.user}
            registered = await c.register_procedures(groups)
            assert [r.name for r in registered] == ["join", "post", "inbox"]
            for r in registered:
                assert isinstance(r, creek.Registered)
                assert r.version == before.get(r.name, 0) + 1

            # Listed beside the built-ins, with signature, version and labels.
            listed = {p.name: p for p in await c.procedures()}
            assert not listed["kv.incr"].user
            join = listed["join"]
            assert join.user and join.writes_strong and not join.read_only
            assert [(q.name, q.type) for q in join.params] == [("group", "bytes"), ("user", "bytes")]
            assert [(k.name, k.label) for k in join.keyspaces] == [("members", "strong")]
            post = listed["post"]
            assert post.returns == "int" and not post.writes_strong
            assert sorted((k.name, k.label) for k in post.keyspaces) == [
                ("inboxes", "weak"),
                ("members", "strong"),
            ]
            assert listed["inbox"].read_only
            shown = await c.show_procedure("post")
            assert shown == creek.ProcedureSource("post", registered[1].version, groups)

            # Calls by name: join strong, post and inbox at any level.
            ann, bob = unique("ann"), unique("bob")
            assert await c.call("join", group, ann) is None
            assert await c.call("join", group, bob) is None
            assert (await c.invoke("post", group, "hello").final()).value == 2
            assert await c.call("inbox", bob) == [b"hello"]
            view = await c.invoke("inbox", ann, levels=creek.WEAK, weak_final=True).final()
            assert view.value == [b"hello"]

            # A weak call of `join`, which writes the strong keyspace
            # `members`, is refused before it becomes an op.
            with pytest.raises(
                creek.InvalidArgument,
                match="join writes strong keyspace members: invoke it at the strong level",
            ):
                await c.invoke("join", group, unique("eve"), levels=creek.WEAK).final()
            assert await c.call("post", group, "again") == 2

            # A file the compiler rejects: each flow with its line:column;
            # nothing registered, no keyspace created.
            with pytest.raises(creek.NotRegistered) as rejected:
                await c.register_procedures(unsafe)
            message = rejected.value.message
            assert "line 13:9: write to winner (strong) is controlled by weak data" in message
            assert "line 15:9: write to winner (strong) is controlled by weak data" in message
            assert isinstance(rejected.value, creek.ProcedureAborted)
            assert not isinstance(rejected.value, creek.CreekError)
            assert "deliver" not in {p.name for p in await c.procedures()}
            assert await c.list_keyspaces() == keyspaces

    run(body())


def test_the_blocking_client_registers_again_and_drops(dev):
    notes, note, read = unique("notes"), unique("note"), unique("read")

    def source(word: str) -> str:
        return (
            f"keyspace {notes}: weak\n"
            f"# Store v under k; says which version ran.\n"
            f"proc {note}(k: bytes, v: bytes) -> bytes {{\n"
            f"    put({notes}, k, v)\n"
            f'    return "{word}"\n'
            f"}}\n"
            f"proc {read}(k: bytes) -> any {{ return get({notes}, k) }}\n"
        )

    with creek.BlockingClient(dev.clients, timeout=T) as c:
        first = c.register_procedures(source("v1"))
        assert first == [creek.Registered(note, 1), creek.Registered(read, 1)]
        assert creek.Keyspace(notes, creek.KeyspaceLabel.WEAK) in c.list_keyspaces()
        assert c.call(note, "k", "one") == b"v1"
        # Weak data only: any level will do.
        assert c.invoke(note, "k", "two", levels="weak").final_blocking().value == b"v1"

        # A new version: later calls run it, show gives its source.
        assert c.register_procedures(source("v2")) == [creek.Registered(note, 2), creek.Registered(read, 2)]
        assert c.call(note, "k", "three") == b"v2"
        assert c.call(read, "k") == b"three"
        shown = c.show_procedure(note)
        assert shown.version == 2 and 'return "v2"' in shown.source
        listed = {p.name: p for p in c.procedures()}
        assert listed[note].version == 2 and listed[note].summary == "Store v under k; says which version ran."

        # Dropped: unknown afterwards; dropping it again changes nothing.
        c.drop_procedure(note)
        with pytest.raises(creek.InvalidArgument, match=f'unknown procedure "{note}"'):
            c.call(note, "k", "four")
        assert c.show_procedure(note) is None
        before = [(p.name, p.version) for p in c.procedures()]
        with pytest.raises(creek.Refused, match=f'no user procedure "{note}" to drop'):
            c.drop_procedure(note)
        assert [(p.name, p.version) for p in c.procedures()] == before
        # Its keyspace and data stay.
        assert c.call(read, "k") == b"three"
        with pytest.raises(creek.Refused, match=f"keyspace {notes} already exists as weak"):
            c.create_keyspace(notes, creek.KeyspaceLabel.STRONG)
