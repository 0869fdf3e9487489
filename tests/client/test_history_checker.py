"""The FAULTS.md §2.2 checker passes a good hand-made history and flags each kind of
violation in bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.client.history import EntryRead, History, Op, StatusRead, check

pytestmark = pytest.mark.unit


def good() -> tuple[History, dict[str, list[bytes | None]]]:
    h = History()
    h.ops = [
        Op(b"a", invoke=0.0, complete=1.0, status="ok", index=1),
        Op(b"b", invoke=0.5, complete=2.0, status="ok", index=2),
        Op(b"c", invoke=2.5, complete=3.0, status="info"),  # present: fine
        Op(b"d", invoke=2.6, complete=3.1, status="info"),  # absent: fine
        Op(b"e", invoke=3.5, complete=4.0, status="fail"),  # absent, as it must be
        Op(b"f", invoke=4.5, complete=5.0, status="ok", index=4),
    ]
    h.entry_reads = [EntryRead("n1", 1, b"a"), EntryRead("n2", 0, None)]
    h.status_reads = [
        StatusRead("n0", 0, 1.0, term=1, role="LEADER", committed=1),
        StatusRead("n0", 0, 2.0, term=1, role="LEADER", committed=2),
        StatusRead("n0", 1, 3.0, term=2, role="FOLLOWER", committed=0),  # restarted: new life
        StatusRead("n1", 0, 3.0, term=2, role="LEADER", committed=3),
    ]
    final: dict[str, list[bytes | None]] = {
        "n0": [None, b"a", b"b", b"c", b"f"],
        "n1": [None, b"a", b"b", b"c", b"f"],
        "n2": [None, b"a", b"b"],  # a shorter prefix is fine
    }
    return h, final


def test_a_good_history_passes() -> None:
    h, final = good()
    assert check(h, final) == []


def test_divergence_duplicates_and_phantoms_are_found() -> None:
    h, final = good()
    final["n2"] = [None, b"a", b"x"]
    assert ("divergence", "n2", 2) in check(h, final)
    h, final = good()
    final["n0"] = final["n1"] = [None, b"a", b"b", b"c", b"f", b"a"]
    assert any(e[0] == "duplicate" for e in check(h, final))
    h, final = good()
    final["n0"] = final["n1"] = [None, b"a", b"b", b"c", b"f", b"e"]  # e definitely failed
    assert ("phantom", b"e", 5, "fail") in check(h, final)
    final["n0"] = final["n1"] = [None, b"a", b"b", b"c", b"f", b"zz"]  # never invoked
    assert ("phantom", b"zz", 5, "never invoked") in check(h, final)


def test_lost_and_moved_acks_are_found() -> None:
    h, final = good()
    final = {n: [u for u in log if u != b"b"] for n, log in final.items()}
    errors = check(h, final)
    assert ("lost", b"b", 2, None) in errors and ("lost", b"f", 4, 3) in errors


def test_real_time_order_violations_are_found() -> None:
    h, _ = good()
    final: dict[str, list[bytes | None]] = {"n0": [None, b"b", b"a", b"c", b"f"]}
    h.ops[0].index, h.ops[1].index = 2, 1  # acks match the log, but b was invoked after a completed
    h.ops[1].invoke = 1.5
    assert ("realtime", b"b", 1, 2) in check(h, final)


def test_read_and_status_violations_are_found() -> None:
    h, final = good()
    h.entry_reads.append(EntryRead("n1", 2, b"zz"))
    h.status_reads += [
        StatusRead("n1", 0, 4.0, term=2, role="LEADER", committed=2),  # commit went back
        StatusRead("n2", 0, 4.0, term=2, role="LEADER", committed=3),  # second leader in term 2
        StatusRead("n0", 1, 5.0, term=1, role="FOLLOWER", committed=0),  # term went back
    ]
    errors = check(h, final)
    assert ("read-changed", "n1", 2) in errors
    assert ("commit-regressed", "n1", 0, 3, 2) in errors
    assert ("two-leaders", 2, ["n1", "n2"]) in errors
    assert ("term-regressed", "n0", 2, 1) in errors


def test_history_is_written_as_json_lines(tmp_path: Path) -> None:
    h, _ = good()
    h.event(2.2, "kill -9 n0")
    path = tmp_path / "history.jsonl"
    h.dump(path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["type"] for r in rows} == {"append", "status", "read", "fault"}
    assert h.counts() == {"ok": 3, "info": 2, "fail": 1}
