"""The history of one chaos run: every append attempt (invoke, complete, outcome), the
members' status samples, the fault events and the members' final committed logs, kept in
memory while the run goes and written as JSON lines afterwards (one object per line,
`"type"` first: `op`, `status`, `event`, `final` (a member's committed log read through
the client), `down`, `store` (a member's committed log read offline from its store after
a clean stop), `unreadable`).

Bodies are unique ASCII strings (`<client>-<seq>`), so the history stays readable JSON.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def now_s() -> float:
    """The clock every record of a run uses (monotonic seconds)."""
    return time.monotonic()


@dataclass
class Op:
    """One append attempt of one body.

    Attributes:
        body: the unique body.
        invoke: when the client sent it.
        complete: when its outcome was known (0 while pending).
        outcome: `ok` (acknowledged, `index` set), `fail` (provably not appended),
            `info` (indeterminate: may or may not be in the log), `pending`.
        index: the acknowledged index (-1 unless ok).
        error: the client's error text for fail / info.
        leader, term: who acknowledged it, in which term (ok only).
    """

    body: str
    invoke: float
    complete: float = 0.0
    outcome: str = "pending"
    index: int = -1
    error: str = ""
    leader: str = ""
    term: int = -1


@dataclass(frozen=True)
class Status:
    """One sample of a member's Metadata (`life` counts its starts: a restart begins a
    new life, and the commit index must only be monotonic within one life)."""

    t: float
    node: str
    life: int
    term: int
    role: str
    committed: int


@dataclass(frozen=True)
class Event:
    """Something the schedule did. `measure`: unavailability is measured from it (the
    time until an append invoked after it is acknowledged)."""

    t: float
    what: str
    measure: bool = False


@dataclass
class History:
    """A thread-safe record of one run."""

    ops: list[Op] = field(default_factory=list)
    statuses: list[Status] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    finals: dict[str, list[str | None]] = field(default_factory=dict)
    """Each readable member's committed log at the end (body per index, None: a NOOP)."""
    down: list[str] = field(default_factory=list)
    """Members that could not be read at the end (not running or not answering)."""
    stores: dict[str, list[str | None]] = field(default_factory=dict)
    """Each member's committed log read offline from its store after a clean stop."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Stores that could not be read offline, and why."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_op(self, op: Op) -> None:
        """Record an attempt (its outcome is filled in later, in place)."""
        with self.lock:
            self.ops.append(op)

    def add_status(self, status: Status) -> None:
        """Record a status sample."""
        with self.lock:
            self.statuses.append(status)

    def event(self, what: str, *, measure: bool = False) -> Event:
        """Record a schedule event now."""
        event = Event(now_s(), what, measure)
        with self.lock:
            self.events.append(event)
        return event

    def acked(self) -> int:
        """How many appends were acknowledged so far."""
        with self.lock:
            return sum(1 for op in self.ops if op.outcome == "ok")

    def dump(self, path: Path) -> None:
        """Write the history as JSON lines."""
        with self.lock:
            rows: list[dict[str, Any]] = [{"type": "op", **asdict(op)} for op in self.ops]
            rows += [{"type": "status", **asdict(s)} for s in self.statuses]
            rows += [{"type": "event", **asdict(e)} for e in self.events]
            rows += [{"type": "final", "node": node, "log": log} for node, log in self.finals.items()]
            rows += [{"type": "down", "node": node} for node in self.down]
            rows += [{"type": "store", "node": node, "log": log} for node, log in self.stores.items()]
            rows += [{"type": "unreadable", "node": node, "why": why} for node, why in self.unreadable.items()]
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as out:
            for row in rows:
                out.write(json.dumps(row, separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        """Read a history written by `dump`."""
        history = cls()
        with open(path) as source:
            for line in source:
                row = json.loads(line)
                kind = row.pop("type")
                if kind == "op":
                    history.ops.append(Op(**row))
                elif kind == "status":
                    history.statuses.append(Status(**row))
                elif kind == "event":
                    history.events.append(Event(**row))
                elif kind == "final":
                    history.finals[row["node"]] = row["log"]
                elif kind == "down":
                    history.down.append(row["node"])
                elif kind == "store":
                    history.stores[row["node"]] = row["log"]
                elif kind == "unreadable":
                    history.unreadable[row["node"]] = row["why"]
                else:
                    raise ValueError(f"{path}: unknown record type {kind!r}")
        return history
