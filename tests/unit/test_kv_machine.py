"""KVStateMachine applied directly: answers, reads, bad commands, snapshots (round trip,
a save on another thread while apply goes on, damaged snapshot bytes)."""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence

import pytest

from dledger.entry import MAGIC_NORMAL, Entry
from dledger.kv import KVStateMachine, snapshot_format
from dledger.kv import commands as c
from dledger.kv import machine as kv_machine
from dledger.statemachine import SnapshottingStateMachine, StateMachine

pytestmark = pytest.mark.unit


class Log:
    """Feeds bodies to a machine as consecutive committed entries."""

    def __init__(self, machine: KVStateMachine) -> None:
        self.machine = machine
        self.next_index = 0

    def apply(self, *bodies: bytes) -> list[c.Answer]:
        entries = []
        for body in bodies:
            entries.append(Entry(self.next_index, 1, 0, MAGIC_NORMAL, body))
            self.next_index += 1
        answers = self.machine.on_apply(entries)
        assert len(answers) == len(entries)
        return [c.decode_answer(a) for a in answers]


def _machine(*bodies: bytes) -> tuple[KVStateMachine, Log]:
    machine = KVStateMachine()
    log = Log(machine)
    log.apply(*bodies)
    return machine, log


def test_it_fits_the_state_machine_protocols() -> None:
    machine = KVStateMachine()
    assert isinstance(machine, StateMachine)
    assert isinstance(machine, SnapshottingStateMachine)
    assert callable(machine.query) and callable(machine.on_snapshot_capture)


def test_put_get_delete_cas_answers_and_state() -> None:
    machine, log = _machine()
    answers = log.apply(
        c.put(b"a", b"1"),
        c.get(b"a"),
        c.get(b"b"),
        c.cas(b"a", b"1", b"2"),
        c.cas(b"a", b"1", b"3"),
        c.cas(b"b", None, b"new"),
        c.cas(b"b", None, b"again"),
        c.delete(b"a"),
        c.delete(b"a"),
        c.cas(b"a", b"2", b"x"),
        c.put(b"", b"empty key"),
    )
    assert answers == [
        c.Ok(),
        c.Value(b"1"),
        c.NotFound(),
        c.Ok(),
        c.CasFailed(b"2"),
        c.Ok(),
        c.CasFailed(b"new"),
        c.Ok(),
        c.NotFound(),
        c.CasFailed(None),
        c.Ok(),
    ]
    assert machine.to_dict() == {b"b": b"new", b"": b"empty key"}
    assert len(machine) == 2
    assert machine.applied_index == 10


def test_bad_bodies_get_an_error_answer_and_change_nothing() -> None:
    machine, log = _machine(c.put(b"k", b"v"))
    answers = log.apply(b"plain log data", b"", c.put(b"k", b"v") + b"!", b"K\x09\x01", c.put(b"k", b"w"))
    assert [type(a) for a in answers] == [c.Error, c.Error, c.Error, c.Error, c.Ok]
    assert isinstance(answers[0], c.Error) and "magic byte" in answers[0].message
    assert machine.to_dict() == {b"k": b"w"}
    assert machine.applied_index == 5


def test_query_reads_the_current_state_and_refuses_writes_and_garbage() -> None:
    machine, _log = _machine(c.put(b"a/1", b"x"), c.put(b"a/2", b"y"), c.put(b"b", b"z"))
    assert c.decode_answer(machine.query(c.get(b"a/1"))) == c.Value(b"x")
    assert c.decode_answer(machine.query(c.get(b"nope"))) == c.NotFound()
    assert c.decode_answer(machine.query(c.encode_command(c.Len()))) == c.Count(3)
    scan = c.decode_answer(machine.query(c.encode_command(c.Scan(b"a/", 10))))
    assert scan == c.Pairs(((b"a/1", b"x"), (b"a/2", b"y")))
    assert c.decode_answer(machine.query(c.encode_command(c.Scan(b"", 1)))) == c.Pairs(((b"a/1", b"x"),))
    refused = c.decode_answer(machine.query(c.put(b"a/1", b"changed")))
    assert isinstance(refused, c.Error) and "append it to the log" in refused.message
    garbage = c.decode_answer(machine.query(b"\x00garbage"))
    assert isinstance(garbage, c.Error) and "bad key-value command" in garbage.message
    assert machine.get(b"a/1") == b"x"


