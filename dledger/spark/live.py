"""The live path of the Spark source: reads from and writes to a running cluster through
the gRPC client, written against a small interface so it can be tested with a fake client.

No Spark and no gRPC import here: `default_client_factory` (and `read_task`, for the
wire layout) import `dledger.client` only when a live read or write actually runs (on
the driver for planning, inside `read()` / `write()` on executors, where channels must
be created).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NORMAL
from dledger.security.probe import with_tls_hint
from dledger.security.tls import TlsConfig
from dledger.spark.options import ReadOptions
from dledger.spark.planning import (
    IndexAtTime,
    IndexRange,
    LogBounds,
    assign_nodes,
    candidate_nodes,
    check_data_loss,
    plan_live,
    resolve_range,
)
from dledger.spark.send_queue import requests_of, send_all
from dledger.spark.target import TLS_OPTIONS, Target
from dledger.timeindex import PROBE_BYTES, TimeSearch, search_time

log = logging.getLogger(__name__)

TLS_SETTINGS = f"the options {', '.join(TLS_OPTIONS[:-1])} and {TLS_OPTIONS[-1]}"
"""How a hint names the TLS settings of a Spark job."""


class LedgerClient(Protocol):
    """What the source needs of `dledger.client.DLedgerClient`."""

    def read_committed(
        self,
        from_index: int,
        to_index: int | None,
        max_batch_bytes: int,
        *,
        node_id: str | None = None,
        max_batch_count: int = 0,
        layout: int = ...,
        retry: bool = True,
    ) -> Iterator[ColumnBatch]:
        """Committed entries [from_index, to_index) as column batches of at most
        `max_batch_bytes` and `max_batch_count` entries (0: the server's default), from
        `node_id` (or any member); fewer when the serving member has not committed that far.
        `layout`: the wire layout of the batches (`dledger.transport.convert`'s PACKED or
        FIXED_WIDTH); `retry=False`: fail at once instead of retrying for the timeout."""
        ...

    def append_many(self, bodies: list[bytes]) -> int:
        """Append the bodies through the leader, as one request; returns the index of the
        first (the batch occupies first..first+len(bodies)-1)."""
        ...

    def append_batch(self, bodies: list[bytes], magic: int) -> Any:
        """Append the bodies as entries of `magic` (16: record bodies) in one request;
        the result's `first_index` is the first one's index."""
        ...

    def metadata(self, node_id: str | None = None) -> Any:
        """The group as `node_id` (default: the leader) knows it: leader_id, peers,
        begin_index, end_index, committed_index, and its own id (node_id or self_id)."""
        ...

    def close(self) -> None:
        """Close the channels."""
        ...


ClientFactory = Callable[[str, str, float], LedgerClient]
"""(peers string, group, timeout in seconds) -> client."""


def default_client_factory(peers: str, group: str, timeout_s: float) -> LedgerClient:
    """A `dledger.client.DLedgerClient` for `peers` (imported here: executors create
    their clients inside `read()` / `write()`; the driver only for planning)."""
    from dledger.client import DLedgerClient

    return DLedgerClient(peers, group=group, timeout_s=timeout_s)


@dataclass(frozen=True)
class TlsClientFactory:
    """Makes clients that speak mutual TLS with the members, presenting the files of
    `tls` (read where each client is made: on the driver and on the executors).
    Picklable: Spark ships it to the tasks."""

    tls: TlsConfig
    token: str | None = None

    def __call__(self, peers: str, group: str, timeout_s: float) -> LedgerClient:
        """A TLS `dledger.client.DLedgerClient` for `peers`.

        Raises:
            dledger.security.tls.TlsError: a file cannot be read or is not PEM.
        """
        from dledger.client import DLedgerClient

        return DLedgerClient(peers, group=group, timeout_s=timeout_s, tls=self.tls, token=self.token)


def client_factory_for(target: Target) -> ClientFactory:
    """How the clients of a read or write of `target` are made: plaintext, or TLS with
    its `tlsCert` / `tlsKey` / `tlsCa` files (and its bearer `token`)."""
    return default_client_factory if target.tls is None else TlsClientFactory(target.tls, target.token)


def close_client(client: LedgerClient) -> None:
    """Close a client, never raising (it is done with either way)."""
    try:
        client.close()
    except Exception as exc:  # pragma: no cover - a close failure changes nothing
        log.debug("closing a dledger client failed: %s", exc)


def peers_string(nodes: Iterable[tuple[str, str]]) -> str:
    """DLedger's peers string for (id, address) pairs."""
    return ";".join(f"{node_id}-{address}" for node_id, address in nodes)


# -- cluster state


@dataclass(frozen=True)
class ClusterView:
    """The group as seen at planning time.

    Attributes:
        leader_id: the leader, or None when none is known.
        peers: every member, id -> address (in the order given).
        bounds: the log's bounds; `committed` is the leader's committed index when known.
        self_id: the member that answered.
    """

    leader_id: str | None
    peers: dict[str, str]
    bounds: LogBounds
    self_id: str | None = None


def _field(meta: Any, name: str, default: Any = None) -> Any:
    if isinstance(meta, Mapping):
        return meta.get(name, default)
    return getattr(meta, name, default)


def cluster_view(meta: Any, configured: Mapping[str, str]) -> ClusterView:
    """A ClusterView from a `metadata()` answer (an object or a mapping with the
    NodeMetadata / MetadataResponse field names). The `configured` addresses are kept
    (they may be the members' client ports, which the members do not advertise); the
    answer adds the members the job was not given."""
    peers = dict(configured)
    answered = _field(meta, "peers") or {}
    for node_id, address in dict(answered).items():
        peers.setdefault(str(node_id), str(address))
    leader = _field(meta, "leader_id") or None
    self_id = _field(meta, "node_id") or _field(meta, "self_id") or None
    bounds = LogBounds(
        int(_field(meta, "begin_index", -1)),
        int(_field(meta, "end_index", -1)),
        int(_field(meta, "committed_index", -1)),
    )
    return ClusterView(str(leader) if leader else None, peers, bounds, str(self_id) if self_id else None)


def fetch_view(target: Target, client: LedgerClient) -> ClusterView:
    """Ask the cluster for its state; when a follower answered, ask the leader too (its
    committed index is the newest)."""
    configured = target.peer_map()
    try:
        metadata = client.metadata()
    except DLedgerError as exc:  # no member answered: say so when it is a TLS mismatch
        raise with_tls_hint(exc, configured, target.tls, TLS_SETTINGS) from None
    view = cluster_view(metadata, configured)
    if view.leader_id and view.self_id and view.self_id != view.leader_id and view.leader_id in view.peers:
        try:
            view = cluster_view(client.metadata(node_id=view.leader_id), view.peers)
        except Exception as exc:  # the follower's answer is still usable
            log.warning("leader %s did not answer metadata (%s); using %s's view", view.leader_id, exc, view.self_id)
    return view


def fetch_view_once(target: Target, factory: ClientFactory, timeout_s: float) -> ClusterView:
    """`fetch_view` with a client of its own (closed afterwards)."""
    client = factory(target.peers or "", target.group, timeout_s)
    try:
        return fetch_view(target, client)
    finally:
        close_client(client)


# -- planning


@dataclass(frozen=True)
class LiveTask:
    """One read task: everything an executor needs to read [start, end) on its own.

    Attributes:
        start, end: the range.
        group: the DLedger group.
        nodes: (id, address) of the nodes to try, in order.
        fetch_max_bytes: bodies per streamed chunk.
        fail_on_data_loss: fail (true) or skip when entries are gone.
        timeout_s: how long one node may take to answer before the next is tried.
        fetch_max_entries: entries per streamed chunk.
    """

    start: int
    end: int
    group: str
    nodes: tuple[tuple[str, str], ...]
    fetch_max_bytes: int
    fail_on_data_loss: bool
    timeout_s: float = 30.0
    fetch_max_entries: int = 0


def plan_tasks(view: ClusterView, rng: IndexRange, opts: ReadOptions, min_partitions: int) -> list[LiveTask]:
    """Split `rng` (already bounded and checked for data loss) into tasks spread over the
    nodes `opts.read_from` selects, each with fallbacks."""
    ranges = plan_live(rng.start, rng.end, min_partitions, opts.entries_per_partition)
    node_ids = list(view.peers)
    cands = candidate_nodes(opts.read_from, view.leader_id, node_ids)
    return [
        LiveTask(
            r.start,
            r.end,
            opts.target.group,
            tuple((n, view.peers[n]) for n in order),
            opts.fetch_max_bytes,
            opts.fail_on_data_loss,
            opts.rpc_timeout_ms / 1000,
            opts.fetch_max_entries,
        )
        for r, order in assign_nodes(ranges, cands, node_ids, view.leader_id)
    ]


def index_at_time(client: LedgerClient, view: ClusterView, timestamp_ms: int) -> int:
    """The first record at or after `timestamp_ms` in the cluster's committed log, else
    its committed index + 1 (see `search_cluster`)."""
    return search_cluster(client, view, timestamp_ms).index


def search_cluster(
    client: LedgerClient, view: ClusterView, timestamp_ms: int, *, interpolate: bool = True
) -> TimeSearch:
    """`dledger.timeindex.search_time` over the cluster's committed log, each probe one
    small read from the leader (at most 2 + 2 log2(n) round trips; nothing is scanned)."""
    bounds = view.bounds

    def read(start: int, count: int) -> ColumnBatch:
        batches = client.read_committed(
            start, start + count, PROBE_BYTES, node_id=view.leader_id, max_batch_count=count
        )
        try:
            return next((b for b in batches if b.count), ColumnBatch.empty())
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # ends the stream (the rest of the window is not needed)

    return search_time(timestamp_ms, bounds.earliest, bounds.latest, read, interpolate=interpolate)


def plan_batch_read(
    view: ClusterView, opts: ReadOptions, min_partitions: int, at_time: IndexAtTime | None = None
) -> list[LiveTask]:
    """The tasks of a batch read: [startingIndex, endingIndex) bounded by the committed
    index; `at_time` resolves startingTimestamp / endingTimestamp (needed when given)."""

    def no_search(timestamp_ms: int) -> int:
        raise ValueError("a read by timestamp needs a client to search the log")

    rng = resolve_range(opts, view.bounds, at_time or no_search)
    start, end = rng.start, rng.end
    if start >= end:
        return []
    start = check_data_loss(start, view.bounds, opts.fail_on_data_loss)
    return plan_tasks(view, IndexRange(start, end), opts, min_partitions)


# -- reading with failover


def slice_batch(batch: ColumnBatch, lo: int, hi: int) -> ColumnBatch:
    """Entries lo..hi-1 (positions in the batch) of a column batch; a copy of the bodies
    only when lo > 0."""
    if lo == 0:
        return ColumnBatch(
            batch.index[:hi], batch.term[:hi], batch.pos[:hi], batch.offsets[: hi + 1], batch.bodies, batch.magic[:hi]
        )
    first, last = int(batch.offsets[lo]), int(batch.offsets[hi])
    offsets = (batch.offsets[lo : hi + 1] - first).astype(np.int32)
    return ColumnBatch(
        batch.index[lo:hi],
        batch.term[lo:hi],
        batch.pos[lo:hi],
        offsets,
        bytearray(batch.bodies[first:last]),
        batch.magic[lo:hi],
    )


class ReadFailedError(RuntimeError):
    """No node could serve a live read task."""


def read_task(task: LiveTask, factory: ClientFactory) -> Iterator[ColumnBatch]:
    """Entries [task.start, task.end) from the task's nodes, in order, exactly once.

    A node that fails, or ends its stream early (it has not committed that far yet), is
    left for the next one, which resumes after the last entry delivered; each node is
    tried once. Committed entries are identical on every node, so mixing nodes is safe.

    Each node is read in the FIXED_WIDTH column layout, which the task maps into numpy
    and Arrow without decoding one value at a time (PACKED costs the server about 0.2 µs
    per entry to encode), and without the client's retries (the next node is the retry).

    Raises:
        ReadFailedError: every node failed before the range was complete.
    """
    if task.start >= task.end:
        return
    from dledger.transport.convert import FIXED_WIDTH  # imports grpc: only where a read runs

    next_index = task.start
    errors: list[str] = []
    gone: list[str] = []  # the nodes that no longer hold next_index (compacted or deleted since planning)
    client = factory(peers_string(task.nodes), task.group, task.timeout_s)
    try:
        for node_id, address in task.nodes:
            try:
                batches = client.read_committed(
                    next_index,
                    task.end,
                    task.fetch_max_bytes,
                    node_id=node_id,
                    max_batch_count=task.fetch_max_entries,
                    layout=FIXED_WIDTH,
                    retry=False,
                )
                for batch in batches:
                    if batch.count == 0:
                        continue
                    first = int(batch.index[0])
                    if first > next_index:
                        raise ReadFailedError(f"{node_id} skipped entries {next_index}..{first - 1}")
                    lo, hi = next_index - first, min(batch.count, task.end - first)
                    if lo >= hi:
                        continue
                    next_index = first + hi
                    yield batch if (lo, hi) == (0, batch.count) else slice_batch(batch, lo, hi)
                    if next_index >= task.end:
                        return
                errors.append(f"{node_id} ({address}): its stream ended at {next_index}")
            except Exception as exc:
                if isinstance(exc, DLedgerError) and exc.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN:
                    gone.append(node_id)  # another node may still hold them: members compact on their own
                else:
                    log.warning("live read of [%d, %d) from %s failed: %s", next_index, task.end, node_id, exc)
                errors.append(f"{node_id} ({address}): {exc}")
        if len(gone) == len(task.nodes):  # no node holds next_index any more: the entries are gone
            start = check_data_loss(next_index, _earliest_held(client, gone), task.fail_on_data_loss)
            if start > next_index:
                yield from read_task(replace(task, start=start), factory)
                return
    finally:
        close_client(client)
    raise ReadFailedError(
        f"entries [{next_index}, {task.end}) of group {task.group} could not be read: " + "; ".join(errors)
    )


def _earliest_held(client: LedgerClient, nodes: list[str]) -> LogBounds:
    """The bounds whose first index is the lowest any of `nodes` still holds (each said
    that it no longer holds the entry a read asked it for)."""
    earliest = []
    for node_id in nodes:
        meta = client.metadata(node_id=node_id)
        begin, end = int(_field(meta, "begin_index", -1)), int(_field(meta, "end_index", -1))
        earliest.append(LogBounds(begin, end, end))
    return min(earliest, key=lambda bounds: bounds.earliest)


# -- writing


@dataclass(frozen=True)
class Appended:
    """What one write task appended: `count` entries, the first at index `first` and the
    last at `last` (other writers' entries may lie between; both -1 when count is 0)."""

    first: int
    last: int
    count: int


def append_all(
    client: LedgerClient,
    bodies: Iterable[list[bytes]],
    batch_entries: int,
    batch_bytes: int,
    magic: int = MAGIC_NORMAL,
) -> Appended:
    """Append every body, in order, in `append_many` calls of at most `batch_entries`
    bodies and about `batch_bytes` bytes (at least one body per call). One call is in
    flight at a time (so the log keeps the order) while the next batch is assembled
    (`dledger.spark.send_queue`). `magic` MAGIC_RECORD appends record bodies
    (`append_batch(bodies, magic)`).

    At-least-once: a failed call raises, and entries appended before it stay in the log;
    after a failure (of a call or of `bodies`) nothing more is sent.
    """
    first = last = -1
    count = 0

    def send(batch: list[bytes]) -> None:
        nonlocal first, last, count
        if magic == MAGIC_NORMAL:
            at = int(client.append_many(batch))
        else:
            at = int(client.append_batch(batch, magic).first_index)
        first = at if first < 0 else first
        last = at + len(batch) - 1
        count += len(batch)

    send_all(requests_of(bodies, batch_entries, batch_bytes), send, "dledger-spark-append")
    return Appended(first, last, count)
