"""Round trips of every peer message, entry, column batch and status through protobuf."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dledger.client.types import Target, metadata_from_pb
from dledger.codes import ResponseCode
from dledger.columns import ColumnBatch
from dledger.entry import Entry
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.transport.convert import (
    MalformedMessage,
    columns_from_pb,
    columns_to_pb,
    entry_from_pb,
    entry_to_pb,
    from_pb,
    pb,
    response_to_pb,
    status_to_metadata,
    to_pb,
)

pytestmark = pytest.mark.unit

BASE = {"group": "g1", "remote_id": "n1", "local_id": "n0", "code": int(ResponseCode.NOT_LEADER), "term": 7}

SAMPLES: list[RequestOrResponse] = [
    VoteRequest(**BASE, leader_id="n0", ledger_end_index=41, ledger_end_term=6),
    VoteResponse(**BASE, leader_id=None, vote_result=VoteResult.REJECT_TAKING_LEADERSHIP),
    HeartBeatRequest(**BASE, leader_id="n0"),
    HeartBeatResponse(**BASE, leader_id="n2"),
    *[
        PushEntryRequest(
            **BASE,
            leader_id="n0",
            type=kind,
            prev_index=9,
            prev_term=5,
            commit_index=8,
            first_index=10,
            count=2,
            last_term=7,
            entries=b"\x00\x01raw-run\xff" * 3,
        )
        for kind in PushType
    ],
    PushEntryResponse(**BASE, index=10, begin_index=0, end_index=11, count=2, x_term=4, x_index=3),
    LeadershipTransferRequest(
        **BASE, leader_id="n0", transfer_id="n0", transferee_id="n2", take_leadership_ledger_index=99
    ),
    LeadershipTransferResponse(**BASE, leader_id="n2"),
]


def _wire(message: object) -> object:
    """Serialize and parse again, as the network does."""
    return type(message).FromString(message.SerializeToString())  # type: ignore[attr-defined]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: f"{type(m).__name__}-{getattr(m, 'type', '')}")
def test_peer_message_round_trip(msg: RequestOrResponse) -> None:
    back = from_pb(_wire(to_pb(msg)))
    assert type(back) is type(msg)
    assert back == msg


@pytest.mark.parametrize("cls", [type(m) for m in SAMPLES])
def test_defaults_round_trip(cls: type[RequestOrResponse]) -> None:
    msg = cls()
    assert from_pb(_wire(to_pb(msg))) == msg


def test_every_message_field_is_on_the_wire() -> None:
    """A field added to a dataclass without a wire field would be dropped silently."""
    for msg in SAMPLES:
        wire_fields = set(type(to_pb(msg)).DESCRIPTOR.fields_by_name)
        assert {f.name for f in fields(msg)} <= wire_fields, type(msg).__name__


def test_leader_id_none_and_empty_differ() -> None:
    assert from_pb(to_pb(HeartBeatRequest(leader_id=None))).leader_id is None
    assert from_pb(to_pb(HeartBeatRequest(leader_id=""))).leader_id == ""


@given(
    term=st.integers(-(2**63), 2**63 - 1),
    index=st.integers(-(2**63), 2**63 - 1),
    count=st.integers(0, 2**31 - 1),
    entries=st.binary(max_size=256),
    kind=st.sampled_from(list(PushType)),
    leader=st.none() | st.text(max_size=8),
)
def test_push_request_round_trip_extremes(
    term: int, index: int, count: int, entries: bytes, kind: PushType, leader: str | None
) -> None:
    msg = PushEntryRequest(
        term=term, leader_id=leader, type=kind, prev_index=index, first_index=index, count=count, entries=entries
    )
    assert from_pb(_wire(to_pb(msg))) == msg


def test_unspecified_push_type_is_malformed() -> None:
    with pytest.raises(MalformedMessage, match="push type"):
        from_pb(pb.PushEntryRequest(term=3))


def test_unknown_enum_numbers_are_malformed() -> None:
    with pytest.raises(MalformedMessage):
        from_pb(pb.PushEntryRequest(type=17))
    with pytest.raises(MalformedMessage, match="vote result"):
        from_pb(pb.VoteResponse(vote_result=99))


def test_negative_count_is_malformed() -> None:
    with pytest.raises(MalformedMessage, match="count"):
        from_pb(pb.PushEntryRequest(type=pb.PushEntryRequest.APPEND, count=-1))
    with pytest.raises(MalformedMessage, match="count"):
        from_pb(pb.PushEntryResponse(count=-5))


def test_non_peer_messages_are_refused() -> None:
    with pytest.raises(TypeError):
        to_pb(RequestOrResponse())
    with pytest.raises(TypeError):
        from_pb(pb.AppendRequest())


def test_response_to_pb_keeps_base_fields_of_other_types() -> None:
    bare = RequestOrResponse(group="g", local_id="n1", remote_id="n0", code=ResponseCode.UNSUPPORTED, term=4)
    out = response_to_pb(bare, "PushEntryResponse")
    assert out.DESCRIPTOR.name == "PushEntryResponse"
    back = from_pb(out)
    assert isinstance(back, PushEntryResponse)
    assert (back.group, back.local_id, back.code, back.term, back.leader_id) == ("g", "n1", 303, 4, None)
    full = PushEntryResponse(code=200, index=5)
    assert from_pb(response_to_pb(full, "PushEntryResponse")) == full


@pytest.mark.parametrize(
    "entry",
    [
        Entry(index=0, term=1, pos=0, magic=1, body=b"hello", body_crc=0x3610A686),
        Entry(index=2**40, term=9, pos=2**50, magic=2, body=b"", body_crc=0),
        # a CRC of 2**31 or more is a negative int in the store, as Java's int: the wire's
        # uint32 must come back the same, or a client and `read-file` disagree
        Entry(index=3, term=1, pos=0, magic=1, body=b"x", body_crc=-0x2F8B7C1A),
    ],
)
def test_entry_round_trip(entry: Entry) -> None:
    assert entry_from_pb(_wire(entry_to_pb(entry))) == entry


def _batch(bodies: list[bytes], first: int = 5, offset_base: int = 0) -> ColumnBatch:
    n = len(bodies)
    offsets = np.array([offset_base + sum(len(b) for b in bodies[:k]) for k in range(n + 1)], dtype=np.int32)
    return ColumnBatch(
        np.arange(first, first + n, dtype=np.int64),
        np.full(n, 3, dtype=np.int64),
        np.arange(n, dtype=np.int64) * 100,
        offsets,
        bytearray(b"#" * offset_base + b"".join(bodies)),
    )


@pytest.mark.parametrize("bodies", [[], [b""], [b"a", b"", b"ccc", b"\x00" * 1000]])
def test_column_batch_round_trip(bodies: list[bytes]) -> None:
    batch = _batch(bodies)
    back = columns_from_pb(_wire(columns_to_pb(batch)))
    assert back.count == len(bodies)
    assert [back.body(k) for k in range(back.count)] == bodies
    for name in ("index", "term", "pos", "offsets"):
        assert np.array_equal(getattr(back, name), getattr(batch, name)), name
        assert getattr(back, name).dtype == getattr(batch, name).dtype


def test_column_batch_offsets_are_rebased() -> None:
    batch = _batch([b"xy", b"z"], offset_base=7)
    out = columns_to_pb(batch)
    assert list(out.offsets) == [0, 2, 3]
    assert out.bodies == b"xyz"


def test_column_batch_inconsistent_columns_are_malformed() -> None:
    with pytest.raises(MalformedMessage):
        columns_from_pb(pb.ColumnBatch(index=[1, 2], term=[1], pos=[0, 1], offsets=[0, 1, 2], bodies=b"ab"))
    with pytest.raises(MalformedMessage):
        columns_from_pb(pb.ColumnBatch(index=[1], term=[1], pos=[0], offsets=[0, 5], bodies=b"ab"))
    with pytest.raises(MalformedMessage):
        columns_from_pb(pb.ColumnBatch(index=[1, 2], term=[1, 1], pos=[0, 1], offsets=[0, 2, 1], bodies=b"a"))


@dataclass(frozen=True)
class FakeStatus:
    group: str = "g"
    self_id: str = "n1"
    role: str = "FOLLOWER"
    term: int = 3
    leader_id: str | None = "n0"
    peers: dict[str, str] = field(default_factory=lambda: {"n0": "h:1", "n1": "h:2", "n2": "h:3"})
    begin_index: int = 0
    end_index: int = 10
    end_term: int = 3
    committed_index: int = 9
    applied_index: int = -1
    peer_match: dict[str, int] = field(default_factory=dict)
    vote_hold: str = "rejoin"
    snapshot_index: int = 7
    store_health: str = "disk full: appends refused until space comes back"
    machine_health: str = "RuntimeError: boom"


def test_status_to_metadata() -> None:
    out = _wire(status_to_metadata(FakeStatus()))
    assert out.vote_hold == "rejoin"
    assert out.store_health == "disk full: appends refused until space comes back"
    assert out.machine_health == "RuntimeError: boom"
    assert (out.code, out.leader_id, out.leader_address, out.term) == (200, "n0", "h:1", 3)
    assert (out.group, out.self_id, out.role) == ("g", "n1", "FOLLOWER")
    assert dict(out.peers) == {"n0": "h:1", "n1": "h:2", "n2": "h:3"}
    assert [(m.id, m.role, m.match_index, m.snapshot_index) for m in out.members] == [
        ("n0", "LEADER", -1, -1),
        ("n1", "FOLLOWER", -1, 7),  # its own newest snapshot only
        ("n2", "FOLLOWER", -1, -1),
    ]
    told = metadata_from_pb(Target("n1", "h:2"), out)
    assert told.snapshot_index == 7 and [m.snapshot_index for m in told.members] == [-1, 7, -1]
    assert (out.begin_index, out.end_index, out.end_term, out.committed_index, out.applied_index) == (0, 10, 3, 9, -1)


def test_status_to_metadata_without_leader_and_as_leader() -> None:
    out = status_to_metadata(FakeStatus(role="CANDIDATE", leader_id=None))
    assert not out.HasField("leader_id") and out.leader_address == ""
    assert [m.role for m in out.members] == ["UNKNOWN", "CANDIDATE", "UNKNOWN"]
    lead = status_to_metadata(FakeStatus(self_id="n0", role="LEADER", peer_match={"n0": 10, "n1": 9, "n2": 4}))
    assert [(m.role, m.match_index) for m in lead.members] == [("LEADER", 10), ("FOLLOWER", 9), ("FOLLOWER", 4)]


def test_a_batchs_positions_are_taken_as_a_sequence_takes_them() -> None:
    """`body(-1)` read an empty body and a record's `key(-3)` None (helper E)."""
    from dledger.record import encode_record, with_records

    batch = _batch([b"a", b"bb", b"ccc"])
    assert (batch.body(0), batch.body(-1), batch.body(-3)) == (b"a", b"ccc", b"a")
    for bad in (3, -4):
        with pytest.raises(IndexError, match=f"entry {bad} of a batch of 3"):
            batch.body(bad)
    plain = _batch([encode_record(b"v%d" % k, b"k%d" % k, k) for k in range(3)], first=0)
    records = with_records(replace(plain, magic=np.full(3, 16, dtype=np.int32)))
    assert records.records is not None
    assert (records.records.key(-3), records.records.value(-1), records.records.headers(-1)) == (b"k0", b"v2", [])
    with pytest.raises(IndexError):
        records.records.value(3)
