"""Peer and client protocol messages (DLedger's RequestOrResponse family)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import TypedDict

from dledger.codes import ResponseCode

MAX_TERM = 1 << 62
"""The highest term a member accepts, stores or starts. A real group never gets near it
(a new term each millisecond takes 146 million years), and the headroom keeps `term + 1`
far from int64's edge: a request or a `currterm` file above it is refused, never stored."""

MAX_INDEX = 1 << 62
"""The highest log index a request may name (int64 with the same headroom)."""


class VoteResult(IntEnum):
    """`VoteResponse.RESULT`, in DLedger's ordinal order."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10
    REJECT_TAKING_LEADERSHIP = 11
    REJECT_HOLDING_AFTER_RESTART = 12  # dledger-py: see dledger.raft.vote_hold


class ParseResult(IntEnum):
    """`VoteResponse.ParseResult`: the candidate's verdict on a vote round."""

    WAIT_TO_REVOTE = 0
    REVOTE_IMMEDIATELY = 1
    PASSED = 2
    WAIT_TO_VOTE_NEXT = 3


class PushType(Enum):
    """`PushEntryRequest.Type`."""

    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"


@dataclass(slots=True, kw_only=True)
class RequestOrResponse:
    """Base fields of every message.

    Attributes:
        group: the Raft group.
        remote_id: the node the message is addressed to.
        local_id: the sender.
        code: a ResponseCode number (200 = SUCCESS).
        leader_id: the leader as the sender knows it (the candidate in a VoteRequest).
        term: the sender's term.
    """

    group: str = "default"
    remote_id: str = ""
    local_id: str = ""
    code: int = ResponseCode.SUCCESS
    leader_id: str | None = None
    term: int = -1

    @property
    def ok(self) -> bool:
        """True when `code` is SUCCESS."""
        return self.code == ResponseCode.SUCCESS


class AnswerHeader(TypedDict):
    """The RequestOrResponse fields of an answer from this member (see
    `MemberState.answer_header`)."""

    group: str
    local_id: str
    remote_id: str
    leader_id: str | None
    term: int


class RequestHeader(TypedDict):
    """The fields every request this member sends as a candidate or leader carries (see
    `MemberState.request_header`): it speaks for itself, with its group id and incarnation."""

    group: str
    local_id: str
    remote_id: str
    leader_id: str
    group_id: str
    incarnation: str


@dataclass(slots=True, kw_only=True)
class VoteRequest(RequestOrResponse):
    """A candidate (`leader_id`) asks for a vote in `term`.

    `pre_vote`: only asks whether the addressee would vote (nothing changes there);
    `leadership_transfer`: the candidate is the transferee of a leadership transfer.
    `group_id` / `incarnation`: the sender's group id and incarnation
    (dledger.store.membership; "" when unknown: a member still joining).
    """

    ledger_end_index: int = -1
    ledger_end_term: int = -1
    pre_vote: bool = False
    leadership_transfer: bool = False
    group_id: str = ""
    incarnation: str = ""


@dataclass(slots=True, kw_only=True)
class VoteResponse(RequestOrResponse):
    """The answer to a VoteRequest, with the answering member's own log end (what a
    member holding its vote after an unclean restart learns the group's log ends from:
    see dledger.raft.vote_hold)."""

    vote_result: VoteResult = VoteResult.UNKNOWN
    ledger_end_index: int = -1
    ledger_end_term: int = -1
    leader_seen: bool = False  # the member has followed or been a leader (its group exists)


@dataclass(slots=True, kw_only=True)
class HeartBeatRequest(RequestOrResponse):
    """The leader's periodic heartbeat, with its ledger end index (dledger-py: what a
    member holding its vote after an unclean restart must catch up to), its group id and
    incarnation (as in VoteRequest)."""

    ledger_end_index: int = -1
    group_id: str = ""
    incarnation: str = ""
    retention_floor: int = 0
    """The lowest index some member may still need (`RaftCore.retention_floor`), which the
    follower's retention keeps too; 0: keep everything."""


@dataclass(slots=True, kw_only=True)
class HeartBeatResponse(RequestOrResponse):
    """The answer to a HeartBeatRequest."""


