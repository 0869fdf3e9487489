"""A small queryable state machine for the read tests: one register.

Entries `set:<value>` set it (answer b"ok"); any other entry reads it through the log
(its answer is the value: a RAFT_LOG query). `query(b"get")` answers the value; `gate`
(an Event) holds every query until set, so tests can make calls pile up.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from dledger.entry import Entry


class Register:
    def __init__(self) -> None:
        self.value = b""
        self.lock = threading.Lock()
        self.gate: threading.Event | None = None
        self.queries = 0
        self.held = 0  # queries that reached the gate

    def on_apply(self, entries: Sequence[Entry]) -> list[bytes]:
        out = []
        with self.lock:
            for entry in entries:
                if entry.body.startswith(b"set:"):
                    self.value = entry.body[4:]
                    out.append(b"ok")
                else:
                    out.append(self.value)
        return out

    def query(self, request: bytes) -> bytes:
        gate = self.gate
        if gate is not None:
            with self.lock:
                self.held += 1
            gate.wait(30)
        with self.lock:
            self.queries += 1
            if request == b"boom":
                raise ValueError("boom")
            return self.value
