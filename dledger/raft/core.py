"""RaftCore: one member's Raft logic in one object (elector, leadership transfer,
dispatchers, entry handler, quorum-ack checker), still without I/O.

It is driven by the per-service passes, each one DLedger thread's loop body:
`tick_elector` (state maintainer: votes, heartbeats, leadership transfer, preferred
leader), `tick_dispatcher(peer)` (one EntryDispatcher), `tick_handler` (one unit of the
EntryHandler), `tick_quorum` (QuorumAckChecker). The returned requests are sent and
their answers fed back through `on_response`; incoming requests go to `handle_request`.
Every shell does that through `dledger.raft.driver.RaftDriver`. Not thread-safe: a
threaded shell calls every method under one lock (DLedger's `synchronized (memberState)`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import cast

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.dispatcher import EntryDispatcher
from dledger.raft.elector import LeaderElector, Outbound
from dledger.raft.entry_handler import EntryHandler
from dledger.raft.log import LogStore, TermStore
from dledger.raft.log_floors import compaction_floor, retention_floor
from dledger.raft.member_state import MemberState, Role
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    PushEntryResponse,
    ReadIndexRequest,
    ReadIndexResponse,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
)
from dledger.raft.prevote import term_out_of_range
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.raft.read_index import ReadIndex
from dledger.raft.transfer import LeadershipTransfer


def _nothing_incoming() -> int:
    return 0


class RaftCore:
    """All Raft decisions of one member.

    Args:
        config: the member's configuration.
        store: its log.
        term_store: where term and vote are persisted.
        rng: randomness for vote intervals (seed it for deterministic runs).
        unclean_restart: the member's last run, in async flush mode, did not shut down
            cleanly (a crash or a power loss: the abort marker says which mode it ran
            in); it then holds its vote until it caught up with a leader
            (`dledger.raft.vote_hold`).
        rejoin_index: the member lost data (a wiped or repaired store, see
            dledger.store.membership) and holds its vote, without time limit, until it
            caught up with a leader and its committed index reached this (-1: no floor);
            None when it lost nothing.
        founding: with `rejoin_index`: the member has an empty store and was told to
            found its group; it asks the members first (see dledger.raft.vote_hold).
        group_id: the group's id ("" while a joining member has not heard a leader).
        incarnation: this member's incarnation.
    """

    def __init__(
        self,
        config: DLedgerConfig,
        store: LogStore,
        term_store: TermStore,
        rng: random.Random,
        unclean_restart: bool = False,
        rejoin_index: int | None = None,
        founding: bool = False,
        group_id: str = "",
        incarnation: str = "",
    ) -> None:
        self.config = config
        self.store = store
        self.member_state = MemberState(config, store, term_store)
        self.member_state.group_id, self.member_state.incarnation = group_id, incarnation
        # entries acknowledged before an unclean shutdown of an async run may be gone
        self.elector = LeaderElector(
            config,
            self.member_state,
            rng,
            unclean_restart,
            rejoin_index,
            founding,
        )
        self.quorum = QuorumAckChecker(config, self.member_state)
        self.latest_snapshot: tuple[int, int] | None = None
        """(lastIncludedIndex, lastIncludedTerm) of this member's newest snapshot (set by
        the shell that takes, loads or installs them): what a follower below the log's
        first entry is sent, and where retention stops waiting for followers."""
        self.incoming_appends: Callable[[], int] = _nothing_incoming
        """How many client appends are on their way to this member (set by the service
        layer; dispatchers gather small backlogs while some are: see dledger.raft.dispatcher)."""
        self.dispatchers = {
            p: EntryDispatcher(
                config,
                self.member_state,
                p,
                self.quorum,
                self._keeping_up_ahead,
                self._incoming_appends,
                self._latest_snapshot,
            )
            for p in self.member_state.other_peer_ids
        }
        self.handler = EntryHandler(config, self.member_state)
        self.transfer = LeadershipTransfer(config, self.member_state, self.elector, self.quorum)
        self.member_state.group_floor = self.retention_floor  # what its heartbeats announce as leader
        self.reads = ReadIndex(config, self.member_state)
        """Linearizable reads: ReadIndex rounds and the lease (dledger.raft.read_index)."""
        self.elector.on_quorum_round = self.reads.on_quorum_heartbeat
        self.elector.listeners.append(self._on_role_change)

    def _latest_snapshot(self) -> tuple[int, int] | None:
        return self.latest_snapshot

    def _incoming_appends(self) -> int:
        return self.incoming_appends()

    def _keeping_up_ahead(self, peer_id: str, now_ms: int) -> int:
        """How many followers before `peer_id` in peer order keep up (standby pushes)."""
        count = 0
        for peer, dispatcher in self.dispatchers.items():
            if peer == peer_id:
                break
            count += dispatcher.keeping_up(now_ms)
        return count

    def _on_role_change(self, term: int, role: Role) -> None:
        self.quorum.on_role_change(term, role)
        self.transfer.on_role_change(term, role, self.elector.now_ms)
        self.reads.on_role_change(term, role, self.store.end_index)  # before a new leader's NOOP
        if role is Role.LEADER:
            for dispatcher in self.dispatchers.values():
                dispatcher.reset(term)
            self.store.term = term
            cfg = self.config
            if (
                cfg.enable_fast_advance_commit_index
                and not cfg.store.java_compat
                and self.member_state.committed_index < self.store.end_index
            ):
                # older entries only commit with one of the new term (Raft §5.4.2): a NOOP
                # of the new term lets them commit without waiting for a client write
                self.store.append_noop()

    # -- client side

    def append(self, bodies: Sequence[bytes], now_ms: int, magic: int = 1) -> Future[int]:
        """Leader append of one client request; the future completes with the last index
        once committed. Raises DLedgerError NOT_LEADER, LEADER_TRANSFERRING or
        LEADER_PENDING_FULL (the request is then not appended)."""
        return self.append_requests([bodies], now_ms, [magic])[0]

    def append_requests(
        self, requests: Sequence[Sequence[bytes]], now_ms: int, magics: Sequence[int] | None = None
    ) -> list[Future[int]]:
        """Leader append of several client requests at once (one store append per run
        of requests of the same magic): one future per request, completing with that
        request's last index once committed. `magics` gives each request's entry magic
        (1 normal, 16 record; omitted: all normal). All or nothing: raises DLedgerError
        NOT_LEADER, LEADER_TRANSFERRING (also when its store failed: it hands over),
        REQUEST_WITH_EMPTY_BODYS or LEADER_PENDING_FULL (for the requests together) and
        then appends none of them. A store failure half
        way (no room for the next segment) cuts back what the call appended, so that
        nobody was told "not appended" of entries that would commit after all."""
        member = self.member_state
        if not member.is_leader:
            raise DLedgerError(ResponseCode.NOT_LEADER, f"leader is {member.leader_id}")
        if member.transferee is not None:
            raise DLedgerError(ResponseCode.LEADER_TRANSFERRING, f"transferring to {member.transferee}")
        if self.store.failure is not None:  # it hands leadership over (dledger.raft.transfer): nothing appended
            raise DLedgerError(ResponseCode.LEADER_TRANSFERRING, f"its store failed ({self.store.failure})")
        if not requests or not all(requests):
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS)
        sizes = [sum(map(len, bodies)) for bodies in requests]
        term = member.current_term
        self.quorum.check_not_full(term, sum(sizes))
        self.store.term = term
        end_before = self.store.end_index
        try:
            if magics is not None and any(magic != 1 for magic in magics):
                first = self._append_by_magic(requests, magics)
            elif len(requests) == 1:
                first = self.store.append_many(requests[0])
            else:
                first = self.store.append_many([body for bodies in requests for body in bodies])
        except (DLedgerError, OSError) as exc:
            self._cut_back(end_before, exc)
            raise
        futures = []
        for bodies, nbytes in zip(requests, sizes, strict=True):
            last = first + len(bodies) - 1
            futures.append(self.quorum.wait_ack(term, first, last, now_ms, nbytes))
            first = last + 1
        return futures

    def _cut_back(self, end_before: int, failure: BaseException) -> None:
        """Truncate what a failed `append_requests` appended (nothing of it was pushed:
        the caller holds the node's lock, under which pushes are made). When the cut
        fails too, the outcome is unknown: DISK_ERROR, which clients take as such."""
        if self.store.end_index <= end_before:
            return
        try:
            self.store.truncate(end_before + 1)
        except (DLedgerError, OSError) as exc:
            raise DLedgerError(
                ResponseCode.DISK_ERROR, f"{failure}; the entries appended before it could not be cut back: {exc}"
            ) from failure

    def append_noop(self) -> int:
        """Leader append of a NOOP entry of its term, for an entry of the term to commit
        when no client writes one (`dledger.raft.producer_ids`); returns its index.
        Raises DLedgerError NOT_LEADER, LEADER_TRANSFERRING or the store's UNSUPPORTED
        (java_compat); nothing is appended then."""
        member = self.member_state
        if not member.is_leader:
            raise DLedgerError(ResponseCode.NOT_LEADER, f"leader is {member.leader_id}")
        if member.transferee is not None:
            raise DLedgerError(ResponseCode.LEADER_TRANSFERRING, f"transferring to {member.transferee}")
        self.store.term = member.current_term
        return self.store.append_noop()

    def _append_by_magic(self, requests: Sequence[Sequence[bytes]], magics: Sequence[int]) -> int:
        """Append the requests, one store append per run of the same magic; returns the
        first index."""
        first = self.store.end_index + 1
        start = 0
        for k in range(1, len(requests) + 1):
            if k == len(requests) or magics[k] != magics[start]:
                self.store.append_many([body for bodies in requests[start:k] for body in bodies], magics[start])
                start = k
        return first

    def leadership_transfer(self, transferee_id: str, now_ms: int) -> Future[LeadershipTransferResponse]:
        """As the leader, hand leadership to `transferee_id` (the same as a
        LeadershipTransferRequest addressed to this leader in its current term).

        The future completes with a LeadershipTransferResponse whose code is SUCCESS once
        the transferee leads, or UNKNOWN_MEMBER, NOT_LEADER, FALL_BEHIND_TOO_MUCH,
        LEADER_TRANSFERRING, TAKE_LEADERSHIP_FAILED (the transferee did not catch up or
        lost the election within `leadership_transfer_wait_timeout_ms`), EXPIRED_TERM,
        NETWORK_ERROR or TIMEOUT; it never raises. While it runs, appends fail with
        LEADER_TRANSFERRING.
        """
        answer = self.transfer.start(transferee_id, self.member_state.current_term, now_ms)
        self.reads.note_transfer(now_ms)  # no lease while it runs
        return answer

    # -- peer side

    def handle_request(self, req: RequestOrResponse, now_ms: int) -> Future[RequestOrResponse]:
        """Answer a peer request (the future may complete in a later pass)."""
        if isinstance(req, PushEntryRequest):
            bad = self._check_peer(req)
            if bad is None:
                return cast("Future[RequestOrResponse]", self.handler.handle_push(req, now_ms))
            reply: RequestOrResponse = PushEntryResponse(
                local_id=self.member_state.self_id,
                remote_id=req.local_id,
                code=bad,
                term=self.member_state.current_term,
            )
        elif isinstance(req, HeartBeatRequest):
            reply = self.elector.handle_heartbeat(req, now_ms)
        elif isinstance(req, VoteRequest):
            reply = self.elector.handle_vote(req, now_ms)
        elif isinstance(req, LeadershipTransferRequest) and not term_out_of_range(req):
            answer = cast("Future[RequestOrResponse]", self.transfer.handle(req, now_ms))
            self.reads.note_transfer(now_ms)  # no lease while it runs
            return answer
        elif isinstance(req, LeadershipTransferRequest):
            reply = LeadershipTransferResponse(
                **self.member_state.answer_header(req), code=ResponseCode.UNEXPECTED_ARGUMENT
            )
        elif isinstance(req, ReadIndexRequest):
            return self._answer_read_index(req, now_ms)
        else:
            reply = RequestOrResponse(
                group=self.member_state.group,
                local_id=self.member_state.self_id,
                remote_id=req.local_id,
                code=ResponseCode.UNSUPPORTED,
            )
        result: Future[RequestOrResponse] = Future()
        result.set_result(reply)
        return result

    def check_install(self, req: InstallSnapshotRequest) -> ResponseCode | None:
        """None when an InstallSnapshot chunk may be taken: addressed to this member of
        this group (and group id), from members, its term in range and this member
        follows `req.leader_id` in `req.term`; else the code to answer (EXPIRED_TERM for
        a stale term; NOT_FOLLOWER, INCONSISTENT_TERM or INCONSISTENT_LEADER while this
        member does not follow that leader yet: it will after the next heartbeat;
        LOG_DIVERGED for a snapshot of another history: `EntryHandler.check_snapshot`)."""
        bad = self._check_peer(req)
        if bad is None and req.term < self.member_state.current_term:
            bad = ResponseCode.EXPIRED_TERM
        if bad is None:
            bad = self.handler.check_leader(req)
        return bad if bad is not None else self.handler.check_snapshot(req)

    def _check_peer(self, req: PushEntryRequest | InstallSnapshotRequest) -> ResponseCode | None:
        """None when a Push or InstallSnapshot is addressed to this member of this group
        (and group id), comes from members and carries a term in range; else the code."""
        member = self.member_state
        bad = member.check_addressing(req)
        if bad is None and not (member.is_peer_member(req.leader_id) and member.is_peer_member(req.local_id)):
            bad = ResponseCode.UNKNOWN_MEMBER
        if bad is None and term_out_of_range(req):
            bad = ResponseCode.UNEXPECTED_ARGUMENT
        return bad

    # -- the service passes

    def tick_elector(self, now_ms: int) -> list[Outbound]:
        """The state maintainer: votes, heartbeats, leadership transfer and the
        preferred-leader check. Returns the requests to send."""
        out = self.elector.tick(now_ms)
        out.extend(self.transfer.tick(now_ms))
        out.extend(self.reads.tick(now_ms))
        return out

    def tick_dispatcher(self, peer_id: str, now_ms: int) -> list[Outbound]:
        """One pass of the EntryDispatcher of `peer_id` (nothing unless leader)."""
        dispatcher = self.dispatchers.get(peer_id)
        if dispatcher is None or not self.member_state.is_leader:
            return []
        return [Outbound(peer_id, r) for r in dispatcher.tick(now_ms)]

    def tick_handler(self, now_ms: int) -> bool:
        """One unit of follower work (a queued push); False when there was nothing to do."""
        return self.handler.run_once(now_ms)

    def tick_quorum(self, now_ms: int) -> bool:
        """The QuorumAckChecker: advance the commit index, complete or time out client
        futures. Returns True when the commit index moved."""
        return self.quorum.check(now_ms)

    def on_response(self, target_id: str, req: RequestOrResponse, resp: RequestOrResponse | None, now_ms: int) -> bool:
        """Feed back the answer to a request from a pass (None: network error).

        Returns True when the answer acknowledged entries. The quorum check then runs at
        once (the commit index moves and client futures complete without waiting for the
        next `tick_quorum`), so True also means "commit listeners may have news".
        """
        if resp is not None and (resp.code == ResponseCode.NETWORK_ERROR or term_out_of_range(resp)):
            resp = None  # a term above MAX_TERM is logged and never used
        if isinstance(req, PushEntryRequest):
            push = resp if isinstance(resp, PushEntryResponse) else None
            if push is not None and push.term > self.member_state.current_term and self.member_state.is_leader:
                self.elector.change_role_to_candidate(push.term)
                return False
            dispatcher = self.dispatchers.get(target_id)
            if dispatcher is None:
                return False
            before = dispatcher.match_index
            dispatcher.on_response(req, push, now_ms)
            if dispatcher.match_index == before or not self.member_state.is_leader:
                return False
            self.quorum.check(now_ms)
            return True
        if isinstance(req, InstallSnapshotRequest):
            answer = resp if isinstance(resp, InstallSnapshotResponse) else None
            if answer is not None and answer.term > self.member_state.current_term and self.member_state.is_leader:
                self.elector.change_role_to_candidate(answer.term)
            elif (installer := self.dispatchers.get(target_id)) is not None:
                installer.on_install_response(req, answer, now_ms)
            return False
        if isinstance(req, HeartBeatRequest):
            hb = resp if isinstance(resp, HeartBeatResponse) else None
            self.elector.on_heartbeat_response(target_id, req, hb, now_ms)
            self.reads.on_heartbeat_response(target_id, req, hb, now_ms)
        elif isinstance(req, VoteRequest):
            self.elector.on_vote_response(target_id, req, resp if isinstance(resp, VoteResponse) else None, now_ms)
        elif isinstance(req, LeadershipTransferRequest):
            lt = resp if isinstance(resp, LeadershipTransferResponse) else None
            self.transfer.on_response(req, lt, now_ms)
        return False

    # -- linearizable reads (dledger.raft.read_index)

    def read_index(self, now_ms: int) -> Future[int]:
        """As the leader, queue a ReadIndex read: the future completes with the read
        index once a heartbeat round confirmed the leadership (the shell then waits for
        its state machine to apply it), or fails with NOT_LEADER or TIMEOUT. The round
        starts with the next `tick_reads`.

        Raises:
            DLedgerError: NOT_LEADER.
        """
        return self.reads.read(now_ms)

    def lease_read_index(self, now_ms: int) -> int | None:
        """The read index of a LEASE read while this leader's lease holds, else None
        (take `read_index` instead)."""
        return self.reads.lease_index(now_ms)

    def tick_reads(self, now_ms: int) -> list[Outbound]:
        """Start a ReadIndex round for the waiting reads if none is in flight (also run by
        `tick_elector`); returns its heartbeats."""
        return self.reads.tick(now_ms)

    def _answer_read_index(self, req: ReadIndexRequest, now_ms: int) -> Future[RequestOrResponse]:
        """A follower's ReadIndexRequest: the answer completes once a round confirmed the
        leadership (code NOT_LEADER / TIMEOUT / UNEXPECTED_ARGUMENT otherwise)."""
        member = self.member_state
        answer: Future[RequestOrResponse] = Future()

        def reply(code: int, index: int = -1) -> None:
            answer.set_result(ReadIndexResponse(**member.answer_header(req), code=code, index=index))

        if not member.is_peer_member(req.local_id) or req.local_id == member.self_id:
            reply(ResponseCode.UNKNOWN_MEMBER)
            return answer
        if term_out_of_range(req):
            reply(ResponseCode.UNEXPECTED_ARGUMENT)
            return answer
        if req.term > member.current_term:  # the asker knows a later term: this leader was deposed
            reply(ResponseCode.NOT_LEADER)
            return answer
        try:
            read = self.reads.read(now_ms)
        except DLedgerError as exc:
            reply(exc.code)
            return answer

        def done(f: Future[int]) -> None:
            error = f.exception()
            if error is None:
                reply(ResponseCode.SUCCESS, f.result())
            else:
                reply(error.code if isinstance(error, DLedgerError) else ResponseCode.INTERNAL_ERROR)

        read.add_done_callback(done)
        return answer

    # -- log retention and reads

    def retention_floor(self) -> int:
        """The lowest log index some member may still need (dledger.raft.log_floors)."""
        return retention_floor(self.member_state, self.dispatchers.values(), self.latest_snapshot)

    def compaction_floor(self, snapshot_index: int) -> int:
        """The lowest index the log keeps after snapshot `snapshot_index`: on the leader
        what its live followers still need, within `snapshot_catch_up_entries`
        (dledger.raft.log_floors)."""
        return compaction_floor(
            self.config, self.member_state, self.dispatchers, self.elector.peers_live_table, snapshot_index
        )

    def get_committed(self, index: int) -> bytes:
        """The body at `index` if it is committed on this member (never uncommitted data)."""
        if index > self.member_state.committed_index:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} is not committed")
        return self.store.get_body(index)
