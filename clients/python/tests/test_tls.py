"""The client against `creek dev --secure`: TLS with the certificates it
makes in its data directory, and users checked with the root token it
makes there (docs/security.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import creek
from cluster import _spawn, creek_bin, free_port_run


def test_a_tls_cluster_is_reached_with_ca_cert_and_key():
    d = Path(tempfile.mkdtemp(prefix="creek-py-tls-"))
    client_port = free_port_run(3)
    peer_port = free_port_run(3, avoid=list(range(client_port, client_port + 3)))
    proc = _spawn(
        [
            str(creek_bin()), "dev", "--secure",
            "--data-dir", str(d / "data"),
            "--client-port", str(client_port),
            "--peer-port", str(peer_port),
            "--metrics-port", "0",
        ],
        d / "dev.log",
        None,
    )
    certs = d / "data" / "certs"
    addrs = [f"127.0.0.1:{client_port + i}" for i in range(3)]
    tls = dict(ca=str(certs / "ca.crt"), cert=str(certs / "client-root.crt"), key=str(certs / "client-root.key"))
    try:
        deadline = time.monotonic() + 30
        answered = None
        while time.monotonic() < deadline and answered is None:
            if proc.poll() is not None:
                raise RuntimeError((d / "dev.log").read_text(errors="replace"))
            if (certs / "client-root.key").exists() and (certs / "root.token").exists():
                root = (certs / "root.token").read_text().strip()
                with creek.BlockingClient(addrs, timeout=5, token=root, **tls) as c:
                    try:
                        if c.status(timeout=1).role:
                            answered = c.kv_put("py-tls", "yes").final_blocking()
                    except creek.CreekError:
                        pass
            time.sleep(0.2)
        assert answered is not None, (d / "dev.log").read_text(errors="replace")
        with creek.BlockingClient(addrs, timeout=5, token=root, **tls) as c:
            assert c.kv_get("py-tls").final_blocking().value == b"yes"
        # Without a token, or with a mistyped one: refused.
        with creek.BlockingClient(addrs, timeout=5, **tls) as c:
            # (The client `root`'s certificate names no user.)
            with pytest.raises(creek.Unauthenticated, match="send a token"):
                c.kv_get("py-tls").final_blocking()
        with creek.BlockingClient(addrs, timeout=5, token=root[:-1] + ("1" if root.endswith("0") else "0"), **tls) as c:
            with pytest.raises(creek.Unauthenticated):
                c.kv_get("py-tls").final_blocking()
        # A read-only user made with the CLI reads, and cannot write.
        env = dict(
            os.environ,
            CREEK_ENDPOINTS=",".join(addrs),
            CREEK_CA=tls["ca"],
            CREEK_CERT=tls["cert"],
            CREEK_KEY=tls["key"],
            CREEK_TOKEN=root,
        )
        made = subprocess.run(
            [str(creek_bin()), "user", "add", "pyreader", "--role", "readonly", "-o", "value"],
            env=env, capture_output=True, text=True, timeout=30,
        )
        assert made.returncode == 0, made.stderr
        reader = made.stdout.strip()
        with creek.BlockingClient(addrs, timeout=5, token=reader, **tls) as c:
            assert c.kv_get("py-tls").final_blocking().value == b"yes"
            with pytest.raises(creek.PermissionDenied, match="user pyreader lacks write on keyspace default"):
                c.kv_put("py-tls", "no").final_blocking()
        with creek.BlockingClient(addrs, timeout=5, token=root, **tls) as c:
            assert c.kv_get("py-tls").final_blocking().value == b"yes"
        # Plaintext, or TLS without a client certificate: refused.
        with creek.BlockingClient(addrs[:1], timeout=2) as c:
            with pytest.raises(creek.CreekError):
                c.status(timeout=2)
        with creek.BlockingClient(addrs[:1], timeout=2, ca=tls["ca"]) as c:
            with pytest.raises(creek.CreekError):
                c.status(timeout=2)
        with pytest.raises(ValueError, match="without a CA"):
            creek.BlockingClient(addrs, cert=tls["cert"], key=tls["key"])
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
        shutil.rmtree(d, ignore_errors=True)
