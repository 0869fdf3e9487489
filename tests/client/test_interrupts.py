"""Ctrl-C held back over steps that must not be cut: the handler runs right after the
step, even when the kernel hands the signal to another thread; a blocking client call
finishes before KeyboardInterrupt, and the client then closes (a blocking gRPC call cut
in the middle made closing its channel wait forever)."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator

import pytest

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
