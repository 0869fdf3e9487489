"""Reading a log's record columns (key, value, timestamp, headers in Arrow's layouts, what
an offline Spark read of records gets) over 500,000 records of an 8-byte key, a
timestamp and a 100-byte value, 65,536 rows a batch (the Spark source's batch), against
reading the same entries' bodies:

- `bodies`: `StoreView.read_columns` (the bodies, no record columns);
- `split`: `read_columns(..., records=True)`: the bodies, then `split_records` over them;
- `direct`: `StoreView.read_records`: the record columns straight from the data file.

    PYTHONPATH=. .venv/bin/python -m pytest bench/test_record_columns.py --benchmark-only -p no:randomly
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench._common import record
from dledger.columns import ColumnBatch

ROWS = 500_000
BATCH_ROWS = 1 << 16
BATCH_BYTES = 32 << 20
VALUE = 100
ROUNDS = 7


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A log of ROWS records (written untimed)."""
    import dledger
    from dledger.entry import MAGIC_RECORD
    from dledger.record import encode_record

    root = tmp_path_factory.mktemp("record-columns")
    values = os.urandom(VALUE * 10_000)
    with dledger.open_log(root / "log") as log:
        for start in range(0, ROWS, 10_000):
            bodies = [
                encode_record(values[k * VALUE : (k + 1) * VALUE], b"%08d" % (start + k), 1_700_000_000_000 + start + k)
                for k in range(10_000)
            ]
            log.append_many(bodies, MAGIC_RECORD)
    try:
        yield root / "log"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _scan(store_dir: Path, read: Callable[[Any, int], ColumnBatch]) -> Callable[[], int]:
    """A full scan of the log in batches through `read(view, from_index)`; returns rows."""
    from dledger.store import StoreView

    def scan() -> int:
        rows = 0
        with StoreView.open(store_dir) as view:
            index = view.begin_index
            while index <= view.committed_index:
                batch = read(view, index)
                rows += batch.count
                index += batch.count
        return rows

    return scan


READS: dict[str, Callable[[Any, int], ColumnBatch]] = {
    "bodies": lambda view, index: view.read_columns(index, BATCH_ROWS, BATCH_BYTES),
    "split": lambda view, index: view.read_columns(index, BATCH_ROWS, BATCH_BYTES, records=True),
    "direct": lambda view, index: view.read_records(index, BATCH_ROWS, BATCH_BYTES),
}


@pytest.mark.parametrize("how", list(READS))
def test_record_columns(benchmark: Any, store_dir: Path, how: str) -> None:
    """rows/s of one full scan (CRCs checked), by how the columns are read."""
    scan = _scan(store_dir, READS[how])
    assert scan() == ROWS
    benchmark.group = "record-columns-100B"
    benchmark.pedantic(scan, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, benchmark.group, f"dledger-{how}", ROWS)
