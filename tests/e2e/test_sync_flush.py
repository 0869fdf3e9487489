"""`--flush-mode sync` with real server processes: concurrent single appends are answered
(the leader flushing its copy while the pushes travel), a new leader after a SIGKILL
takes appends, and every acknowledged entry is on every member after a SIGKILL and
restart of the whole group."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from dledger.transport.convert import pb
from tests.e2e.harness import RPC_S, E2ECluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_sync_appends_survive_a_leader_kill_and_a_full_restart(make_cluster: Callable[..., E2ECluster]) -> None:
    cluster = make_cluster(extra_args=["--flush-mode", "sync"])
    # A member that asked its peers late (they were not up yet) learns that the group
    # exists only after the others founded it, and holds its vote until it caught up
    # with the leader (dledger.raft.vote_hold): a leader killed before that leaves no
    # quorum to elect another. The test is about sync writes, so it starts settled.
    cluster.wait_settled()
    leader, _ = cluster.leader()
    acked: dict[int, bytes] = {}
    lock = threading.Lock()

    def writer(k: int) -> None:
        stub = cluster.stub(leader)
        for j in range(10):
            body = f"w{k}-{j}".encode()
            answer = stub.Append(pb.AppendRequest(bodies=[body]), timeout=RPC_S)
            assert answer.code == 200, answer
            with lock:
                acked[answer.first_index] = body

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(acked) == 80 and len(set(acked.values())) == 80

    cluster.kill(leader)
    new, _ = cluster.leader(exclude=(leader,))
    others = [m for m in cluster.members if m != leader]
    cluster.wait_converged(others, max(acked))
    last = cluster.append([b"after"])
    for member_id in cluster.members:
        cluster.kill(member_id)
    for member_id in cluster.members:
        cluster.restart(member_id)
    final, _ = cluster.leader()
    cluster.wait_converged(list(cluster.members), last.first_index)
    for member_id in cluster.members:
        bodies = {index: body for index, _, body in cluster.read_all(member_id)}
        assert all(bodies.get(index) == body for index, body in acked.items()), member_id
        assert bodies[last.first_index] == b"after"
    assert final in cluster.members and new in cluster.members
