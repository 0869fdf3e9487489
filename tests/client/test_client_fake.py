"""DLedgerClient against the fake Ledger servers: discovery, redirects, when it retries
and when it must report an unknown outcome, reads, status and leadership transfer."""

from __future__ import annotations

import threading

import grpc
import pytest

from dledger.client import DLedgerClient, IndeterminateError, Target
from dledger.clock import ManualClock
from dledger.codes import DLedgerError, ResponseCode
from tests.client.fake_ledger import Action, FakeCluster

pytestmark = pytest.mark.unit


def test_append_returns_indexes_and_get_reads_them(client: DLedgerClient, fake: FakeCluster) -> None:
    assert client.append(b"a") == 0
    first = client.append_many([b"b", b"c", b"d"])
    assert first == 1  # the batch occupies 1..3
    result = client.append_batch([b"e", b"f"])
    assert (result.first_index, result.count, result.last_index, result.leader_id) == (4, 2, 5, "n0")
    entries = client.get(1, count=3)
    assert [(e.index, e.body) for e in entries] == [(1, b"b"), (2, b"c"), (3, b"d")]
    assert fake.log.bodies == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_discovery_finds_the_leader_without_a_redirect(fake: FakeCluster) -> None:
    fake.log.leader = "n2"
    with DLedgerClient(fake.peers, timeout_s=2.0) as client:
        assert client.append(b"x") == 0
        assert client.leader == Target("n2", fake.log.members["n2"])
    assert [len(fake[n].append_requests) for n in ("n0", "n1", "n2")] == [0, 0, 1]


def test_not_leader_redirect_follows_the_hint_and_appends_once(client: DLedgerClient, fake: FakeCluster) -> None:
    client.leader = Target("n0", fake.log.members["n0"])
    fake.log.leader = "n1"  # n0 answers NOT_LEADER naming n1
    assert client.append(b"x") == 0
    assert len(fake["n0"].append_requests) == 1 and len(fake["n1"].append_requests) == 1
    assert client.leader is not None and client.leader.node_id == "n1"
    assert fake.log.bodies == [b"x"]


def test_not_leader_without_a_hint_rediscovers(client: DLedgerClient, fake: FakeCluster) -> None:
    client.leader = Target("n0", fake.log.members["n0"])
    fake.log.leader = "n2"
    fake["n0"].script(Action("not_leader", hint=None))
    assert client.append(b"x") == 0
    assert len(fake["n2"].append_requests) == 1


def test_a_dead_leader_is_skipped_because_nothing_was_sent(client: DLedgerClient, fake: FakeCluster) -> None:
    assert client.append(b"first") == 0
    fake["n0"].stop()  # connection refused from now on
    fake.log.leader = "n1"
    assert client.append(b"second") == 1
    assert fake.log.bodies == [b"first", b"second"]


def test_leader_pending_full_is_retried_after_a_backoff(client: DLedgerClient, fake: FakeCluster) -> None:
    full = Action("code", code=ResponseCode.LEADER_PENDING_FULL)
    fake["n0"].script(full, full)
    assert client.append(b"x") == 0
    assert len(fake["n0"].append_requests) == 3
    assert fake.log.bodies == [b"x"]


def test_shutting_down_refusal_is_retried_elsewhere(client: DLedgerClient, fake: FakeCluster) -> None:
    client.leader = Target("n0", fake.log.members["n0"])
    fake["n0"].script(Action("abort", status=grpc.StatusCode.UNAVAILABLE, details="n0 is shutting down"))
    fake.log.leader = "n1"
    assert client.append(b"x") == 0
    assert fake.log.bodies == [b"x"]


