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
