"""The `dledger` command's entry point (`dledger_cli`, helper B's report): a Ctrl-C while
the command's modules load ends it with status 130 and one line, not a Python traceback
(before, about the first half second of every command); and gRPC's own log lines stay
off (a server on a port in use printed gRPC's `E... add_port.cc` line before its error)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CTRL_C_WHILE_LOADING = """
import importlib.abc, os, signal, sys
import dledger_cli

class CtrlCWhileLoading(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "dledger.cli.main":
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, half-way through the imports
        return None

sys.meta_path.insert(0, CtrlCWhileLoading())
sys.argv = ["dledger", "status"]
dledger_cli.main()
"""


def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback() -> None:
    done = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_LOADING], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")


def test_the_command_runs_once_loaded() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, dledger_cli; sys.argv = ['dledger', '--version']; dledger_cli.main()"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith("dledger, version"), done.stderr


def test_a_server_on_a_port_in_use_says_only_so(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    argv = ["dledger", "server", "-i", "n0", "-p", f"n0-127.0.0.1:{port}", "-s", str(tmp_path)]
    try:
        done = subprocess.run(
            [sys.executable, "-c", f"import sys, dledger_cli; sys.argv = {argv!r}; dledger_cli.main()"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.close()
    assert done.returncode == 1
    assert done.stderr == f"error: port {port} is already in use (cannot listen on 127.0.0.1:{port})\n"
