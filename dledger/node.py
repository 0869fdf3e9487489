"""DLedgerNode: one member of a Raft group, the threaded shell around RaftCore.

The node owns the store, the term store, the Raft core, the transport and the
state-machine caller. Raft decisions stay in `RaftCore` and the loop around it in
`RaftDriver`; here are threads, locks, the clock and I/O: the elector, a dispatcher per
peer, the entry handler, the quorum-ack checker and the state-machine caller, each a
`ServiceThread` running one pass of the driver, and the store's own passes. One lock
guards the core (DLedger's `synchronized (memberState)`); requests are sent, and the
disk is synced, outside it."""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeGuard

from dledger.clock import Clock, MonotonicClock, perf_us
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.config import DLedgerConfig
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD, Entry
from dledger.metrics import NodeMetrics
from dledger.node_durable import SyncDurability
from dledger.node_producers import NodeProducers, StampedAppend
from dledger.node_reads import NodeReads
from dledger.node_snapshots import NodeSnapshots, receive_install
from dledger.node_status import NodeStatus
from dledger.node_store import collect_status, member_core, open_node_store
from dledger.raft.driver import ELECTOR, HANDLER, QUORUM, RaftDriver, dispatch_pass
from dledger.raft.elector import Outbound
from dledger.raft.log import LogStore, TermStore, first_readable
from dledger.raft.member_state import Role
from dledger.raft.messages import (
    InstallSnapshotRequest,
    InstallSnapshotStream,
    PushEntryRequest,
    PushType,
    RequestOrResponse,
)
from dledger.raft.transfer import new_term_of
from dledger.record import check_append
from dledger.service_thread import ServiceThread, start_passes
from dledger.statemachine import StateMachine, StateMachineCaller
from dledger.store.abort_marker import AbortMarker
from dledger.store.term_store import FileTermStore
from dledger.transport.base import Transport

log = logging.getLogger(__name__)

__all__ = ["DLedgerNode", "NodeStatus"]

IDLE_PASS_MS = 10  # how often the service threads run when nobody wakes them
SM_CALLER = "sm-caller"  # the state-machine caller's thread, beside the driver's passes
PRODUCERS = "producers"  # the thread folding the committed log's producer stamps


@dataclass(slots=True)
class _ClientAppend:
    bodies: list[bytes]
    magic: int = MAGIC_NORMAL  # or MAGIC_RECORD: the bodies are record bodies
    future: Future[int] | None = None  # set by whoever appends it
    error: DLedgerError | None = None


def _is_append_push(request: RequestOrResponse) -> TypeGuard[PushEntryRequest]:
    return isinstance(request, PushEntryRequest) and request.type is PushType.APPEND


