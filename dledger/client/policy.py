"""When may a client retry? The decision table of `DLedgerClient` (pure logic, no I/O).

An append may be retried only when it provably appended nothing; otherwise a retry
could write the same body twice. Every answer is sorted into one `Decision`:

===================  =================================================  ==============
decision             when                                               client does
===================  =================================================  ==============
SUCCESS              code SUCCESS                                       return
REDIRECT             NOT_LEADER (checked before appending), or the      ask the hinted
                     request never left the client (connection          leader or
                     refused, DNS failure: "failed to connect"), or     rediscover
                     a member refused it while shutting down
RETRY                LEADER_PENDING_FULL, LEADER_TRANSFERRING,          back off, ask
                     LEADER_NOT_READY, TERM_NOT_READY (all refused      the same member
                     before appending); a stream refused with           again
                     "too many open streams"
FAIL                 the request was refused as such: UNKNOWN_GROUP,    raise
                     UNKNOWN_MEMBER, REQUEST_WITH_EMPTY_BODYS,          DLedgerError
                     UNEXPECTED_ARGUMENT, DISK_FULL...; gRPC
                     INVALID_ARGUMENT, RESOURCE_EXHAUSTED (too big),
                     UNIMPLEMENTED
INDETERMINATE        everything else: WAIT_QUORUM_ACK_TIMEOUT,          raise
                     TERM_CHANGED, TIMEOUT, INTERNAL_ERROR, DISK_ERROR,  Indeterminate-
                     unknown codes; gRPC DEADLINE_EXCEEDED, CANCELLED,   Error
                     UNAVAILABLE after the request was sent (socket
                     closed, server shutting down), UNKNOWN, INTERNAL
===================  =================================================  ==============

Reads (Get, Metadata, ReadCommitted) change nothing, so for them every transport
failure is retried on another member (`read_decision`).
"""

from __future__ import annotations

import random
import re
from enum import Enum
from typing import Any

from dledger.clock import Clock
from dledger.codes import DLedgerError, ResponseCode


class IndeterminateError(DLedgerError):
    """The outcome of a write is unknown: it may or may not have been appended.

    Raised instead of retrying when the request may have reached the leader (a deadline
    passed, the connection broke after sending, the quorum did not ack in time, the
    term changed). Check the log (e.g. by reading the range) before writing again; a
    blind retry can append the body twice.
    """

    def __init__(self, code: ResponseCode | int, message: str = "") -> None:
        super().__init__(code, message)
        if "outcome is unknown" not in self.message:  # the leader may have said so already
            self.message = f"{self.message} (outcome unknown: it may or may not have been appended)"
        self.args = (f"{self.code.name} ({int(self.code)}): {self.message}",)


def same_error(exc: DLedgerError) -> DLedgerError:
    """A copy of a DLedgerError or IndeterminateError for another caller's thread."""
    return type(exc)(exc.code, exc.message) if type(exc) in (DLedgerError, IndeterminateError) else exc


def unknown_after_resend(refusal: DLedgerError) -> IndeterminateError:
    """What a refused resend of a write means when an earlier attempt of it had an
    unknown outcome: still unknown. The refusal is of the resend only (e.g. no leader
    was found in time, while the first attempt committed); taken as "not appended", a
    caller writing the records again would append them twice."""
    said = re.sub(r"\s*[(;]?\s*nothing was appended\)?", "", refusal.message)
    return IndeterminateError(refusal.code, f"an earlier attempt's outcome is unknown, and resending it failed: {said}")


class Decision(Enum):
    """What the client does with one answer (see the module docstring)."""

    SUCCESS = "success"
    REDIRECT = "redirect"
    RETRY = "retry"
    FAIL = "fail"
    INDETERMINATE = "indeterminate"


REDIRECT_CODES = frozenset({ResponseCode.NOT_LEADER})
"""Refused before appending because the member does not lead: ask the leader."""

RETRY_CODES = frozenset(
    {
        ResponseCode.LEADER_PENDING_FULL,
        ResponseCode.LEADER_TRANSFERRING,
        ResponseCode.LEADER_NOT_READY,
        ResponseCode.TERM_NOT_READY,
    }
)
"""Refused before appending for a passing reason: back off and ask again."""

FAIL_CODES = frozenset(
    {
        ResponseCode.UNKNOWN_GROUP,
        ResponseCode.UNKNOWN_MEMBER,
        ResponseCode.UNEXPECTED_MEMBER,
        ResponseCode.UNEXPECTED_ARGUMENT,
        ResponseCode.REQUEST_WITH_EMPTY_BODYS,
        ResponseCode.UNSUPPORTED,
        ResponseCode.DISK_FULL,
        ResponseCode.OUT_OF_ORDER_SEQUENCE,
        ResponseCode.PRODUCER_FENCED,
        ResponseCode.UNKNOWN_PRODUCER,
        ResponseCode.TOO_MANY_PRODUCERS,
    }
)
"""Refused as such (retrying the same request cannot help); nothing was appended."""

_NOT_SENT_MARKERS = ("failed to connect", "connection refused", "dns resolution failed", "name resolution")
"""UNAVAILABLE details that mean the call never reached a server."""

