"""Reads of the state machine on threaded nodes (dledger.node_reads): every read mode sees
an acknowledged write, a follower serves READ_INDEX through the leader, a partitioned
old leader answers neither READ_INDEX nor LEASE once a new leader wrote, RAFT_LOG gives
the on_apply answers, and machines that cannot answer are refused."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dledger.codes import DLedgerError, ReadMode, ResponseCode
from dledger.node import DLedgerNode
from dledger.transport.local import LocalNetwork
from tests.node.conftest import NodeCluster, wait_until
from tests.node.register import Register

pytestmark = pytest.mark.interaction

LINEARIZABLE = (ReadMode.READ_INDEX, ReadMode.LEASE, ReadMode.RAFT_LOG)


class RegisterCluster(NodeCluster):
    """NodeCluster whose members run a Register."""

    def start(self, node_id: str, *, repair: bool = False, **changes: Any) -> DLedgerNode:
        machine = Register()
        self.machines[node_id] = machine  # type: ignore[assignment]
        config = dataclasses.replace(self.config(node_id), **changes)
        node = DLedgerNode(config, self.net.transport(node_id), state_machine=machine, repair=repair)
        self.nodes[node_id] = node
        self.net.register(node_id, node.handle_peer_request)
        node.start()
        return node


@pytest.fixture
def registers(tmp_path: Path) -> Any:
    made: list[RegisterCluster] = []

    def make(n: int = 3, **overrides: Any) -> RegisterCluster:
        cluster = RegisterCluster(tmp_path / f"r{len(made)}", n, lease_drift_ms=100, **overrides)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def _read(node: DLedgerNode, mode: ReadMode, request: bytes = b"get", timeout_s: float = 10.0) -> bytes:
    return node.reads.query([request], mode, timeout_s).answers[0]


def test_every_mode_reads_what_an_acknowledged_append_wrote(registers: Callable[..., RegisterCluster]) -> None:
    cluster = registers()
    leader = cluster.leader()
    for k in range(5):
        value = f"v{k}".encode()
        leader.append([b"set:" + value]).result(10)
        for mode in LINEARIZABLE:
            assert _read(leader, mode) == value, mode
    wait_until(lambda: _read(leader, ReadMode.UNSAFE) == b"v4", what="unsafe read")


def test_a_follower_serves_read_index_through_the_leader(registers: Callable[..., RegisterCluster]) -> None:
    cluster = registers()
    leader = cluster.leader()
    followers = [n for n in cluster.nodes.values() if n is not leader]
    rounds = leader.core.reads.rounds
    for k in range(3):
        value = f"w{k}".encode()
        leader.append([b"set:" + value]).result(10)
        for follower in followers:  # acknowledged on the leader: the follower waits for its apply
            assert _read(follower, ReadMode.READ_INDEX) == value
    assert leader.core.reads.rounds > rounds  # the leader confirmed its leadership for them
    for mode in (ReadMode.LEASE, ReadMode.RAFT_LOG):
        with pytest.raises(DLedgerError) as err:
            _read(followers[0], mode)
        assert err.value.code == ResponseCode.NOT_LEADER


@pytest.mark.parametrize("check_quorum", [True, False], ids=["check-quorum", "no-check-quorum"])
def test_a_partitioned_old_leader_answers_no_linearizable_read_once_a_new_leader_wrote(
    registers: Callable[..., RegisterCluster], check_quorum: bool
) -> None:
    cluster = registers()
    old = cluster.leader()
    old.append([b"set:old"]).result(10)
    if not check_quorum:
        # the old leader keeps believing it leads while the new one writes (no CheckQuorum,
        # a long heartbeat leak; hence no lease either): it must not confirm a read index
        old.config.check_quorum = False
        old.config.max_heart_beat_leak = 100
    others = [i for i in cluster.ids if i != old.config.self_id]
    cluster.net.isolate(old.config.self_id, others)
    wait_until(lambda: any(cluster.nodes[i].is_leader for i in others), what="a new leader")
    new = next(cluster.nodes[i] for i in others if cluster.nodes[i].is_leader)
    new.append([b"set:new"]).result(10)
    assert check_quorum or old.is_leader
    for mode in (ReadMode.READ_INDEX, ReadMode.LEASE):
        try:
            answer = _read(old, mode, timeout_s=1.5)
        except DLedgerError as exc:
            assert exc.code in (ResponseCode.TIMEOUT, ResponseCode.NOT_LEADER)
        else:
            raise AssertionError(f"the old leader answered {answer!r} in {mode.name}")
    assert _read(new, ReadMode.READ_INDEX) == b"new"
    assert _read(new, ReadMode.LEASE) == b"new"
    assert _read(old, ReadMode.UNSAFE) == b"old"  # UNSAFE may be stale, and is here


def test_raft_log_answers_each_request_with_its_on_apply_answer(registers: Callable[..., RegisterCluster]) -> None:
    cluster = registers()
    leader = cluster.leader()
    result = leader.reads.query([b"set:a", b"get", b"set:b", b"get"], ReadMode.RAFT_LOG, 10)
    assert result.answers == [b"ok", b"a", b"ok", b"b"]
    assert leader.caller is not None and leader.caller.answers._answers == {}  # nothing left behind
    assert [e.body for e in leader.get(result.read_index - 3, 4)] == [b"set:a", b"get", b"set:b", b"get"]


def test_a_group_of_one_answers_every_mode(registers: Callable[..., RegisterCluster]) -> None:
    cluster = registers(n=1)
    leader = cluster.leader()
    leader.append([b"set:solo"]).result(10)
    for mode in (*LINEARIZABLE, ReadMode.UNSAFE):
        assert _read(leader, mode) == b"solo"


def test_machines_that_cannot_answer_are_refused(
    cluster_factory: Callable[..., NodeCluster], registers: Callable[..., RegisterCluster], tmp_path: Path
) -> None:
    plain = cluster_factory(n=1)  # its Recorder has no query()
    leader = plain.leader()
    for mode in (ReadMode.READ_INDEX, ReadMode.UNSAFE, ReadMode.LEASE):
        with pytest.raises(DLedgerError) as err:
            _read(leader, mode)
        assert err.value.code == ResponseCode.UNSUPPORTED
    net = LocalNetwork()
    config = plain.config("n0")
    bare = DLedgerNode(dataclasses.replace(config, store_base_dir=str(tmp_path / "bare")), net.transport("n0"))
    try:
        for mode in ReadMode:
            with pytest.raises(DLedgerError) as err:
                _read(bare, mode)
            assert err.value.code == ResponseCode.UNSUPPORTED
    finally:
        bare.shutdown()
        net.close()
    failing = registers(n=1).leader()
    with pytest.raises(DLedgerError) as err:
        _read(failing, ReadMode.UNSAFE, b"boom")
    assert err.value.code == ResponseCode.INTERNAL_ERROR
    assert _read(failing, ReadMode.UNSAFE) == b""  # the machine still answers


def test_reads_of_many_threads_all_see_the_write(registers: Callable[..., RegisterCluster]) -> None:
    """Concurrent READ_INDEX reads (rounds shared or not: that depends on timing; the
    one-round-per-burst rule is tested without threads in tests/raft/test_read_index.py)."""
    import threading

    cluster = registers()
    leader = cluster.leader()
    leader.append([b"set:x"]).result(10)
    rounds = leader.core.reads.rounds
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(20):
                assert _read(leader, ReadMode.READ_INDEX) == b"x"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert 0 < leader.core.reads.rounds - rounds <= 160  # never more than one round per read
