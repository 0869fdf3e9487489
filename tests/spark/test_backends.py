"""The Spark source's back-ends without Spark: offline store reads (golden stores and
stores written by the embedded API), Arrow conversion, and the live path against a fake
client (failover, resume without duplicates, metadata, batched appends)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dledger
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import parse_peers
from dledger.spark.live import (
    ClusterView,
    LiveTask,
    ReadFailedError,
    append_all,
    cluster_view,
    fetch_view_once,
    plan_batch_read,
    read_task,
    slice_batch,
)
from dledger.spark.local import (
    LocalTask,
    StoreNotFoundError,
    bounds_of,
    checkpoint_committed,
    node_dir_of,
    open_store,
    plan_store,
    read_range,
)
from dledger.spark.options import parse_read_options
from dledger.spark.planning import DataLossError, IndexRange, LogBounds
from dledger.store.base import ColumnBatch
from dledger.store.mmap_store import StoreConfig

from .conftest import SCENARIOS, committed_entries, golden_root, small_store

pytestmark = pytest.mark.unit


def _rows(batches: Iterator[ColumnBatch]) -> list[tuple[int, int, int, bytes]]:
    out = []
    for b in batches:
        for k in range(b.count):
            out.append((int(b.index[k]), int(b.term[k]), int(b.pos[k]), b.body(k)))
    return out


# -- offline


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_read_range_returns_the_committed_entries(scenario: str) -> None:
    node = node_dir_of(golden_root() / scenario)  # a storeBaseDir holding one dledger-n0
    store = open_store(node)
    try:
        bounds = bounds_of(store)
        plan = plan_store(store, bounds.earliest, bounds.latest, True, 2, 1 << 20)
    finally:
        store.close()
    rows = []
    for rng in plan.ranges:
        rows += _rows(LocalTask(str(node), rng.start, rng.end, True, True).read(7, 1 << 20))
    expected = committed_entries(scenario)
    assert [(r[0], r[1], r[2]) for r in rows] == [(e["index"], e["term"], e["pos"]) for e in expected]
    assert [hashlib.sha256(r[3]).hexdigest() for r in rows] == [e["bodySha256"] for e in expected]


def test_golden_segments_plan_one_task_each() -> None:
    store = open_store(node_dir_of(golden_root() / "multi-term-rolled"))
    try:
        plan = plan_store(store, 0, 146, True, 2, 1 << 20)
    finally:
        store.close()
    expected = committed_entries("multi-term-rolled")
    files = sorted({e["dataFile"] for e in expected})
    assert len(plan.ranges) == len(files)
    firsts = [min(e["index"] for e in expected if e["dataFile"] == f) for f in files]
    assert [r.start for r in plan.ranges] == firsts


def test_bodyless_read_uses_the_index_file(tmp_path: Path) -> None:
    node = small_store(tmp_path / "log", 3000)  # index segments of 1024 units
    with_bodies = _rows(read_range(node, 10, 2500, True, True, 999, 1 << 20))
    meta = _rows(read_range(node, 10, 2500, False, True, 999, 1 << 20))
    assert [r[:3] for r in meta] == [r[:3] for r in with_bodies]
    assert all(r[3] == b"" for r in meta)
    assert with_bodies[0][3].startswith(b"10.")


def test_data_loss_on_head_deleted() -> None:
    node = node_dir_of(golden_root() / "head-deleted")
    with pytest.raises(DataLossError, match="starts at index 58"):
        list(read_range(node, 10, 70, True, True, 100, 1 << 20))
    rows = _rows(read_range(node, 10, 70, True, False, 100, 1 << 20))
    assert [r[0] for r in rows] == list(range(58, 70))


def test_missing_store_and_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match="is not a DLedger store"):
        node_dir_of(tmp_path / "nope")
    node = small_store(tmp_path / "log", 10)
    assert checkpoint_committed(node) == 9
    (node / "checkpoint").unlink()  # Java's shutdown race can leave only checkpoint.bak
    (node / "checkpoint.bak").write_text("committedIndex=7\nendIndex=9\n")
    assert checkpoint_committed(node) == 7
    (node / "checkpoint.bak").write_text("committedIndex=12\nendIndex=9\n")  # DLedger #316
    assert checkpoint_committed(node) == 9
    (node / "checkpoint.bak").unlink()
    assert checkpoint_committed(node) == -1


def test_reads_follow_a_log_being_written(tmp_path: Path) -> None:
    config = StoreConfig(data_file_size=64 << 10, index_file_size=32 * 1024, checkpoint_interval_ms=0)
    with dledger.open_log(tmp_path / "log", config) as log:
        seen = -1
        for round_ in range(20):
            log.append_many([b"%d" % (round_ * 50 + k) for k in range(50)])
            log.flush()
            log.write_checkpoint()
            committed = checkpoint_committed(tmp_path / "log")
            assert committed == round_ * 50 + 49
            rows = _rows(read_range(tmp_path / "log", seen + 1, committed + 1, True, True, 1000, 1 << 20))
            assert [r[0] for r in rows] == list(range(seen + 1, committed + 1))
            assert [r[3] for r in rows] == [b"%d" % i for i in range(seen + 1, committed + 1)]
            seen = committed


def test_read_past_committed_is_refused(tmp_path: Path) -> None:
    node = small_store(tmp_path / "log", 10)
    with pytest.raises(DataLossError, match="store now ends at 9"):
        list(read_range(node, 0, 20, True, True, 100, 1 << 20))


def test_open_retries_a_segment_being_created() -> None:
    from dledger.clock import ManualClock
    from dledger.codes import CorruptStoreError
    from dledger.spark.local import _retrying

    clock = ManualClock()
    failures = [CorruptStoreError("data/00000000000000004096", 0, "last segment is short (0 of 4096 bytes)")] * 2

    def attempt() -> str:
        if failures:
            raise failures.pop()
        return "opened"

    assert _retrying(attempt, clock) == "opened" and clock.now_ms() == 150
    with pytest.raises(CorruptStoreError, match="gap"):
        _retrying(lambda: (_ for _ in ()).throw(CorruptStoreError("f", 0, "segment gap")), clock)


# -- arrow


def _require_arrow() -> Any:
    if importlib.util.find_spec("pyarrow") is None:
        if os.environ.get("CI"):
            pytest.fail("pyarrow is not installed")
        pytest.skip("pyarrow is not installed")
    import pyarrow as pa

    return pa


def test_arrow_batches_are_views_of_the_columns(tmp_path: Path) -> None:
    pa = _require_arrow()
    from dledger.spark.arrow import arrow_schema, to_record_batch

    node = small_store(tmp_path / "log", 50)
    batch = next(read_range(node, 5, 50, True, True, 100, 1 << 20))
    schema = arrow_schema(["body", "index"], ["body", "Index"])
    rb = to_record_batch(batch, ["body", "index"], schema)
    assert rb.schema == schema and rb.num_rows == 45
    assert rb.column(1).to_pylist() == list(range(5, 50))
    assert rb.column(0)[0].as_py() == batch.body(0)
    assert rb.column(0).buffers()[2].address == pa.py_buffer(batch.bodies).address  # zero-copy


# -- live path, against a fake cluster


class FakeCluster:
    """Three nodes holding the same log; each node has its own committed index, can be
    down, or can fail after serving some entries."""

    def __init__(self, entries: int, leader: str = "n0") -> None:
        self.bodies = [f"e{k}".encode() for k in range(entries)]
        self.leader = leader
        self.committed = {"n0": entries - 1, "n1": entries - 1, "n2": entries - 1}
        self.down: set[str] = set()
        self.fail_after: dict[str, int] = {}
        self.begin = 0
        self.reads: list[tuple[str, int, int | None]] = []
        self.asked: list[str] = []
        self.closed = 0

    def factory(self, peers: str, group: str, timeout_s: float) -> FakeClient:
        assert group == "g" and timeout_s > 0
        return FakeClient(self, list(parse_peers(peers)))


class FakeClient:
    """The `LedgerClient` interface over a FakeCluster."""

    def __init__(self, cluster: FakeCluster, nodes: list[str]) -> None:
        self.cluster = cluster
        self.nodes = nodes

    def read_committed(
        self, from_index: int, to_index: int | None, max_batch_bytes: int, *, node_id: str | None = None
    ) -> Iterator[ColumnBatch]:
        c = self.cluster
        node = node_id or c.leader
        assert node in self.nodes
        c.reads.append((node, from_index, to_index))
        if node in c.down:
            raise ConnectionError(f"{node} is down")
        if from_index < c.begin:
            raise DLedgerError(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"{from_index} < {c.begin}")
        stop = min(to_index if to_index is not None else 1 << 62, c.committed[node] + 1)
        served = 0
        index = from_index
        while index < stop:
            hi = min(stop, index + 4)
            if node in c.fail_after and served >= c.fail_after[node]:
                raise ConnectionError(f"{node} dropped the stream")
            bodies = c.bodies[index:hi]
            offsets = np.cumsum([0, *map(len, bodies)]).astype(np.int32)
            idx = np.arange(index, hi, dtype=np.int64)
            yield ColumnBatch(idx, idx * 0 + 1, idx * 100, offsets, bytearray(b"".join(bodies)))
            served += hi - index
            index = hi

    def append_many(self, bodies: list[bytes]) -> int:
        self.cluster.bodies += bodies
        return len(self.cluster.bodies) - 1

    def metadata(self, node_id: str | None = None) -> dict[str, Any]:
        c = self.cluster
        node = node_id or self.nodes[0]
        c.asked.append(node)
        return {
            "leader_id": c.leader,
            "node_id": node,
            "peers": {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"},
            "begin_index": c.begin,
            "end_index": len(c.bodies) - 1,
            "committed_index": c.committed[node],
        }

    def close(self) -> None:
        self.cluster.closed += 1


PEERS = "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3"
NODES = (("n0", "127.0.0.1:1"), ("n1", "127.0.0.1:2"), ("n2", "127.0.0.1:3"))


def _indexes(batches: Iterator[ColumnBatch]) -> list[int]:
    return [int(i) for b in batches for i in b.index]


def test_live_read_from_one_node() -> None:
    cluster = FakeCluster(30)
    task = LiveTask(3, 17, "g", NODES, 1 << 20, True)
    rows = _rows(read_task(task, cluster.factory))
    assert [r[0] for r in rows] == list(range(3, 17))
    assert [r[3] for r in rows] == cluster.bodies[3:17]
    assert {n for n, _, _ in cluster.reads} == {"n0"} and cluster.closed == 1


def test_live_read_skips_deleted_entries_only_when_allowed() -> None:
    cluster = FakeCluster(30)
    cluster.begin = 12  # retention deleted entries since the read was planned
    with pytest.raises(DataLossError, match="starts at index 12"):
        list(read_task(LiveTask(5, 20, "g", NODES, 1 << 20, True), cluster.factory))
    assert _indexes(read_task(LiveTask(5, 20, "g", NODES, 1 << 20, False), cluster.factory)) == list(range(12, 20))


def test_live_read_fails_over_and_resumes_without_duplicates() -> None:
    cluster = FakeCluster(40)
    cluster.down.add("n0")
    cluster.fail_after["n1"] = 8  # serves 8 entries, then the stream breaks
    task = LiveTask(2, 30, "g", NODES, 1 << 20, True)
    assert _indexes(read_task(task, cluster.factory)) == list(range(2, 30))
    assert cluster.reads == [("n0", 2, 30), ("n1", 2, 30), ("n2", 10, 30)]


def test_live_read_continues_where_a_follower_is_behind() -> None:
    cluster = FakeCluster(40)
    cluster.committed["n1"] = 19  # follower has committed less: the leader serves the rest
    task = LiveTask(0, 40, "g", (("n1", "127.0.0.1:2"), ("n0", "127.0.0.1:1")), 1 << 20, True)
    assert _indexes(read_task(task, cluster.factory)) == list(range(40))
    assert cluster.reads == [("n1", 0, 40), ("n0", 20, 40)]


def test_live_read_fails_when_every_node_fails() -> None:
    cluster = FakeCluster(10)
    cluster.down |= {"n0", "n1", "n2"}
    with pytest.raises(ReadFailedError, match=r"entries \[0, 10\) of group g could not be read: n0"):
        list(read_task(LiveTask(0, 10, "g", NODES, 1 << 20, True), cluster.factory))


def test_slice_batch() -> None:
    idx = np.arange(5, dtype=np.int64)
    batch = ColumnBatch(idx, idx, idx, np.array([0, 1, 3, 6, 10, 15], np.int32), bytearray(b"abbcccddddeeeee"))
    head = slice_batch(batch, 0, 2)
    assert [head.body(k) for k in range(head.count)] == [b"a", b"bb"]
    mid = slice_batch(batch, 2, 4)
    assert [mid.body(k) for k in range(mid.count)] == [b"ccc", b"dddd"] and list(mid.index) == [2, 3]


def test_metadata_view_and_batch_plan() -> None:
    cluster = FakeCluster(25, leader="n1")
    cluster.committed["n0"] = 20  # n0 answers first, is behind: the leader is asked too
    target = parse_read_options({"peers": PEERS, "group": "g"}, False).target
    view = fetch_view_once(target, cluster.factory, 5.0)
    assert view.leader_id == "n1" and view.bounds == LogBounds(0, 24, 24) and cluster.asked == ["n0", "n1"]
    cluster.committed["n0"] = 24
    opts = parse_read_options(
        {"peers": PEERS, "group": "g", "entriesPerPartition": "10", "readFrom": "follower", "startingIndex": "3"},
        False,
    )
    tasks = plan_batch_read(view, opts, min_partitions=2)
    assert [(t.start, t.end) for t in tasks] == [(3, 11), (11, 18), (18, 25)]
    assert [t.nodes[0][0] for t in tasks] == ["n0", "n2", "n0"]
    assert all(t.nodes[-1][0] == "n1" for t in tasks)  # the leader is the last resort
    assert _indexes(i for t in tasks for i in read_task(t, cluster.factory)) == list(range(3, 25))


def test_cluster_view_from_object_and_data_loss() -> None:
    class Meta:
        leader_id = ""
        peers = None
        begin_index, end_index, committed_index = 10, 30, 28

    view = cluster_view(Meta(), {"n0": "h:1"})
    assert view == ClusterView(None, {"n0": "h:1"}, LogBounds(10, 30, 28), None)
    opts = parse_read_options({"peers": "n0-h:1", "startingIndex": "5"}, False)
    with pytest.raises(DataLossError):
        plan_batch_read(view, opts, 1)


def test_append_all_batches_by_count_and_bytes() -> None:
    cluster = FakeCluster(5)
    client = cluster.factory(PEERS, "g", 5.0)
    calls: list[int] = []
    append = client.append_many

    def counting(bodies: list[bytes]) -> int:
        calls.append(len(bodies))
        return append(bodies)

    client.append_many = counting  # type: ignore[method-assign]
    chunks = [[b"x" * 10] * 7, [b"y" * 10] * 5]
    done = append_all(client, chunks, batch_entries=4, batch_bytes=25)
    assert calls == [2, 2, 2, 2, 2, 2]
    assert (done.first, done.last, done.count) == (5, 16, 12)
    assert append_all(client, [], 4, 25).count == 0


def test_index_range_count() -> None:
    assert IndexRange(3, 3).count == 0 and IndexRange(3, 9).count == 6
