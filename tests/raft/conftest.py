"""Fixtures of the Raft tests: the store kinds every cluster scenario runs on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.raft.cluster import Cluster, MemoryStores, MmapStores, StoreKind


@pytest.fixture(params=["memory", "mmap"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreKind]:
    """MemoryLogStore members, then MmapLogStore members (small segments, in tmp_path)."""
    kind: StoreKind = MemoryStores() if request.param == "memory" else MmapStores(tmp_path)
    yield kind
    kind.close()


@pytest.fixture
def cluster_factory(stores: StoreKind) -> Iterator[type[Cluster]]:
    """`Cluster` on the `stores` kind; every cluster made is closed afterwards."""
    made: list[Cluster] = []

    class _Cluster(Cluster):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, stores=stores, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield _Cluster
    for c in made:
        c.close()
