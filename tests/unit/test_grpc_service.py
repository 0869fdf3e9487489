"""The gRPC layer (GrpcServer, LedgerService, PeerService, GrpcTransport) over a fake node
on real loopback servers."""

from __future__ import annotations

import dataclasses
import logging
import queue
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from functools import partial
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from dledger._store_py_codec import encode_entry
from dledger.client.policy import Decision, read_decision, rpc_decision
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.config import DLedgerConfig
from dledger.entry import Entry
from dledger.node import NodeStatus
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    InstallSnapshotStream,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.security.identity import Identity
from dledger.store.memory import MemoryLogStore
from dledger.transport import grpc_server, service_core
from dledger.transport.convert import columns_from_pb, pb, pb_grpc, to_pb
from dledger.transport.grpc_client import GrpcTransport, open_channel, peer_deadline_ms
from dledger.transport.grpc_server import BindError, GrpcServer, ServiceLimits
from dledger.transport.service_core import TOO_MANY_CALLS, ArrivalGauge

pytestmark = pytest.mark.unit

WAIT_S = 10.0
FROM_N1: dict[str, Any] = {"group": "g", "remote_id": "n0", "local_id": "n1", "leader_id": "n1"}
"""The addressing of a valid peer request from n1 to n0 (the server checks it)."""


def wait_until(predicate: Any, timeout_s: float = WAIT_S) -> None:
    """Poll `predicate` until it holds; fail after `timeout_s`."""
    done = threading.Event()
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        done.wait(0.005)


class FakeNode:
    """A single member that commits at once (or holds appends when `hold` is set)."""

    def __init__(self, leader: bool = True) -> None:
        self.config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1;n1-127.0.0.1:2")
        self.store = MemoryLogStore()
        self.store.term = 2
        self.leader = leader
        self.hold = False
        self.held: list[Future[int]] = []
        self.peer_requests: list[RequestOrResponse] = []
        self.install_chunks: list[InstallSnapshotRequest] = []
        self.unanswered: list[Future[RequestOrResponse]] = []  # TRUNCATE pushes: left to the server's timeout
        self.left_unanswered = threading.Event()  # set at the first of them
        self._cond = threading.Condition()

    @property
    def leader_id(self) -> str | None:
        return "n0" if self.leader else "n1"

    @property
    def term(self) -> int:
        return 2

    @property
    def committed_index(self) -> int:
        return self.store.committed_index

    def append(self, bodies: list[bytes], magic: int = 1) -> Future[int]:
        if not self.leader:
            raise DLedgerError(ResponseCode.NOT_LEADER, "not me")
        future: Future[int] = Future()
        with self._cond:
            first = self.store.append_many(bodies, magic)
            last = first + len(bodies) - 1
            if self.hold:
                self.held.append(future)
                return future
            self.store.update_committed_index(last)
            self._cond.notify_all()
        future.set_result(last)
        return future

    def get(self, index: int, count: int = 1) -> list[Entry]:
        if index < 0 or index > self.committed_index:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"{index} not committed")
        return self.store.get_range(index, min(index + count, self.committed_index + 1))

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        count = min(max_count, self.committed_index - from_index + 1)
        return self.store.read_columns(from_index, max(count, 0), max_bytes)

    def wait_committed(self, above_index: int, timeout_s: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self.committed_index > above_index, timeout_s)
            return self.committed_index

    def set_incoming_appends(self, probe: Callable[[], int]) -> None:
        self.incoming_appends = probe

    def status(self) -> NodeStatus:
        return NodeStatus(
            group="g",
            self_id="n0",
            role="LEADER" if self.leader else "FOLLOWER",
            term=2,
            leader_id=self.leader_id,
            peers=self.config.peer_map,
            begin_index=self.store.begin_index,
            end_index=self.store.end_index,
            end_term=self.store.end_term,
            committed_index=self.committed_index,
            applied_index=-1,
        )

    def handle_peer_request(self, request: RequestOrResponse) -> Future[RequestOrResponse]:
        self.peer_requests.append(request)
        future: Future[RequestOrResponse] = Future()
        base = {"group": "g", "local_id": "n0", "remote_id": request.local_id, "term": request.term, "leader_id": "n0"}
        answer: RequestOrResponse
        if isinstance(request, VoteRequest):
            answer = VoteResponse(**base, vote_result=VoteResult.ACCEPT)
        elif isinstance(request, HeartBeatRequest):
            answer = HeartBeatResponse(**base)
        elif isinstance(request, PushEntryRequest):
            if request.type is PushType.TRUNCATE:
                self.unanswered.append(future)
                self.left_unanswered.set()
                return future  # never answered (unless a test does): the server times out
            answer = PushEntryResponse(**base, index=request.first_index, count=request.count, end_index=41)
        elif isinstance(request, LeadershipTransferRequest):
            answer = LeadershipTransferResponse(**base, code=ResponseCode.TAKE_LEADERSHIP_FAILED)
        elif isinstance(request, InstallSnapshotStream):
            try:
                self.install_chunks = []
                for chunk in request.chunks:
                    self.install_chunks.append(chunk)
                answer = InstallSnapshotResponse(**base, next_offset=sum(len(c.data) for c in self.install_chunks))
            except DLedgerError as exc:  # a chunk the service refused
                answer = InstallSnapshotResponse(**base, code=exc.code)
        else:
            answer = RequestOrResponse(**base, code=ResponseCode.UNSUPPORTED)
        future.set_result(answer)
        return future

    def leadership_transfer(self, transferee_id: str) -> Future[int]:
        if transferee_id not in self.config.peer_map:
            raise DLedgerError(ResponseCode.UNKNOWN_MEMBER, transferee_id)
        future: Future[int] = Future()
        future.set_result(3)
        return future


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def limits() -> ServiceLimits:
    return ServiceLimits(peer_wait_s=0.5, follow_poll_s=0.05)


