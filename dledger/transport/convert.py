"""Conversions between dledger's message dataclasses (`dledger/raft/messages.py`, `Entry`,
`ColumnBatch`, the node status) and the `dledger.v1` protobuf messages.

Every peer message keeps DLedger's `RequestOrResponse` base fields under the same names;
`leader_id` is an optional string on the wire, so None survives a round trip. Decoding
checks only what the dataclasses cannot represent (an unset or unknown enum value, a
negative count) and raises `MalformedMessage`, which the server turns into gRPC
INVALID_ARGUMENT; everything else is the node's to judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD, Entry
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ReadIndexRequest,
    ReadIndexResponse,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.record import decode_record

if TYPE_CHECKING:
    # The generated stubs do not pass `mypy --strict` (dledger/proto is excluded from it);
    # inside the type checker the generated modules are plain Any.
    pb: Any
    pb_grpc: Any
else:
    from dledger.proto import dledger_pb2 as pb
    from dledger.proto import dledger_pb2_grpc as pb_grpc

__all__ = [
    "FIXED_WIDTH",
    "PACKED",
    "MalformedMessage",
    "StatusLike",
    "columns_from_pb",
    "columns_to_pb",
    "entry_from_pb",
    "entry_to_pb",
    "from_pb",
    "pb",
    "pb_grpc",
    "response_to_pb",
    "status_to_metadata",
    "to_pb",
]


class MalformedMessage(ValueError):
    """A protobuf message that no valid dledger message encodes."""


_PUSH_TYPE_TO_PB = {
    PushType.APPEND: 1,
    PushType.COMMIT: 2,
    PushType.COMPARE: 3,
    PushType.TRUNCATE: 4,
}
_PUSH_TYPE_FROM_PB = {number: kind for kind, number in _PUSH_TYPE_TO_PB.items()}

# dataclass -> (protobuf class name, fields beyond the base ones that map 1:1)
_PEER_MESSAGES: dict[type[RequestOrResponse], tuple[str, tuple[str, ...]]] = {
    VoteRequest: (
        "VoteRequest",
        ("ledger_end_index", "ledger_end_term", "pre_vote", "leadership_transfer", "group_id", "incarnation"),
    ),
    VoteResponse: ("VoteResponse", ("ledger_end_index", "ledger_end_term", "leader_seen")),
    HeartBeatRequest: ("HeartBeatRequest", ("ledger_end_index", "group_id", "incarnation", "retention_floor")),
    HeartBeatResponse: ("HeartBeatResponse", ()),
    PushEntryRequest: (
        "PushEntryRequest",
        (
            "prev_index",
            "prev_term",
            "commit_index",
            "first_index",
            "count",
            "last_term",
            "entries",
            "group_id",
            "incarnation",
            "data_file_size",
        ),
    ),
    PushEntryResponse: ("PushEntryResponse", ("index", "begin_index", "end_index", "count", "x_term", "x_index")),
    LeadershipTransferRequest: (
        "LeadershipTransferRequest",
        ("transfer_id", "transferee_id", "take_leadership_ledger_index"),
    ),
    LeadershipTransferResponse: ("LeadershipTransferResponse", ()),
    ReadIndexRequest: ("ReadIndexRequest", ()),
    ReadIndexResponse: ("ReadIndexResponse", ("index",)),
    InstallSnapshotRequest: (
        "InstallSnapshotRequest",
        (
            "last_included_index",
            "last_included_term",
            "data",
            "group_id",
            "incarnation",
            "total_size",
            "total_crc32",
            "offset",
            "chunk_crc32",
            "next_pos",
        ),
    ),
    InstallSnapshotResponse: (
        "InstallSnapshotResponse",
        ("next_offset", "last_included_index", "last_included_term", "end_index"),
    ),
}
_BY_PB_NAME: dict[str, tuple[type[RequestOrResponse], tuple[str, ...]]] = {
    name: (cls, extra) for cls, (name, extra) in _PEER_MESSAGES.items()
}
_BASE_FIELDS = ("group", "remote_id", "local_id", "code", "term")


def _set_base(msg: RequestOrResponse, out: Any) -> None:
    out.group = msg.group
    out.remote_id = msg.remote_id
    out.local_id = msg.local_id
    out.code = int(msg.code)
    out.term = msg.term
    if msg.leader_id is not None:
        out.leader_id = msg.leader_id


def _base_kwargs(message: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {name: getattr(message, name) for name in _BASE_FIELDS}
    kwargs["leader_id"] = message.leader_id if message.HasField("leader_id") else None
    return kwargs


def to_pb(msg: RequestOrResponse) -> Any:
    """The protobuf message for a peer message (Vote, HeartBeat, Push, LeadershipTransfer
    requests and responses).

    Raises:
        TypeError: `msg` is not one of those types.
    """
    spec = _PEER_MESSAGES.get(type(msg))
    if spec is None:
        raise TypeError(f"no wire form for {type(msg).__name__}")
    name, extra = spec
    out = getattr(pb, name)()
    _set_base(msg, out)
    for field in extra:
        setattr(out, field, getattr(msg, field))
    if isinstance(msg, VoteResponse):
        out.vote_result = int(msg.vote_result)
    elif isinstance(msg, PushEntryRequest):
        out.type = _PUSH_TYPE_TO_PB[msg.type]
    return out


def response_to_pb(msg: RequestOrResponse, pb_name: str) -> Any:
    """The protobuf response `pb_name` for `msg`. A message of the matching dataclass
    converts fully; any other (say a bare RequestOrResponse carrying UNSUPPORTED) keeps
    its base fields only."""
    expected, _ = _BY_PB_NAME[pb_name]
    if type(msg) is expected:
        return to_pb(msg)
    out = getattr(pb, pb_name)()
    _set_base(msg, out)
    return out


def from_pb(message: Any) -> RequestOrResponse:
    """The peer message a protobuf message encodes.

    Raises:
        MalformedMessage: an unset or unknown enum value, or a negative count.
        TypeError: not a peer message.
    """
    name = message.DESCRIPTOR.name
    spec = _BY_PB_NAME.get(name)
    if spec is None:
        raise TypeError(f"{name} is not a peer message")
    cls, extra = spec
    kwargs = _base_kwargs(message)
    for field in extra:
        kwargs[field] = getattr(message, field)
    if cls is VoteResponse:
        try:
            kwargs["vote_result"] = VoteResult(message.vote_result)
        except ValueError:
            raise MalformedMessage(f"unknown vote result {message.vote_result}") from None
    elif cls is PushEntryRequest:
        kind = _PUSH_TYPE_FROM_PB.get(message.type)
        if kind is None:
            raise MalformedMessage(f"push type {message.type} is not APPEND, COMMIT, COMPARE or TRUNCATE")
        kwargs["type"] = kind
        if message.count < 0:
            raise MalformedMessage(f"negative push count {message.count}")
    elif cls is PushEntryResponse and message.count < 0:
        raise MalformedMessage(f"negative push count {message.count}")
    return cls(**kwargs)


# ------------------------------------------------------------------------- entries


def entry_to_pb(entry: Entry, out: Any | None = None, decode_records: bool = False) -> Any:
    """`entry` as a `dledger.v1.Entry` (filled into `out` when given); with
    `decode_records` a record entry carries its decoded `record` instead of its body.

    Raises:
        DLedgerError: DISK_ERROR when `decode_records` and a record body does not decode.
    """
    if out is None:
        out = pb.Entry()
    out.index = entry.index
    out.term = entry.term
    out.pos = entry.pos
    out.magic = entry.magic
    out.body_crc = entry.body_crc & 0xFFFFFFFF
    if decode_records and entry.magic == MAGIC_RECORD:
        try:
            timestamp, key, headers, value = decode_record(entry.body)
        except ValueError as exc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"entry {entry.index}: {exc}") from None
        if key is not None:
            out.record.key = key
        out.record.timestamp = timestamp
        out.record.value = value
        for name, data in headers:
            out.record.headers.add(key=name, value=data)
    else:
        out.body = entry.body
    return out


def entry_from_pb(message: Any) -> Entry:
    """The Entry a `dledger.v1.Entry` holds."""
    return Entry(
        index=message.index,
        term=message.term,
        pos=message.pos,
        magic=message.magic,
        body=bytes(message.body),
        body_crc=message.body_crc - (1 << 32) if message.body_crc >= 1 << 31 else message.body_crc,  # Java's int
    )


PACKED = 0
"""`ReadCommittedRequest.layout` PACKED: the batch columns as repeated (varint) fields."""
FIXED_WIDTH = 1
"""`ReadCommittedRequest.layout` FIXED_WIDTH: the batch columns as little-endian arrays."""

_LE_INT64 = np.dtype("<i8")
_LE_INT32 = np.dtype("<i4")


def columns_to_pb(batch: ColumnBatch, out: Any | None = None, layout: int = PACKED) -> Any:
    """`batch` as a `dledger.v1.ColumnBatch` (offsets rebased to start at 0), in the
    PACKED (default) or FIXED_WIDTH layout; the magic column only when the batch holds
    an entry that is not normal."""
    if out is None:
        out = pb.ColumnBatch()
    n = batch.count
    offsets = batch.offsets[: n + 1]
    base = int(offsets[0]) if len(offsets) else 0
    end = int(offsets[n]) if len(offsets) > n else base
    if base:
        offsets = offsets - base
    magic = batch.magic[:n]
    special = bool(n) and bool(np.any(magic != MAGIC_NORMAL))
    if layout == FIXED_WIDTH:
        out.index_le = batch.index[:n].astype(_LE_INT64, copy=False).tobytes()
        out.term_le = batch.term[:n].astype(_LE_INT64, copy=False).tobytes()
        out.pos_le = batch.pos[:n].astype(_LE_INT64, copy=False).tobytes()
        out.offsets_le = offsets.astype(_LE_INT32, copy=False).tobytes()
        if special:
            out.magic_le = magic.astype(_LE_INT32, copy=False).tobytes()
    else:
        out.index.extend(batch.index[:n].tolist())
        out.term.extend(batch.term[:n].tolist())
        out.pos.extend(batch.pos[:n].tolist())
        out.offsets.extend(offsets.tolist())
        if special:
            out.magic.extend(magic.tolist())
    out.bodies = bytes(memoryview(batch.bodies)[base:end])
    return out


def _fixed_column(raw: bytes, dtype: np.dtype[Any], count: int, name: str) -> npt.NDArray[Any]:
    if len(raw) != count * dtype.itemsize:
        raise MalformedMessage(f"column {name} has {len(raw)} bytes, expected {count * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=False)


def columns_from_pb(message: Any) -> ColumnBatch:
    """The ColumnBatch a `dledger.v1.ColumnBatch` holds (either layout; the fixed-width
    columns are used without decoding).

    Raises:
        MalformedMessage: the columns disagree in length or the offsets do not fit the
            bodies.
    """
    if message.offsets_le:
        raw = message.index_le
        n = len(raw) // 8
        index = _fixed_column(raw, _LE_INT64, n, "index")
        term = _fixed_column(message.term_le, _LE_INT64, n, "term")
        pos = _fixed_column(message.pos_le, _LE_INT64, n, "pos")
        offsets = _fixed_column(message.offsets_le, _LE_INT32, n + 1, "offsets")
        magic_raw = message.magic_le
        magic = _fixed_column(magic_raw, _LE_INT32, n, "magic") if magic_raw else None
    else:
        index = np.array(message.index, dtype=np.int64)
        n = len(index)
        offsets = np.array(message.offsets, dtype=np.int32) if len(message.offsets) else np.zeros(1, dtype=np.int32)
        if len(message.term) != n or len(message.pos) != n or len(offsets) != n + 1:
            raise MalformedMessage(f"column lengths differ: {n} indexes, {len(offsets)} offsets")
        if message.magic and len(message.magic) != n:
            raise MalformedMessage(f"column lengths differ: {n} indexes, {len(message.magic)} magic values")
        term = np.array(message.term, dtype=np.int64)
        pos = np.array(message.pos, dtype=np.int64)
        magic = np.array(message.magic, dtype=np.int32) if message.magic else None
    bodies = bytearray(message.bodies)
    if offsets[0] != 0 or offsets[-1] != len(bodies) or (n and np.any(np.diff(offsets) < 0)):
        raise MalformedMessage("offsets do not describe the bodies")
    if magic is None:
        return ColumnBatch(index, term, pos, offsets, bodies)
    return ColumnBatch(index, term, pos, offsets, bodies, magic)


# -------------------------------------------------------------------------- metadata


class StatusLike(Protocol):
    """What Metadata needs of a node's status (`dledger.node.NodeStatus`)."""

    @property
    def group(self) -> str: ...
    @property
    def self_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def term(self) -> int: ...
    @property
    def leader_id(self) -> str | None: ...
    @property
    def peers(self) -> Mapping[str, str]: ...
    @property
    def begin_index(self) -> int: ...
    @property
    def end_index(self) -> int: ...
    @property
    def end_term(self) -> int: ...
    @property
    def committed_index(self) -> int: ...
    @property
    def applied_index(self) -> int: ...
    @property
    def peer_match(self) -> Mapping[str, int]: ...
    @property
    def vote_hold(self) -> str: ...
    @property
    def snapshot_index(self) -> int: ...
    @property
    def store_health(self) -> str: ...
    @property
    def machine_health(self) -> str: ...


