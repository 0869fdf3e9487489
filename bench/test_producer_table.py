"""The idempotent producers' table at its default limit (`maxProducers`, 200,000
producers of 3 kept requests each): what a new leader's copy, a save's image (taken under
the producers' lock), its encoding (outside it) and a restart's read of it cost, and the
memory a member holds for it.

    PYTHONPATH=. .venv/bin/python -m pytest bench/test_producer_table.py --benchmark-only -p no:randomly -s
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from bench._common import record
from dledger.config import DLedgerConfig
from dledger.node_producers import read_stamp
from dledger.raft.producer_log import StampFold
from dledger.raft.producers import ProducerTable, Stamp

PRODUCERS = DLedgerConfig().max_producers
REQUESTS = 3
ROUNDS = 5


def _table() -> ProducerTable:
    table = ProducerTable()
    for k in range(PRODUCERS):
        for seq in range(REQUESTS):
            table.record(Stamp(2**62 + k, 0, seq * 100, 100, 1_000 + k), first_index=(k * REQUESTS + seq) * 100)
    return table


@pytest.fixture(scope="module")
def table() -> ProducerTable:
    tracemalloc.start()
    made = _table()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\nproducer table: {PRODUCERS} producers hold {held / PRODUCERS:.0f} bytes each")
    return made


OPERATIONS: dict[str, Callable[[ProducerTable, bytes], object]] = {
    "copy": lambda table, image: table.copy(),
    "fold-copy": lambda table, image: StampFold(table, 0, read_stamp).copy(),  # a new leader's table, node lock held
    "image": lambda table, image: table.image(),  # what a save or a snapshot takes under the producers' lock
    "encode": lambda table, image: table.encode(),  # a save, a snapshot
    "decode": lambda table, image: ProducerTable.decode(image),  # a restart
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_producer_table(benchmark: Any, table: ProducerTable, operation: str) -> None:
    """producers/s of one operation over the whole table."""
    image = table.encode()
    run = OPERATIONS[operation]
    assert len(ProducerTable.decode(image)) == PRODUCERS
    benchmark.group = "producer-table-200k"
    benchmark.pedantic(run, args=(table, image), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, benchmark.group, f"dledger-{operation}", PRODUCERS)
