"""Spark throughput (local[2]): 2,000,000 entries of 100 bytes, against two baselines
measured in the same run on rows of the same shape:

* `parquet`: Spark reading the same rows from a Parquet file (written once from the log)
  into the `noop` sink;
* `spark-generate`: a Spark job that only generates rows of the same shape in the JVM
  (`spark.range` + expressions) into `noop`.

Groups:

* `spark-read-2M-100B-noop`: every row into `noop`, from a store directory written with
  `dledger.open_log` (`dledger-offline`) and from a running 3-member cluster of
  `dledger server` processes over gRPC ReadCommitted (`dledger-live`; the cluster is
  filled untimed with the client's batch appends);
* `spark-read-2M-100B-sum-length`: `sum(length(body))` over each source, which makes
  Spark touch every body (the `noop` sink over Parquet can leave column vectors undecoded);
* `spark-read-2M-100B-records-offline`: records (an 8-byte key, a timestamp, a 100-byte
  value) read offline with `index, term, key, value, timestamp` into `noop`, beside the
  plain log's `index, term, pos, body` read the same way (issue 20: >= 0.8x);
  `spark-read-2M-100B-records-live`: the same from the cluster (2 M records appended
  after the plain rows). The cases run one after the other: for an interleaved
  comparison use `bench/record_read_probe.py`;
* `spark-write-2M-100B`: a DataFrame of 2 M generated 100-byte bodies written with
  `.write.format("dledger")` into the cluster: plain entries, at-least-once
  (`dledger-live-write`, `exactlyOnce=false`), and exactly-once records numbered for the
  idempotent producer (`dledger-live-write-exactly-once`, the default; issue 20:
  >= 0.9x plain), beside the same baselines.

Spark and the cluster share the machine's cores. Besides rows/s, every round records the
CPU seconds of the whole process tree (`cpu_s`: the JVM, its Python workers, this
process and the cluster's members; `server_cpu_s`: the members alone) in `extra_info`
(median over rounds): on a machine shared with other jobs the CPU figures move much less
than the wall-clock ones.

Targets: offline read >= 1,500,000 rows/s and >= 0.75x the Parquet read (issue 5); live
read >= 800,000 rows/s, write >= 150,000 rows/s.
Run: `make bench PYTEST_ARGS="-k spark"` or
`.venv/bin/python -m pytest bench/test_spark.py --benchmark-only -p no:randomly`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench._cluster import start_cluster
from bench._common import record, run_in_threads
from dledger.cli.cluster_runner import LocalCluster
from dledger.client import DLedgerClient

ROWS = 2_000_000
BODY = 100
ROUNDS = 5
GROUP = "bench"
PLAIN_SCHEMA = "index long, term long, pos long, body binary"
"""The plain read every group but the records one measures (the pre-records default)."""
RECORD_SCHEMA = "index long, term long, key binary, value binary, timestamp timestamp"
FILL_BATCH = 16384
"""Bodies per Append while filling the cluster."""
SPARK_CONF_DIR = Path(__file__).resolve().parents[1] / "tests" / "spark"  # log4j2.properties: errors only

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_CONF_DIR", str(SPARK_CONF_DIR))

pyspark = pytest.importorskip("pyspark")


# ----------------------------------------------------------------- CPU accounting


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds) of every process (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        out[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds of `root` and every live descendant, by pid."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    out: dict[int, float] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            out[pid] = table[pid][1]
        todo.extend(children.get(pid, ()))
    return out


@dataclass
class CpuMeter:
    """CPU seconds of each round: the whole process tree, and the cluster's members."""

    servers: Callable[[], set[int]]
    total: list[float]
    server: list[float]

    def measure(self, fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            before = tree_cpu(os.getpid())
            fn()
            after = tree_cpu(os.getpid())
            spent = {pid: cpu - before.get(pid, 0.0) for pid, cpu in after.items()}
            members = self.servers()
            self.total.append(sum(spent.values()))
            self.server.append(sum(v for pid, v in spent.items() if pid in members))

        return run

    def report(self, benchmark: Any, warmup_rounds: int) -> None:
        total, server = self.total[warmup_rounds:], self.server[warmup_rounds:]
        if total:
            benchmark.extra_info["cpu_s"] = round(statistics.median(total), 2)
            benchmark.extra_info["server_cpu_s"] = round(statistics.median(server), 2)


# ----------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local[2] session for the module (default JIT and GC: no test-suite flags)."""
    from dledger.spark import local_session

    session = local_session("dledger-bench")
    yield session
    session.stop()


def _bodies() -> list[bytes]:
    blob = os.urandom(BODY * 10_000)
    return [blob[k * BODY : (k + 1) * BODY] for k in range(10_000)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[tuple[Path, Path]]:
    """(log directory, parquet directory) holding the same 2M rows (written untimed)."""
    import dledger

    root = tmp_path_factory.mktemp("spark-bench")
    log_dir, parquet_dir = root / "log", root / "parquet"
    chunk = _bodies()
    with dledger.open_log(log_dir) as log:
        for _ in range(ROWS // len(chunk)):
            log.append_many(chunk)
    spark.read.format("dledger").schema(PLAIN_SCHEMA).load(str(log_dir)).write.parquet(str(parquet_dir))
    try:
        yield log_dir, parquet_dir
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Cluster:
    """A running 3-member cluster and the index range [first, end) of the 2M filled rows."""

    group: LocalCluster
    first: int
    end: int

    @property
    def peers(self) -> str:
        return self.group.peers

    def pids(self) -> set[int]:
        return {m.process.pid for m in self.group.members.values() if m.process is not None}


def _fill(client: DLedgerClient, count: int) -> tuple[int, int]:
    """Append `count` 100-byte bodies from two threads in FILL_BATCH-body requests;
    returns (first, last) index appended."""
    chunk = _bodies()
    requests = [(chunk * (FILL_BATCH // len(chunk) + 1))[:FILL_BATCH]] * (count // FILL_BATCH)
    rest = count - len(requests) * FILL_BATCH
    if rest:
        requests.append(chunk[:rest])
    firsts: list[int] = []
    lasts: list[int] = []

    def worker(k: int) -> None:
        for bodies in requests[k::2]:
            first = client.append_many(bodies)
            firsts.append(first)
            lasts.append(first + len(bodies) - 1)

    run_in_threads(worker, 2)
    return min(firsts), max(lasts)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three `dledger server` processes (256 MiB segments, async flush) holding 2M rows of
    100 bytes (appended untimed with the client's batch appends)."""
    root = tmp_path_factory.mktemp("spark-cluster")
    group = start_cluster(root, "async", group=GROUP)
    try:
        with DLedgerClient(group.peers, GROUP, timeout_s=60.0) as client:
            first, last = _fill(client, ROWS)
        # entries in between are ours or NOOPs of a new leader (which reads leave out)
        yield Cluster(group, first, last + 1)
    finally:
        group.shutdown(30)
        shutil.rmtree(root, ignore_errors=True)


def _generated(spark: Any) -> Any:
    return spark.range(ROWS).selectExpr(
        "id AS index",
        "1L AS term",
        "id * 148 AS pos",
        f"encode(lpad(cast(id AS string), {BODY}, '.'), 'UTF-8') AS body",
    )


def _sources(spark: Any, data: tuple[Path, Path], cluster: Cluster | None) -> dict[str, Any]:
    log_dir, parquet_dir = data
    out = {
        "dledger-offline": spark.read.format("dledger").schema(PLAIN_SCHEMA).load(str(log_dir)),
        "parquet": spark.read.parquet(str(parquet_dir)),
        "spark-generate": _generated(spark),
    }
    if cluster is not None:
        out["dledger-live"] = (
            spark.read.format("dledger")
            .schema(PLAIN_SCHEMA)
            .option("peers", cluster.peers)
            .option("group", GROUP)
            .option("startingIndex", str(cluster.first))
            .option("endingIndex", str(cluster.end))
            .load()
        )
    return out


def _cluster_for(impl: str, request: pytest.FixtureRequest) -> Cluster | None:
    """The cluster fixture, started only for the cases that use it."""
    return request.getfixturevalue("cluster") if impl.startswith("dledger-live") else None


IMPLS = ["dledger-offline", "dledger-live", "parquet", "spark-generate"]


@pytest.mark.parametrize("impl", IMPLS)
def test_spark_read_noop(
    benchmark: Any, spark: Any, data: tuple[Path, Path], impl: str, request: pytest.FixtureRequest
) -> None:
    """All rows into the `noop` sink."""
    cluster = _cluster_for(impl, request)
    df = _sources(spark, data, cluster)[impl]
    assert df.count() == ROWS
    meter = CpuMeter(cluster.pids if cluster else set, [], [])

    def run() -> None:
        df.write.format("noop").mode("overwrite").save()

    group = "spark-read-2M-100B-noop"
    benchmark.group = group
    benchmark.pedantic(meter.measure(run), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    meter.report(benchmark, 1)
    record(benchmark, group, impl, ROWS)


@pytest.mark.parametrize("impl", IMPLS)
def test_spark_read_sum_length(
    benchmark: Any, spark: Any, data: tuple[Path, Path], impl: str, request: pytest.FixtureRequest
) -> None:
    """`sum(length(body))` over all rows: every body is materialised. A new DataFrame per
    round (re-running one would skip its already computed shuffle stage)."""
    cluster = _cluster_for(impl, request)
    meter = CpuMeter(cluster.pids if cluster else set, [], [])

    def run() -> int:
        return int(_sources(spark, data, cluster)[impl].selectExpr("sum(length(body)) AS n").first()["n"])

    assert run() == ROWS * BODY
    group = "spark-read-2M-100B-sum-length"
    benchmark.group = group
    benchmark.pedantic(meter.measure(run), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    meter.report(benchmark, 1)
    record(benchmark, group, impl, ROWS)


@pytest.fixture(scope="module")
def record_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A log of 2M records: an 8-byte key, a timestamp and a 100-byte value (untimed)."""
    import dledger
    from dledger.entry import MAGIC_RECORD
    from dledger.record import encode_record

    root = tmp_path_factory.mktemp("spark-bench-records")
    chunk = _bodies()
    with dledger.open_log(root / "log") as log:
        for k in range(ROWS // len(chunk)):
            base = k * len(chunk)
            stamp = 1_700_000_000_000 + base
            bodies = [encode_record(v, b"%08d" % (i % 4096), stamp + i) for i, v in enumerate(chunk)]
            log.append_many(bodies, MAGIC_RECORD)
    try:
        yield root / "log"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("impl", ["plain-body", "record-key-timestamp"])
def test_spark_read_records_offline(
    benchmark: Any, spark: Any, data: tuple[Path, Path], record_log: Path, impl: str
) -> None:
    """Records with their key and timestamp columns against plain bodies, offline."""
    if impl == "plain-body":
        df = spark.read.format("dledger").schema(PLAIN_SCHEMA).load(str(data[0]))
    else:
        df = spark.read.format("dledger").schema(RECORD_SCHEMA).load(str(record_log))
    assert df.count() == ROWS
    meter = CpuMeter(set, [], [])

    def run() -> None:
        df.write.format("noop").mode("overwrite").save()

    group = "spark-read-2M-100B-records-offline"
    benchmark.group = group
    benchmark.pedantic(meter.measure(run), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    meter.report(benchmark, 1)
    record(benchmark, group, impl, ROWS)


@pytest.fixture(scope="module")
def record_range(cluster: Cluster) -> tuple[int, int]:
    """[first, end) of 2M records (as `record_log`'s) appended to the cluster (untimed)."""
    from dledger.entry import MAGIC_RECORD
    from dledger.record import encode_record

    chunk = _bodies()
    first = last = -1
    with DLedgerClient(cluster.peers, GROUP, timeout_s=60.0) as client:
        for k in range(0, ROWS, FILL_BATCH):
            count = min(FILL_BATCH, ROWS - k)
            values = (chunk * (count // len(chunk) + 1))[:count]
            bodies = [
                encode_record(v, b"%08d" % ((k + i) % 4096), 1_700_000_000_000 + k + i) for i, v in enumerate(values)
            ]
            index = int(client.append_batch(bodies, MAGIC_RECORD).first_index)
            first = index if first < 0 else first
            last = index + count - 1
    return first, last + 1


@pytest.mark.parametrize("impl", ["plain-body", "record-key-timestamp"])
def test_spark_read_records_live(
    benchmark: Any, spark: Any, cluster: Cluster, record_range: tuple[int, int], impl: str
) -> None:
    """Records with their key and timestamp columns against plain bodies, from the cluster."""
    schema, (first, end) = (
        (PLAIN_SCHEMA, (cluster.first, cluster.end)) if impl == "plain-body" else (RECORD_SCHEMA, record_range)
    )
    df = (
        spark.read.format("dledger")
        .schema(schema)
        .option("peers", cluster.peers)
        .option("group", GROUP)
        .option("startingIndex", str(first))
        .option("endingIndex", str(end))
        .load()
    )
    assert df.count() == ROWS
    meter = CpuMeter(cluster.pids, [], [])

    def run() -> None:
        df.write.format("noop").mode("overwrite").save()

    group = "spark-read-2M-100B-records-live"
    benchmark.group = group
    benchmark.pedantic(meter.measure(run), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    meter.report(benchmark, 1)
    record(benchmark, group, impl, ROWS)


WRITE_IMPLS = ["dledger-live-write", "dledger-live-write-exactly-once", "parquet", "spark-generate"]


@pytest.mark.parametrize("impl", WRITE_IMPLS)
def test_spark_write(
    benchmark: Any, spark: Any, data: tuple[Path, Path], impl: str, request: pytest.FixtureRequest
) -> None:
    """2M generated 100-byte bodies written into the cluster (every round appends 2M
    more entries), beside the baselines: the same rows generated into `noop`, and the
    Parquet rows read into `noop`."""
    cluster = _cluster_for(impl, request)
    meter = CpuMeter(cluster.pids if cluster else set, [], [])
    if cluster is not None:
        bodies = _generated(spark).select("body")
        writer = bodies.write.format("dledger").option("peers", cluster.peers).option("group", GROUP).mode("append")
        writer = writer.option("exactlyOnce", str(impl.endswith("exactly-once")).lower())
        with DLedgerClient(cluster.peers, GROUP, timeout_s=30.0) as client:
            before = client.metadata().committed_index
        run: Callable[[], None] = writer.save
    else:
        run = _sources(spark, data, None)[impl].select("body").write.format("noop").mode("overwrite").save
    calls = 0

    def counted() -> None:
        nonlocal calls
        run()
        calls += 1

    group = "spark-write-2M-100B"
    benchmark.group = group
    benchmark.pedantic(meter.measure(counted), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    meter.report(benchmark, 1)
    record(benchmark, group, impl, ROWS)
    if cluster is not None:
        with DLedgerClient(cluster.peers, GROUP, timeout_s=30.0) as client:
            after = client.metadata().committed_index
        assert after - before >= calls * ROWS  # every round appended its rows (plus any NOOPs)