@pytest.mark.parametrize("request_", ["K\x01\x05", None, 5, [75, 1, 5]])
def test_a_query_that_is_not_bytes_gets_an_error_answer_not_an_exception(request_: object) -> None:
    machine, _log = _machine(c.put(b"a", b"x"))
    answer = c.decode_answer(machine.query(request_))  # type: ignore[arg-type]
    assert answer == c.Error(f"a query request must be bytes, not {type(request_).__name__}")
    assert c.decode_answer(machine.query(bytearray(c.encode_command(c.Len())))) == c.Count(1)


def test_reads_in_the_log_are_answered_and_change_nothing() -> None:
    machine, log = _machine(c.put(b"k", b"v"))
    assert log.apply(c.get(b"k"), c.encode_command(c.Len())) == [c.Value(b"v"), c.Count(1)]
    assert machine.to_dict() == {b"k": b"v"}


def _save(machine: KVStateMachine) -> bytes:
    machine.on_snapshot_capture()
    out = io.BytesIO()
    machine.on_snapshot_save(out)
    return out.getvalue()


def test_snapshot_round_trip_replaces_the_whole_state() -> None:
    machine, _log = _machine(*(c.put(f"k{n}".encode(), bytes([n]) * n) for n in range(50)), c.delete(b"k7"))
    data = _save(machine)
    other, log = _machine(c.put(b"stale", b"gone"))
    other.on_snapshot_load(io.BytesIO(data))
    assert other.to_dict() == machine.to_dict()
    assert len(other) == 49 and other.applied_index == 50
    log.next_index = 51
    assert log.apply(c.cas(b"k8", bytes([8]) * 8, b"after")) == [c.Ok()]  # applying continues after a load
    empty = _save(KVStateMachine())
    other.on_snapshot_load(io.BytesIO(empty))
    assert other.to_dict() == {} and len(other) == 0 and other.applied_index == -1