@pytest.fixture
def server(node: FakeNode, limits: ServiceLimits) -> Iterator[GrpcServer]:
    srv = GrpcServer(node, "127.0.0.1:0", limits)
    srv.start()
    yield srv
    srv.stop(0)


@pytest.fixture
def channel(server: GrpcServer) -> Iterator[Any]:
    ch = open_channel(f"127.0.0.1:{server.port}")
    yield ch
    ch.close()


@pytest.fixture
def ledger(channel: Any) -> Any:
    return pb_grpc.LedgerStub(channel)


def test_append_on_leader_and_get(ledger: Any) -> None:
    r1 = ledger.Append(pb.AppendRequest(bodies=[b"a"], request_id=7), timeout=WAIT_S)
    assert (r1.code, r1.first_index, r1.count, r1.request_id, r1.leader_id, r1.term) == (200, 0, 1, 7, "n0", 2)
    r2 = ledger.Append(pb.AppendRequest(bodies=[b"b", b"", b"c"]), timeout=WAIT_S)
    assert (r2.code, r2.first_index, r2.count) == (200, 1, 3)
    got = ledger.Get(pb.GetRequest(index=0, count=10), timeout=WAIT_S)
    assert got.code == 200 and got.committed_index == 3
    assert [(e.index, e.body, e.term, e.magic) for e in got.entries] == [
        (0, b"a", 2, 1),
        (1, b"b", 2, 1),
        (2, b"", 2, 1),
        (3, b"c", 2, 1),
    ]
    assert ledger.Get(pb.GetRequest(index=2), timeout=WAIT_S).entries[0].index == 2  # count 0 means 1


def test_get_stops_at_max_bytes_but_returns_at_least_one(ledger: Any) -> None:
    ledger.Append(pb.AppendRequest(bodies=[b"x" * 100] * 5), timeout=WAIT_S)
    assert len(ledger.Get(pb.GetRequest(index=0, count=5, max_bytes=250), timeout=WAIT_S).entries) == 2
    assert len(ledger.Get(pb.GetRequest(index=0, count=5, max_bytes=1), timeout=WAIT_S).entries) == 1


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (pb.GetRequest(index=-1), ResponseCode.INDEX_OUT_OF_RANGE),
        (pb.GetRequest(index=99), ResponseCode.INDEX_OUT_OF_RANGE),
        (pb.GetRequest(index=0, count=-3), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.GetRequest(index=0, max_bytes=-1), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.GetRequest(group="other"), ResponseCode.UNKNOWN_GROUP),
        (pb.GetRequest(remote_id="n7"), ResponseCode.UNKNOWN_MEMBER),
    ],
)
def test_get_errors(ledger: Any, request_: Any, code: int) -> None:
    ledger.Append(pb.AppendRequest(bodies=[b"only"]), timeout=WAIT_S)
    answer = ledger.Get(request_, timeout=WAIT_S)
    assert answer.code == code and not answer.entries and answer.message


def test_huge_count_is_clamped(ledger: Any) -> None:
    ledger.Append(pb.AppendRequest(bodies=[b"e"] * 3), timeout=WAIT_S)
    assert len(ledger.Get(pb.GetRequest(index=0, count=2**31 - 1), timeout=WAIT_S).entries) == 3


def test_append_to_follower_names_the_leader(node: FakeNode, ledger: Any) -> None:
    node.leader = False
    answer = ledger.Append(pb.AppendRequest(bodies=[b"a"]), timeout=WAIT_S)
    assert (answer.code, answer.leader_id, answer.leader_address) == (404, "n1", "127.0.0.1:2")


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (pb.AppendRequest(), ResponseCode.REQUEST_WITH_EMPTY_BODYS),
        (pb.AppendRequest(bodies=[b"x" * (4 * 1024 * 1024)]), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.AppendRequest(bodies=[b""] * 65_537), ResponseCode.UNEXPECTED_ARGUMENT),
        (pb.AppendRequest(bodies=[b"a"], group="nope"), ResponseCode.UNKNOWN_GROUP),
        (pb.AppendRequest(bodies=[b"a"], remote_id="n1"), ResponseCode.UNKNOWN_MEMBER),
    ],
)
def test_append_errors(node: FakeNode, ledger: Any, request_: Any, code: int) -> None:
    answer = ledger.Append(request_, timeout=WAIT_S)
    assert answer.code == code and answer.message
    assert node.store.end_index == -1


def test_message_over_the_limit_is_resource_exhausted(server: GrpcServer, ledger: Any) -> None:
    raw = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        call = raw.unary_unary("/dledger.v1.Ledger/Append")
        with pytest.raises(grpc.RpcError) as info:
            call(pb.AppendRequest(bodies=[b"x" * (65 * 1024 * 1024)]).SerializeToString(), timeout=WAIT_S)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        raw.close()
    assert ledger.Append(pb.AppendRequest(bodies=[b"ok"]), timeout=WAIT_S).code == 200


