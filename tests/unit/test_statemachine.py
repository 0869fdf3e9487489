"""StateMachineCaller: order, batching, NOOP filtering, failure stops applying."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dledger.codes import ResponseCode
from dledger.entry import Entry
from dledger.statemachine import StateMachineCaller
from dledger.store.memory import MemoryLogStore

pytestmark = pytest.mark.unit


class Recorder:
    def __init__(self, fail_at: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.fail_at = fail_at

    def on_apply(self, entries: Sequence[Entry]) -> None:
        if self.fail_at is not None and any(e.index == self.fail_at for e in entries):
            raise ValueError("boom")
        self.batches.append([e.index for e in entries])


def _store(n: int) -> MemoryLogStore:
    store = MemoryLogStore()
    store.term = 1
    store.append_noop()
    store.append_many([f"b{k}".encode() for k in range(n)])
    return store


def test_applies_only_committed_entries_in_batches_and_skips_noops() -> None:
    store = _store(10)
    committed = [5]
    machine = Recorder()
    caller = StateMachineCaller(store, lambda: committed[0], machine, max_batch=4)
    caller.run_until_idle()
    assert machine.batches == [[1, 2, 3], [4, 5]]  # index 0 is the NOOP
    assert caller.applied_index == 5 and caller.applied_term == 1
    assert not caller.run_once()
    committed[0] = 10
    caller.run_until_idle()
    assert [i for batch in machine.batches for i in batch] == list(range(1, 11))
    assert caller.wait_applied(10, 0.01)
    assert not caller.wait_applied(11, 0.01)


def test_failure_stops_applying_and_is_reported() -> None:
    store = _store(10)
    machine = Recorder(fail_at=3)
    caller = StateMachineCaller(store, lambda: 10, machine, max_batch=2)
    caller.run_until_idle()
    assert machine.batches == [[1]]
    assert isinstance(caller.error, ValueError)
    assert caller.applied_index == 1
    assert not caller.run_once()
    assert not caller.wait_applied(5, 0.01)


def test_observer_sees_each_batch() -> None:
    store = _store(3)
    seen: list[int] = []
    caller = StateMachineCaller(store, lambda: 3, Recorder())
    caller.observer = lambda _us, count: seen.append(count)
    caller.run_until_idle()
    assert seen == [3]


def test_entries_that_left_the_log_before_being_applied_stop_applying() -> None:
    store = _store(10)
    machine = Recorder()
    caller = StateMachineCaller(store, lambda: 10, machine, max_batch=4)
    caller.run_once()  # 1..3 applied
    store.reset(6, 1)  # entries 4..6 removed before the machine saw them
    assert not caller.run_once()
    assert machine.batches == [[1, 2, 3]]  # nothing after the gap is applied out of order
    assert caller.applied_index == 3
    assert getattr(caller.error, "code", None) == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN
    assert "entries 4..6 left the log before they were applied" in str(caller.error)
    assert not caller.wait_applied(10, 0.01)


def test_a_snapshot_that_covers_the_gap_lets_applying_go_on() -> None:
    store = _store(10)
    machine = Recorder()
    caller = StateMachineCaller(store, lambda: 10, machine, max_batch=4)
    caller.run_once()
    store.reset(6, 1)
    caller.set_applied(6, 1)  # what loading a snapshot of 0..6 does
    caller.run_until_idle()
    assert caller.error is None
    assert machine.batches == [[1, 2, 3], [7, 8, 9, 10]]
