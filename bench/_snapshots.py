"""Helpers of the issue-18 snapshot benches (bench/test_snapshot_costs.py,
bench/install_snapshot.py): in-process members over gRPC with a state machine whose
snapshot has a chosen size, a way to take one snapshot now, append load, disk usage.

Sizes come from environment variables, so that a quick run is possible and the issue's
sizes are one variable away (docs/BENCHMARKS.md):

| variable | meaning | default |
|---|---|---|
| `DLEDGER_BENCH_SAVE_MIB` | the snapshot written while appends are measured | 256 (issue: 1024) |
| `DLEDGER_BENCH_SNAPSHOT_ROUNDS` | rounds of the save and install benches | 3 |
| `DLEDGER_BENCH_DISK_ENTRIES` | entries appended while disk usage is sampled | 2,000,000 (issue: 10,000,000) |
| `DLEDGER_BENCH_SNAPSHOT_THRESHOLD` | `snapshotThreshold` of that run | 100,000 |
| `DLEDGER_BENCH_INSTALL_MIB` | the snapshot InstallSnapshot streams | 256 (issue: 1024) |
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO

from dledger.config import DLedgerConfig, member_store_config
from dledger.entry import Entry
from dledger.node import DLedgerNode
from dledger.server import DLedgerServer

MIB = 1 << 20
BODY = b"x" * 128


def env_int(name: str, default: int) -> int:
    """An integer from the environment (underscores allowed), else `default`."""
    raw = os.environ.get(name, "").replace("_", "").replace(",", "")
    return int(raw) if raw else default


class SizedMachine:
    """Counts what it applies; its snapshot is `save_bytes` bytes written in 1 MiB pieces
    (a state of that size, captured as a count: the bytes are generated, so the save is
    disk-bound); its load reads the file to the end."""

    def __init__(self, save_bytes: int = 16) -> None:
        self.save_bytes = save_bytes
        self.count = 0
        self._captured = 0
        self._piece = bytes(range(256)) * (MIB // 256)

    def on_apply(self, entries: Sequence[Entry]) -> None:
        self.count += len(entries)

    def on_snapshot_capture(self) -> None:
        self._captured = self.count

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        left = self.save_bytes
        view = memoryview(self._piece)
        while left > 0:
            n = min(left, len(view))
            writer.write(view[:n])
            left -= n

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        while reader.read(MIB):
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_members(
    base: Path, count: int, machine: Callable[[], Any], **settings: Any
) -> tuple[list[DLedgerServer], dict[str, str]]:
    """`count` in-process members (n0 preferred leader) with their file stores under
    `base`; `settings` go to every member's DLedgerConfig (`store` as keyword options of
    `member_store_config`)."""
    addresses = {f"n{k}": f"127.0.0.1:{free_port()}" for k in range(count)}
    peers = ";".join(f"{i}-{a}" for i, a in addresses.items())
    store_settings = settings.pop("store", {})
    servers = []
    for node_id in addresses:
        config = DLedgerConfig(
            group="g",
            self_id=node_id,
            peers=peers,
            store_base_dir=str(base),
            store=member_store_config(**store_settings),
            preferred_leader_ids="n0",
            **settings,
        )

        def factory(cfg: DLedgerConfig, transport: Any) -> DLedgerNode:
            return DLedgerNode(cfg, transport, state_machine=machine())

        servers.append(DLedgerServer(config, node_factory=factory).start())
    return servers, addresses


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def leader_of(servers: Sequence[DLedgerServer]) -> DLedgerNode:
    node = servers[0].node
    assert node is not None
    wait_for(lambda: node.is_leader, "a leader")
    node.append([b"first"]).result(30)
    return node


NO_SNAPSHOT = 10**15
"""A `snapshotThreshold` that is never reached: snapshots are taken by `snapshot_now`."""


def snapshot_now(node: DLedgerNode) -> None:
    """Start a snapshot at the next applied batch (append one entry to make one) and
    return once its save is under way; no other starts after it."""
    snapshots = node.snapshots
    assert snapshots is not None and snapshots.manager is not None
    manager = snapshots.manager
    before = manager.last_index
    manager.threshold = 1
    try:
        node.append([b"snapshot"]).result(30)
        wait_for(lambda: manager.saving or manager.last_index > before, "a snapshot save to start")
    finally:
        manager.threshold = NO_SNAPSHOT


def wait_saved(node: DLedgerNode, timeout_s: float = 600.0) -> None:
    snapshots = node.snapshots
    assert snapshots is not None and snapshots.manager is not None
    assert snapshots.manager.wait_idle(timeout_s), "the save did not end"


class Appenders:
    """`threads` client threads appending `batch` bodies per request to a leader until
    stopped; `count` is the entries acknowledged so far."""

    def __init__(self, node: DLedgerNode, threads: int = 4, batch: int = 100) -> None:
        self.node, self.batch = node, [BODY] * batch
        self.count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.node.append(self.batch).result(60)
            with self._lock:
                self.count += len(self.batch)

    def __enter__(self) -> Appenders:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def rate_while(self, busy: Callable[[], bool], min_s: float = 0.0) -> tuple[float, float]:
        """(entries/s, seconds) over the time `busy()` stays true (at least `min_s`)."""
        start, first = time.perf_counter(), self.count
        while busy() or time.perf_counter() - start < min_s:
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        return (self.count - first) / elapsed, elapsed


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (st_blocks: preallocated segments count in
    full, sparse parts do not)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with suppress(FileNotFoundError):  # deleted while walking (compaction)
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total
