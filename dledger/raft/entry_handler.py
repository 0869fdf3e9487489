"""EntryHandler: the follower side of replication, without threads.

`handle_push` files a request and returns a future for its answer; `run_once` does one
unit of work (the compare/truncate/commit queue first, then the APPEND whose first
index is the next one, then the periodic abnormal-future check). Every request proves
its position with the previous entry's index and term; the commit index only moves up
to what the request proved to match, and never above this node's ledger end.

A leader whose log holds another term at an index this member committed cannot be of
the same history (Leader Completeness: every leader holds every committed entry). The
group was founded again without this member (members that lost their disks started with
`--initial-cluster-state new`), or a log was changed by hand. Such a request is answered
LOG_DIVERGED, with this member's index and term of the conflict, and changes nothing:
the member keeps its log and logs an error (once per leader and term) instead of
following into a retry loop.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.log import data_segment_size
from dledger.raft.member_state import MemberState
from dledger.raft.messages import (
    InstallSnapshotRequest,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestOrResponse,
)

MAX_CONTROL_QUEUE = 1024

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Waiting:
    request: PushEntryRequest
    future: Future[PushEntryResponse]
    created_ms: int


def _entry_offset(run: bytes, count: int, skip: int) -> int:
    """Byte offset of the `skip`-th entry of an encoded run (headers walked: rare path)."""
    off = 0
    for _ in range(min(skip, count)):
        off += int.from_bytes(run[off + 4 : off + 8], "big", signed=True)
    return off


def _entry_term(run: bytes, offset: int) -> int:
    return int.from_bytes(run[offset + 16 : offset + 24], "big", signed=True)


def _entry_pos(run: bytes, offset: int) -> int:
    return int.from_bytes(run[offset + 24 : offset + 32], "big", signed=True)


class EntryHandler:
    """Follower replication (DLedger's EntryHandler).

    Args:
        config: the follower push timeout.
        member_state: the follower's state and store.
    """

    def __init__(self, config: DLedgerConfig, member_state: MemberState) -> None:
        self.config = config
        self.member_state = member_state
        self.store = member_state.store
        self.write_requests: dict[int, _Waiting] = {}  # APPENDs by first index
        self._write_bytes = 0  # their entries' bytes
        self.control_queue: deque[_Waiting] = deque()  # COMPARE / TRUNCATE / COMMIT
        self.last_check_abnormal_ms = -1
        # (leader term, first index) of what this process appended from that term's
        # leader: those entries match the leader's log and are never truncated
        self._appended_in_term: tuple[int, int] = (-1, -1)
        self._diverged_from: tuple[str | None, int] = (None, -1)  # the (leader, term) last logged as diverged
        self._now_ms = 0  # of the pass running
        self.segment_size = data_segment_size(self.store)

    # -- intake

    def _reply(
        self, req: PushEntryRequest, code: ResponseCode, *, x_term: int = -1, x_index: int = -1
    ) -> PushEntryResponse:
        return PushEntryResponse(
            **self.member_state.answer_header(req),
            code=code,
            index=req.first_index if req.type is PushType.APPEND else req.prev_index,
            begin_index=self.store.begin_index,
            end_index=self.store.end_index,
            count=req.count,
            x_term=x_term,
            x_index=x_index,
        )

    def handle_push(self, req: PushEntryRequest, now_ms: int) -> Future[PushEntryResponse]:
        """File a push; the future completes when it has been processed."""
        future: Future[PushEntryResponse] = Future()
        if req.term < self.member_state.current_term:
            future.set_result(self._reply(req, ResponseCode.EXPIRED_TERM))
            return future
        waiting = _Waiting(req, future, now_ms)
        if req.type is PushType.APPEND:
            if req.count <= 0 or not req.entries:
                future.set_result(self._reply(req, ResponseCode.REQUEST_WITH_EMPTY_BODYS))
                return future
            old = self.write_requests.get(req.first_index)
            if old is None and req.first_index > self.store.end_index + 1 and self._window_full(len(req.entries)):
                future.set_result(self._reply(req, ResponseCode.PUSH_REQUEST_IS_FULL))
                return future
            self._file_write(waiting, old)
            if old is not None:
                # the copy replaces the waiting one but keeps its age: a push that keeps
                # waiting for a missing predecessor must time out however often it is resent
                waiting.created_ms = old.created_ms
                old.future.set_result(self._reply(old.request, ResponseCode.REPEATED_PUSH))
            return future
        if len(self.control_queue) >= MAX_CONTROL_QUEUE:
            future.set_result(self._reply(req, ResponseCode.PUSH_REQUEST_IS_FULL))
            return future
        if req.type in (PushType.COMPARE, PushType.TRUNCATE):
            # the leader restarts from a new match point: pending appends are void
            for stale in self.write_requests.values():
                stale.future.set_result(self._reply(stale.request, ResponseCode.INCONSISTENT_STATE))
            self.write_requests.clear()
            self._write_bytes = 0
        self.control_queue.append(waiting)
        return future

    # -- processing

    def run_once(self, now_ms: int) -> bool:
        """Process one request; returns False when there was nothing to do."""
        self._now_ms = now_ms
        if self.control_queue:
            w = self.control_queue.popleft()
            w.future.set_result(self._process(w.request))
            return True
        if self.write_requests:
            w_next = self._take_write(self.store.end_index + 1)
            if w_next is not None:
                w_next.future.set_result(self._process(w_next.request))
                return True
            first = min(self.write_requests)
            if first <= self.store.end_index:  # a resent push overlapping what we hold
                w_old = self.write_requests[first]
                self._take_write(first)
                w_old.future.set_result(self._process(w_old.request))
                return True
            return self._check_abnormal_futures(now_ms)
        return False

    def pending_count(self) -> int:
        return len(self.write_requests) + len(self.control_queue)

    def _window_full(self, size: int) -> bool:
        """Whether an APPEND of `size` bytes more, one that must wait for others before
        it, would hold more waiting APPENDs than a leader keeps in flight to one follower
        (`max_push_in_flight_per_peer`, and `max_push_in_flight_bytes` plus the push that
        passes it): more comes from no honest leader, and would be held in memory until
        it times out. The next APPEND, which goes at once, is always taken."""
        cfg = self.config
        return (
            len(self.write_requests) >= cfg.max_push_in_flight_per_peer
            or self._write_bytes + size > cfg.max_push_in_flight_bytes + cfg.max_push_batch_bytes
        )

    def _file_write(self, waiting: _Waiting, replaced: _Waiting | None) -> None:
        if replaced is not None:
            self._write_bytes -= len(replaced.request.entries)
        self.write_requests[waiting.request.first_index] = waiting
        self._write_bytes += len(waiting.request.entries)

    def _take_write(self, first: int) -> _Waiting | None:
        waiting = self.write_requests.pop(first, None)
        if waiting is not None:
            self._write_bytes -= len(waiting.request.entries)
        return waiting

    def check_leader(self, req: RequestOrResponse) -> ResponseCode | None:
        """None when this member follows `req.leader_id` in `req.term`, else the code."""
        if self.member_state.is_diverged(req.leader_id, self._now_ms):
            return ResponseCode.LOG_DIVERGED  # of another history: not followed for a while
        if not self.member_state.is_follower:
            return ResponseCode.NOT_FOLLOWER
        if req.term != self.member_state.current_term:
            return ResponseCode.INCONSISTENT_TERM
        if req.leader_id != self.member_state.leader_id:
            return ResponseCode.INCONSISTENT_LEADER
        return None

    def _matches(self, index: int, term: int) -> bool:
        """True when this log holds `term` at `index` (-1 always matches; indexes below
        the begin index were committed, so they match too)."""
        if index < 0:
            return True
        if index > self.store.end_index:
            return False
        if index < self.store.begin_index or self.store.begin_index < 0:  # before the log (a reset)
            return index <= self.member_state.committed_index
        return self.store.term_at(index) == term

    def _diverged(self, req: PushEntryRequest, index: int, term: int) -> PushEntryResponse | None:
        """The LOG_DIVERGED answer when the leader says `term` at `index`, an entry this
        member committed with another term (see the module docstring); else None."""
        store = self.store
        if not 0 <= store.begin_index <= index <= min(self.member_state.committed_index, store.end_index):
            return None
        mine = store.term_at(index)
        if mine == term:
            return None
        self._report_diverged(req, f"holds term {term} at index {index}", index, mine)
        return self._reply(req, ResponseCode.LOG_DIVERGED, x_term=mine, x_index=index)

    def check_snapshot(self, req: InstallSnapshotRequest) -> ResponseCode | None:
        """LOG_DIVERGED for a snapshot past this member's last committed entry whose term is
        below that entry's (terms never go down along one history's log): installing it
        would replace committed entries with another history's. Else None."""
        store, committed = self.store, self.member_state.committed_index
        if not 0 <= store.begin_index <= committed <= min(store.end_index, req.last_included_index):
            return None
        mine = store.term_at(committed)
        if req.last_included_term >= mine:
            return None
        what = f"sends a snapshot up to index {req.last_included_index} of term {req.last_included_term}"
        self._report_diverged(req, what, committed, mine)
        return ResponseCode.LOG_DIVERGED

    def _report_diverged(self, req: RequestOrResponse, what: str, index: int, mine: int) -> None:
        """Mark the leader of `req` as of another history and say so (once per leader and term)."""
        self._refuse_leader(
            req,
            f"{what}, but this member committed index {index} in term {mine}: its log is not this member's "
            "history (the group was founded again without this member, or a log was changed). This member keeps "
            "its log and does not follow it. To keep these entries, copy this member's store directory away; to "
            "rejoin the group as it is, stop this member, move its store directory aside and start it with "
            "--initial-cluster-state existing",
        )

    def _other_segment_size(self, req: PushEntryRequest) -> PushEntryResponse:
        """SEGMENT_SIZE_MISMATCH: the leader's entries sit at positions of other segments."""
        self._refuse_leader(
            req,
            f"writes data segments of {req.data_file_size} bytes, this member's are {self.segment_size} bytes: "
            "entries sit at the same positions on every member, so this member cannot hold the leader's log and "
            "does not follow it. Give every member of the group the same data segment size (`--segment-size`, "
            "mappedFileSizeForEntryData); an existing store keeps the size of its files",
        )
        return self._reply(req, ResponseCode.SEGMENT_SIZE_MISMATCH)

    def _refuse_leader(self, req: RequestOrResponse, why: str) -> None:
        """Do not follow or vote for the leader of `req` for a while (`mark_diverged`); log
        `why` once per leader and term."""
        self.member_state.mark_diverged(req.leader_id, self._now_ms)
        if self._diverged_from == (req.leader_id, req.term):
            return
        self._diverged_from = (req.leader_id, req.term)
        log.error("%s: leader %s (term %d) %s", self.member_state.self_id, req.leader_id, req.term, why)

    def _mismatch(self, req: PushEntryRequest, index: int, term: int) -> PushEntryResponse:
        """The answer to a request whose claim `term` at `index` does not hold here."""
        return self._diverged(req, index, term) or self._reply(req, ResponseCode.INCONSISTENT_STATE)

    def _commit(self, req: PushEntryRequest, proven_index: int) -> None:
        """Commit up to what the leader committed, but only as far as this request proved
        the logs equal (and never above the ledger end: #316)."""
        self.member_state.update_committed_index(min(req.commit_index, proven_index))

    def _process(self, req: PushEntryRequest) -> PushEntryResponse:
        bad = self.check_leader(req)
        if bad is not None:
            return self._reply(req, bad)
        if req.data_file_size and self.segment_size and req.data_file_size != self.segment_size:
            return self._other_segment_size(req)
        try:
            if req.type is PushType.APPEND:
                return self._do_append(req)
            if req.type is PushType.COMPARE:
                return self._do_compare(req)
            if req.type is PushType.TRUNCATE:
                return self._do_truncate(req)
            return self._do_commit(req)
        except DLedgerError:
            return self._reply(req, ResponseCode.INCONSISTENT_STATE)

    def _do_append(self, req: PushEntryRequest) -> PushEntryResponse:
        end = self.store.end_index
        if req.first_index > end + 1:
            return self._reply(req, ResponseCode.INCONSISTENT_STATE)
        if not self._matches(req.prev_index, req.prev_term):
            return self._mismatch(req, req.prev_index, req.prev_term)
        if self._appended_in_term[0] != req.term:
            self._appended_in_term = (req.term, end + 1)
        if req.first_index == end + 1:
            pos = _entry_pos(req.entries, 0) if req.entries else -1
            if self.store.begin_index < 0 <= end and pos != getattr(self.store, "write_pos", pos):
                # an emptied log (after a snapshot) continues at the leader's position of
                # its next entry; a restart placed it at its own
                self.store.reset(end, req.prev_term, pos)
            self.store.append_encoded(req.entries)
            if self.store.end_index != req.last_index or self.store.end_term != req.last_term:
                # headers carry no CRC: a run whose end disagrees with what the leader
                # announced (count, last term) is damaged, take it back
                self.store.truncate(req.first_index)
                return self._reply(req, ResponseCode.INCONSISTENT_STATE)
        else:
            # overlaps what we hold (a resent push after a lost ack): entries up to our
            # end must be the same ones; append only the rest
            if req.last_index <= end:
                if self.store.term_at(req.last_index) != req.last_term:
                    return self._mismatch(req, req.last_index, req.last_term)
            else:
                skip = end - req.first_index + 1
                term_at_end = _entry_term(req.entries, _entry_offset(req.entries, req.count, skip - 1))
                if self.store.term_at(end) != term_at_end:
                    return self._mismatch(req, end, term_at_end)
                self.store.append_encoded(req.entries[_entry_offset(req.entries, req.count, skip) :])
        self._commit(req, req.last_index)
        return self._reply(req, ResponseCode.SUCCESS)

    def _first_index_of_term(self, index: int) -> int:
        """The first index holding the term of `index` (terms never decrease in a log)."""
        term = self.store.term_at(index)
        lo, hi = min(index, max(self.store.begin_index, self.member_state.committed_index + 1, 0)), index
        while lo < hi:
            mid = (lo + hi) // 2
            if self.store.term_at(mid) < term:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _do_compare(self, req: PushEntryRequest) -> PushEntryResponse:
        if self._matches(req.prev_index, req.prev_term):
            self._commit(req, req.prev_index)
            return self._reply(req, ResponseCode.SUCCESS)
        if req.prev_index > self.store.end_index:
            return self._reply(req, ResponseCode.INCONSISTENT_STATE)
        diverged = self._diverged(req, req.prev_index, req.prev_term)
        if diverged is not None:
            return diverged
        x_term = self.store.term_at(req.prev_index)
        x_index = self._first_index_of_term(req.prev_index)
        return self._reply(req, ResponseCode.INCONSISTENT_STATE, x_term=x_term, x_index=x_index)

    def _do_truncate(self, req: PushEntryRequest) -> PushEntryResponse:
        if req.first_index != req.prev_index + 1:
            return self._reply(req, ResponseCode.INCONSISTENT_STATE)
        if not self._matches(req.prev_index, req.prev_term):
            return self._mismatch(req, req.prev_index, req.prev_term)
        # Never delete committed entries, whatever the request says. They are the
        # leader's own entries too (Leader Completeness), so a TRUNCATE below the commit
        # index only means the leader's match point is stale (its acks were lost): keep
        # them, cut what follows, and the leader's next APPEND overlaps what is kept.
        cut = max(req.first_index, self.member_state.committed_index + 1)
        term, first = self._appended_in_term
        if term == req.term and cut >= first:
            # entries this leader pushed in its term match its log: a TRUNCATE over them
            # is a stale copy (duplicated or delayed), answered without deleting anything
            cut = self.store.end_index + 1
        if cut <= self.store.end_index:
            self.store.truncate(cut)
            self._appended_in_term = (-1, -1)
        self._commit(req, req.prev_index)
        return self._reply(req, ResponseCode.SUCCESS)

    def _do_commit(self, req: PushEntryRequest) -> PushEntryResponse:
        if not self._matches(req.prev_index, req.prev_term):
            return self._mismatch(req, req.prev_index, req.prev_term)
        self._commit(req, req.prev_index)
        return self._reply(req, ResponseCode.SUCCESS)

    def _check_abnormal_futures(self, now_ms: int) -> bool:
        """Every ~1 s: ack requests we already hold (lost acks) and, when nothing can
        proceed, answer the oldest timed-out request INCONSISTENT_STATE so the leader
        compares again."""
        if now_ms - self.last_check_abnormal_ms < 1000:
            return False
        self.last_check_abnormal_ms = now_ms
        end = self.store.end_index
        worked = False
        oldest: int | None = None
        for first in sorted(self.write_requests):
            w = self.write_requests[first]
            if first <= end:
                self._take_write(first)
                w.future.set_result(self._process(w.request))
                worked = True
                continue
            if first == end + 1:
                return True
            if now_ms - w.created_ms >= self.config.follower_push_timeout_ms and oldest is None:
                oldest = first
        if oldest is not None:
            w = self.write_requests[oldest]
            self._take_write(oldest)
            w.future.set_result(self._reply(w.request, ResponseCode.INCONSISTENT_STATE))
            worked = True
        return worked
