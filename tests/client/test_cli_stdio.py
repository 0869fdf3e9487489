"""A process started with stdin or stdout closed fails with one line instead of an
internal error (AttributeError) or a silent exit 0 having printed nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.unit


def cli(*args: str, redirect: str) -> tuple[int, str, str]:
    """`dledger ARGS` in a process started with stdin or stdout closed (`redirect`: the
    shell's `<&-` or `>&-`): exit status, stdout, stderr."""
    done = subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "dledger.cli.main", *args],
        stdout=subprocess.PIPE if ">" not in redirect else None,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL if "<" not in redirect else None,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    return done.returncode, (done.stdout or b"").decode(), done.stderr.decode()


@pytest.mark.parametrize("command", [["append", "-"], ["query", "-"]])
def test_a_closed_stdin_is_said_in_one_line(fake: FakeCluster, command: list[str]) -> None:
    code, out, err = cli(*command, "-p", fake.peers, redirect="<&-")
    assert (code, out, err) == (2, "", "error: no standard input (stdin is closed)\n")


@pytest.mark.parametrize(
    "command", [["status"], ["get", "0"], ["get", "0", "--raw"], ["append", "x"], ["append", "x", "--json"]]
)
def test_a_closed_stdout_fails_what_prints(fake: FakeCluster, command: list[str]) -> None:
    fake.log.append([b"x"])
    code, _, err = cli(*command, "-p", fake.peers, redirect=">&-")
    assert (code, err) == (1, "error: output closed (stdout is closed)\n")


@pytest.mark.parametrize("follow", [[], ["--follow"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(fake: FakeCluster, follow: list[str]) -> None:
    """`dledger get ... | head`: head closes the pipe on purpose. No message, no
    traceback; status 1 (not everything asked for was written)."""
    fake.log.append([b"y" * 1024] * 400)  # 400 KiB of output: more than a pipe holds
    process = subprocess.Popen(
        [sys.executable, "-m", "dledger.cli.main", "get", "0", "--count", "400", *follow, "-p", fake.peers],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(1) == b"0"  # the first line began: the command is writing
    process.stdout.close()
    assert process.wait(timeout=120) == 1
    assert process.stderr.read() == b""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["get", "--help"]])
def test_help_written_to_a_full_disk_is_one_line(args: list[str]) -> None:
    """The group's own --help and --version ended in a traceback (helper D)."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "dledger.cli.main", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
    assert (done.returncode, done.stderr.decode()) == (1, "error: No space left on device\n")


def test_an_append_whose_result_cannot_be_written_says_it_appended(fake: FakeCluster) -> None:
    """It said only `No space left on device`, which read as the members' disk being
    full, and a retry appended the entry twice (helper D)."""
    code, _, err = cli("append", "x", "-p", fake.peers, redirect=">/dev/full")
    assert (code, err) == (1, "error: appended at index 0, but cannot write that out: No space left on device\n")
    assert fake.log.bodies == [b"x"]