@pytest.mark.parametrize(
    "method",
    ["/dledger.v1.Ledger/Append", "/dledger.v1.Ledger/Get", "/dledger.v1.Peer/Vote", "/dledger.v1.Peer/Push"],
)
def test_garbage_bytes_are_invalid_argument(channel: Any, method: str) -> None:
    call = channel.unary_unary(method)
    with pytest.raises(grpc.RpcError) as info:
        call(b"\xff\xff\xff\xff\x0f garbage", timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_push_without_type_is_invalid_argument(channel: Any) -> None:
    with pytest.raises(grpc.RpcError) as info:
        pb_grpc.PeerStub(channel).Push(pb.PushEntryRequest(term=1), timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_append_stream_answers_in_order(ledger: Any) -> None:
    requests = [pb.AppendRequest(bodies=[b"s%d" % k] * (k + 1), request_id=k) for k in range(20)]
    requests.insert(5, pb.AppendRequest(request_id=99))  # empty: answered with a code, stream goes on
    answers = list(ledger.AppendStream(iter(requests), timeout=WAIT_S))
    assert [a.request_id for a in answers] == [r.request_id for r in requests]
    assert answers[5].code == ResponseCode.REQUEST_WITH_EMPTY_BODYS
    good = [a for a in answers if a.code == 200]
    assert [a.first_index for a in good] == [k * (k + 1) // 2 for k in range(20)]


def test_append_stream_with_garbage_is_invalid_argument(channel: Any) -> None:
    call = channel.stream_stream("/dledger.v1.Ledger/AppendStream")
    with pytest.raises(grpc.RpcError) as info:
        list(call(iter([pb.AppendRequest(bodies=[b"a"]).SerializeToString(), b"\xff\xff\xff"]), timeout=WAIT_S))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_read_committed_batches(ledger: Any) -> None:
    bodies = [b"body-%03d" % k for k in range(100)]
    ledger.Append(pb.AppendRequest(bodies=bodies), timeout=WAIT_S)
    answers = list(ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=10, max_batch_count=30), timeout=WAIT_S))
    assert [a.code for a in answers] == [200] * 3
    batches = [columns_from_pb(a.batch) for a in answers]
    assert [b.count for b in batches] == [30, 30, 30]
    assert [b.body(k) for b in batches for k in range(b.count)] == bodies[10:]
    ranged = list(ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=95, to_index=98), timeout=WAIT_S))
    assert list(ranged[0].batch.index) == [95, 96, 97] and len(ranged) == 1
    assert list(ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=500), timeout=WAIT_S)) == []
    bad = list(ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=-1), timeout=WAIT_S))
    assert [a.code for a in bad] == [ResponseCode.UNEXPECTED_ARGUMENT]


def test_read_committed_follow_delivers_new_commits(ledger: Any) -> None:
    ledger.Append(pb.AppendRequest(bodies=[b"first"]), timeout=WAIT_S)
    stream = ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=0, to_index=3, follow=True), timeout=WAIT_S)
    first = next(stream)
    assert list(first.batch.index) == [0]
    ledger.Append(pb.AppendRequest(bodies=[b"second", b"third", b"fourth"]), timeout=WAIT_S)
    rest = list(stream)  # ends at to_index
    assert [i for a in rest for i in a.batch.index] == [1, 2]


def test_read_committed_follow_cancel(ledger: Any, server: GrpcServer) -> None:
    stream = ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=0, follow=True), timeout=WAIT_S)
    ledger.Append(pb.AppendRequest(bodies=[b"x"]), timeout=WAIT_S)
    assert list(next(stream).batch.index) == [0]
    stream.cancel()
    # the stream slot comes back: as many new streams as the limit can open
    for _ in range(server.limits.max_read_streams + 2):
        assert list(ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=0), timeout=WAIT_S))


def test_metadata_and_transfer(ledger: Any) -> None:
    meta = ledger.Metadata(pb.MetadataRequest(), timeout=WAIT_S)
    assert (meta.code, meta.leader_id, meta.role, meta.self_id, dict(meta.peers)["n1"]) == (
        200,
        "n0",
        "LEADER",
        "n0",
        "127.0.0.1:2",
    )
    assert ledger.Metadata(pb.MetadataRequest(group="x"), timeout=WAIT_S).code == ResponseCode.UNKNOWN_GROUP
    done = ledger.LeadershipTransfer(pb.LeadershipTransferRequest(transferee_id="n1"), timeout=WAIT_S)
    assert (done.code, done.leader_id, done.term, done.leader_address) == (200, "n1", 3, "127.0.0.1:2")
    unknown = ledger.LeadershipTransfer(pb.LeadershipTransferRequest(transferee_id="n9"), timeout=WAIT_S)
    assert unknown.code == ResponseCode.UNKNOWN_MEMBER
    empty = ledger.LeadershipTransfer(pb.LeadershipTransferRequest(), timeout=WAIT_S)
    assert empty.code == ResponseCode.UNEXPECTED_ARGUMENT


