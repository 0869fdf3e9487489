"""NodeMetrics: each acknowledged push lands in its peer's series (children cached per peer)."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from dledger.metrics import NodeMetrics
from dledger.node_status import NodeStatus


def test_replicate_observations_go_to_each_peers_own_series() -> None:
    metrics = NodeMetrics("g", "n0")
    metrics.observe_replicate("n1", 500.0, 200, 2)
    metrics.observe_replicate("n1", 700.0, 100, 1)
    metrics.observe_replicate("n2", 900.0, 50, 5)
    text = generate_latest(metrics.registry).decode()
    n1 = 'group="g",remote_id="n1",self_id="n0"'
    n2 = 'group="g",remote_id="n2",self_id="n0"'
    assert f"dledger_replicate_entry_latency_count{{{n1}}} 2.0" in text
    assert f"dledger_replicate_entry_latency_sum{{{n1}}} 1200.0" in text
    assert f"dledger_replicate_entry_batch_count_sum{{{n1}}} 3.0" in text
    assert f"dledger_replicate_entry_latency_count{{{n2}}} 1.0" in text
    assert f"dledger_replicate_entry_batch_count_sum{{{n2}}} 5.0" in text


@pytest.mark.parametrize(
    ("begin", "end", "count"),
    [(-1, -1, 0), (-1, 12292, 0), (0, 0, 1), (0, 41, 42), (12293, 12300, 8)],
)
def test_entries_count_is_zero_for_an_empty_log(begin: int, end: int, count: int) -> None:
    """A fresh log (begin -1, end -1) and one compacted to its end (begin -1, end at the
    last entry dropped) hold no entry."""
    metrics = NodeMetrics("g", "n0")
    status = NodeStatus("g", "n0", "FOLLOWER", 3, None, {}, begin, end, 3 if end >= 0 else -1, end, end)
    metrics.watch(lambda: status)
    text = generate_latest(metrics.registry).decode()
    assert f'dledger_entries_count{{group="g",self_id="n0"}} {float(count)}' in text