_REFUSED_CLOSING = re.compile(r"^\S+ is shutting down$")
"""UNAVAILABLE details of a member that refused a new call because it is shutting down
(`dledger.transport.ledger_service`: checked before appending; a call that was already
waiting gets "...; the outcome of this append is unknown" instead)."""

_TOO_MANY_STREAMS = "too many open streams"
"""RESOURCE_EXHAUSTED details of a stream refused before reading any request."""

ACCESS_STATUSES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
"""gRPC statuses of a client refused its identity, token or role (ACCESS_DENIED)."""

_FAIL_STATUSES = frozenset({"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED"}) | ACCESS_STATUSES
"""gRPC statuses of a request refused before any handler ran."""


def code_decision(code: int) -> Decision:
    """The decision for a DLedger result code answered by a member (writes)."""
    value = ResponseCode.of(code)
    if value == ResponseCode.SUCCESS:
        return Decision.SUCCESS
    if value in REDIRECT_CODES:
        return Decision.REDIRECT
    if value in RETRY_CODES:
        return Decision.RETRY
    if value in FAIL_CODES:
        return Decision.FAIL
    return Decision.INDETERMINATE


def status_name(exc: BaseException) -> str:
    """The gRPC status name of a failed call ("UNKNOWN" when there is none)."""
    code = getattr(exc, "code", None)
    if callable(code):
        status: Any = code()
        name = getattr(status, "name", None)
        if isinstance(name, str):
            return name
    return "UNKNOWN"


def status_details(exc: BaseException) -> str:
    """The details text of a failed call (the exception text when there is none); for
    UNIMPLEMENTED with why (helper N: a member of an older version without Query,
    InitProducer or the KV calls)."""
    details = getattr(exc, "details", None)
    text = details() if callable(details) else None
    text = text if isinstance(text, str) else str(exc)
    if status_name(exc) == "UNIMPLEMENTED":
        text += " (the member does not offer this call: it runs an older dledger-py)"
    return text


def never_sent(status: str, details: str) -> bool:
    """True when a failed call provably never reached a server: UNAVAILABLE while
    connecting (connection refused, nothing listening, name not resolved)."""
    if status != "UNAVAILABLE":
        return False
    lowered = details.lower()
    return any(marker in lowered for marker in _NOT_SENT_MARKERS)


def rpc_decision(status: str, details: str) -> Decision:
    """The decision for a write call that failed in gRPC (no DLedger code came back).

    Args:
        status: the gRPC status name, e.g. "UNAVAILABLE".
        details: the status details.
    """
    if never_sent(status, details):
        return Decision.REDIRECT
    if status == "UNAVAILABLE" and _REFUSED_CLOSING.match(details.strip()):
        return Decision.REDIRECT
    if status == "RESOURCE_EXHAUSTED" and _TOO_MANY_STREAMS in details:
        return Decision.RETRY
    if status in _FAIL_STATUSES:
        return Decision.FAIL
    return Decision.INDETERMINATE


def read_decision(status: str, details: str = "") -> Decision:
    """The decision for a read call that failed in gRPC: reads change nothing, so every
    transport failure is retried elsewhere except a request refused as malformed (a
    member whose stream slots are all taken is one to try another member for)."""
    if status == "RESOURCE_EXHAUSTED" and _TOO_MANY_STREAMS in details:
        return Decision.REDIRECT
    if status in _FAIL_STATUSES:
        return Decision.FAIL
    return Decision.REDIRECT


def rpc_code(status: str) -> ResponseCode:
    """The DLedger code that stands for a gRPC failure: TIMEOUT for a missed deadline,
    ACCESS_DENIED for a client refused its identity or role, UNSUPPORTED for a call the
    member does not offer, UNEXPECTED_ARGUMENT for another refused request,
    NETWORK_ERROR otherwise."""
    if status == "DEADLINE_EXCEEDED":
        return ResponseCode.TIMEOUT
    if status == "UNIMPLEMENTED":
        return ResponseCode.UNSUPPORTED
    if status in ACCESS_STATUSES:
        return ResponseCode.ACCESS_DENIED
    if status in _FAIL_STATUSES:
        return ResponseCode.UNEXPECTED_ARGUMENT
    return ResponseCode.NETWORK_ERROR


class Backoff:
    """Capped exponential backoff with jitter, bounded by a deadline.

    Args:
        clock: time source (sleeps go through it).
        first_ms: the first wait.
        max_ms: the longest wait.
        rng: jitter source (seed it in tests).
    """

    def __init__(self, clock: Clock, first_ms: int = 5, max_ms: int = 200, rng: random.Random | None = None) -> None:
        self.clock = clock
        self.next_ms = max(1, first_ms)
        self.max_ms = max(self.next_ms, max_ms)
        self.rng = rng or random.Random()

    def sleep(self, deadline_ms: int) -> bool:
        """Wait the next interval (never past `deadline_ms`); False when the deadline has
        already passed, so the caller should give up."""
        left = deadline_ms - self.clock.now_ms()
        if left <= 0:
            return False
        wait = min(left, self.next_ms // 2 + self.rng.randint(0, self.next_ms // 2 + 1))
        self.next_ms = min(self.max_ms, self.next_ms * 2)
        self.clock.sleep_ms(wait)
        return True