@pytest.mark.parametrize(
    ("fields", "code", "message"),
    [
        ({"term": 5}, ResponseCode.INCONSISTENT_TERM, "the leader's term is 2, not 5"),
        ({"transfer_id": "n1"}, ResponseCode.INCONSISTENT_LEADER, "n0 leads, not n1"),
        ({"term": 2, "transfer_id": "n0"}, ResponseCode.SUCCESS, ""),
    ],
)
def test_a_transfer_guarded_by_leader_and_term_goes_only_when_both_hold(
    node: FakeNode, channel: Any, fields: dict[str, Any], code: ResponseCode, message: str
) -> None:
    """DLedger's --leader and --term: a transfer that names another leader or term is
    refused by the leader, and nothing is handed over."""
    asked: list[str] = []
    plain = node.leadership_transfer
    node.leadership_transfer = lambda to: asked.append(to) or plain(to)  # type: ignore[method-assign]
    answer = pb_grpc.LedgerStub(channel).LeadershipTransfer(
        pb.LeadershipTransferRequest(transferee_id="n1", **fields), timeout=WAIT_S
    )
    assert (answer.code, answer.message) == (code, message)
    assert asked == (["n1"] if code == ResponseCode.SUCCESS else [])


def test_health_and_no_reflection_by_default(channel: Any) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "dledger.v1.Ledger", "dledger.v1.Peer"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    with pytest.raises(grpc.RpcError) as info:
        list(replies)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_reflection_when_asked_for(node: FakeNode, limits: ServiceLimits) -> None:
    srv = GrpcServer(node, "127.0.0.1:0", limits, reflection=True)
    srv.start()
    channel = open_channel(f"127.0.0.1:{srv.port}")
    try:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for r in replies for s in r.list_services_response.service}
        assert {"dledger.v1.Ledger", "dledger.v1.Peer", "grpc.health.v1.Health"} <= names
    finally:
        channel.close()
        srv.stop(0)


def test_port_cannot_be_bound_twice(node: FakeNode, server: GrpcServer) -> None:
    with pytest.raises(BindError, match="cannot listen"):
        GrpcServer(node, f"127.0.0.1:{server.port}")


def test_shutdown_fails_waiting_appends_with_unavailable(node: FakeNode, server: GrpcServer, ledger: Any) -> None:
    node.hold = True
    call = ledger.Append.future(pb.AppendRequest(bodies=[b"pending"]), timeout=WAIT_S)
    wait_until(lambda: node.held)
    server.begin_shutdown()
    with pytest.raises(grpc.RpcError) as info:
        call.result(timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "unknown" in info.value.details()
    with pytest.raises(grpc.RpcError) as later:
        ledger.Append(pb.AppendRequest(bodies=[b"late"]), timeout=WAIT_S)
    assert later.value.code() == grpc.StatusCode.UNAVAILABLE
    answer = health_pb2_grpc.HealthStub(ledger_channel(server)).Check(health_pb2.HealthCheckRequest(), timeout=WAIT_S)
    assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING


def ledger_channel(server: GrpcServer) -> Any:
    return open_channel(f"127.0.0.1:{server.port}")


def test_client_slots_are_bounded(node: FakeNode) -> None:
    srv = GrpcServer(
        node, "127.0.0.1:0", ServiceLimits(max_workers=4, max_client_calls=1, max_append_streams=1, max_read_streams=1)
    )
    srv.start()
    channel = ledger_channel(srv)
    try:
        ledger = pb_grpc.LedgerStub(channel)
        node.hold = True
        pending = ledger.Append.future(pb.AppendRequest(bodies=[b"held"]), timeout=WAIT_S)
        wait_until(lambda: node.held)
        busy = ledger.Append(pb.AppendRequest(bodies=[b"more"]), timeout=WAIT_S)
        assert busy.code == ResponseCode.LEADER_PENDING_FULL
        # a Get takes a slot too (helper M: a Get flood had none, and starved the heartbeats)
        got = ledger.Get(pb.GetRequest(index=0), timeout=WAIT_S)
        assert (got.code, got.message, list(got.entries)) == (ResponseCode.LEADER_PENDING_FULL, TOO_MANY_CALLS, [])
        with pytest.raises(grpc.RpcError) as info:
            list(ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=0), timeout=WAIT_S))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # peers are still served
        answer = pb_grpc.PeerStub(channel).HeartBeat(pb.HeartBeatRequest(**FROM_N1, term=2), timeout=WAIT_S)
        assert answer.code == 200
        node.store.update_committed_index(0)
        node.held[0].set_result(0)
        assert pending.result(timeout=WAIT_S).code == 200
    finally:
        channel.close()
        srv.stop(0)


def test_one_named_caller_cannot_take_every_client_call_slot(node: FakeNode) -> None:
    """Helper M: a read-only certificate kept 140 slow queries running and writers got
    LEADER_PENDING_FULL for the whole attack. A named caller has at most
    `max_calls_per_caller` of the client-call slots; plaintext callers are not told apart."""
    core = GrpcServer(node, "127.0.0.1:0", ServiceLimits(max_client_calls=4, max_calls_per_caller=3)).core
    reader, writer = Identity("client", name="r", role="read"), Identity("client", name="w", role="write")
    assert [core.try_client_slot(reader) for _ in range(3)] == [None, None, None]
    assert (
        core.try_client_slot(reader)
        == "too many client calls at once: client r (read) has 3 running, as many as one caller may"
    )
    assert core.try_client_slot(writer) is None  # the last slot is the writer's
    assert core.try_client_slot(writer) == core.try_client_slot() == TOO_MANY_CALLS  # every slot taken
    core.release_client_slot(reader)
    assert core.try_client_slot(Identity("unknown")) is None  # no name, no share: the slot it freed
    for who in (reader, reader, writer, Identity("unknown")):
        core.release_client_slot(who)
    assert core._caller_shares == {} and [core.try_client_slot() for _ in range(4)] == [None] * 4


