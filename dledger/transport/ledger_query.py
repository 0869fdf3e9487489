"""`Ledger.Query`: reads of the member's state machine in a read mode, answered together
(a part of `ledger_service.LedgerService`).

The checks of `dledger.transport.validate` run first (with TLS, a RAFT_LOG query, which
appends, also needs a role that may append); the node answers
(`dledger.node_reads`). Codes: SUCCESS with one answer per request; UNSUPPORTED (no
state machine, or one without `query`); NOT_LEADER with the leader's id and address
(LEASE / RAFT_LOG on a follower, a deposed leader); TIMEOUT (no read index or apply in
time: nothing happened, a read may be sent again); RAFT_LOG also WAIT_QUORUM_ACK_TIMEOUT
/ TERM_CHANGED (the entries may still commit).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.codes import DLedgerError, ReadMode, ResponseCode
from dledger.transport.convert import pb
from dledger.transport.service_core import ServiceCore, abort, parse

log = logging.getLogger(__name__)


def answer_query(core: ServiceCore, raw: bytes, context: Any) -> Any:
    """Ledger.Query."""
    request = parse(pb.QueryRequest, raw, context)
    out = pb.QueryResponse()
    requests = list(request.requests)
    refusal = core.refuse("Query", core.validator.query(request, requests), context)
    if refusal is not None:
        return core.fill_header(out, *refusal)
    if request.mode == ReadMode.RAFT_LOG and core.config.tls_enabled:
        who = core.identify(context)  # the guard let any reader in: RAFT_LOG appends
        if not who.may_call_ledger("Append"):
            abort(context, grpc.StatusCode.PERMISSION_DENIED, f"{who.describe()}: a RAFT_LOG query appends entries")
    if core.is_closing:
        abort(context, grpc.StatusCode.UNAVAILABLE, f"{core.config.self_id} is shutting down")
    if context is not None and not context.is_active():
        return out  # its caller went away while it waited in the queue (helper M)
    caller = core.client_caller(context)
    no_slot = core.try_client_slot(caller)
    if no_slot is not None:
        return core.fill_header(out, ResponseCode.LEADER_PENDING_FULL, no_slot)
    try:
        timeout_s = core.limits.append_wait_s
        remaining = context.time_remaining() if context is not None else None
        if remaining is not None:
            timeout_s = max(0.0, min(timeout_s, remaining))
        try:
            result = core.node.reads.query(requests, ReadMode(request.mode), timeout_s, core.limits.max_query_bytes)
        except DLedgerError as exc:
            return core.fill_header(out, exc.code, exc.message)
        except Exception as exc:
            log.exception("query failed")
            return core.fill_header(out, ResponseCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        out.answers.extend(result.answers)
        out.read_index = result.read_index
        return core.fill_header(out, ResponseCode.SUCCESS)
    finally:
        core.release_client_slot(caller)
