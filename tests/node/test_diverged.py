"""Helper F1 with threaded members on real stores: two members lose their whole
directories while the third is down and, started with the default `new`, found the group
again (nobody who answers knows it existed). The third comes back holding the earlier
history's committed entries, the last of a later term than the new history holds there
(where both histories hold the same term at its last entry it cannot tell them apart:
docs/OPERATIONS.md). It keeps them, says why it does not follow, the leader stops
pushing to it in a loop, and the group of the other two goes on writing."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable

import pytest

from dledger.raft.member_state import Role
from tests.node.conftest import NodeCluster, wait_until

Factory = Callable[..., NodeCluster]


def _write(cluster: NodeCluster, prefix: str, count: int) -> list[bytes]:
    leader = cluster.leader()
    bodies = [f"{prefix}-{k}".encode() for k in range(count)]
    for body in bodies:
        leader.append([body]).result(timeout=15)
    return bodies


def _committed(cluster: NodeCluster, node_id: str) -> list[bytes]:
    node = cluster.nodes[node_id]
    committed = node.status().committed_index
    return [e.body for e in node.get(0, committed + 1) if not e.is_noop] if committed >= 0 else []


def test_a_member_of_an_earlier_founding_keeps_its_log_and_is_left_behind(
    cluster_factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = cluster_factory()
    old = _write(cluster, "old", 10)  # all in the first leader's term
    wait_until(lambda: all(_committed(cluster, n) == old for n in cluster.ids), what="the old history everywhere")
    for node_id in cluster.ids:
        cluster.stop(node_id)
    for node_id in ("n0", "n1"):
        shutil.rmtree(cluster.base / f"dledger-{node_id}")
        cluster.start(node_id)  # "new": n2 does not answer, the two found the group again
    new = _write(cluster, "new", 15)
    with caplog.at_level(logging.ERROR):
        back = cluster.start("n2")
        # n2's log may end in a higher term: it can be elected once, until the others find
        # out (then they stop following it) and elect one of them again
        wait_until(lambda: _leader_left_n2_behind(cluster), timeout_s=60, what="a leader that left n2 behind")
        new += _write(cluster, "later", 3)
    assert _committed(cluster, "n2") == old  # kept: nothing truncated or overwritten
    assert back.status().role != Role.LEADER.value
    wait_until(lambda: all(_committed(cluster, n) == new for n in ("n0", "n1")), what="both to hold the new history")
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("--initial-cluster-state existing" in m for m in messages), messages  # the way out
    assert any("n2" in m and "another history" in m for m in messages), messages


def _leader_left_n2_behind(cluster: NodeCluster) -> bool:
    leaders = [n for n in cluster.nodes.values() if n.is_leader]
    if len(leaders) != 1 or leaders[0].config.self_id == "n2":
        return False
    return leaders[0].core.dispatchers["n2"].search.diverged