def test_one_named_caller_cannot_take_every_stream_slot(node: FakeNode) -> None:
    """A caller with a name (a client certificate or token; here named by a test header
    in place of the TLS guard) holds at most `max_streams_per_caller` streams of a
    method: the rest stay for others. Plaintext callers are not told apart."""
    limits = ServiceLimits(max_read_streams=4, max_append_streams=4, max_streams_per_caller=2, follow_poll_s=0.05)
    srv = GrpcServer(node, "127.0.0.1:0", limits)

    def by_header(context: Any) -> Identity:
        name = dict(context.invocation_metadata() or ()).get("who", "")
        return Identity("client", name=name, role="write") if name else Identity("unknown")

    srv.core.identify = by_header
    srv.start()
    channel = ledger_channel(srv)
    try:
        ledger = pb_grpc.LedgerStub(channel)
        ledger.Append(pb.AppendRequest(bodies=[b"first"]), timeout=WAIT_S)

        def follow(who: str) -> Any:
            stream = ledger.ReadCommitted(
                pb.ReadCommittedRequest(from_index=0, follow=True), timeout=WAIT_S, metadata=(("who", who),)
            )
            assert next(stream).batch.index[0] == 0  # open, holding a slot
            return stream

        held = [follow("alice"), follow("alice")]
        with pytest.raises(grpc.RpcError) as info:
            follow("alice")
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (
            info.value.details()
            == "too many open streams: client alice (write) holds 2 ReadCommitted streams, as many as one caller may"
        )
        assert read_decision("RESOURCE_EXHAUSTED", info.value.details()) is Decision.REDIRECT
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        writer = ledger.AppendStream(iter(requests.get, None), timeout=WAIT_S, metadata=(("who", "alice"),))
        requests.put(pb.AppendRequest(bodies=[b"second"], request_id=1))
        assert next(writer).code == 200  # her append slots are counted apart from her read slots
        held += [follow("bob"), follow("bob")]  # others still get in, up to the method's 4 slots
        with pytest.raises(grpc.RpcError) as info:
            follow("carol")
        assert info.value.details() == "too many open streams: every ReadCommitted slot is taken, try again later"
        alice = Identity("client", name="alice", role="write")
        held.pop(0).cancel()
        wait_until(lambda: srv.core.try_stream_slot("ReadCommitted", alice) is None)  # one of hers came back
        srv.core.release_stream_slot("ReadCommitted", alice)
        held.append(follow("alice"))
        for stream in held:
            stream.cancel()
        requests.put(None)
        assert list(writer) == []
        wait_until(lambda: srv.core._caller_shares == {})  # every named stream gave its slots back
        unnamed = [follow("") for _ in range(4)]  # callers without a name: the method's slots only
        for stream in unnamed:
            stream.cancel()
    finally:
        channel.close()
        srv.stop(0)


def test_readers_and_writers_have_stream_slots_of_their_own(node: FakeNode) -> None:
    """Following ReadCommitted streams holding every read slot do not keep an
    AppendStream out, and an open AppendStream does not keep a reader out."""
    srv = GrpcServer(node, "127.0.0.1:0", ServiceLimits(max_append_streams=1, max_read_streams=1, follow_poll_s=0.05))
    srv.start()
    channel = ledger_channel(srv)
    try:
        ledger = pb_grpc.LedgerStub(channel)
        ledger.Append(pb.AppendRequest(bodies=[b"first"]), timeout=WAIT_S)
        reader = ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=0, follow=True), timeout=WAIT_S)
        assert list(next(reader).batch.index) == [0]  # open, and holding the one read slot
        with pytest.raises(grpc.RpcError) as info:
            list(ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=0), timeout=WAIT_S))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many open streams" in (info.value.details() or "")  # what clients look for
        assert read_decision("RESOURCE_EXHAUSTED", info.value.details()) is Decision.REDIRECT
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        writer = ledger.AppendStream(iter(requests.get, None), timeout=WAIT_S)
        requests.put(pb.AppendRequest(bodies=[b"second"], request_id=1))
        assert next(writer).code == 200  # open, and holding the one append slot
        with pytest.raises(grpc.RpcError) as info:
            list(ledger.AppendStream(iter([pb.AppendRequest(bodies=[b"x"])]), timeout=WAIT_S))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert rpc_decision("RESOURCE_EXHAUSTED", info.value.details()) is Decision.RETRY
        reader.cancel()
        wait_until(lambda: srv.core.try_stream_slot("ReadCommitted") is None)  # the reader's slot comes back
        srv.core.release_stream_slot("ReadCommitted")
        assert [a.code for a in ledger.ReadCommitted(pb.ReadCommittedRequest(from_index=0), timeout=WAIT_S)] == [200]
        requests.put(None)
        assert list(writer) == []
    finally:
        channel.close()
        srv.stop(0)


def test_arrival_gauge_counts_calls_on_their_way_and_forgets_stale_ones() -> None:
    now = [100.0]
    gauge = ArrivalGauge(stale_s=0.05, clock=lambda: now[0])
    gauge.arrived()
    gauge.arrived()
    assert gauge() == 2
    gauge.started()
    assert gauge() == 1
    now[0] += 0.06  # the other call never reached its handler (cancelled in the queue)
    assert gauge() == 0
    gauge.started()  # a handler whose arrival was forgotten meanwhile
    gauge.arrived()
    assert gauge() == 1


