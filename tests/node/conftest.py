"""Threaded clusters of real DLedgerNodes (file stores in tmp_path) over LocalNetwork."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dledger.config import DLedgerConfig, StoreConfig, member_store_config
from dledger.entry import Entry
from dledger.node import DLedgerNode
from dledger.node_status import NodeStatus
from dledger.transport.local import LocalNetwork

TIMINGS: dict[str, Any] = {
    "heart_beat_time_interval_ms": 200,
    "max_heart_beat_leak": 3,
    "min_vote_interval_ms": 50,
    "max_vote_interval_ms": 250,
    "max_push_timeout_ms": 300,
    "commit_push_interval_ms": 100,
    "max_wait_ack_time_ms": 3000,
}
STORE: dict[str, Any] = {"data_file_size": 1 << 20, "index_file_size": 32 * 4096}
STORE_SETTINGS = {f.name for f in dataclasses.fields(StoreConfig)}


def wait_until(predicate: Callable[[], bool], timeout_s: float = 15.0, what: str = "condition") -> None:
    """Poll `predicate` until true; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def settled(statuses: Iterable[NodeStatus]) -> bool:
    """Whether these members all follow one leader in one term, none holding its vote."""
    views = {(s.leader_id, s.term, s.vote_hold) for s in statuses}
    leader, _term, hold = next(iter(views))
    return len(views) == 1 and leader is not None and hold == ""


class Recorder:
    """A state machine that records what it is given."""

    def __init__(self) -> None:
        self.applied: list[Entry] = []

    def on_apply(self, entries: list[Entry]) -> None:
        self.applied.extend(entries)


class NodeCluster:
    """n nodes n0..n{n-1} sharing one LocalNetwork."""

    def __init__(self, base: Path, n: int = 3, machine_factory: Callable[[], Any] = Recorder, **overrides: Any) -> None:
        self.base = base
        self.machine_factory = machine_factory
        self.net = LocalNetwork()
        self.ids = [f"n{i}" for i in range(n)]
        self.peers = ";".join(f"{i}-127.0.0.1:{30000 + k}" for k, i in enumerate(self.ids))
        self.options = {**TIMINGS, **overrides}
        self.nodes: dict[str, DLedgerNode] = {}
        self.machines: dict[str, Any] = {}
        for node_id in self.ids:
            self.start(node_id)
        self.settle()

    def settle(self, timeout_s: float = 15.0) -> None:
        """Wait until every member follows one leader in one term and none holds its vote:
        a new group's member that asked its peers last may still hold (a founding member
        that found a leader first catches up with it; dledger.raft.vote_hold), and could
        not help elect another, or stand once before it heard the leader."""
        self.leader(timeout_s)
        wait_until(
            lambda: settled(n.status() for n in self.nodes.values()),
            timeout_s,
            "every member to follow one leader and vote freely",
        )

    def config(self, node_id: str) -> DLedgerConfig:
        """The member's config: the options, those named as StoreConfig fields in its `store`."""
        options = {k: v for k, v in self.options.items() if k not in STORE_SETTINGS}
        store = member_store_config(**{**STORE, **{k: v for k, v in self.options.items() if k in STORE_SETTINGS}})
        return DLedgerConfig(
            group="g", self_id=node_id, peers=self.peers, store_base_dir=str(self.base), store=store, **options
        )

    def start(self, node_id: str, *, repair: bool = False, **changes: Any) -> DLedgerNode:
        """Start `node_id` (its config changed by `changes`; `repair`: see DLedgerNode)."""
        self.machines[node_id] = self.machine_factory()
        config = dataclasses.replace(self.config(node_id), **changes)
        node = DLedgerNode(config, self.net.transport(node_id), state_machine=self.machines[node_id], repair=repair)
        self.nodes[node_id] = node
        self.net.register(node_id, node.handle_peer_request)
        node.start()
        return node

    def stop(self, node_id: str) -> None:
        self.net.unregister(node_id)
        self.nodes.pop(node_id).shutdown()

    def leader(self, timeout_s: float = 15.0) -> DLedgerNode:
        found: list[DLedgerNode] = []

        def one_leader() -> bool:
            leaders = [n for n in self.nodes.values() if n.is_leader]
            found[:] = leaders
            return len(leaders) == 1

        wait_until(one_leader, timeout_s, "a single leader")
        return found[0]

    def close(self) -> None:
        for node_id in list(self.nodes):
            self.stop(node_id)
        self.net.close()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., NodeCluster]]:
    made: list[NodeCluster] = []

    def make(n: int = 3, **overrides: Any) -> NodeCluster:
        cluster = NodeCluster(tmp_path / f"c{len(made)}", n, **overrides)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()