@pytest.mark.parametrize(
    "action",
    [
        Action("code", code=ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, append=True),
        Action("code", code=ResponseCode.TERM_CHANGED, append=True),
        Action("code", code=ResponseCode.INTERNAL_ERROR, append=False),
        Action("abort", status=grpc.StatusCode.UNAVAILABLE, details="Socket closed", append=True),
        Action(
            "abort",
            status=grpc.StatusCode.UNAVAILABLE,
            details="n0 is shutting down; the outcome of this append is unknown",
            append=True,
        ),
        Action("hang", append=True),
    ],
    ids=["quorum-timeout", "term-changed", "internal", "socket-closed", "shutdown-waiting", "deadline"],
)
def test_unknown_outcomes_are_reported_not_retried(fake: FakeCluster, action: Action) -> None:
    fake["n0"].script(action)
    # only a hang waits for the deadline; the leader is known (and its channel open) first,
    # so that the append, not the discovery, is what the deadline cuts short
    with DLedgerClient(fake.peers, timeout_s=1.0 if action.kind == "hang" else 10.0) as client:
        client.discover(client.clock.now_ms() + 10_000)
        with pytest.raises(IndeterminateError) as info:
            client.append(b"x")
        assert "outcome unknown" in str(info.value)
    assert len(fake["n0"].append_requests) == 1  # never sent twice
    assert sum(len(m.append_requests) for m in fake.members.values()) == 1


def test_deadline_is_reported_as_timeout(fake: FakeCluster) -> None:
    fake["n0"].script(Action("hang"))
    with DLedgerClient(fake.peers, timeout_s=0.3) as client:
        client.discover(client.clock.now_ms() + 10_000)  # not within the append's 0.3 s
        with pytest.raises(IndeterminateError) as info:
            client.append(b"x")
    assert info.value.code is ResponseCode.TIMEOUT


def test_a_leader_that_did_not_answer_in_time_is_not_asked_first_again(fake: FakeCluster) -> None:
    """A paused leader (SIGSTOP) while the others elect another: the timed-out request is
    indeterminate, and the next one goes to the new leader instead of waiting for the old
    one again."""
    fake["n0"].script(Action("hang"))
    with DLedgerClient(fake.peers, timeout_s=0.5) as client:
        client.discover(client.clock.now_ms() + 10_000)
        with pytest.raises(IndeterminateError):
            client.append(b"x")
        fake.log.leader = "n1"  # the others elected n1 meanwhile
        fake["n0"].script(Action("hang"))  # n0 is still paused
        assert client.append(b"y") >= 0
    assert len(fake["n0"].append_requests) == 1
    assert len(fake["n1"].append_requests) == 1


def test_definite_refusals_raise_dledger_error(client: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].script(Action("code", code=ResponseCode.UNEXPECTED_ARGUMENT))
    with pytest.raises(DLedgerError) as info:
        client.append(b"x")
    assert not isinstance(info.value, IndeterminateError)
    assert info.value.code is ResponseCode.UNEXPECTED_ARGUMENT
    with pytest.raises(ValueError, match="empty"):
        client.append_many([])


def test_no_leader_until_the_deadline_is_a_definite_not_leader(fake: FakeCluster) -> None:
    fake.log.leader = None
    with DLedgerClient(fake.peers, timeout_s=0.4) as client, pytest.raises(DLedgerError) as info:
        client.append(b"x")
    assert not isinstance(info.value, IndeterminateError)
    assert info.value.code is ResponseCode.NOT_LEADER
    assert fake.log.bodies == []


def test_nobody_reachable_is_a_definite_network_error(fake: FakeCluster) -> None:
    peers = fake.peers
    fake.close()
    with DLedgerClient(peers, timeout_s=0.4) as client, pytest.raises(DLedgerError) as info:
        client.append(b"x")
    assert not isinstance(info.value, IndeterminateError)
    assert info.value.code is ResponseCode.NETWORK_ERROR


def test_members_that_all_refuse_the_client_fail_it_at_once(fake: FakeCluster) -> None:
    """A wrong group or a token no member takes cannot change by waiting: the first round
    of discovery that every member refuses ends the call with their code and text,
    before any backoff sleep (NETWORK_ERROR after the whole timeout before)."""
    for node_id in fake.log.members:
        fake[node_id].metadata_refusal = Action("code", code=ResponseCode.UNKNOWN_GROUP, details="not 'nosuch'")
    clock = ManualClock()
    with DLedgerClient(fake.peers, timeout_s=30, clock=clock) as client, pytest.raises(DLedgerError) as info:
        client.append(b"x")
    assert info.value.code is ResponseCode.UNKNOWN_GROUP
    assert "refused by n0, n1, n2: UNKNOWN_GROUP: not 'nosuch'" in info.value.message
    assert clock.now_ms() == 0  # no backoff: one round decided it
    for node_id in fake.log.members:
        fake[node_id].metadata_refusal = Action(
            "abort", status=grpc.StatusCode.UNAUTHENTICATED, details="unknown bearer token"
        )
    with DLedgerClient(fake.peers, timeout_s=30, clock=clock) as client, pytest.raises(DLedgerError) as info:
        client.append(b"x")
    assert info.value.code is ResponseCode.ACCESS_DENIED  # was UNEXPECTED_ARGUMENT (411), misleading
    assert "refused by n0, n1, n2: UNAUTHENTICATED unknown bearer token" in info.value.message
    assert clock.now_ms() == 0 and fake.log.bodies == []


