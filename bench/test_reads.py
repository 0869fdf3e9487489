"""Read benchmark (issue 18): reads of a replicated register through `Ledger.Query`, 64
threads of one `DLedgerClient` (concurrent calls share requests), UNSAFE vs READ_INDEX vs
LEASE against the same 3-member cluster of separate server processes, rounds interleaved
in one run [READ_INDEX >= 0.5x UNSAFE, LEASE >= 0.8x UNSAFE, >= 10,000 linearizable
reads/s]. The register is a stand-in for the key-value store (one `get` per read).

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
from tests.e2e.harness import free_ports

THREADS = 64
ROUND_S = 3.0
ROUNDS = 3
MODES = (ReadMode.UNSAFE, ReadMode.READ_INDEX, ReadMode.LEASE)
REGISTER = "tests.node.register:Register"
"""The members' state machine (`dledger server --state-machine`; the repository root is
on their `sys.path` as the working directory of `python -m`)."""


def _cluster(workdir: Path) -> LocalCluster:
    cluster = LocalCluster(
        nodes=3,
        group="bench",
        host="127.0.0.1",
        base_port=0,
        ports=free_ports(3),
        store_base_dir=workdir / "data",
        extra_args=["--heartbeat-ms", "1000", "--log-level", "WARNING", "--state-machine", REGISTER],
        command_line=server_command_line,
        log_dir=workdir / "logs",
    )
    cluster.start_all()
    if cluster.wait_leader(60) is None:
        cluster.shutdown(30)
        raise RuntimeError("no leader elected")
    return cluster


def _rate(client: DLedgerClient, mode: ReadMode, seconds: float) -> float:
    """Reads per second of THREADS threads, each reading in a loop for `seconds`."""
    counts = [0] * THREADS
    stop = time.monotonic() + seconds
    start = threading.Barrier(THREADS + 1)

    def reader(k: int) -> None:
        start.wait()
        n = 0
        while time.monotonic() < stop:
            assert client.query(b"get", mode) == b"value"
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
            client.append(b"set:value")
            for mode in MODES:
                _rate(client, mode, 0.5)  # warm up

            def rounds() -> None:
                for _ in range(ROUNDS):
                    for mode in MODES:
                        rates[mode].append(_rate(client, mode, ROUND_S))

            benchmark.pedantic(rounds, rounds=1, iterations=1)
    finally:
        cluster.shutdown(30)
    best = {mode: max(values) for mode, values in rates.items()}
    for mode in MODES:
        shown = ", ".join(f"{r:,.0f}" for r in rates[mode])
        print(f"\n{mode.name:>10}: {shown} reads/s ({best[mode] / best[ReadMode.UNSAFE]:.2f}x UNSAFE)")
    if best[ReadMode.UNSAFE] <= 0:
        pytest.fail("no reads")
