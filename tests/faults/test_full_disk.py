"""A full disk loses nothing and fails nothing for good.

The checkpoint (`committedIndex`, `endIndex`) is written beside the data every
`checkpoint_interval_ms`. Before, a checkpoint write that failed with ENOSPC failed the
whole store as a failed msync does (fsyncgate): every later append got DISK_ERROR, and
freeing space did not help until a restart; a leader in that state took no writes at
all. A checkpoint is not data: the previous one stays valid (recovery reads the data
after it), so the store now goes on and writes it again once it can. The write really
fails here: `checkpoint.tmp` is a link to /dev/full, whose every write is ENOSPC."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.store import kvfile
from dledger.store.mmap_store import MmapLogStore, StoreConfig

pytestmark = pytest.mark.faults

CONFIG = StoreConfig(data_file_size=1 << 16, index_file_size=1 << 12, warm_ahead_bytes=0, checkpoint_interval_ms=0)


def fail_checkpoint_writes(node_dir: Path) -> Path:
    """Make every checkpoint write fail with ENOSPC; returns the link to remove."""
    link = node_dir / "checkpoint.tmp"
    link.unlink(missing_ok=True)
    link.symlink_to("/dev/full")
    return link


def store_on_a_full_disk(node_dir: Path, bodies: list[bytes]) -> tuple[MmapLogStore, Path]:
    """A store holding `bodies`, flushed and checkpointed, then its disk full (the link
    to remove when space is back)."""
    store = MmapLogStore.open(node_dir, CONFIG)
    store.term = 1
    store.append_many(bodies)
    store._flush_once()
    return store, fail_checkpoint_writes(node_dir)


def test_a_checkpoint_the_disk_has_no_room_for_does_not_fail_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node_dir = tmp_path / "dledger-n0"
    store, link = store_on_a_full_disk(node_dir, [b"before"] * 5)
    with caplog.at_level(logging.WARNING, logger="dledger.store.flusher"):
        for _ in range(3):
            store.append(b"during")
            store._flush_once()  # flushes the data; the checkpoint fails
        assert store.state == impl.STATE_OK
        assert kvfile.read(node_dir / "checkpoint") == {"committedIndex": "-1", "endIndex": "4"}  # the old one
        link.unlink()  # space is back
        store.update_committed_index(7)
        store._flush_once()
    assert kvfile.read(node_dir / "checkpoint") == {"committedIndex": "7", "endIndex": "7"}
    assert [r.getMessage() for r in caplog.records if r.name == "dledger.store.flusher"] == [  # once, not once a pass
        f"cannot write the checkpoint of {node_dir}: No space left on device (the previous one stays; retrying)",
        f"the checkpoint of {node_dir} is written again",
    ]
    store.close()


def test_a_store_closes_on_a_full_disk_and_reopens_with_every_entry(tmp_path: Path) -> None:
    node_dir = tmp_path / "dledger-n0"
    store, link = store_on_a_full_disk(node_dir, [b"kept"] * 3)
    store.append(b"after")
    store.close()  # the data is flushed; the checkpoint is not written, and close goes on
    link.unlink()
    with MmapLogStore.open(node_dir, CONFIG) as reopened:  # the lock was released
        assert [reopened.get(i).body for i in range(4)] == [b"kept"] * 3 + [b"after"]


def test_a_new_store_on_a_full_disk_is_a_disk_full_error(tmp_path: Path) -> None:
    node_dir = tmp_path / "dledger-n0"
    node_dir.mkdir()
    link = fail_checkpoint_writes(node_dir)
    with pytest.raises(DLedgerError) as err:
        MmapLogStore.open(node_dir, CONFIG)  # a new store writes its first checkpoint at once
    assert err.value.code == ResponseCode.DISK_FULL
    assert str(node_dir) in str(err.value)
    link.unlink()
    with MmapLogStore.open(node_dir, CONFIG) as store:  # the lock was released
        assert store.end_index == -1
    assert os.path.exists(node_dir / "checkpoint")


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only): a full disk for real, where a read fault on a hole
    has no page to take."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill_to_the_last_byte(mount: Path) -> None:
    with open(mount / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\xff" * 65536)
                filler.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.mark.parametrize("read_only", [False, True])
def test_a_compacted_store_opens_on_a_full_tmpfs_without_sigbus(small_tmpfs: Path, read_only: bool) -> None:
    """After a snapshot the log's prefix is a head blank whose bytes are punched out.
    Recovery checked that blank through the mapping; on a full tmpfs the read fault on
    the hole killed the process (SIGBUS, exit 135), `dledger check` too."""
    node_dir = small_tmpfs / "dledger-n0"
    config = StoreConfig(data_file_size=256 << 10, index_file_size=64 << 10, warm_ahead_bytes=0)
    with MmapLogStore.open(node_dir, config) as store:
        store.term = 1
        store.append_many([b"e" * 1000] * 200)
        store.reset(150, 1)  # the compaction after a snapshot at 150
    _fill_to_the_last_byte(small_tmpfs)
    opened = subprocess.run(
        [sys.executable, "-c", OPEN_AND_READ, str(node_dir), str(read_only)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert (opened.returncode, opened.stdout) == (0, "151 199\n"), opened.stderr


OPEN_AND_READ = """
import sys
from dledger.store.mmap_store import MmapLogStore, StoreConfig
config = StoreConfig(data_file_size=256 << 10, index_file_size=64 << 10, warm_ahead_bytes=0,
                     read_only=sys.argv[2] == "True")
