"""`dledger cluster` at start: it never claims another cluster's leader, refuses ports in
use before it starts anything, refuses member settings every member would refuse (one
usage error instead of N members' usage texts), and reports members that exit at start
with one `error:` line and their real exit statuses."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.main import main
from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.unit


WAIT = "import signal; signal.pause()"
"""A member process that runs until it is stopped."""


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def handlers() -> Iterator[None]:
    """`LocalCluster.run` installs SIGINT/SIGTERM handlers: the test process keeps its own."""
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGINT, saved[0])
    signal.signal(signal.SIGTERM, saved[1])


def local(tmp_path: Path, ports: list[int], code: str, started: list[list[str]] | None = None) -> LocalCluster:
    def command_line(args: list[str]) -> list[str]:
        if started is not None:
            started.append(args)
        return python(code)

    return LocalCluster(
        nodes=len(ports),
        group="default",
        host="127.0.0.1",
        base_port=ports[0],
        ports=ports,
        store_base_dir=tmp_path,
        extra_args=[],
        command_line=command_line,
    )


def fake_ports(fake: FakeCluster) -> list[int]:
    return [int(address.rsplit(":", 1)[1]) for address in fake.log.members.values()]


def test_a_leader_on_its_ports_that_is_not_its_member_is_not_claimed(fake: FakeCluster, tmp_path: Path) -> None:
    cluster = local(tmp_path, fake_ports(fake), WAIT)  # alive, never serving
    try:
        cluster.start_all()
        assert cluster.find_leader() is not None  # the other cluster answers on n0's port ...
        assert cluster.own_leader() is None  # ... and is not taken for ours
    finally:
        cluster.shutdown(timeout_s=5)


def test_a_member_that_says_it_serves_is_its_own(fake: FakeCluster, tmp_path: Path) -> None:
    cluster = local(tmp_path, fake_ports(fake), f"print('n0 of group g serving on h', flush=True); {WAIT}")
    try:
        cluster.start_all()
        deadline = time.monotonic() + 60
        while not all(m.serving for m in cluster.members.values()):
            assert time.monotonic() < deadline, "no member said it serves"
            cluster._stop.wait(0.05)
        assert cluster.own_leader() == ("n0", fake.log.term)
    finally:
        cluster.shutdown(timeout_s=5)


def test_ports_in_use_are_refused_before_anything_starts(
    tmp_path: Path, handlers: None, capfd: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started: list[list[str]] = []
        cluster = local(tmp_path, [port], "pass", started)
        assert cluster.run() == 1
    assert started == []
    out, err = capfd.readouterr()
    assert (
        err == f"error: cannot start: port {port} (n0) already in use (another cluster or server?): nothing started\n"
    )
    assert "starting" not in out  # no banner for members that never start


@pytest.mark.parametrize("count", [2, 1])
def test_members_that_exit_at_start_are_one_error_with_their_statuses(
    tmp_path: Path, handlers: None, capfd: pytest.CaptureFixture[str], count: int
) -> None:
    ports = []
    for _ in range(count):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cluster = local(tmp_path, ports, "import sys; sys.exit(2)")
    assert cluster.run() == 1
    out, err = capfd.readouterr()
    assert f"[cluster] starting {count} member{'s' if count > 1 else ''} of group" in out
    statuses = [f"n{k}" for k in range(count)]
    assert f"[cluster] stopped: {', '.join(f'{n}=2' for n in statuses)}" in out and "None" not in out
    said = ", ".join(f"{n} (status 2)" for n in statuses)
    who = "members" if count > 1 else "member"
    assert err == f"error: {who} exited at start: {said}; their output above says why\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--segment-size", "0"], "--segment-size"),
        (["--metrics-base-port", "26950"], "overlap the members' ports"),
        (["-s", "afile"], "afile is not a directory"),
    ],
)
def test_member_settings_every_member_refuses_are_one_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    import dledger.cli.cluster_runner

    def never(*_: object, **__: object) -> None:
        raise AssertionError("members were started")

    monkeypatch.setattr(dledger.cli.cluster_runner.LocalCluster, "run", never)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(main, ["cluster", "--base-port", "26950", *args])
    assert result.exit_code == 2 and said in result.stderr, result.output
    assert "server_cmds" not in result.output


def test_a_signal_arriving_inside_another_handler_does_not_hang_the_cluster(tmp_path: Path) -> None:
    """The handlers called Event.set(); a second SIGTERM arriving while the first handler
    held the Event's lock ran the handler again in the same thread, which waited on that
    lock for good (helper D: `timeout ... | head`, the cluster hung 10+ minutes with its
    members running). A handler now only sets a flag."""
    cluster = local(tmp_path, [1], "pass")
    handled = threading.Event()

    def second_signal_inside_the_first() -> None:
        with cluster._stop._cond:  # the first handler, interrupted inside Event.set()
            cluster._on_signal(signal.SIGTERM, None)  # the second one, in the same thread
        handled.set()

    threading.Thread(target=second_signal_inside_the_first, daemon=True).start()
    assert handled.wait(10)
    assert cluster.stopping
