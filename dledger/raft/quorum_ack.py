"""QuorumAckChecker: per-term water marks, the commit decision and pending client futures."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.member_state import MemberState, Role


@dataclass(slots=True)
class _Pending:
    future: Future[int]
    first_index: int
    created_ms: int
    nbytes: int


class QuorumAckChecker:
    """Leader-side commit bookkeeping (DLedger's QuorumAckChecker + pending append futures).

    Water marks are kept per leader term: the match index each member reached in that
    term (the leader's own is its ledger end, or in `sync` flush mode the last entry its
    store has made durable: the leader writes its copy in parallel with replication and
    counts itself toward a quorum only once that copy is on disk, as the Raft thesis
    §10.2.1 allows and etcd does). The commit index only moves by counting
    replicas when the quorum index holds an entry of the *current* term (Raft §5.4.2,
    the Figure 8 rule); older entries then commit with it. A client request (one or many
    entries) is one pending future, completed with its last index once committed.
    """

    def __init__(self, config: DLedgerConfig, member_state: MemberState) -> None:
        self.config = config
        self.member_state = member_state
        self.water_marks: dict[int, dict[str, int]] = {}
        self.count_durable_only = config.store.flush_mode == "sync"
        """The leader counts only its durable entries (`LogStore.durable_index`)."""
        self._pending: dict[int, dict[int, _Pending]] = {}  # term -> last index -> pending (index order)
        self._pending_bytes: dict[int, int] = {}
        self._watchers: list[tuple[int, int, Future[int]]] = []  # (term, index, future) of wait_committed

    # -- water marks

    def update_peer_water_mark(self, term: int, peer_id: str, index: int) -> None:
        """Record that `peer_id` matches the leader up to `index` in leader term `term`."""
        marks = self.water_marks.setdefault(term, {})
        if index > marks.get(peer_id, -1):
            marks[peer_id] = index

    def peer_water_mark(self, term: int, peer_id: str) -> int:
        return self.water_marks.get(term, {}).get(peer_id, -1)

    def quorum_index(self, term: int) -> int:
        """The highest index a majority holds in `term` (-1 when none)."""
        marks = self.water_marks.get(term, {})
        values = sorted((marks.get(p, -1) for p in self.member_state.peer_ids), reverse=True)
        return values[len(values) // 2]

    # -- pending client requests

    def pending_count(self, term: int) -> int:
        return len(self._pending.get(term, {}))

    def check_not_full(self, term: int, nbytes: int = 0) -> None:
        """Raise LEADER_PENDING_FULL when one more request of `nbytes` does not fit."""
        pending = self._pending.get(term)
        if not pending:
            return  # a request alone is always accepted, whatever its size
        if len(pending) >= self.config.max_pending_requests_num:
            raise DLedgerError(ResponseCode.LEADER_PENDING_FULL, f"{len(pending)} requests pending")
        if self._pending_bytes[term] + nbytes > self.config.max_pending_bytes:
            raise DLedgerError(ResponseCode.LEADER_PENDING_FULL, f"{self._pending_bytes[term]} bytes pending")

    def wait_ack(self, term: int, first_index: int, last_index: int, now_ms: int, nbytes: int = 0) -> Future[int]:
        """A future for the request [first_index, last_index] appended in `term`; it
        completes with `last_index` once committed, or fails with WAIT_QUORUM_ACK_TIMEOUT
        or TERM_CHANGED."""
        future: Future[int] = Future()
        if last_index <= self.member_state.committed_index and term == self.member_state.current_term:
            future.set_result(last_index)
            return future
        pending = self._pending.get(term)
        if pending is None:
            pending = self._pending[term] = {}
            self._pending_bytes[term] = 0
        pending[last_index] = _Pending(future, first_index, now_ms, nbytes)
        self._pending_bytes[term] += nbytes
        return future

    def wait_committed(self, term: int, index: int) -> Future[int]:
        """A future completing with `index` once the commit index of leader term `term`
        reaches it (entries appended earlier, perhaps by another leader: a retried
        idempotent request); it fails with TERM_CHANGED when the term ends first."""
        future: Future[int] = Future()
        if index <= self.member_state.committed_index:
            future.set_result(index)
        else:
            self._watchers.append((term, index, future))
        return future

    def _settle_watchers(self) -> None:
        member = self.member_state
        kept = []
        for term, index, future in self._watchers:
            if term != member.current_term or not member.is_leader:
                future.set_exception(DLedgerError(ResponseCode.TERM_CHANGED, f"its leadership of term {term} ended"))
            elif index <= member.committed_index:
                future.set_result(index)
            else:
                kept.append((term, index, future))
        self._watchers = kept

    def _fail_term(self, term: int, code: ResponseCode) -> None:
        for pending in self._pending.pop(term, {}).values():
            if not pending.future.done():
                pending.future.set_exception(DLedgerError(code, f"its leadership of term {term} ended"))
        self._pending_bytes.pop(term, None)

    def on_role_change(self, term: int, role: Role) -> None:
        """Leadership lost or a new term: old requests end with TERM_CHANGED."""
        for old in [t for t in self._pending if t != term or role is not Role.LEADER]:
            self._fail_term(old, ResponseCode.TERM_CHANGED)
        for old in [t for t in self.water_marks if t != term]:
            del self.water_marks[old]
        if self._watchers:
            self._settle_watchers()

    # -- the checker pass

    def check(self, now_ms: int) -> bool:
        """Advance the commit index if a quorum allows it, complete committed futures and
        time out old ones. Returns True when the commit index moved."""
        member = self.member_state
        if not member.is_leader:
            return False
        term = member.current_term
        for old in [t for t in self._pending if t != term]:
            self._fail_term(old, ResponseCode.TERM_CHANGED)
        own = member.ledger_end_index
        if self.count_durable_only:
            own = min(own, member.store.durable_index)
        self.update_peer_water_mark(term, member.self_id, own)
        moved = False
        quorum_index = self.quorum_index(term)
        # only an entry of the current term commits by counting (Figure 8)
        if quorum_index > member.committed_index and member.store.term_at(quorum_index) == term:
            moved = member.update_committed_index(quorum_index)
        if self._watchers:
            self._settle_watchers()
        pending = self._pending.get(term)
        if not pending:
            return moved
        committed = member.committed_index
        done: list[int] = []
        for last_index, item in pending.items():
            if last_index <= committed:
                item.future.set_result(last_index)
                done.append(last_index)
            elif now_ms - item.created_ms >= self.config.max_wait_ack_time_ms:
                item.future.set_exception(
                    DLedgerError(
                        ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, f"index {last_index} not acknowledged by a quorum"
                    )
                )
                done.append(last_index)
            else:
                break  # later requests are younger and later in the log
        for last_index in done:
            self._pending_bytes[term] -= pending.pop(last_index).nbytes
        return moved
