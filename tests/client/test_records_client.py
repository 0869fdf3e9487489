"""Records through a real in-process group over loopback gRPC: the client's
append_record / append_records / get_record(s), the combiner keeping record and plain
appends apart, Get and ReadCommitted carrying magic 16, and refusals (bad bodies, a bad
magic, java_compat) that append nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dledger.cli.main import main
from dledger.client import DLedgerClient
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import Record, encode_record, with_records
from dledger.server import DLedgerServer
from dledger.transport.convert import FIXED_WIDTH, pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import free_ports

pytestmark = pytest.mark.unit

TIMINGS: dict[str, Any] = {"heart_beat_time_interval_ms": 200, "min_vote_interval_ms": 50, "max_vote_interval_ms": 250}


def _group(base: Path, n: int, java_compat: bool = False) -> tuple[list[DLedgerServer], str]:
    ports = free_ports(n)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    store = member_store_config(data_file_size=1 << 20, index_file_size=32 * 4096, java_compat=java_compat)
    servers = [
        DLedgerServer(
            DLedgerConfig(group="g", self_id=f"n{k}", peers=peers, store_base_dir=str(base), store=store, **TIMINGS)
        ).start()
        for k in range(n)
    ]
    return servers, peers


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[DLedgerServer], DLedgerClient]]:
    servers, peers = _group(tmp_path_factory.mktemp("records"), 3)
    client = DLedgerClient(peers, "g", timeout_s=15.0)
    try:
        yield servers, client
    finally:
        client.close()
        for server in servers:
            server.shutdown()


def test_records_round_trip_through_the_group(group: tuple[list[DLedgerServer], DLedgerClient]) -> None:
    _, client = group
    plain = client.append(b"plain")
    one = client.append_record(b"v1", key=b"k1", timestamp=1000, headers=[("trace", b"a"), ("trace", b"b")])
    batch = client.append_records([Record(b"v2", key=b""), Record(b"v3", timestamp=3)])
    assert batch.count == 2 and batch.first_index == one + 1
    assert client.get_record(plain) == Record(b"plain", None, None, (), plain, client.get(plain)[0].term)
    got = client.get_record(one)
    assert (got.value, got.key, got.timestamp, got.headers) == (b"v1", b"k1", 1000, (("trace", b"a"), ("trace", b"b")))
    assert [(r.key, r.timestamp) for r in client.get_records(one + 1, 2)][1] == (None, 3)
    assert client.get_records(one + 1, 2)[0].key == b""  # an empty key is not no key
    assert client.get(one)[0].magic == MAGIC_RECORD


def test_every_member_serves_record_columns(group: tuple[list[DLedgerServer], DLedgerClient]) -> None:
    _, client = group
    index = client.append_record(b"col", key=b"ck", timestamp=77)
    for node_id in ("n0", "n1", "n2"):
        batches = client.read_committed(index, index + 1, node_id=node_id, follow=True, layout=FIXED_WIDTH)
        cols = with_records(next(iter(batches))).records
        assert cols is not None
        assert (cols.key(0), int(cols.timestamps[0]), cols.value(0)) == (b"ck", 77, b"col")


def test_concurrent_record_and_plain_appends_keep_their_magic(group: tuple[list[DLedgerServer], DLedgerClient]) -> None:
    _, client = group
    results: dict[int, tuple[int, bool]] = {}

    def worker(k: int) -> None:
        if k % 2:
            results[k] = (client.append_record(str(k).encode(), key=b"w"), True)
        else:
            results[k] = (client.append(str(k).encode()), False)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, (index, is_record) in results.items():
        entry = client.get(index)[0]
        assert entry.magic == (MAGIC_RECORD if is_record else MAGIC_NORMAL)
        assert client.get_record(index).value == str(k).encode()


def _raw_append(servers: list[DLedgerServer], client: DLedgerClient, request: Any) -> Any:
    leader = client.discover()
    channel = open_channel(leader.address)
    try:
        return pb_grpc.LedgerStub(channel).Append(request, timeout=10)
    finally:
        channel.close()


def test_bad_record_bodies_and_magics_are_refused_whole(group: tuple[list[DLedgerServer], DLedgerClient]) -> None:
    servers, client = group
    end = client.metadata().end_index
    good = encode_record(b"v", b"k", 1)
    answer = _raw_append(servers, client, pb.AppendRequest(group="g", bodies=[good, good[:-1]], magic=MAGIC_RECORD))
    assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert "body 1: bad record body" in answer.message and "truncated" in answer.message
    answer = _raw_append(servers, client, pb.AppendRequest(group="g", bodies=[b"x"], magic=2))
    assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT and "not 2" in answer.message
    with pytest.raises(ValueError, match="over the limit"):
        client.append_record(b"v", key=b"k" * 65537)
    with pytest.raises(TypeError):
        client.append_record(b"v", headers=[("h", "not bytes")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="records is empty"):
        client.append_records([])
    assert client.metadata().end_index == end


def test_a_java_compat_group_refuses_records(tmp_path: Path) -> None:
    servers, peers = _group(tmp_path, 1, java_compat=True)
    try:
        with DLedgerClient(peers, "g", timeout_s=15.0) as client:
            client.append(b"plain")
            with pytest.raises(DLedgerError, match="Java DLedger cannot read them") as err:
                client.append_record(b"v", key=b"k")
            assert err.value.code == ResponseCode.UNSUPPORTED
            assert client.metadata().end_index == 0
    finally:
        servers[0].shutdown()


def _cli(client: DLedgerClient, *args: str) -> tuple[int, str, str]:
    peers = ";".join(f"{k}-{v}" for k, v in client.peers.items())
    result = CliRunner().invoke(main, [*args, "-p", peers, "-g", "g", "--timeout", "15"])
    return result.exit_code, result.stdout, result.stderr


def test_cli_appends_records_and_gets_them(group: tuple[list[DLedgerServer], DLedgerClient]) -> None:
    _, client = group
    code, out, _ = _cli(
        client,
        "append",
        "--key",
        "user-7",
        "--header",
        "src=web",
        "--header",
        "src=app",
        "--timestamp",
        "1700000000000",
        "--json",
        "hello",
    )
    assert code == 0
    index = json.loads(out)["first_index"]
    assert client.get_record(index) == Record(
        b"hello", b"user-7", 1_700_000_000_000, (("src", b"web"), ("src", b"app")), index, client.get(index)[0].term
    )
    code, out, _ = _cli(client, "get", str(index))
    term = client.get(index)[0].term
    assert (code, out) == (0, f"{index}\tterm {term}\thello\tkey=user-7 timestamp=1700000000000 src=web src=app\n")
    code, out, _ = _cli(client, "get", str(index), "--json")
    shown = json.loads(out)
    assert (shown["body"], shown["key"], shown["timestamp"], shown["headers"], shown["magic"]) == (
        "hello",
        "user-7",
        1_700_000_000_000,
        [["src", "web"], ["src", "app"]],
        MAGIC_RECORD,
    )
    code, out, _ = _cli(client, "get", str(index), "--raw")
    assert (code, out) == (0, "hello\n")
    code, out, _ = _cli(client, "append", "--timestamp", "5", "--count", "3", "--body-size", "4", "--json")
    first = json.loads(out)["first_index"]
    assert [r.timestamp for r in client.get_records(first, 3)] == [5, 5, 5]
    assert [r.key for r in client.get_records(first, 3)] == [None, None, None]


def test_get_shows_control_characters_in_header_names_and_a_dash_key_as_base64(
    group: tuple[list[DLedgerServer], DLedgerClient],
) -> None:
    """A header name went to the terminal as it was: a writer's escape sequences reached
    the terminal of whoever ran `get`, and a newline split its line in two (helper D).
    The key "-" looked like no key."""
    _, client = group
    code, out, _ = _cli(client, "append", "--key", "-", "--header", "\x1b]0;pwned\x07=v", "--header", "a\nb=w", "x")
    assert code == 0
    index = int(out.split()[-1])
    code, out, _ = _cli(client, "get", str(index))
    term = client.get(index)[0].term
    fields = "key=base64:LQ== timestamp="
    assert code == 0 and out.startswith(f"{index}\tterm {term}\tx\t{fields}") and out.count("\n") == 1
    assert out.rstrip("\n").endswith(" base64:G10wO3B3bmVkBw===v base64:YQpi=w") and "\x1b" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--header", "novalue"], "is not KEY=VALUE"),
        (["--header", "=v"], "is not KEY=VALUE"),
        (["--key", "k" * 65537], "the key is over 65536 bytes"),
        (["--header", "h" * 1025 + "=v"], "header key over 1024 bytes"),
        (["--timestamp", "-1"], "-1"),
    ],
)
def test_cli_record_options_are_usage_errors(
    group: tuple[list[DLedgerServer], DLedgerClient], args: list[str], message: str
) -> None:
    _, client = group
    end = client.metadata().end_index
    code, _, err = _cli(client, "append", *args, "body")
    assert code == 2 and message in err
    assert client.metadata().end_index == end


def test_get_decodes_records_on_the_server_when_asked(group: tuple[list[DLedgerServer], DLedgerClient]) -> None:
    _, client = group
    plain = client.append(b"plain-get")
    index = client.append_record(b"val", key=b"", timestamp=42, headers=[("a", b"1"), ("a", b"2")])
    nokey = client.append_record(b"v2", timestamp=1)
    channel = open_channel(client.discover().address)
    try:
        stub = pb_grpc.LedgerStub(channel)
        raw = stub.Get(pb.GetRequest(group="g", index=plain, count=3), timeout=10)
        decoded = stub.Get(pb.GetRequest(group="g", index=plain, count=3, decode_records=True), timeout=10)
    finally:
        channel.close()
    assert raw.code == decoded.code == ResponseCode.SUCCESS
    assert raw.entries[0].body == b"plain-get" and not raw.entries[1].HasField("record")
    first, rec, bare = decoded.entries
    assert (first.body, first.HasField("record")) == (b"plain-get", False)
    assert (rec.index, rec.magic, rec.body) == (index, MAGIC_RECORD, b"")
    assert (rec.record.HasField("key"), rec.record.key, rec.record.timestamp, rec.record.value) == (
        True,
        b"",
        42,
        b"val",
    )
    assert [(h.key, h.value) for h in rec.record.headers] == [("a", b"1"), ("a", b"2")]
    assert (bare.index, bare.record.HasField("key"), bare.record.value) == (nokey, False, b"v2")
