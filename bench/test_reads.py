"""Read benchmark (issue 18): `get`s of the replicated key-value store (`dledger.kv`,
through `KVClient` and `Ledger.Query`), 64 threads of one `DLedgerClient` (concurrent
calls share requests), UNSAFE vs READ_INDEX vs LEASE against the same 3-member cluster of
separate server processes, rounds interleaved in one run [READ_INDEX >= 0.5x UNSAFE,
LEASE >= 0.8x UNSAFE, >= 10,000 linearizable reads/s].

Run: `.venv/bin/python -m pytest bench/test_reads.py --benchmark-only -p no:randomly -s`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.server_cmds import server_command_line
from dledger.client import DLedgerClient, ReadMode
from dledger.kv.client import KVClient
from tests.e2e.harness import free_ports

THREADS = 64
ROUND_S = 3.0
ROUNDS = 3
MODES = (ReadMode.UNSAFE, ReadMode.READ_INDEX, ReadMode.LEASE)
KEYS = 1000
"""Keys put before the rounds; reader k reads key k, k + 64, ... in turn."""


def _cluster(workdir: Path) -> LocalCluster:
    cluster = LocalCluster(
        nodes=3,
        group="bench",
        host="127.0.0.1",
        base_port=0,
        ports=free_ports(3),
        store_base_dir=workdir / "data",
        extra_args=["--heartbeat-ms", "1000", "--log-level", "WARNING", "--state-machine", "kv"],
        command_line=server_command_line,
        log_dir=workdir / "logs",
    )
    cluster.start_all()
    if cluster.wait_leader(60) is None:
        cluster.shutdown(30)
        raise RuntimeError("no leader elected")
    return cluster


def _rate(kv: KVClient, mode: ReadMode, seconds: float) -> float:
    """Reads per second of THREADS threads, each getting keys in a loop for `seconds`."""
    counts = [0] * THREADS
    stop = time.monotonic() + seconds
    start = threading.Barrier(THREADS + 1)

    def reader(k: int) -> None:
        start.wait()
        n = 0
        while time.monotonic() < stop:
            key = (k + n * THREADS) % KEYS
            assert kv.get(b"key-%d" % key, mode) == b"value-%d" % key
            n += 1
        counts[k] = n

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    began = time.monotonic()
    start.wait()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - began)


def test_reads(benchmark: Any, workdir: Path) -> None:
    cluster = _cluster(workdir)
    rates: dict[ReadMode, list[float]] = {mode: [] for mode in MODES}
    try:
        with DLedgerClient(cluster.peers, "bench", 10.0) as client:
            kv = KVClient(client)
            for key in range(KEYS):
                kv.put(b"key-%d" % key, b"value-%d" % key)
            for mode in MODES:
                _rate(kv, mode, 0.5)  # warm up

            def rounds() -> None:
                for _ in range(ROUNDS):
                    for mode in MODES:
                        rates[mode].append(_rate(kv, mode, ROUND_S))

            benchmark.pedantic(rounds, rounds=1, iterations=1)
    finally:
        cluster.shutdown(30)
    best = {mode: max(values) for mode, values in rates.items()}
    for mode in MODES:
        shown = ", ".join(f"{r:,.0f}" for r in rates[mode])
        print(f"\n{mode.name:>10}: {shown} reads/s ({best[mode] / best[ReadMode.UNSAFE]:.2f}x UNSAFE)")
    if best[ReadMode.UNSAFE] <= 0:
        pytest.fail("no reads")
