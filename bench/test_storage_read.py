"""Read throughput over a log of 200,000 128 B entries: sequential and random point reads
(`get_body(i)` / get(key)) and sequential column reads (`read_columns`, 4,096 rows a call)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench._backends import READ_BACKENDS, Backend
from bench._common import READ_WORKLOAD, drain, make_bodies, random_order, record

ROUNDS = 7
Loaded = tuple[str, Backend]


@pytest.fixture(scope="module", params=list(READ_BACKENDS))
def loaded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """A store of each kind holding READ_WORKLOAD (loaded in batches, untimed)."""
    impl: str = request.param
    root = tmp_path_factory.mktemp(f"read-{impl}")
    backend = READ_BACKENDS[impl]()
    backend.open(root / "store")
    backend.batch_writer(READ_WORKLOAD)()
    try:
        yield impl, backend
    finally:
        backend.close()
        shutil.rmtree(root, ignore_errors=True)


def _bench(benchmark: Any, name: str, impl: str, target: Callable[[], object]) -> None:
    group = f"read-{READ_WORKLOAD.label}-{name}"
    benchmark.group = group
    benchmark.pedantic(target, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, group, impl, READ_WORKLOAD.count)


def _point_reads(benchmark: Any, loaded: Loaded, name: str, order: list[int]) -> None:
    impl, backend = loaded
    get, keys = backend.getter(), backend.read_keys(order)
    bodies = make_bodies(READ_WORKLOAD.size, READ_WORKLOAD.count)
    assert get(keys[-1]) == bodies[order[-1]]
    _bench(benchmark, name, impl, lambda: drain(get, keys))


def test_read_seq(benchmark: Any, loaded: Loaded) -> None:
    """Point reads of every entry in index order."""
    _point_reads(benchmark, loaded, "seq", list(range(READ_WORKLOAD.count)))


def test_read_random(benchmark: Any, loaded: Loaded) -> None:
    """Point reads of every entry in a fixed random order."""
    _point_reads(benchmark, loaded, "random", random_order(READ_WORKLOAD.count))


def test_read_columns(benchmark: Any, loaded: Loaded) -> None:
    """Sequential scan of every entry, 4,096 rows at a time; rows/s."""
    impl, backend = loaded
    assert backend.scan() == READ_WORKLOAD.count
    _bench(benchmark, "columns", impl, backend.scan)
