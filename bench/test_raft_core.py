"""Raft core throughput: committed entries/s of a 3-node cluster of RaftCores on warm
MmapLogStores, without a network (the cost of the Python core per entry).

Each core is driven by a RaftDriver whose send hook hands each request straight to the
target's `deliver`, runs the target's entry handler and gives the answer back to the
sender's `on_response`: the real request/response path of RaftCore, minus the fault
machinery of InMemoryNetwork. One *pump* = the leader's dispatcher pass for each
follower, the followers' entry handlers, the answers, and the quorum pass.
Before each pump the clients submit `PER_PUMP` entries: one `append` of 256 bodies
(batched) or 256 `append`s of one body (single, 256 concurrent clients). A round ends
when everything it appended is committed on the leader.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench._common import DATA_FILE_SIZE, INDEX_FILE_SIZE, WARM_AHEAD_BYTES, make_bodies, record
from dledger.config import DLedgerConfig
from dledger.raft.core import RaftCore
from dledger.raft.dispatcher import DispatchState
from dledger.raft.driver import RaftDriver
from dledger.raft.elector import Outbound
from dledger.raft.member_state import MemoryTermStore
from dledger.store.mmap_store import MmapLogStore, StoreConfig

GROUP = "raft-core"
PER_PUMP = 256
IDS = ("n0", "n1", "n2")
CASES = {  # label: (body size, pumps per round)
    "128B": (128, 400),  # 102,400 entries, 18 MB per member per round
    "1KiB": (1024, 100),  # 25,600 entries, 27 MB per member per round
}
ROUNDS = 10


class LeanCluster:
    """Three RaftCores on MmapLogStores (threads not started: no flush, no warm thread
    competing for the cores; `prepare` pre-faults the round's pages), n0 the leader."""

    def __init__(self, root: Path) -> None:
        peers = ";".join(f"{n}-127.0.0.1:{20911 + k}" for k, n in enumerate(IDS))
        cfg = StoreConfig(
            data_file_size=DATA_FILE_SIZE, index_file_size=INDEX_FILE_SIZE, warm_ahead_bytes=WARM_AHEAD_BYTES
        )
        self.stores = {n: MmapLogStore(root / f"dledger-{n}", cfg) for n in IDS}
        self.cores = {
            n: RaftCore(
                DLedgerConfig(group="g", self_id=n, peers=peers), self.stores[n], MemoryTermStore(), random.Random(k)
            )
            for k, n in enumerate(IDS)
        }
        self.drivers = {n: RaftDriver(core, self._sender(n)) for n, core in self.cores.items()}
        self.now = 0
        self._elect("n0")
        self.leader = self.cores["n0"]
        self.followers = [n for n in IDS if n != "n0"]

    def _sender(self, src: str) -> Callable[[Outbound], None]:
        """`src`'s send hook: hand the request to its target and the answer back."""

        def send(ob: Outbound) -> None:
            now, target = self.now, self.drivers[ob.target_id]
            answer = target.deliver(ob.request, now)
            target.handler_pass(now)
            self.drivers[src].on_response(ob.target_id, ob.request, answer.result(), now)

        return send

    def _elect(self, leader: str) -> None:
        self.now = 1
        self.drivers[leader].elector_pass(self.now)  # n0 stands first
        for _ in range(1000):
            self.now += 10
            for driver in self.drivers.values():
                driver.tick(self.now)
            lead = self.cores[leader]
            if (
                lead.member_state.is_leader
                and all(c.member_state.leader_id == leader for c in self.cores.values())
                and all(d.state is DispatchState.APPEND for d in lead.dispatchers.values())
            ):
                return
        raise AssertionError("no leader")

    def pump(self) -> None:
        now, leader = self.now, self.drivers["n0"]
        for peer in self.followers:
            leader.dispatcher_pass(peer, now)
        leader.quorum_pass(now)

    def drain(self, last: int) -> None:
        """Pump until `last` is committed on the leader."""
        for _ in range(1000):
            if self.leader.member_state.committed_index >= last:
                return
            self.pump()
        raise AssertionError(f"index {last} not committed: {self.leader.member_state!r}")

    def prepare(self) -> None:
        for store in self.stores.values():
            store.wait_warm()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


@pytest.mark.parametrize("mode", ["batch", "single"])
@pytest.mark.parametrize("label", list(CASES))
def test_raft_core(benchmark: Any, workdir: Path, label: str, mode: str) -> None:
    """Committed entries/s on the leader; each round appends `pumps * 256` entries."""
    size, pumps = CASES[label]
    if mode == "single":
        pumps //= 4  # the per-request cost dominates: keep the round short
    benchmark.group = GROUP
    bodies = make_bodies(size, PER_PUMP)
    cluster = LeanCluster(workdir)
    leader = cluster.leader
    append = leader.append
    entries = pumps * PER_PUMP
    now = cluster.now  # time stands still: no heartbeat or timeout falls due during a round

    def batched() -> None:
        last = leader.member_state.committed_index + entries
        for _ in range(pumps):
            append(bodies, now)
            cluster.pump()
        cluster.drain(last)

    def single() -> None:
        last = leader.member_state.committed_index + entries
        for _ in range(pumps):
            for body in bodies:
                append((body,), now)
            cluster.pump()
        cluster.drain(last)

    try:
        benchmark.pedantic(
            batched if mode == "batch" else single,
            setup=cluster.prepare,
            rounds=ROUNDS,
            warmup_rounds=1,
            iterations=1,
        )
        for peer in ("n1", "n2"):
            assert (
                cluster.cores[peer].member_state.committed_index >= leader.member_state.committed_index - 2 * PER_PUMP
            )
            assert cluster.stores[peer].end_index == cluster.stores["n0"].end_index
    finally:
        cluster.close()
    rate = record(benchmark, f"{GROUP} {label} {mode}", "dledger-raft-core", entries)
    if rate is not None:
        benchmark.extra_info["body_bytes"] = size
        benchmark.extra_info["entries_per_append"] = PER_PUMP if mode == "batch" else 1
