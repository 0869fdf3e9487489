"""The exactly-once sink against a real 3-member cluster (`dledger server` processes on
loopback) and real Spark: a batch job whose tasks fail after writing a prefix and are
retried (a driver of its own, `local[2,4]`), two attempts of one partition writing at
once, and a stream whose leader and driver are killed mid-batch and which is restarted
from its checkpoint. Each checks the log: every row exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

import dledger
from dledger.cli.cluster_runner import LocalCluster
from dledger.client import DLedgerClient
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import record_of, record_stamp
from dledger.spark.exactly_once import TaskIds
from dledger.spark.live import default_client_factory
from dledger.spark.options import parse_write_options
from dledger.spark.sink import AppendedMessage, write_task
from dledger.spark.write_schema import write_columns_of
from tests.spark import test_live
from tests.spark.conftest import REPO
from tests.spark.test_live import GROUP, committed, wait_until

pytestmark = pytest.mark.spark

cluster = test_live.cluster  # the module-scoped 3-member group fixture

JOB_TIMEOUT_S = 600


def log_values(cluster: LocalCluster, start: int) -> list[bytes]:
    """The values of the committed entries from `start` on (NOOPs left out)."""
    with DLedgerClient(cluster.peers, GROUP, timeout_s=30) as client:
        end = client.metadata().committed_index
        out: list[bytes] = []
        index = start
        while index <= end:
            entries = client.get_records(index, min(1000, end - index + 1))
            out.extend(r.value for r in entries)
            index += len(entries)
    return out


def log_stamps(cluster: LocalCluster, start: int) -> set[tuple[int, int]]:
    """The (producer id, epoch) of every stamped record from `start` on."""
    with DLedgerClient(cluster.peers, GROUP, timeout_s=30) as client:
        end = client.metadata().committed_index
        out: set[tuple[int, int]] = set()
        index = start
        while index <= end:
            entries = client.get(index, min(1000, end - index + 1))
            for entry in entries:
                stamp = record_stamp(entry.body) if entry.magic == MAGIC_RECORD else None
                if stamp is not None:
                    out.add((stamp[0], stamp[1]))
            index += len(entries)
    return out


def run_job(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a driver of `tests.spark.sink_jobs` in a process group of its own."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.sink_jobs", *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_a_batch_job_with_task_retries_writes_every_row_once(cluster: LocalCluster, tmp_path: Path) -> None:
    rows = 4000
    start = committed(cluster) + 1
    marks = tmp_path / "marks"
    marks.mkdir()
    job = run_job(["retry", cluster.peers, GROUP, str(rows), str(marks), "true"], tmp_path / "job.log")
    assert job.wait(JOB_TIMEOUT_S) == 0, (tmp_path / "job.log").read_text(errors="replace")[-4000:]
    # partitions 1 and 3 failed once after 3 requests of their rows were in the log, then ran again
    marked = sorted(p.name for p in marks.iterdir())
    assert marked == ["p0-a0", "p1-a0", "p1-a0-failed", "p1-a1", "p2-a0", "p3-a0", "p3-a0-failed", "p3-a1"]
    values = Counter(v for v in log_values(cluster, start) if v.startswith(b"v"))
    assert values == Counter(b"v%d" % k for k in range(rows))  # every row, none twice


def _batches(values: list[bytes], per: int) -> list[Any]:
    return [
        pa.record_batch([pa.array(values[lo : lo + per], pa.binary())], names=["value"])
        for lo in range(0, len(values), per)
    ]


def test_two_attempts_of_one_partition_at_once_write_each_row_once(cluster: LocalCluster) -> None:
    """A speculative duplicate: two attempts of the same task (same job id, partition)
    write concurrently, through the same code a Spark task runs."""
    options = parse_write_options({"peers": cluster.peers, "group": GROUP, "batchEntries": "64"}, False)
    columns = write_columns_of([("value", "binary")])
    values = [b"spec-%d" % k for k in range(3000)]
    start = committed(cluster) + 1
    messages: list[AppendedMessage] = []

    def attempt(number: int) -> None:
        ids = TaskIds("job-speculative", -1, 0, attempt=number)
        messages.append(write_task(options, default_client_factory, columns, iter(_batches(values, 500)), ids))

    threads = [threading.Thread(target=attempt, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(v for v in log_values(cluster, start) if v.startswith(b"spec-")) == Counter(values)
    assert [m.count for m in messages] == [3000, 3000]
    assert sum(m.appended for m in messages) == 3000  # the others were answered as duplicates
    # a third attempt after both: nothing appended, the same rows reported
    late = write_task(
        options, default_client_factory, columns, iter(_batches(values, 700)), TaskIds("job-speculative", -1, 0, 2)
    )
    assert (late.count, late.appended) == (3000, 0)
    assert Counter(v for v in log_values(cluster, start) if v.startswith(b"spec-")) == Counter(values)


def test_a_stream_killed_mid_batch_and_restarted_writes_every_row_once(cluster: LocalCluster, tmp_path: Path) -> None:
    """The driver is SIGKILLed (with its JVM and workers) mid-batch after the leader was
    killed mid-batch; the query restarts from its checkpoint and finishes."""
    rows = 3000
    with dledger.open_log(tmp_path / "source") as local:
        local.append_many([b"s%d" % k for k in range(rows)])
    start = committed(cluster) + 1
    args = [cluster.peers, GROUP, str(tmp_path / "source"), str(tmp_path / "checkpoint")]
    driver = run_job(["stream", *args, "run"], tmp_path / "run.log")
    victim = ""
    try:
        wait_until(lambda: committed(cluster) >= start + 500, JOB_TIMEOUT_S, "the stream's first batches")
        leader = cluster.find_leader()
        assert leader is not None
        victim = leader[0]
        cluster.kill(victim)  # mid-batch: batches are 300 rows in requests of 20
        at_kill = committed(cluster)
        wait_until(lambda: committed(cluster) >= at_kill + 300, JOB_TIMEOUT_S, "writes through the new leader")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver dies mid-batch, its JVM and workers with it
        driver.wait()
        if victim:
            cluster.start(victim)
    assert cluster.wait_leader(60) is not None
    assert len(log_values(cluster, start)) < rows, "the first driver finished: no restart was tested"
    finish = run_job(["stream", *args, "finish"], tmp_path / "finish.log")
    assert finish.wait(JOB_TIMEOUT_S) == 0, (tmp_path / "finish.log").read_text(errors="replace")[-4000:]
    values = Counter(v for v in log_values(cluster, start) if v.startswith(b"s"))
    assert values == Counter(b"s%d" % k for k in range(rows))
    # one producer per partition for the whole query, each micro-batch a new epoch of it
    # (not a producer per batch and partition, which the leader would keep for a day)
    stamps = log_stamps(cluster, start)
    producers, epochs = {pid for pid, _ in stamps}, {epoch for _, epoch in stamps}
    assert len(epochs) >= rows // 300 and len(producers) <= 2, (len(producers), sorted(epochs))


def test_exactly_once_writes_records_and_at_least_once_plain_entries(spark: Any, cluster: LocalCluster) -> None:
    df = spark.createDataFrame([("m-eo",)], "value string")
    start = committed(cluster) + 1
    base = df.write.format("dledger").option("peers", cluster.peers).option("group", GROUP).mode("append")
    base.save()
    df.selectExpr("'m-plain' AS value").write.format("dledger").option("peers", cluster.peers).option(
        "group", GROUP
    ).option("exactlyOnce", "false").mode("append").save()
    with DLedgerClient(cluster.peers, GROUP, timeout_s=30) as client:
        end = client.metadata().committed_index
        magic = {record_of(e).value: e.magic for e in client.get(start, end - start + 1)}
    assert magic[b"m-eo"] == MAGIC_RECORD  # a record, numbered for the idempotent producer
    assert magic[b"m-plain"] == MAGIC_NORMAL  # exactlyOnce=false: a plain entry, as before records


def test_jobs_of_a_named_writer_reuse_one_producer_per_partition(spark: Any, cluster: LocalCluster) -> None:
    """Two batch jobs with `writerName`: each partition keeps its producer id from the
    first job to the second, the second job a newer epoch (without the name: a producer
    per job and partition, kept by the leader for a day)."""
    start = committed(cluster) + 1
    for job in ("w1", "w2"):
        df = spark.range(300).selectExpr(f"concat('{job}-', CAST(id AS STRING)) AS value").repartition(3)
        df.write.format("dledger").options(peers=cluster.peers, group=GROUP, writerName="loader").mode("append").save()
    values = Counter(v for v in log_values(cluster, start) if v[:3] in (b"w1-", b"w2-"))
    assert values == Counter(b"%s-%d" % (job, k) for job in (b"w1", b"w2") for k in range(300))
    stamps = log_stamps(cluster, start)
    producers, epochs = {pid for pid, _ in stamps}, {epoch for _, epoch in stamps}
    assert len(producers) == 3 and len(epochs) == 2, (producers, epochs)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a killed worker not reaped yet is gone too


def test_a_failed_job_has_no_task_still_writing_when_it_fails(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """Partition 0 fails at once (a null value) while partition 1 is slow: Spark calls
    abort at once and kills the cancelled task's Python worker only later
    (spark.python.task.killTimeout); the abort waits for that, so when save() raises no
    task of the job is left appending (the issue's rows appearing after the next job's)."""
    from dledger.spark.source import DLedgerDataSource

    marks = str(tmp_path)

    def slow_factory(peers: str, group: str, timeout_s: float) -> Any:
        import os as os_
        import time

        from pyspark import TaskContext

        client = default_client_factory(peers, group, timeout_s)
        ctx = TaskContext.get()
        if ctx is None or ctx.partitionId() != 1:
            return client
        Path(marks, "p1.pid").write_text(str(os_.getpid()))
        inner = client.append_record_bodies  # what the exactly-once task calls (with encoded bodies)

        def slow_append(bodies: Any, *, stamp: Any) -> Any:
            time.sleep(0.2)  # a slow task: 100 requests take 20 s
            Path(marks, f"sent-{stamp.first_seq}").touch()
            return inner(bodies, stamp=stamp)

        client.append_record_bodies = slow_append  # type: ignore[method-assign]
        return client

    source = type(
        "SlowSource",
        (DLedgerDataSource,),
        {
            "name": classmethod(lambda cls: "dledger_slow"),
            "client_factory": classmethod(lambda cls, target: slow_factory),
        },
    )
    spark.dataSource.register(source)
    df = spark.range(0, 4000, numPartitions=2).selectExpr("IF(id = 0, NULL, concat('z', id)) AS value")
    writer = df.write.format("dledger_slow").option("peers", cluster.peers).option("group", GROUP)
    with pytest.raises(Exception, match="must not be null"):
        writer.option("batchEntries", "20").mode("append").save()
    pid = int(Path(marks, "p1.pid").read_text())
    sent = {p.name for p in Path(marks).glob("sent-*")}
    assert sent, "partition 1 had not started appending: nothing was tested"
    assert len(sent) < 100, "partition 1 finished before the job failed: nothing was tested"
    assert not _alive(pid), "the failed job's slow task was still running when save() raised"


def test_the_leaders_refusals_fail_a_task_clearly_and_append_nothing(cluster: LocalCluster) -> None:
    from dledger.record import encode_record
    from dledger.spark.exactly_once import ProducerWriteError, send_request

    pid = TaskIds("job-refused", -1, 0).producer_id()
    bodies = [encode_record(b"refused-%d" % k, None, 1) for k in range(3)]
    start = committed(cluster) + 1
    with DLedgerClient(cluster.peers, GROUP, timeout_s=30) as client:
        with pytest.raises(ProducerWriteError, match="UNKNOWN_PRODUCER"):
            send_request(client, pid, 5, bodies)  # a producer the leader never saw, not from 0
        send_request(client, pid, 0, bodies)
        with pytest.raises(ProducerWriteError, match="OUT_OF_ORDER_SEQUENCE"):
            send_request(client, pid, 7, bodies)  # a gap after 0..2
        again = send_request(client, pid, 0, bodies)  # the same numbers again: a duplicate
    assert again.duplicate
    assert Counter(v for v in log_values(cluster, start) if v.startswith(b"refused-")) == Counter(
        b"refused-%d" % k for k in range(3)
    )
