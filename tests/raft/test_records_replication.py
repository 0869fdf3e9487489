"""Record entries (magic 16) in the Raft layer: one leader append of requests of
different magics keeps each request's magic and order, and every member's log holds
the same records after replication (memory and file stores)."""

from __future__ import annotations

import pytest

from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import encode_record, record_of
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction


def test_mixed_magic_requests_replicate_in_order(cluster_factory: type[Cluster]) -> None:
    c = cluster_factory(3, seed=3)
    leader = c.elect()
    c.run_for(300)
    driver = c.members[leader].driver
    rec = [encode_record(b"r%d" % k, b"k", k, [("h", b"%d" % k)]) for k in range(3)]
    requests = [[b"p0", b"p1"], [rec[0]], [rec[1], rec[2]], [b"p2"]]
    magics = [MAGIC_NORMAL, MAGIC_RECORD, MAGIC_RECORD, MAGIC_NORMAL]
    futures = driver.append_requests(requests, c.now, magics)
    c.run_for(1000)
    lasts = [f.result(timeout=0) for f in futures]
    first = lasts[0] - 1
    assert lasts == [first + 1, first + 2, first + 4, first + 5]
    for node_id in c.ids:
        store = c.members[node_id].store
        entries = [store.get(i) for i in range(first, first + 6)]
        assert [e.magic for e in entries] == [1, 1, 16, 16, 16, 1]
        assert [record_of(e).value for e in entries] == [b"p0", b"p1", b"r0", b"r1", b"r2", b"p2"]
        assert record_of(entries[3]).headers == (("h", b"1"),)