def test_append_calls_count_as_on_their_way_until_their_handler_runs(
    node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both workers busy with peer pushes nobody answers: an Append waits in gRPC's queue.
    # Nothing here depends on speed: the pushes are held until the test lets them fail, and
    # an arrival stays counted far longer than the test polls (in service it is 50 ms)
    monkeypatch.setattr(service_core, "ArrivalGauge", partial(ArrivalGauge, stale_s=3 * WAIT_S))
    limits = ServiceLimits(max_workers=2, max_client_calls=1, peer_wait_s=3 * WAIT_S)
    srv = GrpcServer(node, "127.0.0.1:0", limits)
    srv.start()
    channel = ledger_channel(srv)
    try:
        probe = node.incoming_appends
        assert probe is srv.core.incoming_appends and probe() == 0
        push = to_pb(PushEntryRequest(**FROM_N1, term=2, type=PushType.TRUNCATE, first_index=0))
        blocked = [pb_grpc.PeerStub(channel).Push.future(push, timeout=WAIT_S) for _ in range(2)]
        wait_until(lambda: len(node.peer_requests) == 2)
        ledger = pb_grpc.LedgerStub(channel)
        queued_get = ledger.Get.future(pb.GetRequest(index=0), timeout=WAIT_S)
        queued_append = ledger.Append.future(pb.AppendRequest(bodies=[b"queued"]), timeout=WAIT_S)
        wait_until(lambda: probe() == 1)  # the Append (not the Get) counts from its arrival
        for held in node.unanswered:
            held.set_exception(TimeoutError("the node gave up"))
        assert all(f.result(timeout=WAIT_S).code == ResponseCode.TIMEOUT for f in blocked)
        assert queued_append.result(timeout=WAIT_S).code == ResponseCode.SUCCESS
        queued_get.result(timeout=WAIT_S)
        assert probe() == 0  # ... until its handler ran
    finally:
        channel.close()
        srv.stop(0)


# ------------------------------------------------------------------ the transport


@pytest.fixture
def transport(server: GrpcServer) -> Iterator[GrpcTransport]:
    config = DLedgerConfig(group="g", self_id="n1", peers=f"n0-127.0.0.1:{server.port};n1-127.0.0.1:1")
    t = GrpcTransport(config, deadline_ms=int(WAIT_S * 1000))  # a loaded machine answers late, not never
    yield t
    t.close()


@pytest.mark.parametrize(
    "request_",
    [
        VoteRequest(group="g", remote_id="n0", local_id="n1", leader_id="n1", term=5, ledger_end_index=3),
        HeartBeatRequest(group="g", remote_id="n0", local_id="n1", leader_id="n1", term=5),
        PushEntryRequest(
            **FROM_N1,
            term=5,
            first_index=4,
            count=2,
            prev_index=3,
            prev_term=5,
            last_term=5,
            entries=encode_entry(1, 4, 5, 0, b"x") + encode_entry(1, 5, 5, 49, b"y"),
        ),
        LeadershipTransferRequest(
            group="g", remote_id="n0", local_id="n1", term=5, transfer_id="n1", transferee_id="n0"
        ),
    ],
    ids=lambda r: type(r).__name__,
)
def test_transport_round_trip(node: FakeNode, transport: GrpcTransport, request_: RequestOrResponse) -> None:
    answer = transport.send("n0", request_).result(timeout=WAIT_S)
    assert node.peer_requests == [request_]
    assert answer.local_id == "n0" and answer.term == 5 and answer.remote_id == "n1"
    if isinstance(request_, PushEntryRequest):
        assert isinstance(answer, PushEntryResponse) and (answer.index, answer.count, answer.end_index) == (4, 2, 41)
    if isinstance(request_, VoteRequest):
        assert isinstance(answer, VoteResponse) and answer.vote_result is VoteResult.ACCEPT


def test_transport_holds_a_standing_call_per_peer_until_closed(transport: GrpcTransport) -> None:
    # the channel's completion thread then stays up between pushes (no thread per push)
    transport.send("n0", HeartBeatRequest(term=5)).result(timeout=WAIT_S)
    keeper = transport._keepers["n0"]
    for _ in range(3):
        transport.send("n0", HeartBeatRequest(term=5)).result(timeout=WAIT_S)
    assert transport._keepers["n0"] is keeper and not keeper.done()
    transport.close()
    wait_until(keeper.done)
    assert transport._keepers == {}


def test_transport_forgets_a_standing_call_that_ended(transport: GrpcTransport) -> None:
    # e.g. the peer restarted: the next send after KEEPER_RETRY_S opens a new one
    transport.send("n0", HeartBeatRequest(term=5)).result(timeout=WAIT_S)
    keeper = transport._keepers["n0"]
    keeper.cancel()
    wait_until(lambda: "n0" not in transport._keepers)
    transport._keeper_tried.clear()
    transport.send("n0", HeartBeatRequest(term=5)).result(timeout=WAIT_S)
    assert transport._keepers["n0"] is not keeper and not transport._keepers["n0"].done()


def test_transport_node_timeout_is_a_timeout_code(node: FakeNode, server: GrpcServer, limits: ServiceLimits) -> None:
    # the server gives up on the node after limits.peer_wait_s (0.5 s); the transport's
    # deadline is far longer, so the answer is the server's however slow the machine is
    deadline_s = 3 * WAIT_S
    assert deadline_s > 10 * limits.peer_wait_s
    config = DLedgerConfig(group="g", self_id="n1", peers=f"n0-127.0.0.1:{server.port};n1-127.0.0.1:1")
    patient = GrpcTransport(config, deadline_ms=int(deadline_s * 1000))
    try:
        push = PushEntryRequest(**FROM_N1, type=PushType.TRUNCATE, term=1, first_index=0)
        answer = patient.send("n0", push).result(timeout=deadline_s)
    finally:
        patient.close()
    assert node.left_unanswered.is_set()  # the node got the request and never answered it
    assert answer.code == ResponseCode.TIMEOUT  # the server gave up waiting for the node


def test_transport_unknown_peer_and_refused_connection(transport: GrpcTransport) -> None:
    with pytest.raises(DLedgerError) as unknown:
        transport.send("n9", HeartBeatRequest()).result(timeout=WAIT_S)
    assert unknown.value.code == ResponseCode.NETWORK_ERROR
    with pytest.raises(DLedgerError) as refused:  # n1's address has nobody listening
        transport.send("n1", HeartBeatRequest()).result(timeout=WAIT_S)
    assert refused.value.code in (ResponseCode.NETWORK_ERROR, ResponseCode.TIMEOUT)


def test_transport_blackhole_times_out() -> None:
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1)  # accepts TCP in the kernel, never speaks HTTP/2
    try:
        config = DLedgerConfig(self_id="n1", peers=f"n0-127.0.0.1:{hole.getsockname()[1]};n1-127.0.0.1:1")
        t = GrpcTransport(config, deadline_ms=300)
        # the call fails by itself (a hang would end in result()'s TimeoutError instead):
        # the deadline, or the 100 ms connect timeout (the handshake never completes)
        with pytest.raises(DLedgerError) as info:
            t.send("n0", HeartBeatRequest()).result(timeout=WAIT_S)
        assert info.value.code in (ResponseCode.TIMEOUT, ResponseCode.NETWORK_ERROR)
        t.close()
        with pytest.raises(DLedgerError) as closed:
            t.send("n0", HeartBeatRequest()).result(timeout=WAIT_S)
        assert closed.value.code == ResponseCode.NETWORK_ERROR
    finally:
        hole.close()


