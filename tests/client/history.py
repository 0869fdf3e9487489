"""History recording and checking for an append-only log (FAULTS.md §2.2).

Every append attempt gets a fresh unique payload (`uid`) and ends as `ok` (with its
index), `fail` (provably not appended) or `info` (unknown). Reads of committed entries
and of commit indexes are recorded too. After the run, `check` compares all of it with
every member's final committed log in one linear pass per check:

1. no divergence: every member's committed log is a prefix of the longest one;
2. exactly once: no uid twice in any log;
3. no phantom: every uid in a log was attempted, and none of them failed definitely;
4. acked never lost: every `ok` uid is at its acknowledged index;
5. real-time order: an `ok` append that completed before another was invoked has the
   smaller index;
6. reads: a committed entry read equals the final one; a member's commit index never
   decreases within one process lifetime;
7. status claims: at most one leader per term; a member's term never decreases.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Op:
    """One append attempt of one body."""

    uid: bytes
    invoke: float
    complete: float = 0.0
    status: str = "pending"  # ok / fail / info
    index: int = -1
    error: str = ""


@dataclass(frozen=True)
class EntryRead:
    """A committed entry read from `node` during the run."""

    node: str
    index: int
    uid: bytes | None  # None for a NOOP


@dataclass(frozen=True)
class StatusRead:
    """What a member said about itself during the run (`life` counts its restarts)."""

    node: str
    life: int
    t: float
    term: int
    role: str
    committed: int


@dataclass
class History:
    """A thread-safe history: append ops, reads, status polls and fault events."""

    ops: list[Op] = field(default_factory=list)
    entry_reads: list[EntryRead] = field(default_factory=list)
    status_reads: list[StatusRead] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_op(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)

    def add_read(self, read: EntryRead) -> None:
        with self.lock:
            self.entry_reads.append(read)

    def add_status(self, read: StatusRead) -> None:
        with self.lock:
            self.status_reads.append(read)

    def event(self, t: float, what: str) -> None:
        with self.lock:
            self.events.append((t, what))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for op in self.ops:
            out[op.status] += 1
        return dict(out)

    def dump(self, path: Path) -> None:
        """Write the history as JSON lines (ops, reads, status polls, events by time)."""
        rows: list[tuple[float, dict[str, Any]]] = []
        for op in self.ops:
            row = asdict(op)
            row["uid"] = op.uid.decode("latin-1")
            rows.append((op.invoke, {"type": "append", **row}))
        for read in self.status_reads:
            rows.append((read.t, {"type": "status", **asdict(read)}))
        for read in self.entry_reads:
            uid = read.uid.decode("latin-1") if read.uid is not None else None
            rows.append((0.0, {"type": "read", "node": read.node, "index": read.index, "uid": uid}))
        for t, what in self.events:
            rows.append((t, {"type": "fault", "t": t, "what": what}))
        rows.sort(key=lambda r: r[0])
        path.write_text("".join(json.dumps(row) + "\n" for _, row in rows))


FinalLogs = dict[str, list[bytes | None]]
"""Each member's committed log: uid per index (None for NOOP entries)."""


def check(history: History, final: FinalLogs) -> list[tuple[Any, ...]]:
    """Every violation found (empty when the history is clean)."""
    errors: list[tuple[Any, ...]] = []
    longest = max(final.values(), key=len) if final else []
    for node, log in final.items():  # 1 divergence
        for i, uid in enumerate(log):
            if longest[i] != uid:
                errors.append(("divergence", node, i))
                break
    for node, log in final.items():  # 2 duplicates
        seen: set[bytes] = set()
        for uid in log:
            if uid is None:
                continue
            if uid in seen:
                errors.append(("duplicate", node, uid))
            seen.add(uid)
    pos: dict[bytes, int] = {}
    for i, uid in enumerate(longest):
        if uid is not None:
            pos.setdefault(uid, i)
    by_uid = {op.uid: op for op in history.ops}
    for uid, i in pos.items():  # 3 phantom / failed but present
        op = by_uid.get(uid)
        if op is None or op.status == "fail":
            errors.append(("phantom", uid, i, op.status if op else "never invoked"))
    for op in history.ops:  # 4 acked lost or moved
        if op.status == "ok" and pos.get(op.uid) != op.index:
            errors.append(("lost", op.uid, op.index, pos.get(op.uid)))
    placed = sorted((op for op in history.ops if op.uid in pos), key=lambda op: op.invoke)
    oks = sorted((op for op in placed if op.status == "ok"), key=lambda op: op.complete)
    j, high = 0, -1  # 5 real-time order
    for op in placed:
        while j < len(oks) and oks[j].complete < op.invoke:
            high = max(high, pos[oks[j].uid])
            j += 1
        if pos[op.uid] <= high:
            errors.append(("realtime", op.uid, pos[op.uid], high))
    for read in history.entry_reads:  # 6 committed reads never change
        if read.index >= len(longest) or longest[read.index] != read.uid:
            errors.append(("read-changed", read.node, read.index))
    last_commit: dict[tuple[str, int], int] = {}
    last_term: dict[str, int] = {}
    leaders: dict[int, set[str]] = defaultdict(set)
    for read in sorted(history.status_reads, key=lambda r: r.t):  # 6 + 7 status claims
        key = (read.node, read.life)
        if read.committed < last_commit.get(key, -1):
            errors.append(("commit-regressed", read.node, read.life, last_commit[key], read.committed))
        last_commit[key] = max(read.committed, last_commit.get(key, -1))
        if read.term < last_term.get(read.node, -1):
            errors.append(("term-regressed", read.node, last_term[read.node], read.term))
        last_term[read.node] = max(read.term, last_term.get(read.node, -1))
        if read.role == "LEADER":
            leaders[read.term].add(read.node)
    for term, nodes in leaders.items():
        if len(nodes) > 1:
            errors.append(("two-leaders", term, sorted(nodes)))
    return errors
