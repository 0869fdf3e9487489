"""`dledger cluster --tls` and the client commands with `--tls-*` options (and the
DLEDGER_TLS_* environment) as a user runs them: real processes on loopback; and the
plaintext rule of `dledger server` / `dledger cluster` off loopback."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import eventually, free_ports
from tests.e2e.test_cli import DLEDGER, Running, consecutive_free_ports

pytestmark = [pytest.mark.security, pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def commands() -> Iterator[list[Running]]:
    """`dledger cluster` commands, stopped with Ctrl-C at the end (their members run in
    sessions of their own: killing the supervisor's group would leave them running)."""
    started: list[Running] = []
    yield started
    for cmd in started:
        if cmd.process.poll() is None:
            os.killpg(cmd.process.pid, signal.SIGINT)
            try:
                cmd.process.wait(60)
            except subprocess.TimeoutExpired:
                cmd.kill_group()


def dledger(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DLEDGER_TLS_")}
    return subprocess.run([*DLEDGER, *args], capture_output=True, text=True, timeout=120, env={**clean, **(env or {})})


def tls_args(certs: Path, stem: str) -> list[str]:
    cert, key, ca = (str(certs / name) for name in (f"{stem}.crt", f"{stem}.key", "ca.crt"))
    return ["--tls-cert", cert, "--tls-key", key, "--tls-ca", ca]


def test_cluster_tls_in_one_command(tmp_path: Path, commands: list[Running]) -> None:
    base = consecutive_free_ports(3)
    store = tmp_path / "data"
    args = ["cluster", "--tls", "--base-port", str(base), "-s", str(store), "--heartbeat-ms", "300"]
    cluster = Running([*args, "--segment-size", "4MiB"], tmp_path)
    commands.append(cluster)
    cluster.wait_for_line("[cluster] mutual TLS: wrote a development CA")
    cluster.wait_for_line("leader: ")
    certs = store / "tls"
    peers = ";".join(f"n{k}-127.0.0.1:{base + k}" for k in range(3))
    common = ["-p", peers, "--timeout", "20"]

    appended = dledger("append", "secret", *common, *tls_args(certs, "client-writer"))
    assert appended.returncode == 0, appended.stderr
    reader_env = {
        "DLEDGER_TLS_CERT": str(certs / "client-reader.crt"),
        "DLEDGER_TLS_KEY": str(certs / "client-reader.key"),
        "DLEDGER_TLS_CA": str(certs / "ca.crt"),
    }
    got = dledger("get", "0", "--raw", *common, env=reader_env)
    assert (got.returncode, got.stdout.strip()) == (0, "secret"), got.stderr
    refused = dledger("append", "nope", *common, env=reader_env)
    assert refused.returncode == 1 and "PERMISSION_DENIED" in refused.stderr
    assert "Traceback" not in refused.stderr
    plaintext = dledger("status", "-p", peers, "--timeout", "2")
    assert plaintext.returncode == 1
    assert "serve TLS: pass --tls-cert, --tls-key and --tls-ca" in plaintext.stderr  # the hint names all three
    assert dledger("status", *common, *tls_args(certs, "client-admin")).returncode == 0

    os.killpg(cluster.process.pid, signal.SIGINT)
    assert cluster.process.wait(60) == 0
    again = Running([*args, "--segment-size", "4MiB"], tmp_path)
    commands.append(again)
    again.wait_for_line(f"[cluster] mutual TLS with the certificates in {certs}")
    again.wait_for_line("leader: ")
    kept = dledger("get", "0", "--raw", *common, env=reader_env)
    assert kept.stdout.strip() == "secret", kept.stderr
    os.killpg(again.process.pid, signal.SIGINT)
    assert again.process.wait(60) == 0
    again.wait_for_line("[cluster] stopped: n0=0, n1=0, n2=0")


def test_server_refuses_plaintext_off_loopback(tmp_path: Path) -> None:
    result = dledger("server", "-i", "n0", "-p", "n0-0.0.0.0:1", "-s", str(tmp_path))
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0:1 without TLS" in result.stderr and "--insecure" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "dledger-n0").exists()
    listen = dledger("server", "-i", "n0", "-p", "n0-127.0.0.1:1", "--listen", "10.9.9.9:1", "-s", str(tmp_path))
    assert listen.returncode == 2 and "refusing to listen on 10.9.9.9:1" in listen.stderr
    cluster = dledger("cluster", "--host", "0.0.0.0", "-s", str(tmp_path))
    assert cluster.returncode == 2 and "without TLS" in cluster.stderr


def test_server_names_unreadable_tls_files(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    result = dledger(
        "server", "-i", "n0", "-p", "n0-127.0.0.1:1", "-s", str(tmp_path), "--tls-cert", missing, "--tls-key", missing
    )
    assert result.returncode == 2 and "--tls-ca missing" in result.stderr
    result = dledger("server", "-i", "n0", "-p", "n0-127.0.0.1:1", "-s", str(tmp_path), *tls_args(tmp_path, "n0"))
    assert result.returncode == 2 and "cannot read the TLS certificate" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "dledger-n0").exists()


@pytest.mark.parametrize("flag", [[], ["--reflection"]])
def test_server_reflection_only_when_asked_for(tmp_path: Path, flag: list[str]) -> None:
    port = free_ports(1)[0]
    args = ["server", "-i", "n0", "-p", f"n0-127.0.0.1:{port}", "-s", str(tmp_path), "--log-level", "WARNING", *flag]
    process = subprocess.Popen([*DLEDGER, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    channel = open_channel(f"127.0.0.1:{port}")
    try:
        ledger = pb_grpc.LedgerStub(channel)

        def up() -> bool:
            try:
                return bool(ledger.Metadata(pb.MetadataRequest(), timeout=1).self_id == "n0")
            except grpc.RpcError:
                return False

        eventually(up, 60, "the server")
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        if flag:
            replies = stub.ServerReflectionInfo(iter([request]), timeout=5)
            assert "dledger.v1.Ledger" in {s.name for r in replies for s in r.list_services_response.service}
        else:
            with pytest.raises(grpc.RpcError) as info:
                list(stub.ServerReflectionInfo(iter([request]), timeout=5))
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        channel.close()
        process.terminate()
        assert process.wait(60) == 0
