"""`DLedgerClient.query`: reads of the group's state machine (`Ledger.Query`) in a read
mode (`ReadMode`; docs/OPERATIONS.md, "Linearizable reads").

Concurrent calls of one client share requests through the client's combiner (one lane
per read mode): a QueryRequest carries many requests, answered together, so a burst of
READ_INDEX reads costs one RPC and one heartbeat round on the leader.

Retries: UNSAFE, READ_INDEX and LEASE change nothing, so every failure but a refusal
(UNSUPPORTED, UNEXPECTED_ARGUMENT, ...) or INTERNAL_ERROR (the state machine's `query`
failed) is tried again (the leader first, following
NOT_LEADER redirects) until the deadline. RAFT_LOG appends its requests as entries: it
follows the write rules of `dledger.client.policy` and an unknown outcome raises
`IndeterminateError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.client.members import Members
from dledger.client.policy import (
    Decision,
    IndeterminateError,
    read_decision,
    rpc_code,
    same_error,
    status_details,
    status_name,
)
from dledger.client.types import Target
from dledger.codes import DLedgerError, ReadMode, ResponseCode
from dledger.transport.convert import pb

QUERIES_IN_FLIGHT = 1
"""Shared Query requests in flight per read mode before concurrent queries queue."""
MAX_SHARED_QUERIES = 4096
MAX_SHARED_QUERY_BYTES = 4 << 20
"""What concurrent queries put into one shared request at most."""
ALONE_AFTER = frozenset({ResponseCode.UNEXPECTED_ARGUMENT, ResponseCode.INTERNAL_ERROR})
"""Codes of a shared request that may concern one caller's request only: each is then
sent on its own (a refused or failed query changed nothing)."""

Write = Callable[[str, Any, int], Any]
"""`DLedgerClient._write`: a request sent under the write rules, its SUCCESS answer."""


def send_queries(
    members: Members, write: Write, requests: Sequence[bytes], mode: ReadMode, deadline: int
) -> list[bytes]:
    """One Query request of `requests`; one answer per request.

    Raises:
        DLedgerError: refused (UNSUPPORTED, UNEXPECTED_ARGUMENT...), or no member answered
            in time (TIMEOUT, NETWORK_ERROR, NOT_LEADER...).
        IndeterminateError: RAFT_LOG only: the outcome is unknown.
    """
    request = pb.QueryRequest(group=members.group, requests=requests, mode=int(mode))
    answer = write("Query", request, deadline) if mode is ReadMode.RAFT_LOG else read_query(members, request, deadline)
    if len(answer.answers) != len(requests):
        error = IndeterminateError if mode is ReadMode.RAFT_LOG else DLedgerError
        raise error(ResponseCode.INCONSISTENT_STATE, f"{len(requests)} queries, {len(answer.answers)} answers")
    return list(answer.answers)


def send_shared_queries(
    members: Members, write: Write, calls: list[tuple[bytes, ReadMode, int]]
) -> list[bytes | BaseException]:
    """The queries of concurrent calls of one read mode (request, mode, deadline) as one
    request, within the earliest caller's deadline: each call gets its answer, or its copy
    of the error (the combiner's `send`). When that deadline passed without an answer
    (nothing happened: reads, a refused RAFT_LOG), a call with time left is sent on its
    own within its own deadline: a call with a 10 s timeout failed after the 2 s of the
    call it shared a request with (helper I #3)."""
    mode, earliest = calls[0][1], min(d for _, _, d in calls)
    try:
        return list(send_queries(members, write, [r for r, _, _ in calls], mode, earliest))
    except DLedgerError as exc:
        now, alone = members.clock.now_ms(), exc.code in ALONE_AFTER
        if len(calls) > 1 and type(exc) is DLedgerError and (alone or now >= earliest):
            # ALONE_AFTER: perhaps one caller's request (too big, or the machine's query
            # failed on it): each on its own; out of the earliest caller's time: the others
            return [
                _alone(members, write, request, mode, deadline) if alone or deadline > now else same_error(exc)
                for request, _, deadline in calls
            ]
        return [exc, *(same_error(exc) for _ in calls[1:])]


def _alone(members: Members, write: Write, request: bytes, mode: ReadMode, deadline: int) -> bytes | BaseException:
    try:
        return send_queries(members, write, [request], mode, deadline)[0]
    except DLedgerError as exc:
        return exc


def read_query(members: Members, request: Any, deadline: int) -> Any:
    """A read Query (UNSAFE, READ_INDEX, LEASE): to the leader, following redirects, tried
    again after anything but a refusal until `deadline`; returns the SUCCESS answer."""

    def on_rpc_error(target: Target, exc: grpc.RpcError) -> DLedgerError:
        status = status_name(exc)
        error = DLedgerError(
            rpc_code(status), f"Query to {target.node_id or target.address}: {status} {status_details(exc)}"
        )
        if read_decision(status) is Decision.FAIL:
            raise error from None
        return error

    def on_refusal(target: Target, answer: Any, decision: Decision) -> DLedgerError:
        text = answer.message or ResponseCode.of(answer.code).name
        error = DLedgerError(answer.code, f"Query to {target.node_id or target.address}: {text}")
        if decision is Decision.FAIL or answer.code == ResponseCode.INTERNAL_ERROR:
            raise error  # INTERNAL_ERROR: the machine's query failed, or the machine did
        return error

    return members.call_leader(
        "Query",
        request,
        deadline,
        min_attempt_ms=1,
        out_of_time=lambda: DLedgerError(ResponseCode.TIMEOUT, "no answer in time"),
        on_rpc_error=on_rpc_error,
        on_refusal=on_refusal,
    )
