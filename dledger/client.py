"""DLedgerClient: the client side of the `dledger.v1.Ledger` gRPC service.

Finds the leader (Metadata), follows NOT_LEADER redirects using the leader hint in every
answer, and retries a write only when it provably appended nothing (see
`dledger.client_policy` for the decision table); otherwise it raises
`IndeterminateError` rather than guess. Reads are retried on other members freely.

Example::

    from dledger.client import DLedgerClient

    with DLedgerClient("n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913") as client:
        last = client.append_many([b"a", b"b"])      # first index = last - 2 + 1
        assert [e.body for e in client.get(last - 1, count=2)] == [b"a", b"b"]
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.client_policy import (
    Backoff,
    Decision,
    IndeterminateError,
    code_decision,
    read_decision,
    rpc_code,
    rpc_decision,
    status_details,
    status_name,
)
from dledger.client_producer import Producer
from dledger.client_types import (
    AppendResult,
    LedgerStubs,
    MemberInfo,
    NodeMetadata,
    ProducerStats,
    SendFuture,
    Target,
    metadata_from_pb,
)
from dledger.clock import Clock, MonotonicClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.config import parse_peers
from dledger.entry import Entry
from dledger.transport.convert import entry_from_pb, pb
from dledger.transport.grpc_client import open_channel

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_PEERS",
    "AppendResult",
    "DLedgerClient",
    "IndeterminateError",
    "MemberInfo",
    "NodeMetadata",
    "Producer",
    "ProducerStats",
    "SendFuture",
    "Target",
]

DEFAULT_PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
"""The local 3-node cluster that `make run` starts."""
DEFAULT_GROUP = "default"
MIN_ATTEMPT_MS = 10
"""A write is not started with less time than this left (it would time out, unknown)."""
TRANSFER_TIMEOUT_S = 10.0
"""DLedger's client waits 10 s for a leadership transfer."""


def _probe_done(answers: queue.Queue[tuple[Target, Any, BaseException | None]], target: Target, call: Any) -> None:
    """A Metadata probe finished: queue (target, call, error); cancelled probes are dropped."""
    if not call.cancelled():
        answers.put((target, call, call.exception()))


