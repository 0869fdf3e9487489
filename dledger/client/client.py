"""DLedgerClient: the client side of the `dledger.v1.Ledger` gRPC service.

Finds the leader (Metadata), follows NOT_LEADER redirects using the leader hint in every
answer, and retries a write only when it provably appended nothing (see
`dledger.client.policy` for the decision table); otherwise it raises
`IndeterminateError` rather than guess. Reads (`dledger.client.reads`) are retried on
other members freely.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.client.combiner import Combiner
from dledger.client.members import Members
from dledger.client.policy import (
    Decision,
    IndeterminateError,
    rpc_code,
    rpc_decision,
    same_error,
    status_details,
    status_name,
)
from dledger.client.producer import Producer
from dledger.client.queries import (
    MAX_SHARED_QUERIES,
    MAX_SHARED_QUERY_BYTES,
    QUERIES_IN_FLIGHT,
    send_queries,
    send_shared_queries,
)
from dledger.client.reads import (
    get_entries,
    get_nearby,
    iterate_entries,
    member_metadata,
    member_status,
    read_committed,
)
from dledger.client.records import RecordMethods
from dledger.client.types import AppendResult, NodeMetadata, ReadMode, Target
from dledger.clock import Clock
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.config import DEFAULT_GROUP
from dledger.entry import MAGIC_NORMAL, Entry
from dledger.security.tls import TlsConfig
from dledger.transport.convert import PACKED, pb

DEFAULT_PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
"""The local 3-node cluster that `make run` starts."""
MIN_ATTEMPT_MS = 10
"""A write is not started with less time than this left (it would time out, unknown)."""
TRANSFER_TIMEOUT_S = 10.0
"""DLedger's client waits 10 s for a leadership transfer."""
APPENDS_IN_FLIGHT = 1
"""Shared Append requests in flight at once before concurrent appends queue. One: the
requests clock themselves (the longer one takes, the more the next one carries), and
every request saved is CPU saved in the client and the leader (bench/test_service.py,
2026-11-25: 64 threads 5.4-5.6 k/s with 1 against 3.9-4.5 k/s with 4; 16 processes x 4
threads 1.7-1.8 k/s against 0.9-1.0 k/s)."""
MAX_SHARED_BODIES = 8192
MAX_SHARED_BYTES = 4 << 20
"""What concurrent appends put into one shared request at most (a bigger `append_many`
goes alone; a member takes up to 65,536 bodies and 16 MiB per request)."""
ALONE_BYTES = 512 << 10
"""An append of this many body bytes or more is sent at once on its own: it amortises a
call's cost by itself, and sharing would only queue it behind other requests
(dledger bench, 4 threads of 1000 x 1 KiB: 131-134 k/s alone, 114-119 k/s shared)."""
GETS_IN_FLIGHT = 1
"""Shared Get requests in flight per index window before concurrent gets queue."""
GET_WINDOW = 1024
"""Concurrent gets whose first indexes fall in the same window of this many entries
share one Get (a `get` of more entries goes alone)."""


def _check_bodies(bodies: Sequence[bytes]) -> None:
    """Raise TypeError in the caller's thread when a body is not bytes (before it could
    join a request shared with other callers)."""
    for n, body in enumerate(bodies):
        if not isinstance(body, bytes):
            raise TypeError(f"body {n} is {type(body).__name__}, expected bytes")


def _append_message(group: str, bodies: Sequence[bytes], magic: int) -> Any:
    """The AppendRequest of `bodies` (TypeError: a body is not bytes)."""
    return pb.AppendRequest(group=group, bodies=bodies, magic=magic if magic != MAGIC_NORMAL else 0)


def _unknown_type(appends: bool) -> type[DLedgerError]:
    """What an unknown outcome raises: IndeterminateError for requests that append."""
    return IndeterminateError if appends else DLedgerError


def _nothing_appended(appends: bool) -> str:
    """What a refusal adds to its message when the request would have appended."""
    return " (nothing was appended)" if appends else ""


