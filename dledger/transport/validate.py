"""Every field of every RPC checked at the gRPC boundary, before anything reaches the node.

The Peer service (Vote, HeartBeat, Push, LeadershipTransfer, InstallSnapshot, ReadIndex)
and the Ledger service (Append, AppendStream, Get, ReadCommitted, Metadata,
LeadershipTransfer, Query)
call the checks here; a request that fails one gets a DLedger `ResponseCode` in its
answer (`Refusal`) and never touches the member's state. The rules (docs/OPERATIONS.md,
"Hostile input"):

- addressing: `remote_id` is this member (UNEXPECTED_MEMBER when it names another
  member, UNKNOWN_MEMBER when no member), `group` is this member's (UNKNOWN_GROUP);
  client requests may leave both empty ("whichever member receives it");
- identities: a peer's `local_id` is another member of the group, and the leader or
  candidate it names is itself (members only ever speak for themselves; UNKNOWN_MEMBER /
  UNEXPECTED_MEMBER);
- numbers: terms within [0, MAX_TERM] and at most MAX_TERM_STEP above this member's
  own (the last-entry terms of a request within [-1, its term]), indexes within
  [-1, MAX_INDEX], counts and sizes non-negative and consistent with each other and
  with the member's limits (UNEXPECTED_ARGUMENT, or INDEX_OUT_OF_RANGE for a read
  position);
- enums: a value the protocol defines (an unknown push type is a malformed message:
  gRPC INVALID_ARGUMENT, as before; an unknown read layout is UNEXPECTED_ARGUMENT).

Without TLS, anything that can reach the port can still claim to be a member with the
right ids and a plausible term: identities are proven by the TLS layer, and a forged but
well-formed message is for Pre-Vote and CheckQuorum to bound (see docs/OPERATIONS.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from dledger.codes import ReadMode, ResponseCode
from dledger.config import DLedgerConfig
from dledger.config_bounds import SEGMENT_MAX
from dledger.entry import (
    HEADER_SIZE,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    MAGIC_RECORD,
    MAX_ENTRY_SIZE,
    OFF_INDEX,
    OFF_SIZE,
    OFF_TERM,
)
from dledger.raft.messages import (
    MAX_INDEX,
    MAX_TERM,
    HeartBeatRequest,
    InstallSnapshotRequest,
    LeadershipTransferRequest,
    PushEntryRequest,
    PushType,
    RequestOrResponse,
    VoteRequest,
)

log = logging.getLogger(__name__)

__all__ = ["Refusal", "RefusalLog", "RequestValidator"]

MAX_TERM_STEP = 1 << 32
"""How far above this member's term a peer's term may be. A real member gets there one
election at a time (2^32 elections take more than a century), so a term further ahead
is forged: refused, it cannot push the group to MAX_TERM in one message."""

LAYOUTS = frozenset({0, 1})
"""`ReadCommittedRequest.Layout` values: PACKED, FIXED_WIDTH."""

READ_MODES = frozenset(int(mode) for mode in ReadMode)
"""`QueryRequest.ReadMode` values."""


class Refusal(NamedTuple):
    """Why a request is refused: the DLedger code of the answer and a one-line reason."""

    code: ResponseCode
    reason: str


SHOWN_CHARS = 64
"""The most of a caller's text a refusal repeats (a group, a member id): the rest is
left out, so that a megabyte of id is not echoed into the answer and the log."""


def _shown(value: object) -> str:
    """`value` quoted for a message, cut to SHOWN_CHARS characters."""
    if not isinstance(value, str):
        return repr(value)[:SHOWN_CHARS]
    return repr(value[:SHOWN_CHARS]) + (f" (+{len(value) - SHOWN_CHARS} chars)" if len(value) > SHOWN_CHARS else "")


def _unexpected(reason: str) -> Refusal:
    return Refusal(ResponseCode.UNEXPECTED_ARGUMENT, reason)


def _within(name: str, value: int, low: int, high: int) -> Refusal | None:
    if low <= value <= high:
        return None
    return _unexpected(f"{name} {value} is outside [{low}, {high}]")


MAX_IDENTITY_CHARS = 64
"""The longest group id or incarnation a request may carry (ours are 16 hex digits)."""


def _identity(request: VoteRequest | HeartBeatRequest | PushEntryRequest | InstallSnapshotRequest) -> Refusal | None:
    """A request's group id and incarnation: short ASCII words."""
    for name in ("group_id", "incarnation"):
        value: str = getattr(request, name)
        if len(value) > MAX_IDENTITY_CHARS or not (value.isascii() and (value.isalnum() or not value)):
            return _unexpected(f"{name} {_shown(value)} is not a short alphanumeric id")
    return None


