"""`Ledger.Query` end to end: in-process members on real gRPC servers (loopback, free
ports) running a Register state machine, and `DLedgerClient.query` against them: every
mode after an acknowledged append, follower reads and redirects, hostile requests
refused with the right code and nothing changed, concurrent client calls sharing RPCs,
and RAFT_LOG's unknown outcome."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dledger.client import DLedgerClient, IndeterminateError, ReadMode
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.node import DLedgerNode
from dledger.server import DLedgerServer
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import eventually, free_ports
from tests.node.register import Register
from tests.security.tls_support import TIMINGS as GROUP_TIMINGS

pytestmark = pytest.mark.e2e

TIMINGS: dict[str, Any] = {**GROUP_TIMINGS, "lease_drift_ms": 100}


class Group:
    """n in-process members with a Register each (`machine=False`: none)."""

    def __init__(self, base: Path, n: int = 3, machine: bool = True) -> None:
        ports = free_ports(n)
        self.ids = [f"n{k}" for k in range(n)]
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(self.ids, ports, strict=True))
        self.machines = {i: Register() for i in self.ids}
        self.servers: dict[str, DLedgerServer] = {}
        for node_id in self.ids:
            config = DLedgerConfig(
                group="g",
                self_id=node_id,
                peers=self.peers,
                store_base_dir=str(base),
                store=member_store_config(data_file_size=1 << 20, index_file_size=32 * 4096),
                **TIMINGS,
            )
            sm = self.machines[node_id] if machine else None
            factory = lambda cfg, transport, sm=sm: DLedgerNode(cfg, transport, state_machine=sm)  # noqa: E731
            self.servers[node_id] = DLedgerServer(config, node_factory=factory).start()

    def node(self, node_id: str) -> DLedgerNode:
        node = self.servers[node_id].node
        assert node is not None
        return node

    def leader(self) -> str:
        def one() -> str | None:
            nodes = [self.node(i) for i in self.ids if i in self.servers]
            leaders = [n.config.self_id for n in nodes if n.is_leader]
            if len(leaders) != 1 or any(n.leader_id != leaders[0] for n in nodes):
                return None
            return leaders[0]

        found: str = eventually(one, 30, "a single leader")
        return found

    def stub(self, node_id: str) -> Any:
        return pb_grpc.LedgerStub(open_channel(self.servers[node_id].config.self_address))

    def client(self, timeout_s: float = 10.0, **options: Any) -> DLedgerClient:
        return DLedgerClient(self.peers, "g", timeout_s, **options)

    def stop(self, node_id: str) -> None:
        self.servers.pop(node_id).shutdown(0.5)

    def close(self) -> None:
        for server in self.servers.values():
            server.shutdown(0.5)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    made = Group(tmp_path)
    yield made
    made.close()


def test_every_mode_answers_with_the_state_after_an_acknowledged_append(group: Group) -> None:
    group.leader()
    with group.client() as client:
        for k in range(3):
            value = f"v{k}".encode()
            client.append(b"set:" + value)
            assert client.query(b"get") == value  # READ_INDEX, the default
            assert client.query(b"get", ReadMode.LEASE) == value
            assert client.query(b"get", ReadMode.RAFT_LOG) == value
        eventually(lambda: client.query(b"get", ReadMode.UNSAFE) == b"v2", 10, "the unsafe read")


def test_a_follower_answers_read_index_and_redirects_lease(group: Group) -> None:
    leader = group.leader()
    with group.client() as client:
        client.append(b"set:f")
    follower = next(i for i in group.ids if i != leader)
    stub = group.stub(follower)
    answer = stub.Query(pb.QueryRequest(requests=[b"get", b"get"], mode=pb.QueryRequest.READ_INDEX), timeout=10)
    assert answer.code == ResponseCode.SUCCESS and list(answer.answers) == [b"f", b"f"]
    for mode in (pb.QueryRequest.LEASE, pb.QueryRequest.RAFT_LOG):
        answer = stub.Query(pb.QueryRequest(requests=[b"get"], mode=mode), timeout=10)
        assert answer.code == ResponseCode.NOT_LEADER and answer.leader_id == leader
        assert answer.leader_address == group.servers[leader].config.self_address and not answer.answers


def test_hostile_queries_are_refused_and_change_nothing(group: Group) -> None:
    leader = group.leader()
    with group.client() as client:
        client.append(b"set:safe")
    node = group.node(leader)
    end = node.status().end_index
    stub = group.stub(leader)
    big = b"x" * (5 << 20)
    cases = [
        (pb.QueryRequest(requests=[b"get"], mode=7), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.QueryRequest(requests=[b"get"], mode=-1), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.QueryRequest(requests=[], mode=pb.QueryRequest.RAFT_LOG), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.QueryRequest(requests=[big], mode=pb.QueryRequest.RAFT_LOG), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.QueryRequest(requests=[b"g"] * 70_000), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.QueryRequest(group="other", requests=[b"get"]), ResponseCode.UNKNOWN_GROUP),
        (pb.QueryRequest(remote_id="n9", requests=[b"get"]), ResponseCode.UNKNOWN_MEMBER),
    ]
    for request, code in cases:
        answer = stub.Query(request, timeout=10)
        assert answer.code == code, request
        assert not answer.answers and answer.message
    assert node.status().end_index == end  # nothing was appended
    with group.client() as client:
        assert client.query(b"get") == b"safe"
        with pytest.raises(ValueError, match="9"):
            client.query(b"get", 9)  # type: ignore[arg-type]


def test_a_query_whose_answers_pass_the_limit_is_refused_before_they_are_all_built(group: Group) -> None:
    """Helper M: one Query repeating a large read 65,536 times (the read role is enough)
    had a member build gigabytes of answers before gRPC's message limit refused them; a
    few such requests took the group down. The answers stop at `max_query_bytes`."""
    leader = group.leader()
    with group.client() as client:
        client.append(b"set:" + b"v" * (1 << 19))
    machine = group.machines[leader]
    before = machine.queries
    answer = group.stub(leader).Query(pb.QueryRequest(requests=[b"get"] * 100), timeout=30)
    assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT and not answer.answers
    assert answer.message == f"the answers pass {32 << 20} bytes at read 65 of 100: ask for less in one query"
    assert machine.queries - before == 65  # built no further
    with group.client() as client:
        assert client.query(b"get") == b"v" * (1 << 19)  # one is answered


def test_a_machine_that_fails_a_query_gets_internal_error_and_keeps_serving(group: Group) -> None:
    group.leader()
    with group.client() as client:
        with pytest.raises(DLedgerError) as err:
            client.query(b"boom", ReadMode.UNSAFE)
        assert err.value.code == ResponseCode.INTERNAL_ERROR
        client.append(b"set:still")
        assert client.query(b"get") == b"still"


def test_concurrent_queries_share_rpcs(group: Group) -> None:
    leader = group.leader()
    node = group.node(leader)
    calls: list[int] = []
    query = node.reads.query

    def counting(requests: Any, mode: Any, timeout_s: float, max_bytes: int | None) -> Any:
        calls.append(len(requests))
        return query(requests, mode, timeout_s, max_bytes)

    node.reads.query = counting  # type: ignore[method-assign]
    machine = group.machines[leader]
    with group.client(60.0) as client:
        client.append(b"set:shared")
        calls.clear()
        machine.gate = threading.Event()  # the first call's query waits: the others pile up
        answers: list[bytes] = []
        threads = [threading.Thread(target=lambda: answers.append(client.query(b"get"))) for _ in range(32)]
        for t in threads:
            t.start()
        assert client._queries is not None
        eventually(lambda: client._queries.queued(ReadMode.READ_INDEX) == 31, 30, "31 queued queries")
        machine.gate.set()
        for t in threads:
            t.join(30)
        assert answers == [b"shared"] * 32
        assert calls == [1, 31]  # 32 calls, 2 RPCs
        assert client._queries.requests == 2


def test_one_failing_query_in_a_shared_request_fails_only_its_caller(group: Group) -> None:
    leader = group.leader()
    machine = group.machines[leader]
    with group.client(60.0) as client:
        client.append(b"set:ok")
        machine.gate = threading.Event()
        results: dict[bytes, list[object]] = {b"get": [], b"boom": []}

        def call(request: bytes) -> None:
            try:
                results[request].append(client.query(request))
            except DLedgerError as exc:
                results[request].append(exc.code)

        first = threading.Thread(target=call, args=(b"get",))
        first.start()
        assert client._queries is not None
        eventually(lambda: machine.held == 1, 30, "the first query held in the machine")
        others = [threading.Thread(target=call, args=(r,)) for r in (b"get", b"boom", b"get")]
        for t in others:
            t.start()
        eventually(lambda: client._queries.queued(ReadMode.READ_INDEX) == 3, 30, "3 queued queries")
        machine.gate.set()
        for t in [first, *others]:
            t.join(30)
    assert results == {b"get": [b"ok"] * 3, b"boom": [ResponseCode.INTERNAL_ERROR]}


def test_without_a_queryable_machine_queries_are_unsupported(tmp_path: Path) -> None:
    bare = Group(tmp_path, n=1, machine=False)
    try:
        bare.leader()
        with bare.client() as client:
            for mode in ReadMode:
                with pytest.raises(DLedgerError) as err:
                    client.query(b"get", mode)
                assert err.value.code == ResponseCode.UNSUPPORTED
    finally:
        bare.close()


def test_without_a_quorum_reads_time_out_and_raft_log_is_indeterminate(group: Group) -> None:
    leader = group.leader()
    config = group.node(leader).config
    config.check_quorum, config.max_heart_beat_leak = False, 100  # it stays leader without its quorum
    with group.client() as client:
        client.append(b"set:q")
        for other in [i for i in group.ids if i != leader]:
            group.stop(other)
        with pytest.raises(IndeterminateError):
            client.query(b"get", ReadMode.RAFT_LOG, timeout=1.5)
        with pytest.raises(DLedgerError) as err:
            client.query(b"get", ReadMode.READ_INDEX, timeout=1.5)
        assert not isinstance(err.value, IndeterminateError)
        assert err.value.code == ResponseCode.TIMEOUT


def _cli(group: Group, *args: str, stdin: bytes | None = None) -> tuple[int, bytes, str]:
    from click.testing import CliRunner

    from dledger.cli.main import main

    result = CliRunner().invoke(main, ["query", *args, "-p", group.peers, "-g", "g", "--timeout", "10"], input=stdin)
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout_bytes, result.stderr


def test_dledger_query_prints_the_answer_in_every_mode(group: Group) -> None:
    group.leader()
    with group.client() as client:
        client.append(b"set:cli")
    assert _cli(group, "get") == (0, b"cli\n", "")
    for mode in ("unsafe", "read-index", "lease", "raft-log"):
        code, out, _ = _cli(group, "--mode", mode, "get")
        assert code == 0 and out == b"cli\n", mode  # unsafe too: the leader answers first
    assert _cli(group, "--hex", "676574")[:2] == (0, b"cli\n")
    assert _cli(group, "-", stdin=b"get")[:2] == (0, b"cli\n")
    assert _cli(group, "--raw", "-m", "raft-log", "--hex", "7365743aff")[:2] == (0, b"ok")  # set:\xff
    assert _cli(group, "get")[:2] == (0, b"base64:/w==\n")  # a value that is not UTF-8 text
    assert _cli(group, "get", "--json")[:2] == (0, b'{"mode": "read-index", "answer_b64": "/w=="}\n')


def test_dledger_query_exit_contract(group: Group, tmp_path: Path) -> None:
    for args in (["--mode", "fast", "get"], ["--hex", "xyz"], ["--hex", "-"], [], ["--raw", "--json", "get"]):
        code, out, err = _cli(group, *args)
        assert code == 2 and not out, args
    group.leader()
    code, out, err = _cli(group, "boom", "-m", "unsafe")
    assert code == 1 and not out and err.startswith("error: INTERNAL_ERROR") and err.count("\n") == 1


def test_hostile_read_index_requests_are_refused(group: Group) -> None:
    leader = group.leader()
    follower = next(i for i in group.ids if i != leader)
    stub = pb_grpc.PeerStub(open_channel(group.servers[leader].config.self_address))
    term = group.node(leader).term
    good = {"group": "g", "remote_id": leader, "local_id": follower, "term": term}
    cases = [
        ({"local_id": "x9"}, ResponseCode.UNKNOWN_MEMBER),
        ({"local_id": leader}, ResponseCode.UNEXPECTED_MEMBER),
        ({"remote_id": follower}, ResponseCode.UNEXPECTED_MEMBER),
        ({"group": "other"}, ResponseCode.UNKNOWN_GROUP),
        ({"term": (1 << 63) - 1}, ResponseCode.UNEXPECTED_ARGUMENT),
        ({"term": -1}, ResponseCode.UNEXPECTED_ARGUMENT),
    ]
    for change, code in cases:
        answer = stub.ReadIndex(pb.ReadIndexRequest(**{**good, **change}), timeout=10)
        assert answer.code == code, change
        assert answer.index == 0
    assert group.node(leader).term == term and group.node(leader).is_leader
    answer = stub.ReadIndex(pb.ReadIndexRequest(**good), timeout=10)
    assert answer.code == ResponseCode.SUCCESS and answer.index == group.node(leader).committed_index
