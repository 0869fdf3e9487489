"""A seeded, single-threaded simulation of snapshots, compaction and InstallSnapshot.

Members are RaftCores (`RaftDriver`) over the in-memory network, each on a real
`MmapLogStore`, `FileTermStore` and `SnapshotStore` in its own directory, with the node's
own snapshot code (`dledger.node_snapshots.NodeSnapshots`, its manager and install
path) and a real `StateMachineCaller` driving `DigestMachine`; only the threads are
replaced by steps on a `ManualClock`: the apply pass, the save (capture, save, commit,
compaction) and the install stream run inline.

Faults from the seed: members crash (a process death: the mappings go without a
flush, the page cache stays) at random, and at the three moments that matter here:
during a save (after `begin_save`, before the commit: `tmp/` is left), during an install
(the stream breaks after some chunks and the receiver dies: `install_tmp/` is left),
and around compaction (just before or just after the log's reset). Crashed members
come back after a while; now and then one comes back wiped.

Invariants after every step: one leader per term; every committed index holds the
same entry on every member that holds it; and every live member's state machine equals
the sequential application of the committed log up to its applied index (a digest of
the user entries, compared with the one computed from the committed history).
Power loss (what was not made durable is lost, torn) is added by
tests/sim/snapshot_power.py (`PowerSim`), over the disk models of tests/sim/disk.py (the
log's segments) and tests/sim/snapshot_disk.py (the snapshot files).
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dledger.clock import ManualClock
from dledger.config import DLedgerConfig, member_store_config
from dledger.entry import Entry
from dledger.node_producers import NodeProducers
from dledger.node_snapshots import NodeSnapshots, receive_install
from dledger.node_store import member_core
from dledger.raft.core import RaftCore
from dledger.raft.driver import RaftDriver
from dledger.raft.elector import Outbound
from dledger.raft.messages import (
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    InstallSnapshotStream,
    RequestOrResponse,
)
from dledger.statemachine import StateMachineCaller
from dledger.store.mmap_store import MmapLogStore, StoreConfig
from dledger.store.term_store import FileTermStore
from dledger.transport.base import Transport
from dledger.transport.inmem import InMemoryNetwork
from tests.raft.cluster import FAST
from tests.sim.episodes import wipe_state


class SimViolation(AssertionError):
    """An invariant broke (the message says which, with the seed)."""


class SimCrash(Exception):
    """The member dies here (raised inside a save, an install or a compaction)."""


def fold(digest: int, index: int, body: bytes) -> int:
    """The machine's running digest after applying entry `index` with `body`."""
    return zlib.crc32(index.to_bytes(8, "big") + body, digest)


class DigestMachine:
    """A two-phase snapshotting state machine: a digest of every user entry applied."""

    def __init__(self) -> None:
        self.digest = 0
        self.count = 0
        self._captured = (0, 0)
        self.crash_in_save = False

    def on_apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.digest = fold(self.digest, entry.index, entry.body)
            self.count += 1

    def on_snapshot_capture(self) -> None:
        self._captured = (self.digest, self.count)

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        writer.write(json.dumps(self._captured).encode())
        if self.crash_in_save:
            raise SimCrash("during a snapshot save")

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        self.digest, self.count = json.loads(reader.read())


@dataclass
class Faults:
    """Per-step probabilities of the run's faults."""

    crash: float = 0.002
    crash_in_save: float = 0.15  # of the saves
    crash_in_install: float = 0.2  # of the installs
    crash_around_compaction: float = 0.15  # of the compactions
    wipe: float = 0.25  # of the restarts
    down_ms: tuple[int, int] = (200, 2_000)


class _Host:
    """What NodeSnapshots needs of a node (see dledger.node_snapshot_send.SnapshotHost)."""

    def __init__(self, member: SimMember, core: RaftCore, store: MmapLogStore, caller: StateMachineCaller) -> None:
        self.member = member
        self.config = member.config
        self.caller: StateMachineCaller | None = caller
        self.core = core
        self.store = store
        self.transport: Transport | None = None
        self.clock = member.sim.clock
        self.producers = NodeProducers(store, member.dir, member.config, lambda: core.member_state.committed_index)
        self._lock = threading.RLock()
        self._stopped = False

    def _on_response(
        self, target_id: str, request: RequestOrResponse, future: Future[RequestOrResponse] | None
    ) -> None:
        raise AssertionError("the simulation sends installs itself")


