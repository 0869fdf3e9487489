"""Value types of `dledger.client`: targets, append results, member metadata, stubs, and
the futures and counters of `Producer`."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dledger.codes import DLedgerError
from dledger.codes import ReadMode as ReadMode  # the client's read modes, defined with the codes (a leaf)
from dledger.transport.convert import pb

_SERVICE = "/dledger.v1.Ledger/"


class Target(NamedTuple):
    """A member to call: its id (may be "" when only an address is known) and address."""

    node_id: str
    address: str


@dataclass(frozen=True)
class AppendResult:
    """Where an accepted request's bodies went: indexes first_index .. first_index+count-1.

    For an idempotent producer's request (`ProducerStamp`), `runs` are the (first index,
    count) runs holding its records in sequence order (a retry's records may sit in
    several), `duplicate` says every record was in the log already (nothing appended),
    and `first_index` is the first run's (-1, with no runs, for a duplicate older than
    the requests the leader keeps: its indexes are no longer known)."""

    first_index: int
    count: int
    term: int
    leader_id: str
    duplicate: bool = False
    runs: tuple[tuple[int, int], ...] = ()

    @property
    def last_index(self) -> int:
        """Index of the request's last body: the end of the last run for a stamped
        request (its records may sit in several runs; -1 with no runs, as `first_index`)."""
        if self.runs:
            first, count = self.runs[-1]
            return first + count - 1
        if self.first_index < 0:
            return -1
        return self.first_index + self.count - 1


@dataclass(frozen=True)
class ProducerStamp:
    """How an idempotent producer numbers one request (Kafka's producer id, epoch and
    base sequence): its records are sequence numbers first_seq, first_seq + 1, ...

    Attributes:
        producer_id: 0 .. 2^63 - 1 (`derive_producer_id` makes a stable one).
        epoch: 0 .. 2^63 - 1; a higher epoch starts the producer again at sequence 0
            and fences requests of lower ones (PRODUCER_FENCED).
        first_seq: the first record's sequence number, 0 .. 2^63 - 1.
    """

    producer_id: int
    epoch: int
    first_seq: int

    def __post_init__(self) -> None:
        for name in ("producer_id", "epoch", "first_seq"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRODUCER_FIELD:
                raise ValueError(f"{name} must be an int in 0..{MAX_PRODUCER_FIELD}, not {value!r}")


MAX_PRODUCER_FIELD = 2**63 - 1
DERIVED_PRODUCER_IDS = 2**62
"""Ids `derive_producer_id` makes are at least this; smaller ones are for a producer that
picks its own at random (`DLedgerClient.producer(idempotent=True)`)."""


def derive_producer_id(*parts: str | int) -> int:
    """A stable producer id in [2^62, 2^63 - 1] from `parts` (BLAKE2b of their text):
    the same parts give the same id in every process, so a retried task that derives
    its id from its job, batch and partition re-sends as the same producer."""
    if not parts:
        raise ValueError("derive_producer_id needs at least one part")
    text = "\x1f".join(f"{type(p).__name__}:{p}" for p in parts).encode()
    digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return DERIVED_PRODUCER_IDS + digest % DERIVED_PRODUCER_IDS


@dataclass(frozen=True)
class MemberInfo:
    """One member as the answering member sees it (match_index only from a leader;
    snapshot_index, the newest snapshot's last index, only for the answering member)."""

    node_id: str
    address: str
    role: str
    match_index: int
    snapshot_index: int = -1


@dataclass(frozen=True)
class NodeMetadata:
    """What one member reported (Metadata), or why it could not be asked.

    Attributes:
        node_id, address: the member asked.
        reachable: False when the member did not answer; `error` says why.
        role: LEADER / FOLLOWER / CANDIDATE as the member sees itself.
        term, leader_id, leader_address: its view of the group.
        begin_index, end_index, end_term, committed_index, applied_index: its log.
        peers: {id: address} of the group; members: per-member role and match index.
        vote_hold: why the member holds its vote ("" when it does not).
        store_health: why the member's store takes no write ("" when it does).
        machine_health: why the member's state machine stopped ("" while it applies).
    """

    node_id: str
    address: str
    reachable: bool = True
    error: str | None = None
    group: str = ""
    role: str = "UNKNOWN"
    term: int = -1
    leader_id: str | None = None
    leader_address: str = ""
    begin_index: int = -1
    end_index: int = -1
    end_term: int = -1
    committed_index: int = -1
    applied_index: int = -1
    vote_hold: str = ""
    store_health: str = ""
    machine_health: str = ""
    peers: dict[str, str] = field(default_factory=dict)
    members: tuple[MemberInfo, ...] = ()

    @property
    def snapshot_index(self) -> int:
        """The member's newest snapshot's last index (-1: none, or not told)."""
        own = [m.snapshot_index for m in self.members if m.node_id == self.node_id]
        return own[0] if own else -1


class LedgerStubs:
    """The `dledger.v1.Ledger` methods on one channel (callables as a generated stub has)."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.Append = channel.unary_unary(
            _SERVICE + "Append", pb.AppendRequest.SerializeToString, pb.AppendResponse.FromString
        )
        self.AppendStream = channel.stream_stream(
            _SERVICE + "AppendStream", pb.AppendRequest.SerializeToString, pb.AppendResponse.FromString
        )
        self.Get = channel.unary_unary(_SERVICE + "Get", pb.GetRequest.SerializeToString, pb.GetResponse.FromString)
        self.ReadCommitted = channel.unary_stream(
            _SERVICE + "ReadCommitted", pb.ReadCommittedRequest.SerializeToString, pb.ReadCommittedResponse.FromString
        )
        self.Metadata = channel.unary_unary(
            _SERVICE + "Metadata", pb.MetadataRequest.SerializeToString, pb.MetadataResponse.FromString
        )
        self.LeadershipTransfer = channel.unary_unary(
            _SERVICE + "LeadershipTransfer",
            pb.LeadershipTransferRequest.SerializeToString,
            pb.LeadershipTransferResponse.FromString,
        )
        self.Query = channel.unary_unary(
            _SERVICE + "Query", pb.QueryRequest.SerializeToString, pb.QueryResponse.FromString
        )
        self.InitProducer = channel.unary_unary(
            _SERVICE + "InitProducer", pb.InitProducerRequest.SerializeToString, pb.InitProducerResponse.FromString
        )


def metadata_from_pb(target: Target, message: Any) -> NodeMetadata:
    """A `NodeMetadata` from a MetadataResponse answered by `target`."""
    members = tuple(
        MemberInfo(m.id, m.address, m.role, m.match_index, m.snapshot_index if m.HasField("snapshot_index") else -1)
        for m in message.members
    )
    return NodeMetadata(
        node_id=message.self_id or target.node_id,
        address=target.address,
        group=message.group,
        role=message.role or "UNKNOWN",
        term=message.term,
        leader_id=message.leader_id if message.HasField("leader_id") and message.leader_id else None,
        leader_address=message.leader_address,
        begin_index=message.begin_index,
        end_index=message.end_index,
        end_term=message.end_term,
        committed_index=message.committed_index,
        applied_index=message.applied_index,
        vote_hold=message.vote_hold,
        store_health=message.store_health,
        machine_health=message.machine_health,
        peers=dict(message.peers),
        members=members,
    )


@dataclass
class ProducerStats:
    """Bodies of a producer by outcome so far (updated as batches are answered).

    Attributes:
        acked: committed bodies; batches: committed batches.
        failed: bodies refused (not appended); unknown: bodies whose outcome is unknown.
    """

    acked: int = 0
    batches: int = 0
    failed: int = 0
    unknown: int = 0


class Batch:
    """Bodies sent as one AppendRequest, and their common outcome."""

    __slots__ = (
        "bodies",
        "callbacks",
        "created_ms",
        "deadline_ms",
        "done",
        "error",
        "first_index",
        "first_seq",
        "last_refusal",
        "maybe_appended",
        "runs",
        "size",
    )

    def __init__(self, now_ms: int, deadline_ms: int) -> None:
        self.bodies: list[bytes] = []
        self.size = 0
        self.created_ms = now_ms
        self.deadline_ms = deadline_ms
        self.done = threading.Event()
        self.first_index = -1
        self.error: BaseException | None = None
        self.callbacks: list[tuple[Callable[[SendFuture], None], SendFuture]] | None = None
        self.last_refusal: DLedgerError | None = None
        self.first_seq = -1
        """An idempotent producer's sequence number of the first body (-1: none)."""
        self.maybe_appended = False
        """An idempotent batch sent with an unknown outcome: it may be in the log."""
        self.runs: tuple[tuple[int, int], ...] | None = None
        """An idempotent batch's (first index, count) runs (None: one run at first_index)."""


class SendFuture:
    """The future index of one body sent with `Producer.send`.

    It has the result/exception/done/add_done_callback methods of
    `concurrent.futures.Future` but is much lighter (bodies of a batch share one
    event); `as_future()` gives a real `Future` for `concurrent.futures.wait`.
    """

    __slots__ = ("_batch", "_offset")

    def __init__(self, batch: Batch, offset: int) -> None:
        self._batch = batch
        self._offset = offset

    def done(self) -> bool:
        """True once the batch was answered (or failed)."""
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> int:
        """The body's index.

        Raises:
            TimeoutError: no answer within `timeout` seconds.
            DLedgerError: refused (not appended); IndeterminateError: outcome unknown.
        """
        if not self._batch.done.wait(timeout):
            raise TimeoutError(f"no answer within {timeout} s")
        batch = self._batch
        if batch.error is not None:
            raise batch.error
        if batch.runs is not None:  # an idempotent batch: -1 when its indexes are no longer known
            offset = self._offset
            for first, count in batch.runs:
                if offset < count:
                    return first + offset
                offset -= count
            return -1
        return batch.first_index + self._offset

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error the body failed with, or None once it succeeded."""
        if not self._batch.done.wait(timeout):
            raise TimeoutError(f"no answer within {timeout} s")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[SendFuture], None]) -> None:
        """Call `fn(self)` when done (at once if it already is)."""
        batch = self._batch
        with CALLBACK_LOCK:
            if not batch.done.is_set():
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((fn, self))
                return
        fn(self)

    def as_future(self) -> Future[int]:
        """A `concurrent.futures.Future` completed with the same outcome."""
        future: Future[int] = Future()

        def copy(done: SendFuture) -> None:
            error = done.exception()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result())

        self.add_done_callback(copy)
        return future


CALLBACK_LOCK = threading.Lock()


def finish_batch(batch: Batch, first_index: int = -1, error: BaseException | None = None) -> None:
    batch.first_index = first_index
    batch.error = error
    with CALLBACK_LOCK:
        batch.done.set()
        callbacks, batch.callbacks = batch.callbacks, None
    for fn, future in callbacks or ():
        fn(future)
