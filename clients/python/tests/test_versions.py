"""Versions and revisions from Python against a real `creek dev` cluster
(docs/api.md, "Versions and revisions"): a key's record with `kv_get_meta`,
compares on it in `Txn.when_field`, reads at a past revision, and
revisions out of range or bad arguments refused by name."""

from __future__ import annotations

import uuid

import pytest

import creek
from conftest import run

T = 20.0


def key(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_a_key_carries_its_version_and_is_read_at_a_past_revision(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("ver")
            assert creek.KeyMeta.of(await c.kv_get_meta(k, levels=creek.STRONG).final()) is None
            for v in ("one", "two"):
                await c.kv_put(k, v, levels=creek.STRONG).final()
            meta = creek.KeyMeta.of(await c.kv_get_meta(k, levels=creek.STRONG).final())
            assert (meta.value, meta.version, meta.lease) == (b"two", 2, 0)
            assert 1 <= meta.create_revision < meta.mod_revision

            # The key as it was right after its creation, and after its
            # last write.
            first = await c.invoke(
                "kv.get", k, levels=creek.SNAPSHOT, revision=meta.create_revision
            ).final()
            assert first.value == b"one"
            last = await c.invoke(
                "kv.get", k, levels=creek.SNAPSHOT, revision=meta.mod_revision
            ).final()
            assert last.value == b"two"
            with pytest.raises(creek.OutOfRange, match="out of range"):
                await c.invoke("kv.get", k, levels=creek.SNAPSHOT, revision=10**12).final()
            with pytest.raises(ValueError, match="snapshot read"):
                c.invoke("kv.get", k, levels=creek.STRONG, revision=1)
            with pytest.raises(ValueError, match="at least 1"):
                c.invoke("kv.get", k, levels=creek.SNAPSHOT, revision=0)

            # Compare-and-swap on the mod revision.
            stale = (
                creek.Txn()
                .when_field(k, "mod", "=", meta.create_revision)
                .then(creek.TxnOp.put(k, "lost"))
            )
            answer = creek.TxnAnswer.of(await c.kv_txn(stale, levels=creek.STRONG).final())
            assert not answer.succeeded
            fresh = (
                creek.Txn()
                .when_field(k, "mod", "=", meta.mod_revision)
                .when_field(k, "version", ">", 1)
                .when_field(key("absent"), "create", "=", 0)
                .then(creek.TxnOp.put(k, "three"))
            )
            answer = creek.TxnAnswer.of(await c.kv_txn(fresh, levels=creek.STRONG).final())
            assert answer.succeeded
            after = creek.KeyMeta.of(await c.kv_get_meta(k, levels=creek.STRONG).final())
            assert (after.value, after.version) == (b"three", 3)
            with pytest.raises(ValueError, match="field"):
                creek.Txn().when_field(k, "size", "=", 1)
            with pytest.raises(TypeError, match="int"):
                creek.Txn().when_field(k, "mod", "=", "5")

    run(body(), timeout=60)
