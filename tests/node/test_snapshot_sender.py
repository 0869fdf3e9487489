"""The leader's install sender (NodeSnapshots._stream): an empty first chunk at the
start offset, the data in chunks with their CRCs, and a resume where the follower says
its `install_tmp/` ends (once), never from an offset outside the file."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from dledger.codes import ResponseCode
from dledger.raft.messages import InstallSnapshotRequest, InstallSnapshotResponse, InstallSnapshotStream
from tests.node.conftest import NodeCluster, wait_until
from tests.node.snapmachine import SumMachine
from tests.node.test_snapshots import SNAP, append_values


class ScriptedTransport:
    """Takes whole streams and answers them from a script."""

    def __init__(self, answers: list[InstallSnapshotResponse]) -> None:
        self.answers = answers
        self.streams: list[list[InstallSnapshotRequest]] = []

    def send(self, target_id: str, request: object) -> Future[object]:
        assert isinstance(request, InstallSnapshotStream) and target_id == "n1"
        self.streams.append(list(request.chunks))
        answer: Future[object] = Future()
        answer.set_result(self.answers.pop(0))
        return answer


@pytest.mark.parametrize(
    ("first_answer", "streams"),
    [
        (InstallSnapshotResponse(code=ResponseCode.INSTALL_SNAPSHOT_ERROR, next_offset=5), 2),  # resumes at 5
        (InstallSnapshotResponse(code=ResponseCode.INSTALL_SNAPSHOT_ERROR, next_offset=0), 1),  # nothing to resume
        (InstallSnapshotResponse(code=ResponseCode.INSTALL_SNAPSHOT_ERROR, next_offset=10**9), 1),  # past the end
        (InstallSnapshotResponse(code=ResponseCode.EXPIRED_TERM, next_offset=5), 1),  # not a resume
    ],
)
def test_the_sender_resumes_once_where_the_follower_says(
    cluster_factory: Callable[..., NodeCluster], first_answer: InstallSnapshotResponse, streams: int
) -> None:
    cluster = cluster_factory(1, machine_factory=SumMachine, **SNAP)
    node = cluster.leader()
    append_values(node, range(25))
    snapshots = node.snapshots
    assert snapshots is not None
    wait_until(lambda: snapshots.last_index >= 19, what="a snapshot")
    snapshots.chunk_bytes = 4
    done = InstallSnapshotResponse(code=ResponseCode.SUCCESS, next_offset=999)
    transport = ScriptedTransport([first_answer, done])
    node.transport = transport  # type: ignore[assignment]
    request = InstallSnapshotRequest(**node.core.member_state.request_header("n1"), term=node.term)
    answer = snapshots._stream("n1", request)
    assert len(transport.streams) == streams
    assert answer is (done if streams == 2 else first_answer)
    [newest] = snapshots.store.snapshots(limit=1)
    data = Path(newest.data_path).read_bytes()
    for stream, start in zip(transport.streams, (0, 5), strict=False):
        probe, *rest = stream
        assert (probe.offset, probe.data) == (start, b"")  # tells the follower where this stream starts
        assert b"".join(c.data for c in rest) == data[start:]
        assert all(c.chunk_crc32 == zlib.crc32(c.data) and len(c.data) <= 4 for c in rest)
        assert {(c.total_size, c.total_crc32, c.last_included_index) for c in stream} == {
            (len(data), zlib.crc32(data), newest.index)
        }
