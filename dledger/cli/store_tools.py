"""Offline store tools: `dledger read-file` (DLedger's readFile) and `dledger check`."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from dledger.codes import DLedgerError
from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE, MAGIC_BLANK
from dledger.store import (
    MmapLogStore,
    decode_entry_header,
    decode_index_unit,
    is_segment_name,
    resolve_node_dir,
    sized_config,
)

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def _segments(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise click.UsageError(f"{directory} is not a directory")
    files = sorted(p for p in directory.iterdir() if is_segment_name(p.name))
    if not files:
        raise click.UsageError(f"{directory} holds no segment files")
    return files


def _read_span(files: list[Path], pos: int, size: int) -> bytes:
    """Bytes [pos, pos+size) of the virtual log formed by `files` (clipped to the files)."""
    seg = files[0].stat().st_size
    out = bytearray()
    for f in files:
        start = int(f.name)
        lo, hi = max(pos, start), min(pos + size, start + seg)
        if lo < hi:
            with open(f, "rb") as fh:
                fh.seek(lo - start)
                out += fh.read(hi - lo)
    return bytes(out)


@click.command("read-file")
@click.option(
    "--dir", "-d", "directory", required=True, type=click.Path(path_type=Path), help="A data/ or index/ directory."
)
@click.option("--pos", "-p", default=0, show_default=True, help="Start position in the virtual log.")
@click.option("--size", "-s", default=-1, show_default=True, help="Bytes to read (-1: to the end of the files).")
@click.option(
    "--index", "-i", default=-1, show_default=True, help="Print the index unit of this entry (DIR is index/)."
)
@click.option("--body", "-b", is_flag=True, help="Print entry bodies too.")
def read_file(directory: Path, pos: int, size: int, index: int, body: bool) -> None:
    """Dump the records of a data directory, or one unit of an index directory.

    \b
    Examples:
      dledger read-file -d .dledger-data/dledger-n0/data
      dledger read-file -d .dledger-data/dledger-n0/index -i 42
    """
    files = _segments(directory)
    seg = files[0].stat().st_size
    if index >= 0:
        raw = _read_span(files, index * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
        if len(raw) < INDEX_UNIT_SIZE:
            raise click.ClickException(f"index {index} is outside the index files")
        u = decode_index_unit(raw)
        console.print(f"index unit {index}: magic={u.magic} pos={u.pos} size={u.size} index={u.index} term={u.term}")
        return
    end = int(files[-1].name) + seg
    cur = max(pos, int(files[0].name))
    stop = end if size < 0 else min(end, cur + size)
    while cur + 8 <= stop:
        head = _read_span(files, cur, min(HEADER_SIZE, seg - (cur % seg)))
        magic = int.from_bytes(head[:4], "big", signed=True)
        length = int.from_bytes(head[4:8], "big", signed=True)
        if magic == MAGIC_BLANK:
            console.print(f"pos={cur} BLANK size={length}")
            if length < 8:
                break
            cur += length
            continue
        if magic == 0 and length == 0:
            console.print(f"pos={cur} end (zero header)")
            next_seg = cur - cur % seg + seg
            if next_seg >= stop:
                break
            cur = next_seg
            continue
        if len(head) < HEADER_SIZE or length < HEADER_SIZE:
            console.print(f"pos={cur} invalid header magic={magic} size={length}")
            break
        h = decode_entry_header(head)
        line = (
            f"pos={cur} magic={magic} size={length} index={h.index} term={h.term} entry_pos={h.pos} "
            f"channel={h.channel} chainCrc={h.chain_crc} bodyCrc={h.body_crc} bodySize={h.body_size}"
        )
        if body:
            line += f" body={_read_span(files, cur + HEADER_SIZE, max(0, h.body_size))!r}"
        console.print(line)
        cur += length


@click.command()
@click.argument("node_dir", type=click.Path(path_type=Path))
@click.option("--data-file-size", type=int, default=None, help="Data segment size (default: read off the files).")
@click.option("--index-file-size", type=int, default=None, help="Index segment size (default: read off the files).")
def check(node_dir: Path, data_file_size: int | None, index_file_size: int | None) -> None:
    """Validate a store without changing it: recovery, every entry and its CRC.

    NODE_DIR is a node's `dledger-<selfId>` directory (a storeBaseDir holding exactly one
    also works). Exit 0 when healthy, 1 when a problem is found, 2 on usage errors.
    """
    try:
        node = resolve_node_dir(node_dir)
    except DLedgerError as exc:
        raise click.UsageError(exc.message) from exc
    if not node.is_dir():
        raise click.UsageError(f"{node} is not a directory")
    config = sized_config(node, data_file_size, index_file_size, read_only=True)
    try:
        store = MmapLogStore.open(node, config)
    except DLedgerError as exc:
        err_console.print(f"[red]problem:[/red] {exc.message}")
        sys.exit(1)
    problem = ""
    checked = 0
    try:
        total = max(0, store.end_index - store.begin_index + 1) if store.begin_index >= 0 else 0
        with Progress(console=err_console, transient=True, disable=total < 100_000) as progress:
            task = progress.add_task("checking entries", total=total)
            for index in range(max(store.begin_index, 0), store.end_index + 1 if total else 0):
                try:
                    store.get(index)
                except DLedgerError as exc:
                    problem = exc.message
                    break
                checked += 1
                if checked % 65536 == 0:
                    progress.update(task, completed=checked)
        table = Table(show_header=False, box=None)
        for key, value in (
            ("store", str(node)),
            ("entries", str(checked if not problem else total)),
            ("begin index", str(store.begin_index)),
            ("end index", str(store.end_index)),
            ("end term", str(store.end_term)),
            ("committed index", str(store.committed_index)),
            ("write position", str(store.write_pos)),
            (
                "segments",
                f"{store.data_list.table.count} data x {config.data_file_size} B, "
                f"{store.index_list.table.count} index x {config.index_file_size} B",
            ),
        ):
            table.add_row(key, value)
        console.print(table)
        if store.recovery.problem:
            console.print(
                f"note: {store.recovery.problem} (bytes after the end of the log: a torn or "
                "truncated tail, cut when the store is opened for writing)"
            )
        for name in store.data_list.foreign_files + store.index_list.foreign_files:
            console.print(f"note: foreign file {name} ignored")
    finally:
        store.close()
    if problem:
        err_console.print(f"[red]problem:[/red] {problem}")
        sys.exit(1)
    console.print("[green]healthy[/green]")