class BlockingWriter(io.BytesIO):
    """A writer that signals its first write and then waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.started.set()
        assert self.release.wait(30), "the test never released the writer"
        return super().write(data)


def test_a_save_on_another_thread_writes_the_captured_view_while_apply_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kv_machine, "FOLD_CHUNK", 3)  # fold back in several chunks
    monkeypatch.setattr(snapshot_format, "_FLUSH_BYTES", 16)  # write (and block) after the first record
    machine, log = _machine(*(c.put(f"k{n}".encode(), b"old") for n in range(20)))
    at_capture = machine.to_dict()
    machine.on_snapshot_capture()
    writer = BlockingWriter()
    errors: list[BaseException] = []

    def save() -> None:
        try:
            machine.on_snapshot_save(writer)
        except BaseException as exc:
            errors.append(exc)

    saver = threading.Thread(target=save)
    saver.start()
    assert writer.started.wait(30)
    # the save is inside its write: apply and queries carry on meanwhile
    later = [c.put(b"k1", b"new"), c.delete(b"k2"), c.put(b"fresh", b"1"), c.cas(b"k3", b"old", b"cas")]
    later += [c.put(f"x{n}".encode(), b"y") for n in range(10)]
    assert all(not isinstance(a, c.Error) for a in log.apply(*later))
    assert machine.get(b"k1") == b"new" and machine.get(b"k2") is None
    assert c.decode_answer(machine.query(c.get(b"k3"))) == c.Value(b"cas")
    assert len(machine) == 20 - 1 + 1 + 10
    with pytest.raises(RuntimeError, match="being saved"):
        machine.on_snapshot_capture()  # one pair at a time
    expected_now = machine.to_dict()
    writer.release.set()
    saver.join(30)
    assert not saver.is_alive() and errors == []
    restored = KVStateMachine()
    restored.on_snapshot_load(io.BytesIO(writer.getvalue()))
    assert restored.to_dict() == at_capture  # exactly the state at capture, no later write
    assert restored.applied_index == 19
    assert machine.to_dict() == expected_now  # the later writes were folded back
    assert len(machine) == len(expected_now)
    assert log.apply(c.delete(b"x0"), c.get(b"k1")) == [c.Ok(), c.Value(b"new")]


def test_a_capture_without_its_save_is_folded_back_by_the_next_capture() -> None:
    machine, log = _machine(c.put(b"a", b"1"))
    machine.on_snapshot_capture()
    log.apply(c.put(b"a", b"2"), c.put(b"b", b"3"))
    machine.on_snapshot_capture()
    log.apply(c.delete(b"b"))
    restored = KVStateMachine()
    out = io.BytesIO()
    machine.on_snapshot_save(out)
    restored.on_snapshot_load(io.BytesIO(out.getvalue()))
    assert restored.to_dict() == {b"a": b"2", b"b": b"3"}
    assert machine.to_dict() == {b"a": b"2"}


def test_a_save_without_a_capture_is_refused() -> None:
    with pytest.raises(RuntimeError, match="on_snapshot_capture first"):
        KVStateMachine().on_snapshot_save(io.BytesIO())


def test_a_failing_writer_still_folds_the_writes_back() -> None:
    machine, log = _machine(c.put(b"a", b"1"))
    machine.on_snapshot_capture()
    log.apply(c.put(b"a", b"2"))

    class Broken(io.BytesIO):
        def write(self, data: bytes) -> int:  # type: ignore[override]
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        machine.on_snapshot_save(Broken())
    assert machine.to_dict() == {b"a": b"2"}
    assert _save(machine)  # and the next pair works


def _damaged(data: bytes) -> list[tuple[str, bytes, str]]:
    flipped = bytearray(data)
    flipped[30] ^= 0x01  # inside the first key
    length = bytearray(data)
    length[37] = 0x7F  # the first value's length: 2 GiB
    return [
        ("empty", b"", "truncated: the header"),
        ("truncated in a record", data[:35], "truncated"),
        ("truncated trailer", data[:-1], "truncated: the trailer"),
        ("no trailer", data[:-20], "truncated: the trailer"),
        ("flipped data byte", bytes(flipped), "checksum"),
        ("huge length", bytes(length), "needs 2130706441 bytes"),
        ("bytes after the end", data + b"\x00", "after its trailer"),
        ("other magic", b"NOTASNAP" + data[8:], "not a key-value snapshot"),
        ("other version", data[:8] + b"\x00\x09" + data[10:], "format version 9"),
        ("trailer count", data[:-12] + b"\x00" * 8 + data[-4:], "trailer damaged"),
    ]


def test_damaged_snapshot_bytes_fail_to_load_and_leave_the_state_unchanged() -> None:
    source, _ = _machine(c.put(b"key-one", b"value-one"), c.put(b"key-two", b"value-two"))
    data = _save(source)
    target, _ = _machine(c.put(b"mine", b"kept"))
    for name, bad, message in _damaged(data):
        with pytest.raises(ValueError, match=message):
            target.on_snapshot_load(io.BytesIO(bad))
        assert target.to_dict() == {b"mine": b"kept"}, name
        assert target.applied_index == 0
    target.on_snapshot_load(io.BytesIO(data))
    assert target.to_dict() == source.to_dict()


def test_queries_on_other_threads_see_consistent_states_during_apply() -> None:
    """A reader never sees a CAS chain's value go backwards, while batches are applied."""
    machine, log = _machine(c.put(b"n", b"0"))
    stop = threading.Event()
    seen: list[int] = []
    problems: list[str] = []

    def reader() -> None:
        last = 0
        while not stop.is_set():
            answer = c.decode_answer(machine.query(c.get(b"n")))
            value = int(answer.value) if isinstance(answer, c.Value) else -1
            if value < last:
                problems.append(f"{value} after {last}")
            last = value
            seen.append(value)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for n in range(300):
            answers: Sequence[c.Answer] = log.apply(c.cas(b"n", str(n).encode(), str(n + 1).encode()))
            assert answers == [c.Ok()]
            if n % 50 == 0:
                _save(machine)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert problems == [] and seen
    assert machine.get(b"n") == b"300"


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_loading_reads_records_across_any_read_size(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    source, _ = _machine(*(c.put(b"k%d" % n, b"v" * (n * 7 % 50)) for n in range(40)), c.put(b"", b""))
    data = _save(source)
    monkeypatch.setattr(snapshot_format, "_FLUSH_BYTES", chunk)

    class Trickle(io.BytesIO):
        """Short reads: at most `chunk` bytes per call, as a pipe may give."""

        def read(self, n: int | None = -1) -> bytes:
            return super().read(chunk if n is None or n < 0 else min(n, chunk))

    restored = KVStateMachine()
    restored.on_snapshot_load(Trickle(data))
    assert restored.to_dict() == source.to_dict()
    for _name, bad, _message in _damaged(data):
        with pytest.raises(ValueError, match="key-value snapshot"):
            KVStateMachine().on_snapshot_load(Trickle(bad))
