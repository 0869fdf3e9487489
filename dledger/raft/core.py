"""RaftCore: one member's Raft logic in one object (elector, dispatchers, entry handler,
quorum-ack checker), still without I/O. A shell (the threaded node, or a single-threaded
simulation) calls `tick(now_ms)`, sends the returned requests, feeds answers back with
`on_response`, and hands incoming requests to `handle_request`."""

from __future__ import annotations

import random
from collections.abc import Sequence
from concurrent.futures import Future

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.dispatcher import EntryDispatcher
from dledger.raft.elector import LeaderElector, Outbound
from dledger.raft.entry_handler import EntryHandler
from dledger.raft.member_state import MemberState, Role, TermStore
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    PushEntryRequest,
    PushEntryResponse,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
)
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.store.base import LogStore

MAX_HANDLER_STEPS_PER_TICK = 10_000


class RaftCore:
    """All Raft decisions of one member.

    Args:
        config: the member's configuration.
        store: its log.
        term_store: where term and vote are persisted.
        rng: randomness for vote intervals (seed it for deterministic runs).
    """

    def __init__(self, config: DLedgerConfig, store: LogStore, term_store: TermStore, rng: random.Random) -> None:
        self.config = config
        self.store = store
        self.ms = MemberState(config, store, term_store)
        self.elector = LeaderElector(config, self.ms, rng)
        self.quorum = QuorumAckChecker(config, self.ms)
        self.dispatchers = {p: EntryDispatcher(config, self.ms, p, self.quorum) for p in self.ms.other_peer_ids}
        self.handler = EntryHandler(config, self.ms)
        self.elector.listeners.append(self._on_role_change)

    def _on_role_change(self, term: int, role: Role) -> None:
        self.quorum.on_role_change(term, role)
        if role is Role.LEADER:
            for dispatcher in self.dispatchers.values():
                dispatcher.reset(term)
            self.store.term = term
            if self.config.enable_fast_advance_commit_index and not self.config.java_compat:
                # a NOOP of the new term lets older entries commit (Raft §5.4.2)
                self.store.append_noop()

    # -- client side

    def append(self, bodies: Sequence[bytes], now_ms: int) -> Future[int]:
        """Leader append of one client request; the future completes with the last index
        once committed. Raises DLedgerError NOT_LEADER, LEADER_TRANSFERRING or
        LEADER_PENDING_FULL (the request is then not appended)."""
        ms = self.ms
        if not ms.is_leader:
            raise DLedgerError(ResponseCode.NOT_LEADER, f"leader is {ms.leader_id}")
        if ms.transferee is not None:
            raise DLedgerError(ResponseCode.LEADER_TRANSFERRING, f"transferring to {ms.transferee}")
        if not bodies:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS)
        nbytes = sum(len(b) for b in bodies)
        term = ms.current_term
        self.quorum.check_not_full(term, nbytes)
        self.store.term = term
        first = self.store.append_many(bodies)
        return self.quorum.wait_ack(term, first, first + len(bodies) - 1, now_ms, nbytes)

    # -- peer side

    def handle_request(self, req: RequestOrResponse, now_ms: int) -> Future[RequestOrResponse]:
        """Answer a peer request (the future may complete in a later `tick`)."""
        result: Future[RequestOrResponse] = Future()
        if isinstance(req, VoteRequest):
            result.set_result(self.elector.handle_vote(req, now_ms))
        elif isinstance(req, HeartBeatRequest):
            result.set_result(self.elector.handle_heartbeat(req, now_ms))
        elif isinstance(req, PushEntryRequest):
            bad = self.elector.check_addressing(req)
            if bad is not None:
                result.set_result(PushEntryResponse(local_id=self.ms.self_id, code=bad, term=self.ms.current_term))
            else:
                inner = self.handler.handle_push(req, now_ms)
                inner.add_done_callback(lambda f: result.set_result(f.result()))
        else:
            result.set_result(
                RequestOrResponse(
                    group=self.ms.group, local_id=self.ms.self_id, remote_id=req.local_id, code=ResponseCode.UNSUPPORTED
                )
            )
        return result

    def tick(self, now_ms: int) -> list[Outbound]:
        """One pass of every service: returns the requests to send."""
        out = self.elector.tick(now_ms)
        steps = 0
        while steps < MAX_HANDLER_STEPS_PER_TICK and self.handler.run_once(now_ms):
            steps += 1
        if self.ms.is_leader:
            for peer, dispatcher in self.dispatchers.items():
                out.extend(Outbound(peer, r) for r in dispatcher.tick(now_ms))
            self.quorum.check(now_ms)
        return out

    def on_response(self, target_id: str, req: RequestOrResponse, resp: RequestOrResponse | None, now_ms: int) -> None:
        """Feed back the answer to a request from `tick` (None: network error)."""
        if resp is not None and resp.code == ResponseCode.NETWORK_ERROR:
            resp = None
        if isinstance(req, VoteRequest):
            self.elector.on_vote_response(target_id, req, resp if isinstance(resp, VoteResponse) else None, now_ms)
        elif isinstance(req, HeartBeatRequest):
            hb = resp if isinstance(resp, HeartBeatResponse) else None
            self.elector.on_heartbeat_response(target_id, req, hb, now_ms)
        elif isinstance(req, PushEntryRequest):
            push = resp if isinstance(resp, PushEntryResponse) else None
            if push is not None and push.term > self.ms.current_term and self.ms.is_leader:
                self.elector.change_role_to_candidate(push.term)
                return
            dispatcher = self.dispatchers.get(target_id)
            if dispatcher is not None:
                dispatcher.on_response(req, push, now_ms)
                if self.ms.is_leader:
                    self.quorum.check(now_ms)

    # -- reads

    def get_committed(self, index: int) -> bytes:
        """The body at `index` if it is committed on this member (never uncommitted data)."""
        if index > self.ms.committed_index:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} is not committed")
        return self.store.get_body(index)
