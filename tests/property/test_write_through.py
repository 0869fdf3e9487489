"""Appends written through the segment files (pwrite from a stage, `write_through`) leave
the same bytes, results and ledger state as appends copied into the mappings, in the
compiled core and in its twin; so do follower appends of the leader's runs."""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger import _store_py
from dledger._native import impl
from dledger.codes import DLedgerError
from tests.property.strategies import DATA_SEG, INDEX_SEG, ops

pytestmark = pytest.mark.property


class FileCore:
    """A core over segment files in `directory`; data segments keep their descriptor
    when `write_through` (the table closes it)."""

    def __init__(self, mod: Any, directory: Path, write_through: bool) -> None:
        self.dir = directory
        self.write_through = write_through
        self.data = mod.MappedTable(DATA_SEG)
        self.index = mod.MappedTable(INDEX_SEG)
        self.core = mod.LogCore()
        self.core._init_core(self.data, self.index, self.roll)
        self.core.write_through = write_through
        self.core.term = 1

    def roll(self, kind: int, offset: int) -> None:
        table = self.data if kind == 0 else self.index
        path = self.dir / f"{'data' if kind == 0 else 'index'}-{offset:020d}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, table.file_size)
        mapped = mmap.mmap(fd, table.file_size)
        if kind == 0 and self.write_through:
            table.push(mapped, offset, fd)
        else:
            os.close(fd)
            table.push(mapped, offset)

    def image(self) -> list[bytes]:
        return [bytes(m) for m in self.data.segments()] + [bytes(m) for m in self.index.segments()]

    def state(self) -> tuple[int, ...]:
        c = self.core
        return (c.begin_index, c.end_index, c.end_term, c.write_pos)

    def close(self) -> None:
        while self.data.count:
            self.data.pop_last()
        while self.index.count:
            self.index.pop_last()


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except DLedgerError as exc:
        return ("err", exc.code)


def apply(core: Any, op: str, arg: Any) -> Any:
    if op == "append":
        return outcome(core.append, arg)
    if op == "many":
        return outcome(core.append_many, arg)
    if op == "noop":
        return outcome(core.append_noop)
    if op == "term":
        core.term = core.term + arg
        return None
    return outcome(core.append, b"x" * (arg - 48))


@settings(max_examples=80, deadline=None)
@given(ops=ops, max_bytes=st.integers(48, 3000))
def test_pwrite_appends_leave_the_bytes_mmap_appends_leave(ops: list[tuple[str, Any]], max_bytes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dledger-wt-") as tmp:
        dirs = [Path(tmp) / name for name in ("mmap", "pwrite", "twin", "follower", "twin-follower")]
        for d in dirs:
            d.mkdir()
        mmap_core = FileCore(impl, dirs[0], write_through=False)
        writers = [mmap_core, FileCore(impl, dirs[1], True), FileCore(_store_py, dirs[2], True)]
        followers = [FileCore(impl, dirs[3], True), FileCore(_store_py, dirs[4], True)]
        try:
            for op, arg in ops:
                results = [apply(w.core, op, arg) for w in writers]
                assert results[1:] == results[:-1]
                assert {w.state() for w in writers} == {mmap_core.state()}
            images = [w.image() for w in writers]
            assert images[1] == images[0] and images[2] == images[0]
            index = mmap_core.core.begin_index
            while 0 <= index <= mmap_core.core.end_index:
                run, count = mmap_core.core.read_run(index, max_bytes)
                for f in followers:
                    f.core.term = mmap_core.core.term
                    assert f.core.append_encoded(run) == count
                index += count
            if mmap_core.core.end_index >= 0:
                for f in followers:
                    assert f.state() == mmap_core.state()
                    assert f.image()[: len(mmap_core.data.segments())] == images[0][: len(mmap_core.data.segments())]
        finally:
            for h in writers + followers:
                h.close()
