"""Fixtures of the Raft tests: the store kinds every cluster scenario runs on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.raft.cluster import MemoryStores, MmapStores, StoreKind


@pytest.fixture(params=["memory", "mmap"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreKind]:
    """MemoryLogStore members, then MmapLogStore members (small segments, in tmp_path)."""
    kind: StoreKind = MemoryStores() if request.param == "memory" else MmapStores(tmp_path)
    yield kind
    kind.close()