def test_a_refusal_beside_silent_members_is_reported_at_the_deadline(fake: FakeCluster) -> None:
    """One member refuses, the others are down: they may come back serving the group, so
    discovery waits out its deadline, then reports the refusal, not a network error."""
    fake["n0"].metadata_refusal = Action("code", code=ResponseCode.UNKNOWN_GROUP, details="not 'nosuch'")
    fake["n1"].stop()
    fake["n2"].stop()
    clock = ManualClock()
    with DLedgerClient(fake.peers, timeout_s=2, clock=clock) as client, pytest.raises(DLedgerError) as info:
        client.append(b"x")
    assert info.value.code is ResponseCode.UNKNOWN_GROUP
    assert clock.now_ms() >= 2000  # waited for the others, on the manual clock
    assert "refused by n0: UNKNOWN_GROUP: not 'nosuch'; others did not answer: n1" in info.value.message


def test_get_pages_and_stops_at_the_committed_index(fake: FakeCluster) -> None:
    for member in fake.members.values():
        member.page = 3
    with DLedgerClient(fake.peers, timeout_s=2.0) as client:
        client.append_many([b"%d" % i for i in range(10)])
        assert [e.body for e in client.get(2, count=7)] == [b"%d" % i for i in range(2, 9)]
        assert [e.index for e in client.get(8, count=100)] == [8, 9]
        with pytest.raises(DLedgerError) as info:
            client.get(10)
        assert info.value.code is ResponseCode.INDEX_OUT_OF_RANGE
        assert client.get(0, node_id="n2")[0].body == b"0"


def test_reads_go_to_another_member_when_one_is_down(client: DLedgerClient, fake: FakeCluster) -> None:
    client.append_many([b"a", b"b"])
    fake["n0"].stop()
    assert [e.body for e in client.get(0, count=2)] == [b"a", b"b"]


def test_read_committed_returns_column_batches(fake: FakeCluster) -> None:
    for member in fake.members.values():
        member.page = 4
    with DLedgerClient(fake.peers, timeout_s=2.0) as client:
        bodies = [bytes([i]) * i for i in range(10)]
        client.append_many(bodies)
        batches = list(client.read_committed(1))
        assert [b.count for b in batches] == [4, 4, 1]
        assert [b.body(k) for b in batches for k in range(b.count)] == bodies[1:]
        assert batches[0].index.tolist() == [1, 2, 3, 4] and batches[0].term.dtype.name == "int64"
        assert [b.count for b in client.read_committed(2, to_index=5, node_id="n1")] == [3]


def test_read_committed_resumes_on_a_broken_stream(fake: FakeCluster) -> None:
    for member in fake.members.values():
        member.page = 2
    fake["n0"].break_read_after = 1  # the leader's stream breaks after its first batch
    with DLedgerClient(fake.peers, timeout_s=2.0) as client:
        client.append_many([b"%d" % i for i in range(7)])
        batches = list(client.read_committed(0))
    indexes = [i for b in batches for i in b.index.tolist()]
    assert indexes == list(range(7))  # nothing lost, nothing twice


def test_read_committed_follow_delivers_new_commits(client: DLedgerClient, fake: FakeCluster) -> None:
    client.append(b"old")
    got: list[bytes] = []
    started = threading.Event()

    def reader() -> None:
        for batch in client.read_committed(0, to_index=3, follow=True):
            started.set()
            got.extend(batch.body(k) for k in range(batch.count))

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(5)
    client.append_many([b"new1", b"new2"])
    thread.join(5)
    assert not thread.is_alive()
    assert got == [b"old", b"new1", b"new2"]


