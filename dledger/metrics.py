"""Prometheus metrics with DLedger 0.4.0's names (`dledger_append_entry_latency`, ...).

As in DLedger, latencies are recorded in microseconds, with DLedger's buckets (1 µs to
10 s). Histograms are observed per client request / push / apply batch, never per entry.
Gauges (role, term, entry count, commit lag per peer) are read from the node when
Prometheus scrapes. Each node has its own registry, so several nodes can share a process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dledger.bounded import read_bounded
from dledger.node_status import NodeStatus

LATENCY_BUCKETS_US = (
    1, 3, 5, 10, 30, 50, 100, 300, 500,
    1_000, 2_000, 3_000, 5_000, 10_000, 30_000, 50_000, 100_000, 300_000, 500_000,
    1_000_000, 3_000_000, 5_000_000, 10_000_000,
)  # fmt: skip
BATCH_BYTES_BUCKETS = tuple(float(1 << k) for k in range(6, 27, 2))
BATCH_COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)
ROLE_CODES = {"CANDIDATE": 0, "FOLLOWER": 1, "LEADER": 2}


class NodeMetrics:
    """The metrics of one node.

    Args:
        group, self_id: label values of every series.
    """

    def __init__(self, group: str, self_id: str) -> None:
        self.registry = CollectorRegistry()
        self.labels = {"group": group, "self_id": self_id}
        names = ("group", "self_id")
        peer_names = (*names, "remote_id")

        def histogram(name: str, doc: str, buckets: tuple[float, ...], labels: tuple[str, ...] = names) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

        self.append_latency = histogram(
            "dledger_append_entry_latency", "client append until committed, microseconds", LATENCY_BUCKETS_US
        ).labels(**self.labels)
        self.append_batch_bytes = histogram(
            "dledger_append_entry_batch_bytes", "bytes per client append", BATCH_BYTES_BUCKETS
        ).labels(**self.labels)
        self.append_batch_count = histogram(
            "dledger_append_entry_batch_count", "entries per client append", BATCH_COUNT_BUCKETS
        ).labels(**self.labels)
        self._replicate_latency = histogram(
            "dledger_replicate_entry_latency", "push until acknowledged, microseconds", LATENCY_BUCKETS_US, peer_names
        )
        self._replicate_bytes = histogram(
            "dledger_replicate_entry_batch_bytes", "bytes per push", BATCH_BYTES_BUCKETS, peer_names
        )
        self._replicate_count = histogram(
            "dledger_replicate_entry_batch_count", "entries per push", BATCH_COUNT_BUCKETS, peer_names
        )
        self._replicate_children: dict[str, tuple[Any, Any, Any]] = {}
        self.apply_latency = histogram(
            "dledger_apply_task_latency", "state machine apply batch, microseconds", LATENCY_BUCKETS_US
        ).labels(**self.labels)
        self.apply_batch_count = histogram(
            "dledger_apply_task_batch_count", "entries per apply batch", BATCH_COUNT_BUCKETS
        ).labels(**self.labels)
        self.read_latency = histogram(
            "dledger_read_latency", "committed read, microseconds", LATENCY_BUCKETS_US
        ).labels(**self.labels)

    def observe_replicate(self, remote_id: str, latency_us: float, nbytes: int, count: int) -> None:
        """One acknowledged push to `remote_id` (on the path of every commit: the labelled
        children are looked up once per peer, not per push)."""
        children = self._replicate_children.get(remote_id)
        if children is None:
            labels = {**self.labels, "remote_id": remote_id}
            children = self._replicate_children[remote_id] = (
                self._replicate_latency.labels(**labels),
                self._replicate_bytes.labels(**labels),
                self._replicate_count.labels(**labels),
            )
        latency, size, entries = children
        latency.observe(latency_us)
        size.observe(nbytes)
        entries.observe(count)

    def observe_apply(self, latency_us: float, count: int) -> None:
        """One batch the state machine applied."""
        self.apply_latency.observe(latency_us)
        self.apply_batch_count.observe(count)

    def watch(self, status: Callable[[], NodeStatus]) -> None:
        """Export the gauges of `status()` (read at scrape time)."""
        self.registry.register(_StatusCollector(status, self.labels))

    def watch_certificate(self, path: str) -> None:
        """Export `dledger_tls_certificate_expiry_timestamp_seconds`: when the certificate
        in `path` expires, read at scrape time (it follows a rotation), for an alert
        well before every handshake starts failing. Nothing while the file cannot be read."""
        self.registry.register(_CertificateCollector(path, self.labels))


class _StatusCollector(Collector):
    def __init__(self, status: Callable[[], NodeStatus], labels: dict[str, str]) -> None:
        self._status = status
        self._labels = labels

    def collect(self) -> Iterator[Any]:
        s = self._status()
        keys, values = list(self._labels), list(self._labels.values())

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=keys)
            family.add_metric(values, value)
            return family

        yield gauge("dledger_entries_count", "entries in the local log (end - begin + 1; 0 when empty)", _entries(s))
        yield gauge("dledger_role", "0 candidate, 1 follower, 2 leader", ROLE_CODES.get(s.role, -1))
        yield gauge("dledger_term", "current term", s.term)
        yield gauge("dledger_committed_index", "committed index known here", s.committed_index)
        yield gauge("dledger_ledger_end_index", "last index in the local log", s.end_index)
        yield gauge("dledger_applied_index", "last index applied to the state machine", s.applied_index)
        yield gauge("dledger_producers", "idempotent producers in the committed producer table", s.producers)
        yield gauge("dledger_store_takes_writes", "0 while the store takes no write (full, failed)", not s.store_health)
        yield gauge("dledger_state_machine_applies", "0 once the state machine stopped", not s.machine_health)
        lag = GaugeMetricFamily(
            "dledger_commit_lag",
            "leader only: entries each member is behind the leader's end",
            labels=[*keys, "remote_id"],
        )
        for peer, match in s.peer_match.items():
            lag.add_metric([*values, peer], s.end_index - match)
        yield lag


def _entries(status: NodeStatus) -> int:
    """How many entries the local log holds: none when it is empty (begin -1), whether
    fresh (end -1) or compacted to its end (end at the last entry dropped)."""
    if status.begin_index < 0 or status.end_index < status.begin_index:
        return 0
    return status.end_index - status.begin_index + 1


class _CertificateCollector(Collector):
    def __init__(self, path: str, labels: dict[str, str]) -> None:
        self._path = path
        self._labels = labels

    def collect(self) -> Iterator[Any]:
        from cryptography import x509

        try:
            end = x509.load_pem_x509_certificate(read_bounded(self._path)).not_valid_after_utc
        except (OSError, ValueError):
            return
        family = GaugeMetricFamily(
            "dledger_tls_certificate_expiry_timestamp_seconds",
            "when this member's TLS certificate expires, Unix time",
            labels=[*self._labels, "path"],
        )
        family.add_metric([*self._labels.values(), self._path], end.timestamp())
        yield family


class MetricsOwner(Protocol):
    """What `start_metrics_server` serves: the owner of a `NodeMetrics` (a DLedgerNode)."""

    @property
    def metrics(self) -> NodeMetrics:
        """The owner's metrics."""
        ...


def start_metrics_server(node: MetricsOwner, port: int, addr: str = "127.0.0.1") -> Any:
    """Serve `node`'s metrics at http://addr:port/metrics; returns the HTTP server."""
    server, _thread = start_http_server(port, addr=addr, registry=node.metrics.registry)
    return server
