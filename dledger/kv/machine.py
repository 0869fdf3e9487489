"""KVStateMachine: a replicated key-value map built from the committed log.

It implements the state-machine protocols of `dledger.statemachine` structurally:
`on_apply` (one answer per entry), `query` (reads from the current state, safe against
a concurrent `on_apply`) and the two-phase snapshot hooks `on_snapshot_capture` /
`on_snapshot_save` plus `on_snapshot_load`. Commands and answers are encoded by
`dledger.kv.commands`; snapshots by `dledger.kv.snapshot_format`.

Point-in-time snapshots, copy-on-write by overlay:

- The state is a dict, `base`. `on_snapshot_capture()` (apply thread, between two
  `on_apply` calls) freezes it: it becomes the captured view as it is, without a copy,
  and an empty `overlay` dict is opened. O(1).
- While the view is captured, writes go to the overlay only (a delete leaves a
  tombstone), so the frozen `base` never changes; reads look in the overlay first, then
  in `base`.
- `on_snapshot_save(writer)` (snapshot thread) streams the frozen `base` without any
  lock, while `on_apply` and `query` carry on. Afterwards it folds the overlay back into
  `base`, a bounded chunk at a time under the lock (so apply never waits for more than
  one chunk), and closes it.
- Memory: nothing is copied at capture; while a save runs, each distinct key written
  costs one overlay entry (the key and value objects are shared, not copied) on top of
  the old value still held by `base`. So the extra memory is O(keys written during the
  save), at most the size of the data written meanwhile, plus the save's 1 MiB write
  buffer. A capture whose save never comes is folded back by the next capture.

Thread safety: one lock guards the maps and counters; `on_apply` holds it for a batch,
`query` for one read. Only the save iterates `base`, and only while it is frozen.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from dledger.entry import Entry
from dledger.kv.commands import (
    WRITES,
    Answer,
    Cas,
    CasFailed,
    Command,
    Count,
    Delete,
    Error,
    Get,
    Len,
    NotFound,
    Ok,
    Pairs,
    Put,
    Scan,
    Value,
    decode_command,
    encode_answer,
)
from dledger.kv.snapshot_format import read_snapshot, write_snapshot

log = logging.getLogger(__name__)

FOLD_CHUNK = 4096
"""Overlay entries folded back into the map per lock hold after a save."""

_ABSENT = object()


class KVStateMachine:
    """A key-value map (bytes to bytes) replicated through the log.

    Log entries are `dledger.kv.commands` commands: PUT, DELETE and CAS change the map;
    GET, LEN and SCAN in the log are reads through the log (DLedger's RAFT_LOG mode) and
    change nothing. A body that is no valid command is answered with an `Error` answer
    and changes nothing (the log may hold other data).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base: dict[bytes, bytes] = {}
        self._overlay: dict[bytes, bytes | None] | None = None
        self._count = 0
        self._applied_index = -1
        self._captured: tuple[dict[bytes, bytes], int, int] | None = None  # (view, count, applied index)
        self._saving = False

    # ---- reads -------------------------------------------------------------------

    @property
    def applied_index(self) -> int:
        """The index of the last entry applied (or of the loaded snapshot), -1 before any."""
        with self._lock:
            return self._applied_index

    def _lookup(self, key: bytes) -> bytes | None:
        if self._overlay is not None:
            found = self._overlay.get(key, _ABSENT)
            if found is not _ABSENT:
                return found  # type: ignore[return-value]
        return self._base.get(key)

    def get(self, key: bytes) -> bytes | None:
        """The value of `key` now (None: absent)."""
        with self._lock:
            return self._lookup(key)

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def to_dict(self) -> dict[bytes, bytes]:
        """A copy of the whole map now (O(n): for tests and tools)."""
        with self._lock:
            state = dict(self._base)
            for key, value in (self._overlay or {}).items():
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
            return state

    def _scan(self, prefix: bytes, limit: int) -> Pairs:
        keys: set[bytes] = {k for k in self._base if k.startswith(prefix)}
        if self._overlay is not None:
            keys.update(k for k in self._overlay if k.startswith(prefix))
            keys = {k for k in keys if self._lookup(k) is not None}  # drop tombstones
        chosen = heapq.nsmallest(limit, keys) if limit < len(keys) else sorted(keys)
        return Pairs(tuple((k, self._lookup(k) or b"") for k in chosen))

    def _read(self, command: Get | Len | Scan) -> Answer:
        if isinstance(command, Get):
            value = self._lookup(command.key)
            return NotFound() if value is None else Value(value)
        if isinstance(command, Len):
            return Count(self._count)
        return self._scan(command.prefix, command.limit)

    def query(self, request: bytes) -> bytes:
        """Answer a read (GET, LEN or SCAN) from the current state (what the Query RPC
        calls, from any thread). Writes are refused with an `Error` answer: they go
        through the log. Bad bytes, or a request that is not bytes at all, get an
        `Error` answer, never an exception."""
        if not isinstance(request, bytes | bytearray | memoryview):
            return encode_answer(Error(f"a query request must be bytes, not {type(request).__name__}"))
        try:
            command = decode_command(request)
        except ValueError as exc:
            return encode_answer(Error(str(exc)))
        if isinstance(command, WRITES):
            return encode_answer(Error(f"{type(command).__name__.upper()} is a write: append it to the log"))
        with self._lock:
            return encode_answer(self._read(command))

    # ---- writes ------------------------------------------------------------------

    def _set(self, key: bytes, value: bytes | None) -> None:
        """Set `key` (value None: delete it; it is present)."""
        if self._overlay is not None:
            self._overlay[key] = value
        elif value is None:
            del self._base[key]
        else:
            self._base[key] = value

    def _execute(self, command: Command) -> Answer:
        if not isinstance(command, WRITES):
            return self._read(command)
        old = self._lookup(command.key)
        if isinstance(command, Put):
            self._set(command.key, command.value)
            self._count += old is None
            return Ok()
        if isinstance(command, Delete):
            if old is None:
                return NotFound()
            self._set(command.key, None)
            self._count -= 1
            return Ok()
        assert isinstance(command, Cas)
        if old != command.expected:
            return CasFailed(old)
        self._set(command.key, command.new)
        self._count += old is None
        return Ok()

    def on_apply(self, entries: Sequence[Entry]) -> Sequence[bytes]:
        """Apply committed entries in order; returns one encoded answer per entry (an
        `Error` answer, and no change, for a body that is not a command)."""
        answers: list[bytes] = []
        with self._lock:
            for entry in entries:
                try:
                    command = decode_command(entry.body)
                except ValueError as exc:
                    answers.append(encode_answer(Error(str(exc))))
                    continue
                answers.append(encode_answer(self._execute(command)))
            if entries:
                self._applied_index = entries[-1].index
        return answers

    # ---- snapshots ---------------------------------------------------------------

    def on_snapshot_capture(self) -> None:
        """Freeze the current state as the view the next `on_snapshot_save` writes, in
        O(1) (see the module docstring). Called on the apply thread between two
        `on_apply` calls.

        Raises:
            RuntimeError: a save is still running (at most one capture/save pair may
                be in flight).
        """
        with self._lock:
            if self._saving:
                raise RuntimeError("a key-value snapshot is being saved; capture again after it ends")
        if self._overlay is not None:  # a capture whose save never came
            self._fold()
        with self._lock:
            self._overlay = {}
            self._captured = (self._base, self._count, self._applied_index)

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        """Write the captured view to `writer` (the snapshot thread; `on_apply` and
        `query` keep running), then fold the writes made meanwhile back into the map.

        Raises:
            RuntimeError: nothing captured, or a save already running.
            OSError: from the writer (the view is folded back all the same).
        """
        with self._lock:
            if self._captured is None or self._saving:
                raise RuntimeError("on_snapshot_save needs one on_snapshot_capture first")
            view, count, applied_index = self._captured
            self._saving = True
        try:
            write_snapshot(writer, applied_index, count, iter(view.items()))
        finally:
            self._fold()
            with self._lock:
                self._saving = False

    def _fold(self) -> None:
        """Move the overlay's entries into the map, FOLD_CHUNK per lock hold, then close it."""
        while True:
            with self._lock:
                overlay = self._overlay
                if overlay is None:
                    return
                for _ in range(min(FOLD_CHUNK, len(overlay))):
                    key, value = overlay.popitem()
                    if value is None:
                        self._base.pop(key, None)
                    else:
                        self._base[key] = value
                if not overlay:
                    self._overlay = None
                    self._captured = None
                    return

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        """Replace the whole state with a snapshot's (apply thread, nothing else running
        on the machine). The snapshot is read and checked completely first: on any
        error the state is unchanged.

        Raises:
            ValueError: the bytes are not a complete, intact key-value snapshot.
            RuntimeError: a save is running.
        """
        applied_index, state = read_snapshot(reader)
        with self._lock:
            if self._saving:
                raise RuntimeError("cannot load a snapshot while one is being saved")
            self._base, self._overlay, self._captured = state, None, None
            self._count = len(state)
            self._applied_index = applied_index
        log.info("loaded a key-value snapshot: %d keys, applied index %d", len(state), applied_index)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """The (key, value) pairs now, sorted by key (a copy: for tests and tools)."""
        return iter(sorted(self.to_dict().items()))


__all__ = ["FOLD_CHUNK", "KVStateMachine"]
