"""StateMachineCaller answers: on_apply's answers reach whoever waits for their index
(a RAFT_LOG query) and are dropped when nobody does."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dledger.entry import Entry
from dledger.statemachine import QueryableStateMachine, StateMachine, StateMachineCaller
from dledger.store.memory import MemoryLogStore

pytestmark = pytest.mark.unit


class Echo:
    """Answers each entry with its body upper-cased; `query` reads the last body."""

    def __init__(self, answers: bool = True, short: bool = False) -> None:
        self.last = b""
        self.answers = answers
        self.short = short

    def on_apply(self, entries: Sequence[Entry]) -> Sequence[bytes] | None:
        self.last = entries[-1].body
        if not self.answers:
            return None
        out = [e.body.upper() for e in entries]
        return out[:-1] if self.short else out

    def query(self, request: bytes) -> bytes:
        return self.last + request


def _store() -> MemoryLogStore:
    store = MemoryLogStore()
    store.term = 1
    store.append_noop()
    return store


def test_a_waiter_gets_the_answer_of_its_entry_even_when_applied_before_it_asks() -> None:
    store = _store()
    committed = [0]
    caller = StateMachineCaller(store, lambda: committed[0], Echo())
    caller.run_until_idle()
    ticket = caller.answers.expect()
    first = store.append_many([b"a", b"b"])
    committed[0] = first + 1
    caller.run_until_idle()  # applied before the waiter asks
    assert caller.wait_applied(first + 1, 1.0)
    assert caller.answers.take(first + 1) == b"B"
    assert caller.answers.take(first) == b"A"
    assert caller.answers.take(first) == b""  # taken once
    caller.answers.release(ticket)


def test_answers_nobody_waits_for_are_dropped() -> None:
    store = _store()
    committed = [0]
    caller = StateMachineCaller(store, lambda: committed[0], Echo())
    store.append_many([b"x", b"y"])
    committed[0] = 2
    caller.run_until_idle()
    assert caller.answers._answers == {}  # no ticket: nothing kept
    ticket = caller.answers.expect()
    index = store.append_many([b"z"])
    committed[0] = index
    caller.run_until_idle()
    assert caller.answers._answers == {index: b"Z"}
    caller.answers.release(ticket)  # the last ticket: the untaken answer goes
    assert caller.answers._answers == {}


def test_a_released_ticket_drops_answers_below_the_remaining_floor() -> None:
    store = _store()
    committed = [0]
    caller = StateMachineCaller(store, lambda: committed[0], Echo())
    old = caller.answers.expect()
    first = store.append_many([b"a"])
    committed[0] = first
    caller.run_until_idle()
    young = caller.answers.expect()  # its floor is past `first`
    second = store.append_many([b"b"])
    committed[0] = second
    caller.run_until_idle()
    caller.answers.release(old)
    assert caller.answers._answers == {second: b"B"}
    assert caller.answers.take(second) == b"B"
    caller.answers.release(young)


def test_no_answers_or_too_few_answers_give_empty_bytes() -> None:
    for machine in (Echo(answers=False), Echo(short=True)):
        store = _store()
        committed = [0]
        caller = StateMachineCaller(store, lambda c=committed: c[0], machine)
        ticket = caller.answers.expect()
        first = store.append_many([b"a", b"b"])
        committed[0] = first + 1
        caller.run_until_idle()
        assert caller.answers.take(first + 1) == b""
        caller.answers.release(ticket)


def test_queryable_is_structural() -> None:
    class Plain:
        def on_apply(self, entries: Sequence[Entry]) -> None:
            pass

    assert isinstance(Echo(), QueryableStateMachine)
    assert isinstance(Plain(), StateMachine) and not isinstance(Plain(), QueryableStateMachine)
