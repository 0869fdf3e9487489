"""Sync mode: 8 writer threads, each `append_many` of batches of 100 x 1 KiB against a store
with flush_mode="sync" (every append returns once its bytes are durable), against one
writer to a plain file with one os.fdatasync per 1,000 records."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench._backends import Backend, Dledger, Target, fdatasync_writer, run_rounds
from bench._common import BATCH, SYNC_BATCH, SYNC_THREADS, SYNC_WORKLOAD, chunks, drain, make_bodies, record

GROUP = f"sync-{SYNC_WORKLOAD.label}-{SYNC_THREADS}threads"
ROUNDS = 9
"""Measured rounds of both (the disk is shared: a median of 9 moves less than one of 5)."""


def test_sync_dledger(benchmark: Any, workdir: Path) -> None:
    """Each round appends SYNC_WORKLOAD.count entries from SYNC_THREADS threads."""
    benchmark.group = GROUP
    batches = chunks(make_bodies(SYNC_WORKLOAD.size, SYNC_WORKLOAD.count), SYNC_BATCH)
    per_thread = [batches[t::SYNC_THREADS] for t in range(SYNC_THREADS)]
    backend = Dledger(warm=True, flush_mode="sync")
    backend.rounds = ROUNDS

    with ThreadPoolExecutor(SYNC_THREADS) as pool:

        def make_target(b: Backend) -> Target:
            assert isinstance(b, Dledger)

            def run() -> None:
                append_many = b.store.append_many
                for future in [pool.submit(drain, append_many, mine) for mine in per_thread]:
                    future.result()

            return run

        run_rounds(benchmark, backend, workdir, make_target)
    record(benchmark, GROUP, "dledger-sync", SYNC_WORKLOAD.count)


def test_sync_file_fdatasync(benchmark: Any, workdir: Path) -> None:
    """One writer, os.write per 100 records, os.fdatasync per 1,000 records, fresh file per round."""
    benchmark.group = GROUP
    path = workdir / "plain.log"
    run = fdatasync_writer(path, SYNC_WORKLOAD, SYNC_BATCH, BATCH)
    benchmark.pedantic(run, setup=lambda: path.unlink(missing_ok=True), rounds=ROUNDS, iterations=1)
    record(benchmark, GROUP, "file-fdatasync", SYNC_WORKLOAD.count)
