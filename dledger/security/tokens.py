"""Bearer tokens of clients that connect without a certificate.

A member with TLS may open a second, client-only port (`--client-address`): it speaks
server-side TLS (no client certificate is asked for) and serves the Ledger service to
callers that send `authorization: Bearer <token>`. The tokens file (`--tokens-file`)
names who each token is and its role, one line per token:

    # name role sha256-of-the-token
    dashboard read 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08

Only the SHA-256 of a token is kept, so the file gives nobody a token (it still says
who may do what: keep it writable by the member's user only). `dledger certs token`
makes a token and adds its line.

A member reads the file again when it changes (`TokenFile`: checked at most every
`RECHECK_S` seconds, on calls), so a token is added or revoked without a restart. A file
that cannot be read or is malformed then leaves the tokens read before in force (an
error is logged); an empty file revokes every token.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from dledger.bounded import read_bounded
from dledger.security.identity import ROLES, Identity
from dledger.security.watch import FileWatch

BEARER = "bearer "
"""The scheme prefix of the `authorization` header (compared case-insensitively)."""

log = logging.getLogger(__name__)

TOKEN_BYTES = 32
"""Random bytes in a token `new_token` makes (43 URL-safe characters)."""

_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")

Metadata = Mapping[str, str] | Iterable[tuple[str, str]]
"""A call's invocation metadata."""


class TokenFileError(ValueError):
    """A tokens file that cannot be read or has a malformed line."""


def token_digest(token: str) -> str:
    """The hex SHA-256 of `token`, as the tokens file keeps it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random token (URL-safe text)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


class TokenStore:
    """The tokens a member accepts: digest -> the identity it stands for.

    Args:
        entries: (name, role, hex SHA-256) triples.

    Raises:
        TokenFileError: a name, role or digest is malformed, or a digest repeats.
    """

    def __init__(self, entries: Iterable[tuple[str, str, str]] = ()) -> None:
        self._by_digest: dict[str, Identity] = {}
        for name, role, digest in entries:
            self._add(name, role, digest)

    def _add(self, name: str, role: str, digest: str) -> None:
        problem = entry_problem(name, role, digest)
        if problem:
            raise TokenFileError(problem)
        if digest in self._by_digest:
            raise TokenFileError(f"the token of {name!r} is listed twice")
        self._by_digest[digest] = Identity("client", name, "", role)

    @classmethod
    def load(cls, path: str | Path) -> TokenStore:
        """Read a tokens file (format: the module docstring).

        Raises:
            TokenFileError: it cannot be read, or a line is malformed (named by number).
        """
        return cls.parse(_read_text(path), str(path))

    @classmethod
    def parse(cls, text: str, source: str) -> TokenStore:
        """The tokens of a tokens file's `text` (`source` names it in errors).

        Raises:
            TokenFileError: a line is malformed or repeats a token (named by number).
        """
        store = cls()
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            try:
                if len(fields) != 3:
                    raise TokenFileError(f"expected 'name role sha256', got {len(fields)} fields")
                store._add(fields[0], fields[1], fields[2])
            except TokenFileError as exc:
                raise TokenFileError(f"{source}:{number}: {exc}") from None
        return store

    def __len__(self) -> int:
        return len(self._by_digest)

    def identity(self, token: str) -> Identity | None:
        """The client `token` belongs to (None: no such token)."""
        return self._by_digest.get(token_digest(token))

    def caller(self, metadata: Metadata) -> Identity | None:
        """The client a call's metadata authenticates with its `authorization: Bearer`
        header (None: no such header, or an unknown token)."""
        pairs = metadata.items() if isinstance(metadata, Mapping) else metadata
        for key, value in pairs:
            if key == "authorization" and isinstance(value, str) and value[: len(BEARER)].lower() == BEARER:
                return self.identity(value[len(BEARER) :].strip())
        return None


class TokenFile:
    """The tokens of a tokens file, read again when the file changes.

    A call's `caller` looks at the file's inode, size and modification time when
    `RECHECK_S` has passed since the last look (`dledger.security.watch`), and reads it
    again when one of them changed. A file that cannot be read or is malformed keeps the
    tokens read before (the error is logged once per change of the file).

    Args:
        path: the tokens file.
        clock: seconds, monotonic (tests pass their own).

    Raises:
        TokenFileError: the file cannot be read or is malformed at start.
    """

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self._watch = FileWatch([self.path], clock)  # before reading: a change meanwhile is seen
        self.store = TokenStore.load(self.path)
        self.reloads = 0
        """How often the file was read again after start (tests, logs)."""

    def __len__(self) -> int:
        return len(self.store)

    def refresh(self) -> None:
        """Read the file again if `RECHECK_S` passed since the last look and it changed."""
        if not self._watch.changed():
            return
        try:
            store = TokenStore.load(self.path)
        except TokenFileError as exc:
            log.error("%s; the %d tokens read before stay in force", exc, len(self.store))
            return
        self.store, self.reloads = store, self.reloads + 1
        log.info("read the tokens file %s again: %d tokens", self.path, len(store))

    def caller(self, metadata: Metadata) -> Identity | None:
        """`TokenStore.caller` with the file's current tokens."""
        self.refresh()
        return self.store.caller(metadata)


def _read_text(path: str | Path) -> str:
    try:
        return read_bounded(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TokenFileError(f"cannot read the tokens file {path}: {reason}") from exc


def client_problem(name: str, role: str) -> str:
    """Why `name` and `role` cannot name a token's client ("" when they can)."""
    if not _NAME.fullmatch(name):
        return f"bad client name {name!r} (letters, digits, '.', '_', '@', '-'; at most 64)"
    if role not in ROLES:
        return f"bad role {role!r} (one of {', '.join(ROLES)})"
    return ""


def entry_problem(name: str, role: str, digest: str) -> str:
    """Why (name, role, digest) is not a valid tokens-file entry ("" when it is)."""
    problem = client_problem(name, role)
    if not problem and not _DIGEST.fullmatch(digest):
        return "the token must be given as its SHA-256 in 64 lowercase hex digits"
    return problem


def add_token(path: str | Path, name: str, role: str) -> str:
    """Make a token for client `name` with `role`, add its line to the tokens file at
    `path` (created readable by its owner only) and return the token; it is shown
    nowhere else.

    Raises:
        TokenFileError: bad name or role, the file is malformed or cannot be written.
    """
    problem = client_problem(name, role)
    if problem:
        raise TokenFileError(problem)
    token = new_token()
    digest = token_digest(token)
    target = Path(path)
    separator = ""
    if target.exists():
        text = _read_text(target)
        TokenStore.parse(text, str(target))  # refuse to append to a file the members could not load
        separator = "\n" if text and not text.endswith("\n") else ""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as out:
            if out.tell() == 0:
                out.write("# dledger bearer tokens: name role sha256-of-the-token\n")
            out.write(f"{separator}{name} {role} {digest}\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise TokenFileError(f"cannot write the tokens file {path}: {exc.strerror or exc}") from exc
    return token
