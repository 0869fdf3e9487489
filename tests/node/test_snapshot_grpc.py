"""InstallSnapshot over real gRPC members (in-process `DLedgerServer`s on free loopback
ports, file stores): a follower left behind a compacted log, or wiped, is brought back
by a chunked install; a stream cut short resumes from the last good offset; hostile
chunks are refused with the right code and change nothing."""

from __future__ import annotations

import dataclasses
import shutil
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.node import DLedgerNode
from dledger.raft.messages import InstallSnapshotRequest
from dledger.server import DLedgerServer
from dledger.transport.convert import from_pb, pb_grpc, to_pb
from dledger.transport.grpc_client import open_channel
from tests.node.conftest import settled, wait_until
from tests.node.snapmachine import SumMachine
from tests.security.conftest import free_ports

TIMINGS: dict[str, Any] = {
    "heart_beat_time_interval_ms": 200,
    "max_heart_beat_leak": 3,
    "min_vote_interval_ms": 50,
    "max_vote_interval_ms": 250,
    "max_push_timeout_ms": 300,
    "enable_snapshot": True,
    "snapshot_threshold": 20,
}


class GrpcGroup:
    """Three members n0..n2, each a DLedgerServer with a SumMachine."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ids = ["n0", "n1", "n2"]
        ports = free_ports(3)
        self.addresses = {i: f"127.0.0.1:{p}" for i, p in zip(self.ids, ports, strict=True)}
        self.peers = ";".join(f"{i}-{a}" for i, a in self.addresses.items())
        self.servers: dict[str, DLedgerServer] = {}
        self.machines: dict[str, SumMachine] = {}
        for node_id in self.ids:
            self.start(node_id)
        self.settle()

    def settle(self) -> None:
        """Wait until every member follows one leader in one term and none holds its
        vote (a member that founded late may stand once before it hears the leader)."""
        wait_until(lambda: settled(self.node(i).status() for i in self.ids), what="one leader that all follow")

    def config(self, node_id: str, **changes: Any) -> DLedgerConfig:
        store = member_store_config(data_file_size=1 << 20, index_file_size=32 * 4096)
        options = {**TIMINGS, **changes}
        return DLedgerConfig(
            group="g", self_id=node_id, peers=self.peers, store_base_dir=str(self.base), store=store, **options
        )

    def start(self, node_id: str, **changes: Any) -> DLedgerServer:
        machine = self.machines[node_id] = SumMachine()

        def factory(cfg: DLedgerConfig, transport: Any) -> DLedgerNode:
            return DLedgerNode(cfg, transport, state_machine=machine)

        server = DLedgerServer(self.config(node_id, **changes), node_factory=factory).start()
        self.servers[node_id] = server
        return server

    def stop(self, node_id: str) -> None:
        self.servers.pop(node_id).shutdown(grace_s=0.5)

    def node(self, node_id: str) -> DLedgerNode:
        node = self.servers[node_id].node
        assert node is not None
        return node

    def leader(self) -> DLedgerNode:
        found: list[DLedgerNode] = []

        def one() -> bool:
            found[:] = [self.node(i) for i in self.servers if self.node(i).is_leader]
            return len(found) == 1

        wait_until(one, what="a leader")
        return found[0]

    def close(self) -> None:
        for node_id in list(self.servers):
            self.stop(node_id)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[GrpcGroup]:
    made = GrpcGroup(tmp_path)
    yield made
    made.close()


def append(node: DLedgerNode, values: range) -> None:
    for value in values:
        node.append([str(value).encode()]).result(10)


def compact_past(group: GrpcGroup, leader: DLedgerNode, start: int) -> int:
    """Append until the leader compacted its log past index 30; returns the next value."""
    value = start
    while leader.store.begin_index <= 30:
        append(leader, range(value, value + 10))
        value += 10
        wait_until(lambda: leader.applied_index == leader.store.end_index, what="apply")
    return value


@pytest.mark.parametrize("wiped", [False, True], ids=["left-behind", "wiped"])
def test_follower_is_brought_back_by_a_chunked_install_over_grpc(group: GrpcGroup, wiped: bool) -> None:
    leader = group.leader()
    append(leader, range(5))
    lagging = next(i for i in group.ids if i != leader.config.self_id)
    wait_until(lambda: group.node(lagging).applied_index >= 4, what="the follower applied")
    group.stop(lagging)
    value = compact_past(group, leader, 5)
    if wiped:
        shutil.rmtree(group.config(lagging).default_path)
        group.start(lagging, initial_cluster_state="existing")
    else:
        group.start(lagging)
    follower = group.node(lagging)
    wait_until(lambda: follower.applied_index >= leader.store.end_index, 60, what="caught up by install")
    assert group.machines[lagging].loads, "an installed snapshot was loaded"
    append(leader, range(value, value + 10))  # the log continues after the install
    end = leader.store.end_index
    wait_until(lambda: follower.applied_index >= end, 60, what="pushes after the install")
    wait_until(lambda: leader.applied_index >= end, 60, what="the leader's own apply")  # its own thread
    expected = (sum(range(value + 10)), value + 10)
    assert group.machines[lagging].state() == group.machines[leader.config.self_id].state() == expected


# -- the follower's side, driven chunk by chunk through a raw stub


def chunks_of(data: bytes, header: InstallSnapshotRequest, start: int, size: int) -> list[InstallSnapshotRequest]:
    out = []
    for offset in range(start, len(data), size):
        piece = data[offset : offset + size]
        out.append(dataclasses.replace(header, offset=offset, data=piece, chunk_crc32=zlib.crc32(piece)))
    return out


def install_header(leader: DLedgerNode, target: str, data: bytes, index: int) -> InstallSnapshotRequest:
    member = leader.core.member_state
    return InstallSnapshotRequest(
        **member.request_header(target),
        term=leader.term,
        last_included_index=index,
        last_included_term=leader.term,
        total_size=len(data),
        total_crc32=zlib.crc32(data),
        next_pos=-1,
    )


def stream(group: GrpcGroup, target: str, chunks: list[InstallSnapshotRequest], break_after: int | None = None) -> Any:
    """Send `chunks` to `target`; with `break_after` the client cancels the stream after
    that many chunks (a broken stream). Returns the decoded answer or None."""
    channel = open_channel(group.addresses[target])
    try:
        stub = pb_grpc.PeerStub(channel)

        def messages() -> Iterator[Any]:
            for n, chunk in enumerate(chunks):
                if break_after is not None and n == break_after:
                    wait_until(partial(reached, group, target, chunk.offset), what="the chunks sent so far")
                    raise RuntimeError("connection lost")
                yield to_pb(chunk)

        try:
            return from_pb(stub.InstallSnapshot(messages(), timeout=30))
        except grpc.RpcError:
            return None
    finally:
        channel.close()


def reached(group: GrpcGroup, target: str, offset: int) -> bool:
    """Whether `target`'s install_tmp/data holds `offset` bytes."""
    tmp = Path(group.config(target).default_path) / "snapshot" / "install_tmp" / "data"
    return tmp.exists() and tmp.stat().st_size >= offset


