"""The key-value store on real server processes (`--state-machine kv`): `KVClient` in
every read mode, and `dledger kv put|get|del|cas` with its exit contract."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from dledger.cli.main import main
from dledger.client import DLedgerClient, ReadMode
from dledger.codes import DLedgerError, ResponseCode
from dledger.kv.client import CasResult, KVClient, KVError
from dledger.kv.commands import MAX_KEY_SIZE
from tests.e2e.harness import E2ECluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def kv_cluster(make_cluster: Callable[..., E2ECluster]) -> E2ECluster:
    cluster = make_cluster(3, ["--state-machine", "kv"])
    cluster.leader()
    return cluster


@pytest.fixture
def store(kv_cluster: E2ECluster) -> Iterator[KVClient]:
    with DLedgerClient(kv_cluster.peers, "e2e", timeout_s=20) as client:
        yield KVClient(client)


def test_put_get_cas_delete_in_every_read_mode(store: KVClient) -> None:
    store.put(b"k", b"v1")
    for mode in ReadMode:
        if mode is not ReadMode.UNSAFE:  # UNSAFE may be served by a member still applying
            assert store.get(b"k", mode) == b"v1", mode
    assert store.cas(b"k", b"v1", b"v2") == CasResult(True)
    assert store.cas(b"k", b"v1", b"v3") == CasResult(False, b"v2")
    assert store.cas(b"new", None, b"n") == CasResult(True)
    assert store.cas(b"new", None, b"m") == CasResult(False, b"n")
    assert store.delete(b"k") is True
    assert store.delete(b"k") is False  # deleting an absent key is fine
    assert store.get(b"k") is None
    assert store.cas(b"k", None, b"again") == CasResult(True)
    assert KVClient(store.client, ReadMode.LEASE).get(b"k") == b"again"


def test_bad_commands_are_refused_and_change_nothing(store: KVClient) -> None:
    store.put(b"a", b"1")
    with pytest.raises(ValueError, match="longer than 65536"):
        store.put(b"x" * (MAX_KEY_SIZE + 1), b"v")  # refused before it is sent
    with pytest.raises(KVError, match="bad key-value command"):
        # a body that is not a command, appended through the log, gets the machine's ERROR
        KVClient(_RawQueries(store.client)).put(b"a", b"2")
    assert store.get(b"a") == b"1"


class _RawQueries:
    """Sends garbage in place of the encoded command (a hostile or broken client)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def query(self, request: bytes, mode: ReadMode = ReadMode.READ_INDEX, *, timeout: float | None = None) -> bytes:
        return bytes(self.client.query(b"\x00garbage" + request[:3], mode, timeout=timeout))


def test_a_group_without_the_kv_machine_says_so(make_cluster: Callable[..., E2ECluster]) -> None:
    plain = make_cluster(1)
    with DLedgerClient(plain.peers, "e2e", timeout_s=20) as client:
        with pytest.raises(DLedgerError) as caught:
            KVClient(client).get(b"k")
        assert caught.value.code == ResponseCode.UNSUPPORTED


def _kv(cluster: E2ECluster, *args: str) -> Any:
    return CliRunner().invoke(main, ["kv", *args, "-p", cluster.peers, "-g", "e2e", "--timeout", "20"])


def test_the_kv_commands_and_their_exit_codes(kv_cluster: E2ECluster) -> None:
    assert (_kv(kv_cluster, "put", "colour", "blue").exit_code, _kv(kv_cluster, "get", "colour").output) == (
        0,
        "blue\n",
    )
    result = _kv(kv_cluster, "cas", "colour", "red", "green")
    assert (result.exit_code, result.output) == (1, "not swapped: current value blue\n")
    result = _kv(kv_cluster, "cas", "colour", "blue", "green", "--json")
    assert (result.exit_code, json.loads(result.output)) == (0, {"key": "colour", "swapped": True})
    assert _kv(kv_cluster, "get", "colour", "--mode", "lease").output == "green\n"
    assert _kv(kv_cluster, "del", "colour").exit_code == 0
    result = _kv(kv_cluster, "get", "colour")
    assert result.exit_code == 1 and "key 'colour' not found" in result.output
    result = _kv(kv_cluster, "get", "colour", "--json")
    assert (result.exit_code, json.loads(result.output)) == (1, {"key": "colour", "found": False})
    result = _kv(kv_cluster, "cas", "--absent", "colour", "red")
    assert (result.exit_code, result.output) == (0, "swapped\n")
    assert _kv(kv_cluster, "put", "00ff", "0102", "--hex").exit_code == 0
    assert _kv(kv_cluster, "get", "00ff", "--hex").output == "0102\n"


@pytest.mark.parametrize(
    "args",
    [
        ["cas", "k", "only-new"],  # EXPECTED missing
        ["cas", "--absent", "k", "e", "n"],  # EXPECTED with --absent
        ["get", "zz", "--hex"],
        ["get", "k", "--mode", "stale"],
        ["put", "k"],
    ],
)
def test_kv_usage_errors_exit_2_without_a_traceback(kv_cluster: E2ECluster, args: list[str]) -> None:
    result = _kv(kv_cluster, *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
