"""Finding the first record at or after a time (`dledger.timeindex`, `index_at_time`):
binary search over real local logs and store views, against a brute-force scan."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import dledger
from dledger.columns import ColumnBatch
from dledger.record import Record, encode_record
from dledger.store import StoreConfig, StoreView
from dledger.timeindex import search_store, search_time

pytestmark = pytest.mark.unit

CONFIG = StoreConfig(data_file_size=64 << 10, index_file_size=32 * 1024, warm_ahead_bytes=0)
Item = int | None
"""A log entry for these tests: a record's timestamp, or None for a plain entry."""


def write_log(path: Path, items: list[Item]) -> Path:
    with dledger.open_log(path, CONFIG) as log:
        for k, ts in enumerate(items):
            if ts is None:
                log.append(b"p%d" % k)
            else:
                log.append_record(b"r%d" % k, key=b"k", timestamp=ts)
    return path


def brute(items: list[Item], target: int, begin: int = 0) -> int:
    """The first record at or after `target`, by a scan (len(items) when none)."""
    return next((k for k in range(begin, len(items)) if items[k] is not None and items[k] >= target), len(items))  # type: ignore[operator]


def test_monotonic_log_every_time(tmp_path: Path) -> None:
    items: list[Item] = [10 * k for k in range(200)]
    with dledger.open_log(write_log(tmp_path / "n", items), CONFIG) as log:
        for target in range(0, 2010, 5):
            assert log.index_at_time(target) == brute(items, target), target
        assert log.index_at_time(0) == 0  # before the first: the first record
        assert log.index_at_time(1991) == 200  # after the last: the end (committed + 1)


def test_equal_runs_start_at_the_first_of_the_run(tmp_path: Path) -> None:
    items: list[Item] = [1] * 50 + [5] * 300 + [7] * 3 + [9] * 100
    with dledger.open_log(write_log(tmp_path / "n", items), CONFIG) as log:
        assert [log.index_at_time(t) for t in (0, 1, 2, 5, 6, 7, 8, 9, 10)] == [0, 0, 50, 50, 350, 350, 353, 353, 453]


def test_plain_entries_count_as_older(tmp_path: Path) -> None:
    """Plain entries before the records (an upgraded log), between records (runs both
    shorter and longer than the window) and at the end; NOOPs too."""
    items: list[Item] = [None] * 500 + [100, None, None, 200] + [None] * 30 + [300, 300, 400] + [None] * 70
    node = write_log(tmp_path / "n", items)
    with dledger.open_log(node, CONFIG) as log:
        for target in (0, 100, 101, 200, 201, 300, 301, 400):
            assert log.index_at_time(target) == brute(items, target), target
        assert log.index_at_time(401) == len(items)
        log.append_noop()
        log.append_record(b"late", timestamp=500)
        assert log.index_at_time(450) == len(items) + 1
    only_plain = write_log(tmp_path / "p", [None] * 300)
    with dledger.open_log(only_plain, CONFIG) as log:
        assert log.index_at_time(0) == 300  # no record: the end


@pytest.mark.parametrize("seed", range(12))
def test_random_logs_match_a_scan(tmp_path: Path, seed: int) -> None:
    """Non-decreasing timestamps with plain entries before the records and in runs
    shorter than the window: exact, in about log2(n) probes."""
    rng = random.Random(seed)
    window = rng.choice([1, 4, 16, 64])
    items: list[Item] = [None] * rng.randrange(0, 50)
    ts = rng.randrange(0, 100)
    for _ in range(rng.randrange(1, 400)):
        if window > 1 and rng.random() < 0.2:
            items.extend([None] * rng.randrange(1, window))
        ts += rng.choice([0, 0, 1, 5])
        items.append(ts)
    node = write_log(tmp_path / "n", items)
    with StoreView.open(node) as view:
        for target in sorted({0, ts, ts + 1, *(rng.randrange(0, ts + 2) for _ in range(20))}):
            result = search_store(view, target, window)
            assert result.index == brute(items, target), (target, window)
            assert result.found == (result.index < len(items))
            if result.found:
                assert result.timestamp == items[result.index]
            assert result.probes <= 2 + 2 * len(items).bit_length()  # every two probes halve the range
            bisected = search_store(view, target, window, interpolate=False)
            assert bisected.index == result.index and bisected.probes <= len(items).bit_length() + 1


