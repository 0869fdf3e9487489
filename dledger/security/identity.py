"""Who is calling: the identity a peer certificate names, and what each role may call.

A member certificate carries the SAN URI `dledger://<group>/<id>`; a client certificate
`dledger-client://<name>` and `dledger-role:<read|write|admin>`. gRPC hands the verified
peer's SANs to the server in the call's auth context; `identity_of` turns them into an
`Identity` (cached per certificate).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

ROLES: tuple[str, ...] = ("read", "write", "admin")
"""Client roles, each allowing what the one before it allows and more."""

MEMBER_SCHEME = "dledger://"
CLIENT_SCHEME = "dledger-client://"
ROLE_SCHEME = "dledger-role:"

LEDGER_METHOD_ROLES: dict[str, str] = {
    "Get": "read",
    "ReadCommitted": "read",
    "Metadata": "read",
    "Query": "read",
    "Append": "write",
    "AppendStream": "write",
    "InitProducer": "write",
    "LeadershipTransfer": "admin",
}
"""The least role each `dledger.v1.Ledger` method needs (methods not listed: admin)."""

MEMBER_LEDGER_ROLE = "read"
"""The role a member certificate has on the Ledger service."""


def member_uri(group: str, member_id: str) -> str:
    """The SAN URI of a member certificate."""
    return f"{MEMBER_SCHEME}{group}/{member_id}"


def client_uri(name: str) -> str:
    """The SAN URI of a client certificate."""
    return f"{CLIENT_SCHEME}{name}"


def role_uri(role: str) -> str:
    """The SAN URI that gives a client certificate its role."""
    return f"{ROLE_SCHEME}{role}"


@dataclass(frozen=True)
class Identity:
    """A verified caller.

    Attributes:
        kind: "member" (a member certificate), "client" or "unknown" (a certificate
            of the CA that names neither).
        name: the member id or client name ("" when unknown).
        group: the group a member certificate names ("" for clients).
        role: the client's role ("" for members and unknown callers).
    """

    kind: Literal["member", "client", "unknown"]
    name: str = ""
    group: str = ""
    role: str = ""

    def describe(self) -> str:
        """A short text for messages and logs."""
        if self.kind == "member":
            return f"member {self.group}/{self.name}"
        if self.kind == "client":
            return f"client {self.name} ({self.role or 'no role'})"
        return "a certificate naming no dledger identity"

    def ledger_role(self) -> str:
        """The role this identity has on the Ledger service ("" = none)."""
        if self.kind == "member":
            return MEMBER_LEDGER_ROLE
        return self.role if self.kind == "client" else ""

    def may_call_ledger(self, method: str) -> bool:
        """True when this identity's role allows the Ledger method `method`."""
        have = self.ledger_role()
        need = LEDGER_METHOD_ROLES.get(method, "admin")
        return bool(have) and ROLES.index(have) >= ROLES.index(need)


def identity_from_uris(uris: Sequence[str]) -> Identity:
    """The identity named by a certificate's SAN URIs (see the module docstring).

    A certificate naming both a member and a client, two members or two roles is
    "unknown": it is refused everywhere.
    """
    members = [u[len(MEMBER_SCHEME) :] for u in uris if u.startswith(MEMBER_SCHEME)]
    clients = [u[len(CLIENT_SCHEME) :] for u in uris if u.startswith(CLIENT_SCHEME)]
    roles = [u[len(ROLE_SCHEME) :] for u in uris if u.startswith(ROLE_SCHEME)]
    if len(members) == 1 and not clients and not roles:
        group, sep, member_id = members[0].partition("/")
        if sep and group and member_id and "/" not in member_id:
            return Identity("member", member_id, group)
    if len(clients) == 1 and not members and len(roles) <= 1 and clients[0]:
        role = roles[0] if roles and roles[0] in ROLES else ""
        return Identity("client", clients[0], "", role)
    return Identity("unknown")


_UNKNOWN = Identity("unknown")
_cache: dict[bytes, Identity] = {}
_cache_lock = threading.Lock()
_CACHE_MAX = 4096


def identity_of(auth_context: Mapping[str, Sequence[bytes]]) -> Identity:
    """The identity of a call's verified peer certificate, from gRPC's auth context
    (`context.auth_context()`); "unknown" when there is no certificate (plaintext)."""
    pem = auth_context.get("x509_pem_cert")
    if not pem:
        return _UNKNOWN
    key = pem[0]
    found = _cache.get(key)
    if found is not None:
        return found
    uris = [v.decode("utf-8", "replace") for v in auth_context.get("peer_uri", ())]
    if not uris:
        uris = [
            v.decode("utf-8", "replace")
            for v in auth_context.get("x509_subject_alternative_name", ())
            if b"://" in v or v.startswith(ROLE_SCHEME.encode())
        ]
    found = identity_from_uris(uris)
    with _cache_lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = found
    return found


def certificate_identity(cert_pem: bytes) -> Identity:
    """The identity a PEM certificate (its first one) names in its SAN URIs; "unknown"
    for one that names none, or is not a certificate."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return _UNKNOWN
    return identity_from_uris(names.get_values_for_type(x509.UniformResourceIdentifier))