def _install_chunk(req: InstallSnapshotRequest) -> Refusal | None:
    """One InstallSnapshot chunk: the snapshot's index and term, the file's size, the
    chunk's place in it (the CRCs are uint32 on the wire; the store checks them)."""
    return _first_failure(
        (
            _within("last_included_index", req.last_included_index, 0, MAX_INDEX),
            _within("last_included_term", req.last_included_term, 0, req.term),
            _within("total_size", req.total_size, 0, MAX_INDEX),
            _within("offset", req.offset, 0, req.total_size),
            _within("offset + chunk size", req.offset + len(req.data), 0, req.total_size),
            _within("total_crc32", req.total_crc32, 0, 0xFFFFFFFF),
            _within("chunk_crc32", req.chunk_crc32, 0, 0xFFFFFFFF),
            _within("next_pos", req.next_pos, -1, MAX_INDEX),
        )
    )


def _first_failure(checks: Iterable[Refusal | None]) -> Refusal | None:
    for refusal in checks:
        if refusal is not None:
            return refusal
    return None


class RequestValidator:
    """The checks of one member (its group, id and members; the server's limits).

    Args:
        config: the member's configuration.
        max_bodies_per_append: bodies in one append request.
        max_append_bytes: body bytes in one append request.
    """

    def __init__(self, config: DLedgerConfig, max_bodies_per_append: int, max_append_bytes: int) -> None:
        self.group = config.group
        self.self_id = config.self_id
        self.members = frozenset(config.peer_map)
        self.max_bodies_per_append = max_bodies_per_append
        self.max_append_bytes = max_append_bytes
        self.max_body_bytes = min(MAX_ENTRY_SIZE, config.store.max_entry_size) - HEADER_SIZE

    # -- addressing and identities

    def _addressee(self, remote_id: str) -> Refusal | None:
        if remote_id == self.self_id:
            return None
        if remote_id in self.members:
            return Refusal(
                ResponseCode.UNEXPECTED_MEMBER, f"addressed to {_shown(remote_id)}, this is {_shown(self.self_id)}"
            )
        return Refusal(
            ResponseCode.UNKNOWN_MEMBER, f"addressed to {_shown(remote_id)}, not a member of {_shown(self.group)}"
        )

    def _group(self, group: str) -> Refusal | None:
        if group == self.group:
            return None
        return Refusal(
            ResponseCode.UNKNOWN_GROUP, f"this member serves group {_shown(self.group)}, not {_shown(group)}"
        )

    def _other_member(self, what: str, member_id: str | None) -> Refusal | None:
        if member_id is None or member_id not in self.members:
            return Refusal(
                ResponseCode.UNKNOWN_MEMBER, f"{what} {_shown(member_id)} is not a member of {_shown(self.group)}"
            )
        if member_id == self.self_id:
            return Refusal(ResponseCode.UNEXPECTED_MEMBER, f"{what} {_shown(member_id)} is this member itself")
        return None

    def client_target(self, group: str, remote_id: str) -> Refusal | None:
        """A client request's group and addressee (empty: this one)."""
        if group and group != self.group:
            return self._group(group)
        if remote_id and remote_id != self.self_id:
            return Refusal(
                ResponseCode.UNKNOWN_MEMBER, f"this member is {_shown(self.self_id)}, not {_shown(remote_id)}"
            )
        return None

    # -- the Peer service

    def peer_request(self, request: RequestOrResponse, current_term: int) -> Refusal | None:
        """Vote, HeartBeat, Push or LeadershipTransfer from a peer (decoded), checked
        against this member's `current_term`."""
        refusal = _first_failure(
            (
                self._addressee(request.remote_id),
                self._group(request.group),
                self._other_member("sender", request.local_id),
                _within("term", request.term, 0, min(MAX_TERM, max(current_term, 0) + MAX_TERM_STEP)),
            )
        )
        if refusal is not None:
            return refusal
        if isinstance(request, LeadershipTransferRequest):
            return self._peer_transfer(request)
        if not isinstance(request, (VoteRequest, HeartBeatRequest, PushEntryRequest, InstallSnapshotRequest)):
            # ReadIndex: addressed to the leader, which this member may be; no other
            if request.leader_id not in (None, "", self.self_id):
                return Refusal(ResponseCode.UNEXPECTED_MEMBER, f"leader {_shown(request.leader_id)} is not this member")
            return None
        if request.leader_id != request.local_id:
            role = "candidate" if isinstance(request, VoteRequest) else "leader"
            return Refusal(
                ResponseCode.UNEXPECTED_MEMBER,
                f"{_shown(request.local_id)} speaks for {role} {_shown(request.leader_id)}: "
                "a member speaks only for itself",
            )
        if (bad_id := _identity(request)) is not None:
            return bad_id
        if isinstance(request, VoteRequest):
            return _first_failure(
                (
                    _within("ledger_end_index", request.ledger_end_index, -1, MAX_INDEX),
                    _within("ledger_end_term", request.ledger_end_term, -1, request.term),
                )
            )
        if isinstance(request, HeartBeatRequest):
            return _first_failure(
                (
                    _within("ledger_end_index", request.ledger_end_index, -1, MAX_INDEX),
                    _within("retention_floor", request.retention_floor, 0, MAX_INDEX + 1),
                )
            )
        if isinstance(request, InstallSnapshotRequest):
            return _install_chunk(request)
        return self._push(request)

    def _peer_transfer(self, request: LeadershipTransferRequest) -> Refusal | None:
        """The leader (sender) asks this member to take over."""
        if request.transfer_id != request.local_id:
            return Refusal(
                ResponseCode.UNEXPECTED_MEMBER, f"transfer_id {_shown(request.transfer_id)} is not the sender"
            )
        if request.transferee_id != self.self_id:
            return Refusal(
                ResponseCode.UNEXPECTED_MEMBER, f"transferee {_shown(request.transferee_id)} is not this member"
            )
        if request.leader_id is not None and request.leader_id != request.local_id:
            return Refusal(ResponseCode.UNEXPECTED_MEMBER, f"leader {_shown(request.leader_id)} is not the sender")
        return _within("take_leadership_ledger_index", request.take_leadership_ledger_index, -1, MAX_INDEX)

    def _push(self, req: PushEntryRequest) -> Refusal | None:
        refusal = _first_failure(
            (
                _within("prev_index", req.prev_index, -1, MAX_INDEX),
                _within("prev_term", req.prev_term, -1, req.term),
                _within("commit_index", req.commit_index, -1, MAX_INDEX),
                _within("first_index", req.first_index, -1, MAX_INDEX),
                _within("last_term", req.last_term, -1, req.term),
                _within("count", req.count, 0, MAX_INDEX),
                _within("data_file_size", req.data_file_size, 0, SEGMENT_MAX),
            )
        )
        if refusal is not None:
            return refusal
        if req.type is not PushType.APPEND:
            if req.count or req.entries:
                return _unexpected(f"a {req.type.value} push carries no entries (count {req.count})")
            if req.type is PushType.TRUNCATE and (req.first_index < 0 or req.first_index != req.prev_index + 1):
                return _unexpected(f"TRUNCATE from {req.first_index} after prev_index {req.prev_index}")
            return None
        return self._append_run(req)

    def _append_run(self, req: PushEntryRequest) -> Refusal | None:
        """An APPEND's run: consistent with its count, indexes and terms (the first
        header is read; the store checks every entry as it appends them)."""
        entries, count = req.entries, req.count
        if count < 1 or req.first_index < 0:
            return _unexpected(f"an APPEND of {count} entries at {req.first_index}")
        if req.first_index != req.prev_index + 1:
            return _unexpected(f"an APPEND at {req.first_index} after prev_index {req.prev_index}")
        if req.last_index > MAX_INDEX:
            return _unexpected(f"an APPEND ending at {req.last_index} > {MAX_INDEX}")
        if not count * HEADER_SIZE <= len(entries) <= count * MAX_ENTRY_SIZE:
            return _unexpected(f"{len(entries)} bytes cannot hold {count} entries")
        if req.last_term < max(req.prev_term, 0):
            return _unexpected(f"last_term {req.last_term} below prev_term {req.prev_term}")
        magic = int.from_bytes(entries[0:4], "big", signed=True)
        size = int.from_bytes(entries[OFF_SIZE : OFF_SIZE + 4], "big", signed=True)
        index = int.from_bytes(entries[OFF_INDEX : OFF_INDEX + 8], "big", signed=True)
        term = int.from_bytes(entries[OFF_TERM : OFF_TERM + 8], "big", signed=True)
        if magic not in (MAGIC_NORMAL, MAGIC_NOOP, MAGIC_RECORD) or not HEADER_SIZE <= size <= min(
            len(entries), MAX_ENTRY_SIZE
        ):
            return _unexpected(f"the first entry's header is not an entry (magic {magic}, size {size})")
        if index != req.first_index or not max(req.prev_term, 0) <= term <= req.last_term:
            return _unexpected(f"the first entry is index {index} term {term}, the push says {req.first_index}")
        if count == 1 and term != req.last_term:
            return _unexpected(f"a one-entry run of term {term}, the push says {req.last_term}")
        return None

    # -- the Ledger service

    def append(self, request: Any, bodies: list[bytes] | None = None) -> Refusal | None:
        """Ledger.Append / AppendStream (an `AppendRequest`; `bodies`: its bodies as a
        list when the caller has them already, so they are read once)."""
        refusal = self.client_target(request.group, request.remote_id)
        if refusal is not None:
            return refusal
        if bodies is None:
            bodies = list(request.bodies)
        if not bodies:
            return Refusal(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "no bodies to append")
        if len(bodies) > self.max_bodies_per_append:
            return _unexpected(f"{len(bodies)} bodies in one request; at most {self.max_bodies_per_append}")
        total = sum(map(len, bodies))  # one pass; a body can only be too large when the sum is
        if total > self.max_body_bytes and (largest := max(map(len, bodies))) > self.max_body_bytes:
            return _unexpected(f"a body of {largest} bytes; at most {self.max_body_bytes}")
        if total > self.max_append_bytes:
            return _unexpected(
                f"{total} body bytes in one request; at most {self.max_append_bytes} (split it into smaller requests)"
            )
        return None

    def get(self, request: Any) -> Refusal | None:
        """Ledger.Get."""
        return _first_failure(
            (
                self.client_target(request.group, request.remote_id),
                _within("count", request.count, 0, MAX_INDEX),
                _within("max_bytes", request.max_bytes, 0, MAX_INDEX),
                None
                if 0 <= request.index <= MAX_INDEX
                else Refusal(ResponseCode.INDEX_OUT_OF_RANGE, f"index {request.index} is outside [0, {MAX_INDEX}]"),
            )
        )

    def read_committed(self, request: Any) -> Refusal | None:
        """Ledger.ReadCommitted."""
        to_index = request.to_index if request.HasField("to_index") else None
        return _first_failure(
            (
                self.client_target(request.group, request.remote_id),
                _within("from_index", request.from_index, 0, MAX_INDEX),
                None if to_index is None else _within("to_index", to_index, request.from_index, MAX_INDEX + 1),
                _within("max_batch_bytes", request.max_batch_bytes, 0, MAX_INDEX),
                _within("max_batch_count", request.max_batch_count, 0, MAX_INDEX),
                None if request.layout in LAYOUTS else _unexpected(f"unknown layout {request.layout}"),
            )
        )

    def query(self, request: Any, requests: list[bytes]) -> Refusal | None:
        """Ledger.Query (`requests`: its requests as a list): as many and as large as an
        append (RAFT_LOG appends them), in a read mode the protocol defines."""
        refusal = self.client_target(request.group, request.remote_id)
        if refusal is not None:
            return refusal
        if request.mode not in READ_MODES:
            return _unexpected(f"unknown read mode {request.mode}")
        if not requests:
            return _unexpected("no requests to answer")
        if len(requests) > self.max_bodies_per_append:
            return _unexpected(f"{len(requests)} requests in one query; at most {self.max_bodies_per_append}")
        largest = max(map(len, requests))
        if largest > self.max_body_bytes:
            return _unexpected(f"a request of {largest} bytes; at most {self.max_body_bytes}")
        total = sum(map(len, requests))
        if total > self.max_append_bytes:
            return _unexpected(f"{total} request bytes in one query; at most {self.max_append_bytes}")
        return None

    def transfer(self, request: Any) -> Refusal | None:
        """Ledger.LeadershipTransfer (a client asks the leader)."""
        refusal = self.client_target(request.group, request.remote_id)
        if refusal is not None:
            return refusal
        if not request.transferee_id:
            return _unexpected("transferee_id is empty")
        if request.transferee_id not in self.members:
            return Refusal(ResponseCode.UNKNOWN_MEMBER, f"transferee {_shown(request.transferee_id)} is not a member")
        if request.transfer_id and request.transfer_id not in self.members:
            return Refusal(ResponseCode.UNKNOWN_MEMBER, f"transfer_id {_shown(request.transfer_id)} is not a member")
        return _within("term", request.term, 0, MAX_TERM) if request.term else None