class DLedgerClient:
    """A thread-safe client of one DLedger group.

    Args:
        peers: the group in DLedger's format, `"n0-host:port;n1-host:port"`.
        group: the Raft group name.
        timeout_s: the time budget of one operation, retries and redirects included.
        clock: time source for deadlines and backoff (tests).

    Raises:
        dledger.config.ConfigError: `peers` cannot be parsed.
    """

    def __init__(
        self,
        peers: str = DEFAULT_PEERS,
        group: str = DEFAULT_GROUP,
        timeout_s: float = 5.0,
        *,
        clock: Clock | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.peers = parse_peers(peers)
        self.group = group
        self.timeout_s = timeout_s
        self.clock: Clock = clock or MonotonicClock()
        self._lock = threading.Lock()
        self._stubs: dict[str, LedgerStubs] = {}
        self._leader: Target | None = None
        self._closed = False

    # -- plumbing

    def __enter__(self) -> DLedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every channel. Idempotent; later calls fail with NETWORK_ERROR."""
        with self._lock:
            self._closed = True
            stubs, self._stubs = list(self._stubs.values()), {}
        for stub in stubs:
            stub.channel.close()

    def stubs(self, address: str) -> LedgerStubs:
        """The (cached) Ledger stubs of `address`."""
        with self._lock:
            if self._closed:
                raise DLedgerError(ResponseCode.NETWORK_ERROR, "the client is closed")
            stub = self._stubs.get(address)
            if stub is None:
                stub = self._stubs[address] = LedgerStubs(open_channel(address))
            return stub

    @property
    def leader(self) -> Target | None:
        """The leader last seen (None until discovered or after it failed)."""
        return self._leader

    @leader.setter
    def leader(self, target: Target | None) -> None:
        self._leader = target

    def target(self, node_id: str) -> Target:
        """The member `node_id`.

        Raises:
            DLedgerError: UNKNOWN_MEMBER when it is not in `peers`.
        """
        address = self.peers.get(node_id)
        if address is None:
            raise DLedgerError(ResponseCode.UNKNOWN_MEMBER, f"{node_id!r} is not one of {', '.join(self.peers)}")
        return Target(node_id, address)

    def _deadline_ms(self, timeout_s: float | None = None) -> int:
        return self.clock.now_ms() + int((timeout_s or self.timeout_s) * 1000)

    def leader_hint(self, message: Any, current: Target) -> Target | None:
        """The leader named in an answer, unless it is `current` or unknown."""
        if not message.HasField("leader_id") or not message.leader_id:
            return None
        leader_id = message.leader_id
        address = self.peers.get(leader_id) or message.leader_address
        if not address or (leader_id == current.node_id and address == current.address):
            return None
        return Target(leader_id, address)

    # -- leader discovery

    def discover(self, deadline_ms: int | None = None) -> Target:
        """Ask every member (Metadata, in parallel) who leads; remember and return it.

        A member that reports itself LEADER wins; otherwise the leader named in the
        answer with the highest term. Retries with backoff until the deadline.

        Raises:
            DLedgerError: NETWORK_ERROR when no member answered, NOT_LEADER when they
                answered but none knows a leader (an election is running).
        """
        deadline = deadline_ms if deadline_ms is not None else self._deadline_ms()
        backoff = Backoff(self.clock, first_ms=20, max_ms=300)
        while True:
            found, answered, errors = self._probe(max(0.05, (deadline - self.clock.now_ms()) / 1000))
            if found is not None:
                self._leader = found
                return found
            if not backoff.sleep(deadline):
                if answered:
                    raise DLedgerError(ResponseCode.NOT_LEADER, f"no leader known to {', '.join(answered)}")
                raise DLedgerError(ResponseCode.NETWORK_ERROR, "no member answered: " + "; ".join(errors))

    def _probe(self, timeout_s: float) -> tuple[Target | None, list[str], list[str]]:
        """One Metadata round over all members: (leader or None, who answered, errors)."""
        answers: queue.Queue[tuple[Target, Any, BaseException | None]] = queue.Queue()
        request = pb.MetadataRequest(group=self.group)
        calls = []
        for node_id, address in self.peers.items():
            target = Target(node_id, address)
            call = self.stubs(address).Metadata.future(request, timeout=timeout_s)
            call.add_done_callback(partial(_probe_done, answers, target))
            calls.append(call)
        best: tuple[int, Target] | None = None
        answered: list[str] = []
        errors: list[str] = []
        try:
            for _ in calls:
                target, call, error = answers.get()
                if error is not None:
                    errors.append(f"{target.node_id} ({target.address}): {status_name(error)}")
                    continue
                message = call.result()
                if message.code != ResponseCode.SUCCESS:
                    errors.append(f"{target.node_id}: {ResponseCode.of(message.code).name}")
                    continue
                answered.append(target.node_id)
                if message.role == "LEADER":
                    return Target(message.self_id or target.node_id, target.address), answered, errors
                hint = self.leader_hint(message, Target("", ""))
                if hint is not None and (best is None or message.term > best[0]):
                    best = (message.term, hint)
        finally:
            for call in calls:
                call.cancel()
        return (best[1] if best else None), answered, errors

    # -- writes

    def _write(self, method: str, request: Any, timeout_s: float | None = None, appends: bool = True) -> Any:
        """Send a write to the leader: follow redirects, retry only when nothing was
        appended, and return the SUCCESS answer.

        Args:
            method: the Ledger method.
            request: its request message.
            timeout_s: the time budget (default: the client's).
            appends: False for requests that append nothing (leadership transfer):
                unknown outcomes then raise a plain DLedgerError.

        Raises:
            DLedgerError: refused (nothing was appended).
            IndeterminateError: the outcome is unknown.
        """
        unknown = IndeterminateError if appends else DLedgerError
        nothing = " (nothing was appended)" if appends else ""
        deadline = self._deadline_ms(timeout_s)
        backoff: Backoff | None = None  # made on the first retry (it seeds a Random)
        last: DLedgerError | None = None
        target = self._leader
        hops = 0
        while True:
            if target is None:
                try:
                    target = self.discover(deadline)
                except DLedgerError as exc:
                    raise (last or exc) from None
            left_ms = deadline - self.clock.now_ms()
            if left_ms < MIN_ATTEMPT_MS:
                raise last or DLedgerError(ResponseCode.TIMEOUT, "no time left to send" + nothing)
            try:
                answer = getattr(self.stubs(target.address), method)(request, timeout=left_ms / 1000)
            except grpc.RpcError as exc:
                status, details = status_name(exc), status_details(exc)
                decision = rpc_decision(status, details)
                text = f"{method} to {target.node_id or target.address}: {status} {details}"
                if decision is Decision.FAIL:
                    raise DLedgerError(rpc_code(status), text) from None
                if decision is Decision.INDETERMINATE:
                    raise unknown(rpc_code(status), text) from None
                # never sent: the member is down; look for the leader again
                last = DLedgerError(ResponseCode.NETWORK_ERROR, text + nothing)
                if self._leader == target:
                    self._leader = None
                target = None
                backoff = backoff or Backoff(self.clock)
                if not backoff.sleep(deadline):
                    raise last from None
                continue
            decision = code_decision(answer.code)
            if decision is Decision.SUCCESS:
                self._leader = target
                return answer
            error_text = answer.message or ResponseCode.of(answer.code).name
            text = f"{method} to {target.node_id or target.address}: {error_text}"
            if decision is Decision.FAIL:
                raise DLedgerError(answer.code, text)
            if decision is Decision.INDETERMINATE:
                raise unknown(answer.code, text)
            last = DLedgerError(answer.code, text + nothing)
            if decision is Decision.REDIRECT:
                hint = self.leader_hint(answer, target)
                self._leader = hint
                hops += 1
                if hint is not None and hops <= len(self.peers):
                    target = hint
                    continue
                hops = 0
                target = hint
            backoff = backoff or Backoff(self.clock)
            if not backoff.sleep(deadline):
                raise last

    def append_batch(self, bodies: Sequence[bytes]) -> AppendResult:
        """Append `bodies` as one request: consecutive indexes, all or nothing.

        Raises:
            ValueError: `bodies` is empty.
            DLedgerError: refused; nothing was appended (NOT_LEADER after every redirect,
                LEADER_PENDING_FULL until the deadline, NETWORK_ERROR: no member reachable...).
            IndeterminateError: the outcome is unknown (timeout, connection lost after
                sending, WAIT_QUORUM_ACK_TIMEOUT, TERM_CHANGED).
        """
        if not bodies:
            raise ValueError("nothing to append: bodies is empty")
        request = pb.AppendRequest(group=self.group, bodies=bodies)
        answer = self._write("Append", request)
        count = answer.count or len(bodies)
        if count != len(bodies):
            raise IndeterminateError(
                ResponseCode.INCONSISTENT_STATE, f"asked to append {len(bodies)} bodies, the leader reports {count}"
            )
        return AppendResult(answer.first_index, count, answer.term, answer.leader_id or "")

    def append(self, body: bytes) -> int:
        """Append one body; returns its index once committed (errors: `append_batch`)."""
        return self.append_batch((body,)).first_index

    def append_many(self, bodies: Sequence[bytes]) -> int:
        """Append `bodies` as one request; returns the LAST index (the first is
        `last - len(bodies) + 1`). Errors: see `append_batch`."""
        return self.append_batch(bodies).last_index

    def leadership_transfer(self, transferee_id: str, term: int | None = None) -> int:
        """Ask the leader to hand leadership to `transferee_id`; returns the new term.

        Args:
            transferee_id: the member that should lead.
            term: the leader's current term (DLedger's `--term`; optional).

        Raises:
            DLedgerError: UNKNOWN_MEMBER, FALL_BEHIND_TOO_MUCH, TAKE_LEADERSHIP_FAILED,
                LEADER_TRANSFERRING, NOT_LEADER..., or TIMEOUT/NETWORK_ERROR.
        """
        self.target(transferee_id)
        timeout_s = max(self.timeout_s, TRANSFER_TIMEOUT_S)
        request = pb.LeadershipTransferRequest(group=self.group, transferee_id=transferee_id)
        leader = self._leader
        if leader is not None:
            request.transfer_id = leader.node_id
        if term is not None:
            request.term = term
        answer = self._write("LeadershipTransfer", request, timeout_s, appends=False)
        self._leader = self.target(transferee_id)
        return int(answer.term)

    def producer(self, **options: Any) -> Producer:
        """A streaming `Producer` on this client (options: see `Producer`)."""
        return Producer(self, **options)

    # -- reads

    def read_targets(self, node_id: str | None) -> list[Target]:
        """Whom a read asks, in order: `node_id` only, or the leader then the others."""
        if node_id is not None:
            return [self.target(node_id)]
        leader = self._leader
        if leader is None:
            try:
                leader = self.discover(self._deadline_ms(min(self.timeout_s, 1.0)))
            except DLedgerError:
                leader = None
        rest = [Target(n, a) for n, a in self.peers.items() if leader is None or a != leader.address]
        return ([leader] if leader is not None else []) + rest

    def _read(self, method: str, request: Any, node_id: str | None) -> Any:
        """A unary read: the leader first (fresh data), then the others; transport
        failures move on to the next member until the deadline."""
        deadline = self._deadline_ms()
        backoff = Backoff(self.clock, first_ms=20, max_ms=300)
        errors: list[str] = []
        status = "DEADLINE_EXCEEDED"
        while True:
            for target in self.read_targets(node_id):
                left_ms = deadline - self.clock.now_ms()
                if left_ms <= 0:
                    break
                try:
                    return getattr(self.stubs(target.address), method)(request, timeout=left_ms / 1000)
                except grpc.RpcError as exc:
                    status = status_name(exc)
                    errors.append(f"{target.node_id}: {status} {status_details(exc)}")
                    if read_decision(status) is Decision.FAIL:
                        raise DLedgerError(rpc_code(status), f"{method}: {errors[-1]}") from None
                    if self._leader == target:
                        self._leader = None
            if not backoff.sleep(deadline):
                raise DLedgerError(rpc_code(status), f"{method} failed: " + ("; ".join(errors[-3:]) or "timed out"))

    def get(self, index: int, count: int = 1, *, node_id: str | None = None) -> list[Entry]:
        """Committed entries from `index`, at most `count` (fewer when the committed
        index is reached). Asks the leader (or `node_id`).

        Raises:
            DLedgerError: INDEX_OUT_OF_RANGE when `index` is not committed,
                INDEX_LESS_THAN_LOCAL_BEGIN when it was deleted, NETWORK_ERROR/TIMEOUT.
        """
        if count < 1:
            raise ValueError("count must be >= 1")
        out: list[Entry] = []
        while len(out) < count:
            want = min(count - len(out), 2**31 - 1)
            request = pb.GetRequest(group=self.group, index=index + len(out), count=want)
            answer = self._read("Get", request, node_id)
            if answer.code != ResponseCode.SUCCESS:
                if out and answer.code == ResponseCode.INDEX_OUT_OF_RANGE:
                    break
                raise DLedgerError(answer.code, answer.message or f"get {request.index}")
            out.extend(entry_from_pb(e) for e in answer.entries)
            if not answer.entries or out[-1].index >= answer.committed_index:
                break
        return out

    def metadata(self, node_id: str | None = None) -> NodeMetadata:
        """What `node_id` (default: the leader, else the first member that answers)
        knows of the group.

        Raises:
            DLedgerError: no member answered (NETWORK_ERROR/TIMEOUT) or it refused.
        """
        answer = self._read("Metadata", pb.MetadataRequest(group=self.group), node_id)
        if answer.code != ResponseCode.SUCCESS:
            raise DLedgerError(answer.code, answer.message or "metadata")
        address = self.peers.get(answer.self_id, "")
        return metadata_from_pb(Target(answer.self_id, address), answer)

    def status(self) -> list[NodeMetadata]:
        """Every member's own view (asked in parallel), in `peers` order; members that
        do not answer within the timeout come back with `reachable=False`."""
        request = pb.MetadataRequest(group=self.group)
        calls = [
            (Target(n, a), self.stubs(a).Metadata.future(request, timeout=self.timeout_s))
            for n, a in self.peers.items()
        ]
        out: list[NodeMetadata] = []
        for target, call in calls:
            try:
                answer = call.result()
            except grpc.RpcError as exc:
                error = f"{status_name(exc)}: {status_details(exc)}"
                out.append(NodeMetadata(target.node_id, target.address, reachable=False, error=error))
                continue
            if answer.code != ResponseCode.SUCCESS:
                error = f"{ResponseCode.of(answer.code).name}: {answer.message}"
                out.append(NodeMetadata(target.node_id, target.address, reachable=True, error=error))
                continue
            out.append(metadata_from_pb(target, answer))
            if answer.role == "LEADER":
                self._leader = target
        return out

    def read_committed(
        self,
        from_index: int = 0,
        to_index: int | None = None,
        max_batch_bytes: int = 1024 * 1024,
        follow: bool = False,
        node_id: str | None = None,
        max_batch_count: int = 0,
    ) -> Iterator[ColumnBatch]:
        """Committed entries [from_index, to_index) as column-wise batches (a server
        stream). Without `follow` it ends at the serving member's committed index; with
        `follow` it waits for new commits until `to_index` (or forever). A broken stream
        resumes on another member (or the same `node_id`) from the next index.

        Raises:
            DLedgerError: the member refused (INDEX_LESS_THAN_LOCAL_BEGIN...), or no
                member could be reached for `timeout_s`.
        """
        from dledger.client_reads import read_committed

        return read_committed(self, from_index, to_index, max_batch_bytes, follow, node_id, max_batch_count)

    def iterate(
        self, from_index: int = 0, to_index: int | None = None, follow: bool = False, *, node_id: str | None = None
    ) -> Iterator[Entry]:
        """Committed entries [from_index, to_index) one by one (full entries: magic and
        body CRC included). For bulk reads `read_committed` is much faster."""
        from dledger.client_reads import iterate

        return iterate(self, from_index, to_index, follow, node_id)
