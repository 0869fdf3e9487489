"""Spark reads of a compacted log (first index > 0 after a prefix reset, as a snapshot's
compaction leaves it): they start at its first live index and say so in a log line; a
startingIndex below it fails with a clear error unless failOnDataLoss=false (Kafka's
semantics: then they start at the first live index with a warning). Offline on a real
reset store, live against a real member serving one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.server_cmds import server_command_line
from dledger.client import DLedgerClient
from dledger.spark.live import default_client_factory, fetch_view_once, plan_batch_read, read_task
from dledger.spark.local import open_store, plan_store, read_range
from dledger.spark.options import parse_read_options
from dledger.spark.planning import DataLossError
from dledger.store import MmapLogStore, StoreConfig, sized_config
from tests.e2e.harness import eventually, free_ports

pytestmark = pytest.mark.spark

CONFIG = StoreConfig(data_file_size=64 << 10, index_file_size=32 * 1024)
PLANNING = "dledger.spark.planning"


def _indexes(batches: Iterator[Any]) -> list[int]:
    return [int(i) for batch in batches for i in batch.index]


def compacted_store(node: Path, count: int = 100, first_live: int = 40) -> Path:
    """A local log of `count` entries whose prefix before `first_live` was reset away."""
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"e%d" % k for k in range(count)])
        assert log.reset(first_live - 1, log.get(first_live - 1).term) == first_live
    return node


def test_offline_reads_of_a_compacted_store(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = compacted_store(tmp_path / "dledger-n0")
    caplog.set_level(logging.INFO, PLANNING)
    with open_store(node) as store:
        plan = plan_store(store, 40, 100, True, 1, 1 << 30)  # "earliest" resolves to 40
    assert plan.bounds.begin == 40 and plan.ranges[0].start == 40
    assert "the log is compacted: it starts at index 40" in caplog.text
    assert "reading from its first live index 40" in caplog.text
    with pytest.raises(DataLossError, match="the log now starts at index 40") as info:
        list(read_range(node, 10, 100, True, True, 1000, 1 << 20))
    assert "set failOnDataLoss=false to start at its first live index 40" in str(info.value)
    caplog.clear()
    rows = _indexes(read_range(node, 10, 100, True, False, 1000, 1 << 20))
    assert rows == list(range(40, 100))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "entries 10..39 are gone" in warnings[0].getMessage()


def test_offline_spark_read_of_a_compacted_store(spark: Any, tmp_path: Path) -> None:
    node = compacted_store(tmp_path / "dledger-n0")
    reader = spark.read.format("dledger")
    assert sorted(r["index"] for r in reader.load(str(node)).collect()) == list(range(40, 100))
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        reader.option("startingIndex", "5").load(str(node)).collect()
    rows = reader.option("startingIndex", "5").option("failOnDataLoss", "false").load(str(node)).collect()
    assert sorted(r["index"] for r in rows) == list(range(40, 100))


@pytest.fixture
def compacted_member(tmp_path: Path) -> Iterator[LocalCluster]:
    """A one-member group whose log was appended to, then compacted (prefix reset while
    it was stopped), running again."""
    group = LocalCluster(
        nodes=1,
        group="compacted",
        host="127.0.0.1",
        base_port=0,
        ports=free_ports(1),
        store_base_dir=tmp_path / "data",
        extra_args=["--heartbeat-ms", "300", "--segment-size", "1MiB"],
        command_line=server_command_line,
        log_dir=tmp_path / "logs",
    )
    try:
        group.start_all()
        assert group.wait_leader(30) is not None
        with DLedgerClient(group.peers, "compacted", timeout_s=20) as client:
            client.append_many([b"live%d" % k for k in range(100)])
        group.shutdown()
        node = tmp_path / "data" / "dledger-n0"
        with MmapLogStore.open(node, sized_config(node)) as store:
            assert store.reset(59, store.get(59).term) == 60
        group.start_all()
        assert group.wait_leader(30) is not None
        yield group
    finally:
        group.shutdown()


def test_live_reads_of_a_compacted_member(compacted_member: LocalCluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, PLANNING)
    peers = compacted_member.peers
    opts = parse_read_options({"peers": peers, "group": "compacted"}, False)

    def view() -> Any:
        found = fetch_view_once(opts.target, default_client_factory, 10.0)
        return found if found.bounds.committed >= 99 else None

    current = eventually(view, 30, "the member to serve its committed log")
    assert current.bounds.begin == 60
    tasks = plan_batch_read(current, opts, 1)
    assert tasks[0].start == 60
    assert "the log is compacted: it starts at index 60" in caplog.text
    assert _indexes(b for t in tasks for b in read_task(t, default_client_factory))[:40] == list(range(60, 100))
    below = parse_read_options({"peers": peers, "group": "compacted", "startingIndex": "7"}, False)
    with pytest.raises(DataLossError, match="set failOnDataLoss=false to start at its first live index 60"):
        plan_batch_read(current, below, 1)
    caplog.clear()
    skip = parse_read_options(
        {"peers": peers, "group": "compacted", "startingIndex": "7", "failOnDataLoss": "false"}, False
    )
    tasks = plan_batch_read(current, skip, 1)
    assert tasks[0].start == 60
    assert any(r.levelno == logging.WARNING and "entries 7..59 are gone" in r.getMessage() for r in caplog.records)
