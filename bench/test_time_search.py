"""`startingTimestamp`: how long finding the first record at or after a time takes on a
10-million-entry log (issue 20: <= 50 ms), by binary search (`dledger.timeindex`).

The log: `DLEDGER_BENCH_TIME_ENTRIES` records (default 10,000,000; set it lower for a
quick run) of about 100 bytes (an 80-byte value, a timestamp BASE + i, no key), written
untimed with the embedded API's bulk `append_many`. Cases, each a different time per
round (spread over the log, plus one past its end):

* `offline-search`: `search_store` over an open `StoreView` (the search alone);
  `offline-search-bisect`: the same by plain bisection (`interpolate=False`: every probe
  in the middle, what a log whose times grow unevenly costs at worst, about log2(n / 64)
  probes, where interpolation needs 2-3 on this evenly growing log);
* `offline-open-search`: open the store directory read-only, search, close (what the
  Spark source's planning does for an offline `startingTimestamp`);
* `live-1-member`: `index_at_time` through the gRPC client against a one-member
  `dledger server` holding the same records (filled untimed through the client; a
  3-member cluster with `DLEDGER_BENCH_TIME_MEMBERS=3`): one ReadCommitted round trip
  per probe, from the leader; `live-1-member-bisect` by plain bisection.

`extra_info` holds the median time in ms and the probes (reads) of each round.

Run: `.venv/bin/python -m pytest bench/test_time_search.py --benchmark-only -p no:randomly`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.server_cmds import server_command_line
from dledger.client import DLedgerClient
from dledger.entry import MAGIC_RECORD
from dledger.record import encode_record
from dledger.spark.live import fetch_view, search_cluster
from dledger.spark.target import Target
from dledger.store import StoreConfig, StoreView
from dledger.timeindex import TimeSearch, search_store
from tests.e2e.harness import free_ports

ENTRIES = int(os.environ.get("DLEDGER_BENCH_TIME_ENTRIES", "10000000"))
MEMBERS = int(os.environ.get("DLEDGER_BENCH_TIME_MEMBERS", "1"))
BASE = 1_700_000_000_000
VALUE = b"v" * 80
CHUNK = 16384
ROUNDS = 21
TARGET_MS = 50.0
GROUP = "timebench"


def _bodies(first: int, count: int) -> list[bytes]:
    return [encode_record(VALUE, None, BASE + i, ()) for i in range(first, first + count)]


def _targets() -> list[tuple[int, int]]:
    """(time, the index it must find) per round: spread over the log, then past its end."""
    step = ENTRIES // (ROUNDS + 1)
    out = [(BASE + k * step + 7, k * step + 7) for k in range(1, ROUNDS)]
    return [*out, (BASE + ENTRIES, ENTRIES)]


@pytest.fixture(scope="module")
def time_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local log of ENTRIES records with increasing timestamps (written untimed)."""
    root = tmp_path_factory.mktemp("time-bench")
    config = StoreConfig(data_file_size=1 << 30, index_file_size=160 << 20)
    started = time.perf_counter()
    with dledger.open_log(root / "log", config) as log:
        for first in range(0, ENTRIES, CHUNK):
            log.append_many(_bodies(first, min(CHUNK, ENTRIES - first)), MAGIC_RECORD)
    print(f"\nwrote {ENTRIES:,} records in {time.perf_counter() - started:.1f} s")
    try:
        yield root / "log"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(benchmark: Any, case: str, search: Callable[[int], TimeSearch], offset: int = 0) -> None:
    targets = iter(_targets())
    found: list[tuple[int, int]] = []
    probes: list[int] = []

    def one() -> None:
        when, expected = next(targets)
        result = search(when)
        found.append((result.index - offset if result.found else ENTRIES, expected))
        probes.append(result.probes)

    benchmark.group = f"time-search-{ENTRIES}-entries"
    benchmark.name = case
    benchmark.pedantic(one, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    assert all(got == want for got, want in found), found
    median_ms = benchmark.stats.stats.median * 1000 if getattr(benchmark, "stats", None) else 0.0
    benchmark.extra_info["median_ms"] = round(median_ms, 2)
    benchmark.extra_info["target_ms"] = TARGET_MS
    benchmark.extra_info["probes"] = probes


@pytest.mark.parametrize("interpolate", [True, False], ids=["interpolate", "bisect"])
def test_offline_search(benchmark: Any, time_log: Path, interpolate: bool) -> None:
    with StoreView.open(time_log) as view:
        assert view.committed_index == ENTRIES - 1
        case = "offline-search" + ("" if interpolate else "-bisect")
        _run(benchmark, case, lambda when: search_store(view, when, interpolate=interpolate))


def test_offline_open_and_search(benchmark: Any, time_log: Path) -> None:
    def search(when: int) -> TimeSearch:
        with StoreView.open(time_log) as view:
            return search_store(view, when)

    _run(benchmark, "offline-open-search", search)


@dataclass
class Filled:
    cluster: LocalCluster
    first: int


@pytest.fixture(scope="module")
def live_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Filled]:
    """MEMBERS `dledger server` processes holding ENTRIES records (filled untimed)."""
    root = tmp_path_factory.mktemp("time-bench-live")
    cluster = LocalCluster(
        nodes=MEMBERS,
        group=GROUP,
        host="127.0.0.1",
        base_port=0,
        ports=free_ports(MEMBERS),
        store_base_dir=root / "data",
        extra_args=["--segment-size", "1GiB", "--heartbeat-ms", "1000", "--log-level", "WARNING"],
        command_line=server_command_line,
        log_dir=root / "logs",
    )
    cluster.start_all()
    try:
        assert cluster.wait_leader(60) is not None, "no leader"
        started = time.perf_counter()
        with DLedgerClient(cluster.peers, GROUP, timeout_s=120) as client:
            first = -1
            for k in range(0, ENTRIES, CHUNK):
                result = client.append_batch(_bodies(k, min(CHUNK, ENTRIES - k)), MAGIC_RECORD)
                first = result.first_index if first < 0 else first
        print(f"\nfilled {ENTRIES:,} records into {MEMBERS} member(s) in {time.perf_counter() - started:.1f} s")
        yield Filled(cluster, first)
    finally:
        cluster.shutdown(30)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("interpolate", [True, False], ids=["interpolate", "bisect"])
def test_live_search(benchmark: Any, live_log: Filled, interpolate: bool) -> None:
    with DLedgerClient(live_log.cluster.peers, GROUP, timeout_s=30) as client:
        view = fetch_view(Target(None, live_log.cluster.peers, GROUP), client)
        case = f"live-{MEMBERS}-member" + ("" if interpolate else "-bisect")
        # a new leader's NOOP may come before the records: indexes count from the first
        _run(benchmark, case, lambda when: search_cluster(client, view, when, interpolate=interpolate), live_log.first)
