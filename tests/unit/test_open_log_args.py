"""`open_log` refuses what it must not take for a path or a config: an empty path (it
would make the current directory a store), None, and a dict given for a StoreConfig; and
an existing log keeps its own segment sizes."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.config import StoreConfig

pytestmark = pytest.mark.unit


def test_an_empty_path_is_refused_and_the_current_directory_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path is empty"):
        dledger.open_log("")
    assert list(tmp_path.iterdir()) == []  # no lock, locallog, checkpoint, data/ or index/


def test_an_explicit_current_directory_is_still_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with dledger.open_log(".", StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024)) as log:
        assert log.append(b"here") == 0
    assert (tmp_path / "data").is_dir()


@pytest.mark.parametrize("path", [None, 7, b"/tmp/bytes-path"])
def test_a_path_that_is_not_a_str_or_pathlike_is_a_type_error(path: Any, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=f"open_log: path must be a str or os.PathLike, not {type(path).__name__}"):
        dledger.open_log(path)


def test_a_dict_config_is_a_type_error_naming_store_config(tmp_path: Path) -> None:
    node = tmp_path / "log"
    options: Any = {"data_file_size": 4096}
    with pytest.raises(TypeError, match=r"config must be a StoreConfig, not dict \(from a dict: StoreConfig"):
        dledger.open_log(node, options)
    assert not node.exists()  # refused before anything was created
    with dledger.open_log(node, StoreConfig(**options)) as log:  # what the message suggests works
        assert log.config.data_file_size == 4096


@pytest.mark.parametrize("options", [{"read_only": True}, {"flush_mode": "sync"}, {"data_file_size": 1 << 20}])
def test_an_existing_log_keeps_its_segment_sizes_whatever_a_config_says(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    """A config made for other options (read-only, sync) carries the default segment
    sizes; an existing log is opened with its own (before, its healthy segments were
    reported as corrupt: 'segment is 65536 bytes, the configured size is 1073741824')."""
    small = StoreConfig(data_file_size=1 << 16, index_file_size=32 * 1024)
    with dledger.open_log(tmp_path / "log", small) as log:
        log.append_many([b"x" * 100] * 1000)  # a few segments
    with dledger.open_log(tmp_path / "log", StoreConfig(**options)) as log:
        assert (log.end_index, log.get(999).body) == (999, b"x" * 100)
        assert (log.config.data_file_size, log.config.index_file_size) == (1 << 16, 32 * 1024)


def test_a_damaged_lone_segment_does_not_set_the_sizes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A lone index file cut short (not a whole number of 32-byte units) or a data file cut
    below any size a store is made with: the configured sizes stand (recovery extends or
    rebuilds that file). A member takes no lone data segment shorter than its configured
    size either: taking a cut file's size set its segments apart from its group's."""
    from dledger.store.layout import keep_store_sizes

    small = StoreConfig(data_file_size=1 << 16, index_file_size=32 * 1024)
    with dledger.open_log(tmp_path / "log", small) as log:
        log.append_many([b"x" * 10] * 10)  # one segment each
    index = next((tmp_path / "log" / "index").iterdir())
    data = next((tmp_path / "log" / "data").iterdir())
    with index.open("r+b") as f:
        f.truncate(32 * 1024 - 20)
    assert keep_store_sizes(tmp_path / "log", small).index_file_size == 32 * 1024
    with data.open("r+b") as f:
        f.truncate(40)
    assert keep_store_sizes(tmp_path / "log", small).data_file_size == 1 << 16
    with data.open("r+b") as f:
        f.truncate(1 << 15)  # a lone shorter file: a local log takes its size (no group to match)
    assert keep_store_sizes(tmp_path / "log", small).data_file_size == 1 << 15
    member = keep_store_sizes(tmp_path / "log", small, trust_lone_data=False)
    assert member.data_file_size == 1 << 16  # a member: it may be cut (helper A: it never caught up)
    with index.open("r+b") as f:
        f.truncate(32 * 1024)  # whole again: its size is kept, and the member's sizes are logged
    with caplog.at_level(logging.INFO, logger="dledger.store.layout"):  # the log says so (helper D)
        keep_store_sizes(tmp_path / "log", replace(small, index_file_size=64 * 1024), trust_lone_data=False)
    assert f"keeps its segment sizes: {1 << 16} data (its lone {1 << 15}-byte one extended)" in caplog.text
    smaller = replace(small, data_file_size=1 << 14)
    assert keep_store_sizes(tmp_path / "log", smaller, trust_lone_data=False).data_file_size == 1 << 15
    data.with_name(f"{1 << 15:020d}").write_bytes(bytes(1 << 15))  # two segments of 32 KiB: that store's size
    assert keep_store_sizes(tmp_path / "log", small, trust_lone_data=False).data_file_size == 1 << 15


def test_a_path_through_a_file_is_a_dledger_error(tmp_path: Path) -> None:
    """Before: a bare NotADirectoryError from mkdir (the docs promise DLedgerError)."""
    (tmp_path / "afile").write_bytes(b"")
    with pytest.raises(dledger.DLedgerError, match=r"cannot create .*afile/sub: Not a directory"):
        dledger.open_log(tmp_path / "afile" / "sub")
    assert (tmp_path / "afile").read_bytes() == b""
