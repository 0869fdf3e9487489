"""The verdict of one chaos run, computed from its `History` alone.

Checks (each violation counted, the first few described):

- **lost**: an acknowledged append that is not at its acknowledged index of the final
  committed log (the longest member log);
- **duplicated**: a body present more than once in any member's committed log
  (acknowledged or indeterminate: an indeterminate append may be there at most once);
- **unknown**: a body in a log that no client attempted, or whose append failed
  definitely;
- **diverged**: a member whose committed log (read through the client, or offline from
  its store after a clean stop) is not a prefix of the longest one read through the
  client;
- **commit regressions**: a member's sampled commit index went down within one process
  life;
- **down**: a member that could not be read at the end (never came back);
- **unavailability**: for each measured fault event, the time until an append invoked
  after it was acknowledged; a fault never followed by one, or followed by a stall
  longer than `max_unavailable_s`, is a failure.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from tests.chaos.history import History

MAX_PROBLEMS = 10
MAX_UNAVAILABLE_S = 30.0
"""A fault followed by a longer stall fails the verdict (issue 17's target is two
election timeouts, 3 s at a 500 ms heartbeat; this bound leaves room for a loaded
machine and still catches a `maxVoteHoldMs` stall of 60 s)."""


@dataclass
class Verdict:
    """The outcome of one run (`ok` when nothing was lost, duplicated, unknown, diverged,
    regressed or left down, and every measured fault was followed by an ack)."""

    schedule: str
    flush: str
    ops: int = 0
    acked: int = 0
    indeterminate: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    unknown: int = 0
    diverged: int = 0
    commit_regressions: int = 0
    down: list[str] = field(default_factory=list)
    unavailability: list[float | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    note: str = ""
    error: str = ""
    """Set when the run itself broke (the harness, not the cluster): never a pass."""
    max_unavailable_s: float = MAX_UNAVAILABLE_S

    @property
    def ok(self) -> bool:
        """True when the run found no violation."""
        bad = self.lost + self.duplicated + self.unknown + self.diverged + self.commit_regressions
        slow = any(v is None or v > self.max_unavailable_s for v in self.unavailability)
        return bad == 0 and not self.down and not slow and not self.error

    def problem(self, text: str) -> None:
        """Describe a violation (only the first few are kept)."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def unavailability_p50_max(self) -> tuple[float | None, float | None]:
        """Median and maximum unavailability over the measured faults that recovered."""
        values = [v for v in self.unavailability if v is not None]
        if not values:
            return None, None
        return statistics.median(values), max(values)

    def line(self) -> str:
        """The one-line verdict."""
        unavail = ",".join("never" if v is None else f"{v:.2f}" for v in self.unavailability) or "-"
        text = (
            f"VERDICT {'PASS' if self.ok else 'FAIL'} schedule={self.schedule} flush={self.flush} "
            f"ops={self.ops} acked={self.acked} indeterminate={self.indeterminate} lost={self.lost} "
            f"duplicated={self.duplicated} unknown={self.unknown} diverged={self.diverged} "
            f"commit_regressions={self.commit_regressions} down={','.join(self.down) or '-'} unavail_s={unavail}"
        )
        if self.error:
            text += f" error={self.error!r}"
        elif self.problems:
            text += f" first_problem={self.problems[0]!r}"
        return text


def check(history: History, schedule: str, flush: str, max_unavailable_s: float = MAX_UNAVAILABLE_S) -> Verdict:
    """Judge a finished run (`max_unavailable_s`: the longest stall after a fault that
    still passes)."""
    verdict = Verdict(schedule, flush, down=sorted(history.down), max_unavailable_s=max_unavailable_s)
    outcomes = Counter(op.outcome for op in history.ops)
    verdict.ops = len(history.ops)
    verdict.acked = outcomes["ok"]
    verdict.indeterminate = outcomes["info"] + outcomes["pending"]
    verdict.failed = outcomes["fail"]
    for node in verdict.down:
        verdict.problem(f"{node} is down at the end")
    reference = _check_divergence(history, verdict)
    _check_bodies(history, reference, verdict)
    _check_commit_monotonic(history, verdict)
    _measure_unavailability(history, verdict)
    return verdict


def _check_divergence(history: History, verdict: Verdict) -> list[str | None]:
    """Count logs that disagree with the longest client-read one; return the longest."""
    if not history.finals:
        return []
    longest_node = max(sorted(history.finals), key=lambda node: len(history.finals[node]))
    reference = history.finals[longest_node]
    logs = [(node, log) for node, log in sorted(history.finals.items())]
    logs += [(f"{node}'s store", log) for node, log in sorted(history.stores.items())]
    for name, log in logs:
        mismatch = next((k for k in range(min(len(log), len(reference))) if log[k] != reference[k]), None)
        if mismatch is not None:
            verdict.diverged += 1
            verdict.problem(
                f"{name} diverges from {longest_node} at index {mismatch}: {log[mismatch]!r} != {reference[mismatch]!r}"
            )
    return reference


def _check_bodies(history: History, reference: list[str | None], verdict: Verdict) -> None:
    """Lost acknowledged appends, duplicates and unknown bodies."""
    outcome = {op.body: op.outcome for op in history.ops}
    duplicated: set[str] = set()
    unknown: set[str] = set()
    for node, log in sorted(history.finals.items()):
        counts = Counter(body for body in log if body is not None)
        for body, count in sorted(counts.items()):
            if count > 1 and body not in duplicated:
                duplicated.add(body)
                verdict.problem(f"{body!r} is {count} times in {node}'s log")
            if outcome.get(body) in (None, "fail") and body not in unknown:
                unknown.add(body)
                verdict.problem(f"{body!r} in {node}'s log was {outcome.get(body) or 'never'} attempted")
    verdict.duplicated, verdict.unknown = len(duplicated), len(unknown)
    for op in history.ops:
        if op.outcome != "ok":
            continue
        found = reference[op.index] if 0 <= op.index < len(reference) else None
        if found != op.body:
            verdict.lost += 1
            verdict.problem(f"acknowledged {op.body!r} at index {op.index} is not there (found {found!r})")


def _check_commit_monotonic(history: History, verdict: Verdict) -> None:
    """A member's commit index never decreases within one life."""
    last: dict[tuple[str, int], int] = {}
    for status in sorted(history.statuses, key=lambda s: s.t):
        key = (status.node, status.life)
        if status.committed < last.get(key, -1):
            verdict.commit_regressions += 1
            verdict.problem(f"{status.node} (life {status.life}) commit index fell to {status.committed}")
        last[key] = max(status.committed, last.get(key, -1))


def _measure_unavailability(history: History, verdict: Verdict) -> None:
    """Seconds from each measured event to the first ack of an append invoked after it."""
    acks = sorted((op.invoke, op.complete) for op in history.ops if op.outcome == "ok")
    for event in sorted(history.events, key=lambda e: e.t):
        if not event.measure:
            continue
        after = [complete for invoke, complete in acks if invoke >= event.t]
        if after:
            stall = round(min(after) - event.t, 3)
            verdict.unavailability.append(stall)
            if stall > verdict.max_unavailable_s:
                verdict.problem(f"no append was acknowledged for {stall:.1f} s after {event.what!r}")
        else:
            verdict.unavailability.append(None)
            verdict.problem(f"no append was acknowledged after {event.what!r}")