def test_decreasing_timestamps_give_a_newer_record_with_older_probes(tmp_path: Path) -> None:
    """Event times out of order: the answer is a record at or after the time, and every
    record it probed before it is older."""
    rng = random.Random(7)
    items: list[Item] = [rng.randrange(0, 1000) for _ in range(500)]
    probed: list[int] = []
    node = write_log(tmp_path / "n", items)
    with StoreView.open(node) as view:

        def read(start: int, count: int) -> ColumnBatch:
            probed.extend(range(start, start + count))
            return view.read_columns(start, count, 1 << 20)

        for target in (1, 250, 500, 999):
            probed.clear()
            result = search_time(target, 0, len(items), read, window=1)
            if result.index < len(items):  # else every probe was older: the end
                assert items[result.index] is not None and items[result.index] >= target  # type: ignore[operator]
            assert len(set(probed)) <= 2 + 2 * len(items).bit_length()
            assert all(items[k] < target for k in probed if k < result.index)  # type: ignore[operator]


def test_probes_interpolate_on_even_logs_and_stay_logarithmic_on_skewed_ones(tmp_path: Path) -> None:
    """Evenly growing times: a handful of probes; times growing exponentially (where
    interpolation guesses badly): still at most 2 + 2 log2(n), and exact."""
    even: list[Item] = [1000 + 3 * k for k in range(5000)]
    skewed: list[Item] = [int(1.004**k) for k in range(5000)]
    for name, items in (("even", even), ("skewed", skewed)):
        node = write_log(tmp_path / name, items)
        with StoreView.open(node) as view:
            for target in (0, items[17], items[2500] + 1, items[4990], items[-1] + 1):  # type: ignore[operator]
                result = search_store(view, target, window=8)
                assert result.index == brute(items, target), (name, target)
                assert result.probes <= (5 if name == "even" else 2 + 2 * 13), (name, target, result.probes)


def test_empty_log_and_compacted_prefix(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path / "empty", CONFIG) as log:
        assert log.index_at_time(0) == 0
    items: list[Item] = [k for k in range(100)]
    node = write_log(tmp_path / "c", items)
    with dledger.open_log(node, CONFIG) as log:
        assert log.reset(39, log.get(39).term) == 40  # entries before 40 are gone
        assert log.index_at_time(0) == 40  # the first live record
        assert log.index_at_time(60) == 60
    with StoreView.open(node) as view:
        assert search_store(view, 10).index == 40
        assert search_store(view, 1000).index == 100


def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    node = write_log(tmp_path / "n", [1, 2, 3])
    with dledger.open_log(node, CONFIG) as log:
        with pytest.raises(ValueError, match=r"ms since the epoch \(>= 0\), got -1"):
            log.index_at_time(-1)
        with pytest.raises(ValueError, match="an integer of ms since the epoch"):
            log.index_at_time("5")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="window must be >= 1"):
            search_store(log, 1, window=0)
        assert [r.timestamp for r in log.iterate_records()] == [1, 2, 3]


def test_a_reader_that_skips_entries_is_an_error() -> None:
    def read(start: int, count: int) -> ColumnBatch:
        return ColumnBatch.empty()

    with pytest.raises(RuntimeError, match="a read of entry 0 returned 0 entries starting at None"):
        search_time(1, 0, 10, read)


def test_records_appended_in_bulk(tmp_path: Path) -> None:
    """append_records and raw record bodies (the bench's bulk path) search alike."""
    with dledger.open_log(tmp_path / "n", CONFIG) as log:
        log.append_records([Record(b"v", timestamp=t) for t in range(0, 100, 2)])
        log.append_many([encode_record(b"w", None, t, ()) for t in range(100, 200, 2)], 16)
        assert log.index_at_time(51) == 26
        assert log.index_at_time(151) == 76