def _transport_failure(
    method: str, target: Target, exc: grpc.RpcError, appends: bool, members: Members
) -> DLedgerError:
    """A write call failed in gRPC: raise when it was refused or its outcome is unknown;
    return the error to report later when the request never left the client.

    A member that did not answer in time may be paused or cut off while the others
    elect a new leader: it is forgotten as leader (in `members`) even when this raises,
    so that the next request asks the others first."""
    status, details = status_name(exc), status_details(exc)
    if status == "DEADLINE_EXCEEDED":
        members.forget(target)
    decision = rpc_decision(status, details)
    text = f"{method} sent to {target.node_id or target.address}: {status} {details}"
    if decision is Decision.FAIL:
        raise DLedgerError(rpc_code(status), text) from None
    if decision is Decision.INDETERMINATE:
        raise _unknown_type(appends)(rpc_code(status), text) from None
    return DLedgerError(ResponseCode.NETWORK_ERROR, text + _nothing_appended(appends))


def _refusal(method: str, target: Target, answer: Any, decision: Decision, appends: bool) -> DLedgerError:
    """A write was answered with an error code: raise when it was refused for good or
    its outcome is unknown; return the error when it may be sent again (REDIRECT, RETRY)."""
    error_text = answer.message or ResponseCode.of(answer.code).name
    text = f"{method} sent to {target.node_id or target.address}: {error_text}"
    if decision is Decision.FAIL:
        raise DLedgerError(answer.code, text)
    if decision is Decision.INDETERMINATE:
        raise _unknown_type(appends)(answer.code, text)
    return DLedgerError(answer.code, text + _nothing_appended(appends))


