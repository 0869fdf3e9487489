"""EntryDispatcher: the leader's per-peer replication state machine, without I/O.

COMPARE finds the last index where the follower's log matches (prev index/term checks
with the follower's conflict hint), TRUNCATE cuts the follower's uncommitted tail after
it, APPEND streams runs of already-encoded entries (several in flight, bounded), and
COMMIT carries the commit index when the peer is idle. Any inconsistency, a leader or
term change sends the dispatcher back to COMPARE. A follower needing entries the
leader's log no longer holds (compacted after a snapshot) gets the snapshot in
INSTALL_SNAPSHOT (dledger.raft.snapshot_dispatch).

Commit pushes: every APPEND carries the leader's commit index, so a COMMIT push is only
for a follower that no APPEND has told of the latest commit: at least
`COMMIT_PUSH_DELAY_MS` after the commit (by then the next APPEND has usually carried it),
and every `commit_push_interval_ms` anyway. A COMMIT sent at once would go from the
thread that has just completed the client's request, ahead of its answer, and a steady
stream of single appends would cost a push per commit on top of their APPENDs.

Coalescing: a small backlog (less than `COALESCE_BYTES` not yet pushed) is not pushed
while an earlier APPEND is still in flight; it goes out, together with whatever arrived
meanwhile, when that push is answered (or times out). Many concurrent single-entry
client requests then cost one push per round trip, not one each. A large backlog still
goes out at once, in pipelined pushes.

Standby followers: a commit needs the acknowledgements of `len(peers) // 2` followers.
When that many followers ahead of this one in peer order keep up (see `keeping_up`),
this follower is a standby: its small backlog waits until it is `standby_push_ms` old
and then goes as one push. Under many small client requests the standby costs the
leader and itself a push per `standby_push_ms` instead of one per round trip, and the
commit latency stays that of the followers ahead. Should one of them stop keeping up
(slow, unreachable, catching up), the standby is pushed at once again, so a commit
waits at most `standby_push_ms` longer once. A leadership transferee is never a standby.

Gathering: the service layer tells the leader how many client appends are on their way
(`incoming_appends`: calls gRPC has accepted whose handler has not run yet). While some
are, a small backlog with no push in flight waits for them, at most `push_gather_ms`,
and goes with them as one push. The count is exact, not a guess from past traffic: a
lone client, or clients that all wait for the same commit, find nothing on its way and
are pushed at once (no Nagle delay), while many clients sending continuously share
pushes several round trips' worth apart. `hold_until_ms` tells the caller when a held
backlog goes at the latest, so that a timer can run the pass then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import TypeVar

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.quota import new_quota
from dledger.raft.log import data_segment_size
from dledger.raft.match_search import MatchSearch
from dledger.raft.member_state import MemberState
from dledger.raft.messages import (
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
)
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.raft.snapshot_dispatch import InstallSnapshotMixin, SnapshotSource

UNREACHABLE_RETRY_MS = 100
"""Pause before a COMPARE / TRUNCATE goes again after the peer could not be reached."""
COMMIT_PUSH_DELAY_MS = 2
"""A new commit index no APPEND has carried goes in a COMMIT push this long after the
dispatcher saw it, at the earliest (see the module docstring)."""
NOT_READY_RETRY_MS = 10
"""... after the peer answered that it does not follow this leader (yet)."""
DIVERGED_RETRY_MS = 10_000
"""Pause before a follower that answered LOG_DIVERGED is compared with again."""
COALESCE_BYTES = 64 * 1024
"""A backlog below this (and below `max_push_batch_bytes`) waits for the APPEND in
flight to be answered instead of being pushed next to it."""


class DispatchState(Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"


_Control = TypeVar("_Control", PushEntryRequest, InstallSnapshotRequest)


@dataclass(slots=True)
class _InFlight:
    request: PushEntryRequest
    send_ms: int
    resent: bool = False


@dataclass(slots=True)
class _ControlInFlight:
    request: PushEntryRequest | InstallSnapshotRequest
    send_ms: int


class EntryDispatcher(InstallSnapshotMixin):
    """Replication to one follower.

    Args:
        config: push timeouts, batch and in-flight limits, quota and throttle point.
        member_state: the leader's state (term, commit index, store).
        peer_id: the follower.
        quorum: where acknowledged match indexes are recorded.
        keeping_up_ahead: `(peer_id, now_ms)` -> how many followers ahead of `peer_id`
            keep up (the group's other dispatchers); None: never a standby.
        incoming_appends: `()` -> how many client appends are on their way to this
            leader; None: never gather.
        latest_snapshot: `()` -> the leader's newest snapshot (index, term) or None
            (None: never install).
    """

    def __init__(
        self,
        config: DLedgerConfig,
        member_state: MemberState,
        peer_id: str,
        quorum: QuorumAckChecker,
        keeping_up_ahead: Callable[[str, int], int] | None = None,
        incoming_appends: Callable[[], int] | None = None,
        latest_snapshot: SnapshotSource | None = None,
    ) -> None:
        self.config = config
        self.member_state = member_state
        self.store = member_state.store
        self.peer_id = peer_id
        self.quorum = quorum
        self.quota = new_quota(config.peer_push_quota)
        self.term = -1
        self.state = DispatchState.COMPARE
        self.match_index = -1
        self.write_index = 0
        self.peer_end_index = -1
        self.pending: dict[int, _InFlight] = {}  # APPEND requests in flight, by first index, in index order
        self.pending_bytes = 0  # their encoded entries
        self._control: _ControlInFlight | None = None  # the COMPARE / TRUNCATE / install in flight (not COMMITs)
        self.last_push_commit_ms = -1
        self.last_pushed_commit_index = -1
        self._commit_seen_ms = -1  # when a commit index not pushed yet was first seen
        self.throttled = False
        self._retry_at_ms = -1
        self._keeping_up_ahead = keeping_up_ahead
        self._incoming_appends = incoming_appends
        self._held_since_ms = -1  # when a standby began to hold its small backlog
        self._gathering_since_ms = -1  # when the backlog began to wait for incoming appends
        self._latest_snapshot = latest_snapshot
        self.installing: tuple[int, int] | None = None  # the snapshot asked for in INSTALL_SNAPSHOT
        self.search = MatchSearch(self.store.end_index)  # COMPARE's bounds
        self.segment_size = data_segment_size(self.store)  # told to the follower with every push

    # -- state changes

    def reset(self, term: int) -> None:
        """Start over for leader term `term`: COMPARE from the leader's ledger end."""
        self.term = term
        self.state = DispatchState.COMPARE
        self.match_index = -1
        self.write_index = self.store.end_index + 1
        self._clear_pending()
        self._control = None
        self.installing = None
        self._held_since_ms = self._gathering_since_ms = -1
        self.search.reset(self.store.end_index)

    def _clear_pending(self) -> None:
        self.pending.clear()
        self.pending_bytes = 0

    def _change_state(self, state: DispatchState) -> None:
        self.state = state
        self._clear_pending()
        self._control = None
        self._held_since_ms = self._gathering_since_ms = -1
        if state is DispatchState.APPEND:
            self.write_index = self.match_index + 1
        elif state is DispatchState.COMPARE:
            self.search.reset(self.store.end_index)

    def _enter_install(self) -> None:
        self._change_state(DispatchState.INSTALL_SNAPSHOT)

    def _base(self, push_type: PushType) -> PushEntryRequest:
        return PushEntryRequest(
            **self.member_state.request_header(self.peer_id),
            term=self.term,
            type=push_type,
            commit_index=self.member_state.committed_index,
            data_file_size=self.segment_size,
        )

    # -- the dispatcher pass

    def tick(self, now_ms: int) -> list[PushEntryRequest | InstallSnapshotRequest]:
        """One pass: the push requests to send now."""
        member = self.member_state
        if not member.is_leader:
            return []
        if self.term != member.current_term:
            self.reset(member.current_term)
        ctl = self._control
        if ctl is not None and now_ms - ctl.send_ms < self.control_timeout_ms(ctl.request):
            return []
        if now_ms < self._retry_at_ms:
            return []
        self._control = None
        if self.state is DispatchState.APPEND and self.write_index <= self.floor_index():
            # compacted under a lagging follower: its next entry is gone, or the term of
            # the entry before it (a push names it; an unknown term contradicts the
            # follower's committed entry there: it took this leader for another history)
            self._start_install(now_ms)
            if self.state is DispatchState.APPEND:
                self._change_state(DispatchState.COMPARE)
            return []
        if self.state is DispatchState.INSTALL_SNAPSHOT:
            return [self._send_control(self._install_request(), now_ms)]
        if self.state is DispatchState.COMPARE:
            return [self._send_control(self._compare_request(), now_ms)]
        if self.state is DispatchState.TRUNCATE:
            req = self._base(PushType.TRUNCATE)
            req.first_index = self.match_index + 1
            req.prev_index, req.prev_term = self.match_index, self._term_at(self.match_index)
            return [self._send_control(req, now_ms)]
        return list(self._append(now_ms))

    def _send_control(self, req: _Control, now_ms: int) -> _Control:
        self._control = _ControlInFlight(req, now_ms)
        return req

    def _compare_request(self) -> PushEntryRequest:
        # compare at write_index - 1; never below the floor (the leader's first entry, or
        # the one before it when its term is known)
        self.write_index = max(min(self.write_index, self.store.end_index + 1), self.floor_index() + 1)
        req = self._base(PushType.COMPARE)
        req.prev_index = self.write_index - 1
        req.prev_term = self._term_at(req.prev_index)
        return req

    def _throttle(self, now_ms: int) -> bool:
        """Quota only for catch-up traffic: > 1000 entries AND >= throttle point bytes behind."""
        end = self.store.end_index
        if end - self.write_index <= self.config.peer_push_throttle_lag_entries:
            return False
        last = self.store.get(end)
        lag_bytes = last.pos + last.size - self.store.get(self.write_index).pos
        if lag_bytes < self.config.peer_push_throttle_point:
            return False
        return self.quota.validate_now(now_ms)

    def keeping_up(self, now_ms: int) -> bool:
        """Whether this follower takes pushes as they come: in APPEND, not throttled, no
        push to it unanswered for `standby_push_ms` or longer and none sent again."""
        if self.state is not DispatchState.APPEND or self.throttled or self.term != self.member_state.current_term:
            return False
        if not self.pending:
            return True
        oldest = self.pending[next(iter(self.pending))]
        return not oldest.resent and now_ms - oldest.send_ms < self.config.standby_push_ms

    def on_install_response(
        self, req: InstallSnapshotRequest, resp: InstallSnapshotResponse | None, now_ms: int
    ) -> None:
        """Handle the answer to an install (None: no answer); see snapshot_dispatch."""
        if req.term != self.term or not self.member_state.is_leader or self.member_state.current_term != self.term:
            return
        ctl = self._control
        if ctl is None or ctl.request is not req or self.state is not DispatchState.INSTALL_SNAPSHOT:
            return
        if resp is not None and resp.term > self.term:
            return  # the elector steps down on the higher term
        installed = self._on_install(resp, now_ms)
        self._change_state(DispatchState.COMPARE)
        if installed is not None:
            self.peer_end_index = resp.end_index if resp is not None else -1
            self.write_index = installed + 1

    def _standing_by(self, now_ms: int) -> bool:
        """Whether this follower's small backlog waits now (see the module docstring)."""
        wait = self.config.standby_push_ms
        needed = len(self.member_state.peer_ids) // 2
        if (
            wait <= 0
            or self._keeping_up_ahead is None
            or self.member_state.transferee == self.peer_id
            or self._keeping_up_ahead(self.peer_id, now_ms) < needed
        ):
            self._held_since_ms = -1
            return False
        if self._held_since_ms < 0:
            self._held_since_ms = now_ms
        return now_ms - self._held_since_ms < wait

    def _gathering(self, now_ms: int) -> bool:
        """Whether the small backlog waits for client appends on their way (see the
        module docstring)."""
        wait = self.config.push_gather_ms
        if wait <= 0 or self._incoming_appends is None or self._incoming_appends() <= 0:
            self._gathering_since_ms = -1
            return False
        if self._gathering_since_ms < 0:
            self._gathering_since_ms = now_ms
        return now_ms - self._gathering_since_ms < wait

    @property
    def hold_until_ms(self) -> int:
        """When the small backlog held by the last pass goes out at the latest (-1: none
        held)."""
        if self.state is not DispatchState.APPEND or self.pending:
            return -1
        ends = []
        if self._held_since_ms >= 0:
            ends.append(self._held_since_ms + self.config.standby_push_ms)
        if self._gathering_since_ms >= 0:
            ends.append(self._gathering_since_ms + self.config.push_gather_ms)
        return min(ends, default=-1)

    def _append(self, now_ms: int) -> list[PushEntryRequest]:
        out: list[PushEntryRequest] = []
        if self.pending:
            # pushes are filed in index order, so the first one is the oldest; it starts
            # at match_index + 1
            first = next(iter(self.pending))
            oldest = self.pending[first]
            if now_ms - oldest.send_ms >= self.config.max_push_timeout_ms:
                # lost push or ack: send that push again, alone (as DLedger resends the one
                # at water mark + 1); the follower may hold the later ones already
                again = replace(oldest.request, commit_index=self.member_state.committed_index)
                self.pending[first] = _InFlight(again, now_ms, resent=True)
                self.quota.sample(len(again.entries), now_ms)
                out.append(again)
        end = self.store.end_index
        self.throttled = False
        cfg = self.config
        # with pushes in flight before this pass, a small backlog waits for their answer;
        # a standby's waits until it is standby_push_ms old; one that client appends on
        # their way will join waits for them, at most push_gather_ms
        hold_small = bool(self.pending) or (
            self.write_index <= end and (self._standing_by(now_ms) or self._gathering(now_ms))
        )
        small = min(COALESCE_BYTES, cfg.max_push_batch_bytes)
        while (
            self.write_index <= end
            and len(self.pending) < cfg.max_push_in_flight_per_peer
            and self.pending_bytes < cfg.max_push_in_flight_bytes
        ):
            if self._throttle(now_ms):
                self.throttled = True
                break
            run, count = self.store.read_run(self.write_index, cfg.max_push_batch_bytes)
            if hold_small and self.write_index + count > end and len(run) < small:
                break  # sent with what arrives meanwhile once the push in flight is answered
            req = self._base(PushType.APPEND)
            self.last_pushed_commit_index = max(self.last_pushed_commit_index, req.commit_index)
            req.first_index, req.count, req.entries = self.write_index, count, run
            req.prev_index, req.prev_term = self.write_index - 1, self._term_at(self.write_index - 1)
            req.last_term = self.store.term_at(req.last_index)
            self.quota.sample(len(run), now_ms)
            self.pending[req.first_index] = _InFlight(req, now_ms)
            self.pending_bytes += len(run)
            self._held_since_ms = self._gathering_since_ms = -1
            self.write_index += count
            out.append(req)
        if not self.pending and self.write_index > end and self._commit_push_due(now_ms):
            req = self._base(PushType.COMMIT)
            req.prev_index, req.prev_term = self.match_index, self._term_at(self.match_index)
            self.last_push_commit_ms, self.last_pushed_commit_index = now_ms, req.commit_index
            self._commit_seen_ms = -1
            out.append(req)  # not awaited: new appends need not wait for its answer
        return out

    def _commit_push_due(self, now_ms: int) -> bool:
        """Whether an idle follower gets a COMMIT push now (see the module docstring)."""
        if now_ms - self.last_push_commit_ms >= self.config.commit_push_interval_ms:
            return True
        if self.member_state.committed_index <= self.last_pushed_commit_index:
            self._commit_seen_ms = -1
            return False
        if self._commit_seen_ms < 0:
            self._commit_seen_ms = now_ms
        return now_ms - self._commit_seen_ms >= COMMIT_PUSH_DELAY_MS

    # -- answers

    def on_response(self, req: PushEntryRequest, resp: PushEntryResponse | None, now_ms: int) -> None:
        """Handle the answer to `req` (None: network error, retried after the timeout)."""
        if req.term != self.term or not self.member_state.is_leader or self.member_state.current_term != self.term:
            return
        if resp is not None and resp.term > self.term:
            return  # the elector steps down on the higher term
        if resp is not None and resp.code in (ResponseCode.LOG_DIVERGED, ResponseCode.SEGMENT_SIZE_MISMATCH):
            self._on_diverged(resp, now_ms)
            return
        if req.type is PushType.APPEND:
            self._on_append(req, resp, now_ms)
            return
        if req.type is PushType.COMMIT:
            # the follower does not hold our entry at the match point: find the match again
            if resp is not None and resp.code == ResponseCode.INCONSISTENT_STATE and self.state is DispatchState.APPEND:
                self._change_state(DispatchState.COMPARE)
                self.write_index = self.match_index + 1
            return
        ctl = self._control
        if ctl is None or ctl.request is not req:
            return
        self._control = None
        if resp is None or resp.code not in (ResponseCode.SUCCESS, ResponseCode.INCONSISTENT_STATE):
            # unreachable: try again in a while; reachable but not following this leader
            # yet (it will at the next heartbeat) or busy: soon
            delay = UNREACHABLE_RETRY_MS if resp is None else NOT_READY_RETRY_MS
            self._retry_at_ms = now_ms + min(delay, self.config.max_push_timeout_ms)
            return
        self.peer_end_index = resp.end_index
        if req.type is PushType.COMPARE:
            self._on_compare(req, resp, now_ms)
        elif req.type is PushType.TRUNCATE:
            if resp.code == ResponseCode.SUCCESS:
                self._matched(req.prev_index)
                self._change_state(DispatchState.APPEND)
            else:
                self._change_state(DispatchState.COMPARE)

    def _matched(self, index: int) -> None:
        if self.state is DispatchState.APPEND:
            self.match_index = max(self.match_index, index)
            # every push ending at or below the match point is acknowledged too (the
            # pending pushes are in index order: they form a prefix)
            pending = self.pending
            while pending:
                first = next(iter(pending))
                if pending[first].request.last_index > self.match_index:
                    break
                self.pending_bytes -= len(pending.pop(first).request.entries)
        else:
            self.match_index = index
        self.quorum.update_peer_water_mark(self.term, self.peer_id, self.match_index)

    def _on_compare(self, req: PushEntryRequest, resp: PushEntryResponse, now_ms: int) -> None:
        """Narrow the search for the follower's match point (`dledger.raft.match_search`);
        once found, TRUNCATE the follower's tail after it, or APPEND."""
        search = self.search
        search.narrow(req.prev_index, resp.code == ResponseCode.SUCCESS, resp.end_index, self.store.end_index)
        if search.high <= self.floor_index() and self._start_install(now_ms):
            return  # the follower's match point is below the floor: those entries are gone
        if search.found:
            self.match_index = search.low
            self.quorum.update_peer_water_mark(self.term, self.peer_id, search.low)
            self._change_state(DispatchState.TRUNCATE if resp.end_index > search.low else DispatchState.APPEND)
            return
        self.write_index = search.next_probe(resp) + 1
        self._control = None

    def _on_diverged(self, resp: PushEntryResponse, now_ms: int) -> None:
        """The follower committed another term at `resp.x_index` than this log holds, or
        its data segments are of another size (`dledger.raft.entry_handler`): no push fits
        its log. Compare again only every DIVERGED_RETRY_MS (it may be replaced meanwhile)."""
        self.search.diverge(self.member_state, self.peer_id, resp, self._term_at(resp.x_index), self.segment_size)
        self.member_state.mark_diverged(self.peer_id, now_ms)
        self._change_state(DispatchState.COMPARE)
        self.write_index = self.store.end_index + 1
        self._retry_at_ms = now_ms + DIVERGED_RETRY_MS

    def _on_append(self, req: PushEntryRequest, resp: PushEntryResponse | None, now_ms: int) -> None:
        if self.state is not DispatchState.APPEND:
            return
        inflight = self.pending.get(req.first_index)
        if inflight is None or inflight.request is not req:
            if resp is not None and resp.code == ResponseCode.SUCCESS and req.prev_index <= self.match_index:
                self._matched(req.last_index)  # a late ack of a resent push still proves the match
            elif inflight is not None and resp is not None and resp.code == ResponseCode.INCONSISTENT_STATE:
                # an earlier copy of a push still in flight did not fit the follower's log (it
                # lost entries it had acknowledged): compare again, whatever the newer copy's
                # fate (its answer may come in the same phase every time: simulation R6)
                self._change_state(DispatchState.COMPARE)
                self.write_index = self.match_index + 1
            return
        if resp is None:
            return  # resent after max_push_timeout_ms
        if resp.code == ResponseCode.SUCCESS:
            del self.pending[req.first_index]
            self.pending_bytes -= len(req.entries)
            self._matched(req.last_index)
            self.peer_end_index = max(self.peer_end_index, resp.end_index)
            if inflight.resent and self.pending:
                oldest = self.pending[next(iter(self.pending))]
                if now_ms - oldest.send_ms >= self.config.max_push_timeout_ms:
                    # the resend got through but the pushes after it are overdue as well
                    # (the follower lost them, e.g. it restarted): send the window again
                    self._clear_pending()
                    self.write_index = self.match_index + 1
        elif resp.code == ResponseCode.REPEATED_PUSH:
            pass  # a newer copy of this push replaced it on the follower
        else:
            self._retry_at_ms = now_ms + self.search.refused(self.member_state, self.peer_id, req, resp)
            self._change_state(DispatchState.COMPARE)
            self.write_index = self.match_index + 1