@dataclass(slots=True, kw_only=True)
class PushEntryRequest(RequestOrResponse):
    """Leader to follower replication message.

    APPEND carries `entries`, a run of `count` already-encoded entries starting at
    `first_index` (the leader's segment bytes, written verbatim by the follower);
    `prev_index` / `prev_term` name the entry just before the run (-1 for none), and
    `last_term` the term of the run's last entry. COMPARE asks whether the follower has
    `prev_term` at `prev_index`. TRUNCATE deletes the follower's entries from
    `first_index` after the same check on `first_index - 1`. COMMIT carries the commit
    index with the check on `prev_index` (the follower's known match point). Every type
    carries the leader's `commit_index`; the follower never commits beyond what the
    request proved to match. `group_id` / `incarnation` as in VoteRequest;
    `data_file_size` is the leader's data segment size (0: unknown), for the follower to
    refuse a leader whose entries cannot sit at its own positions.
    """

    type: PushType = PushType.APPEND
    prev_index: int = -1
    prev_term: int = -1
    commit_index: int = -1
    first_index: int = -1
    count: int = 0
    last_term: int = -1
    entries: bytes = b""
    group_id: str = ""
    incarnation: str = ""
    data_file_size: int = 0

    @property
    def last_index(self) -> int:
        """Index of the run's last entry (first_index - 1 when the run is empty)."""
        return self.first_index + self.count - 1


@dataclass(slots=True, kw_only=True)
class PushEntryResponse(RequestOrResponse):
    """The answer to a PushEntryRequest: `index` is the request's first index, and the
    follower's `begin_index` / `end_index`; on an inconsistent COMPARE `x_term` is the
    follower's term at the compared index and `x_index` the first index of that term."""

    index: int = -1
    begin_index: int = -1
    end_index: int = -1
    count: int = 0
    x_term: int = -1
    x_index: int = -1


@dataclass(slots=True, kw_only=True)
class LeadershipTransferRequest(RequestOrResponse):
    """Ask the leader (`transfer_id`) to hand leadership to `transferee_id`; the leader
    forwards it to the transferee with `take_leadership_ledger_index`."""

    transfer_id: str = ""
    transferee_id: str = ""
    take_leadership_ledger_index: int = -1


@dataclass(slots=True, kw_only=True)
class LeadershipTransferResponse(RequestOrResponse):
    """The answer to a LeadershipTransferRequest."""


@dataclass(slots=True, kw_only=True)
class ReadIndexRequest(RequestOrResponse):
    """A follower asks its leader for a read index (a READ_INDEX read it serves)."""


@dataclass(slots=True, kw_only=True)
class ReadIndexResponse(RequestOrResponse):
    """The leader's read index (`index`, on SUCCESS): the follower answers the read once
    it applied that far."""

    index: int = -1


@dataclass(slots=True, kw_only=True)
class InstallSnapshotRequest(RequestOrResponse):
    """One chunk of a snapshot the leader streams to a follower (client-streaming
    InstallSnapshot; DLedger 0.4.0 sent the whole `data` in one message).

    Every chunk repeats the snapshot's `last_included_index` / `last_included_term`, the
    whole `data` file's `total_size` and `total_crc32`; `offset` is where `data` (this
    chunk's bytes, CRC-32 `chunk_crc32`) starts in it. The dispatcher's request (what
    asks the node to stream a snapshot) carries no data. `group_id` / `incarnation` as
    in VoteRequest.
    """

    last_included_index: int = -1
    last_included_term: int = -1
    total_size: int = 0
    total_crc32: int = 0
    offset: int = 0
    chunk_crc32: int = 0
    data: bytes = b""
    group_id: str = ""
    incarnation: str = ""
    next_pos: int = -1
    """Where the leader's entry after the snapshot starts in its data files (-1:
    unknown): the follower's emptied log continues there, so that the leader's entries
    land at their own positions."""


@dataclass(slots=True, kw_only=True)
class InstallSnapshotResponse(RequestOrResponse):
    """The answer to a whole InstallSnapshot stream: `next_offset` is the offset the
    follower expects next (the whole size after SUCCESS; where a broken stream resumes
    otherwise); `last_included_index` / `last_included_term` the snapshot the stream
    was about, and `end_index` the follower's ledger end."""

    next_offset: int = 0
    last_included_index: int = -1
    last_included_term: int = -1
    end_index: int = -1


@dataclass(slots=True, kw_only=True)
class InstallSnapshotStream(RequestOrResponse):
    """A whole InstallSnapshot stream as one peer message: `chunks` yields the
    `InstallSnapshotRequest`s in order (read lazily by the receiver). The transports
    pass it to the target's handler as it is (in process) or as a client-streaming call
    (gRPC)."""

    chunks: Iterator[InstallSnapshotRequest] = field(default_factory=lambda: iter(()))
