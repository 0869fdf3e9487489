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
from dledger.columns import ColumnBatch
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
    node_dir_of,
    open_store,
    plan_store,
    read_range,
)
from dledger.spark.options import parse_read_options
from dledger.spark.planning import DataLossError, IndexRange, LogBounds
from dledger.store import StoreConfig, checkpoint_committed
from dledger.transport.convert import FIXED_WIDTH

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


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under `root`: (size, mtime_ns, sha256)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            out[str(path.relative_to(root))] = (
                stat.st_size,
                stat.st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return out


def _live_like_store(tmp_path: Path) -> tuple[Path, int]:
    """A store as a running member leaves it: entries past the checkpoint's committed
    index, junk after the last entry, and a next data segment being created (0 bytes).
    Returns (node directory, committed index)."""
    node = small_store(tmp_path / "log", 400, data_file_size=16 << 10)  # 148-byte entries: several segments
    (node / "checkpoint").write_text("committedIndex=299\nendIndex=399\n")  # the last 100 not committed yet
    (node / "checkpoint.bak").unlink(missing_ok=True)
    data = sorted((node / "data").iterdir())
    last = data[-1]
    with open(last, "r+b") as fh:  # junk after the end of the log (a torn write)
        fh.seek(last.stat().st_size - 4096)
        fh.write(os.urandom(512))
    (node / "data" / f"{int(last.name) + last.stat().st_size:020d}").touch()  # being created
    return node, 299


def test_offline_reads_write_nothing_and_run_no_recovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dledger.store import mmap_store, recovery

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("offline reads must not open a store for writing or recover it")

    node, committed = _live_like_store(tmp_path)
    monkeypatch.setattr(recovery.Recovery, "run", refuse)
    monkeypatch.setattr(mmap_store.MmapLogStore, "open", refuse)
    before = _snapshot(node)
    store = open_store(node)
    try:
        bounds = bounds_of(store)
        assert bounds == LogBounds(0, committed, committed)
        plan = plan_store(store, 0, 10_000, True, 3, 8 << 10)
    finally:
        store.close()
    assert len(plan.ranges) > 1 and plan.ranges[-1].end == committed + 1
    rows = [
        r for rng in plan.ranges for r in _rows(LocalTask(str(node), rng.start, rng.end, True, True).read(64, 1 << 20))
    ]
    assert [r[0] for r in rows] == list(range(committed + 1))
    assert [r[3] for r in rows] == [str(k).encode().ljust(100, b".") for k in range(committed + 1)]
    meta = _rows(read_range(node, 0, committed + 1, False, True, 64, 1 << 20))
    assert [r[:3] for r in meta] == [r[:3] for r in rows]
    assert _snapshot(node) == before  # nothing written, created, extended or deleted


def test_offline_open_of_a_store_whose_committed_entry_is_missing(tmp_path: Path) -> None:
    node = small_store(tmp_path / "log", 20)
    (node / "checkpoint").write_text("committedIndex=25\nendIndex=25\n")
    with pytest.raises(DLedgerError, match=r"entry 25 is committed \(checkpoint\) but cannot be read"):
        open_store(node)


def test_offline_open_of_an_empty_or_reset_store(tmp_path: Path) -> None:
    node = tmp_path / "dledger-n0"
    node.mkdir()
    (node / "checkpoint").write_text("committedIndex=-1\nendIndex=-1\n")
    with open_store(node) as store:
        assert bounds_of(store) == LogBounds(-1, -1, -1) and bounds_of(store).earliest == 0
    (node / "data").mkdir()
    (node / "data" / "00000000000000000000").touch()  # the first segment, being created
    (node / "reset").write_text("beforeBeginIndex=41\nbeforeBeginTerm=3\n")
    with open_store(node) as store:
        bounds = bounds_of(store)
        assert bounds.earliest == bounds.latest == 42


# -- NOOP entries


def test_read_columns_report_noop_entries(tmp_path: Path) -> None:
    from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL
    from dledger.store.memory import MemoryLogStore

    with dledger.open_log(tmp_path / "log") as log:
        log.append_many([b"a", b"bb"])
        log.append_noop()
        log.append(b"c")
        batch = log.read_columns(0, 10, 1 << 20)
    memory = MemoryLogStore()
    memory.append_many([b"a", b"bb"])
    memory.append_noop()
    memory.append(b"c")
    for b in (batch, memory.read_columns(0, 10, 1 << 20)):
        assert list(b.magic) == [MAGIC_NORMAL, MAGIC_NORMAL, MAGIC_NOOP, MAGIC_NORMAL] and b.noop_count == 1
        assert [b.body(k) for k in range(b.count)] == [b"a", b"bb", b"", b"c"]
    meta = _rows(read_range(tmp_path / "log", 0, 4, False, True, 10, 1 << 20))
    assert [r[0] for r in meta] == [0, 1, 2, 3]
    assert list(next(read_range(tmp_path / "log", 0, 4, False, True, 10, 1 << 20)).magic) == [1, 1, 2, 1]
    assert list(slice_batch(batch, 1, 3).magic) == [MAGIC_NORMAL, MAGIC_NOOP]
    plain = ColumnBatch(batch.index, batch.term, batch.pos, batch.offsets, batch.bodies)
    assert list(plain.magic) == [MAGIC_NORMAL] * 4 and plain.noop_count == 0  # magic omitted: all normal


@pytest.mark.parametrize("layout", ["packed", "fixed"])
def test_column_batches_on_the_wire_keep_magic(layout: str) -> None:
    from dledger.transport.convert import PACKED, MalformedMessage, columns_from_pb, columns_to_pb, pb

    code = FIXED_WIDTH if layout == "fixed" else PACKED
    idx = np.arange(10, 14, dtype=np.int64)
    offsets = np.array([3, 4, 6, 6, 7], np.int32)  # a slice: offsets start past 0
    batch = ColumnBatch(idx, idx * 0 + 5, idx * 60, offsets, bytearray(b"xxxabbc"), np.array([1, 1, 2, 1], np.int32))
    wire = pb.ColumnBatch.FromString(columns_to_pb(batch, layout=code).SerializeToString())
    assert bool(wire.index) == (layout == "packed") and bool(wire.index_le) == (layout == "fixed")
    back = columns_from_pb(wire)
    assert list(back.index) == [10, 11, 12, 13] and list(back.term) == [5] * 4 and list(back.pos) == list(idx * 60)
    assert [back.body(k) for k in range(4)] == [b"a", b"bb", b"", b"c"] and list(back.magic) == [1, 1, 2, 1]
    normal = columns_to_pb(ColumnBatch(idx, idx, idx, np.arange(5, dtype=np.int32), bytearray(b"abcd")), layout=code)
    assert not normal.magic and not normal.magic_le  # all normal: no magic column on the wire
    assert list(columns_from_pb(normal).magic) == [1, 1, 1, 1]
    empty = columns_from_pb(columns_to_pb(ColumnBatch.empty(), layout=code))
    assert empty.count == 0 and list(empty.offsets) == [0]
    if layout == "fixed":
        wire.pos_le = wire.pos_le[:-8]
        with pytest.raises(MalformedMessage, match="column pos has 24 bytes, expected 32"):
            columns_from_pb(wire)
    else:
        wire.magic.append(1)
        with pytest.raises(MalformedMessage, match="magic"):
            columns_from_pb(wire)


class _ReadNode:
    """The part of a member the ReadCommitted handler uses, over a memory store."""

    def __init__(self, store: Any) -> None:
        from dledger.config import DLedgerConfig

        self.config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1")
        self.store = store
        self.leader_id = "n0"
        self.term = 1

    @property
    def committed_index(self) -> int:
        return int(self.store.end_index)

    def set_incoming_appends(self, probe: Any) -> None:
        pass  # serves reads only

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        count = min(max_count, self.committed_index - from_index + 1)
        return self.store.read_columns(from_index, max(count, 0), max_bytes)  # type: ignore[no-any-return]


def test_client_reads_fixed_width_batches_with_noops() -> None:
    pytest.importorskip("grpc")
    from dledger.client import DLedgerClient
    from dledger.store.memory import MemoryLogStore
    from dledger.transport.grpc_server import GrpcServer, ServiceLimits

    store = MemoryLogStore()
    store.append_many([b"k%d" % k for k in range(50)])
    store.append_noop()
    store.append_many([b"m%d" % k for k in range(30)])
    server = GrpcServer(_ReadNode(store), "127.0.0.1:0", ServiceLimits())  # type: ignore[arg-type]
    server.start()
    try:
        peers = f"n0-127.0.0.1:{server.port}"
        with DLedgerClient(peers, "g", timeout_s=10) as client:
            fixed = list(client.read_committed(5, 70, 64, node_id="n0", layout=FIXED_WIDTH, retry=False))
            packed = list(client.read_committed(5, 70, 64, node_id="n0"))
    finally:
        server.stop(0)
    assert len(fixed) > 2  # 64-byte batches
    for batches in (fixed, packed):
        assert _indexes(iter(batches)) == list(range(5, 70))
        magic = [int(m) for b in batches for m in b.magic]
        assert magic == [2 if i == 50 else 1 for i in range(5, 70)]
        assert [r[3] for r in _rows(iter(batches))][44:47] == [b"k49", b"", b"m0"]


def test_arrow_batches_leave_noops_out_unless_asked() -> None:
    _require_arrow()
    from dledger.spark.arrow import arrow_schema, record_batches

    idx = np.arange(4, dtype=np.int64)
    noop = ColumnBatch(
        idx, idx, idx, np.array([0, 1, 3, 3, 4], np.int32), bytearray(b"abbc"), np.array([1, 1, 2, 1], np.int32)
    )
    only_noop = ColumnBatch(idx[:1] + 9, idx[:1], idx[:1], np.zeros(2, np.int32), bytearray(), np.full(1, 2, np.int32))
    columns = ["index", "body", "magic"]
    schema = arrow_schema(columns)
    kept = list(record_batches([noop, only_noop, ColumnBatch.empty()], columns, schema))
    assert [rb.to_pydict() for rb in kept] == [{"index": [0, 1, 3], "body": [b"a", b"bb", b"c"], "magic": [1, 1, 1]}]
    every = list(record_batches([noop, only_noop], columns, schema, include_noops=True))
    assert [rb.column(2).to_pylist() for rb in every] == [[1, 1, 2, 1], [2]]


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
        self.node_begin: dict[str, int] = {}  # a node's own first index, where it differs (compacted alone)
        self.reads: list[tuple[str, int, int | None]] = []
        self.asked: list[str] = []
        self.batch_counts: list[int] = []
        self.read_modes: set[tuple[int, bool]] = set()
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
        self,
        from_index: int,
        to_index: int | None,
        max_batch_bytes: int,
        *,
        node_id: str | None = None,
        max_batch_count: int = 0,
        layout: int = 0,
        retry: bool = True,
    ) -> Iterator[ColumnBatch]:
        c = self.cluster
        c.batch_counts.append(max_batch_count)
        c.read_modes.add((layout, retry))
        node = node_id or c.leader
        assert node in self.nodes
        c.reads.append((node, from_index, to_index))
        if node in c.down:
            raise ConnectionError(f"{node} is down")
        begin = c.node_begin.get(node, c.begin)
        if from_index < begin:
            raise DLedgerError(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"{from_index} < {begin}")
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
        first = len(self.cluster.bodies)
        self.cluster.bodies += bodies
        return first

    def metadata(self, node_id: str | None = None) -> dict[str, Any]:
        c = self.cluster
        node = node_id or self.nodes[0]
        c.asked.append(node)
        return {
            "leader_id": c.leader,
            "node_id": node,
            "peers": {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"},
            "begin_index": c.node_begin.get(node, c.begin),
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
    assert cluster.read_modes == {(FIXED_WIDTH, False)}  # mapped without decoding; the next node is the retry


def test_live_read_skips_deleted_entries_only_when_allowed() -> None:
    cluster = FakeCluster(30)
    cluster.begin = 12  # retention deleted entries since the read was planned
    with pytest.raises(DataLossError, match="starts at index 12"):
        list(read_task(LiveTask(5, 20, "g", NODES, 1 << 20, True), cluster.factory))
    assert _indexes(read_task(LiveTask(5, 20, "g", NODES, 1 << 20, False), cluster.factory)) == list(range(12, 20))


def test_live_read_takes_from_another_node_what_one_node_compacted() -> None:
    """Members compact on their own: n0 dropped entries 0..19 that n1 and n2 still hold.
    The read took that for data loss of the whole log (a false failure, or with
    failOnDataLoss=false entries skipped that other members held)."""
    cluster = FakeCluster(40)
    cluster.node_begin["n0"] = 20
    for fail in (True, False):
        cluster.reads.clear()
        assert _indexes(read_task(LiveTask(5, 30, "g", NODES, 1 << 20, fail), cluster.factory)) == list(range(5, 30))
        assert cluster.reads == [("n0", 5, 30), ("n1", 5, 30)]


def test_live_read_decides_data_loss_at_the_lowest_first_index_of_every_node() -> None:
    cluster = FakeCluster(40)
    cluster.node_begin.update(n0=20, n1=12, n2=15)
    with pytest.raises(DataLossError, match="starts at index 12"):
        list(read_task(LiveTask(5, 30, "g", NODES, 1 << 20, True), cluster.factory))
    cluster.reads.clear()
    assert _indexes(read_task(LiveTask(5, 30, "g", NODES, 1 << 20, False), cluster.factory)) == list(range(12, 30))
    assert cluster.reads[-1] == ("n1", 12, 30)


def test_live_read_skips_nothing_while_a_node_that_may_hold_the_entries_is_down() -> None:
    cluster = FakeCluster(40)
    cluster.node_begin["n0"] = 20
    cluster.down |= {"n1", "n2"}
    with pytest.raises(ReadFailedError, match="n1 is down"):
        list(read_task(LiveTask(5, 30, "g", NODES, 1 << 20, False), cluster.factory))


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
    assert {t.fetch_max_entries for t in tasks} == {65_536}
    assert [t.nodes[0][0] for t in tasks] == ["n0", "n2", "n0"]
    assert all(t.nodes[-1][0] == "n1" for t in tasks)  # the leader is the last resort
    assert _indexes(i for t in tasks for i in read_task(t, cluster.factory)) == list(range(3, 25))
    assert set(cluster.batch_counts) == {65_536}  # fetchMaxEntries reaches the reads


def test_cluster_view_from_object_and_data_loss() -> None:
    class Meta:
        leader_id = ""
        peers = None
        begin_index, end_index, committed_index = 10, 30, 28

    view = cluster_view(Meta(), {"n0": "h:1"})
    assert view == ClusterView(None, {"n0": "h:1"}, LogBounds(10, 30, 28), None)
    # the job's addresses win (they may be client ports); the answer adds the others
    answered = cluster_view({"peers": {"n0": "peer:1", "n1": "peer:2"}, "leader_id": "n1"}, {"n0": "h:1"})
    assert answered.peers == {"n0": "h:1", "n1": "peer:2"} and answered.leader_id == "n1"
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


def test_append_all_keeps_the_order_and_reports_failures() -> None:
    cluster = FakeCluster(0)
    client = cluster.factory(PEERS, "g", 5.0)
    chunks = [[b"%d" % k for k in range(j, j + 7)] for j in range(0, 70, 7)]
    done = append_all(client, chunks, batch_entries=5, batch_bytes=1 << 20)
    assert cluster.bodies == [b"%d" % k for k in range(70)] and (done.first, done.last, done.count) == (0, 69, 70)

    calls = 0

    def failing(bodies: list[bytes]) -> int:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise DLedgerError(ResponseCode.LEADER_PENDING_FULL, "busy")
        return 0

    client.append_many = failing  # type: ignore[method-assign]
    with pytest.raises(DLedgerError, match="busy"):
        append_all(client, chunks, batch_entries=5, batch_bytes=1 << 20)
    assert calls == 3  # nothing is sent after a failure

    def broken_source() -> Iterator[list[bytes]]:
        yield [b"a"] * 6
        raise ValueError("body must not be null")

    calls = 0
    client.append_many = lambda bodies: len(bodies)  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="null"):
        append_all(client, broken_source(), batch_entries=5, batch_bytes=1 << 20)


def test_index_range_count() -> None:
    assert IndexRange(3, 3).count == 0 and IndexRange(3, 9).count == 6