class DLedgerNode:
    """A DLedger member: elects, replicates, commits and serves committed reads.

    Args:
        config: the member's configuration.
        transport: how requests reach the other members (may be set before `start`).
        store: the log (default: opened from `config`).
        term_store: where term and vote live (default: the `currterm` file).
        clock: time source (default: the monotonic clock).
        state_machine: receives committed entries in order (optional).
        rng: randomness of vote intervals (seed it for reproducible runs).
        repair: let recovery cut a damaged log back to its last valid entry (the member
            then rejoins: see dledger.node_store.open_node_store).
    """

    def __init__(
        self,
        config: DLedgerConfig,
        transport: Transport | None = None,
        *,
        store: LogStore | None = None,
        term_store: TermStore | None = None,
        clock: Clock | None = None,
        state_machine: StateMachine | None = None,
        rng: random.Random | None = None,
        repair: bool = False,
    ) -> None:
        self.config = config.validated()
        self.transport = transport
        self.clock: Clock = clock or MonotonicClock()
        self.store: LogStore = store if store is not None else open_node_store(config, repair=repair)
        try:
            self.term_store: TermStore = term_store or FileTermStore(config.default_path)
            # a store on disk remembers whether its last run ended cleanly, and its place in the group
            node_dir = self.store.node_dir
            marker = self._abort_marker = AbortMarker(node_dir, config.store.flush_mode) if node_dir else None
            self.core, self.membership = member_core(
                config, self.store, self.term_store, rng or random.Random(), lambda: bool(marker and marker.arm())
            )
        except BaseException:
            if store is None:
                self.store.close()  # nothing else would release the store's lock
            raise
        self._outbox: list[Outbound] = []  # what the driver sent under the lock: it goes out after it
        self.driver = RaftDriver(self.core, self._outbox.append, self._wake, eager=True)
        self.sync_mode = config.store.flush_mode == "sync"
        self._lock = threading.RLock()
        self._commit_cond = threading.Condition(self._lock)
        self._appends: deque[_ClientAppend] = deque()
        self._durable = SyncDurability(self.store, self._commit_pass, config.self_id) if self.sync_mode else None
        self.caller: StateMachineCaller | None = None
        if state_machine is not None:
            self.caller = StateMachineCaller(self.store, lambda: self.core.member_state.committed_index, state_machine)
            self.caller.on_stop = self.core.member_state.machine_stopped  # it hands leadership over
        self._stopped = False
        self.producers = NodeProducers(self.store, node_dir, config, self._fold_limit)
        self.snapshots = NodeSnapshots.open(self, node_dir, close_store=store is None)  # loads the newest
        self._role = self.core.member_state.role
        self._started = False
        self._threads: dict[str, ServiceThread] = {}  # by pass name (dledger.raft.driver)
        self._store_threads: list[ServiceThread] = []
        self._push_sent_us: dict[tuple[str, int], float] = {}
        self.metrics = NodeMetrics(config.group, config.self_id)
        self.metrics.watch(self.status)
        if self.caller is not None:
            self.caller.observer = self.metrics.observe_apply
        self.reads = NodeReads(self)  # Query: reads of the state machine (dledger.node_reads)

    # -- lifecycle

    def start(self) -> None:
        """Start the store's periodic passes and the node's service threads."""
        if self._started:
            return
        if self.transport is None:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, "a node needs a transport before start()")
        self._started = True
        self._store_threads = start_passes(self.store.periodic_passes())
        elector_ms = max(1, min(IDLE_PASS_MS, self.config.min_vote_interval_ms // 4 or 1))
        threads = {ELECTOR: ServiceThread(f"dledger-elector-{self.config.self_id}", self._elector_pass, elector_ms)}
        for peer in self.core.member_state.other_peer_ids:
            body = partial(self._dispatcher_pass, peer)
            threads[dispatch_pass(peer)] = ServiceThread(f"dledger-dispatch-{peer}", body, IDLE_PASS_MS)
        threads[HANDLER] = ServiceThread("dledger-entry-handler", self._handler_pass, IDLE_PASS_MS)
        threads[QUORUM] = ServiceThread("dledger-quorum-ack", self._quorum_pass, IDLE_PASS_MS)
        if self.caller is not None:
            threads[SM_CALLER] = ServiceThread("dledger-sm-caller", self.caller.run_until_idle, 5 * IDLE_PASS_MS)
        threads[PRODUCERS] = ServiceThread("dledger-producers", self.producers.fold_pass, 5 * IDLE_PASS_MS)
        self._threads = threads
        for thread in threads.values():
            thread.start()

    def shutdown(self) -> None:
        """Stop the threads, fail pending client requests, flush, checkpoint and close
        the store. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for thread in self._threads.values():
            thread.stop()
        if self.snapshots is not None:
            self.snapshots.stop()
        with self._lock:
            self.core.quorum.on_role_change(-1, Role.CANDIDATE)  # pending requests end with TERM_CHANGED
            self.core.reads.on_role_change(-1, Role.CANDIDATE, -1)  # pending reads end with NOT_LEADER
            self._commit_cond.notify_all()
        if self._durable is not None:
            self._durable.shutdown()
        self.producers.close()
        for thread in self._store_threads:
            thread.stop()
        self.store.close()
        if self._abort_marker is not None and self.store.failure is None:  # a failed store: unclean
            self._abort_marker.clear()

    def __enter__(self) -> DLedgerNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- service thread bodies

    @contextmanager
    def _step(self) -> Iterator[int]:
        """Hold the core lock for one step of the driver (yielding `now_ms`), then tell
        waiters and threads what the step moved (a new role, a higher commit index) and,
        once the lock is released, send the requests the step produced."""
        with self._lock:
            member = self.core.member_state
            committed_before = member.committed_index
            yield self.clock.now_ms()
            if member.role is not self._role:
                self._role = member.role
                if member.is_leader:  # passes that slept as a follower (RaftDriver.idle_wait)
                    for name in (QUORUM, *map(dispatch_pass, member.other_peer_ids)):
                        self._wake(name)
                    if self._durable is not None:  # sync: flush a new leader's NOOP
                        self._durable.leader_copy_soon()
            if member.committed_index != committed_before:
                self._commit_cond.notify_all()
                self._wake(SM_CALLER)
            out = self._outbox[:]
            self._outbox.clear()
        self._send(out)

    def step(self) -> AbstractContextManager[int]:
        """One step of the driver under the core lock (see `_step`), for the reads."""
        return self._step()

    def _elector_pass(self) -> None:
        with self._step() as now:
            self.driver.elector_pass(now)

    def _dispatcher_pass(self, peer: str) -> float | None:
        """The dispatcher thread's pass; how long it sleeps (`RaftDriver.dispatcher_pass`)."""
        with self._step() as now:
            return self.driver.dispatcher_pass(peer, now)

    def _handler_pass(self) -> float | None:
        with self._step() as now:
            self.driver.handler_pass(now)
            return self.driver.idle_wait(HANDLER)

    def _quorum_pass(self) -> float | None:
        with self._step() as now:
            self.driver.quorum_pass(now)
            floor = min(self.core.retention_floor(), self.producers.retention_floor())
            if self.caller is not None:  # what a restart replays (after the newest snapshot) stays
                snapshot = self.snapshots.last_index if self.snapshots is not None else -1
                floor = min(floor, self.caller.applied_index + 1, snapshot + 1)
            self.store.set_retention_floor(floor)
            return self.driver.idle_wait(QUORUM)

    def _fold_limit(self) -> int:  # the producer table folds what is committed and applied
        committed = self.core.member_state.committed_index
        return committed if self.caller is None else min(committed, self.caller.applied_index)

    def _wake(self, name: str) -> None:
        """The driver's wake hook: run the thread of pass `name` now."""
        thread = self._threads.get(name)
        if thread is not None:
            thread.wakeup()

    # -- peer traffic

    def _send(self, out: list[Outbound]) -> None:
        transport = self.transport
        if transport is None or not out:
            return
        for item in out:
            request = item.request
            if isinstance(request, InstallSnapshotRequest) and self.snapshots is not None:
                self.snapshots.send(item.target_id, request)  # streamed on a thread of its own
                continue
            if _is_append_push(request):
                self._push_sent_us[(item.target_id, request.first_index)] = perf_us()
            try:
                future = transport.send(item.target_id, request)
            except Exception as exc:  # a transport must not break the node's threads
                log.warning("send to %s failed: %s", item.target_id, exc)
                self._on_response(item.target_id, item.request, None)
                continue
            future.add_done_callback(partial(self._on_response, item.target_id, item.request))

    def _on_response(
        self, target_id: str, request: RequestOrResponse, future: Future[RequestOrResponse] | None
    ) -> None:
        response: RequestOrResponse | None = None
        if future is not None and future.exception() is None:
            response = future.result()
        if self._stopped:
            return
        if _is_append_push(request):
            sent_us = self._push_sent_us.pop((target_id, request.first_index), None)
            if sent_us is not None and response is not None and response.ok:
                self.metrics.observe_replicate(target_id, perf_us() - sent_us, len(request.entries), request.count)
        with self._step() as now:
            self.driver.on_response(target_id, request, response, now)

    def handle_peer_request(self, request: RequestOrResponse) -> Future[RequestOrResponse]:
        """Answer a Vote, HeartBeat, Push, LeadershipTransfer or InstallSnapshot (a whole
        stream, taken in the calling thread) request from a peer."""
        if isinstance(request, InstallSnapshotStream):
            return receive_install(self.snapshots, request)
        with self._step() as now:
            answer = self.driver.deliver(request, now)
        if self._durable is None or not _is_append_push(request):
            return answer
        return self._durable.after_durable(answer)

    # -- client operations

    def append(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> Future[int]:
        """Append one client request (one or many bodies) as leader.

        Concurrent callers are coalesced into one store append; the pushes go out from
        here when the followers' pipelines are idle (else with the next acknowledgement:
        see `dledger.raft.dispatcher`). Returns a future completing with the request's
        last index once committed (in `sync` mode the leader's copy is on disk before
        this returns, and the pushes to the followers went out before that flush began);
        first index = last - len(bodies) + 1. `magic` MAGIC_RECORD appends record
        bodies (each must decode; refused in java_compat mode).

        Raises:
            DLedgerError: NOT_LEADER, LEADER_TRANSFERRING, LEADER_PENDING_FULL,
                REQUEST_WITH_EMPTY_BODYS or a store error; nothing was appended. The
                future may fail with WAIT_QUORUM_ACK_TIMEOUT or TERM_CHANGED.
        """
        if not bodies:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS)
        if self._stopped:
            raise DLedgerError(ResponseCode.NOT_LEADER, "the node is shut down")
        check_append(bodies, magic, self.config.store.java_compat)
        start_us = perf_us()
        request = _ClientAppend(bodies if isinstance(bodies, list) else list(bodies), magic)
        self._appends.append(request)
        with self._step() as now:
            if self._drain_appends(now):
                self.driver.dispatch_all(now)
        future = request.future
        if future is None:
            raise request.error or DLedgerError(ResponseCode.INTERNAL_ERROR, "append not processed")
        if self._durable is not None:
            self._durable.leader_copy(future)  # while the pushes travel
        metrics = self.metrics
        metrics.append_batch_count.observe(len(request.bodies))
        metrics.append_batch_bytes.observe(sum(map(len, request.bodies)))
        future.add_done_callback(lambda _f: metrics.append_latency.observe(perf_us() - start_us))
        return future

    def append_idempotent(self, bodies: Sequence[bytes], producer_id: int, epoch: int, first_seq: int) -> StampedAppend:
        """An idempotent producer's numbered request, as leader (`NodeProducers.append`)."""
        if self._stopped:
            raise DLedgerError(ResponseCode.NOT_LEADER, "the node is shut down")
        check_append(bodies, MAGIC_RECORD, self.config.store.java_compat)
        with self._step() as now:
            answer = self.producers.append(self.driver, bodies, producer_id, epoch, first_seq, now)
        if self._durable is not None and not answer.duplicate:
            self._durable.leader_copy(answer.future)
        return answer

    def init_producer(self) -> int:
        """A producer id, as leader (`NodeProducers.allocate`; else LEADER_NOT_READY)."""
        with self._step() as now:
            producer_id, noop = self.producers.allocate(self.driver, now)
        if noop and self._durable is not None:
            self._durable.leader_copy_soon()  # sync: the NOOP commits once flushed
        if producer_id is None:
            raise DLedgerError(ResponseCode.LEADER_NOT_READY, "no entry of this term is committed yet")
        return producer_id

    def _commit_pass(self) -> None:
        with self._step() as now:
            self.driver.quorum_pass(now)

    def _drain_appends(self, now: int) -> bool:
        """Under the lock: append every queued client request as one batch; True when
        something was appended."""
        batch: list[_ClientAppend] = []
        while self._appends:
            batch.append(self._appends.popleft())
        if not batch:
            return False  # another caller appended ours already
        try:
            futures = self.driver.append_requests(
                [request.bodies for request in batch], now, [request.magic for request in batch]
            )
        except (DLedgerError, OSError) as exc:
            error = exc if isinstance(exc, DLedgerError) else DLedgerError(ResponseCode.DISK_ERROR, str(exc))
            for request in batch:
                request.error = error
            return False
        for request, future in zip(batch, futures, strict=True):
            request.future = future
        return True

    def get(self, index: int, count: int = 1) -> list[Entry]:
        """Committed entries from `index` (at most `count`).

        Raises:
            DLedgerError: INDEX_OUT_OF_RANGE when `index` is not committed here,
                INDEX_LESS_THAN_LOCAL_BEGIN when it was deleted from this log.
        """
        committed = self.core.member_state.committed_index
        if index < 0 or index > committed:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} is not committed (commit {committed})")
        if index < (first := first_readable(self.store)):  # a compaction may have emptied it (begin -1)
            raise DLedgerError(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"index {index} < first kept {first}")
        start_us = perf_us()
        entries = self.store.get_range(index, min(index + max(count, 1), committed + 1))
        self.metrics.read_latency.observe(perf_us() - start_us)
        return entries

    def iterate(self, from_index: int = 0, to_index: int | None = None, batch: int = 1024) -> Iterator[Entry]:
        """Committed entries from `from_index` up to `to_index` (exclusive) or up to the
        commit index as it stands when the iteration reaches it."""
        index = max(from_index, first_readable(self.store))
        while to_index is None or index < to_index:
            if index > self.core.member_state.committed_index:
                return
            count = batch if to_index is None else min(batch, to_index - index)
            entries = self.get(index, count)
            yield from entries
            index = entries[-1].index + 1

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        """Committed entries from `from_index`, column-wise (empty when none is committed
        yet past `from_index - 1`). A new leader's NOOP entry is a row with an empty body.

        Raises:
            DLedgerError: INDEX_LESS_THAN_LOCAL_BEGIN when `from_index` was deleted here.
        """
        committed = self.core.member_state.committed_index
        if from_index > committed or max_count <= 0:
            return ColumnBatch.empty()
        if from_index < (first := first_readable(self.store)):
            raise DLedgerError(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"index {from_index} < first kept {first}")
        count = min(max_count, committed - from_index + 1)
        start_us = perf_us()
        batch = self.store.read_columns(from_index, count, max_bytes)
        self.metrics.read_latency.observe(perf_us() - start_us)
        return batch

    def wait_committed(self, above_index: int, timeout_s: float) -> int:
        """The committed index once it exceeds `above_index` (or at timeout or shutdown)."""
        with self._commit_cond:
            self._commit_cond.wait_for(
                lambda: self.core.member_state.committed_index > above_index or self._stopped, timeout_s
            )
            return self.core.member_state.committed_index

    def leadership_transfer(self, transferee_id: str) -> Future[int]:
        """Hand leadership to `transferee_id`; the future completes with the new term.

        Raises:
            DLedgerError: NOT_LEADER, UNKNOWN_MEMBER, FALL_BEHIND_TOO_MUCH... (the
                future fails with TAKE_LEADERSHIP_FAILED / TIMEOUT when it does not happen).
        """
        with self._step() as now:
            return new_term_of(self.driver.leadership_transfer(transferee_id, now), transferee_id)

    # -- state

    @property
    def is_leader(self) -> bool:
        """True while this member leads."""
        return self.core.member_state.is_leader

    @property
    def term(self) -> int:
        """The current term."""
        return self.core.member_state.current_term

    @property
    def leader_id(self) -> str | None:
        """The leader this member knows of."""
        return self.core.member_state.leader_id

    @property
    def committed_index(self) -> int:
        """The committed index known here."""
        return self.core.member_state.committed_index

    @property
    def applied_index(self) -> int:
        """The last index applied to the state machine (-1 without one)."""
        return self.caller.applied_index if self.caller is not None else -1

    def set_incoming_appends(self, probe: Callable[[], int]) -> None:
        """Tell the node how to count the client appends on their way to it (the gRPC
        server does: calls accepted whose handler has not run yet). Small backlogs wait
        for them (`DLedgerConfig.push_gather_ms`)."""
        self.core.incoming_appends = probe

    def status(self) -> NodeStatus:
        """A consistent snapshot of this member's state."""
        snapshot = self.snapshots.last_index if self.snapshots is not None else -1
        with self._lock:
            status = collect_status(self.core, self.store, self.config.peer_map, self.applied_index, snapshot)
        return replace(status, producers=len(self.producers.log.committed.table))
