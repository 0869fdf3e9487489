"""CLI conventions against the fake Ledger servers: the exit contract (0/1/2/130, one
line, no traceback), status's exit status, env vars, --json everywhere, body rendering,
`append -` batching what has arrived, `get --follow`, Ctrl-C during append, and the
leadership-transfer timeout."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from dledger.cli.append_input import stdin_batches
from dledger.cli.client_cmds import show_body
from dledger.cli.errors import GuardedCommand
from dledger.cli.main import main
from dledger.client import DLedgerClient
from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.unit


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env, input=stdin)
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_any_exception_is_one_line_and_exit_1_usage_is_2_ctrl_c_is_130() -> None:
    def boom(kind: str) -> None:
        raise {"oops": RuntimeError("oops\nsecond line"), "io": PermissionError(13, "Permission denied", "/x")}.get(
            kind, KeyboardInterrupt()
        )

    command = GuardedCommand("boom", callback=boom, params=[click.Argument(["kind"])])
    result = CliRunner().invoke(command, ["oops"])
    assert (result.exit_code, result.stderr) == (1, "error: RuntimeError: oops second line\n")
    result = CliRunner().invoke(command, ["io"])
    assert (result.exit_code, result.stderr) == (1, "error: Permission denied (/x)\n")
    result = CliRunner().invoke(command, ["int"])
    assert (result.exit_code, result.stderr) == (130, "interrupted\n")
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 2 and "Missing argument" in result.stderr


def test_out_of_range_numbers_are_usage_errors() -> None:
    for args in (
        ["get", "9223372036854775808"],
        ["get", "-i", "99999999999999999999999"],
        ["get", "0", "--count", "0"],
        ["get", "--timeout", "nan"],
        ["get", "--timeout", "inf"],
        ["append", "--count", "9223372036854775808"],
        ["append", "x", "--body-size", "3"],
        ["leadership-transfer", "-t", "n1", "--term", "-1"],
        ["bench", "--duration", "nan"],
        ["demo", "--count", "0"],
        ["demo", "--body-size", "-1"],
        ["get", "0", "--raw", "--json"],
        ["cluster", "--base-port", "65534", "-n", "3"],
        ["cluster", "--metrics-base-port", "65535", "-n", "2"],
        ["cluster", "--host", "a,b"],
        ["server", "-i", "n0", "-p", "n0-127.0.0.1:1", "--listen", "0.0.0.0:99999"],
    ):
        code, _, err = run(*args)
        assert code == 2 and err.startswith("Usage:"), (args, err)


def test_demo_refuses_a_file_as_its_directory(tmp_path: Any) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    code, _, err = run("demo", "--dir", str(path), "--count", "1")
    assert code == 2 and "is a file" in err and path.read_text() == "x"


def test_demo_json_is_one_object_with_the_indexes_it_appended(tmp_path: Any) -> None:
    code, out, _ = run("demo", "--dir", str(tmp_path), "--count", "5", "--body-size", "8", "--json")
    first = json.loads(out)
    assert code == 0 and (first["appended"], first["first_index"], first["last_index"]) == (5, 0, 4)
    code, out, _ = run("demo", "--dir", str(tmp_path), "--count", "3", "--body-size", "8", "--json")
    again = json.loads(out)  # the same log, reopened: it goes on after what is there
    assert code == 0 and (again["first_index"], again["last_index"]) == (5, 7)
    assert again["appends_per_s"] > 0 and again["gets_per_s"] > 0


def test_status_exits_1_without_a_leader_and_prints_the_table(fake: FakeCluster) -> None:
    fake.log.leader = None
    code, out, err = run("status", "-p", fake.peers)
    assert code == 1 and "FOLLOWER" in out and err == "error: no leader: no member that answered is leading\n"
    fake["n2"].stop()
    code, out, err = run("status", "-p", fake.peers, "--json")
    assert code == 1 and len(json.loads(out)) == 3 and "(n2 unreachable)" in err


def test_peers_and_group_come_from_the_environment(fake: FakeCluster) -> None:
    env = {"DLEDGER_PEERS": fake.peers, "DLEDGER_GROUP": "default"}
    assert run("append", "from-env", env=env) == (0, "appended at index 0\n", "")
    assert run("get", "0", env=env)[1] == "0\tterm 1\tfrom-env\n"
    code, _, err = run("get", "0", env={"DLEDGER_PEERS": "n0-127.0.0.1:99999"})
    assert code == 2 and "bad port 99999" in err
    # an option given wins over the environment
    assert run("get", "0", "-p", fake.peers, env={"DLEDGER_PEERS": "n0-127.0.0.1:99999"})[0] == 0
    for command in ("append", "get", "status", "leadership-transfer", "bench"):
        help_text = run(command, "--help")[1]
        assert "DLEDGER_PEERS" in help_text and "DLEDGER_GROUP" in help_text and "--json" in help_text


def test_leadership_transfer_json_and_its_timeout(fake: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run("leadership-transfer", "-t", "n1", "--json", "-p", fake.peers) == (
        0,
        '{"leader": "n1", "term": 2}\n',
        "",
    )
    budgets: list[int] = []
    write = DLedgerClient._write

    def recording(self: DLedgerClient, method: str, request: Any, deadline: int, **kw: Any) -> Any:
        budgets.append(deadline - self.clock.now_ms())
        return write(self, method, request, deadline, **kw)

    monkeypatch.setattr(DLedgerClient, "_write", recording)
    assert run("leadership-transfer", "-t", "n2", "-p", fake.peers, "--timeout", "0.75")[0] == 0
    assert len(budgets) == 1 and 0 < budgets[0] <= 750  # the whole transfer within --timeout, not 10 s


def test_text_and_binary_bodies_render_distinctly(fake: FakeCluster) -> None:
    assert show_body(b"hello world") == "hello world"
    assert show_body(b"") == ""
    assert show_body(b"\x00\xff") == "base64:AP8="
    assert show_body(b"tab\there") == "base64:dGFiCWhlcmU="  # not printable as one line
    assert show_body(b"base64:AP8=") == "base64:YmFzZTY0OkFQOD0="  # text that looks encoded is encoded
    assert show_body("ünïcødé".encode()) == "ünïcødé"
    fake.log.append([b"text", b"\x00\xff"])
    code, out, _ = run("get", "0", "-c", "2", "-p", fake.peers)
    assert code == 0 and out == "0\tterm 1\ttext\n1\tterm 1\tbase64:AP8=\n"


def test_stdin_batches_yield_what_has_arrived_without_waiting_for_eof() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader, os.fdopen(write_fd, "wb", buffering=0) as writer:
        batches = stdin_batches(reader, 100)
        writer.write(b"one\ntwo\n")
        got = [next(batches)]
        while sum(len(b) for b in got) < 2:  # both lines may arrive in one batch or two
            got.append(next(batches))
        assert [line for batch in got for line in batch] == [b"one", b"two"]
        writer.write(b"three\r\n")
        assert next(batches) == [b"three"]  # the pipe is still open: no EOF needed
        writer.write(b"tail-without-newline")
        writer.close()
        assert list(batches) == [[b"tail-without-newline"]]


def test_stdin_batches_cap_at_the_batch_size() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader:
        with os.fdopen(write_fd, "wb") as writer:
            writer.write(b"".join(b"%d\n" % k for k in range(25)))
        batches = list(stdin_batches(reader, 10))
    assert all(len(b) <= 10 for b in batches) and [int(x) for b in batches for x in b] == list(range(25))


def test_ctrl_c_during_append_reports_what_was_appended(fake: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    real = DLedgerClient.append_batch
    calls = threading.local()

    def interrupted_third(self: DLedgerClient, bodies: Any, *magic: Any) -> Any:
        calls.n = getattr(calls, "n", 0) + 1
        if calls.n == 3:
            raise KeyboardInterrupt
        return real(self, bodies, *magic)

    monkeypatch.setattr(DLedgerClient, "append_batch", interrupted_third)
    code, out, err = run("append", "--count", "50", "-b", "10", "-p", fake.peers)
    assert code == 130 and out == ""
    assert err == (
        "interrupted: 20 entries were appended at indexes 0..19; "
        "the outcome of the last request (10 entries) is unknown\n"
    )
    assert len(fake.log.bodies) == 20


def test_ctrl_c_while_an_append_is_answered_reports_the_answer(fake: FakeCluster) -> None:
    """A Ctrl-C that arrives while the leader holds the request waits for its answer:
    the report says where the entry went, not that its outcome is unknown."""
    fake.log.append([b"a"])
    leader = fake["n0"]
    leader.unary_gate.clear()

    def interrupt_while_held() -> None:
        while leader.held == 0:
            threading.Event().wait(0.01)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        threading.Event().wait(0.2)  # an interrupt not held back would end the command now
        leader.unary_gate.set()

    helper = threading.Thread(target=interrupt_while_held)
    helper.start()
    try:
        code, out, err = run("append", "b", "-p", fake.peers)
    finally:
        leader.unary_gate.set()
        helper.join()
    assert (code, out, err) == (130, "", "interrupted: 1 entries were appended at indexes 1..1\n")
    assert fake.log.bodies == [b"a", b"b"]


def test_get_follow_prints_entries_as_they_are_committed(fake: FakeCluster) -> None:
    fake.log.append([b"a"])
    appender = threading.Timer(0.2, lambda: fake.log.append([b"b", b"c"]))
    appender.start()
    try:
        code, out, _ = run("get", "0", "--follow", "--count", "3", "--raw", "-p", fake.peers)
    finally:
        appender.join()
    assert (code, out) == (0, "a\nb\nc\n")
    code, out, _ = run("get", "--follow", "-i", "1", "-c", "2", "--json", "-p", fake.peers)
    assert code == 0 and [json.loads(line)["body"] for line in out.splitlines()] == ["b", "c"]


def test_get_prints_large_counts_page_by_page_up_to_the_commit_index(fake: FakeCluster) -> None:
    fake.log.append([b"%d" % k for k in range(2500)])
    code, out, _ = run("get", "0", "-c", "1000000", "--raw", "-p", fake.peers)
    assert code == 0 and out.split() == [str(k) for k in range(2500)]
    code, out, _ = run("get", "1000", "-c", "1024", "--raw", "-p", fake.peers)
    assert code == 0 and out.split() == [str(k) for k in range(1000, 2024)]
    code, out, err = run("get", "2500", "-c", "5", "-p", fake.peers)
    assert code == 1 and out == "" and err.startswith("error: INDEX_OUT_OF_RANGE (410)")


@pytest.mark.parametrize(
    ("group", "said"), [("", "group must not be empty"), ("a/b", "bad group 'a/b'"), ("\udcff", "bad group")]
)
def test_a_group_no_member_could_hold_is_a_usage_error(group: str, said: str) -> None:
    """An empty group went out as it was (`status` titled `group `), one of bytes that
    are not UTF-8 ended in `UnicodeEncodeError` with status 1, and `a/b` was served but
    could not have a TLS certificate (helper D)."""
    code, _, err = run("status", "-g", group, "-p", "n0-127.0.0.1:1")
    assert code == 2 and said in err


@pytest.mark.parametrize(
    "args",
    [
        ["check", ""],
        ["certs", "init", ""],
        ["demo", "--dir", ""],
        ["read-file", "-d", ""],
        ["server", "-s", "", "-p", "n0-127.0.0.1:1"],
        ["cluster", "-s", " "],
    ],
)
def test_an_empty_path_is_a_usage_error(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """'' meant the current directory: `certs init ''` wrote private keys there, `demo
    --dir ''` 176 MB, and `check ''` called a directory that holds no store healthy."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(*args)
    assert code == 2 and "empty" in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written here


def test_a_term_past_max_term_is_a_usage_error() -> None:
    """`--term` advertised int64's range, which the members answered with a failure."""
    code, _, err = run("leadership-transfer", "-t", "n1", "--term", str((1 << 62) + 1), "-p", "n0-127.0.0.1:1")
    assert code == 2 and "4611686018427387904" in err