@pytest.fixture
def quiet(group: GrpcGroup) -> tuple[DLedgerNode, str]:
    """The leader, in a term above 0 (a test forges a term below it), and a follower
    that follows it."""
    leader = group.leader()
    append(leader, range(3))
    if leader.status().term == 0:  # DLedger's first round stands in term 0
        other = next(i for i in group.ids if i != leader.config.self_id)
        wait_until(lambda: group.node(other).status().vote_hold == "", what="a member that votes")
        leader.leadership_transfer(other).result(10)
        leader = group.leader()
    target = next(i for i in group.ids if i != leader.config.self_id)
    follower = group.node(target)
    wait_until(
        lambda: follower.leader_id == leader.config.self_id and follower.applied_index == leader.store.end_index,
        what="a follower that caught up",
    )
    return leader, target


def ahead_of(follower: DLedgerNode) -> int:
    """An index past the follower's log, where a snapshot is worth installing (the
    leader's log ends there too in the story these tests tell)."""
    return follower.store.end_index + 10


def test_a_snapshot_at_or_below_the_committed_index_is_not_loaded(
    group: GrpcGroup, quiet: tuple[DLedgerNode, str]
) -> None:
    """A stale install (delayed, resent, or forged) is answered SUCCESS and changes
    nothing: loaded, it took the machine back to the snapshot while the applied index
    stayed where it was, so the entries after it were never applied again."""
    leader, target = quiet
    follower = group.node(target)
    data = b"[0, 1, 1]"
    for index in (0, follower.committed_index):
        before = (follower.store.begin_index, follower.store.end_index, follower.committed_index)
        answer = stream(group, target, [install_header(leader, target, data, index=index)])
        assert answer.code == ResponseCode.SUCCESS and answer.next_offset == len(data)
        assert (follower.store.begin_index, follower.store.end_index, follower.committed_index) == before
    assert group.machines[target].loads == []
    assert not list((Path(follower.config.default_path) / "snapshot").glob("snapshot_*")), "nothing was published"
    append(leader, range(3, 6))  # and the member goes on applying from its own log
    wait_until(lambda: follower.applied_index >= leader.store.end_index, what="replication after the stale install")
    assert group.machines[target].state() == (sum(range(6)), 6)


