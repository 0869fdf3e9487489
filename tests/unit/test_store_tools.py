"""`dledger check` and `dledger read-file`: exit codes (0 ok, 1 failure, 2 usage), one
line and no traceback for bad input, `--json`, nothing written; and `open_log`'s
`locallog` marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner, Result

import dledger
from dledger.cli.main import main as cli
from dledger.cli.store_tools import Report, _inspect
from dledger.codes import DLedgerError
from dledger.record import Record
from dledger.store import StoreConfig
from dledger.store.mmap_store import MmapLogStore

CONFIG = StoreConfig(data_file_size=4096, index_file_size=1024)


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def store(tmp_path: Path) -> Path:
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"x" * 300 + b"%d" % i for i in range(40)])
    return node


def test_check_healthy_as_text_and_json(store: Path) -> None:
    text = run("check", str(store))
    assert text.exit_code == 0 and text.output.rstrip().endswith("healthy")
    report = json.loads(run("check", "--json", str(store)).output)
    assert report["healthy"] is True and (report["entries"], report["end_index"]) == (40, 39)
    assert report["checkpoint"] == "checkpoint committed=39 end=39"


@pytest.mark.parametrize("kind", ["empty", "unrelated", "missing"])
def test_check_says_no_store_here(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "d"
    if kind != "missing":
        target.mkdir()
    if kind == "unrelated":
        (target / "notes.txt").write_text("hello")
    result = run("check", str(target))
    assert result.exit_code == 1 and "no store here" in result.output
    assert json.loads(run("check", "--json", str(target)).stdout)["healthy"] is False
    if kind != "missing":  # nothing was written
        assert sorted(os.listdir(target)) == (["notes.txt"] if kind == "unrelated" else [])


@pytest.mark.parametrize(
    "args", [["--data-file-size", "-1"], ["--index-file-size", "33"], ["--index-file-size", "0"], ["--bogus"]]
)
def test_check_usage_errors_exit_2(store: Path, args: list[str]) -> None:
    result = run("check", *args, str(store))
    assert result.exit_code == 2, result.output


def test_check_unreadable_segment_is_a_one_line_failure(store: Path) -> None:
    (store / "data" / f"{1 << 40:020d}").mkdir()  # a "segment" that cannot be read
    result = run("check", str(store))
    assert result.exit_code == 1, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("error:")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory")
def test_check_unreadable_data_dir(store: Path) -> None:
    os.chmod(store / "data", 0)
    try:
        result = run("check", str(store))
    finally:
        os.chmod(store / "data", 0o755)
    assert result.exit_code == 1 and result.output.startswith("error:")


def test_check_flags_begin_beyond_end(tmp_path: Path) -> None:
    """The state finding 6 left (begin 278 > end 99) is a problem, never healthy."""
    fake = SimpleNamespace(
        begin_index=278,
        end_index=99,
        end_term=1,
        committed_index=99,
        write_pos=0,
        get=lambda i: pytest.fail("no entry must be read"),
        config=CONFIG,
        data_list=SimpleNamespace(table=SimpleNamespace(count=1), foreign_files=[]),
        index_list=SimpleNamespace(table=SimpleNamespace(count=1), foreign_files=[]),
        recovery=SimpleNamespace(problem="", index_stale_from=-1),
    )
    report = Report(str(tmp_path))
    _inspect(fake, tmp_path, report)  # type: ignore[arg-type]
    assert report.problems == ["begin index 278 is beyond end index 99 + 1"]


def test_check_flags_a_checkpoint_beyond_the_log(store: Path) -> None:
    (store / "checkpoint").write_text("committedIndex=39\nendIndex=60\n")
    result = run("check", str(store))
    assert result.exit_code == 1 and "says the log ends at 60" in result.output


def test_check_notes_an_invalid_checkpoint_and_its_bak(store: Path) -> None:
    (store / "checkpoint").write_bytes(b"\x00\x01")
    report = json.loads(run("check", "--json", str(store)).output)
    assert report["healthy"] is True and report["checkpoint"].startswith("checkpoint.bak")
    assert any("ignored invalid checkpoint" in n for n in report["notes"])


def test_check_notes_index_units_a_writable_open_rebuilds(store: Path) -> None:
    """Units not flushed before the store stopped (a sync member whose write failed):
    `check` said "problem: entry 28 does not match its index unit" and exited 1 for a
    store the member opens by itself, rebuilding them from the data."""
    units = sorted((store / "index").iterdir())
    with open(units[0], "r+b") as f:  # units 28..31 of the first index file zeroed
        f.seek(28 * 32)
        f.write(bytes(4 * 32))
    with open(units[1], "r+b") as f:  # and the rest
        f.write(bytes(os.path.getsize(units[1])))
    report = json.loads(run("check", "--json", str(store)).output)
    assert report["healthy"] is True and (report["entries"], report["end_index"]) == (40, 39), report
    assert any("index units from entry 28 on are missing or stale" in n for n in report["notes"])
    # a read-only reader ends before them (helper J: it said 39, and get(28) failed with DISK_ERROR)
    with dledger.open_log(store, replace(CONFIG, read_only=True)) as reader:
        assert (reader.end_index, reader.end_term, reader.get(27).body) == (27, 1, b"x" * 300 + b"27")
        with pytest.raises(DLedgerError, match="INDEX_OUT_OF_RANGE"):
            reader.get(28)
    with dledger.open_log(store, CONFIG) as log:  # and a writable open rebuilds them
        assert log.recovery.index_rebuilt_from == 28 and log.get(39).body == b"x" * 300 + b"39"
    assert json.loads(run("check", "--json", str(store)).output)["notes"] == []


def test_read_file_lines_are_never_wrapped(store: Path) -> None:
    result = run("read-file", "-d", str(store / "data"), "-b")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert len(lines) >= 40 and all(line.startswith("pos=") for line in lines)
    assert max(len(line) for line in lines) > 300
    unit = json.loads(run("read-file", "-d", str(store / "index"), "-i", "7", "--json").output)
    assert (unit["unit"], unit["index"]) == (7, 7)


@pytest.mark.parametrize(
    ("setup", "code"),
    [("missing", 2), ("empty", 1), ("tiny_segment", 1), ("negative_pos", 2), ("index_outside", 1), ("pos_past", 1)],
)
def test_read_file_bad_input(tmp_path: Path, store: Path, setup: str, code: int) -> None:
    target = tmp_path / "x"
    args = ["read-file", "-d", str(target)]
    if setup == "empty":
        target.mkdir()
    elif setup == "tiny_segment":
        target.mkdir()
        (target / f"{0:020d}").write_bytes(b"\x00" * 7)
    elif setup == "negative_pos":
        args = ["read-file", "-d", str(store / "data"), "--pos", "-5"]
    elif setup == "index_outside":
        args = ["read-file", "-d", str(store / "index"), "-i", "999999"]
    elif setup == "pos_past":
        args = ["read-file", "-d", str(store / "data"), "--pos", str(1 << 40)]
    result = run(*args)
    assert result.exit_code == code, result.output
    if setup == "pos_past":  # said, not an empty dump
        assert "is past the end of the files" in result.output and "they end at" in result.output


def test_open_log_marks_its_stores_and_adopts_unmarked_local_logs(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, CONFIG) as log:
        log.append(b"a")
    assert (tmp_path / "locallog").read_text() == "created by dledger.open_log\n"
    (tmp_path / "locallog").unlink()  # a local log from before the marker
    with dledger.open_log(tmp_path, CONFIG) as log:
        assert log.committed_index == 0
    assert (tmp_path / "locallog").read_text() == "adopted by dledger.open_log\n"


def test_open_log_refuses_a_store_with_currterm(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, CONFIG) as log:
        log.append_many([b"a", b"b"])
    (tmp_path / "locallog").unlink()
    (tmp_path / "currterm").write_text("currTerm=3\nvoteLeader=n0\n")
    with pytest.raises(DLedgerError, match="currterm"):
        dledger.open_log(tmp_path, CONFIG)
    assert not (tmp_path / "locallog").exists()


def test_check_names_a_damaged_segment_and_exits_1(tmp_path: Path) -> None:
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, StoreConfig(data_file_size=4096, index_file_size=32 * 1024)) as log:
        log.append(b"x")
    for extra in sorted((node / "index").iterdir())[1:]:
        extra.unlink()
    first = node / "index" / f"{0:020d}"
    os.truncate(first, 1000)
    result = run("check", str(node))
    assert result.exit_code == 1 and "Usage:" not in result.output
    assert (
        result.stderr
        == f"error: damaged segment {first}: 1000 bytes is not a segment size (its size must be a multiple of 32)\n"
    )


def test_check_a_size_option_out_of_range_is_its_usage_error(store: Path) -> None:
    result = run("check", str(store), "--data-file-size", "9223372036854775808")
    assert result.exit_code == 2
    assert "check [OPTIONS] NODE_DIR" in result.stderr and "'--data-file-size'" in result.stderr
    assert "data_file_size" not in result.stderr


def test_check_repair_without_an_answer_changes_nothing(tmp_path: Path) -> None:
    from tests.faults.test_checkpoint_corruption import build, flip_body_byte, snapshot

    node = build(tmp_path / "dledger-n0")
    for name in ("checkpoint", "checkpoint.bak"):
        (node / name).unlink()
    flip_body_byte(node, 500)
    before = snapshot(node)
    result = CliRunner().invoke(cli, ["check", "--repair", str(node)], input="")
    assert result.exit_code == 1 and "Aborted" not in result.output
    assert result.stderr.splitlines()[-1] == (
        "error: cannot ask for confirmation: the input ended before an answer; nothing changed "
        "(--yes repairs without asking)"
    )
    closed = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", sys.executable, "-m", "dledger.cli.main", "check", "--repair", str(node)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert closed.returncode == 1 and "no standard input" in closed.stderr.splitlines()[-1]
    assert snapshot(node) == before


@pytest.mark.parametrize("args", [["check", "{store}"], ["read-file", "-d", "{store}/data"]])
def test_store_tools_fail_when_stdout_is_closed(store: Path, args: list[str]) -> None:
    argv = [a.format(store=store) for a in args]
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "dledger.cli.main", *argv],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (1, "error: output closed (stdout is closed)\n")


def test_read_file_refuses_the_wrong_mode_for_the_directory(store: Path, tmp_path: Path) -> None:
    unit = run("read-file", "-d", str(store / "data"), "-i", "3")
    assert unit.exit_code == 2 and "holds data segments" in unit.stderr
    dump = run("read-file", "-d", str(store / "index"))
    assert dump.exit_code == 2 and "holds index segments" in dump.stderr
    elsewhere = tmp_path / "copy"  # not named data/ or index/: told by the content
    elsewhere.mkdir()
    for f in (store / "index").iterdir():
        (elsewhere / f.name).write_bytes(f.read_bytes())
    assert run("read-file", "-d", str(elsewhere)).exit_code == 2
    assert json.loads(run("read-file", "-d", str(elsewhere), "-i", "7", "--json").stdout)["index"] == 7


def test_read_file_says_an_unwritten_index_unit_is_empty(store: Path) -> None:
    result = run("read-file", "-d", str(store / "index"), "-i", "50")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == "error: index unit 50 is empty: not written (the index ends before it)\n"


def test_read_file_marks_a_truncated_body(store: Path, tmp_path: Path) -> None:
    cut = tmp_path / "data"
    cut.mkdir()
    first = sorted((store / "data").iterdir())[0]
    (cut / first.name).write_bytes(first.read_bytes()[: 48 + 310 + 48 + 100])  # inside the 2nd body
    lines = [json.loads(line) for line in run("read-file", "-d", str(cut), "-b", "--json").stdout.splitlines()]
    entries = [r for r in lines if r["kind"] == "entry"]
    assert "truncated" not in entries[0] and entries[1]["truncated"] is True


def test_check_names_a_segment_that_is_no_file_and_says_repair_once(tmp_path: Path) -> None:
    """A directory by a segment's name was `cannot read ...: No such device` (naming the
    store, not the file); random bytes said `(see dledger check --repair)` twice."""
    odd = tmp_path / "odd"
    (odd / "data" / "00000000000000000000").mkdir(parents=True)
    result = run("check", str(odd))
    assert result.exit_code == 1
    assert "00000000000000000000 at offset 0: is not a regular file" in result.stderr
    noise = tmp_path / "noise"
    (noise / "data").mkdir(parents=True)
    (noise / "data" / "00000000000000000000").write_bytes(os.urandom(1 << 16))
    result = run("check", str(noise))
    assert result.exit_code == 1 and result.stderr.count("check --repair") == 1, result.stderr


def test_check_says_whether_java_dledger_may_open_the_store(store: Path, tmp_path: Path) -> None:
    """Helper J: Java DLedger opens plain entries as dledger-py does, but cuts its log at
    the first NOOP or record (committed entries and later files included, silently), and
    misreads a prefix reset's head blank."""

    def java(node: Path) -> str:
        result = run("check", "--json", str(node))  # a reset store has a problem (no snapshot): exit 1
        return str(json.loads(result.output.splitlines()[0])["java_dledger"])

    assert java(store) == "may open it: plain entries only"
    records = tmp_path / "records" / "dledger-n0"
    with dledger.open_log(records, CONFIG) as log:
        log.append_many([b"plain"] * 3)
        log.append_records([Record(b"v", key=b"k", timestamp=1)])
        log.append_many([b"plain"])
    assert java(records).startswith("must not open it: entry 3 is a record (magic 16), which Java DLedger cuts")
    noops = tmp_path / "noops" / "dledger-n0"
    with MmapLogStore.open(noops, CONFIG) as raw:
        raw.append_many([b"plain"] * 2)
        raw.append_noop()
    assert java(noops).startswith("must not open it: entry 2 is a NOOP (magic 2)")
    with MmapLogStore.open(store, CONFIG) as raw:
        raw.reset(20, 1)
    assert java(store) == (
        "must not open it: its log starts after a prefix reset's head blank, which Java DLedger <= 0.3 misreads"
    )
