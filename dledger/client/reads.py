"""The reads of `DLedgerClient`: unary Get and Metadata, `read_committed` (ReadCommitted
server stream, column-wise batches) and `iterate` (entry by entry, over Get pages).

Reads change nothing, so a failed call moves on to the next member, and a broken stream
is resumed from the next index on another member (or the same one when a member was
named), until `timeout_s` passes without any member answering.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.client.interrupts import DeferredCtrlC
from dledger.client.members import Members
from dledger.client.policy import Backoff, Decision, read_decision, rpc_code, status_details, status_name
from dledger.client.types import NodeMetadata, Target, metadata_from_pb
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.entry import Entry
from dledger.transport.convert import PACKED, MalformedMessage, columns_from_pb, entry_from_pb, pb

ITERATE_PAGE = 1024
"""Entries asked for per Get by `iterate`."""
MAX_GET_COUNT = 2**31 - 1
"""The largest `count` one GetRequest carries (an int32)."""


def read_unary(members: Members, method: str, request: Any, node_id: str | None) -> Any:
    """A unary read: the leader first (fresh data), then the others; transport failures
    move on to the next member until the deadline. Returns the answer, whatever its code.

    Raises:
        DLedgerError: no member answered in time (its code from the last gRPC status).
    """
    deadline = members.deadline_ms()
    backoff = Backoff(members.clock, first_ms=20, max_ms=300)
    errors: list[str] = []
    status = "DEADLINE_EXCEEDED"
    while True:
        for target in members.read_targets(node_id):
            left_ms = deadline - members.clock.now_ms()
            if left_ms <= 0:
                break
            try:
                with DeferredCtrlC():  # a blocking call cut by Ctrl-C would hang close()
                    return getattr(members.stubs(target.address), method)(request, timeout=left_ms / 1000)
            except grpc.RpcError as exc:
                status, details = status_name(exc), status_details(exc)
                errors.append(f"{target.node_id}: {status} {details}")
                if read_decision(status, details) is Decision.FAIL:
                    raise DLedgerError(rpc_code(status), f"{method}: {errors[-1]}") from None
                members.forget(target)
        if not backoff.sleep(deadline):
            raise DLedgerError(
                rpc_code(status), f"{method} failed: " + ("; ".join(dict.fromkeys(errors[-3:])) or "timed out")
            )


def get_entries(members: Members, index: int, count: int, node_id: str | None) -> list[Entry]:
    """See `DLedgerClient.get`."""
    if count < 1:
        raise ValueError("count must be >= 1")
    out: list[Entry] = []
    while len(out) < count:
        want = min(count - len(out), MAX_GET_COUNT)
        request = pb.GetRequest(group=members.group, index=index + len(out), count=want)
        answer = read_unary(members, "Get", request, node_id)
        if answer.code == ResponseCode.INDEX_OUT_OF_RANGE and not out and node_id is None:
            answer = _committed_elsewhere(members, request, answer)
        if answer.code != ResponseCode.SUCCESS:
            if out and answer.code == ResponseCode.INDEX_OUT_OF_RANGE:
                break
            raise DLedgerError(answer.code, answer.message or f"get {request.index}")
        out.extend(entry_from_pb(e) for e in answer.entries)
        if not answer.entries or out[-1].index >= answer.committed_index:
            break
    return out


def _committed_elsewhere(members: Members, request: Any, first: Any) -> Any:
    """`first` said the index is not committed; a member that restarted knows its commit
    index only once a leader tells it (there may be none: helper A's "index 0 is not
    committed (commit -1)" while another member had committed 336). Ask each member once
    (within the deadline) and take the first that serves it; else `first`, naming what
    each member that answered has committed."""
    deadline = members.deadline_ms()
    commits = []
    for target in members.all():
        left_ms = deadline - members.clock.now_ms()
        if left_ms <= 0:
            break
        try:
            with DeferredCtrlC():
                answer = members.stubs(target.address).Get(request, timeout=left_ms / 1000)
        except grpc.RpcError:
            commits.append(f"{target.node_id} did not answer")
            continue
        if answer.code == ResponseCode.SUCCESS:
            return answer
        commits.append(f"{target.node_id} commit {answer.committed_index}")
    first.message = f"index {request.index} is not committed ({', '.join(commits)})"
    return first


def get_nearby(
    members: Members, ranges: list[tuple[int, int]], node_id: str | None
) -> list[list[Entry] | DLedgerError]:
    """The `get`s of several (index, count) ranges near each other with one Get over
    their union; one result (entries or error) per range, as `get_entries` would give.

    A range the union's answer does not settle (the member stopped at its byte or count
    limit before the range's end, or refused for a reason that concerns only the first
    index) is read on its own.
    """
    if len(ranges) == 1:
        return [_get_alone(members, *ranges[0], node_id)]
    lo = min(index for index, _ in ranges)
    hi = max(index + count for index, count in ranges)
    try:
        answer = read_unary(members, "Get", pb.GetRequest(group=members.group, index=lo, count=hi - lo), node_id)
    except DLedgerError as exc:
        return [DLedgerError(exc.code, exc.message) for _ in ranges]
    if answer.code != ResponseCode.SUCCESS:
        beyond = answer.code == ResponseCode.INDEX_OUT_OF_RANGE  # lo is not committed: nor is any later index
        text = answer.message or f"get {lo}"
        return [
            DLedgerError(answer.code, text) if beyond or index == lo else _get_alone(members, index, count, node_id)
            for index, count in ranges
        ]
    entries = [entry_from_pb(e) for e in answer.entries]
    if not entries or entries[0].index != lo or entries[-1].index != lo + len(entries) - 1:
        return [_get_alone(members, index, count, node_id) for index, count in ranges]
    committed = answer.committed_index
    at_commit = entries[-1].index >= committed
    out: list[list[Entry] | DLedgerError] = []
    for index, count in ranges:
        part = entries[index - lo : index - lo + count]
        if len(part) == count or (at_commit and part):
            out.append(part)
        elif at_commit:
            text = f"index {index} is not committed (commit {committed})"
            out.append(DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, text))
        else:
            rest = _get_alone(members, index + len(part), count - len(part), node_id)
            if isinstance(rest, list):
                out.append(part + rest)
            else:  # as get_entries: a later page beyond the commit ends the read
                out.append(part if part and rest.code == ResponseCode.INDEX_OUT_OF_RANGE else rest)
    return out


def _get_alone(members: Members, index: int, count: int, node_id: str | None) -> list[Entry] | DLedgerError:
    """`get_entries`, its error returned rather than raised."""
    try:
        return get_entries(members, index, count, node_id)
    except DLedgerError as exc:
        return exc


def member_metadata(members: Members, node_id: str | None) -> NodeMetadata:
    """See `DLedgerClient.metadata`."""
    answer = read_unary(members, "Metadata", pb.MetadataRequest(group=members.group), node_id)
    if answer.code != ResponseCode.SUCCESS:
        raise DLedgerError(answer.code, answer.message or "metadata")
    address = members.peers.get(answer.self_id, "")
    return metadata_from_pb(Target(answer.self_id, address), answer)


def member_status(members: Members) -> list[NodeMetadata]:
    """See `DLedgerClient.status`."""

    def ask(target: Target) -> Any:  # addressed: another member at that address refuses (UNKNOWN_MEMBER)
        request = pb.MetadataRequest(group=members.group, remote_id=target.node_id)
        return members.stubs(target.address).Metadata.future(request, timeout=members.timeout_s)

    with DeferredCtrlC():  # starting calls is not to be cut (see dledger.client.interrupts)
        calls = [(t, ask(t)) for t in members.all()]
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
            members.leader = target
    return out


def column_batch_from_pb(message: Any) -> ColumnBatch:
    """A `ColumnBatch` from a wire `dledger.v1.ColumnBatch`.

    The packed columns are varint-encoded on the wire, so `numpy.frombuffer` cannot map
    them; numpy reads them straight from the parsed containers (about 0.2 ms per 20,000
    values) and the bodies are copied once into the batch's bytearray.

    Raises:
        DLedgerError: INCONSISTENT_STATE when the columns do not fit together.
    """
    try:
        return columns_from_pb(message)
    except MalformedMessage as exc:
        raise DLedgerError(ResponseCode.INCONSISTENT_STATE, f"malformed column batch: {exc}") from None


def read_committed(
    members: Members,
    from_index: int,
    to_index: int | None,
    max_batch_bytes: int,
    follow: bool,
    node_id: str | None,
    max_batch_count: int = 0,
    layout: int = PACKED,
    retry: bool = True,
) -> Iterator[ColumnBatch]:
    """See `DLedgerClient.read_committed`. `layout`: the wire layout of the column
    batches (PACKED, or FIXED_WIDTH which readers map without decoding); `retry=False`:
    one pass over the targets, then DLedgerError, instead of retrying for `timeout_s`."""
    if from_index < 0:
        raise ValueError("from_index must be >= 0")
    next_index = from_index
    deadline = members.deadline_ms()
    backoff = Backoff(members.clock, first_ms=20, max_ms=500)
    errors: list[str] = []
    status = "DEADLINE_EXCEEDED"
    while to_index is None or next_index < to_index:
        for target in members.read_targets(node_id):
            request = pb.ReadCommittedRequest(
                group=members.group,
                from_index=next_index,
                max_batch_bytes=max(0, max_batch_bytes),
                max_batch_count=max(0, max_batch_count),
                follow=follow,
                layout=layout,
            )
            if to_index is not None:
                request.to_index = to_index
            with DeferredCtrlC():  # starting a call is not to be cut (see dledger.client.interrupts)
                call = members.stubs(target.address).ReadCommitted(request)
            try:
                for answer in call:
                    if answer.code != ResponseCode.SUCCESS:
                        text = answer.message or ResponseCode.of(answer.code).name
                        raise DLedgerError(answer.code, f"read from {target.node_id} at {next_index}: {text}")
                    batch = column_batch_from_pb(answer.batch)
                    if batch.count == 0:
                        continue  # nothing new (a keep-alive of a following stream)
                    next_index = int(batch.index[-1]) + 1
                    deadline = members.deadline_ms()
                    yield batch
                    if to_index is not None and next_index >= to_index:
                        return
                if not follow:
                    return  # the member sent everything up to its committed index
                errors.append(f"{target.node_id}: the stream ended")
            except grpc.RpcError as exc:
                status, details = status_name(exc), status_details(exc)
                errors.append(f"{target.node_id}: {status} {details}")
                if read_decision(status, details) is Decision.FAIL:
                    raise DLedgerError(rpc_code(status), f"ReadCommitted: {errors[-1]}") from None
            finally:
                call.cancel()
        if not retry or not backoff.sleep(deadline):
            raise DLedgerError(
                rpc_code(status), "ReadCommitted failed: " + ("; ".join(dict.fromkeys(errors[-3:])) or "timed out")
            )


def wait_for(members: Members, index: int, node_id: str | None) -> None:
    """Block until `index` is committed (a following ReadCommitted of one entry)."""
    for _ in read_committed(members, index, index + 1, 0, True, node_id, 1):
        return


def iterate_entries(
    members: Members, from_index: int, to_index: int | None, follow: bool, node_id: str | None
) -> Iterator[Entry]:
    """See `DLedgerClient.iterate`."""
    if from_index < 0:
        raise ValueError("from_index must be >= 0")
    next_index = from_index
    while to_index is None or next_index < to_index:
        want = ITERATE_PAGE if to_index is None else min(ITERATE_PAGE, to_index - next_index)
        try:
            entries = get_entries(members, next_index, want, node_id)
        except DLedgerError as exc:
            if exc.code != ResponseCode.INDEX_OUT_OF_RANGE:
                raise
            entries = []
        if entries:
            yield from entries
            next_index = entries[-1].index + 1
            continue
        if not follow:
            return
        wait_for(members, next_index, node_id)
