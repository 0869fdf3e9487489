"""The chaos checker on hand-made histories: each kind of violation is reported, and a
clean history passes (fast: part of the default suite)."""

from __future__ import annotations

from pathlib import Path

from tests.chaos.checker import check
from tests.chaos.history import Event, History, Op, Status


def clean_history() -> History:
    """Three acked appends at 0..2, one indeterminate that made it (3), one indeterminate
    that did not, one definite failure; every member holds the same log; one fault."""
    history = History()
    history.ops = [
        Op("a", 1.0, 1.1, "ok", 0),
        Op("b", 1.2, 1.3, "ok", 1),
        Op("c", 3.0, 3.5, "ok", 2),
        Op("d", 3.6, 4.0, "info", error="DEADLINE_EXCEEDED"),
        Op("e", 3.6, 4.0, "info", error="DEADLINE_EXCEEDED"),
        Op("f", 3.6, 3.7, "fail", error="NOT_LEADER"),
    ]
    log: list[str | None] = ["a", "b", "c", None, "d"]
    history.finals = {"n0": list(log), "n1": list(log), "n2": log[:4]}
    history.events = [Event(2.0, "kill -9 n0", measure=True), Event(2.5, "restart n0")]
    history.statuses = [
        Status(1.0, "n1", 1, 1, "LEADER", 0),
        Status(2.0, "n1", 1, 1, "LEADER", 1),
        Status(3.0, "n0", 2, 2, "FOLLOWER", -1),  # a new life may start lower
    ]
    return history


def test_a_clean_history_passes() -> None:
    verdict = check(clean_history(), "leader-kill", "async")
    assert verdict.ok, verdict.problems
    assert (verdict.acked, verdict.indeterminate, verdict.failed) == (3, 2, 1)
    assert verdict.unavailability == [1.5]  # from 2.0 to the ack of "c" (invoked at 3.0)
    assert verdict.line().startswith("VERDICT PASS schedule=leader-kill flush=async ops=6 acked=3")


def test_a_lost_ack_is_reported() -> None:
    history = clean_history()
    history.finals = {node: [b for b in log if b != "b"] for node, log in history.finals.items()}
    verdict = check(history, "wipe", "async")
    assert not verdict.ok
    assert verdict.lost == 2  # "b" is gone and "c" is not at its index any more
    assert "acknowledged 'b' at index 1" in verdict.problems[0]
    assert "lost=2" in verdict.line() and verdict.line().startswith("VERDICT FAIL")


def test_an_ack_beyond_the_final_log_is_lost() -> None:
    history = clean_history()
    history.ops.append(Op("g", 5.0, 5.1, "ok", 9))
    verdict = check(history, "s", "sync")
    assert verdict.lost == 1 and not verdict.ok


def test_a_duplicate_is_reported_once_per_body() -> None:
    history = clean_history()
    history.finals = {node: [*log, "d"] for node, log in history.finals.items()}
    verdict = check(history, "s", "async")
    assert verdict.duplicated == 1 and verdict.lost == 0 and verdict.diverged == 0
    assert not verdict.ok


def test_a_divergence_is_reported() -> None:
    history = clean_history()
    history.finals["n2"] = ["a", "b", "x", None]
    verdict = check(history, "s", "async")
    assert verdict.diverged == 1
    assert any("n2 diverges from n0 at index 2" in p for p in verdict.problems)
    assert not verdict.ok


def test_a_store_that_diverges_is_reported() -> None:
    history = clean_history()
    history.stores = {"n0": ["a", "b"], "n1": ["a", "y", "c", None, "d", "later"]}
    verdict = check(history, "s", "async")
    assert verdict.diverged == 1 and not verdict.ok
    assert any("n1's store diverges from n0 at index 1" in p for p in verdict.problems)


def test_unknown_and_failed_bodies_are_reported() -> None:
    history = clean_history()
    history.finals = {node: [*log, "zz", "f"] for node, log in history.finals.items()}
    verdict = check(history, "s", "async")
    assert verdict.unknown == 2 and not verdict.ok


def test_a_commit_regression_within_one_life_is_reported() -> None:
    history = clean_history()
    history.statuses.append(Status(4.0, "n1", 1, 1, "LEADER", 0))
    verdict = check(history, "s", "async")
    assert verdict.commit_regressions == 1 and not verdict.ok


def test_a_member_left_down_and_a_fault_without_recovery_fail() -> None:
    history = clean_history()
    history.down = ["n2"]
    history.events.append(Event(10.0, "kill -9 n1", measure=True))
    verdict = check(history, "torn-tail", "async")
    assert verdict.down == ["n2"] and verdict.unavailability == [1.5, None]
    assert "down=n2" in verdict.line() and "unavail_s=1.50,never" in verdict.line()
    assert not verdict.ok


def test_the_history_file_round_trips(tmp_path: Path) -> None:
    history = clean_history()
    history.down = ["n2"]
    history.stores = {"n0": ["a", None]}
    history.unreadable = {"n2": "DISK_ERROR"}
    history.dump(tmp_path / "h.jsonl")
    again = History.load(tmp_path / "h.jsonl")
    assert again.ops == history.ops and again.statuses == history.statuses
    assert again.events == history.events and again.finals == history.finals and again.down == ["n2"]
    assert again.stores == history.stores and again.unreadable == history.unreadable


def test_a_stall_longer_than_the_bound_fails() -> None:
    history = clean_history()
    verdict = check(history, "double-kill", "async", max_unavailable_s=1.0)
    assert verdict.unavailability == [1.5] and not verdict.ok
    assert "no append was acknowledged for 1.5 s after 'kill -9 n0'" in verdict.problems[0]


def test_a_broken_run_never_passes() -> None:
    verdict = check(clean_history(), "s", "async")
    verdict.error = "RuntimeError: the cluster did not start"
    assert not verdict.ok and verdict.line().endswith("error='RuntimeError: the cluster did not start'")
