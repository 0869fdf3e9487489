"""Kills, restarts, wipes and pauses of real server processes: no acknowledged append is
lost or moved, committed logs never diverge, and members that come back catch up."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import pytest

from dledger.codes import ResponseCode
from dledger.transport.convert import pb
from tests.e2e.harness import RPC_S, E2ECluster, eventually, random_body

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MakeCluster = Callable[..., E2ECluster]

# answers after which nothing of the request was appended (Jepsen's definite `fail`)
DEFINITE_FAILURES = {
    ResponseCode.NOT_LEADER,
    ResponseCode.LEADER_TRANSFERRING,
    ResponseCode.LEADER_PENDING_FULL,
    ResponseCode.REQUEST_WITH_EMPTY_BODYS,
    ResponseCode.UNEXPECTED_ARGUMENT,
}


@dataclass
class History:
    """Outcomes of every append a load generator attempted."""

    ok: dict[bytes, int] = field(default_factory=dict)  # body -> acknowledged index
    failed: set[bytes] = field(default_factory=set)  # definitely not appended
    unknown: set[bytes] = field(default_factory=set)  # timeouts, UNAVAILABLE, TERM_CHANGED...
    ack_times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def attempted(self) -> set[bytes]:
        return set(self.ok) | self.failed | self.unknown


class Load:
    """Client threads appending batches of unique bodies to whoever leads."""

    def __init__(self, cluster: E2ECluster, clients: int = 2, batch: int = 5) -> None:
        self.cluster = cluster
        self.history = History()
        self.batch = batch
        self._stop = threading.Event()
        self._target = cluster.leader()[0]
        self._threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in range(clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def acks(self) -> int:
        with self.history.lock:
            return len(self.history.ok)

    def _run(self, client: int) -> None:
        seq = 0
        while not self._stop.is_set():
            target = self._target
            if not self.cluster.members[target].alive:
                self._retarget()  # nothing sent
                continue
            bodies = [random_body(f"c{client}", seq + k) for k in range(self.batch)]
            seq += self.batch
            try:
                answer = self.cluster.stub(target).Append(pb.AppendRequest(bodies=bodies), timeout=3)
            except grpc.RpcError:
                self._record(bodies, None)
                self._retarget()
                continue
            self._record(bodies, answer)
            if answer.code == ResponseCode.NOT_LEADER:
                if answer.leader_id and answer.leader_id in self.cluster.members:
                    self._target = answer.leader_id
                else:
                    self._retarget()

    def _retarget(self) -> None:
        found = self.cluster.find_leader()
        if found is not None and found[0] != self._target:
            self._target = found[0]
        else:
            self._stop.wait(0.1)

    def _record(self, bodies: list[bytes], answer: object) -> None:
        h = self.history
        with h.lock:
            code = getattr(answer, "code", None)
            if code == ResponseCode.SUCCESS:
                first = answer.first_index  # type: ignore[attr-defined]
                h.ok.update({body: first + k for k, body in enumerate(bodies)})
                h.ack_times.append(time.monotonic())
            elif code in DEFINITE_FAILURES:
                h.failed.update(bodies)
            else:
                h.unknown.update(bodies)


def check_history(cluster: E2ECluster, members: list[str], history: History) -> int:
    """Converge `members`, then check the logs against the history; returns the
    committed index they agree on."""
    last_ack = max(history.ok.values(), default=0)
    committed = cluster.wait_converged(members, last_ack)
    logs = {m: cluster.read_all(m, committed + 1) for m in members}
    reference = logs[members[0]]
    for member, log in logs.items():
        assert log == reference, f"committed logs of {members[0]} and {member} diverge"
    assert [row[0] for row in reference] == list(range(committed + 1))
    body_at = {index: body for index, _term, body in reference}
    lost = {b: i for b, i in history.ok.items() if body_at.get(i) != b}
    assert not lost, f"{len(lost)} acknowledged appends lost or moved, e.g. {next(iter(lost.items()))}"
    ours = [body for _i, _t, body in reference if body]  # empty bodies: the leaders' NOOPs
    assert len(ours) == len(set(ours)), "an entry appears twice"
    assert set(ours) <= history.attempted, "an entry nobody appended"
    assert not set(ours) & history.failed, "a definitely failed append shows up"
    terms = [term for _i, term, _b in reference]
    assert terms == sorted(terms), "terms go backwards in the log"
    return committed


def test_kill_leader_under_load_loses_no_ack(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    old_leader, old_term = cluster.leader()
    with Load(cluster) as load:
        eventually(lambda: load.acks() >= 200, 60, "200 acknowledged appends before the kill")
        cluster.kill(old_leader)
        killed_at = time.monotonic()
        new_leader, new_term = cluster.leader(exclude=(old_leader,))
        assert new_term > old_term
        before = load.acks()
        eventually(lambda: load.acks() >= before + 200, 60, "200 more acknowledged appends after the kill")
    rto = min(t for t in load.history.ack_times if t > killed_at) - killed_at
    survivors = [m for m in cluster.members if m != old_leader]
    check_history(cluster, survivors, load.history)
    cluster.restart(old_leader)  # it rejoins as a follower and truncates its uncommitted tail
    committed = check_history(cluster, list(cluster.members), load.history)
    meta = cluster.metadata(old_leader, RPC_S)
    assert meta is not None and meta.role == "FOLLOWER" and meta.leader_id == new_leader
    print(
        f"\nleader kill: {len(load.history.ok)} ok, {len(load.history.failed)} fail, "
        f"{len(load.history.unknown)} unknown; RTO {rto:.2f} s; {committed + 1} entries agree"
    )


def test_killed_follower_restarts_and_catches_up(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    leader, _ = cluster.leader()
    follower = next(m for m in cluster.members if m != leader)
    history = History()
    early = [random_body("early", k) for k in range(50)]
    first = cluster.append(early).first_index
    history.ok.update({b: first + i for i, b in enumerate(early)})
    cluster.kill(follower)
    for k in range(30):
        bodies = [random_body(f"while-down-{k}", i, 512) for i in range(40)]
        answer = cluster.append(bodies)
        history.ok.update({b: answer.first_index + i for i, b in enumerate(bodies)})
    cluster.restart(follower)
    check_history(cluster, list(cluster.members), history)
    assert cluster.find_leader() is not None


def test_wiped_follower_catches_up_without_new_writes(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    history = History()
    for k in range(25):  # ~10 MiB: more than one 8 MiB segment
        bodies = [random_body(f"w{k}", i, 4096) for i in range(100)]
        answer = cluster.append(bodies)
        history.ok.update({b: answer.first_index + i for i, b in enumerate(bodies)})
    follower = next(m for m in cluster.members if m != cluster.leader()[0])
    assert cluster.stop(follower) == 0
    cluster.wipe(follower)
    cluster.restart(follower)
    check_history(cluster, list(cluster.members), history)  # the leader is idle (#61)


def test_uncommitted_entries_are_never_read(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    leader, _ = cluster.leader()
    cluster.append([b"committed"])
    followers = [m for m in cluster.members if m != leader]
    for f in followers:
        cluster.signal(f, signal.SIGSTOP)
    try:
        pending = cluster.stub(leader).Append.future(pb.AppendRequest(bodies=[b"not yet"]), timeout=30)
        meta = eventually(
            lambda: (m := cluster.metadata(leader, RPC_S)) is not None and m.end_index > m.committed_index and m,
            10,
            "an appended but uncommitted entry on the leader",
        )
        stub = cluster.stub(leader)
        got = stub.Get(pb.GetRequest(index=meta.end_index), timeout=RPC_S)
        assert got.code == ResponseCode.INDEX_OUT_OF_RANGE and not got.entries
        everything = stub.Get(pb.GetRequest(index=0, count=1000), timeout=RPC_S)
        assert [e.index for e in everything.entries][-1] <= meta.committed_index
        read = list(stub.ReadCommitted(pb.ReadCommittedRequest(from_index=meta.committed_index + 1), timeout=RPC_S))
        assert read == []
    finally:
        for f in followers:
            cluster.signal(f, signal.SIGCONT)
    outcome = pending.result(timeout=30)
    if outcome.code == 200:  # committed once the followers came back: now readable everywhere
        cluster.wait_converged(list(cluster.members), outcome.first_index)
        got = cluster.stub(followers[0]).Get(pb.GetRequest(index=outcome.first_index), timeout=RPC_S)
        assert got.entries[0].body == b"not yet"


def test_sigterm_is_a_clean_shutdown_and_restart_resumes(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    answer = cluster.append([b"durable-%d" % k for k in range(100)])
    last = answer.first_index + 99
    cluster.wait_converged(list(cluster.members), last)
    for member_id in cluster.members:
        assert cluster.stop(member_id) == 0, cluster.logs_tail()
    for member_id in cluster.members:
        checkpoint = (cluster.store_base_dir / f"dledger-{member_id}" / "checkpoint").read_text()
        values = dict(line.split("=", 1) for line in checkpoint.split() if "=" in line)
        assert int(values["committedIndex"]) >= last, checkpoint  # written at shutdown
        log = (cluster.workdir / "logs" / f"{member_id}.log").read_text()
        assert "Traceback" not in log and "shut down" in log
    cluster.start_all()
    for member_id in cluster.members:
        eventually(lambda m=member_id: cluster.metadata(m, 1.0), 30, f"{member_id} back")
    cluster.leader()
    got = cluster.stub(cluster.leader()[0]).Get(pb.GetRequest(index=answer.first_index, count=100), timeout=RPC_S)
    assert [e.body for e in got.entries] == [b"durable-%d" % k for k in range(100)]
