"""Who may call what on a mutual-TLS member (see docs/OPERATIONS.md, "Security model").

- `dledger.v1.Peer`: only a member certificate of this group naming one of its members;
  a request whose `local_id` (or `leader_id`, when set) is not that member is refused.
- `dledger.v1.Ledger`: a client certificate whose role allows the method
  (`dledger.security.identity.LEDGER_METHOD_ROLES`); member certificates may read. On the
  client-only port (server-side TLS, no certificates) a bearer token of the tokens file
  stands for the certificate (`dledger.security.tokens`).

Refusals end the call with gRPC PERMISSION_DENIED (UNAUTHENTICATED for a missing or
unknown token) and are logged (at most once a second per caller and reason, so a flood
of forged calls cannot flood the log).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.config import DLedgerConfig
from dledger.raft.messages import RequestOrResponse
from dledger.security.identity import Identity, identity_of
from dledger.security.tokens import TokenFile, TokenStore
from dledger.transport.service_core import abort

log = logging.getLogger(__name__)

LOG_EVERY_S = 1.0


class Guard:
    """The identity checks of one member's server.

    Args:
        config: the member's configuration (its group and members).
        tokens: the bearer tokens callers without a certificate may present (None:
            every caller needs a certificate).
    """

    def __init__(self, config: DLedgerConfig, tokens: TokenStore | TokenFile | None = None) -> None:
        self.tokens = tokens
        self.group = config.group
        self.members = frozenset(config.peer_map)
        self.self_id = config.self_id
        self._logged: dict[tuple[str, str], float] = {}
        self._log_lock = threading.Lock()
        self.refused = 0
        """How many calls were refused (tests, metrics)."""

    def refuse(
        self, context: Any, who: Identity | str, reason: str, status: Any = grpc.StatusCode.PERMISSION_DENIED
    ) -> None:
        """Log (rate-limited) and end the call with `status` (PERMISSION_DENIED); `who`
        is the caller's identity or a description of it."""
        self.refused += 1
        caller = who if isinstance(who, str) else who.describe()
        key = (caller, reason)
        now = time.monotonic()
        with self._log_lock:
            if now - self._logged.get(key, -LOG_EVERY_S) >= LOG_EVERY_S:
                self._logged[key] = now
                log.warning("%s: refused a call from %s: %s", self.self_id, caller, reason)
        abort(context, status, f"{caller}: {reason}")

    def ledger_caller(self, context: Any) -> Identity:
        """The caller of a Ledger call: its certificate's identity, or, on the client
        port (no certificate), the client its bearer token names; a missing or unknown
        token ends the call with UNAUTHENTICATED."""
        auth = context.auth_context()
        if self.tokens is None or auth.get("x509_pem_cert"):
            return identity_of(auth)
        who = self.tokens.caller(context.invocation_metadata() or ())
        if who is None:
            reason = "no valid bearer token (authorization: Bearer <token> from the tokens file)"
            self.refuse(context, "a client without a certificate", reason, grpc.StatusCode.UNAUTHENTICATED)
        assert who is not None
        return who

    def peer_caller(self, context: Any) -> Identity:
        """The caller of a Peer call, when its certificate names a member of this
        group; otherwise the call is refused."""
        who = identity_of(context.auth_context())
        if who.kind != "member":
            self.refuse(context, who, "only members of the group may call the Peer service")
        if who.group != self.group or who.name not in self.members:
            self.refuse(context, who, f"not a member of group {self.group!r}")
        return who

    def check_speaks_as(self, who: Identity, request: RequestOrResponse, context: Any) -> None:
        """Refuse a Peer request that speaks as another member than its caller's
        certificate names (its `local_id`, or a `leader_id` that is set)."""
        if request.local_id != who.name:
            self.refuse(context, who, f"the request speaks as {request.local_id!r}")
        if request.leader_id and request.leader_id != who.name:
            self.refuse(context, who, f"the request names {request.leader_id!r} as leader or candidate")

    def ledger_handler(self, inner: Any) -> Any:
        """Wrap the Ledger service's generic handler: every method checks the caller's
        role first."""
        return _RoleCheckedHandler(inner, self)


class _RoleCheckedHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """A generic handler whose method handlers check the caller's role first."""

    def __init__(self, inner: Any, guard: Guard) -> None:
        self._inner = inner
        self._guard = guard
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    def service(self, handler_call_details: Any) -> Any:
        # the inner handler runs for every call (the Ledger service counts arriving
        # appends there); only the wrapping is cached
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        name = method.rsplit("/", 1)[-1]
        kinds = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
        changes = {kind: self._checked(name, getattr(handler, kind)) for kind in kinds if getattr(handler, kind)}
        wrapped = handler._replace(**changes)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _checked(self, name: str, behaviour: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        guard = self._guard

        def checked(request: Any, context: Any) -> Any:
            who = guard.ledger_caller(context)
            if not who.may_call_ledger(name):
                guard.refuse(context, who, f"its role may not call {name}")
            return behaviour(request, context)

        return checked