class SimMember:
    """One member: directory, and while up its store, core, caller and snapshots."""

    def __init__(self, sim: SnapshotSim, node_id: str, salt: int, peers: str) -> None:
        self.sim, self.node_id, self.salt = sim, node_id, salt
        self.dir = sim.base / f"dledger-{node_id}"
        self.config = DLedgerConfig(
            group="sim",
            self_id=node_id,
            peers=peers,
            store=member_store_config(),
            snapshot_threshold=sim.threshold,
            snapshot_entry_reset_strategy=sim.strategy,
            reset_snapshot_entries_but_keep_last_entries_num=3,
            **FAST,
        )
        self.incarnation = 0
        self.down_until = -1
        self.store: MmapLogStore | None = None
        self.driver: RaftDriver | None = None
        self.caller: StateMachineCaller | None = None
        self.snapshots: NodeSnapshots | None = None
        self.machine = DigestMachine()
        self.wiped = False
        self.resume: dict[str, int] = {}  # target -> offset its install_tmp ends at (last answer)

    @property
    def up(self) -> bool:
        return self.driver is not None

    def open(self) -> None:
        sim = self.sim
        store = sim.store_class(self.dir, sim.store_config)
        self.incarnation += 1
        rng = random.Random(sim.seed * 7919 + self.salt * 104729 + self.incarnation)
        # every restart follows a crash; the abort marker says whether that run was async
        unclean = self.incarnation > 1 and not self.wiped and self.config.store.flush_mode == "async"
        core, _ = member_core(self.config, store, FileTermStore(self.dir), rng, lambda: unclean)
        self.wiped = False
        self.machine = DigestMachine()
        caller = StateMachineCaller(store, lambda: core.member_state.committed_index, self.machine)
        self.store, self.caller = store, caller
        self.snapshots = NodeSnapshots(_Host(self, core, store, caller), self.dir)
        self.snapshots.chunk_bytes = 7  # several chunks even for a tiny snapshot
        self.snapshots.load_at_startup()
        driver = RaftDriver(core, lambda outbound: sim.send(self, driver, outbound))
        self.driver = driver
        sim.net.register(self.node_id, self.handle)

    def handle(self, request: RequestOrResponse) -> Future[RequestOrResponse]:
        driver = self.driver
        assert driver is not None
        if isinstance(request, InstallSnapshotStream):
            return self._receive(request)
        return driver.deliver(request, self.sim.now)

    def _receive(self, stream: InstallSnapshotStream) -> Future[RequestOrResponse]:
        if self.sim.rng.random() < self.sim.faults.crash_in_install:
            cut = self.sim.rng.randrange(1, 6)
            stream.chunks = _breaking(stream.chunks, cut)
            answer = receive_install(self.snapshots, stream)
            self.sim.stats["install_crashes"] += 1
            self.crash("during an install")
            return answer
        answer = receive_install(self.snapshots, stream)
        result = answer.result()
        if result.code == 200:
            self.sim.stats["installs"] += 1
        return answer

    def crash(self, why: str) -> None:
        """The process dies now (no flush: the page cache keeps what was written)."""
        store = self.store
        assert store is not None
        self.sim.net.unregister(self.node_id)
        store.data_list.close()
        store.index_list.close()
        store._lock.release()
        self.store = self.driver = self.caller = self.snapshots = None
        sim = self.sim
        self.down_until = sim.now + sim.rng.randrange(*sim.faults.down_ms)
        sim.stats["crashes"] += 1
        sim.log(f"{self.node_id} crashed {why}")

    def restart(self) -> None:
        sim = self.sim
        if sim.rng.random() < sim.faults.wipe and sim.others_hold_everything(self):
            self.wipe(wipe_state(sim.rng, [m.dir for m in sim.members.values() if m is not self]))
        self.open()

    def wipe(self, state: str = "existing") -> None:
        """While down, the member loses its directory (it restarts as a new member, told
        `existing` or, as if the group were new, `new`)."""
        shutil.rmtree(self.dir)
        self.config.initial_cluster_state = state
        self.wiped = True
        self.sim.stats["wipes"] += 1
        self.sim.log(f"{self.node_id} restarts wiped ({state})")

    # -- the apply pass and the snapshot thread, inline

    def apply_and_snapshot(self) -> None:
        caller, snapshots = self.caller, self.snapshots
        assert caller is not None and snapshots is not None and snapshots.manager is not None
        while caller.run_once():
            manager = snapshots.manager
            if caller.applied_index - manager.last_index >= self.sim.threshold:
                self._save(caller.applied_index, caller.applied_term)
                if not self.up:
                    return

    def _save(self, index: int, term: int) -> None:
        snapshots = self.snapshots
        assert snapshots is not None and snapshots.manager is not None
        machine, rng, faults = self.machine, self.sim.rng, self.sim.faults
        machine.on_snapshot_capture()
        writer = snapshots.store.begin_save()
        machine.crash_in_save = rng.random() < faults.crash_in_save
        try:
            machine.on_snapshot_save(writer)
        except SimCrash:
            self.sim.stats["save_crashes"] += 1
            self.crash("during a snapshot save")  # tmp/ stays behind
            return
        snapshot = writer.commit(index, term)
        self.sim.stats["snapshots"] += 1
        if rng.random() < faults.crash_around_compaction:
            self.sim.stats["compaction_crashes"] += 1
            if rng.random() < 0.5:
                self.crash("after a snapshot, before compaction")
                return
            snapshots.compact(snapshot.index, snapshot.term)
            self.crash("right after compaction")
            return
        snapshots.compact(snapshot.index, snapshot.term)