def test_iterate_walks_and_follows(client: DLedgerClient, fake: FakeCluster) -> None:
    client.append_many([b"a", b"b", b"c"])
    assert [e.body for e in client.iterate()] == [b"a", b"b", b"c"]
    assert [e.index for e in client.iterate(1, 2)] == [1]
    follower = client.iterate(3, 5, follow=True)
    appender = threading.Thread(target=lambda: client.append_many([b"d", b"e"]))
    appender.start()
    assert [e.body for e in follower] == [b"d", b"e"]
    appender.join()


def test_status_lists_every_member_and_marks_the_unreachable(client: DLedgerClient, fake: FakeCluster) -> None:
    client.append(b"x")
    fake["n2"].stop()
    status = client.status()
    assert [m.node_id for m in status] == ["n0", "n1", "n2"]
    assert [m.reachable for m in status] == [True, True, False]
    assert status[0].role == "LEADER" and status[1].role == "FOLLOWER"
    assert status[0].end_index == 0 and status[0].leader_id == "n0"
    assert status[2].error is not None and "UNAVAILABLE" in status[2].error
    assert client.metadata("n1").role == "FOLLOWER"
    assert client.metadata().node_id == "n0"


def test_leadership_transfer_returns_the_new_term(client: DLedgerClient, fake: FakeCluster) -> None:
    assert client.leadership_transfer("n2") == 2
    assert fake.log.leader == "n2"
    assert client.leader is not None and client.leader.node_id == "n2"
    with pytest.raises(DLedgerError) as info:
        client.leadership_transfer("n9")
    assert info.value.code is ResponseCode.UNKNOWN_MEMBER


def test_closed_client_refuses_calls(fake: FakeCluster) -> None:
    client = DLedgerClient(fake.peers, timeout_s=1.0)
    client.close()
    client.close()
    with pytest.raises(DLedgerError) as info:
        client.append(b"x")
    assert info.value.code is ResponseCode.NETWORK_ERROR


def test_get_reads_an_entry_another_member_knows_is_committed(client: DLedgerClient, fake: FakeCluster) -> None:
    """Helper A: a member that restarted knows no commit index until a leader tells it;
    asked first, it answered "index 0 is not committed (commit -1)" for acknowledged data."""
    client.append_many([b"a", b"b"])
    for node_id in ("n0", "n1"):
        fake[node_id].known_commit = -1
    assert [e.body for e in client.get(0, 2)] == [b"a", b"b"]  # n2 serves them
    fake["n2"].known_commit = -1
    with pytest.raises(DLedgerError) as info:
        client.get(0)
    assert info.value.code == ResponseCode.INDEX_OUT_OF_RANGE
    assert info.value.message == "index 0 is not committed (n0 commit -1, n1 commit -1, n2 commit -1)"
    with pytest.raises(DLedgerError, match="index 5 is not committed"):
        client.get(5)  # past the end everywhere: not committed, as before


def test_a_read_that_fails_names_each_failure_once() -> None:
    """Helper B: `Get failed: n0: UNAVAILABLE ...; n0: UNAVAILABLE ...; n0: UNAVAILABLE ...`."""
    from tests.e2e.harness import free_ports

    [port] = free_ports(1)  # nobody listens there
    with DLedgerClient(f"n0-127.0.0.1:{port}", timeout_s=3) as lone, pytest.raises(DLedgerError) as info:
        lone.get(0)
    said = info.value.message
    assert said.startswith("Get failed: n0: UNAVAILABLE") and said.count("n0: UNAVAILABLE") == 1, said


def test_a_call_the_member_does_not_offer_is_unsupported_and_says_why(client: DLedgerClient) -> None:
    """Helper N: a member of an older version without Query or InitProducer made the
    client say `UNEXPECTED_ARGUMENT (411) ... UNIMPLEMENTED Method not found!`. (The fake
    members have no Query, as a version before reads of the state machine had none.)"""
    with pytest.raises(DLedgerError) as info:
        client.query(b"get")
    assert info.value.code == ResponseCode.UNSUPPORTED
    assert "(the member does not offer this call: it runs an older dledger-py)" in str(info.value)
