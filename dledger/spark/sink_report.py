"""What a `dledger` write's commit and abort say (no pyspark): per partition, the rows its
task left in the log, and for tasks that did not finish, exactly what may be there.

Spark hands the writer's `commit`/`abort` one message per partition (`messages[p]`),
None for a task that did not finish; a finished task's message is
`dledger.spark.sink.AppendedMessage` (read here by its attributes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SHOWN = 16
"""Partitions listed by name in a report (the rest are counted)."""


def _finished(messages: Sequence[Any]) -> list[tuple[int, Any]]:
    return [(p, m) for p, m in enumerate(messages) if m is not None and hasattr(m, "count")]


def _where(message: Any) -> str:
    first, last = int(getattr(message, "first", -1)), int(getattr(message, "last", -1))
    at = f" at indexes {first}..{last}" if first >= 0 else ""
    runs = getattr(message, "runs", ())
    if len(runs) > 1:
        at += f" (in {len(runs)} runs)"
    appended = int(getattr(message, "appended", -1))
    count = int(message.count)
    if 0 <= appended < count:
        at += f", {count - appended} of them found in the log already"
    return f"partition {getattr(message, 'partition', -1)}: {count} rows{at}"


def _listed(items: Sequence[str]) -> str:
    shown = "; ".join(items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def commit_report(messages: Sequence[Any], what: str) -> str:
    """The commit's line: the rows each task left in the log."""
    finished = _finished(messages)
    rows = sum(int(m.count) for _, m in finished)
    again = sum(int(m.count) - int(m.appended) for _, m in finished if int(getattr(m, "appended", -1)) >= 0)
    dup = (
        f" ({again} of them were found in the log already: appended by another attempt or by a resent request, "
        "not twice)"
        if again
        else ""
    )
    return f"{what} wrote {rows} rows in {len(finished)} tasks{dup}: " + _listed([_where(m) for _, m in finished])


def abort_report(messages: Sequence[Any], what: str, exactly_once: bool, *, streaming: bool) -> str:
    """The abort's lines: what the finished tasks left in the log, and which tasks did not
    finish and may have left a prefix of their rows."""
    finished = _finished(messages)
    done = {p for p, _ in finished}
    unfinished = [p for p in range(len(messages)) if p not in done]
    rows = sum(int(m.count) for _, m in finished)
    text = (
        f"{what} failed; nothing can be taken back out of a Raft log. {len(finished)} of {len(messages)} tasks "
        f"finished: their {rows} rows stay in the log"
    )
    if finished:
        text += " (" + _listed([_where(m) for _, m in finished]) + ")"
    if unfinished:
        names = ", ".join(map(str, unfinished[:SHOWN])) + (", ..." if len(unfinished) > SHOWN else "")
        text += (
            f". {len(unfinished)} tasks did not finish (partitions {names}): each may have appended a prefix of its "
            "rows in partition order (its rows 0..k-1 for some k: none, some or all of them)"
        )
    if not exactly_once:
        return text + ". At-least-once (exactlyOnce=false): writing these rows again duplicates those in the log."
    if streaming:
        return text + (
            ". Spark runs the batch again under the same query id and batch id: its rows already in the log "
            "are answered as duplicates, not appended twice."
        )
    return text + (
        ". A new job has new producer ids: running the job again appends these rows again "
        "(only a task's retries within one job are de-duplicated)."
    )
