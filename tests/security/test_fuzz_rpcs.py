"""Property-based fuzzing (hypothesis) of every field of every RPC against a live group of
three members on loopback: after each example the member still answers Metadata, the
committed prefix read before the fuzzing never changes, and no exception escaped a
handler (gRPC's "Exception calling application" and the services' `log.exception`
lines are counted from the log).

`DLEDGER_FUZZ_EXAMPLES` sets the examples per RPC (default 60); the runs are
derandomized (the same examples every time) unless `DLEDGER_FUZZ_SEED` names a seed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from dledger._store_py_codec import encode_entry
from dledger.raft.messages import MAX_INDEX, MAX_TERM
from dledger.transport.convert import pb
from tests.security.conftest import GROUP, EscapeCounter, Group

pytestmark = [pytest.mark.security, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("DLEDGER_FUZZ_EXAMPLES", "60"))
SEED = os.environ.get("DLEDGER_FUZZ_SEED")
MIN_I64, MAX_I64 = -(2**63), 2**63 - 1
MIN_I32, MAX_I32 = -(2**31), 2**31 - 1
IDS = ["n0", "n1", "n2"]
PREFIX = 30
"""Entries committed before the fuzzing; they must never change."""

# a refusal of the request as a whole is a defined answer; INTERNAL / UNKNOWN are escapes
DEFINED_STATUSES = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}


def fuzz_settings(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The settings of every fuzz test (examples and seed from the environment)."""
    configured = settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=SEED is None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )(fn)
    return seed(int(SEED))(configured) if SEED is not None else configured


# ----------------------------------------------------------------------- strategies


def edge_ints(low: int, high: int, extra: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """Any int in [low, high], often an edge."""
    edges = [v for v in (low, high, -1, 0, 1, 2, MAX_TERM, MAX_TERM + 1, MAX_INDEX, *extra) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(-3, 50))


I64 = edge_ints(MIN_I64, MAX_I64)
I32 = edge_ints(MIN_I32, MAX_I32)
ENUM = st.one_of(st.integers(-3, 6), st.sampled_from([MIN_I32, MAX_I32]))
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
NAMES = st.one_of(st.sampled_from(["", GROUP, *IDS, "mallory", "n0 ", "N0", "x" * 70_000]), TEXT)
MEMBER = st.sampled_from(IDS)
STRANGERS = st.one_of(st.sampled_from(["", "mallory", "n0 ", "N0", "x" * 70_000]), TEXT.filter(lambda s: s not in IDS))


def entries_strategy() -> st.SearchStrategy[bytes]:
    """Random bytes, or runs of well-formed entries at fuzzed indexes and terms."""
    encoded = st.lists(
        st.builds(
            lambda magic, index, term, body: encode_entry(magic, index, term, 0, body),
            st.sampled_from([1, 2, 1, 7, -1]),
            st.integers(-1, 200),
            st.integers(-1, 10),
            st.binary(max_size=64),
        ),
        min_size=1,
        max_size=4,
    ).map(b"".join)
    return st.one_of(st.binary(max_size=512), encoded, st.just(b""))


def header(data: st.DataObject, target: str, extra: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """The RequestOrResponse fields plus `extra`: mostly a well-addressed header from
    another member speaking for itself (so the deeper checks and the node are reached),
    else every field fuzzed."""
    sender = data.draw(st.sampled_from([m for m in IDS if m != target]))
    coherent = {
        "group": st.just(GROUP),
        "remote_id": st.just(target),
        "local_id": st.just(sender),
        "leader_id": st.just(sender),
    }
    fuzzed = {
        "group": st.one_of(st.just(GROUP), NAMES),
        "remote_id": st.one_of(st.just(target), NAMES),
        "local_id": st.one_of(MEMBER, NAMES),
        "leader_id": st.one_of(st.none(), MEMBER, NAMES),
    }
    chosen = coherent if data.draw(st.integers(0, 3)) else fuzzed
    fields = data.draw(st.fixed_dictionaries({**chosen, "code": I32, "term": I64, **extra}))
    if fields["leader_id"] is None:
        del fields["leader_id"]
    return dict(fields)


# --------------------------------------------------------------------- the group


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Group, EscapeCounter, list[bytes]]]:
    """A group with PREFIX committed entries, its log watched for escaped exceptions."""
    counter = EscapeCounter()
    root = logging.getLogger()
    old_level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(counter)
    group = Group(Path(tmp_path_factory.mktemp("fuzz")))
    try:
        group.wait_leader()
        bodies = [b"committed-%d" % k for k in range(PREFIX)]
        first = group.append(bodies)
        assert first == 0
        prefix = group.committed(group.wait_leader(), PREFIX - 1)
        assert prefix == bodies
        yield group, counter, prefix
    finally:
        group.close()
        root.removeHandler(counter)
        root.setLevel(old_level)