def _member_role(status: StatusLike, member_id: str) -> str:
    if member_id == status.self_id:
        return status.role
    if status.leader_id is None:
        return "UNKNOWN"
    return "LEADER" if member_id == status.leader_id else "FOLLOWER"


def status_to_metadata(status: StatusLike, out: Any | None = None) -> Any:
    """A SUCCESS `dledger.v1.MetadataResponse` describing `status`."""
    if out is None:
        out = pb.MetadataResponse()
    out.code = 200
    if status.leader_id is not None:
        out.leader_id = status.leader_id
        out.leader_address = status.peers.get(status.leader_id, "")
    out.term = status.term
    out.group = status.group
    out.self_id = status.self_id
    out.role = status.role
    for member_id, address in status.peers.items():
        out.peers[member_id] = address
        out.members.add(
            id=member_id,
            address=address,
            role=_member_role(status, member_id),
            match_index=status.peer_match.get(member_id, -1),
            snapshot_index=status.snapshot_index if member_id == status.self_id else -1,
        )
    out.begin_index = status.begin_index
    out.end_index = status.end_index
    out.end_term = status.end_term
    out.committed_index = status.committed_index
    out.applied_index = status.applied_index
    out.vote_hold = status.vote_hold
    out.store_health = status.store_health
    out.machine_health = status.machine_health
    return out
