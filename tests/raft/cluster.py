"""A deterministic single-threaded cluster: RaftCore members, each driven by a
RaftDriver, over the in-memory network and a ManualClock (no threads, no sleeps), on
MemoryLogStore or MmapLogStore."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dledger.clock import ManualClock
from dledger.config import DLedgerConfig
from dledger.raft.core import RaftCore
from dledger.raft.driver import RaftDriver
from dledger.raft.elector import Outbound
from dledger.raft.log import LogStore
from dledger.raft.member_state import MemoryTermStore, Role
from dledger.raft.messages import RequestOrResponse
from dledger.store.memory import MemoryLogStore
from dledger.store.mmap_store import MmapLogStore, StoreConfig
from dledger.transport.inmem import InMemoryNetwork

FAST = {
    "heart_beat_time_interval_ms": 100,
    "max_heart_beat_leak": 3,
    "min_vote_interval_ms": 30,
    "max_vote_interval_ms": 100,
    "max_push_timeout_ms": 100,
    "commit_push_interval_ms": 50,
    "max_wait_ack_time_ms": 1000,
    "follower_push_timeout_ms": 200,
}


class StoreKind(Protocol):
    """How a cluster makes its members' logs."""

    name: str

    def open(self, node_id: str) -> LogStore:
        """A new, empty log for `node_id`."""
        ...

    def reopen(self, node_id: str, old: LogStore) -> LogStore:
        """The log of `node_id` after a process restart (what survived of `old`)."""
        ...

    def wipe(self, node_id: str, old: LogStore) -> LogStore:
        """`node_id`'s log after its disk was replaced: empty."""
        ...

    def close(self) -> None:
        """Release every log opened."""
        ...


class MemoryStores:
    """MemoryLogStore members; a restart keeps the same object (a process restart that
    loses nothing)."""

    name = "memory"

    def open(self, node_id: str) -> LogStore:
        return MemoryLogStore()

    def reopen(self, node_id: str, old: LogStore) -> LogStore:
        return old

    def wipe(self, node_id: str, old: LogStore) -> LogStore:
        return MemoryLogStore()

    def close(self) -> None:
        pass


MMAP_TEST_CONFIG = StoreConfig(data_file_size=1 << 20, index_file_size=32 * 1024, warm_ahead_bytes=0)
"""Small segments: 1 MiB of data, 1,024 index units per file; no background threads."""


class MmapStores:
    """MmapLogStore members under `root` (no background threads: `start()` is never
    called); a restart closes the store and recovers it from its files."""

    name = "mmap"

    def __init__(self, root: Path, config: StoreConfig = MMAP_TEST_CONFIG) -> None:
        self.root = root
        self.config = config
        self.opened: list[MmapLogStore] = []

    def _dir(self, node_id: str) -> Path:
        return self.root / f"dledger-{node_id}"

    def open(self, node_id: str) -> LogStore:
        store = MmapLogStore(self._dir(node_id), self.config)
        self.opened.append(store)
        return store

    def reopen(self, node_id: str, old: LogStore) -> LogStore:
        old.close()
        return self.open(node_id)

    def wipe(self, node_id: str, old: LogStore) -> LogStore:
        old.close()
        shutil.rmtree(self._dir(node_id))
        return self.open(node_id)

    def close(self) -> None:
        for store in self.opened:
            store.close()
        self.opened.clear()


@dataclass
class Member:
    node_id: str
    config: DLedgerConfig
    store: LogStore
    term_store: MemoryTermStore
    driver: RaftDriver
    alive: bool = True
    commit_history: list[int] = field(default_factory=list)

    @property
    def core(self) -> RaftCore:
        return self.driver.core


