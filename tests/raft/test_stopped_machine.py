"""A member whose state machine stopped (an apply or snapshot load failed for good)
answers no read and no command: as leader it hands leadership to a follower whose
machine applies, and it lets election rounds pass so that such a follower is elected.
Before, it showed healthy, could lead, and then failed every KV read and write (helper
F #2c). A group whose every machine stopped (the same entry fails everywhere) still
elects a leader for its log, and that leader does not hand over in a loop."""

from __future__ import annotations

import logging
from concurrent.futures import Future

import pytest

from dledger.codes import ResponseCode
from dledger.raft.member_state import Role
from dledger.raft.messages import LeadershipTransferRequest, LeadershipTransferResponse
from dledger.raft.transfer import FAILED_STORE_RETRY_MS
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction


def stop_machine(cluster: Cluster, node_id: str) -> None:
    cluster.core(node_id).member_state.machine_stopped(RuntimeError(f"apply failed on {node_id}"))


def transfer(cluster: Cluster, leader: str, transferee: str) -> Future[LeadershipTransferResponse]:
    core = cluster.core(leader)
    req = LeadershipTransferRequest(
        group=core.member_state.group,
        remote_id=leader,
        local_id="admin",
        term=core.member_state.current_term,
        transfer_id=leader,
        transferee_id=transferee,
    )
    return core.transfer.handle(req, cluster.now)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_leader_whose_state_machine_stopped_hands_leadership_over(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster(3, seed=seed)
    try:
        old = cluster.elect()
        assert not cluster.core(old).transfer.hands_over(cluster.now)  # fit: it hands nothing over
        with caplog.at_level(logging.ERROR, logger="dledger.raft.transfer"):
            stop_machine(cluster, old)
            assert cluster.core(old).transfer.hands_over(cluster.now)  # its reads say "ask again"
            cluster.run_until(lambda: cluster.leader() not in (None, old))
        new = cluster.leader()
        assert new is not None and cluster.role(old) is not Role.LEADER
        assert [r.getMessage() for r in caplog.records if r.name == "dledger.raft.transfer"] == [
            f"{old}: its state machine stopped (RuntimeError: apply failed on {old}): hands leadership over to {new}"
        ]
        after = cluster.append(b"after")  # its log is fine: it still replicates
        cluster.run_until(after.done)
        assert cluster.bodies(old, committed_only=False)[-1:] == [b"after"]
        cluster.run_for(5_000)  # while it follows a leader it never stands
        assert cluster.leader() == new
    finally:
        cluster.close()


@pytest.mark.parametrize("seed", range(6))
def test_a_member_whose_state_machine_stopped_lets_a_healthy_member_be_elected(seed: int) -> None:
    """The leader dies; of its two followers the one whose machine stopped lets election
    rounds pass. Without the rule it won in some of these seeds."""
    cluster = Cluster(3, seed=seed)
    try:
        leader = cluster.elect()
        stopped, healthy = (m for m in cluster.ids if m != leader)
        stop_machine(cluster, stopped)
        cluster.kill(leader)
        cluster.run_until(lambda: cluster.leader() is not None)
        assert cluster.leader() == healthy
    finally:
        cluster.close()


def test_a_transferee_whose_state_machine_stopped_refuses_to_take_leadership() -> None:
    cluster = Cluster(3, seed=4)
    try:
        leader = cluster.elect()
        stopped = next(m for m in cluster.ids if m != leader)
        stop_machine(cluster, stopped)
        answer = transfer(cluster, leader, stopped)
        cluster.run_until(answer.done)
        assert answer.result().code == ResponseCode.ILLEGAL_MEMBER_STATE
        assert cluster.leader() == leader and cluster.core(leader).member_state.transferee is None
    finally:
        cluster.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_group_whose_every_state_machine_stopped_keeps_one_leader_for_its_log(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Each follower is asked once and refuses; then the leader keeps leading (no
    leadership change, no transfer every second that refuses appends while it runs),
    and a killed leader is still replaced."""
    cluster = Cluster(3, seed=seed)
    try:
        leader = cluster.elect()
        for member in cluster.ids:
            stop_machine(cluster, member)
        term = cluster.core(leader).member_state.current_term
        assert cluster.core(leader).transfer.hands_over(cluster.now)  # a follower is left to ask
        with caplog.at_level(logging.ERROR, logger="dledger.raft.transfer"):
            cluster.run_for(5 * FAILED_STORE_RETRY_MS)
        asked = sorted(r.getMessage().rsplit(" ", 1)[1] for r in caplog.records if "hands leadership" in r.getMessage())
        assert asked == sorted(m for m in cluster.ids if m != leader)
        assert not cluster.core(leader).transfer.hands_over(cluster.now)  # every one refused: reads fail for good
        assert cluster.leader() == leader and cluster.core(leader).member_state.current_term == term
        done = cluster.append(b"still")
        cluster.run_until(done.done)
        assert done.result() >= 0
        cluster.kill(leader)
        cluster.run_until(lambda: cluster.leader() not in (None, leader))
    finally:
        cluster.close()
