"""Idempotent producers through a real in-process group over loopback gRPC: numbered
requests append once whatever the retries, leader changes and restarts; gaps, old
epochs and unknown producers are refused with nothing appended; the streaming producer
resends batches whose outcome it does not know and every record lands once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.client import DLedgerClient, ProducerStamp, derive_producer_id
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.entry import MAGIC_RECORD
from dledger.raft import producer_ids
from dledger.record import Record, encode_record, record_stamp, stamp_record_body
from dledger.server import DLedgerServer
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import free_ports
from tests.node.conftest import wait_until

pytestmark = pytest.mark.interaction

TIMINGS = {"heart_beat_time_interval_ms": 200, "min_vote_interval_ms": 50, "max_vote_interval_ms": 250}


class Group:
    """Three servers on loopback that can be stopped and started again on their stores."""

    def __init__(self, base: Path, flush_mode: str = "async") -> None:
        self.base = base
        self.flush_mode = flush_mode
        self.ports = free_ports(3)
        self.peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(self.ports))
        self.servers: dict[str, DLedgerServer] = {}
        for k in range(3):
            self.start(f"n{k}")

    def start(self, node_id: str) -> DLedgerServer:
        store = member_store_config(data_file_size=1 << 20, index_file_size=32 * 4096, flush_mode=self.flush_mode)
        config = DLedgerConfig(
            group="g", self_id=node_id, peers=self.peers, store_base_dir=str(self.base), store=store, **TIMINGS
        )
        server = self.servers[node_id] = DLedgerServer(config).start()
        return server

    def stop(self, node_id: str) -> None:
        self.servers.pop(node_id).shutdown()

    def leader(self) -> DLedgerServer:
        wait_until(lambda: any(s.node.is_leader for s in self.servers.values()), what="a leader")
        return next(s for s in self.servers.values() if s.node.is_leader)

    def close(self) -> None:
        for node_id in list(self.servers):
            self.stop(node_id)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path)
    try:
        yield g
    finally:
        g.close()


@pytest.fixture
def client(group: Group) -> Iterator[DLedgerClient]:
    with DLedgerClient(group.peers, "g", timeout_s=15.0) as c:
        yield c


def _records(pid: int, first: int, count: int) -> list[Record]:
    return [Record(value=b"p%d-s%d" % (pid, seq), key=b"k%d" % seq) for seq in range(first, first + count)]


def _values(client: DLedgerClient) -> list[bytes]:
    end = client.metadata().committed_index
    return [r.value for r in client.get_records(0, end + 1)] if end >= 0 else []


def test_a_resent_request_is_answered_with_the_same_indexes_and_appended_once(client: DLedgerClient) -> None:
    pid = derive_producer_id("test", 1)
    first = client.append_records(_records(pid, 0, 3), stamp=ProducerStamp(pid, 0, 0))
    assert (first.duplicate, first.count, first.runs) == (False, 3, ((first.first_index, 3),))
    again = client.append_records(_records(pid, 0, 3), stamp=ProducerStamp(pid, 0, 0))
    assert (again.duplicate, again.runs, again.first_index) == (True, first.runs, first.first_index)
    nxt = client.append_records(_records(pid, 3, 2), stamp=ProducerStamp(pid, 0, 3))
    assert nxt.first_index == first.first_index + 3 and not nxt.duplicate
    values = _values(client)
    assert [v for v in values if v.startswith(b"p%d-" % pid)] == [b"p%d-s%d" % (pid, s) for s in range(5)]
    # the first record carries the stamp on disk; readers see the record it holds
    body = client.get(first.first_index)[0].body
    assert record_stamp(body)[:4] == (pid, 0, 0, 3)  # type: ignore[index]
    assert client.get_record(first.first_index).key == b"k0"


def test_a_producer_that_starts_again_with_other_records_under_its_id_and_epoch_is_refused(
    client: DLedgerClient,
) -> None:
    """A restarted process with a stable id (epoch 0 again) got its new records
    acknowledged at the old records' indexes, as duplicates, and none was appended
    (helper H #1). The leader now compares the records the log holds for those numbers:
    another record is PRODUCER_FENCED; the same one resent (a new timestamp) is still a
    duplicate, and a higher epoch starts the producer again."""
    pid = derive_producer_id("restarted", 1)
    first = client.append_records(_records(pid, 0, 3), stamp=ProducerStamp(pid, 0, 0))
    other = [Record(value=b"run2-%d" % k, key=b"k%d" % k) for k in range(3)]
    with pytest.raises(DLedgerError) as fenced:
        client.append_records(other, stamp=ProducerStamp(pid, 0, 0))
    assert fenced.value.code is ResponseCode.PRODUCER_FENCED
    assert f"sequence 0 is the record at index {first.first_index}" in str(fenced.value)
    mixed = [*_records(pid, 1, 1), Record(value=b"run2-2", key=b"k2"), Record(value=b"new")]  # seq 2 differs
    with pytest.raises(DLedgerError, match=f"sequence 2 is the record at index {first.first_index + 2}"):
        client.append_records(mixed, stamp=ProducerStamp(pid, 0, 1))
    again = client.append_records(_records(pid, 0, 3), stamp=ProducerStamp(pid, 0, 0))
    assert again.duplicate and again.runs == first.runs
    with client.producer(idempotent=True, producer_id=pid, epoch=1) as producer:
        producer.send(b"run2-0").result(10)  # a new epoch: appended
    assert [v for v in _values(client) if v.startswith((b"p%d-" % pid, b"run2"))] == [
        *(b"p%d-s%d" % (pid, s) for s in range(3)),
        b"run2-0",
    ]


def test_gaps_old_epochs_and_unknown_producers_are_refused_with_nothing_appended(client: DLedgerClient) -> None:
    pid = derive_producer_id("test", 2)
    client.append_records(_records(pid, 0, 2), stamp=ProducerStamp(pid, 1, 0))
    before = client.metadata().committed_index
    cases = [
        (ProducerStamp(pid, 1, 5), ResponseCode.OUT_OF_ORDER_SEQUENCE, "expected sequence 2"),
        (ProducerStamp(pid, 0, 2), ResponseCode.PRODUCER_FENCED, "current epoch 1"),
        (ProducerStamp(pid + 1, 0, 7), ResponseCode.UNKNOWN_PRODUCER, "not known"),
    ]
    for stamp, code, text in cases:
        with pytest.raises(DLedgerError, match=text) as info:
            client.append_records(_records(pid, stamp.first_seq, 1), stamp=stamp)
        assert info.value.code == code
    assert client.metadata().committed_index == before
    # a new epoch starts again at 0 and fences the old one
    client.append_records(_records(pid, 0, 1), stamp=ProducerStamp(pid, 2, 0))
    with pytest.raises(DLedgerError) as info:
        client.append_records(_records(pid, 2, 1), stamp=ProducerStamp(pid, 1, 2))
    assert info.value.code == ResponseCode.PRODUCER_FENCED


def test_hostile_stamped_requests_are_refused_before_anything_is_appended(group: Group, client: DLedgerClient) -> None:
    leader = group.leader()
    port = group.ports[int(leader.config.self_id[1:])]
    stub = pb_grpc.LedgerStub(open_channel(f"127.0.0.1:{port}"))
    record = encode_record(b"v")
    before = leader.node.store.end_index
    bad = [
        pb.AppendRequest(group="g", bodies=[record], magic=0, stamp=pb.ProducerStamp(producer_id=1)),
        pb.AppendRequest(group="g", bodies=[record], magic=MAGIC_RECORD, stamp=pb.ProducerStamp(producer_id=-1)),
        pb.AppendRequest(group="g", bodies=[record], magic=MAGIC_RECORD, stamp=pb.ProducerStamp(epoch=-5)),
        pb.AppendRequest(  # the second record's sequence number would be 2^63
            group="g", bodies=[record, record], magic=MAGIC_RECORD, stamp=pb.ProducerStamp(first_sequence=2**63 - 1)
        ),
        # a client may not write a stamp of its own
        pb.AppendRequest(group="g", bodies=[stamp_record_body(record, 9, 0, 0, 1, 1)], magic=MAGIC_RECORD),
        pb.AppendRequest(
            group="g",
            bodies=[stamp_record_body(record, 9, 0, 0, 1, 1)],
            magic=MAGIC_RECORD,
            stamp=pb.ProducerStamp(producer_id=9),
        ),
        pb.AppendRequest(group="g", bodies=[b"\x01garbage"], magic=MAGIC_RECORD, stamp=pb.ProducerStamp(producer_id=9)),
    ]
    for request in bad:  # wait_for_ready: a refused first connect is retried (seen rarely right after start)
        answer = stub.Append(request, timeout=10, wait_for_ready=True)
        assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT, (request, answer)
    assert leader.node.store.end_index == before


def test_duplicates_are_known_after_a_leader_change_and_after_every_member_restarts(
    group: Group, client: DLedgerClient
) -> None:
    pid = derive_producer_id("test", 3)
    first = client.append_records(_records(pid, 0, 4), stamp=ProducerStamp(pid, 0, 0))
    old = group.leader().config.self_id
    group.stop(old)
    assert client.append_records(_records(pid, 0, 4), stamp=ProducerStamp(pid, 0, 0)).runs == first.runs
    group.start(old)
    for node_id in list(group.servers):
        group.stop(node_id)
    for k in range(3):
        group.start(f"n{k}")
    again = client.append_records(_records(pid, 0, 4), stamp=ProducerStamp(pid, 0, 0))
    assert (again.duplicate, again.runs) == (True, first.runs)
    assert client.append_records(_records(pid, 4, 1), stamp=ProducerStamp(pid, 0, 4)).first_index > first.last_index


def test_the_idempotent_producer_lands_every_record_once_across_a_leader_failure(
    group: Group, client: DLedgerClient
) -> None:
    count = 3000
    with client.producer(idempotent=True, linger_ms=1, max_batch_count=50, max_in_flight=5) as producer:
        pid = producer.stamp.producer_id  # type: ignore[union-attr]
        futures = [producer.send(b"r%d" % k) for k in range(count // 2)]
        wait_until(lambda: producer.stats.acked >= 200, what="some batches acknowledged")
        group.stop(group.leader().config.self_id)  # batches in flight: their outcome unknown
        futures += [producer.send(b"r%d" % k) for k in range(count // 2, count)]
        assert producer.flush(60)
    indexes = [f.result() for f in futures]
    assert len(set(indexes)) == count
    values = [v for v in _values(client) if v.startswith(b"r")]
    assert values == [b"r%d" % k for k in range(count)]  # each once, in send order
    assert pid < 2**62


def test_the_leader_allocates_producer_ids_unique_across_leaders(group: Group, client: DLedgerClient) -> None:
    first = [client.init_producer() for _ in range(3)]
    group.stop(group.leader().config.self_id)
    later = [client.init_producer() for _ in range(3)]
    ids = first + later
    assert len(set(ids)) == 6 and all(0 <= i < 2**62 for i in ids)
    assert len({i >> 20 for i in first}) == 1 and {i >> 20 for i in later}.isdisjoint({i >> 20 for i in first})
    # a follower refuses to allocate: only the leader knows which ids its term gave
    follower = next(s for s in group.servers.values() if not s.node.is_leader)
    port = group.ports[int(follower.config.self_id[1:])]
    stub = pb_grpc.LedgerStub(open_channel(f"127.0.0.1:{port}"))
    answer = stub.InitProducer(pb.InitProducerRequest(group="g"), timeout=10, wait_for_ready=True)
    assert answer.code == ResponseCode.NOT_LEADER and answer.producer_id == 0


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_producer_ids_keep_coming_however_many_are_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush_mode: str
) -> None:
    """A caller that asks for id after id never runs the leader out of them: each block
    of ids is named after a committed entry of the term, and a quiet leader appends a
    NOOP for the next one (the client retries LEADER_NOT_READY meanwhile)."""
    monkeypatch.setattr(producer_ids, "BLOCK_IDS", 3)
    group = Group(tmp_path, flush_mode)
    try:
        with DLedgerClient(group.peers, "g", timeout_s=15.0) as client:
            ids = [client.init_producer() for _ in range(10)]
            assert len(set(ids)) == 10 and all(2**61 <= i < 2**62 for i in ids)
            blocks = sorted({(i - 2**61) >> 20 for i in ids})
            assert len(blocks) == 4  # 3 + 3 + 3 + 1
            leader = group.leader().node
            entries = [leader.store.get(b) for b in blocks]
            assert all(e.term == leader.term for e in entries) and blocks[-1] <= leader.committed_index
            with client.producer(idempotent=True, producer_id=ids[-1]) as producer:
                assert producer.send(b"x").result(15) > blocks[-1]
    finally:
        group.close()


def test_encoded_record_bodies_append_as_records_numbered_or_not(client: DLedgerClient) -> None:
    pid = derive_producer_id("test", 4)
    bodies = [encode_record(b"b%d" % k, key=b"k") for k in range(3)]
    first = client.append_record_bodies(bodies, stamp=ProducerStamp(pid, 0, 0))
    again = client.append_record_bodies(bodies, stamp=ProducerStamp(pid, 0, 0))
    assert not first.duplicate and again.duplicate and again.runs == first.runs
    plain = client.append_record_bodies(bodies)  # not numbered: appended again
    assert plain.first_index > first.last_index and plain.count == 3
    assert [r.value for r in client.get_records(plain.first_index, 3)] == [b"b0", b"b1", b"b2"]
    with pytest.raises(DLedgerError) as info:
        client.append_record_bodies([b"not a record"], stamp=ProducerStamp(pid, 0, 3))
    assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    with pytest.raises(ValueError, match="empty"):
        client.append_record_bodies([])
