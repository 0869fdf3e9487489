"""A member whose state machine stopped for good hands leadership over, and its status
says why (helper F #2c: it showed healthy, could lead, and then failed every read).
The deterministic cases are in tests/raft/test_stopped_machine.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from prometheus_client import generate_latest

from dledger.codes import DLedgerError, ReadMode, ResponseCode
from dledger.entry import Entry
from dledger.node import DLedgerNode
from tests.node.conftest import NodeCluster, Recorder, wait_until


class Poisoned(Recorder):
    """Fails for good on the body b"poison" once `armed`."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def on_apply(self, entries: list[Entry]) -> None:
        if self.armed and any(e.body == b"poison" for e in entries):
            raise ValueError("the poisoned entry")
        super().on_apply(entries)

    def query(self, request: bytes) -> bytes:
        return b"%d" % len(self.applied)


def bodies(entries: Sequence[Entry]) -> list[bytes]:
    return [e.body for e in entries if not e.is_noop]


def test_a_leader_whose_state_machine_stopped_hands_over_and_says_why(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(machine_factory=Poisoned)
    old = cluster.leader()
    old_id = old.status().self_id
    cluster.machines[old_id].armed = True
    assert old.append([b"poison"]).result(timeout=10) >= 0  # committed: the log is fine
    wait_until(lambda: any(n.is_leader for i, n in cluster.nodes.items() if i != old_id), what="a new leader")
    assert old.status().machine_health == "ValueError: the poisoned entry"
    new = cluster.leader()
    assert new is not old and new.status().machine_health == ""
    index = new.append([b"after"]).result(timeout=10)
    new_id = new.status().self_id
    wait_until(lambda: new.status().applied_index >= index, what="the new leader applies")
    assert bodies(cluster.machines[new_id].applied)[-2:] == [b"poison", b"after"]
    assert old.status().applied_index < index and not old.is_leader
    for node, applies in ((old, 0.0), (new, 1.0)):  # what an alert watches
        text = generate_latest(node.metrics.registry).decode()
        labels = f'group="g",self_id="{node.config.self_id}"'
        assert f"dledger_state_machine_applies{{{labels}}} {applies}" in text
        assert f"dledger_store_takes_writes{{{labels}}} 1.0" in text


def refusal(node: DLedgerNode, mode: ReadMode = ReadMode.READ_INDEX) -> DLedgerError:
    with pytest.raises(DLedgerError) as err:
        node.reads.query([b"count"], mode, 5.0)
    return err.value


def test_a_member_whose_state_machine_stopped_sends_readers_on(cluster_factory: Callable[..., NodeCluster]) -> None:
    """Before, its reads failed with INTERNAL_ERROR, a final error: also those of a client
    that still took it for the leader after it had handed over."""
    cluster = cluster_factory(machine_factory=Poisoned)
    old = cluster.leader()
    old_id = old.status().self_id
    cluster.machines[old_id].armed = True
    old.append([b"poison"]).result(timeout=10)
    wait_until(lambda: old.status().machine_health != "", what="its machine stops")
    # while it leads it hands over (ask again), once it follows it names the leader
    assert refusal(old).code in (ResponseCode.LEADER_TRANSFERRING, ResponseCode.NOT_LEADER)
    wait_until(lambda: any(n.is_leader for i, n in cluster.nodes.items() if i != old_id), what="a new leader")
    new = cluster.leader()
    wait_until(lambda: old.status().leader_id == new.status().self_id, what="it follows the new leader")
    for mode in ReadMode:
        error = refusal(old, mode)
        assert error.code == ResponseCode.NOT_LEADER, mode
        assert f"leader is {new.status().self_id}" in error.message and "the poisoned entry" in error.message
    assert new.reads.query([b"count"], ReadMode.READ_INDEX, 5.0).answers  # the new leader answers


def test_a_group_of_one_whose_state_machine_stopped_fails_its_reads_for_good(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(n=1, machine_factory=Poisoned)
    only = cluster.leader()
    cluster.machines["n0"].armed = True
    only.append([b"poison"]).result(timeout=10)
    wait_until(lambda: only.status().machine_health != "", what="its machine stops")
    error = refusal(only)
    assert error.code == ResponseCode.INTERNAL_ERROR and "the poisoned entry" in error.message
