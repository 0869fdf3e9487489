"""A member whose state machine stopped for good hands leadership over, and its status
says why (helper F #2c: it showed healthy, could lead, and then failed every read).
The deterministic cases are in tests/raft/test_stopped_machine.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import generate_latest

from dledger.entry import Entry
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
