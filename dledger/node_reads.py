"""The member's side of `Ledger.Query`: reads of the state machine in the four read
modes (`dledger.codes.ReadMode`), on top of the core's ReadIndex and lease
(`dledger.raft.read_index`) and the caller's `on_apply` answers
(`dledger.statemachine.answers`).

- UNSAFE: `query` at once, on any member.
- READ_INDEX: the leader queues the reads for the next heartbeat round; a follower asks
  the leader for a read index (`ReadIndexRequest`). Then wait until the state machine
  applied the read index, and `query`.
- LEASE: the leader reads at its commit index while its lease holds, else as
  READ_INDEX; a follower refuses with NOT_LEADER (the client goes to the leader).
- RAFT_LOG: the requests are appended as entries (leader only); each is answered with
  the machine's `on_apply` answer for its entry once applied.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol, TypeVar

from dledger.codes import DLedgerError, ReadMode, ResponseCode
from dledger.raft.core import RaftCore
from dledger.raft.driver import RaftDriver
from dledger.raft.messages import ReadIndexRequest, ReadIndexResponse, RequestOrResponse
from dledger.statemachine import StateMachineCaller
from dledger.transport.base import Transport

T = TypeVar("T")


class QueryResult(NamedTuple):
    """The answers of one Query call, and the index they reflect at least."""

    answers: list[bytes]
    read_index: int


def _wait(future: Future[T], deadline: float, what: str) -> T:
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        raise DLedgerError(ResponseCode.TIMEOUT, f"no {what} in time") from None


class ReadHost(Protocol):
    """What the reads need of their member (`dledger.node.DLedgerNode`)."""

    @property
    def core(self) -> RaftCore: ...
    @property
    def driver(self) -> RaftDriver: ...
    @property
    def caller(self) -> StateMachineCaller | None: ...
    @property
    def transport(self) -> Transport | None: ...
    def step(self) -> AbstractContextManager[int]: ...
    def append(self, bodies: Sequence[bytes]) -> Future[int]: ...


class NodeReads:
    """Query reads of one member.

    Args:
        node: the member.
    """

    def __init__(self, node: ReadHost) -> None:
        self.node = node

    def _caller(self, mode: ReadMode) -> StateMachineCaller:
        caller = self.node.caller
        if caller is None:
            raise DLedgerError(ResponseCode.UNSUPPORTED, "this member runs no state machine: nothing to query")
        if mode is not ReadMode.RAFT_LOG and not callable(getattr(caller.state_machine, "query", None)):
            raise DLedgerError(ResponseCode.UNSUPPORTED, "the state machine answers no queries (it has no query())")
        if caller.error is not None:
            raise self._stopped(caller.error)
        return caller

    def _stopped(self, error: BaseException) -> DLedgerError:
        """The refusal of a member whose state machine stopped. A leader that hands
        leadership over (`LeadershipTransfer.hands_over`) says LEADER_TRANSFERRING, and a
        follower NOT_LEADER: the client asks again, or the leader, whose machine may
        apply (before, INTERNAL_ERROR failed the read, and a client that still took this
        member for the leader failed every read). A member that has nobody to hand over
        to (every machine stopped, a group of one) says INTERNAL_ERROR, a final error."""
        why = f"its state machine stopped ({error!r})"
        with self.node.step() as now:
            member = self.node.core.member_state
            if not member.is_leader:
                leader = member.leader_id
                known = f"leader is {leader}" if leader not in (None, member.self_id) else "no leader known"
                return DLedgerError(ResponseCode.NOT_LEADER, f"{why}; {known}")
            if self.node.core.transfer.hands_over(now):
                return DLedgerError(ResponseCode.LEADER_TRANSFERRING, f"{why}: it hands leadership over")
        return DLedgerError(ResponseCode.INTERNAL_ERROR, f"the state machine failed: {error!r}")

    def query(
        self, requests: Sequence[bytes], mode: ReadMode, timeout_s: float, max_bytes: int | None = None
    ) -> QueryResult:
        """Answer `requests` in `mode` within `timeout_s`; the answers of the ones read
        from the machine may take `max_bytes` together (None: no limit), beyond that
        UNEXPECTED_ARGUMENT at once (helper M: a Query repeating one large read 65,536
        times had a member build gigabytes of answers before the message limit said no).

        Raises:
            DLedgerError: UNSUPPORTED (no state machine, or no `query`), NOT_LEADER
                (LEASE or RAFT_LOG on a follower; READ_INDEX without a leader, or on a
                deposed one), TIMEOUT, INTERNAL_ERROR (a query failed, or the machine
                stopped and nobody can take over: `_stopped`), LEADER_TRANSFERRING or
                NOT_LEADER (the machine stopped; another member answers); RAFT_LOG: the
                append's errors (WAIT_QUORUM_ACK_TIMEOUT / TERM_CHANGED: unknown outcome).
        """
        caller = self._caller(mode)
        deadline = time.monotonic() + timeout_s
        if mode is ReadMode.RAFT_LOG:
            return self._through_log(caller, requests, deadline)
        if mode is ReadMode.UNSAFE:
            index = caller.applied_index
        elif mode is ReadMode.LEASE:
            index = self._lease_index(deadline)
        else:
            index = self._read_index(deadline)
        if not caller.wait_applied(index, max(0.0, deadline - time.monotonic())):
            if caller.error is not None:
                raise self._stopped(caller.error)
            raise DLedgerError(ResponseCode.TIMEOUT, f"index {index} not applied in time")
        machine, size = caller.state_machine, 0
        answers: list[bytes] = []
        for request in requests:
            try:
                answer = machine.query(request)  # type: ignore[attr-defined]
            except Exception as exc:
                raise DLedgerError(ResponseCode.INTERNAL_ERROR, f"query failed: {type(exc).__name__}: {exc}") from None
            size += len(answer)
            if max_bytes is not None and size > max_bytes:
                raise DLedgerError(
                    ResponseCode.UNEXPECTED_ARGUMENT,
                    f"the answers pass {max_bytes} bytes at read {len(answers) + 1} of {len(requests)}: "
                    "ask for less in one query",
                )
            answers.append(answer)
        return QueryResult(answers, index)

    def _lease_index(self, deadline: float) -> int:
        node = self.node
        with node.step() as now:
            if not node.core.member_state.is_leader:
                raise DLedgerError(ResponseCode.NOT_LEADER, f"leader is {node.core.member_state.leader_id}")
            index = node.core.lease_read_index(now)
        return index if index is not None else self._read_index(deadline)

    def _read_index(self, deadline: float) -> int:
        node = self.node
        member = node.core.member_state
        future: Future[int] | None = None
        with node.step() as now:
            leader = member.leader_id
            if member.is_leader:
                future = node.driver.read_index(now)  # raises NOT_LEADER
            elif leader is None or leader == member.self_id:
                raise DLedgerError(ResponseCode.NOT_LEADER, "no leader known")
            request = ReadIndexRequest(
                group=member.group, remote_id=leader or "", local_id=member.self_id, term=member.current_term
            )
        if future is not None:
            return _wait(future, deadline, "read index")
        return self._ask_leader(request, deadline)

    def _ask_leader(self, request: ReadIndexRequest, deadline: float) -> int:
        transport = self.node.transport
        if transport is None:
            raise DLedgerError(ResponseCode.NOT_LEADER, "no transport to reach the leader")
        try:
            answer = _wait(transport.send(request.remote_id, request), deadline, "read index from the leader")
        except DLedgerError as exc:
            if exc.code == ResponseCode.TIMEOUT:
                raise
            raise DLedgerError(
                ResponseCode.NOT_LEADER, f"leader {request.remote_id} unreachable: {exc.message}"
            ) from None
        if not isinstance(answer, ReadIndexResponse) or not answer.ok:
            code = answer.code if isinstance(answer, RequestOrResponse) else ResponseCode.INTERNAL_ERROR
            raise DLedgerError(code, f"leader {request.remote_id} gave no read index")
        return answer.index

    def _through_log(self, caller: StateMachineCaller, requests: Sequence[bytes], deadline: float) -> QueryResult:
        ticket = caller.answers.expect()  # before appending: the entries may apply at once
        try:
            try:
                last = _wait(self.node.append(list(requests)), deadline, "commit")
            except DLedgerError as exc:
                if exc.code != ResponseCode.TIMEOUT:
                    raise
                raise DLedgerError(
                    ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, "no commit in time; the outcome is unknown"
                ) from None
            if not caller.wait_applied(last, max(0.0, deadline - time.monotonic())):
                raise DLedgerError(ResponseCode.TIMEOUT, f"entry {last} committed but not applied in time")
            first = last - len(requests) + 1
            return QueryResult([caller.answers.take(index) for index in range(first, last + 1)], last)
        finally:
            caller.answers.release(ticket)
