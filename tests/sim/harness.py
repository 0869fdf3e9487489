"""A seeded, single-threaded simulation of a DLedger cluster: RaftCore members over the
in-memory network, each on a real MmapLogStore and FileTermStore in its own directory,
driven by a ManualClock. No threads: the harness does what the store's flush thread
would (flush every `flush_file_interval_ms`, checkpoint every `checkpoint_interval_ms`),
and the sync store's group commit runs in the appending call itself.

Everything random comes from the seed: the fault schedule and client load (`rng`),
the network (`InMemoryNetwork(seed=...)`), each member's vote timing and each power
loss's torn tail. The same seed replays the same run.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from dledger.clock import ManualClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.node_store import member_core
from dledger.raft.core import RaftCore
from dledger.raft.driver import HANDLER, MAX_HANDLER_STEPS_PER_PASS, RaftDriver
from dledger.raft.elector import Outbound
from dledger.raft.messages import RequestOrResponse
from dledger.store.mmap_store import MmapLogStore, StoreConfig, SyncMmapLogStore
from dledger.store.term_store import FileTermStore
from dledger.transport.inmem import InMemoryNetwork
from tests.raft.cluster import FAST
from tests.sim.checker import Checker, LossWindow, Op, Violation, broken, uid_of
from tests.sim.disk import NodeDisk, SimCrash, register_disk, unregister_disk
from tests.sim.episodes import EPISODES_PER_SECOND, Episode, start_episode
from tests.sim.producers import ProducerLoad
from tests.sim.reads import ReadLoad
from tests.sim.term_watch import TermWatch

TIMING = FAST  # the deterministic clusters' short timings
VOTE_HOLD_MS = 10_000
"""How long a restarted member holds its vote at most (100 heartbeats: longer than any
partition or downtime a run makes, shorter than `converge`'s deadline, so that a cluster
whose majority lost power together still elects)."""

DEFINITE_FAILURES = {
    ResponseCode.NOT_LEADER,
    ResponseCode.LEADER_TRANSFERRING,
    ResponseCode.LEADER_PENDING_FULL,
    ResponseCode.REQUEST_WITH_EMPTY_BODYS,
}


@dataclass(frozen=True)
class Scenario:
    """What a run may do.

    Attributes:
        nodes: cluster size.
        flush_mode: the stores' "async" or "sync".
        power_loss: "none"; "single" (one node at a time); "any" (one, a majority or
            all at once); "group" (only a majority or all at once).
        crash_in_msync: also crash nodes inside a store call, just before an msync.
        allow_loss: accept (and count) committed entries lost at an index a power-lost
            node lost; everything else still fails the run.
        flush_stalls: members' flushes sometimes stall for 20-300 ms (a slow disk),
            widening what a power loss can take in async mode.
        biased: steer the run toward the states where the safety rules matter: start
            the fault episodes of `tests.sim.episodes` now and then, and let half of the
            seeds run without the new leader's NOOP (`enable_fast_advance_commit_index`
            off, as in java-compatible stores), so older-term entries wait for a
            client entry of the new term to commit.
        disk_loss: the episodes may also wipe a member's disk (`LostDisk`); only where
            that loss cannot add to another one (sync, or async without power loss).
    """

    nodes: int
    flush_mode: str
    power_loss: str = "none"
    crash_in_msync: bool = True
    allow_loss: bool = False
    flush_stalls: bool = True
    biased: bool = False
    disk_loss: bool = False
    reads: bool = False  # ReadIndex reads checked against the acknowledged appends (tests.sim.reads)
    producers: int = 0  # > 0: idempotent producers expiring after this many ms (tests.sim.producers)

    @property
    def majority(self) -> int:
        return self.nodes // 2 + 1


@dataclass
class Stats:
    """What happened in one run."""

    steps: int = 0
    sim_ms: int = 0
    ops: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    entries_acked: int = 0
    elections: int = 0
    crashes: int = 0
    msync_crashes: int = 0
    power_losses: int = 0
    group_power_losses: int = 0
    partitions: int = 0
    episodes: int = 0
    torn_modes: dict[str, int] = field(default_factory=dict)
    unsynced_bytes_lost: int = 0
    entries_unflushed_lost: int = 0
    committed_deletions: int = 0  # members deleting committed entries they held (R5, counted while open)
    power_loss_sizes: dict[int, int] = field(default_factory=dict)  # event -> nodes hit
    checks: int = 0
    converge_ms: int = 0
    reads_confirmed: int = 0
    producers: dict[str, int] = field(default_factory=dict)  # tests.sim.producers' counters


class SimNode:
    """One member: its directory, disk image and (while up) store, term store, core and
    the driver around the core."""

    def __init__(self, sim: Simulation, node_id: str, salt: int, peers: str) -> None:
        self.sim = sim
        self.node_id = node_id
        self.salt = salt
        self.dir = sim.base_dir / f"dledger-{node_id}"
        self.disk = NodeDisk(self.dir)
        register_disk(self.disk)
        self.config = DLedgerConfig(
            group="sim",
            self_id=node_id,
            peers=peers,
            store=member_store_config(flush_mode=sim.scenario.flush_mode),
            max_vote_hold_ms=VOTE_HOLD_MS,
            enable_fast_advance_commit_index=sim.leader_noop,
            **TIMING,
        )
        if sim.scenario.reads and node_id == "n0":
            # n0 notices a lost quorum late: cut off as leader, it keeps believing it leads
            # while the others elect and commit, and must not confirm reads meanwhile
            self.config.max_heart_beat_leak = 12
        self.store: MmapLogStore | None = None
        self.driver: RaftDriver | None = None
        self.incarnation = 0
        self.restart_at = -1
        self.new_disk = False  # wiped while down: it restarts without an abort marker
        self.next_flush_ms = 0
        self.next_checkpoint_ms = 0
        self.pending: list[Op] = []
        self.loss_window: tuple[int, int, int] | None = None  # (event, end, durable end) before a power loss
        # what the checker tracks (per lifetime unless noted)
        self.last_commit = -1
        self.verified = -1
        self.seen_end = -1
        self.agree = -1  # its log equals the committed prefix up to here
        self.led_term = -1
        self.max_term = 0  # across lifetimes
        self.divergent_at = -1  # across lifetimes, until its committed prefix agrees again
        self.down_verified = -1  # while down: the log it went down with (see Checker.check_replication)
        self.down_log: dict[int, tuple[int, int]] = {}
        self.down_holding = False  # it went down holding its vote (it holds again on restart)
        self.down_agree = -1  # across lifetimes: its log equalled the committed prefix up to here

    @property
    def core(self) -> RaftCore | None:
        """The member's core while it is up."""
        return self.driver.core if self.driver is not None else None

    @property
    def up(self) -> bool:
        return self.driver is not None

    def open(self) -> None:
        sim = self.sim
        cls = SyncMmapLogStore if sim.scenario.flush_mode == "sync" else MmapLogStore
        self.disk.crashed = self.disk.crash_armed = False
        try:
            store = cls(self.dir, sim.store_config)
        except DLedgerError as exc:
            raise Violation(f"{self.node_id} cannot reopen its store: {exc}") from exc
        self.store = store
        self.incarnation += 1
        rng = random.Random(sim.seed * 7919 + self.salt * 104729 + self.incarnation)
        # every restart follows a crash or a power loss: never a clean shutdown
        # (the abort marker says whether the crashed run flushed asynchronously: only then
        # may it have lost what it acknowledged; a new disk has no marker)
        unclean = self.incarnation > 1 and not self.new_disk and self.config.store.flush_mode == "async"
        core, _ = member_core(self.config, store, FileTermStore(self.dir), rng, lambda: unclean)
        self.new_disk = False
        driver = RaftDriver(core, lambda outbound: sim._send(self, driver, outbound))
        self.driver = driver
        now = sim.now
        self.next_flush_ms = now + rng.randrange(sim.store_config.flush_file_interval_ms)
        self.next_checkpoint_ms = now + sim.store_config.checkpoint_interval_ms
        self.last_commit = core.member_state.committed_index
        self.verified = self.seen_end = self.led_term = self.agree = -1
        sim.checker.check_reopen(self, power_loss=self.loss_window is not None)
        if self.divergent_at >= 0:
            self.divergent_at = -1  # look again: it may have truncated the old history
        if self.loss_window is not None:
            event, before, durable = self.loss_window
            if store.end_index < before and sim.scenario.flush_mode == "sync":
                raise Violation(
                    f"{self.node_id}: sync mode lost entries to power loss #{event}: "
                    f"recovered end {store.end_index} < end {before}"
                )
            if store.end_index < durable:
                raise Violation(
                    f"{self.node_id}: power loss #{event} took entries the store had flushed: "
                    f"recovered end {store.end_index} < durable end {durable}"
                )
            if store.end_index < before:
                self.sim.checker.windows.append(LossWindow(event, self.node_id, store.end_index, before))
                self.sim.stats.entries_unflushed_lost += before - store.end_index
            self.sim.log(
                f"{self.node_id} power loss #{event}: end {before} (durable {durable}) recovered as {store.end_index}"
            )
            self.loss_window = None

        def handler(req: RequestOrResponse) -> Future[RequestOrResponse]:
            try:
                return driver.deliver(req, sim.now)
            except SimCrash:
                self.disk.crashed = True
                return Future()

        sim.net.register(self.node_id, handler)

    def down(self, power_loss: bool, torn: str | None = None) -> None:
        """The process dies: its mappings go away without a flush (the page cache, and so
        every byte written through them, survives unless `power_loss`; `torn` forces the
        torn-tail mode, see NodeDisk.power_loss)."""
        sim = self.sim
        store = self.store
        assert store is not None
        sim.net.unregister(self.node_id)
        if power_loss:
            self.loss_window = (sim.stats.power_losses, store.end_index, store._durable_end_index)
        # the log it goes down with: verified committed prefix + the (term, uid) tail (as
        # far as it reads back: a crash inside a truncate leaves the tail unreadable)
        self.down_verified = self.verified
        self.down_agree = self.agree
        assert self.driver is not None
        # holding, or voting only for logs that reach a floor: after the (unclean) restart it holds again
        self.down_holding = self.driver.core.elector.vote_hold.pending
        self.down_log = {}
        for i in range(max(self.verified + 1, store.begin_index, 0), store.end_index + 1):
            try:
                entry = store.get(i)
            except (DLedgerError, IndexError, ValueError):
                break
            self.down_log[i] = (entry.term, uid_of(entry.body))
        store.data_list.close()
        store.index_list.close()
        store._lock.release()  # the kernel drops a killed process's lock
        self.store = self.driver = None
        for op in self.pending:
            if op.status == "pending":
                op.status = "info"
        self.pending.clear()
        if power_loss:
            for report in self.disk.power_loss(sim.rng, torn):
                sim.stats.torn_modes[report.mode] = sim.stats.torn_modes.get(report.mode, 0) + 1
                sim.stats.unsynced_bytes_lost += report.dirty_bytes - report.kept_bytes
        self.disk.crashed = self.disk.crash_armed = False

    def wipe(self, state: str = "existing") -> None:
        """While down, the member loses its disk: it comes back with an empty directory,
        told that its group exists (`--initial-cluster-state existing`), or started as
        if the group were new (`state="new"`: it must find out by asking)."""
        assert self.store is None, "wipe a member that is down"
        unregister_disk(self.disk)
        shutil.rmtree(self.dir)
        self.disk = NodeDisk(self.dir)
        register_disk(self.disk)
        self.config.initial_cluster_state = state
        self.down_verified, self.down_log, self.loss_window = -1, {}, None
        self.down_agree, self.down_holding = -1, False  # it keeps nothing across this restart
        self.max_term = 0  # its term and vote went with the disk
        self.new_disk = True
        self.sim.log(f"{self.node_id} lost its disk (restarts {state})")

    def flush_if_due(self, now: int) -> None:
        """What the store's flush thread does (`_flush_once`), on simulated time."""
        store = self.store
        assert store is not None
        cfg = self.sim.store_config
        if now >= self.next_flush_ms:
            self.next_flush_ms = now + cfg.flush_file_interval_ms
            store.flush()
        if now >= self.next_checkpoint_ms:
            self.next_checkpoint_ms = now + cfg.checkpoint_interval_ms
            store.write_checkpoint()


