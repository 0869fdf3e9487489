"""Value types of `dledger.client`: targets, append results, member metadata, stubs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dledger.transport.convert import pb

_SERVICE = "/dledger.v1.Ledger/"


class Target(NamedTuple):
    """A member to call: its id (may be "" when only an address is known) and address."""

    node_id: str
    address: str


@dataclass(frozen=True)
class AppendResult:
    """Where an accepted request's bodies went: indexes first_index .. first_index+count-1."""

    first_index: int
    count: int
    term: int
    leader_id: str

    @property
    def last_index(self) -> int:
        """Index of the request's last body."""
        return self.first_index + self.count - 1


@dataclass(frozen=True)
class MemberInfo:
    """One member as the answering member sees it (match_index only from a leader)."""

    node_id: str
    address: str
    role: str
    match_index: int


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
    peers: dict[str, str] = field(default_factory=dict)
    members: tuple[MemberInfo, ...] = ()


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


def metadata_from_pb(target: Target, message: Any) -> NodeMetadata:
    """A `NodeMetadata` from a MetadataResponse answered by `target`."""
    members = tuple(MemberInfo(m.id, m.address, m.role, m.match_index) for m in message.members)
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
        peers=dict(message.peers),
        members=members,
    )