def check_member(live: tuple[Group, EscapeCounter, list[bytes]], target: str) -> None:
    """The member answers Metadata with a bounded term, serves the same committed prefix,
    and nothing escaped."""
    group, counter, prefix = live
    assert counter.escapes() == [], "an exception escaped a handler"
    meta = group.ledger_stub(target).Metadata(pb.MetadataRequest(), timeout=30)
    assert meta.code == 200 and meta.self_id == target
    assert 0 <= meta.term <= MAX_TERM, f"term {meta.term} out of bounds"
    if meta.committed_index >= PREFIX - 1:  # a member that restarted its catch-up has less
        assert group.committed(target, PREFIX - 1) == prefix


def call(fn: Callable[[], Any]) -> Any:
    """Run one call: a DLedger answer, or a defined gRPC refusal of the whole request."""
    try:
        return fn()
    except grpc.RpcError as exc:
        assert exc.code() in DEFINED_STATUSES, f"{exc.code()}: {exc.details()}"
        return None


# ------------------------------------------------------------------ the Peer service


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_vote(live: Any, data: st.DataObject, target: str) -> None:
    request = pb.VoteRequest(**header(data, target, {"ledger_end_index": I64, "ledger_end_term": I64}))
    call(lambda: live[0].peer_stub(target).Vote(request, timeout=30))
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_heartbeat(live: Any, data: st.DataObject, target: str) -> None:
    request = pb.HeartBeatRequest(**header(data, target, {"ledger_end_index": I64, "retention_floor": I64}))
    call(lambda: live[0].peer_stub(target).HeartBeat(request, timeout=30))
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_push(live: Any, data: st.DataObject, target: str) -> None:
    push_fields = {
        "type": ENUM,
        "prev_index": I64,
        "prev_term": I64,
        "commit_index": I64,
        "first_index": I64,
        "count": I32,
        "last_term": I64,
        "entries": entries_strategy(),
    }
    request = pb.PushEntryRequest(**header(data, target, push_fields))
    call(lambda: live[0].peer_stub(target).Push(request, timeout=30))
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_peer_leadership_transfer(live: Any, data: st.DataObject, target: str) -> None:
    extra = {
        "transfer_id": st.one_of(MEMBER, NAMES),
        "transferee_id": st.one_of(st.just(target), NAMES),
        "take_leadership_ledger_index": I64,
    }
    request = pb.LeadershipTransferRequest(**header(data, target, extra))
    call(lambda: live[0].peer_stub(target).LeadershipTransfer(request, timeout=30))
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_install_snapshot(live: Any, data: st.DataObject, target: str) -> None:
    extra = {"last_included_index": I64, "last_included_term": I64, "data": st.binary(max_size=256)}
    request = pb.InstallSnapshotRequest(**header(data, target, extra))
    answer = call(lambda: live[0].peer_stub(target).InstallSnapshot(iter([request]), timeout=30))
    assert answer is None or answer.code != 200
    check_member(live, target)


@fuzz_settings
@given(target=MEMBER, method=st.sampled_from(["Vote", "HeartBeat", "Push", "LeadershipTransfer"]), raw=st.binary())
def test_fuzz_raw_bytes_on_peer_methods(live: Any, target: str, method: str, raw: bytes) -> None:
    channel = live[0].channel(target)
    fn = channel.unary_unary(f"/dledger.v1.Peer/{method}")
    call(lambda: fn(raw, timeout=30))
    check_member(live, target)


# ---------------------------------------------------------------- the Ledger service

