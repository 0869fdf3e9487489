"""Linearizable reads on the leader: ReadIndex rounds and the lease, without I/O.

**ReadIndex** (etcd's model, the Raft thesis §6.4). A read waits until the leader knows
the group's commit index: a new leader only knows it once its commit index reached the
end its log had when it was elected (every entry committed by earlier leaders is in
that log; etcd asks for an entry of the leader's own term, which the NOOP a new leader
writes when it holds uncommitted entries gives; a leader elected with a fully committed
log may read at once). The waiting reads then take the commit index as their read index
and one heartbeat round confirms that the member still leads: a burst of reads shares
one round, reads arriving during a round wait for the next. When a quorum (the leader
included) answered SUCCESS in the round's term, every read of the round is released
with its read index; the shell waits until its state machine applied that index and
answers. A member that loses leadership (or its term) fails its reads with NOT_LEADER;
a round answered in an older term never counts.

**Lease** (the thesis §6.4.1). A heartbeat round a quorum acknowledged proves that no
other member could win an election for an election timeout after the round *started*:
every member that answered refuses votes for that long after hearing the leader
(CheckQuorum's leader stickiness, `dledger.raft.prevote.in_lease`). So the leader
answers reads without a round until `start + election timeout - lease_drift_ms`, the
drift bound covering clocks that run at different rates. No lease: without
`check_quorum` (nobody refuses votes), during a leadership transfer and for its take-over
wait plus an election timeout after it (the transferee is exempt from stickiness), and
after any role or term change; reads then take a ReadIndex round.

Driven by `now_ms` like the rest of `dledger.raft`: `read` queues a read, `tick` starts
rounds and expires reads, `on_heartbeat_response` counts answers.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.member_state import MemberState, Role
from dledger.raft.messages import HeartBeatRequest, HeartBeatResponse
from dledger.raft.prevote import election_timeout_ms
from dledger.raft.rounds import Outbound

RETRY_ROUND_MS = 10
"""How long after a failed round (no quorum) the next one may start."""


@dataclass(slots=True)
class _Read:
    future: Future[int]
    deadline_ms: int


@dataclass
class ReadRound:
    """One heartbeat round confirming the leadership for the reads it carries."""

    term: int
    started_ms: int
    deadline_ms: int
    read_index: int
    requests: dict[str, HeartBeatRequest]
    reads: list[_Read]
    acks: int = 1  # the leader itself
    answered: set[str] = field(default_factory=set)


class ReadIndex:
    """The leader's read index and lease (see the module docstring).

    Args:
        config: timings (`heart_beat_time_interval_ms`, `max_heart_beat_leak`,
            `lease_drift_ms`, `max_wait_ack_time_ms`: how long a read may wait).
        member_state: the member's state.
    """

    def __init__(self, config: DLedgerConfig, member_state: MemberState) -> None:
        self.config = config
        self.member_state = member_state
        self.term = -1  # the term this member leads in (-1: not leading)
        self.ready_index = 0  # the log end when elected: the commit index must reach it
        self.lease_start_ms: int | None = None  # start of the latest round a quorum acknowledged
        self.rounds = 0
        """Rounds started so far (tests and metrics)."""
        self._waiting: list[_Read] = []
        self._round: ReadRound | None = None
        self._next_round_ms = 0
        self._no_lease_until_ms = -1

    # -- leadership

    def on_role_change(self, term: int, role: Role, end_index: int) -> None:
        """Every role change: pending reads fail with NOT_LEADER and the lease ends; a
        new leader (`end_index`: its log end before its NOOP) starts afresh."""
        reads = self._waiting + (self._round.reads if self._round is not None else [])
        self._waiting, self._round, self.lease_start_ms = [], None, None
        self.term = term if role is Role.LEADER else -1
        self.ready_index = end_index
        error = DLedgerError(ResponseCode.NOT_LEADER, f"leadership changed (term {term}, {role.name})")
        for read in reads:
            _fail(read.future, error)

    def _leading(self) -> bool:
        member = self.member_state
        return member.is_leader and member.current_term == self.term

    @property
    def ready(self) -> bool:
        """This leader knows the group's commit index (see the module docstring)."""
        return self._leading() and self.member_state.committed_index >= self.ready_index

    def on_quorum_heartbeat(self, term: int, started_ms: int) -> None:
        """A heartbeat round of `term` that started at `started_ms` was acknowledged by a
        quorum (the elector's rounds and our own): the lease runs from there."""
        if term == self.term and self._leading() and (self.lease_start_ms or -1) < started_ms:
            self.lease_start_ms = started_ms

    def note_transfer(self, now_ms: int) -> None:
        """A leadership transfer is under way: no lease until well after it ended. The
        transferee's vote requests (exempt from stickiness) may still arrive when the
        transfer has ended here: its take-over wait plus an election timeout."""
        if self.member_state.transferee is not None:
            until = now_ms + election_timeout_ms(self.config) + self.config.leadership_transfer_wait_timeout_ms
            self._no_lease_until_ms = max(self._no_lease_until_ms, until)

    def lease_holds(self, now_ms: int) -> bool:
        """True while this leader may answer reads without a round."""
        member = self.member_state
        self.note_transfer(now_ms)
        if not self._leading() or member.transferee is not None or now_ms < self._no_lease_until_ms:
            return False
        if len(member.peer_map) == 1:
            return True
        if not self.config.check_quorum or self.lease_start_ms is None:
            return False
        lease_ms = election_timeout_ms(self.config) - self.config.lease_drift_ms
        return now_ms < self.lease_start_ms + lease_ms

    def lease_index(self, now_ms: int) -> int | None:
        """The read index of a lease read (the commit index) while the lease holds and
        the leader knows the commit index; None: take a ReadIndex round instead."""
        if self.lease_holds(now_ms) and self.ready:
            return self.member_state.committed_index
        return None

    # -- reads

    def read(self, now_ms: int) -> Future[int]:
        """Queue a read; the future completes with its read index once a round
        confirmed the leadership (see `tick`), or fails with DLedgerError NOT_LEADER
        (leadership lost) or TIMEOUT (`max_wait_ack_time_ms` passed).

        Raises:
            DLedgerError: NOT_LEADER when this member does not lead.
        """
        if not self._leading():
            raise DLedgerError(ResponseCode.NOT_LEADER, f"leader is {self.member_state.leader_id}")
        future: Future[int] = Future()
        self._waiting.append(_Read(future, now_ms + self.config.max_wait_ack_time_ms))
        return future

    @property
    def pending(self) -> int:
        """Reads waiting for a round or in one."""
        return len(self._waiting) + (len(self._round.reads) if self._round is not None else 0)

    def tick(self, now_ms: int) -> list[Outbound]:
        """Expire late reads and a round past its deadline; start a round for the
        waiting reads when none is in flight. Returns the heartbeats to send."""
        self.note_transfer(now_ms)
        rnd = self._round
        if rnd is not None and now_ms >= rnd.deadline_ms:
            self._end_round(rnd, now_ms, confirmed=False)
        if self._waiting:
            late = [r for r in self._waiting if now_ms >= r.deadline_ms]
            if late:
                self._waiting = [r for r in self._waiting if now_ms < r.deadline_ms]
                for read in late:
                    _fail(read.future, DLedgerError(ResponseCode.TIMEOUT, "no read index in time"))
        if self._round is not None or not self._waiting or now_ms < self._next_round_ms or not self.ready:
            return []
        return self._start_round(now_ms)

    def _start_round(self, now_ms: int) -> list[Outbound]:
        member = self.member_state
        term = member.current_term
        requests = member.heartbeat_requests()
        deadline = now_ms + max(1, self.config.max_push_timeout_ms)
        rnd = ReadRound(term, now_ms, deadline, member.committed_index, requests, self._waiting)
        self._waiting = []
        self._round = rnd
        self.rounds += 1
        if member.is_quorum(rnd.acks):  # a group of one
            self._end_round(rnd, now_ms, confirmed=True)
            return []
        return [Outbound(peer, request) for peer, request in requests.items()]

    def on_heartbeat_response(
        self, peer: str, request: HeartBeatRequest, response: HeartBeatResponse | None, now_ms: int
    ) -> None:
        """Count one answer to a round's heartbeat (None: no answer)."""
        rnd = self._round
        if rnd is None or rnd.requests.get(peer) is not request or peer in rnd.answered:
            return
        rnd.answered.add(peer)
        if response is not None and response.code == ResponseCode.SUCCESS and response.term == rnd.term:
            rnd.acks += 1
        if self.member_state.is_quorum(rnd.acks):
            self._end_round(rnd, now_ms, confirmed=True)
        elif len(rnd.answered) == len(rnd.requests):
            self._end_round(rnd, now_ms, confirmed=False)

    def _end_round(self, rnd: ReadRound, now_ms: int, confirmed: bool) -> None:
        self._round = None
        if not confirmed or not self._leading() or rnd.term != self.term:
            self._waiting[:0] = rnd.reads  # a new round, soon (the reads keep their deadlines)
            self._next_round_ms = now_ms + RETRY_ROUND_MS
            return
        self.on_quorum_heartbeat(rnd.term, rnd.started_ms)
        for read in rnd.reads:
            if not read.future.done():
                read.future.set_result(rnd.read_index)


def _fail(future: Future[int], error: DLedgerError) -> None:
    if not future.done():
        future.set_exception(DLedgerError(error.code, error.message))
