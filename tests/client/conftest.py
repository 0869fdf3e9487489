"""Fixtures of the client tests: a fake Ledger cluster (unit) and a client on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dledger.client import DLedgerClient
from tests.client.fake_ledger import FakeCluster


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    """Three fake members on free 127.0.0.1 ports, n0 leading."""
    cluster = FakeCluster(3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def client(fake: FakeCluster) -> Iterator[DLedgerClient]:
    """A client of the fake cluster with a short timeout."""
    with DLedgerClient(fake.peers, timeout_s=10.0) as c:
        yield c
