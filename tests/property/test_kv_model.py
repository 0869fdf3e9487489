"""KVStateMachine behaves like a plain dict under any sequence of commands, garbage
bodies, snapshot captures, saves and loads; a saved snapshot holds the dict as it was at
its capture."""

from __future__ import annotations

import io

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dledger.entry import MAGIC_NORMAL, Entry
from dledger.kv import KVStateMachine
from dledger.kv import commands as c

pytestmark = pytest.mark.property

keys = st.sampled_from([b"", b"a", b"b", b"ab", b"c\x00", b"long" * 10])
values = st.binary(max_size=12)


def model_answer(model: dict[bytes, bytes], command: c.Command) -> c.Answer:
    """What a dict says, changing it as the command does."""
    if isinstance(command, c.Put):
        model[command.key] = command.value
        return c.Ok()
    if isinstance(command, c.Get):
        return c.Value(model[command.key]) if command.key in model else c.NotFound()
    if isinstance(command, c.Delete):
        return c.Ok() if model.pop(command.key, None) is not None else c.NotFound()
    if isinstance(command, c.Cas):
        if model.get(command.key) != command.expected:
            return c.CasFailed(model.get(command.key))
        model[command.key] = command.new
        return c.Ok()
    if isinstance(command, c.Len):
        return c.Count(len(model))
    assert isinstance(command, c.Scan)
    chosen = sorted(k for k in model if k.startswith(command.prefix))[: command.limit]
    return c.Pairs(tuple((k, model[k]) for k in chosen))


commands = st.one_of(
    st.builds(c.Put, keys, values),
    st.builds(c.Get, keys),
    st.builds(c.Delete, keys),
    st.builds(c.Cas, keys, st.none() | values, values),
    st.just(c.Len()),
    st.builds(c.Scan, st.sampled_from([b"", b"a", b"l"]), st.integers(0, 4)),
)


class KVModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.machine = KVStateMachine()
        self.model: dict[bytes, bytes] = {}
        self.index = 0
        self.captured: tuple[dict[bytes, bytes], int] | None = None
        self.saved: list[tuple[bytes, dict[bytes, bytes], int]] = []

    @rule(batch=st.lists(commands | st.binary(max_size=8), min_size=1, max_size=6))
    def apply(self, batch: list[c.Command | bytes]) -> None:
        entries, expected = [], []
        for item in batch:
            body = item if isinstance(item, bytes) else c.encode_command(item)
            entries.append(Entry(self.index, 1, 0, MAGIC_NORMAL, body))
            self.index += 1
            try:
                command = c.decode_command(body)
            except ValueError:
                expected.append(None)
                continue
            expected.append(model_answer(self.model, command))
        got = [c.decode_answer(a) for a in self.machine.on_apply(entries)]
        for answer, want in zip(got, expected, strict=True):
            if want is None:
                assert isinstance(answer, c.Error)
            else:
                assert answer == want

    @rule(command=commands)
    def query(self, command: c.Command) -> None:
        answer = c.decode_answer(self.machine.query(c.encode_command(command)))
        if isinstance(command, c.WRITES):
            assert isinstance(answer, c.Error)
        else:
            assert answer == model_answer(dict(self.model), command)

    @precondition(lambda self: self.captured is None)
    @rule()
    def capture(self) -> None:
        self.machine.on_snapshot_capture()
        self.captured = (dict(self.model), self.index - 1)

    @precondition(lambda self: self.captured is not None)
    @rule()
    def save(self) -> None:
        out = io.BytesIO()
        self.machine.on_snapshot_save(out)
        assert self.captured is not None
        self.saved.append((out.getvalue(), *self.captured))
        self.captured = None

    @precondition(lambda self: self.saved)
    @rule(pick=st.integers(0, 10))
    def load(self, pick: int) -> None:
        data, state, index = self.saved[pick % len(self.saved)]
        self.machine.on_snapshot_load(io.BytesIO(data))
        self.model = dict(state)
        self.captured = None
        self.index = index + 1  # the log goes on after the snapshot's last index
        assert self.machine.applied_index == index

    @invariant()
    def same_as_the_model(self) -> None:
        assert self.machine.to_dict() == self.model
        assert len(self.machine) == len(self.model)


KVModel.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
test_kv_machine_matches_a_dict = KVModel.TestCase
