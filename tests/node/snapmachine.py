"""A small snapshotting state machine for the snapshot tests: a running sum and the
indexes it applied (the snapshot holds the sum and the count, as JSON)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import BinaryIO

from dledger.entry import Entry


class SumMachine:
    """Sums the integer bodies it is given; two-phase snapshots of (sum, count, last)."""

    def __init__(self) -> None:
        self.total = 0
        self.count = 0
        self.last = -1
        self.applied: list[int] = []  # the indexes on_apply got, in order
        self.loads: list[int] = []  # the `last` of every snapshot loaded
        self.captures = 0
        self.fail_save = False
        self.fail_load = False
        self.save_gate: threading.Event | None = None  # set: saves wait for it
        self._captured: tuple[int, int, int] | None = None

    def on_apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.total += int(entry.body)
            self.count += 1
            self.last = entry.index
            self.applied.append(entry.index)

    def on_snapshot_capture(self) -> None:
        self.captures += 1
        self._captured = (self.total, self.count, self.last)

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        if self.save_gate is not None:
            self.save_gate.wait(30)
        if self.fail_save:
            raise OSError("save failed on purpose")
        assert self._captured is not None
        writer.write(json.dumps(self._captured).encode())

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        if self.fail_load:
            raise ValueError("load failed on purpose")
        self.total, self.count, self.last = json.loads(reader.read())
        self.loads.append(self.last)

    def state(self) -> tuple[int, int]:
        return self.total, self.count