def test_peer_deadline_is_below_the_election_timeout() -> None:
    assert peer_deadline_ms(DLedgerConfig()) == 3000
    fast = DLedgerConfig(heart_beat_time_interval_ms=500)
    assert peer_deadline_ms(fast) == 1000 < 500 * fast.max_heart_beat_leak
    single = DLedgerConfig(heart_beat_time_interval_ms=500, max_heart_beat_leak=1)
    assert peer_deadline_ms(single) == 250


def _install_chunk(at: int, data: bytes, **changes: Any) -> Any:
    fields: dict[str, Any] = {
        "group": "g",
        "remote_id": "n0",
        "local_id": "n1",
        "leader_id": "n1",
        "term": 2,
        "last_included_index": 5,
        "last_included_term": 2,
        "total_size": 6,
        "total_crc32": zlib.crc32(b"abcdef"),
        "offset": at,
        "data": data,
        "chunk_crc32": zlib.crc32(data),
        "next_pos": -1,
        **changes,
    }
    return pb.InstallSnapshotRequest(**fields)


def test_install_snapshot_streams_its_chunks_to_the_node(channel: Any, node: FakeNode) -> None:
    answer = pb_grpc.PeerStub(channel).InstallSnapshot(
        iter([_install_chunk(0, b"abc"), _install_chunk(3, b"def")]), timeout=WAIT_S
    )
    assert (answer.code, answer.local_id, answer.remote_id, answer.next_offset) == (ResponseCode.SUCCESS, "n0", "n1", 6)
    assert [(c.offset, c.data, c.last_included_index) for c in node.install_chunks] == [(0, b"abc", 5), (3, b"def", 5)]


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"offset": -1}, ResponseCode.UNEXPECTED_ARGUMENT),
        ({"total_size": -6}, ResponseCode.UNEXPECTED_ARGUMENT),
        ({"last_included_index": (1 << 62) + 1}, ResponseCode.UNEXPECTED_ARGUMENT),
        ({"last_included_term": 3}, ResponseCode.UNEXPECTED_ARGUMENT),  # above the sender's term
        ({"group": "other"}, ResponseCode.UNKNOWN_GROUP),
        ({"leader_id": "n0"}, ResponseCode.UNEXPECTED_MEMBER),
        ({"term": (1 << 63) - 1}, ResponseCode.UNEXPECTED_ARGUMENT),
    ],
)
def test_hostile_install_chunks_are_refused_before_the_node_takes_them(
    channel: Any, node: FakeNode, changes: dict[str, Any], code: ResponseCode
) -> None:
    stub = pb_grpc.PeerStub(channel)
    first = stub.InstallSnapshot(iter([_install_chunk(0, b"abc", **changes)]), timeout=WAIT_S)
    assert first.code == code
    assert not any(isinstance(r, InstallSnapshotStream) for r in node.peer_requests)
    chunks = [_install_chunk(0, b"abc"), _install_chunk(3, b"def", **changes)]
    later = stub.InstallSnapshot(iter(chunks), timeout=WAIT_S)
    assert later.code == code and [c.offset for c in node.install_chunks] == [0]


