"""A leader's compaction after a snapshot keeps what a live follower a few entries behind
still needs (dledger.raft.log_floors): the standby follower, whose small backlog waits
`standby_push_ms`, is sent its entries and not the whole snapshot (helper L's soak: 12 of
13 installs went to a healthy follower)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from dledger.raft.dispatcher import DispatchState
from dledger.raft.driver import dispatch_pass
from tests.node.conftest import NodeCluster, wait_until
from tests.node.snapmachine import SumMachine
from tests.node.test_snapshots import SNAP, append_values, machine

KEEPS = "keeps the log from"


def test_the_standby_follower_behind_the_snapshot_gets_entries_not_the_snapshot(
    cluster_factory: Callable[..., NodeCluster], caplog: pytest.LogCaptureFixture
) -> None:
    # the standby's pushes wait 10 minutes while the other follower keeps up
    cluster = cluster_factory(3, machine_factory=SumMachine, standby_push_ms=600_000, **SNAP)
    leader = cluster.leader()
    _keeping_up, standby = list(leader.core.dispatchers)  # peer order: the second one stands by
    wait_until(lambda: leader.core.elector.peers_live_table.get(standby, False), what="the standby answers heartbeats")
    # both matched first: while the other one is not, the standby is pushed at once (it
    # took the first entry so once on a loaded machine, after `behind` was read)
    dispatchers = leader.core.dispatchers.values()
    wait_until(lambda: all(d.state is DispatchState.APPEND for d in dispatchers), what="both followers matched")
    behind = cluster.nodes[standby].store.end_index
    with caplog.at_level(logging.INFO, logger="dledger.node_snapshots"):
        append_values(leader, range(25))
        wait_until(lambda: KEEPS in caplog.text, what="the compaction after the snapshot")
    assert leader.snapshots is not None and leader.snapshots.last_index >= 19
    assert cluster.nodes[standby].store.end_index == behind  # still held back
    assert f"{KEEPS} {max(behind, 0)} for a follower" in caplog.text  # its match point on
    assert leader.store.begin_index <= max(behind, 0)  # what it needs is still there

    leader.config.standby_push_ms = 0  # no more standing by: the next append is pushed to it at once
    leader._wake(dispatch_pass(standby))  # its pass slept for the rest of the 10-minute hold
    append_values(leader, range(25, 26))
    end = leader.store.end_index
    follower = cluster.nodes[standby]
    wait_until(lambda: follower.applied_index >= end, 60, what="the standby caught up")
    assert machine(cluster, standby).loads == []  # by entries: no snapshot was installed
    assert machine(cluster, standby).state() == (sum(range(26)), 26)