class Cluster:
    """`n` members n0..n{n-1}; `step()` advances the clock by `step_ms` and runs one pass
    of every live member plus the network deliveries due."""

    def __init__(
        self,
        n: int = 3,
        seed: int = 0,
        step_ms: int = 5,
        stores: StoreKind | None = None,
        founding: bool = False,
        **overrides: Any,
    ) -> None:
        """`founding`: every member starts as a new group's member does (empty, asking its
        peers whether the group exists first: dledger.raft.vote_hold)."""
        self.stores: StoreKind = stores or MemoryStores()
        self.clock = ManualClock(0)
        self.seed = seed
        self.step_ms = step_ms
        self.net = InMemoryNetwork(self.clock, seed=seed, min_delay_ms=1, max_delay_ms=3, rpc_timeout_ms=300)
        self.ids = [f"n{i}" for i in range(n)]
        peers = ";".join(f"{i}-127.0.0.1:{20911 + k}" for k, i in enumerate(self.ids))
        self.options = {**FAST, **overrides}
        self.members: dict[str, Member] = {}
        for k, node_id in enumerate(self.ids):
            config = DLedgerConfig(group="g", self_id=node_id, peers=peers, **self.options)
            store, term_store = self.stores.open(node_id), MemoryTermStore()
            driver = self._driver(node_id, config, store, term_store, k, founding)
            member = Member(node_id, config, store, term_store, driver)
            self.members[node_id] = member
            self._register(node_id)
        self.leaders_by_term: dict[int, set[str]] = {}

    def _driver(
        self,
        node_id: str,
        config: DLedgerConfig,
        store: LogStore,
        term_store: MemoryTermStore,
        salt: int,
        founding: bool = False,
    ) -> RaftDriver:
        rng = random.Random(self.seed * 1000 + salt + self.clock.now_ms())
        rejoin_index = -1 if founding else None
        core = RaftCore(config, store, term_store, rng, rejoin_index=rejoin_index, founding=founding)
        driver = RaftDriver(core, lambda outbound: self._send(node_id, driver, outbound))
        return driver

    def _register(self, node_id: str) -> None:
        member = self.members[node_id]
        self.net.register(node_id, lambda req: member.driver.deliver(req, self.clock.now_ms()))

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    # -- driving

    def step(self) -> None:
        self.clock.advance(self.step_ms)
        now = self.now
        for member in self.members.values():
            if member.alive:
                member.driver.tick(now)
        self.net.step()
        self._check_invariants()

    def _send(self, node_id: str, driver: RaftDriver, outbound: Outbound) -> None:
        """The send hook of `node_id`'s `driver`: answers go back to it while it runs."""
        target, request = outbound.target_id, outbound.request
        fut = self.net.send(node_id, target, request)

        def done(f: Future[RequestOrResponse]) -> None:
            member = self.members[node_id]
            if member.alive and member.driver is driver:
                driver.on_response(target, request, None if f.exception() else f.result(), self.now)

        fut.add_done_callback(done)

    def run_for(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.step()

    def run_until(self, predicate: Any, max_ms: int = 20_000) -> None:
        end = self.now + max_ms
        while not predicate():
            if self.now >= end:
                raise AssertionError(f"condition not reached within {max_ms} ms: {self.describe()}")
            self.step()

    # -- invariants checked after every step

    def _check_invariants(self) -> None:
        for member in self.members.values():
            ms = member.core.member_state
            if member.alive and ms.is_leader:
                leaders = self.leaders_by_term.setdefault(ms.current_term, set())
                leaders.add(member.node_id)
                assert len(leaders) == 1, f"two leaders in term {ms.current_term}: {leaders}"
            assert ms.committed_index <= member.store.end_index, f"{member.node_id}: commit above ledger end"
            history = member.commit_history
            if history and ms.committed_index < history[-1] and member.alive:
                raise AssertionError(
                    f"{member.node_id}: committed index went back {history[-1]} -> {ms.committed_index}"
                )
            history.append(ms.committed_index)
        # committed prefixes agree
        committed = [(m, m.core.member_state.committed_index) for m in self.members.values()]
        for m1, c1 in committed:
            for m2, c2 in committed:
                upto = min(c1, c2)
                if upto >= 0 and m1 is not m2:
                    assert m1.store.term_at(upto) == m2.store.term_at(upto), f"committed {upto} differs"
                    assert m1.store.get_body(upto) == m2.store.get_body(upto)

    # -- members

    def leader(self) -> str | None:
        leaders = [m.node_id for m in self.members.values() if m.alive and m.core.member_state.is_leader]
        return leaders[0] if len(leaders) == 1 else None

    def core(self, node_id: str) -> RaftCore:
        return self.members[node_id].core

    def role(self, node_id: str) -> Role:
        return self.members[node_id].core.member_state.role

    def elect(self, max_ms: int = 20_000) -> str:
        self.run_until(lambda: self.leader() is not None and self._all_follow(), max_ms)
        leader = self.leader()
        assert leader is not None
        return leader

    def _all_follow(self) -> bool:
        leader = self.leader()
        return all(
            m.core.member_state.leader_id == leader and (m.core.member_state.is_follower or m.node_id == leader)
            for m in self.members.values()
            if m.alive and self.net.can_talk(leader or "", m.node_id)
        )

    def kill(self, node_id: str) -> None:
        member = self.members[node_id]
        member.alive = False
        member.commit_history.clear()
        self.net.unregister(node_id)

    def restart(self, node_id: str, wipe: bool = False, founding: bool = False) -> None:
        """Start `node_id` again (after `kill`) from what its log and term store kept;
        `wipe`: with an empty log and term store instead (a replaced disk, DLedger #61);
        `founding`: as a new group's member (a member killed before it ever ran)."""
        member = self.members[node_id]
        if wipe:
            member.store = self.stores.wipe(node_id, member.store)
            member.term_store = MemoryTermStore()
        else:
            member.store = self.stores.reopen(node_id, member.store)
        salt = self.ids.index(node_id) + 7
        member.driver = self._driver(node_id, member.config, member.store, member.term_store, salt, founding)
        member.alive = True
        self._register(node_id)

    def close(self) -> None:
        """Release the members' logs."""
        self.stores.close()

    def append(self, *bodies: bytes, via: str | None = None) -> Future[int]:
        leader = via or self.leader()
        assert leader is not None
        return self.members[leader].driver.append(list(bodies), self.now)

    def bodies(self, node_id: str, committed_only: bool = True) -> list[bytes]:
        member = self.members[node_id]
        end = member.core.member_state.committed_index if committed_only else member.store.end_index
        entries = member.store.get_range(0, end + 1)
        return [e.body for e in entries if not e.is_noop]

    def describe(self) -> str:
        return "; ".join(repr(m.core.member_state) + ("" if m.alive else " (dead)") for m in self.members.values())


def count_sends(cluster: Cluster) -> Counter[str]:
    """Count every message `cluster`'s network sends from now on, by "<destination>
    <message type>" (say "n2 PushEntryRequest")."""
    sent: Counter[str] = Counter()
    send = cluster.net.send

    def counting(src: str, dst: str, req: RequestOrResponse) -> Future[RequestOrResponse]:
        sent[f"{dst} {type(req).__name__}"] += 1
        return send(src, dst, req)

    cluster.net.send = counting  # type: ignore[method-assign]
    return sent