class Simulation:
    """A cluster, a fault schedule and the checker.

    Args:
        scenario: what may happen.
        seed: the one source of randomness.
        base_dir: an empty directory for the members' stores.
        trace: keep a human-readable event trace (printed on failure).
    """

    STEP_MS = 5

    def __init__(self, scenario: Scenario, seed: int, base_dir: Path, trace: bool = True) -> None:
        self.scenario = scenario
        self.seed = seed
        self.base_dir = base_dir
        self.rng = random.Random(seed)
        self.clock = ManualClock(0)
        self.net = InMemoryNetwork(self.clock, seed=seed ^ 0x5EED, min_delay_ms=1, max_delay_ms=3, rpc_timeout_ms=300)
        self.store_config = StoreConfig(
            data_file_size=256 * 1024,
            index_file_size=32 * 512,
            flush_mode="sync" if scenario.flush_mode == "sync" else "async",
            flush_file_interval_ms=10,
            checkpoint_interval_ms=200,
            warm_ahead_bytes=0,
        )
        self.stats = Stats()
        self.checker = Checker(scenario.majority, allow_loss=scenario.allow_loss)
        self.term_watch = TermWatch()
        self.trace_on = trace
        self.trace: list[str] = []
        self.leader_noop = not scenario.biased or self.rng.random() < 0.5
        self.episode: Episode | None = None
        ids = [f"n{k}" for k in range(scenario.nodes)]
        peers = ";".join(f"{i}-127.0.0.1:{30000 + k}" for k, i in enumerate(ids))
        self.nodes = {i: SimNode(self, i, k, peers) for k, i in enumerate(ids)}
        self.checker.nodes = list(self.nodes.values())
        self.next_uid = 0
        self.partition_until = -1
        self.faults_on = True
        self.reads = ReadLoad(self, seed) if scenario.reads else None
        self.producers = ProducerLoad(self, seed, scenario.producers) if scenario.producers else None
        for node in self.nodes.values():
            node.open()

    def close(self) -> None:
        for node in self.nodes.values():
            if node.up:
                node.down(power_loss=False)
            unregister_disk(node.disk)

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def log(self, what: str) -> None:
        if self.trace_on:
            self.trace.append(f"{self.now:>7} ms  {what}")

    def describe(self) -> str:
        parts = []
        for node in self.nodes.values():
            if node.core is None or node.store is None:
                parts.append(f"{node.node_id}: down")
            else:
                ms = node.core.member_state
                parts.append(
                    f"{node.node_id}: {ms.role.value} term={ms.current_term} end={node.store.end_index}"
                    f"/{node.store.end_term} commit={ms.committed_index}"
                )
        return "; ".join(parts)

    # -- driving

    def _guard(self, node: SimNode, action: Callable[[], object]) -> None:
        try:
            action()
        except SimCrash:
            node.disk.crashed = True

    def step(self) -> None:
        """Advance one step: flushes, ticks, deliveries, client load and faults, then
        every invariant."""
        self.clock.advance(self.STEP_MS)
        now = self.now
        self.stats.steps += 1
        for node in self.nodes.values():
            if node.up:
                self._guard(node, lambda n=node: n.flush_if_due(now))  # type: ignore[misc]
            if node.up and not node.disk.crashed:
                self._guard(node, lambda n=node: self._tick(n, now))  # type: ignore[misc]
        self.net.step()
        self._reap()
        self.check()
        if self.producers is not None:
            self.producers.step()
        if self.faults_on:
            self._client_load()
            self._faults()
        self._reap()
        self._restarts()
        self.check()

    def _tick(self, node: SimNode, now: int) -> None:
        driver = node.driver
        assert driver is not None
        core = driver.core
        was_leader = core.member_state.is_leader
        self._passes(driver, now)
        if core.member_state.is_leader and not was_leader:
            self.stats.elections += 1
            if self.faults_on and self.episode is None and self.rng.random() < 0.2:
                # a voter dies right after its vote: its persisted vote must hold
                voter = self.rng.choice([n for n in self.nodes.values() if n is not node])
                if voter.up:
                    self.log(f"{voter.node_id} process crash right after the election")
                    self.stats.crashes += 1
                    self._take_down(voter, power_loss=False, restart_in=0)
            self.log(f"{node.node_id} leader of term {core.member_state.current_term} (end {node.store.end_index})")  # type: ignore[union-attr]

    def _passes(self, driver: RaftDriver, now: int) -> None:
        """The member's service threads, one pass each, in a random order; while faults
        are on, a thread sometimes misses its turn (descheduled) and the entry handler
        sometimes gets through only part of its queue."""
        rng = self.rng
        passes = list(driver.passes)
        rng.shuffle(passes)
        for name in passes:
            if self.faults_on and rng.random() < 0.05:
                continue
            budget = None
            if name == HANDLER:
                budget = rng.choice((1, 2, 8)) if self.faults_on and rng.random() < 0.1 else MAX_HANDLER_STEPS_PER_PASS
            driver.run_pass(name, now, handler_budget=budget)

    def _send(self, node: SimNode, driver: RaftDriver, outbound: Outbound) -> None:
        """The send hook of `node`'s `driver`: answers go back to it while it runs (the
        quorum check an acknowledgement allows runs in `on_response`)."""
        target, request = outbound.target_id, outbound.request
        fut = self.net.send(node.node_id, target, request)

        def respond() -> None:
            driver.on_response(target, request, None if fut.exception() else fut.result(), self.now)

        def done(f: Future[RequestOrResponse]) -> None:
            if node.driver is driver and not node.disk.crashed:
                self._guard(node, respond)

        fut.add_done_callback(done)

    def _reap(self) -> None:
        for node in self.nodes.values():
            if node.up and node.disk.crashed:
                self.stats.msync_crashes += 1
                self.log(f"{node.node_id} crashed inside a store call (before an msync)")
                self._take_down(node, power_loss=False)

    def _take_down(self, node: SimNode, power_loss: bool, restart_in: int | None = None) -> None:
        node.down(power_loss)
        delay = self.rng.choice((0, 0, 50, 200, 600, 1500)) if restart_in is None else restart_in
        node.restart_at = self.now + delay

    def _restarts(self) -> None:
        for node in self.nodes.values():
            if not node.up and self.now >= node.restart_at:
                node.open()
                assert node.store is not None and node.core is not None
                self.log(
                    f"{node.node_id} restarted: end {node.store.end_index}/{node.store.end_term} "
                    f"commit {node.core.member_state.committed_index} term {node.core.member_state.current_term}"
                )

    def check(self) -> None:
        for node in self.nodes.values():
            if node.up:
                self.checker.check_node(node, self.now)
        self.checker.check_replication(list(self.nodes.values()))
        self.term_watch.check(self.net, {n.node_id: n.core if n.up else None for n in self.nodes.values()})
        if self.reads is not None:
            self.reads.check()

    # -- client load

    def _body(self) -> bytes:
        uid = self.next_uid
        self.next_uid += 1
        size = self.rng.choice((8, 40, 100, 300, 700, 1500, 4000))
        return b"u%d." % uid + self.rng.randbytes(self.rng.randrange(size))

    def _client_load(self) -> None:
        if self.reads is not None:
            self.reads.maybe_read()
        if self.rng.random() >= 0.25:
            return
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.member_state.is_leader]
        up = [n for n in self.nodes.values() if n.up]
        if not up:
            return
        node = self.rng.choice(leaders) if leaders and self.rng.random() < 0.9 else self.rng.choice(up)
        if self.episode is not None and node.node_id in self.episode.quiet:
            return
        count = 1 if self.rng.random() < 0.6 else self.rng.randint(2, 24)
        self.append(node, [self._body() for _ in range(count)])

    def append(self, node: SimNode, bodies: list[bytes]) -> Op:
        """One client request to `node`; its outcome is recorded in the op."""
        driver = node.driver
        assert driver is not None
        core = driver.core
        op = Op([uid_of(b) for b in bodies], node.node_id, self.now)
        for uid in op.uids:
            self.checker.ops[uid] = op
        self.stats.ops += 1
        try:
            fut = driver.append(bodies, self.now)
        except DLedgerError as exc:
            op.status = "fail" if exc.code in DEFINITE_FAILURES else "info"
            return op
        except SimCrash:
            node.disk.crashed = True
            op.status = "info"
            return op
        node.pending.append(op)

        def done(f: Future[int]) -> None:
            if op.status != "pending":
                return
            op.complete_ms = self.now
            exc = f.exception()
            if exc is not None:
                op.status = "info"
                return
            op.status, op.index = "ok", f.result()
            self.stats.entries_acked += len(op.uids)
            if node.core is core:
                self.checker.on_ack(node, op)

        fut.add_done_callback(done)
        return op

    # -- faults

    def _chance(self, per_second: float) -> bool:
        return self.rng.random() < per_second * self.STEP_MS / 1000

    def _episodes(self) -> bool:
        """Advance the running biased episode (`tests.sim.episodes`) or maybe start one;
        True while one runs (it owns partitions, crashes and power losses then)."""
        if self.episode is None:
            if self.scenario.biased and self._chance(EPISODES_PER_SECOND):
                self.episode = start_episode(self)
                if self.episode is not None:
                    self.stats.episodes += 1
                    self.partition_until = -1
        elif not self.episode.step():
            self.episode = None
            self.net.heal()
            self.log("episode over: network healed")
        return self.episode is not None

    def _faults(self) -> None:
        rng = self.rng
        ids = list(self.nodes)
        if self._episodes():
            if self._chance(0.5):
                self._weather()
            return
        if self.partition_until >= 0 and self.now >= self.partition_until:
            self.net.heal()
            self.partition_until = -1
            self.log("network healed")
        if self.partition_until < 0 and self._chance(0.6):
            self._partition(ids)
        if self._chance(0.5):
            self._weather()
        up = [n for n in self.nodes.values() if n.up]
        if up and self._chance(0.35):
            node = self._victim(up)
            self.stats.crashes += 1
            self.log(f"{node.node_id} process crash")
            self._take_down(node, power_loss=False)
        up = [n for n in self.nodes.values() if n.up]
        if self.scenario.power_loss != "none" and self._chance(0.5):
            self._power_loss()
        up = [n for n in self.nodes.values() if n.up]
        if self.scenario.flush_stalls and up and self._chance(0.5):
            node = rng.choice(up)
            stall = rng.choice((20, 50, 100, 300))
            node.next_flush_ms = max(node.next_flush_ms, self.now + stall)
            self.log(f"{node.node_id} flush stalls for {stall} ms")
        if self.scenario.crash_in_msync and up and self._chance(0.25):
            node = rng.choice(up)
            node.disk.crash_armed = True

    def _victim(self, up: list[SimNode]) -> SimNode:
        leaders = [n for n in up if n.core is not None and n.core.member_state.is_leader]
        return self.rng.choice(leaders) if leaders and self.rng.random() < 0.5 else self.rng.choice(up)

    def _partition(self, ids: list[str]) -> None:
        rng = self.rng
        kind = rng.choice(("isolate", "split", "one-way", "bridge" if len(ids) >= 5 else "split"))
        if kind == "isolate":
            leaders = [n.node_id for n in self.nodes.values() if n.core is not None and n.core.member_state.is_leader]
            victim = rng.choice(leaders) if leaders and rng.random() < 0.5 else rng.choice(ids)
            self.net.isolate(victim, ids)
            what = f"isolate {victim}"
        elif kind == "split":
            shuffled = ids[:]
            rng.shuffle(shuffled)
            cut = rng.randint(1, len(ids) - 1)
            self.net.partition(shuffled[:cut], shuffled[cut:])
            what = f"split {shuffled[:cut]} | {shuffled[cut:]}"
        elif kind == "one-way":
            a, b = rng.sample(ids, 2)
            self.net.block(a, b, both_ways=False)
            what = f"one-way block {a} -> {b}"
        else:  # bridge: two halves that only the middle node joins
            shuffled = ids[:]
            rng.shuffle(shuffled)
            mid, left, right = shuffled[0], shuffled[1:3], shuffled[3:]
            self.net.partition(left, right)
            what = f"bridge {left} - {mid} - {right}"
        self.stats.partitions += 1
        self.partition_until = self.now + rng.choice((50, 200, 500, 1000, 2500))
        self.log(what)

    def _weather(self) -> None:
        rng, net = self.rng, self.net
        net.drop_rate = rng.choice((0.0, 0.0, 0.02, 0.1, 0.3))
        net.duplicate_rate = rng.choice((0.0, 0.0, 0.02, 0.1))
        net.reorder = rng.random() < 0.4
        net.max_delay_ms = rng.choice((3, 3, 10, 40, 120))
        self.log(
            f"network: drop {net.drop_rate} dup {net.duplicate_rate} reorder {net.reorder} "
            f"delay 1-{net.max_delay_ms} ms"
        )

    def _power_loss(self) -> None:
        rng = self.rng
        mode = self.scenario.power_loss
        up = [n for n in self.nodes.values() if n.up]
        if not up:
            return
        if mode == "single":
            victims = [self._victim(up)]
        else:
            n = self.scenario.nodes
            sizes = (1, self.scenario.majority, n) if mode == "any" else (self.scenario.majority, n)
            size = rng.choice(sizes)
            everyone = list(self.nodes.values())
            victims = [v for v in rng.sample(everyone, size) if v.up]
            if not victims:
                return
            if size > 1:
                self.stats.group_power_losses += 1
        self.lose_power(victims)

    def lose_power(self, victims: list[SimNode], restart_in: int | None = None) -> None:
        """One power-loss event: every member of `victims` (up) loses power at once."""
        self.stats.power_losses += 1
        self.stats.power_loss_sizes[self.stats.power_losses] = len(victims)
        self.log(f"power loss #{self.stats.power_losses}: {[v.node_id for v in victims]}")
        for victim in victims:
            self._take_down(victim, power_loss=True, restart_in=restart_in)

    # -- the end of a run

    def converge(self, max_ms: int = 30_000) -> None:
        """Heal everything, restart every member, and wait until one leader is followed
        by all and new appends commit on every member."""
        self.faults_on = False
        self.episode = None
        self.net.heal()
        self.net.drop_rate = self.net.duplicate_rate = 0.0
        self.net.reorder = False
        self.net.max_delay_ms = 3
        self.partition_until = -1
        for node in self.nodes.values():
            node.disk.crash_armed = False
            if not node.up:
                node.restart_at = self.now
        self.log("healing: no more faults")
        start = self.now
        deadline = start + max_ms
        probes: list[Op] = []
        while True:
            self.step()
            leader = self._settled_leader()
            if leader is not None and not probes:
                probes = [self.append(leader, [self._body() for _ in range(k)]) for k in (1, 3)]
            if probes and all(p.status == "ok" for p in probes) and self._all_caught_up():
                break
            if probes and any(p.status in ("fail", "info") for p in probes):
                probes = []
            if self.now >= deadline:
                tag, known = self._known_stall()
                if known:
                    raise broken(tag, f"{known}: {self.describe()}")
                raise Violation(f"no convergence within {max_ms} ms after healing: {self.describe()}")
        self.stats.converge_ms = self.now - start
        self.checker.final_check(list(self.nodes.values()))
        self.stats.sim_ms = self.now
        self.stats.checks = self.checker.checks
        self.stats.committed_deletions = self.checker.deletions
        ops = {id(o): o for o in self.checker.ops.values()}.values()
        self.stats.ok = sum(o.status == "ok" for o in ops)
        self.stats.fail = sum(o.status == "fail" for o in ops)
        self.stats.info = sum(o.status in ("info", "pending") for o in ops)

    def _known_stall(self) -> tuple[str, str]:
        """When the healed cluster does not converge because of a reported bug: (its tag,
        what is stuck); ("", "") when some member is stuck for another reason."""
        leader = self.leader()
        if leader is None or leader.store is None or leader.core is None:
            return "", ""
        tags, reasons = [], []
        for node in self.nodes.values():
            if node is leader or node.divergent_at >= 0 or node.store is None or node.core is None:
                continue
            store, committed = node.store, node.core.member_state.committed_index
            if committed == leader.store.end_index:
                continue
            dispatcher = leader.core.dispatchers.get(node.node_id)
            match = getattr(dispatcher, "match_index", committed)
            state = getattr(getattr(dispatcher, "state", None), "value", "")
            nxt = store.end_index + 1
            matches_at_end = store.end_index < 0 or leader.store.term_at(store.end_index) == store.end_term
            if match > store.end_index:
                # R6 when the leader keeps resending a push the follower cannot take
                tags.append("R6" if getattr(dispatcher, "pending", None) else "R4")
                reasons.append(
                    f"{node.node_id} lost entries it had acknowledged (end {store.end_index}, the leader's match "
                    f"{match}) and the leader never compares again"
                )
            elif state in ("COMPARE", "TRUNCATE") and committed > match:
                tags.append("R2")
                reasons.append(
                    f"the leader compares {node.node_id} below its committed index {committed} (match {match}) "
                    "and its TRUNCATE of committed entries is refused forever"
                )
            elif matches_at_end and nxt <= leader.store.end_index and leader.store.get(nxt).pos != int(store.write_pos):
                tags.append("B2")
                reasons.append(
                    f"{node.node_id}'s write position {int(store.write_pos)} after a segment-end blank is not where "
                    f"the leader's entry {nxt} sits"
                )
            else:
                return "", ""
        return (tags[0] if tags else ""), "; ".join(reasons)

    def _settled_leader(self) -> SimNode | None:
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.member_state.is_leader]
        if len(leaders) != 1:
            return None
        leader = leaders[0]
        assert leader.core is not None
        for node in self.nodes.values():
            if node.core is None or node.divergent_at >= 0:
                continue
            ms = node.core.member_state
            if ms.current_term != leader.core.member_state.current_term or ms.leader_id != leader.node_id:
                return None
        return leader

    def _all_caught_up(self) -> bool:
        leader = self._settled_leader()
        if leader is None or leader.store is None:
            return False
        end = leader.store.end_index
        return all(
            n.core is not None and n.core.member_state.committed_index == end
            for n in self.nodes.values()
            if n.divergent_at < 0
        )

    # -- scripting (deterministic scenarios)

    def run_for(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.step()

    def run_until(self, predicate: Callable[[], bool], max_ms: int = 10_000) -> None:
        end = self.now + max_ms
        while not predicate():
            if self.now >= end:
                raise AssertionError(f"condition not reached within {max_ms} ms: {self.describe()}")
            self.step()

    def leader(self) -> SimNode | None:
        """The one member that believes it leads, if exactly one does."""
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.member_state.is_leader]
        return leaders[0] if len(leaders) == 1 else None

    def run(self, steps: int) -> Stats:
        """`steps` steps with faults, then convergence and the final checks."""
        for _ in range(steps):
            self.step()
        self.converge()
        if self.reads is not None:
            self.reads.check()
            self.stats.reads_confirmed = self.reads.confirmed
        if self.producers is not None:
            self.producers.final_check()
            self.stats.producers = dict(self.producers.stats)
        return self.stats
