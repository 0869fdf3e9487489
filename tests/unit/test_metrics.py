"""NodeMetrics: each acknowledged push lands in its peer's series (children cached per peer)."""

from __future__ import annotations

from prometheus_client import generate_latest

from dledger.metrics import NodeMetrics


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