with MmapLogStore.open(sys.argv[1], config) as store:
    assert store.get(151).body == b"e" * 1000
    print(store.begin_index, store.end_index)
"""


def test_a_segment_the_disk_has_no_room_for_says_how_much_it_needs(small_tmpfs: Path) -> None:
    """`df` showed 40 MiB free beside `no space to create segment ...` (the index
    segment needed 160 MiB): the message now says both."""
    config = StoreConfig(data_file_size=4 << 20, index_file_size=64 << 10, warm_ahead_bytes=0)
    with MmapLogStore.open(small_tmpfs / "dledger-n0", config) as store:
        store.term = 1
        with pytest.raises(DLedgerError) as err:
            store.append(b"x")
    assert err.value.code == ResponseCode.DISK_FULL
    assert "it needs 4,194,304 bytes, " in str(err.value) and " are free" in str(err.value)


@pytest.mark.parametrize("round_no", range(3))
def test_an_append_racing_close_never_writes_after_it(tmp_path: Path, round_no: int) -> None:
    """An append checked that the store was writable, then waited for the lock that
    close() held; it then wrote into the closed store's first segment, mapped again at
    position 0: entry 0 overwritten, and the store refused to open (helper E, 10 of 10
    rounds). The append now checks again under the lock and is refused."""
    config = StoreConfig(data_file_size=8 << 20, index_file_size=64 << 10, warm_ahead_bytes=0)
    store = MmapLogStore.open(tmp_path / "s", config)
    store.term = 1
    acked: list[tuple[int, bytes]] = []
    some = threading.Event()

    def writer() -> None:
        for n in range(10_000):
            body = b"N%06d|" % n + b"z" * 200_000  # large: rolls, the slow path under the lock
            try:
                acked.append((store.append(body), body[:8]))
            except DLedgerError:
                return
            if n == 3 + round_no:
                some.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert some.wait(60)
    store.close()
    thread.join(60)
    assert [i for i, _ in acked] == list(range(len(acked)))  # never an index again from 0
    with MmapLogStore.open(tmp_path / "s", config) as again:
        assert again.end_index >= len(acked) - 1
        assert all(again.get_body(i)[:8] == prefix for i, prefix in acked)


EXHAUST_DESCRIPTORS = """
import os, resource, sys
from dledger.store.mmap_store import MmapLogStore, StoreConfig
store = MmapLogStore.open(sys.argv[1], StoreConfig(data_file_size=1 << 16, index_file_size=1 << 12,
                          warm_ahead_bytes=0, checkpoint_interval_ms=0))