def test_a_health_notice_that_never_completes_does_not_hang_the_shutdown(
    node: FakeNode, limits: ServiceLimits, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The health servicer tells its Watch streams NOT_SERVING under its lock; a stream
    whose write never completes must not keep the server from stopping."""
    srv = GrpcServer(node, "127.0.0.1:0", limits)
    srv.start()
    released = threading.Event()
    monkeypatch.setattr(srv.health, "enter_graceful_shutdown", lambda: released.wait(60))
    monkeypatch.setattr(grpc_server, "HEALTH_SHUTDOWN_S", 0.05)
    stopper = threading.Thread(target=srv.stop, args=(0.1,))
    stopper.start()
    stopper.join(WAIT_S)
    released.set()
    assert not stopper.is_alive(), "stop() waited for the health notice"
    assert srv.wait_for_termination(WAIT_S)


class _Context:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_callback(self, callback: Any) -> bool:
        self.callbacks.append(callback)
        return True


def test_health_watchers_are_told_outside_the_servicer_s_lock() -> None:
    """A watcher's send may wait for a thread that needs the servicer's lock (another
    stream's close callback): the servicer must not hold its lock while it sends."""
    servicer = grpc_server.HealthServicer(experimental_non_blocking=True)
    seen: list[int] = []
    lock_free: list[bool] = []

    def send(response: Any) -> None:
        if response is None:
            return
        seen.append(response.status)
        other = threading.Thread(target=servicer.Check, args=(health_pb2.HealthCheckRequest(service=""), _Context()))
        other.start()
        other.join(WAIT_S)
        lock_free.append(not other.is_alive())

    context = _Context()
    servicer.Watch(health_pb2.HealthCheckRequest(service=""), context, send_response_callback=send)
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    servicer.enter_graceful_shutdown()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)  # ignored after the shutdown
    assert seen == [health_pb2.HealthCheckResponse.SERVING] + [health_pb2.HealthCheckResponse.NOT_SERVING] * 2
    assert lock_free == [True, True, True]
    for callback in context.callbacks:  # the stream closes: the watcher is forgotten
        callback()


def test_install_streams_have_slots_and_one_that_stalls_is_cancelled(node: FakeNode, limits: ServiceLimits) -> None:
    """InstallSnapshot streams waiting for their next chunk hold gRPC workers: past
    `max_install_streams` a stream is refused RESOURCE_EXHAUSTED, and one that sends no
    chunk for `install_idle_s` is cancelled, its slot given back."""
    srv = GrpcServer(node, "127.0.0.1:0", dataclasses.replace(limits, max_install_streams=2, install_idle_s=0.5))
    srv.start()
    arrivals: list[RequestOrResponse] = []
    plain = node.handle_peer_request

    def recording(request: RequestOrResponse) -> Future[RequestOrResponse]:
        if isinstance(request, InstallSnapshotStream):
            arrivals.append(request)
        return plain(request)

    node.handle_peer_request = recording  # type: ignore[method-assign]
    release = threading.Event()

    def stalled() -> Iterator[Any]:
        yield _install_chunk(0, b"abc")
        release.wait(WAIT_S)

    channel = open_channel(f"127.0.0.1:{srv.port}")
    try:
        stub = pb_grpc.PeerStub(channel)
        held = [stub.InstallSnapshot.future(stalled(), timeout=WAIT_S) for _ in range(2)]
        wait_until(lambda: len(arrivals) == 2)  # both hold a slot
        whole = [_install_chunk(0, b"abc"), _install_chunk(3, b"def")]
        with pytest.raises(grpc.RpcError) as refused:
            stub.InstallSnapshot(iter(whole), timeout=WAIT_S)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for call in held:
            with pytest.raises(grpc.RpcError) as cancelled:
                call.result(timeout=WAIT_S)
            assert cancelled.value.code() == grpc.StatusCode.CANCELLED
        answer = stub.InstallSnapshot(iter(whole), timeout=WAIT_S)  # the slots came back
        assert (answer.code, answer.next_offset) == (ResponseCode.SUCCESS, 6)
    finally:
        release.set()
        channel.close()
        srv.stop(0)


def test_a_megabyte_of_id_or_group_is_not_echoed_into_answers_or_the_log(
    channel: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller's group or member id of any length is refused; the answer and the log
    line repeat at most 64 characters of it (they carried all of it: 8 MiB of Vote
    answer and log line)."""
    huge = "z" * (1 << 20)
    caplog.set_level(logging.WARNING, logger="dledger.transport.validate")
    vote = pb_grpc.PeerStub(channel).Vote(
        pb.VoteRequest(group="g", remote_id="n0", local_id=huge, term=1), timeout=WAIT_S
    )
    assert vote.code == ResponseCode.UNKNOWN_MEMBER and vote.remote_id == huge[:64]
    meta = pb_grpc.LedgerStub(channel).Metadata(pb.MetadataRequest(group=huge), timeout=WAIT_S)
    assert meta.code == ResponseCode.UNKNOWN_GROUP
    assert meta.message == f"this member serves group 'g', not '{huge[:64]}' (+{len(huge) - 64} chars)"
    transfer = pb_grpc.LedgerStub(channel).LeadershipTransfer(
        pb.LeadershipTransferRequest(transferee_id=huge, local_id=huge), timeout=WAIT_S
    )
    assert transfer.code == ResponseCode.UNKNOWN_MEMBER and len(transfer.message) < 200
    assert len(transfer.remote_id) == 64
    lines = [r.getMessage() for r in caplog.records]
    assert lines and max(map(len, lines)) < 600
