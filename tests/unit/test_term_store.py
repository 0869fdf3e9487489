"""The currterm file: round trip, DLedger's format, .bak fallback and a crash before rename."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dledger.codes import CorruptStoreError, DLedgerError, ResponseCode
from dledger.raft.messages import MAX_TERM
from dledger.store.term_store import MAX_STORED_TERM, FileTermStore

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


@pytest.mark.parametrize(
    "value",
    ["", "abc", "-1", "3.5", str(1 << 63), str((1 << 62) + 1), "9223372036854775808"],
)
def test_a_currterm_without_a_valid_term_is_refused_naming_the_file(tmp_path: Path, value: str) -> None:
    path = tmp_path / "currterm"
    path.write_text(f"currTerm={value}\nvoteLeader=n1\n")
    with pytest.raises(CorruptStoreError, match="currterm") as err:
        FileTermStore(tmp_path).load()
    assert err.value.path == str(path)
    assert path.read_text() == f"currTerm={value}\nvoteLeader=n1\n"  # nothing rewritten


def test_the_highest_term_loads(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_text(f"currTerm={MAX_TERM}\nvoteLeader=\n")
    assert FileTermStore(tmp_path).load() == (MAX_TERM, None)
    assert MAX_STORED_TERM == MAX_TERM


def test_a_currterm_without_currterm_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_text("voteLeader=n1\n")
    with pytest.raises(CorruptStoreError, match="currTerm is missing"):
        FileTermStore(tmp_path).load()


def test_a_damaged_term_in_currterm_is_not_replaced_by_the_older_bak(tmp_path: Path) -> None:
    store = FileTermStore(tmp_path)
    store.persist(2, "n0")
    store.persist(3, "n1")  # .bak: term 2, which may have been voted in again
    (tmp_path / "currterm").write_text("currTerm=x3\nvoteLeader=n1\n")
    with pytest.raises(CorruptStoreError, match=r"currterm at offset 0: currTerm='x3'"):
        FileTermStore(tmp_path).load()


def test_an_unreadable_currterm_is_refused_even_with_a_valid_bak_and_a_bad_bak_is_named(tmp_path: Path) -> None:
    store = FileTermStore(tmp_path)
    store.persist(2, "n0")
    store.persist(3, "n1")
    (tmp_path / "currterm").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(CorruptStoreError, match="not a text file") as err:  # the .bak may lack the last vote
        FileTermStore(tmp_path).load()
    assert err.value.path == str(tmp_path / "currterm")
    (tmp_path / "currterm").unlink()  # missing: the .bak serves, unless it is invalid too
    assert FileTermStore(tmp_path).load() == (2, "n0")
    (tmp_path / "currterm.bak").write_text("currTerm=-5\n")
    with pytest.raises(CorruptStoreError, match=r"currterm\.bak"):
        FileTermStore(tmp_path).load()


def test_an_unreadable_currterm_without_bak_is_refused(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_bytes(b"\xff\xfe")
    with pytest.raises(CorruptStoreError, match="not a text file"):
        FileTermStore(tmp_path).load()


@pytest.mark.parametrize("term", [-1, MAX_TERM + 1, 1 << 63])
def test_persist_refuses_a_term_out_of_range_and_writes_nothing(tmp_path: Path, term: int) -> None:
    store = FileTermStore(tmp_path)
    store.persist(4, "n1")
    with pytest.raises(ValueError, match="not stored"):
        store.persist(term, None)
    assert FileTermStore(tmp_path).load() == (4, "n1")


def test_a_term_that_cannot_be_written_is_a_disk_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed disk (EIO from fsync) was a bare OSError: the elector logged its traceback."""
    store = FileTermStore(tmp_path)
    store.persist(4, "n1")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(DLedgerError) as info:
        store.persist(5, None)
    assert info.value.code == ResponseCode.DISK_ERROR
    assert str(info.value).endswith(f"cannot store term 5 in {tmp_path / 'currterm'}: Input/output error")
    monkeypatch.undo()
    assert FileTermStore(tmp_path).load() == (4, "n1")