MAX_LOGGED_REASON = 400
"""The longest reason a refusal's log line carries (the rest is cut)."""


class RefusalLog:
    """Logs refusals at WARNING with the caller's address: the first of each kind (caller
    host, method, code) at once, then at most one line per `interval_s` counting the
    ones left out, so a hostile flood cannot flood the log.

    Args:
        self_id: the member (named in each line).
        interval_s: quiet period per kind.
    """

    def __init__(self, self_id: str, interval_s: float = 10.0) -> None:
        self.self_id = self_id
        self.interval_s = interval_s
        self.refused = 0
        self._last: dict[tuple[str, str, int], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def refused_call(self, method: str, refusal: Refusal, context: Any) -> None:
        """Count and (maybe) log one refused call."""
        peer = _peer_address(context)
        key = (peer.rsplit(":", 1)[0], method, int(refusal.code))
        now = time.monotonic()
        with self._lock:
            self.refused += 1
            last, suppressed = self._last.get(key, (float("-inf"), 0))
            if now - last < self.interval_s:
                self._last[key] = (last, suppressed + 1)
                return
            self._last[key] = (now, 0)
            if len(self._last) > 4096:  # many callers: forget the oldest kinds
                for stale in sorted(self._last, key=lambda k: self._last[k][0])[:2048]:
                    del self._last[stale]
        more = f" ({suppressed} more like it not logged)" if suppressed else ""
        reason = refusal.reason[:MAX_LOGGED_REASON] + ("..." if len(refusal.reason) > MAX_LOGGED_REASON else "")
        log.warning(
            "%s refused %s from %s: %s (%d) %s%s",
            self.self_id,
            method,
            peer,
            refusal.code.name,
            int(refusal.code),
            reason,
            more,
        )


def _peer_address(context: Any) -> str:
    try:
        peer = context.peer() if context is not None else None
    except Exception:  # a context without a peer (tests, a call that ended)
        peer = None
    return str(peer) if peer else "unknown"
