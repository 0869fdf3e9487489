"""NodeSnapshots: a member's snapshots (docs/OPERATIONS.md, "Snapshots").

- Taking and loading: a `SnapshotManager` (dledger.statemachine.snapshot_manager) over
  the node's `SnapshotStore`, when the state machine is a `SnapshottingStateMachine`;
  the newest usable snapshot is loaded before the first apply (`load_at_startup`).
- Compaction: after each committed snapshot the log prefix is reset
  (`snapshotEntryResetStrategy`: up to the snapshot, or keeping its last
  `resetSnapshotEntriesButKeepLastEntriesNum` entries), never past the applied or the
  committed index, nor, on the leader, past what a live follower still needs (within
  `snapshotCatchUpEntries`, dledger.raft.log_floors).
- Sending (leader): the dispatcher's `InstallSnapshotRequest` (no data) is streamed as
  chunks of `CHUNK_BYTES` (dledger.node_snapshot_send).
- Receiving (follower): every chunk is checked by the Raft core (addressing, members,
  term, leader) and against the first one, written through the store's
  `SnapshotInstall` (offset and CRC checked there), the whole file verified, published,
  loaded into the state machine (apply held off) and the log reset to the snapshot's
  last index and term.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from dledger.codes import DLedgerError, ResponseCode
from dledger.node_snapshot_send import SnapshotHost, SnapshotSending
from dledger.raft.messages import (
    MAX_INDEX,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    InstallSnapshotStream,
    RequestOrResponse,
)
from dledger.statemachine.caller import SnapshottingStateMachine
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import Snapshot
from dledger.statemachine.snapshot_manager import SnapshotManager

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
"""The data carried by one InstallSnapshot chunk."""
_MAX_CRC = 0xFFFFFFFF
_SAME_IN_EVERY_CHUNK = (
    "last_included_index",
    "last_included_term",
    "total_size",
    "total_crc32",
    "term",
    "leader_id",
    "local_id",
    "next_pos",
)


class NodeSnapshots(SnapshotSending):
    """The snapshot side of one `SnapshotHost` (its helper: it uses the node's lock, core,
    store and caller).

    Args:
        node: the member.
        node_dir: its directory (the snapshots live in `snapshot/` under it).
    """

    def __init__(self, node: SnapshotHost, node_dir: Path) -> None:
        self.node = node
        config = node.config
        self.store = SnapshotStore(node_dir, config.max_snapshot_reserved_num)
        caller = node.caller
        machine = caller.state_machine if caller is not None else None
        self.machine = machine if isinstance(machine, SnapshottingStateMachine) else None
        self.manager: SnapshotManager | None = None
        if caller is not None and self.machine is not None:
            self.manager = SnapshotManager(
                self.store, self.machine, config.snapshot_threshold, self.compact, companion=node.producers
            )
            if config.enable_snapshot:
                caller.after_apply = self.manager.after_apply
        elif config.enable_snapshot:
            log.warning("enableSnapshot is on but the state machine cannot take snapshots: none are taken")
        self.chunk_bytes = CHUNK_BYTES
        self._load_lock = threading.Lock()
        self._senders: dict[str, threading.Thread] = {}
        self._stopped = False

    @classmethod
    def open(cls, node: SnapshotHost, node_dir: Path | None, close_store: bool) -> NodeSnapshots | None:
        """The snapshots of a node with a directory (None for a store in memory), the
        newest usable one loaded (`load_at_startup`); on failure the node's store is
        closed when `close_store`, and the error raised."""
        if node_dir is None:
            return None
        try:
            snapshots = cls(node, node_dir)
            snapshots.load_at_startup()
        except BaseException:
            if close_store:
                node.store.close()
            raise
        return snapshots

    @property
    def last_index(self) -> int:
        """lastIncludedIndex of the newest snapshot taken, loaded or installed (-1: none)."""
        latest = self.node.core.latest_snapshot
        return latest[0] if latest is not None else -1

    # -- startup, compaction, shutdown

    def load_at_startup(self) -> None:
        """Load the newest usable snapshot before the first apply (see SnapshotManager).

        Raises:
            DLedgerError: LOAD_SNAPSHOT_ERROR when none loads and the log no longer
                starts at index 0.
        """
        node = self.node
        if self.manager is None:
            newest = self.store.snapshots(limit=1)
            if newest:
                node.core.latest_snapshot = (newest[0].index, newest[0].term)
            return
        store = node.store
        first_live = store.begin_index if store.begin_index >= 0 else store.end_index + 1  # empty: after its end
        snapshot = self.manager.load_newest(first_live)
        if snapshot is not None:
            self._adopt(snapshot.index, snapshot.term)

    def _adopt(self, index: int, term: int) -> None:
        """The machine holds snapshot (index, term): the log continues after it (reset
        when it ends below it), the index is committed and applied, the prefix compacted."""
        node = self.node
        with node._lock:
            store, member = node.store, node.core.member_state
            if store.end_index < index:
                store.reset(index, term)
            elif store.begin_index >= 0 and store.begin_index <= index and store.term_at(index) != term:
                # the log holds another entry at the snapshot's index (an install whose log
                # reset a power loss undid): it and everything after it are not committed
                log.warning("the log holds another entry at snapshot %d's index: dropped from there", index)
                if store.end_index > index:
                    store.truncate(index + 1)
                store.reset(index, term)
            member.update_committed_index(index)
            self._note(index, term)
            if node.caller is not None and node.caller.applied_index < index:
                node.caller.set_applied(index, term)
            self._compact_locked(index, term)

    def _note(self, index: int, term: int) -> None:
        core = self.node.core
        if core.latest_snapshot is None or core.latest_snapshot[0] < index:
            core.latest_snapshot = (index, term)
        if self.manager is not None:
            self.manager.note(index, term)

    def compact(self, index: int, term: int) -> None:
        """After snapshot (index, term) was committed (snapshot thread): record it and
        reset the log prefix as the reset strategy says."""
        node = self.node
        if node._stopped:
            return
        node.producers.close()  # the table saved first, outside the node's lock (see _compact_locked)
        with node._lock:
            if node._stopped:
                return
            self._note(index, term)
            self._compact_locked(index, term, table_saved=True)

    def _compact_locked(self, index: int, term: int, table_saved: bool = False) -> None:
        node, config = self.node, self.node.config
        store = node.store
        upto = index
        if config.snapshot_entry_reset_strategy == "RESET_BUT_KEEP_SOME_SYNC":
            upto = index - config.reset_snapshot_entries_but_keep_last_entries_num
        applied = node.caller.applied_index if node.caller is not None else index
        # nor past what the saved producer table covers (the table is folded from the log)
        if not table_saved:
            node.producers.close()
        covered = node.producers.retention_floor() - 1
        upto = min(upto, node.core.member_state.committed_index, applied, store.end_index, covered)
        kept_for_followers = node.core.compaction_floor(index) - 1
        if kept_for_followers < upto:
            log.info("compaction after snapshot %d keeps the log from %d for a follower", index, kept_for_followers + 1)
            upto = kept_for_followers
        if store.begin_index < 0 or upto < store.begin_index:
            return
        before_term = term if upto == index else store.term_at(upto)
        store.reset(upto, before_term)
        start = f"it starts at {store.begin_index}" if store.begin_index >= 0 else "it holds no entry now"
        log.info("log compacted up to %d after snapshot %d; %s", upto, index, start)

    def stop(self) -> None:
        """Start no more saves or streams; wait for the save in flight."""
        self._stopped = True
        if self.manager is not None:
            self.manager.stop()

    # -- receiving (follower)

    def receive(self, stream: InstallSnapshotStream) -> InstallSnapshotResponse:
        """Take an InstallSnapshot stream; the answer's `next_offset` is where the next
        stream of this snapshot must start (its size after SUCCESS)."""
        first: InstallSnapshotRequest | None = None
        try:
            first = next(stream.chunks, None)
            if first is None:
                return self._answer(stream, ResponseCode.UNEXPECTED_ARGUMENT, "an empty InstallSnapshot stream")
            return self._receive(first, stream.chunks)
        except DLedgerError as exc:
            return self._answer(first or stream, exc.code, str(exc))
        except Exception as exc:  # the stream broke (the sender went away): what arrived stays
            return self._answer(first or stream, ResponseCode.INSTALL_SNAPSHOT_ERROR, f"stream broken: {exc}")

    def _answer(
        self, req: InstallSnapshotRequest | InstallSnapshotStream, code: int, why: str = "", next_offset: int = 0
    ) -> InstallSnapshotResponse:
        if code != ResponseCode.SUCCESS:
            log.warning("InstallSnapshot from %r refused: %s (%s)", req.local_id, ResponseCode.of(code).name, why)
        node = self.node
        member = node.core.member_state
        index = getattr(req, "last_included_index", -1)
        return InstallSnapshotResponse(
            **member.answer_header(req),
            code=code,
            next_offset=next_offset,
            last_included_index=index,
            last_included_term=getattr(req, "last_included_term", -1),
            end_index=node.store.end_index,
        )

    def _check(self, chunk: InstallSnapshotRequest, first: InstallSnapshotRequest) -> ResponseCode | None:
        with self.node._lock:
            bad = self.node.core.check_install(chunk)
        if bad is not None:
            return bad
        if any(getattr(chunk, name) != getattr(first, name) for name in _SAME_IN_EVERY_CHUNK):
            return ResponseCode.UNEXPECTED_ARGUMENT
        for value in (chunk.last_included_index, chunk.last_included_term, chunk.total_size, chunk.offset):
            if isinstance(value, bool) or not 0 <= value <= MAX_INDEX:
                return ResponseCode.UNEXPECTED_ARGUMENT
        if not -1 <= chunk.next_pos <= MAX_INDEX:
            return ResponseCode.UNEXPECTED_ARGUMENT
        if not (0 <= chunk.total_crc32 <= _MAX_CRC and 0 <= chunk.chunk_crc32 <= _MAX_CRC):
            return ResponseCode.UNEXPECTED_ARGUMENT
        if chunk.offset + len(chunk.data) > chunk.total_size:
            return ResponseCode.INSTALL_SNAPSHOT_ERROR
        return None

    def _receive(
        self, first: InstallSnapshotRequest, rest: Iterator[InstallSnapshotRequest]
    ) -> InstallSnapshotResponse:
        bad = self._check(first, first)
        if bad is not None:
            return self._answer(first, bad, "first chunk")
        index, term, size = first.last_included_index, first.last_included_term, first.total_size
        if (held := self._holds(index, term)) is not None:
            return self._answer(first, ResponseCode.SUCCESS, held, size)
        install = self.store.begin_install(index, term)
        chunk: InstallSnapshotRequest | None = first
        while chunk is not None:
            bad = self._check(chunk, first)
            if bad is not None:
                return self._answer(first, bad, f"chunk at {chunk.offset}", install.resume_offset())
            try:
                install.write_chunk(chunk.offset, chunk.data, chunk.chunk_crc32)
            except DLedgerError as exc:
                return self._answer(first, exc.code, str(exc), install.resume_offset())
            if install.resume_offset() >= size:
                break
            try:
                chunk = next(rest, None)
            except DLedgerError as exc:  # a chunk the service refused
                return self._answer(first, exc.code, str(exc), install.resume_offset())
            except Exception as exc:  # the stream broke: what arrived stays, for the next one
                why = f"stream broken: {exc}"
                return self._answer(first, ResponseCode.INSTALL_SNAPSHOT_ERROR, why, install.resume_offset())
        if install.resume_offset() < size:
            return self._answer(first, ResponseCode.INSTALL_SNAPSHOT_ERROR, "stream ended", install.resume_offset())
        if (held := self._holds(index, term)) is not None:  # the log moved on meanwhile
            install.abort()
            return self._answer(first, ResponseCode.SUCCESS, held, size)
        snapshot = install.finish(index, term, first.total_crc32, size)
        code = self._load_installed(snapshot, first.next_pos)
        return self._answer(first, code, "loading it", size if code == ResponseCode.SUCCESS else 0)

    def _holds(self, index: int, term: int) -> str | None:
        """Why this member needs no snapshot (index, term), or None. Loaded at or below the
        committed index, it would take the machine back (the entries after it were
        applied, and would not be again); a log that holds (index, term) keeps it and
        what follows (Raft §7): the leader's pushes go on after it."""
        with self.node._lock:
            store, committed = self.node.store, self.node.core.member_state.committed_index
            if index <= committed:
                why = f"its committed index {committed} is at or past it"
            elif 0 <= store.begin_index <= index <= store.end_index and store.term_at(index) == term:
                why = "its log holds that entry"
            else:
                return None
        log.info("snapshot %d (term %d) not installed: %s", index, term, why)
        return why

    def _drop_log(self, index: int, term: int, next_pos: int) -> None:
        """Under the node lock: the log continues right after snapshot (index, term), at
        the leader's position `next_pos` when known. Entries after it not committed here
        go too: they did not match the leader (it would not have installed otherwise),
        and they sit at this member's own positions, not the leader's."""
        store = self.node.store
        cut = max(index, self.node.core.member_state.committed_index) + 1
        if store.begin_index >= 0 and store.end_index >= cut:
            store.truncate(max(cut, store.begin_index))
        store.reset(index, term, next_pos if next_pos >= 0 else None)

    def _load_installed(self, snapshot: Snapshot, next_pos: int) -> ResponseCode:
        """Load an installed snapshot into the machine (apply held off) and move the log,
        committed and applied indexes to it."""
        node = self.node
        caller = node.caller
        hold: AbstractContextManager[object] = caller.apply_lock if caller is not None else nullcontext()
        with self._load_lock, hold:
            if self.manager is not None:
                # with apply held off no save can start (the apply thread starts them), so
                # the one in flight is the last: a machine may refuse a load while it saves
                self.manager.wait_idle()
                try:
                    self.manager.load(snapshot)
                except Exception as exc:
                    log.exception("loading installed snapshot %d failed; applying stopped", snapshot.index)
                    if caller is not None:
                        caller.stop(exc)
                    return ResponseCode.LOAD_SNAPSHOT_ERROR
            elif caller is not None:
                log.warning("the state machine cannot load snapshots: entries up to %d skip it", snapshot.index)
            with node._lock:
                self._drop_log(snapshot.index, snapshot.term, next_pos)
            self._adopt(snapshot.index, snapshot.term)
        log.info("installed snapshot %d (term %d) from the leader", snapshot.index, snapshot.term)
        return ResponseCode.SUCCESS


def receive_install(snapshots: NodeSnapshots | None, stream: InstallSnapshotStream) -> Future[RequestOrResponse]:
    """A node's answer to an InstallSnapshot stream (taken in the calling thread);
    UNSUPPORTED for a node without snapshots (its store is in memory)."""
    answer: Future[RequestOrResponse] = Future()
    if snapshots is None:
        answer.set_result(
            InstallSnapshotResponse(
                group=stream.group, local_id=stream.remote_id, remote_id=stream.local_id, code=ResponseCode.UNSUPPORTED
            )
        )
    else:
        answer.set_result(snapshots.receive(stream))
    return answer