store.term = 1
store.append(b"before")
store._flush_once()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
held = []
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    assert exc.errno == 24, exc  # EMFILE: every descriptor taken (helper M's idle connections)
store.append(b"during")
store.update_committed_index(1)
store._flush_once()  # the checkpoint cannot be written: not the store's failure
print("during", store.health or "ok", flush=True)
for fd in held:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
store.append(b"after")
store.update_committed_index(2)
store._flush_once()
print("after", store.health or "ok", open(os.path.join(sys.argv[1], "checkpoint")).read().split(), flush=True)
store.close()
"""


def test_a_checkpoint_without_a_file_descriptor_to_spare_does_not_fail_the_store(tmp_path: Path) -> None:
    """Helper M: 20,000 idle connections to a member took every descriptor; the checkpoint
    write failed with EMFILE, which failed the store for good (a member that took no write
    until restarted; two followers so: the group). It is retried now, as a full disk is."""
    run = subprocess.run(
        [sys.executable, "-c", EXHAUST_DESCRIPTORS, str(tmp_path / "dledger-n0")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["during ok", "after ok ['committedIndex=2', 'endIndex=2']"]
    assert "Too many open files (the previous one stays; retrying)" in run.stderr


def test_a_store_whose_directory_is_gone_fails_instead_of_retrying(tmp_path: Path) -> None:
    """Only a full disk is retried: with the directory deleted under an open store the
    checkpoint write fails with ENOENT, and that still fails the store (appends then
    get DISK_ERROR), instead of appending into unlinked files without a word (helper E)."""
    node_dir = tmp_path / "dledger-n0"
    store = MmapLogStore.open(node_dir, CONFIG)
    store.term = 1
    store.append(b"x")
    store.flush()  # durable: the checkpoint has something new to say
    shutil.rmtree(node_dir)
    with pytest.raises(OSError) as err:
        store.try_checkpoint()
    assert err.value.errno == errno.ENOENT
    store._fail(err.value)  # what the flush pass's error handler does
    with pytest.raises(DLedgerError) as refused:
        store.append(b"y")
    assert refused.value.code == ResponseCode.DISK_ERROR and store.health.startswith("failed: ")
    store.close()  # a failed store writes nothing more and is released


def test_a_forked_child_cannot_write_its_parents_open_store(tmp_path: Path) -> None:
    """The child's appends went to the parent's next positions, which the parent then
    wrote again: the child's acknowledged entries were gone, and a child closing last
    wrote a checkpoint that made the store refuse to open (helper E)."""
    import dledger

    path = tmp_path / "log"
    with dledger.open_log(path) as log:
        log.append(b"parent-0")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what an append does, close, leave without cleanup
            try:
                log.append(b"child")
                said = b"appended"
            except DLedgerError as exc:
                said = str(exc).encode()
            log.close()
            os.write(write, said)
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        said = os.read(read, 1000)
        os.close(read)
        assert os.waitstatus_to_exitcode(status) == 0 and b"read-only" in said, said
        log.append(b"parent-1")
    with dledger.open_log(path) as again:
        assert [again.get_body(i) for i in range(again.end_index + 1)] == [b"parent-0", b"parent-1"]


def test_a_batch_that_runs_out_of_room_half_way_says_what_stayed(small_tmpfs: Path) -> None:
    """The segment roll failed in the middle of `append_many`: the entries before it
    stayed (1,014 of 3,000) and the error did not say so, while `append_records`
    promised all or none (helper E). The error now says where the log ended before the
    call and ends now (cutting back could cut another thread's entries)."""
    import dledger

    config = StoreConfig(data_file_size=512 << 10, index_file_size=64 << 10, warm_ahead_bytes=0)
    with dledger.open_log(small_tmpfs / "log", config) as log:
        log.append(b"first")
        with pytest.raises(DLedgerError) as err:
            log.append_many([b"x" * 1000] * 3000)  # ~3 MiB: the 2 MiB disk fills half way
        assert err.value.code == ResponseCode.DISK_FULL
        end = log.end_index
        assert 0 < end < 3000
        assert f"the log ended at index 0 before this call and ends at {end}" in str(err.value)
    with dledger.open_log(small_tmpfs / "log", config) as again:
        assert again.end_index == end and again.get_body(0) == b"first"
