"""`dledger server --state-machine`: real server processes apply appended key-value
commands to the state machine they were started with."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dledger.entry import MAGIC_NORMAL, Entry
from dledger.kv import KVStateMachine
from dledger.kv import commands as c
from tests.e2e.harness import RPC_S, E2ECluster, eventually

pytestmark = pytest.mark.e2e

COMMANDS = [
    c.put(b"a", b"1"),
    c.put(b"b", b"2"),
    c.cas(b"a", b"1", b"3"),
    c.cas(b"a", b"1", b"4"),  # fails: a is 3
    c.delete(b"b"),
    b"not a command",
    c.cas(b"c", None, b"new"),
]
EXPECTED = {b"a": b"3", b"c": b"new"}


def _replay(rows: list[tuple[int, int, bytes]]) -> KVStateMachine:
    machine = KVStateMachine()
    machine.on_apply([Entry(index, term, 0, MAGIC_NORMAL, body) for index, term, body in rows])
    return machine


def _launch(tmp_path: Path, name: str) -> E2ECluster:
    return E2ECluster(tmp_path, nodes=1, extra_args=["--state-machine", name]).launch()


def test_a_server_with_the_kv_machine_applies_appended_commands(tmp_path: Path) -> None:
    cluster = _launch(tmp_path, "kv")
    try:
        leader, _term = cluster.leader()
        answer = cluster.append(COMMANDS)
        last = int(answer.first_index) + len(COMMANDS) - 1

        def applied() -> Any:
            meta = cluster.metadata(leader, RPC_S)
            return meta is not None and meta.applied_index >= last

        eventually(applied, 30, "the member's state machine to apply every command")
        rows = [row for row in cluster.read_all(leader) if row[2] in COMMANDS]
        assert [row[2] for row in rows] == COMMANDS
        assert _replay(rows).to_dict() == EXPECTED
        assert "state machine: kv (KVStateMachine)" in cluster.logs_tail(200)
    finally:
        cluster.shutdown(timeout_s=10)


def test_a_user_factory_runs_in_the_server_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    monkeypatch.setenv("KV_PROBE_DIR", str(probe))
    root = str(Path(__file__).resolve().parents[2])  # where `tests.e2e.kv_probe` imports from
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    cluster = _launch(tmp_path, "tests.e2e.kv_probe:factory")
    try:
        cluster.leader()
        cluster.append(COMMANDS)
        expected = {k.hex(): v.hex() for k, v in EXPECTED.items()}

        def state() -> Any:
            for path in probe.glob("*.json"):  # a listing may miss a file being renamed over: poll again
                if json.loads(path.read_text())["state"] == expected:
                    return path
            return None

        found = eventually(state, 30, "the probe machine in the server process to hold the expected state")
        assert int(found.stem) in {m.process.pid for m in cluster.members.values() if m.process is not None}
    finally:
        cluster.shutdown(timeout_s=10)
