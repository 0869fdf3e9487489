"""The leader's side of InstallSnapshot (a mixin of `NodeSnapshots`): the dispatcher's
request (no data) is streamed on a thread of its own as chunks of `chunk_bytes`, under
the follower's push quota; a first empty chunk tells where the follower's `install_tmp/`
ends, so a stream cut short resumes there, not at zero. A newest snapshot that verifies
but ends below the log's first entry minus one (a newer one is damaged; with the whole log
compacted, the entry after its end) is not sent: a new one is taken at the applied index
instead."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Protocol

from dledger.checksum import crc32
from dledger.clock import Clock
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.node_producers import NodeProducers
from dledger.raft.core import RaftCore
from dledger.raft.log import LogStore, first_readable
from dledger.raft.messages import (
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    InstallSnapshotStream,
    RequestOrResponse,
)
from dledger.raft.snapshot_dispatch import INSTALL_SNAPSHOT_TIMEOUT_MS
from dledger.statemachine.caller import StateMachineCaller
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import Snapshot, data_checksum
from dledger.statemachine.snapshot_manager import SnapshotManager
from dledger.transport.base import Transport

log = logging.getLogger(__name__)


class SnapshotHost(Protocol):
    """What NodeSnapshots uses of its node (a `SnapshotHost`)."""

    config: DLedgerConfig
    caller: StateMachineCaller | None
    core: RaftCore
    producers: NodeProducers
    store: LogStore
    transport: Transport | None
    clock: Clock
    _lock: threading.RLock
    _stopped: bool

    def _on_response(
        self, target_id: str, request: RequestOrResponse, future: Future[RequestOrResponse] | None
    ) -> None: ...


class SnapshotSending:
    """Streaming the newest snapshot to followers (see the module docstring)."""

    node: SnapshotHost
    store: SnapshotStore
    manager: SnapshotManager | None
    chunk_bytes: int
    _senders: dict[str, threading.Thread]
    _stopped: bool

    def send(self, target_id: str, request: InstallSnapshotRequest) -> None:
        """Stream the newest snapshot to `target_id` on a thread; its answer goes back to
        the driver as the answer to `request` (None when the stream failed)."""
        if self._stopped:
            return
        thread = threading.Thread(
            target=self._send, args=(target_id, request), name=f"dledger-install-{target_id}", daemon=True
        )
        self._senders[target_id] = thread
        thread.start()

    def _send(self, target_id: str, request: InstallSnapshotRequest) -> None:
        answer: Future[RequestOrResponse] = Future()
        try:
            response = self._stream(target_id, request)
        except Exception as exc:
            log.warning("install of a snapshot on %s failed: %s", target_id, exc)
            response = None
        if response is None:
            answer.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, "install stream failed"))
        else:
            answer.set_result(response)
        self.node._on_response(target_id, request, answer)

    def _stream(self, target_id: str, request: InstallSnapshotRequest) -> InstallSnapshotResponse | None:
        prepared = self.prepare_stream(request)
        transport = self.node.transport
        if prepared is None or transport is None:
            return None
        snapshot, header = prepared
        start = 0
        for _attempt in range(2):
            future = transport.send(target_id, self.stream_from(target_id, snapshot, header, start))
            answer = future.result(timeout=INSTALL_SNAPSHOT_TIMEOUT_MS / 1000)
            if not isinstance(answer, InstallSnapshotResponse):
                return None
            resume, size = answer.next_offset, header.total_size
            if answer.code == ResponseCode.INSTALL_SNAPSHOT_ERROR and resume != start and 0 < resume <= size:
                log.info("install on %s resumes at offset %d of %d", target_id, resume, size)
                start = resume
                continue
            return answer
        return None

    def prepare_stream(self, request: InstallSnapshotRequest) -> tuple[Snapshot, InstallSnapshotRequest] | None:
        """The newest snapshot and the header every chunk of its stream repeats (the
        dispatcher's request with the snapshot's index, term, size, CRC and the leader's
        next position); None without a snapshot."""
        newest = self.store.snapshots(limit=1)
        if not newest:
            return None
        snapshot = newest[0]
        first = first_readable(self.node.store)  # a compaction may have emptied the log (begin -1)
        if snapshot.index < first - 1:
            self._renew(snapshot.index, first)
            return None
        crc, size = snapshot.meta.crc32, snapshot.meta.size
        if crc is None or size is None:  # a Java meta: no checksum of ours
            crc, size = data_checksum(snapshot.data_path)
        with self.node._lock:  # no compaction meanwhile
            next_pos = next_position(self.node.store, snapshot.index)
        header = dataclasses.replace(
            request,
            last_included_index=snapshot.index,
            last_included_term=snapshot.term,
            total_size=size,
            total_crc32=crc,
            next_pos=next_pos,
        )
        return snapshot, header

    def _renew(self, usable: int, first: int) -> None:
        """The newest snapshot that verifies ends below the log's first entry minus one
        (a newer one is damaged): nothing fills the gap after it, so no follower can be
        brought up to date from it. Take one at the applied index now (the dispatcher
        asks again meanwhile)."""
        caller, manager = self.node.caller, self.manager
        if caller is None or manager is None:
            return
        with caller.apply_lock:
            applied = caller.applied_index
            started = applied > usable and manager.save_now(applied, caller.applied_term)
        if started:
            log.warning(
                "snapshot %d, the newest that verifies, ends below the log's first entry %d: a follower needs a "
                "newer one; taking one at the applied index %d",
                usable,
                first,
                applied,
            )

    def stream_from(
        self, target_id: str, snapshot: Snapshot, header: InstallSnapshotRequest, start: int
    ) -> InstallSnapshotStream:
        """The InstallSnapshot stream of `snapshot` to `target_id` from offset `start`."""
        return InstallSnapshotStream(
            group=header.group,
            remote_id=header.remote_id,
            local_id=header.local_id,
            leader_id=header.leader_id,
            term=header.term,
            chunks=self._chunks(target_id, snapshot, header, start),
        )

    def _chunks(
        self, target_id: str, snapshot: Snapshot, header: InstallSnapshotRequest, start: int
    ) -> Iterator[InstallSnapshotRequest]:
        """An empty chunk at `start` (the follower answers at once when it expects
        another offset), then the data from `start` in chunks, within the quota."""
        yield dataclasses.replace(header, offset=start, data=b"", chunk_crc32=0)
        dispatcher = self.node.core.dispatchers.get(target_id)
        quota = dispatcher.quota if dispatcher is not None else None
        clock = self.node.clock
        with open(snapshot.data_path, "rb") as data:
            data.seek(start)
            offset = start
            while not self._stopped and (piece := data.read(self.chunk_bytes)):
                if quota is not None:
                    while quota.validate_now(clock.now_ms()):
                        time.sleep(max(quota.left_now_ms(clock.now_ms()), 1) / 1000)
                    quota.sample(len(piece), clock.now_ms())
                yield dataclasses.replace(header, offset=offset, data=piece, chunk_crc32=crc32(piece))
                offset += len(piece)


def next_position(store: LogStore, index: int) -> int:
    """Where the entry after `index` starts (or will start) in `store`'s data files; -1
    when the log does not tell (the entries around it are gone)."""
    begin, end = store.begin_index, store.end_index
    if begin < 0:
        return int(getattr(store, "write_pos", -1)) if end == index else -1
    if begin <= index + 1 <= end:
        return store.get(index + 1).pos
    if begin <= index == end:
        last = store.get(index)
        return last.pos + last.size
    return -1
