"""Ctrl-C held back over steps that must not be cut: the handler runs right after the
step, even when the kernel hands the signal to another thread; a blocking client call
finishes before KeyboardInterrupt, and the client then closes (a blocking gRPC call cut
in the middle made closing its channel wait forever). A second Ctrl-C can end a step at
once (`on_repeat`): `dledger append` then exits 130 without waiting for the answer."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from dledger.cli import errors as cli_errors
from dledger.cli.main import main
from dledger.client import DLedgerClient
from dledger.client.interrupts import DeferredCtrlC
from tests.client.fake_ledger import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


@pytest.fixture
def signal_arrived() -> Iterator[socket.socket]:
    """A socket that receives a byte whenever a signal arrives (Python's wakeup fd), in
    whichever thread the kernel delivered it."""
    readable, writable = socket.socketpair()
    writable.setblocking(False)
    previous = signal.set_wakeup_fd(writable.fileno())
    try:
        yield readable
    finally:
        signal.set_wakeup_fd(previous)
        readable.close()
        writable.close()


def test_a_sigint_taken_by_another_thread_is_raised_after_the_step(signal_arrived: socket.socket) -> None:
    finish = threading.Event()
    other = threading.Thread(target=finish.wait, args=(60,))
    other.start()
    steps: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with DeferredCtrlC():
                assert other.ident is not None
                signal.pthread_kill(other.ident, signal.SIGINT)
                signal_arrived.recv(1)
                steps.append("the step ends")
            steps.append("after the step")
    finally:
        finish.set()
        other.join()
    assert steps == ["the step ends"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_handler_in_place_runs_after_the_step_and_is_put_back(signal_arrived: socket.socket) -> None:
    seen: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with DeferredCtrlC():
            signal.raise_signal(signal.SIGINT)
            signal_arrived.recv(1)
            assert seen == []
        assert seen == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_ignored_sigint_stays_ignored(signal_arrived: socket.socket) -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with DeferredCtrlC():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("call", ["get", "append"])
def test_ctrl_c_during_a_blocking_call_comes_after_its_answer_and_the_client_closes(
    fake: FakeCluster, call: str
) -> None:
    fake.log.append([b"a"])
    leader = fake["n0"]
    client = DLedgerClient(fake.peers, timeout_s=60)
    client.get(0)  # the leader is known: the next call goes to it
    leader.unary_gate.clear()
    released = threading.Event()
    raised_inside = threading.Event()

    def interrupt_while_held() -> None:
        while leader.held == 0:
            threading.Event().wait(0.01)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        # an interrupt raised inside the call would come now, while the member holds it;
        # held back, it comes after the answer however long this takes
        raised_inside.wait(1.0)
        released.set()
        leader.unary_gate.set()

    helper = threading.Thread(target=interrupt_while_held)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                client.get(0) if call == "get" else client.append(b"b")
            finally:
                if not released.is_set():
                    raised_inside.set()
        assert not raised_inside.is_set()
    finally:
        leader.unary_gate.set()
        helper.join()
        client.close()  # returns: no call is left half-done


def test_a_second_sigint_calls_on_repeat_inside_the_step_and_the_first_comes_after(
    signal_arrived: socket.socket,
) -> None:
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt), DeferredCtrlC(on_repeat=lambda: steps.append("on_repeat")):
        signal.raise_signal(signal.SIGINT)
        signal_arrived.recv(1)
        steps.append("first held")
        signal.raise_signal(signal.SIGINT)
        signal_arrived.recv(1)
        steps.append("the step ends")
    assert steps == ["first held", "on_repeat", "the step ends"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_on_repeat_a_second_sigint_is_held_as_the_first(signal_arrived: socket.socket) -> None:
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt), DeferredCtrlC():
        for _ in range(2):
            signal.raise_signal(signal.SIGINT)
            signal_arrived.recv(1)
        steps.append("the step ends")
    assert steps == ["the step ends"]


def test_a_nested_block_leaves_sigint_to_the_outer_one(signal_arrived: socket.socket) -> None:
    repeats: list[str] = []
    with pytest.raises(KeyboardInterrupt), DeferredCtrlC(on_repeat=lambda: repeats.append("outer")):
        outer = signal.getsignal(signal.SIGINT)
        with DeferredCtrlC():  # a client call inside the CLI's step
            assert signal.getsignal(signal.SIGINT) is outer
            signal.raise_signal(signal.SIGINT)
            signal_arrived.recv(1)
            signal.raise_signal(signal.SIGINT)
            signal_arrived.recv(1)
            assert repeats == ["outer"]  # the outer block saw both
        assert signal.getsignal(signal.SIGINT) is outer
    assert repeats == ["outer"]


def test_a_second_ctrl_c_ends_append_at_once_while_the_leader_never_answers(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dledger append` against a member that holds the request: the first Ctrl-C waits
    for the answer, the second ends the process at once (os._exit, exit 130) saying the
    request's outcome is unknown, while the member still holds the request."""
    fake.log.append([b"a"])
    leader = fake["n0"]
    leader.unary_gate.clear()
    arrived, handled, ended = threading.Event(), threading.Semaphore(0), threading.Event()
    held_at_exit: list[int] = []
    real_hold, real_member_hold = DeferredCtrlC._hold, leader._hold

    def member_hold() -> None:
        arrived.set()
        real_member_hold()

    def counted_hold(self: DeferredCtrlC, signum: int, frame: object) -> None:
        real_hold(self, signum, frame)  # type: ignore[arg-type]
        handled.release()

    def end_process(status: int) -> None:  # os._exit would end pytest too
        held_at_exit.append(status)
        held_at_exit.append(leader.held)
        ended.set()

    monkeypatch.setattr(leader, "_hold", member_hold)
    monkeypatch.setattr(DeferredCtrlC, "_hold", counted_hold)
    monkeypatch.setattr(cli_errors, "_end_process", end_process)

    def press_ctrl_c_twice() -> None:
        main_thread = threading.main_thread().ident or 0
        try:
            assert arrived.wait(60)
            signal.pthread_kill(main_thread, signal.SIGINT)
            assert handled.acquire(timeout=60)  # the first is held by the command
            signal.pthread_kill(main_thread, signal.SIGINT)
            assert ended.wait(60)
        finally:
            leader.unary_gate.set()  # lets the command (still running here) finish

    helper = threading.Thread(target=press_ctrl_c_twice)
    helper.start()
    try:
        result = CliRunner().invoke(main, ["append", "b", "-p", fake.peers, "--timeout", "60"])
    finally:
        leader.unary_gate.set()
        helper.join()
    assert held_at_exit == [130, 1]  # ended while the member held the request
    assert result.stderr.splitlines()[0] == (
        "interrupted: nothing was appended; the outcome of the last request (1 entries) is unknown"
    )