def test_broken_stream_resumes_from_the_last_good_offset(group: GrpcGroup, quiet: tuple[DLedgerNode, str]) -> None:
    leader, target = quiet
    follower = group.node(target)
    data = b"[0, 1, 1]" + b" " * 300_000  # (total, count, last) as SumMachine saves them
    index = ahead_of(follower)
    header = install_header(leader, target, data, index=index)
    chunks = chunks_of(data, header, 0, 64 * 1024)
    assert stream(group, target, chunks, break_after=3) is None  # cut after 3 chunks
    received = 3 * 64 * 1024
    # a new stream starting at 0 is told where to resume, not made to start over
    probe = dataclasses.replace(header, offset=0, data=b"", chunk_crc32=0)
    answer = stream(group, target, [probe])
    assert answer.code == ResponseCode.INSTALL_SNAPSHOT_ERROR and answer.next_offset == received
    tmp = Path(follower.config.default_path) / "snapshot" / "install_tmp" / "data"
    assert tmp.stat().st_size == received
    answer = stream(group, target, chunks_of(data, header, received, 64 * 1024))
    assert answer.code == ResponseCode.SUCCESS and answer.next_offset == len(data)
    assert group.machines[target].loads == [1]
    assert follower.snapshots is not None and follower.snapshots.last_index == index


def _tamper(chunk: InstallSnapshotRequest, **changes: Any) -> InstallSnapshotRequest:
    return dataclasses.replace(chunk, **changes)


HOSTILE = {
    "bad-crc": (lambda c: _tamper(c, chunk_crc32=c.chunk_crc32 ^ 1), ResponseCode.INSTALL_SNAPSHOT_ERROR),
    "wrong-offset": (lambda c: _tamper(c, offset=c.offset + 5), ResponseCode.INSTALL_SNAPSHOT_ERROR),
    "negative-offset": (lambda c: _tamper(c, offset=-1), ResponseCode.UNEXPECTED_ARGUMENT),
    "offset-past-size": (lambda c: _tamper(c, offset=c.total_size + 1), ResponseCode.UNEXPECTED_ARGUMENT),
    "negative-size": (lambda c: _tamper(c, total_size=-5), ResponseCode.UNEXPECTED_ARGUMENT),
    "huge-size": (lambda c: _tamper(c, total_size=(1 << 63) - 1), ResponseCode.UNEXPECTED_ARGUMENT),
    "huge-index": (lambda c: _tamper(c, last_included_index=(1 << 63) - 1), ResponseCode.UNEXPECTED_ARGUMENT),
    "negative-index": (lambda c: _tamper(c, last_included_index=-1), ResponseCode.UNEXPECTED_ARGUMENT),
    "term-above-own": (lambda c: _tamper(c, last_included_term=c.term + 1), ResponseCode.UNEXPECTED_ARGUMENT),
    "stale-term": (lambda c: _tamper(c, term=c.term - 1, last_included_term=0), ResponseCode.EXPIRED_TERM),
    "wrong-group": (lambda c: _tamper(c, group="other"), ResponseCode.UNKNOWN_GROUP),
    "wrong-group-id": (lambda c: _tamper(c, group_id="f00d"), ResponseCode.UNKNOWN_GROUP),
    "not-the-leader": (lambda c: _tamper(c, leader_id=c.remote_id), ResponseCode.UNEXPECTED_MEMBER),
    "chunk-past-size": (lambda c: _tamper(c, data=b"x" * (c.total_size + 1)), ResponseCode.UNEXPECTED_ARGUMENT),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("position", ["first", "later"])
def test_hostile_chunks_are_refused_and_change_nothing(
    group: GrpcGroup, quiet: tuple[DLedgerNode, str], case: str, position: str
) -> None:
    leader, target = quiet
    follower = group.node(target)
    data = b"[0, 1, 1]" + b" " * 20_000
    header = install_header(leader, target, data, index=ahead_of(follower))
    chunks = chunks_of(data, header, 0, 4096)
    spoil, code = HOSTILE[case]
    at = 0 if position == "first" else 2
    chunks[at] = spoil(chunks[at])
    before = (follower.store.begin_index, follower.store.end_index, follower.committed_index, follower.applied_index)
    answer = stream(group, target, chunks)
    assert answer is not None and answer.code == code, answer
    if position == "later":
        assert answer.next_offset in (0, 2 * 4096)  # what was written before stays, for a resume
    snapshot_root = Path(follower.config.default_path) / "snapshot"
    assert not list(snapshot_root.glob("snapshot_*")), "nothing was published"
    assert group.machines[target].loads == []
    after = (follower.store.begin_index, follower.store.end_index, follower.committed_index, follower.applied_index)
    assert after == before
    append(leader, range(3, 6))  # the member still takes pushes
    wait_until(lambda: follower.applied_index >= leader.store.end_index, what="replication after the refusal")