CLIENT_TARGET = {"group": st.one_of(st.just(""), st.just(GROUP), NAMES), "remote_id": st.one_of(st.just(""), NAMES)}
BODIES = st.one_of(
    st.lists(st.binary(max_size=256), max_size=4),
    st.just([b"x" * (4 * 1024 * 1024)]),
    st.just([]),
)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_append(live: Any, data: st.DataObject, target: str) -> None:
    fields = data.draw(
        st.fixed_dictionaries({**CLIENT_TARGET, "bodies": BODIES, "request_id": st.integers(0, 2**64 - 1)})
    )
    request = pb.AppendRequest(**fields)
    call(lambda: live[0].ledger_stub(target).Append(request, timeout=30))
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_append_stream(live: Any, data: st.DataObject, target: str) -> None:
    requests = data.draw(
        st.lists(
            st.fixed_dictionaries({**CLIENT_TARGET, "bodies": BODIES, "request_id": st.integers(0, 2**64 - 1)}).map(
                lambda f: pb.AppendRequest(**f)
            ),
            max_size=3,
        )
    )
    answers = call(lambda: list(live[0].ledger_stub(target).AppendStream(iter(requests), timeout=30)))
    assert answers is None or len(answers) == len(requests)
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_get(live: Any, data: st.DataObject, target: str) -> None:
    fields = data.draw(st.fixed_dictionaries({**CLIENT_TARGET, "index": I64, "count": I32, "max_bytes": I64}))
    answer = call(lambda: live[0].ledger_stub(target).Get(pb.GetRequest(**fields), timeout=30))
    if answer is not None and answer.code == 200:
        assert all(e.index <= answer.committed_index for e in answer.entries)
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER, to_index=st.one_of(st.none(), I64))
def test_fuzz_read_committed(live: Any, data: st.DataObject, target: str, to_index: int | None) -> None:
    fields = data.draw(
        st.fixed_dictionaries(
            {
                **CLIENT_TARGET,
                "from_index": I64,
                "max_batch_bytes": I64,
                "max_batch_count": I32,
                "follow": st.booleans(),
                "layout": ENUM,
            }
        )
    )
    request = pb.ReadCommittedRequest(**fields)
    if to_index is not None:
        request.to_index = to_index

    def read() -> list[Any]:
        stream = live[0].ledger_stub(target).ReadCommitted(request, timeout=30)
        got = []
        for answer in stream:  # a following stream never ends by itself: take a few
            got.append(answer)
            if len(got) >= 3 or answer.code != 200 or request.follow:
                stream.cancel()
                break
        return got

    try:
        call(read)
    except grpc.RpcError as exc:  # our own cancel
        assert exc.code() == grpc.StatusCode.CANCELLED
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_metadata(live: Any, data: st.DataObject, target: str) -> None:
    fields = data.draw(st.fixed_dictionaries(CLIENT_TARGET))
    answer = call(lambda: live[0].ledger_stub(target).Metadata(pb.MetadataRequest(**fields), timeout=30))
    assert answer is not None
    check_member(live, target)


@fuzz_settings
@given(data=st.data(), target=MEMBER)
def test_fuzz_client_leadership_transfer(live: Any, data: st.DataObject, target: str) -> None:
    fields = data.draw(
        st.fixed_dictionaries(
            {
                **CLIENT_TARGET,
                "local_id": NAMES,
                "code": I32,
                "term": I64,
                "transfer_id": st.one_of(st.just(""), MEMBER, NAMES),
                "transferee_id": STRANGERS,  # never a member: no real handovers
                "take_leadership_ledger_index": I64,
            }
        )
    )
    request = pb.LeadershipTransferRequest(**fields)
    answer = call(lambda: live[0].ledger_stub(target).LeadershipTransfer(request, timeout=30))
    assert answer is None or answer.code != 200
    check_member(live, target)


@fuzz_settings
@given(
    target=MEMBER,
    method=st.sampled_from(["Append", "Get", "Metadata", "LeadershipTransfer"]),
    raw=st.binary(),
)
def test_fuzz_raw_bytes_on_ledger_methods(live: Any, target: str, method: str, raw: bytes) -> None:
    fn = live[0].channel(target).unary_unary(f"/dledger.v1.Ledger/{method}")
    call(lambda: fn(raw, timeout=30))
    check_member(live, target)
