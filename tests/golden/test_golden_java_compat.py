"""`java_compat` for every API, and the offline tools on Java-written stores (issue 16,
finding 6): `open_log` never changes the commit state of a store a replicated member
or Java wrote, `reset()` is refused in java_compat mode, `check` / `read-file` read
every golden store without writing (bodies holding `[/...` included)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import dledger
from dledger.cli.main import main as cli
from dledger.codes import DLedgerError, ResponseCode
from dledger.store import MmapLogStore, StoreConfig, sized_config

pytestmark = pytest.mark.golden

DEFAULT_GOLDEN = Path("/work/shared/golden")
SCENARIOS = ["basic", "empty", "head-deleted", "multi-term-rolled", "truncated"]


def golden(name: str) -> Path:
    root = Path(os.environ.get("DLEDGER_GOLDEN_DIR", DEFAULT_GOLDEN))
    if not (root / "basic" / "manifest.json").is_file():
        message = f"golden stores not found at {root} (set DLEDGER_GOLDEN_DIR)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return root / name


def manifest(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((golden(name) / "manifest.json").read_text())


def copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(golden(name), dst, copy_function=shutil.copy)
    for dirpath, _, filenames in os.walk(dst):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(Path(dirpath) / f, 0o644)
    return dst / "dledger-n0"


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("name", ["multi-term-rolled", "truncated"])
def test_open_log_keeps_the_commit_state_of_a_member_store(name: str, tmp_path: Path) -> None:
    node = copy(name, tmp_path)
    state = manifest(name)["state"]
    before = digest(node)
    with pytest.raises(DLedgerError, match="read-only") as info:
        dledger.open_log(node)
    assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert digest(node) == before
    with dledger.open_log(node, StoreConfig(read_only=True)) as log:
        assert (log.committed_index, log.end_index) == (state["committedIndex"], state["ledgerEndIndex"])
        assert log.get(log.end_index).index == state["ledgerEndIndex"]
        # the record reads of a local log work here too (they raised AttributeError: helper E)
        last = log.get_record(log.end_index)
        assert (last.index, last.key, last.value) == (state["ledgerEndIndex"], None, log.get_body(log.end_index))
        assert [r.index for r in log.iterate_records(log.end_index - 1)] == [log.end_index - 1, log.end_index]
        assert log.index_at_time(0) == log.committed_index + 1  # plain entries: older than any time
        assert log.read_columns(log.end_index, 1, 1 << 20, records=True).count == 1
    assert digest(node) == before  # checkpoint still 145 of 149 (70 of 76): nothing written
    assert not (node / "locallog").exists() and not (node / "lock").exists()


def test_java_compat_reset_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    node = copy("basic", tmp_path)
    before = digest(node)
    config = sized_config(node)
    with MmapLogStore.open(node, StoreConfig(**{**config.__dict__, "java_compat": True})) as store:
        with pytest.raises(DLedgerError, match="java_compat") as info:
            store.reset(99, 1)
        assert info.value.code == ResponseCode.UNSUPPORTED
        assert (store.begin_index, store.end_index) == (0, 199)
    after = digest(node)
    assert {k: v for k, v in after.items() if k.startswith(("data/", "index/"))} == {
        k: v for k, v in before.items() if k.startswith(("data/", "index/"))
    }
    assert not (node / "reset").exists()


@pytest.mark.parametrize("name", SCENARIOS)
def test_check_reads_every_golden_store_without_writing(name: str) -> None:
    node = golden(name) / "dledger-n0"
    before = digest(node)
    result = CliRunner().invoke(cli, ["check", "--json", str(node)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    state = manifest(name)["state"]
    assert report["healthy"] is True
    assert (report["begin_index"], report["end_index"]) == (state["ledgerBeginIndex"], state["ledgerEndIndex"])
    assert report["java_dledger"] == "may open it: plain entries only"  # Java wrote it
    assert digest(node) == before


def test_read_file_prints_bodies_with_brackets_unwrapped(tmp_path: Path) -> None:
    data = golden("multi-term-rolled") / "dledger-n0" / "data"
    result = CliRunner().invoke(cli, ["read-file", "-d", str(data), "-b"])
    assert result.exit_code == 0, result.output
    assert result.exception is None
    lines = result.output.splitlines()
    assert all(line.startswith("pos=") for line in lines)  # one record per line, never wrapped
    entries = [line for line in lines if " index=" in line]
    assert len(entries) >= 150
    assert any("[/" in line for line in entries)  # the bodies rich took for markup
    as_json = CliRunner().invoke(cli, ["read-file", "-d", str(data), "-b", "--json"])
    records = [json.loads(line) for line in as_json.output.splitlines()]
    assert sum(r["kind"] == "entry" for r in records) == len(entries)
