"""The TLS mismatch hint: a client command that reached no member says when the members
speak TLS and it did not (or the reverse), found by a TLS handshake of its own against
real gRPC servers on loopback."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from dledger.client.policy import IndeterminateError
from dledger.codes import DLedgerError, ResponseCode
from dledger.security.probe import speaks_tls, tls_mismatch, with_tls_hint
from dledger.security.tls import TlsConfig
from tests.security.test_tls_cli import dledger
from tests.security.tls_support import make_certs

pytestmark = [pytest.mark.security, pytest.mark.timeout(120)]

SETTINGS = "the certificate settings"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _serve(credentials: grpc.ServerCredentials | None) -> tuple[grpc.Server, str]:
    server = grpc.server(ThreadPoolExecutor(2))
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def tls_member(certs: Path) -> Iterator[str]:
    server, address = _serve(TlsConfig.in_directory(certs, "n0").server_credentials())
    yield address
    server.stop(0)


@pytest.fixture(scope="module")
def plain_member() -> Iterator[str]:
    server, address = _serve(None)
    yield address
    server.stop(0)


@pytest.fixture
def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_tls_member_a_plaintext_one_and_nothing_are_told_apart(
    tls_member: str, plain_member: str, closed_port: str
) -> None:
    assert speaks_tls(tls_member) is True  # it requires a client certificate: the handshake still tells
    assert speaks_tls(plain_member) is False
    assert speaks_tls(closed_port) is None
    assert speaks_tls("no-port") is None


def test_a_member_that_never_answers_is_unknown() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # accepts into the backlog, never speaks
        assert speaks_tls(f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.2) is None


def test_the_hint_names_only_the_members_whose_setting_differs(
    tls_member: str, plain_member: str, closed_port: str
) -> None:
    peers = {"n0": tls_member, "n1": plain_member, "n2": closed_port}
    plaintext = tls_mismatch(peers, using_tls=False, settings=SETTINGS)
    assert plaintext == f"n0 ({tls_member}) serves TLS: pass {SETTINGS}"
    with_tls = tls_mismatch(peers, using_tls=True, settings=SETTINGS)
    assert with_tls == f"n1 ({plain_member}) answered in plaintext, not TLS: leave out {SETTINGS}"
    assert tls_mismatch({"n0": tls_member}, using_tls=True, settings=SETTINGS) is None
    assert tls_mismatch({"n2": closed_port}, using_tls=False, settings=SETTINGS) is None


def _append(peers: str, *args: str) -> subprocess.CompletedProcess[str]:
    return dledger("append", "x", "-p", peers, "--timeout", "2", *args)


def test_a_plaintext_command_against_tls_members_says_to_pass_the_tls_options(tls_member: str) -> None:
    done = _append(f"n0-{tls_member}")
    assert done.returncode == 1
    assert f"hint: n0 ({tls_member}) serves TLS: pass --tls-cert, --tls-key and --tls-ca" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_tls_command_against_plaintext_members_says_to_drop_them(plain_member: str, certs: Path) -> None:
    tls = ["--tls-cert", str(certs / "client-admin.crt"), "--tls-key", str(certs / "client-admin.key")]
    done = _append(f"n0-{plain_member}", *tls, "--tls-ca", str(certs / "ca.crt"))
    assert done.returncode == 1
    assert f"hint: n0 ({plain_member}) answered in plaintext, not TLS" in done.stderr


def test_no_hint_when_nothing_answers(closed_port: str) -> None:
    done = _append(f"n0-{closed_port}")
    assert done.returncode == 1 and "NETWORK_ERROR" in done.stderr
    assert "hint" not in done.stderr


def test_only_a_plain_network_failure_gets_the_hint(tls_member: str) -> None:
    peers = {"n0": tls_member}
    timeout = DLedgerError(ResponseCode.TIMEOUT, "Metadata failed: timed out")
    hinted = with_tls_hint(timeout, peers, tls=None, settings=SETTINGS)
    assert hinted.code == ResponseCode.TIMEOUT
    assert hinted.message.startswith("Metadata failed: timed out; hint: n0") and "serves TLS" in hinted.message
    refused = DLedgerError(ResponseCode.UNKNOWN_GROUP, "no such group")
    assert with_tls_hint(refused, peers, tls=None, settings=SETTINGS) is refused
    unknown = IndeterminateError(ResponseCode.TIMEOUT, "the append may have happened")
    # a copy would lose "indeterminate"
    assert with_tls_hint(unknown, peers, tls=None, settings=SETTINGS) is unknown
