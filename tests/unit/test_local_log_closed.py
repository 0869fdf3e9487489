"""A closed local log says so: reads and writes raise ValueError ("the log is closed")
instead of answering as an empty log, `with log:` too, while close() stays idempotent
and the store itself is intact for the next open."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.config import StoreConfig
from dledger.record import Record

pytestmark = pytest.mark.unit

SMALL = StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024)

CALLS: dict[str, Callable[[Any], Any]] = {
    "append": lambda log: log.append(b"x"),
    "append_many": lambda log: log.append_many([b"x", b"y"]),
    "append_noop": lambda log: log.append_noop(),
    "append_record": lambda log: log.append_record(b"v", key=b"k"),
    "append_records": lambda log: log.append_records([Record(b"v")]),
    "get": lambda log: log.get(0),
    "get_body": lambda log: log.get_body(0),
    "get_range": lambda log: log.get_range(0, 2),
    "get_record": lambda log: log.get_record(0),
    "term_at": lambda log: log.term_at(0),
    "iterate": lambda log: list(log.iterate()),
    "iterate_records": lambda log: list(log.iterate_records()),
    "read_columns": lambda log: log.read_columns(0, 10, 1000),
    "read_records": lambda log: log.read_records(0, 10, 1000),
    "read_run": lambda log: log.read_run(0, 1000),
    "truncate": lambda log: log.truncate(1),
    "index_at_time": lambda log: log.index_at_time(0),
    "flush": lambda log: log.flush(),
}


@pytest.fixture(params=["async", "sync"])
def closed(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A local log (of either flush mode) with three entries, closed."""
    log = dledger.open_log(tmp_path, replace(SMALL, flush_mode=request.param))
    log.append_many([b"a", b"b", b"c"])
    log.close()
    return log


@pytest.mark.parametrize("name", sorted(CALLS))
def test_reads_and_writes_of_a_closed_log_raise(closed: Any, name: str) -> None:
    with pytest.raises(ValueError, match=f"{name}: the log is closed"):
        CALLS[name](closed)


def test_with_on_a_closed_log_raises_and_close_stays_idempotent(closed: Any) -> None:
    with pytest.raises(ValueError, match="the log is closed"), closed:
        pass
    closed.close()


def test_an_iterator_left_open_stops_with_the_log(tmp_path: Path) -> None:
    log = dledger.open_log(tmp_path, SMALL)
    log.append_many([b"a", b"b", b"c"])
    entries = log.iterate()
    assert next(entries).body == b"a"
    log.close()
    with pytest.raises(ValueError, match="the log is closed"):
        next(entries)


def test_closing_leaves_the_store_whole_for_the_next_open(closed: Any, tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, SMALL) as log:
        assert [e.body for e in log.iterate()] == [b"a", b"b", b"c"]
        assert log.append(b"d") == 3