def _breaking(chunks: Iterator[InstallSnapshotRequest], after: int) -> Iterator[InstallSnapshotRequest]:
    for n, chunk in enumerate(chunks):
        if n == after:
            raise ConnectionError("the stream broke")
        yield chunk


class SnapshotSim:
    """A cluster of `nodes` members with snapshots, a client load and faults."""

    STEP_MS = 5
    store_class: type[MmapLogStore] = MmapLogStore
    member_class: type[SimMember] = SimMember

    def __init__(
        self,
        seed: int,
        base: Path,
        nodes: int = 3,
        threshold: int = 15,
        strategy: str = "RESET_ALL_SYNC",
        faults: Faults | None = None,
    ) -> None:
        self.seed, self.base, self.threshold, self.strategy = seed, base, threshold, strategy
        self.faults = faults or Faults()
        self.rng = random.Random(seed)
        self.clock = ManualClock(0)
        self.net = InMemoryNetwork(self.clock, seed=seed ^ 0x5EED, min_delay_ms=1, max_delay_ms=3, rpc_timeout_ms=300)
        self.store_config = StoreConfig(data_file_size=16 * 1024, index_file_size=32 * 256, warm_ahead_bytes=0)
        self.stats = {k: 0 for k in ("snapshots", "installs", "crashes", "save_crashes", "install_crashes")}
        self.stats.update(compaction_crashes=0, wipes=0, appended=0)
        self.trace: list[str] = []
        ids = [f"n{k}" for k in range(nodes)]
        peers = ";".join(f"{i}-127.0.0.1:{30000 + k}" for k, i in enumerate(ids))
        self.members = {i: self.member_class(self, i, k, peers) for k, i in enumerate(ids)}
        self.history: dict[int, tuple[int, bytes, bool]] = {}  # committed index -> (term, body, is noop)
        self.expected: dict[int, int] = {}  # index -> digest after applying everything up to it
        self.leaders: dict[int, str] = {}
        self.next_value = 0
        for member in self.members.values():
            member.open()

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def log(self, line: str) -> None:
        self.trace.append(f"{self.now:>7} {line}")

    def send(self, member: SimMember, driver: RaftDriver, outbound: Outbound) -> None:
        request = outbound.request
        target = outbound.target_id
        if isinstance(request, InstallSnapshotRequest):
            self._send_install(member, driver, target, request)
            return
        future = self.net.send(member.node_id, target, request)

        def done(f: Future[RequestOrResponse]) -> None:
            if member.driver is driver:
                driver.on_response(target, request, None if f.exception() else f.result(), self.now)

        future.add_done_callback(done)

    def _send_install(
        self, member: SimMember, driver: RaftDriver, target: str, request: InstallSnapshotRequest
    ) -> None:
        snapshots = member.snapshots
        assert snapshots is not None
        prepared = snapshots.prepare_stream(request)
        if prepared is None:
            driver.on_response(target, request, None, self.now)
            return
        snapshot, header = prepared
        start = member.resume.pop(target, 0)
        stream = snapshots.stream_from(target, snapshot, header, start)
        future = self.net.send(member.node_id, target, stream)

        def done(f: Future[RequestOrResponse]) -> None:
            answer = None if f.exception() else f.result()
            if isinstance(answer, InstallSnapshotResponse) and answer.code == 508 and answer.next_offset > 0:
                member.resume[target] = answer.next_offset  # the next stream starts there
            if member.driver is driver:
                driver.on_response(target, request, answer, self.now)

        future.add_done_callback(done)

    def others_hold_everything(self, member: SimMember) -> bool:
        """Whether `member` may lose its disk without losing committed entries: every
        other member is up and not itself catching up after a lost disk."""
        for other in self.members.values():
            if other is member:
                continue
            if other.driver is None or other.driver.core.elector.vote_hold.state == "rejoin":
                return False  # (no power loss here: an unclean restart lost nothing)
        return True

    # -- stepping

    def step(self, load: bool = True, faults: bool = True) -> None:
        self.clock.advance(self.STEP_MS)
        now = self.now
        for member in self.members.values():
            if member.driver is not None:
                member.driver.tick(now)
            elif now >= member.down_until:
                member.restart()
        self.net.step()
        self._record_commits()
        for member in self.members.values():
            if member.up:
                member.apply_and_snapshot()
        if load:
            self._client_load()
        if faults and self.rng.random() < self.faults.crash:
            up = [m for m in self.members.values() if m.up]
            if len(up) > len(self.members) // 2 + 0:
                self.rng.choice(up).crash("at random")
        self.check()

    def _client_load(self) -> None:
        for member in self.members.values():
            core = member.driver.core if member.driver is not None else None
            if core is not None and core.member_state.is_leader and self.rng.random() < 0.5:
                bodies = [b"v%d" % (self.next_value + k) for k in range(self.rng.randrange(1, 4))]
                try:
                    core.append_requests([bodies], self.now)
                except Exception:
                    return
                self.next_value += len(bodies)
                self.stats["appended"] += len(bodies)

    def _record_commits(self) -> None:
        """Learn committed entries from every member that still holds them, checking
        that every member holding an index holds the same entry."""
        for member in self.members.values():
            if member.driver is None or member.store is None:
                continue
            store, committed = member.store, member.driver.core.member_state.committed_index
            low = max(store.begin_index, 0) if store.begin_index >= 0 else committed + 1
            for index in range(low, committed + 1):
                entry = store.get(index)
                known = self.history.get(index)
                seen = (entry.term, entry.body, entry.is_noop)
                if known is None:
                    self.history[index] = seen
                elif known != seen:
                    self._fail(f"committed index {index} differs: {known} on record, {seen} on {member.node_id}")

    def _expected_digest(self, index: int) -> int | None:
        """The digest of the committed log up to `index` (None when not all known)."""
        if index < 0:
            return 0
        if index in self.expected:
            return self.expected[index]
        start = max((i for i in self.expected if i < index), default=-1)
        digest = self.expected.get(start, 0)
        for i in range(start + 1, index + 1):
            known = self.history.get(i)
            if known is None:
                return None
            _term, body, noop = known
            if not noop:
                digest = fold(digest, i, body)
            self.expected[i] = digest
        return digest

    def check(self) -> None:
        for member in self.members.values():
            if member.driver is None or member.caller is None:
                continue
            ms = member.driver.core.member_state
            if ms.is_leader:
                other = self.leaders.setdefault(ms.current_term, member.node_id)
                if other != member.node_id:
                    self._fail(f"two leaders in term {ms.current_term}: {other} and {member.node_id}")
            applied = member.caller.applied_index
            expected = self._expected_digest(applied)
            if expected is None:
                self._fail(f"{member.node_id} applied {applied}, beyond the committed history recorded")
            if member.machine.digest != expected:
                self._fail(
                    f"{member.node_id}: state machine at applied {applied} is not the sequential application "
                    f"of the committed log (digest {member.machine.digest:#x} != {expected:#x})"
                )

    def _fail(self, message: str) -> None:
        tail = "\n".join(self.trace[-30:])
        raise SimViolation(f"seed {self.seed}: {message}\n{tail}")

    def run(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.step()

    def settle(self, max_ms: int = 30_000) -> None:
        """Faults off, everyone up: run until every member applied the same last index."""
        for member in self.members.values():
            if not member.up:
                member.restart()
        end = self.now + max_ms
        while self.now < end:
            self.step(load=False, faults=False)
            applied = {m.caller.applied_index for m in self.members.values() if m.caller is not None}
            commits = {
                m.driver.core.member_state.committed_index for m in self.members.values() if m.driver is not None
            }
            if len(applied) == 1 and applied == commits and max(commits) >= 0:
                return
        self._fail(f"no convergence: applied {applied}, committed {commits}")

    def close(self) -> None:
        for member in self.members.values():
            if member.store is not None:
                member.store.close()
