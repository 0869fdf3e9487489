"""The live path against a real 3-member cluster (`dledger server` processes on free
loopback ports): batch writes and reads through gRPC, reads spread over followers,
streaming reads with a restart, a streaming write, and a read surviving a dead member."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.server_cmds import server_command_line
from dledger.client import DLedgerClient
from dledger.clock import MonotonicClock
from dledger.record import Record
from dledger.spark.live import fetch_view, index_at_time
from dledger.spark.target import Target
from dledger.store import checkpoint_committed
from tests.e2e.harness import free_ports

pytestmark = pytest.mark.spark

GROUP = "spark"
SERVER_ARGS = ["--heartbeat-ms", "500", "--segment-size", "8MiB"]
ELECTION_S = 30.0
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running 3-member group with a leader (ports picked free; a start that lost a
    port race is retried on new ports)."""
    root = tmp_path_factory.mktemp("cluster")
    for attempt in range(3):
        group = LocalCluster(
            nodes=3,
            group=GROUP,
            host="127.0.0.1",
            base_port=0,
            ports=free_ports(3),
            store_base_dir=root / f"data{attempt}",
            extra_args=SERVER_ARGS,
            command_line=server_command_line,
            log_dir=root / f"logs{attempt}",
        )
        group.start_all()
        if group.wait_leader(ELECTION_S) is not None:
            break
        group.shutdown(5)
    else:
        pytest.fail(f"the cluster elected no leader; logs in {root}")
    yield group
    group.shutdown()


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll a condition (the server writes its checkpoint on its own schedule)."""
    clock = MonotonicClock()
    deadline = clock.now_ms() + int(timeout_s * 1000)
    while not check():
        assert clock.now_ms() < deadline, f"timed out waiting for {what}"
        clock.sleep_ms(50)


def committed(cluster: LocalCluster) -> int:
    with DLedgerClient(cluster.peers, GROUP, timeout_s=20) as client:
        return int(client.metadata().committed_index)


def read_bodies(spark: Any, cluster: LocalCluster, start: int, **options: str) -> list[bytes]:
    """The bodies of the entries from `start` on, in index order: every entry once (read
    with includeNoops, the indexes are contiguous), and the default read returns the same
    entries without the NOOPs a new leader may have appended."""
    reader = spark.read.format("dledger").option("peers", cluster.peers).option("group", GROUP)
    for key, value in {"startingIndex": str(start), **options}.items():
        reader = reader.option(key, value)
    rows = sorted(reader.option("includeNoops", "true").load().collect(), key=lambda r: r["index"])
    indexes = [r["index"] for r in rows]
    assert indexes == list(range(start, start + len(rows)))  # contiguous, no duplicates
    assert all(r["value"] == b"" for r in rows if r["magic"] == 2)
    end = start + len(rows)
    records = sorted(reader.option("endingIndex", str(end)).load().collect(), key=lambda r: r["index"])
    assert [(r["index"], r["value"]) for r in records] == [(r["index"], r["value"]) for r in rows if r["magic"] != 2]
    return [r["value"] for r in records]


def test_batch_write_then_read(spark: Any, cluster: LocalCluster) -> None:
    start = committed(cluster) + 1
    words = [f"w{k:05d}" for k in range(3000)]
    df = spark.createDataFrame([(w,) for w in words], "body string").repartition(3)
    df.write.format("dledger").option("peers", cluster.peers).option("group", GROUP).option("batchEntries", "256").mode(
        "append"
    ).save()
    bodies = read_bodies(spark, cluster, start)
    assert Counter(bodies) == Counter(w.encode() for w in words)  # each exactly once (no retries happened)
    # the same rows from the followers, in more tasks
    spread = read_bodies(spark, cluster, start, readFrom="follower", entriesPerPartition="700")
    assert spread == bodies
    df2 = spark.read.format("dledger").option("peers", cluster.peers).option("group", GROUP)
    assert df2.option("minPartitions", "4").load().rdd.getNumPartitions() == 4


def test_stream_read_with_restart(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    start = committed(cluster) + 1
    with DLedgerClient(cluster.peers, GROUP, timeout_s=20) as client:
        client.append_many([b"s%d" % k for k in range(100)])
        df = (
            spark.readStream.format("dledger")
            .option("peers", cluster.peers)
            .option("group", GROUP)
            .option("startingIndex", str(start))
            .option("maxEntriesPerTrigger", "40")
            .load()
        )

        def run() -> Any:
            query = (
                df.writeStream.format("parquet")
                .option("path", str(tmp_path / "out"))
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            assert query.awaitTermination(TIMEOUT_S)
            return query

        run()
        client.append_many([b"s%d" % k for k in range(100, 150)])
        run()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    indexes = sorted(r["index"] for r in rows)
    assert len(set(indexes)) == len(indexes) and indexes[0] >= start  # no entry twice (NOOPs are left out)
    assert sorted(r["value"] for r in rows) == sorted(b"s%d" % k for k in range(150))


def test_stream_write_copies_a_local_log_into_the_cluster(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    with dledger.open_log(tmp_path / "local") as log:
        log.append_many([b"copy-%d" % k for k in range(500)])
    start = committed(cluster) + 1
    source = spark.readStream.format("dledger").option("startingIndex", "earliest").load(str(tmp_path / "local"))
    query = (
        source.select("value")
        .writeStream.format("dledger")
        .option("peers", cluster.peers)
        .option("group", GROUP)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S)
    assert Counter(read_bodies(spark, cluster, start)) == Counter(b"copy-%d" % k for k in range(500))


def test_read_survives_a_dead_member(spark: Any, cluster: LocalCluster) -> None:
    start = committed(cluster) + 1
    with DLedgerClient(cluster.peers, GROUP, timeout_s=20) as client:
        client.append_many([b"d%d" % k for k in range(200)])
        leader = client.metadata().leader_id
    victim = next(m for m in cluster.members if m != leader)
    cluster.kill(victim)
    try:
        bodies = read_bodies(spark, cluster, start, readFrom="follower", minPartitions="4", rpcTimeoutMs="2000")
        assert bodies == [b"d%d" % k for k in range(200)]
    finally:
        cluster.start(victim)


def test_offline_read_of_a_running_members_directory(spark: Any, cluster: LocalCluster) -> None:
    """A member's store directory can be read while the member writes it: up to the
    committed index in its `checkpoint`, the same entries the cluster serves."""
    with DLedgerClient(cluster.peers, GROUP, timeout_s=20) as client:
        last = client.append_many([b"live-%d" % k for k in range(300)]) + 299
    node_dir = cluster.store_base_dir / "dledger-n0"
    # the member rewrites `checkpoint` every checkpoint interval: wait for it to cover `last`
    wait_until(lambda: checkpoint_committed(node_dir) >= last, 60, f"n0's checkpoint to reach {last}")
    local = sorted(spark.read.format("dledger").load(str(node_dir)).collect(), key=lambda r: r["index"])
    assert local and [r["index"] for r in local] == list(range(local[0]["index"], local[-1]["index"] + 1))
    remote = spark.read.format("dledger").option("peers", cluster.peers).option("group", GROUP)
    served = remote.option("startingIndex", str(local[0]["index"])).load().collect()
    by_index = {r["index"]: (r["term"], r["pos"], r["value"]) for r in served}
    assert all(by_index[r["index"]] == (r["term"], r["pos"], r["value"]) for r in local)


def write_one_task(df: Any, cluster: LocalCluster, values: tuple[bytes, ...]) -> tuple[int, list[Record]]:
    """Write `df` in one task; the first index it could take, and the records after it
    whose value is one of `values` (read back through the client), in log order."""
    with DLedgerClient(cluster.peers, GROUP, timeout_s=30) as client:
        start = client.metadata().committed_index + 1
        df.coalesce(1).write.format("dledger").mode("append").option("peers", cluster.peers).option(
            "group", GROUP
        ).save()
        return start, [r for r in client.get_records(start, 10) if r.value in values]


def test_records_written_by_the_sink_read_back_with_kafka_columns(spark: Any, cluster: LocalCluster) -> None:
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    df = spark.createDataFrame(
        [("a", b"k", when, [("h", b"1")]), ("b", None, None, None)],
        "value string, key binary, timestamp timestamp, headers array<struct<key: string, value: binary>>",
    )
    start, records = write_one_task(df, cluster, (b"a", b"b"))
    assert [(r.value, r.key, r.headers) for r in records] == [(b"a", b"k", (("h", b"1"),)), (b"b", None, ())]
    assert records[0].timestamp == int(when.timestamp() * 1000) and records[1].timestamp is not None
    kafka = (
        "key binary, value binary, timestamp timestamp, headers array<struct<key: string, value: binary>>, index long"
    )
    read = spark.read.format("dledger").schema(kafka).option("peers", cluster.peers).option("group", GROUP)
    rows = {r["index"]: r for r in read.option("startingIndex", str(start)).load().collect()}
    assert rows[records[0].index]["key"] == b"k" and rows[records[0].index]["value"] == b"a"
    assert [(h["key"], h["value"]) for h in rows[records[0].index]["headers"]] == [("h", b"1")]
    assert rows[records[1].index]["key"] is None


def test_spark_times_with_microseconds_are_written_to_the_millisecond(spark: Any, cluster: LocalCluster) -> None:
    """Spark's timestamps carry microseconds: the sink writes the millisecond they fall in
    (rows with key and time and no headers go through the compiled encoder)."""
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, 678_901, tzinfo=datetime.UTC)
    df = spark.createDataFrame(
        [("m1", b"k", when), ("m2", None, when)], "value string, key binary, timestamp timestamp"
    )
    _, records = write_one_task(df, cluster, (b"m1", b"m2"))
    assert [(r.value, r.key, r.timestamp) for r in records] == [
        (b"m1", b"k", 1_704_164_645_678),
        (b"m2", None, 1_704_164_645_678),
    ]


def test_reads_from_a_time(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    """startingTimestamp / endingTimestamp against the cluster: the search probes the
    leader (binary search), batch and stream reads start there."""
    base = 4_000_000_000_000  # after every record the other tests wrote (2096)
    with DLedgerClient(cluster.peers, GROUP, timeout_s=30) as client:
        client.append_many([b"plain-before"] * 3)
        first = client.append_records([Record(b"t%03d" % k, timestamp=base + 10 * k) for k in range(200)]).first_index
        wait_until(lambda: committed(cluster) >= first + 199, 30, "the records to commit")
        view = fetch_view(Target(None, cluster.peers, GROUP), client)
        assert index_at_time(client, view, base + 55) == first + 6
        assert index_at_time(client, view, base) == first
        assert index_at_time(client, view, base + 10_000) == view.bounds.latest  # none that late
    reader = spark.read.format("dledger").option("peers", cluster.peers).option("group", GROUP)
    rows = reader.option("startingTimestamp", str(base + 995)).option("endingTimestamp", str(base + 1500)).load()
    assert sorted(r["value"] for r in rows.collect()) == [b"t%03d" % k for k in range(100, 150)]
    stream = (
        spark.readStream.format("dledger")
        .option("peers", cluster.peers)
        .option("group", GROUP)
        .option("startingTimestamp", str(base + 1900))
        .load()
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S) and query.exception() is None
    values = [r["value"] for r in sorted(spark.read.parquet(str(tmp_path / "out")).collect(), key=lambda r: r["index"])]
    assert values == [b"t%03d" % k for k in range(190, 200)]
