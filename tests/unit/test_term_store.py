"""The currterm file: round trip, DLedger's format, .bak fallback and a crash before rename."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dledger.store.term_store import FileTermStore

pytestmark = pytest.mark.unit


def test_new_member_starts_at_term_zero_without_vote(tmp_path: Path) -> None:
    assert FileTermStore(tmp_path / "dledger-n0").load() == (0, None)


def test_round_trip_and_java_format(tmp_path: Path) -> None:
    store = FileTermStore(tmp_path)
    store.persist(7, "n2")
    assert FileTermStore(tmp_path).load() == (7, "n2")
    text = (tmp_path / "currterm").read_text()
    assert "currTerm=7" in text.splitlines() and "voteLeader=n2" in text.splitlines()
    store.persist(8, None)
    assert FileTermStore(tmp_path).load() == (8, None)


def test_reads_java_written_file_with_empty_vote(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_text("#Sat Nov 21 10:00:00 UTC 2026\ncurrTerm=3\nvoteLeader=\n")
    assert FileTermStore(tmp_path).load() == (3, None)


def test_crash_before_rename_keeps_the_previous_term(tmp_path: Path) -> None:
    FileTermStore(tmp_path).persist(4, "n1")
    code = "import sys; from dledger.store.term_store import FileTermStore; FileTermStore(sys.argv[1]).persist(5, 'n0')"
    env = {**os.environ, "DLEDGER_FAILPOINT": "currterm_tmp_written"}
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=False)
    assert proc.returncode == 137
    assert FileTermStore(tmp_path).load() == (4, "n1")


def test_falls_back_to_bak_when_currterm_is_missing(tmp_path: Path) -> None:
    store = FileTermStore(tmp_path)
    store.persist(2, "n0")
    store.persist(3, "n1")  # the .bak now holds term 2
    (tmp_path / "currterm").unlink()
    assert FileTermStore(tmp_path).load() == (2, "n0")