class DLedgerClient(RecordMethods):
    """A thread-safe client of one DLedger group.

    Args:
        peers: the group in DLedger's format, `"n0-host:port;n1-host:port"`.
        group: the Raft group name.
        timeout_s: the time budget of one operation, retries and redirects included.
        clock: time source for deadlines and backoff (tests).
        tls: mutual TLS with this client certificate, key and CA
            (`dledger.security.TlsConfig`; None: plaintext). The certificate's role
            decides what the client may call (read, write, admin).
        token: a bearer token sent with every call instead of a client certificate,
            for members' client ports (`dledger server --client-address`); give
            `tls=TlsConfig.ca_only(<CA file>)` with it. Its role comes from the
            members' tokens file.
        multiplex: let concurrent `append`/`append_many`/`append_batch` calls (and
            concurrent `get`s of nearby indexes) from this process's threads share
            requests (see `dledger.client.combiner`): a call that finds the client idle
            is sent at once, calls that arrive while requests are in flight go
            together in the next one. Every caller still gets its own index or error,
            with the same retry rules. False: one RPC per call.

    Raises:
        TypeError: `peers` or `group` is not a str.
        dledger.config.ConfigError: `peers` cannot be parsed.
        dledger.security.TlsError: a TLS file cannot be read.
        ValueError: a token without TLS.
    """

    def __init__(
        self,
        peers: str = DEFAULT_PEERS,
        group: str = DEFAULT_GROUP,
        timeout_s: float = 5.0,
        *,
        clock: Clock | None = None,
        tls: TlsConfig | None = None,
        token: str | None = None,
        multiplex: bool = True,
    ) -> None:
        self.members = Members(peers, group, timeout_s, clock, tls, token)
        self._appends: Combiner[tuple[Sequence[bytes], int, int], AppendResult] | None = None
        self._gets: Combiner[tuple[int, int, str | None], list[Entry]] | None = None
        self._queries: Combiner[tuple[bytes, ReadMode, int], bytes] | None = None
        if multiplex:
            self._appends = Combiner(
                self._send_shared_appends,
                max_in_flight=APPENDS_IN_FLIGHT,
                max_items=MAX_SHARED_BODIES,
                max_size=MAX_SHARED_BYTES,
            )
            self._gets = Combiner(self._send_shared_gets, max_in_flight=GETS_IN_FLIGHT)
            self._queries = Combiner(
                partial(send_shared_queries, self.members, self._write),
                max_in_flight=QUERIES_IN_FLIGHT,
                max_items=MAX_SHARED_QUERIES,
                max_size=MAX_SHARED_QUERY_BYTES,
            )

    # -- plumbing

    def __enter__(self) -> DLedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every channel. Idempotent; later calls fail with NETWORK_ERROR."""
        self.members.close()

    @property
    def peers(self) -> dict[str, str]:
        """The members, id -> address."""
        return self.members.peers

    @property
    def group(self) -> str:
        """The Raft group name."""
        return self.members.group

    @property
    def timeout_s(self) -> float:
        """The time budget of one operation."""
        return self.members.timeout_s

    @property
    def clock(self) -> Clock:
        """The time source of deadlines and backoff."""
        return self.members.clock

    @property
    def leader(self) -> Target | None:
        """The leader last seen (None until discovered or after it failed)."""
        return self.members.leader

    @leader.setter
    def leader(self, target: Target | None) -> None:
        self.members.leader = target

    def target(self, node_id: str) -> Target:
        """The member `node_id`.

        Raises:
            DLedgerError: UNKNOWN_MEMBER when it is not in `peers`.
        """
        return self.members.target(node_id)

    def discover(self, deadline_ms: int | None = None) -> Target:
        """Ask every member who leads; remember and return it (see `Members.discover`)."""
        return self.members.discover(deadline_ms)

    # -- writes

    def _write(self, method: str, request: Any, deadline: int, appends: bool = True) -> Any:
        """Send a write to the leader: follow redirects, retry only when nothing was
        appended, and return the SUCCESS answer.

        Args:
            method: the Ledger method.
            request: its request message.
            deadline: when to give up (`members.clock` milliseconds).
            appends: False for requests that append nothing (leadership transfer):
                unknown outcomes then raise a plain DLedgerError.

        Raises:
            DLedgerError: refused (nothing was appended).
            IndeterminateError: the outcome is unknown.
        """
        return self.members.call_leader(
            method,
            request,
            deadline,
            min_attempt_ms=MIN_ATTEMPT_MS,
            out_of_time=lambda: DLedgerError(ResponseCode.TIMEOUT, "no time left to send" + _nothing_appended(appends)),
            on_rpc_error=lambda target, exc: _transport_failure(method, target, exc, appends, self.members),
            on_refusal=lambda target, answer, decision: _refusal(method, target, answer, decision, appends),
        )

    def append_batch(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> AppendResult:
        """Append `bodies` as one request: consecutive indexes, all or nothing. `magic`
        MAGIC_RECORD sends record bodies (see `append_records`).

        Raises:
            ValueError: `bodies` is empty.
            TypeError: a body is not bytes (nothing was sent).
            DLedgerError: refused; nothing was appended (NOT_LEADER after every redirect,
                LEADER_PENDING_FULL until the deadline, NETWORK_ERROR: no member reachable...).
            IndeterminateError: the outcome is unknown (timeout, connection lost after
                sending, WAIT_QUORUM_ACK_TIMEOUT, TERM_CHANGED).
        """
        if not isinstance(bodies, list | tuple):
            bodies = list(bodies)  # a generator, read once (its sizes are summed below)
        if not bodies:
            raise ValueError("nothing to append: bodies is empty")
        _check_bodies(bodies)
        deadline = self.members.deadline_ms()
        size = sum(map(len, bodies))
        if self._appends is None or size >= ALONE_BYTES:
            return self._append_request(bodies, deadline, magic)
        lane = None if magic == MAGIC_NORMAL else magic  # one request carries one magic
        return self._appends.call((bodies, deadline, magic), size=size, key=lane, wait_s=self.timeout_s)

    def _append_request(self, bodies: Sequence[bytes], deadline: int, magic: int, request: Any = None) -> AppendResult:
        """One Append request of `bodies` (errors: `append_batch`), its message built unless given."""
        if request is None:
            request = _append_message(self.group, bodies, magic)
        answer = self._write("Append", request, deadline)
        count = answer.count or len(bodies)
        if count != len(bodies):
            raise IndeterminateError(
                ResponseCode.INCONSISTENT_STATE, f"asked to append {len(bodies)} bodies, the leader reports {count}"
            )
        return AppendResult(answer.first_index, count, answer.term, answer.leader_id or "")

    def _append_alone(self, bodies: Sequence[bytes], deadline: int, magic: int) -> AppendResult | BaseException:
        """`_append_request`, its error returned rather than raised (any error: a call
        split off a shared request gets its own outcome, whatever the others' were)."""
        try:
            return self._append_request(bodies, deadline, magic)
        except Exception as exc:
            return exc

    def _send_shared_appends(self, calls: list[tuple[Sequence[bytes], int, int]]) -> list[AppendResult | BaseException]:
        """The appends of concurrent calls (of one magic: the combiner's lane) as one
        request (all or nothing, like any request): each call gets its own slice of the
        indexes, or its copy of the error, within the earliest caller's deadline. When
        nothing was sent (unbuildable) or appended (UNEXPECTED_ARGUMENT: perhaps for one
        caller's bodies), each call is sent alone; after running out of the earliest
        caller's time, each call whose own deadline has not passed."""
        magic = calls[0][2]
        bodies = calls[0][0] if len(calls) == 1 else [body for call_bodies, _, _ in calls for body in call_bodies]
        request, earliest = None, min(deadline for _, deadline, _ in calls)
        try:
            request = _append_message(self.group, bodies, magic)
            shared = self._append_request(bodies, earliest, magic, request)
        except Exception as exc:
            refused = type(exc) is DLedgerError and exc.code == ResponseCode.UNEXPECTED_ARGUMENT
            if len(calls) > 1 and (request is None or refused):
                return [self._append_alone(call_bodies, deadline, magic) for call_bodies, deadline, _ in calls]
            if not isinstance(exc, DLedgerError):
                raise  # the combiner hands it to every caller
            now = self.clock.now_ms()  # nothing appended, out of the earliest caller's time:
            if len(calls) > 1 and type(exc) is DLedgerError and now >= earliest:  # the others try alone
                return [self._append_alone(b, d, magic) if d > now else same_error(exc) for b, d, _ in calls]
            return [exc, *(same_error(exc) for _ in calls[1:])]
        results: list[AppendResult | BaseException] = []
        first = shared.first_index
        for call_bodies, _, _ in calls:
            results.append(AppendResult(first, len(call_bodies), shared.term, shared.leader_id))
            first += len(call_bodies)
        return results

    def append(self, body: bytes) -> int:
        """Append one body; returns its index once committed (errors: `append_batch`)."""
        return self.append_batch((body,)).first_index

    def append_many(self, bodies: Sequence[bytes]) -> int:
        """Append `bodies` as one request, once committed.

        Returns:
            The index of the first body; the batch occupies first..first+len(bodies)-1
            (as the store's `append_many`). `append_batch` also gives the term and leader.

        Raises:
            See `append_batch`.
        """
        return self.append_batch(bodies).first_index

    def leadership_transfer(
        self, transferee_id: str, term: int | None = None, *, leader: str | None = None, timeout_s: float | None = None
    ) -> int:
        """Ask the leader to hand leadership to `transferee_id`; returns the new term.

        Args:
            transferee_id: the member that should lead.
            term: the leader's term (DLedger's `--term`; optional): else INCONSISTENT_TERM.
            leader: the leader's id (DLedger's `--leader`; optional): else INCONSISTENT_LEADER.
            timeout_s: the time budget of the whole operation (default: the client's
                timeout, at least TRANSFER_TIMEOUT_S).

        Raises:
            DLedgerError: UNKNOWN_MEMBER, FALL_BEHIND_TOO_MUCH, TAKE_LEADERSHIP_FAILED,
                LEADER_TRANSFERRING, NOT_LEADER..., or TIMEOUT/NETWORK_ERROR.
        """
        self.target(transferee_id)
        if timeout_s is None:
            timeout_s = max(self.timeout_s, TRANSFER_TIMEOUT_S)
        request = pb.LeadershipTransferRequest(group=self.group, transferee_id=transferee_id, term=term or 0)
        if leader is not None:
            self.leader = self.target(leader)
            request.transfer_id = leader
        answer = self._write("LeadershipTransfer", request, self.members.deadline_ms(timeout_s), appends=False)
        self.leader = self.target(transferee_id)
        return int(answer.term)

    def producer(self, **options: Any) -> Producer:
        """A streaming `Producer` on this client's members (options: see `Producer`); an
        idempotent one without a `producer_id` registers for one (`init_producer`)."""
        if options.get("idempotent") and options.get("producer_id") is None:
            options["producer_id"] = self.init_producer()
        return Producer(self.members, **options)

    # -- reads

    def get(self, index: int, count: int = 1, *, node_id: str | None = None) -> list[Entry]:
        """Committed entries from `index`, at most `count` (fewer when the committed
        index is reached). Asks the leader (or `node_id`).

        Raises:
            DLedgerError: INDEX_OUT_OF_RANGE when `index` is not committed,
                INDEX_LESS_THAN_LOCAL_BEGIN when it was deleted, NETWORK_ERROR/TIMEOUT.
        """
        if count < 1:
            raise ValueError("count must be >= 1")
        if self._gets is None or count > GET_WINDOW:
            return get_entries(self.members, index, count, node_id)
        return self._gets.call((index, count, node_id), key=(node_id, index // GET_WINDOW), wait_s=self.timeout_s)

    def _send_shared_gets(self, calls: list[tuple[int, int, str | None]]) -> Sequence[list[Entry] | BaseException]:
        """Concurrent gets of one window (asking the same member) as one Get over their
        union."""
        return get_nearby(self.members, [(index, count) for index, count, _ in calls], calls[0][2])

    def query(self, request: bytes, mode: ReadMode = ReadMode.READ_INDEX, *, timeout: float | None = None) -> bytes:
        """Read the group's state machine: its answer to `request` (see
        `dledger.client.queries` and docs/OPERATIONS.md, "Linearizable reads").

        Args:
            request: handed to the machine's `query` (RAFT_LOG: appended as an entry).
            mode: READ_INDEX (default) and LEASE are linearizable, UNSAFE may be stale,
                RAFT_LOG goes through the log (a write).
            timeout: seconds for the call, retries included (default: the client's).

        Raises:
            ValueError: `mode` is not a ReadMode.
            DLedgerError: UNSUPPORTED (no queryable state machine), UNEXPECTED_ARGUMENT,
                TIMEOUT / NETWORK_ERROR (no member answered in time)...
            IndeterminateError: RAFT_LOG: the outcome is unknown.
        """
        mode = ReadMode(mode)
        deadline = self.members.deadline_ms(timeout)
        if self._queries is None:
            return send_queries(self.members, self._write, [request], mode, deadline)[0]
        wait_s = timeout if timeout is not None else self.timeout_s
        return self._queries.call((request, mode, deadline), size=len(request), key=mode, wait_s=wait_s)

    def metadata(self, node_id: str | None = None) -> NodeMetadata:
        """What `node_id` (default: the leader, else the first member that answers)
        knows of the group.

        Raises:
            DLedgerError: no member answered (NETWORK_ERROR/TIMEOUT) or it refused.
        """
        return member_metadata(self.members, node_id)

    def status(self) -> list[NodeMetadata]:
        """Every member's own view (asked in parallel), in `peers` order; members that
        do not answer within the timeout come back with `reachable=False`."""
        return member_status(self.members)

    def read_committed(
        self,
        from_index: int = 0,
        to_index: int | None = None,
        max_batch_bytes: int = 1024 * 1024,
        follow: bool = False,
        node_id: str | None = None,
        max_batch_count: int = 0,
        *,
        layout: int = PACKED,
        retry: bool = True,
    ) -> Iterator[ColumnBatch]:
        """Committed entries [from_index, to_index) as column-wise batches (a server
        stream). Without `follow` it ends at the serving member's committed index; with
        `follow` it waits for new commits until `to_index` (or forever). A broken stream
        resumes on another member (or the same `node_id`) from the next index.

        Args:
            layout: the wire layout of the batches: `dledger.transport.convert.PACKED`
                (varints, smallest), or `FIXED_WIDTH`, which a reader maps into numpy and
                Arrow without decoding one value at a time (what Spark tasks ask for).
            retry: False to make one pass over the members (only `node_id` when given)
                and raise at the first failure instead of retrying for `timeout_s` (a
                Spark task moves on to the next member itself).

        Raises:
            DLedgerError: the member refused (INDEX_LESS_THAN_LOCAL_BEGIN...), sent a
                malformed batch (INCONSISTENT_STATE), or no member could be reached for
                `timeout_s` (with `retry=False`: the pass failed).
        """
        return read_committed(
            self.members, from_index, to_index, max_batch_bytes, follow, node_id, max_batch_count, layout, retry
        )

    def iterate(
        self, from_index: int = 0, to_index: int | None = None, follow: bool = False, *, node_id: str | None = None
    ) -> Iterator[Entry]:
        """Committed entries [from_index, to_index) one by one (full entries: magic and
        body CRC included). For bulk reads `read_committed` is much faster."""
        return iterate_entries(self.members, from_index, to_index, follow, node_id)
