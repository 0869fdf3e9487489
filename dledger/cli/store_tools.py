"""Offline store tools: `dledger read-file` (DLedger's readFile) and `dledger check`.

Both only read: `check` opens the store read-only (no lock, no write) and only
`check --repair`, once confirmed, opens it for writing. Exit codes: 0 ok, 1 a problem
found (or the store cannot be read), 2 usage errors. Output is plain lines, never
wrapped or interpreted as markup (bodies may hold anything); `--json` prints JSON.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import click

from dledger.cli.errors import GuardedCommand, fail, interrupted
from dledger.cli.param_types import NonEmptyPath
from dledger.codes import CorruptStoreError, DLedgerError
from dledger.config import ConfigError
from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_NOOP, MAGIC_NORMAL, MAGIC_RECORD
from dledger.store import (
    MmapLogStore,
    StoreConfig,
    clear_rejoin,
    decode_entry_header,
    decode_index_unit,
    holds_store,
    is_segment_name,
    load_checkpoint,
    lock_holder,
    mark_before_repair,
    mark_repaired,
    resolve_node_dir,
    sized_config,
)


def _fail(message: str, as_json: bool = False, **extra: Any) -> NoReturn:
    """Exit 1 with the one-line `error:` of every command (after the JSON object on
    stdout with --json)."""
    if as_json:
        click.echo(json.dumps({"healthy": False, "error": message, **extra}))
    fail(message)


def _segments(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise click.UsageError(f"{directory} is not a directory")
    try:
        files = sorted(p for p in directory.iterdir() if is_segment_name(p.name))
    except BrokenPipeError:
        raise  # the output, not the directory: the guard says so
    except OSError as exc:
        _fail(f"cannot read {directory}: {exc.strerror or exc}")
    if not files:
        _fail(f"{directory} holds no segment files")
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


def _kind(directory: Path, files: list[Path]) -> str | None:
    """ "data" or "index": what `directory` holds, by its name (a store's data/ and
    index/), else by its first record (an entry header or an index unit whose position
    or index matches the file's name); None when neither fits."""
    name = directory.resolve().name
    if name in ("data", "index"):
        return name
    with open(files[0], "rb") as fh:
        head = fh.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return None
    start = int(files[0].name)

    def field(offset: int, size: int) -> int:
        return int.from_bytes(head[offset : offset + size], "big", signed=True)

    if field(4, 4) >= HEADER_SIZE and field(24, 8) == start:
        return "data"
    if field(12, 4) >= HEADER_SIZE and start % INDEX_UNIT_SIZE == 0 and field(16, 8) == start // INDEX_UNIT_SIZE:
        return "index"
    return None


def _emit(as_json: bool, record: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(record) if as_json else text)


def _dump_records(files: list[Path], pos: int, size: int, body: bool, as_json: bool) -> None:
    seg = files[0].stat().st_size
    end = int(files[-1].name) + seg
    if pos >= end:
        _fail(f"position {pos} is past the end of the files in {files[0].parent} (they end at {end})")
    cur = max(pos, int(files[0].name))
    stop = end if size < 0 else min(end, cur + size)
    while cur + 8 <= stop:
        head = _read_span(files, cur, min(HEADER_SIZE, seg - (cur % seg)))
        magic = int.from_bytes(head[:4], "big", signed=True)
        length = int.from_bytes(head[4:8], "big", signed=True)
        if magic == MAGIC_BLANK:
            _emit(as_json, {"pos": cur, "kind": "blank", "size": length}, f"pos={cur} BLANK size={length}")
            if length < 8:
                break
            cur += length
            continue
        if magic == 0 and length == 0:
            _emit(as_json, {"pos": cur, "kind": "end"}, f"pos={cur} end (zero header)")
            cur = cur - cur % seg + seg
            if cur >= stop:
                break
            continue
        if len(head) < HEADER_SIZE or length < HEADER_SIZE:
            record = {"pos": cur, "kind": "invalid", "magic": magic, "size": length}
            _emit(as_json, record, f"pos={cur} invalid header magic={magic} size={length}")
            break
        h = decode_entry_header(head)
        record = {"pos": cur, "kind": "entry", **asdict(h)}
        line = (
            f"pos={cur} magic={magic} size={length} index={h.index} term={h.term} entry_pos={h.pos} "
            f"channel={h.channel} chainCrc={h.chain_crc} bodyCrc={h.body_crc} bodySize={h.body_size}"
        )
        if body:
            want = max(0, min(h.body_size, length - HEADER_SIZE))
            raw = _read_span(files, cur + HEADER_SIZE, want)
            record["body_hex"] = raw.hex()
            line += f" body={raw!r}"
            if len(raw) < want:  # the files end inside the body
                record["truncated"] = True
                line += f" (truncated: {len(raw)} of {want} bytes)"
        _emit(as_json, record, line)
        cur += length


@click.command("read-file", cls=GuardedCommand)
@click.option(
    "--dir", "-d", "directory", required=True, type=NonEmptyPath(path_type=Path), help="A data/ or index/ directory."
)
@click.option("--pos", "-p", default=0, show_default=True, type=click.IntRange(min=0), help="Start position.")
@click.option("--size", "-s", default=-1, show_default=True, type=click.IntRange(min=-1), help="Bytes (-1: all).")
@click.option(
    "--index",
    "-i",
    default=-1,
    show_default=True,
    type=click.IntRange(min=-1),
    help="Print the index unit of this entry (DIR is index/).",
)
@click.option("--body", "-b", is_flag=True, help="Print entry bodies too.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record (JSON Lines).")
def read_file(directory: Path, pos: int, size: int, index: int, body: bool, as_json: bool) -> None:
    """Dump the records of a data directory, or one unit of an index directory.

    \b
    Examples:
      dledger read-file -d .dledger-data/dledger-n0/data
      dledger read-file -d .dledger-data/dledger-n0/index -i 42
    """
    files = _segments(directory)
    try:
        if files[0].stat().st_size < HEADER_SIZE:
            _fail(f"{files[0]} is too small to be a segment ({files[0].stat().st_size} bytes)")
        kind = _kind(directory, files)
        if index >= 0 and kind == "data":
            raise click.UsageError(f"{directory} holds data segments: --index reads an index directory (index/)")
        if index < 0 and kind == "index":
            raise click.UsageError(f"{directory} holds index segments: give --index N to print one unit")
        if index >= 0:
            raw = _read_span(files, index * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
            if len(raw) < INDEX_UNIT_SIZE:
                _fail(f"index {index} is outside the index files")
            if not any(raw):
                _fail(f"index unit {index} is empty: not written (the index ends before it)")
            u = decode_index_unit(raw)
            text = f"index unit {index}: magic={u.magic} pos={u.pos} size={u.size} index={u.index} term={u.term}"
            _emit(as_json, {"unit": index, **asdict(u)}, text)
            return
        _dump_records(files, pos, size, body, as_json)
    except BrokenPipeError:
        raise  # the output, not the directory: the guard says so
    except OSError as exc:
        _fail(f"cannot read {directory}: {exc.strerror or exc}")


def _positive(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 4 * HEADER_SIZE:
        raise click.BadParameter(f"{value} is too small (at least {4 * HEADER_SIZE})", param=param)
    return value


def _index_size(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and (value <= 0 or value % INDEX_UNIT_SIZE):
        raise click.BadParameter(f"{value} is not a positive multiple of {INDEX_UNIT_SIZE}", param=param)
    return value


def _sized(name: str, value: int) -> StoreConfig:
    """A StoreConfig with one segment size set (raises ConfigError as the store does)."""
    return StoreConfig(data_file_size=value) if name == "data_file_size" else StoreConfig(index_file_size=value)


def _option_sizes(data_file_size: int | None, index_file_size: int | None) -> None:
    """A usage error (of `check`, naming the option) for a segment size the store refuses."""
    for option, name, value in (
        ("--data-file-size", "data_file_size", data_file_size),
        ("--index-file-size", "index_file_size", index_file_size),
    ):
        if value is not None:
            try:
                _sized(name, value)
            except ConfigError as exc:
                raise click.BadParameter(str(exc).replace(name, option), param_hint=f"'{option}'") from None


def _sizes_on_disk_problem(node: Path, exc: ConfigError) -> str:
    """Why the segment sizes read off `node`'s files are refused, naming the file (the
    largest segment of its directory: the size a store would be opened with)."""
    for sub, name in (("data", "data_file_size"), ("index", "index_file_size")):
        files = [f for f in (node / sub).glob("*") if is_segment_name(f.name) and f.is_file()]
        if not files:
            continue
        largest = max(files, key=lambda f: f.stat().st_size)
        try:
            _sized(name, largest.stat().st_size)
        except ConfigError as bad:
            reason = str(bad).replace(name, "its size")
            return f"damaged segment {largest}: {largest.stat().st_size} bytes is not a segment size ({reason})"
    return f"the segment files of {node} have sizes no store has: {exc}"


@dataclass
class Report:
    """What `check` found (printed as a table or as JSON)."""

    store: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def show(self, as_json: bool) -> None:
        """Print the report; healthy when there are no problems."""
        if as_json:
            body = {"store": self.store, "healthy": not self.problems, **self.facts}
            click.echo(json.dumps({**body, "problems": self.problems, "notes": self.notes}))
            return
        width = max((len(k) for k in self.facts), default=0)
        for key, value in self.facts.items():
            click.echo(f"{key.replace('_', ' '):<{width}}  {value}")
        for note in self.notes:
            click.echo(f"note: {note}")
        for problem in self.problems:
            click.echo(f"problem: {problem}", err=True)
        if not self.problems:
            click.echo("healthy")


def _inspect(store: MmapLogStore, node: Path, report: Report) -> None:
    """Fill `report` from an open read-only store: every entry, begin/end, checkpoint."""
    stale = store.recovery.index_stale_from  # entries from there on were checked by recovery's scan
    shown = store.recovery if stale >= 0 else store  # a store ends before stale units: show the data's log
    begin, end = int(shown.begin_index), int(shown.end_index)
    checked, java = 0, JAVA_MAY_OPEN
    if begin >= 0 and begin > end + 1:
        report.problems.append(f"begin index {begin} is beyond end index {end} + 1")
        java = "not known"
    elif begin >= 0:
        if stale >= 0:
            report.notes.append(
                f"the index units from entry {stale} on are missing or stale (an index not flushed before the store "
                "stopped): rebuilt from the data when the store is opened for writing"
            )
        read_to = end + 1 if stale < 0 else stale
        checked, java = _read_entries(store, range(begin, read_to), report)
        if checked and store.get(begin).pos != store.data_list.table.first_offset:
            java = JAVA_HEAD_BLANK
        if stale >= 0 and checked == read_to - begin:  # recovery's scan checked the rest
            checked += end + 1 - stale
            if java == JAVA_MAY_OPEN:
                java = f"not known: entries from {stale} on were not read"
    info = load_checkpoint(node)
    report.notes += [f"ignored invalid {why}" for why in info.rejected]
    if not info.known and end >= 0:
        report.notes.append("no valid checkpoint: the committed index is unknown")
    if info.known and info.committed > end:
        report.problems.append(
            f"{info.source} says entries up to {info.committed} are committed; the log ends at {end}"
        )
    elif info.known and info.end > end:
        report.problems.append(f"{info.source} says the log ends at {info.end}; it ends at {end}")
    report.facts.update(
        entries=checked,
        begin_index=begin,
        end_index=end,
        end_term=int(shown.end_term),
        committed_index=int(store.committed_index),
        checkpoint=f"{info.source} committed={info.committed} end={info.end}" if info.known else "none",
        write_position=int(shown.write_pos),
        segments=f"{store.data_list.table.count} data x {store.config.data_file_size} B, "
        f"{store.index_list.table.count} index x {store.config.index_file_size} B",
        java_dledger=java,
    )
    if store.recovery.problem:
        report.notes.append(
            f"{store.recovery.problem} (bytes after the end of the log: a torn or truncated tail, "
            "cut when the store is opened for writing)"
        )
    report.notes += [f"foreign file {name} ignored" for name in store.data_list.foreign_files]
    report.notes += [f"foreign file {name} ignored" for name in store.index_list.foreign_files]


JAVA_MAY_OPEN = "may open it: plain entries only"
"""What `check` says of a store Java DLedger opens as dledger-py does (helper J checked
java_compat stores with Java DLedger 0.2.7 and 0.3.1.2: the same entries, both ways)."""


JAVA_HEAD_BLANK = (
    "must not open it: its log starts after a prefix reset's head blank, which Java DLedger <= 0.3 misreads"
)


def _read_entries(store: MmapLogStore, indexes: range, report: Report) -> tuple[int, str]:
    """Read every entry of `indexes` (its CRC checked): how many were read before a
    problem (added to `report`), and what Java DLedger may do with them."""
    checked, java = 0, JAVA_MAY_OPEN
    for index in indexes:
        try:
            magic = store.get(index).magic
        except DLedgerError as exc:
            report.problems.append(f"entry {index}: {exc.message}")
            return checked, java if java != JAVA_MAY_OPEN else "not known"
        if magic != MAGIC_NORMAL and java == JAVA_MAY_OPEN:
            java = _java_refusal(index, magic)
        checked += 1
    return checked, java


def _java_refusal(index: int, magic: int) -> str:
    """What `check` says of a store Java DLedger must not open (helper J: Java 0.2.7 and
    0.3.1.2 cut their log at the first such entry, committed entries and files after it
    included, or read it as an entry of theirs)."""
    kind = "a NOOP" if magic == MAGIC_NOOP else "a record" if magic == MAGIC_RECORD else "an entry"
    return (
        f"must not open it: entry {index} is {kind} (magic {magic}), which Java DLedger cuts its log at "
        "(committed entries included) or reads as data; only a java_compat store is for Java"
    )


def _inspect_snapshots(node: Path, report: Report) -> None:
    """Add what the node's snapshots look like: each one checked against its checksum."""
    from dledger.cli.snapshot_check import inspect_snapshots

    begin, end = report.facts.get("begin_index"), report.facts.get("end_index")
    found = inspect_snapshots(node, *(v if isinstance(v, int) else None for v in (begin, end)))
    report.facts.update(found.summary())
    report.notes += found.notes
    report.problems += found.problems


def _last_indexed(store: MmapLogStore, after: int) -> int:
    """The last index past `after` whose index unit names it (what a cut would lose)."""
    table = store.index_list.table
    last = after
    while True:
        try:
            unit = decode_index_unit(table.read((last + 1) * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))
        except (IndexError, ValueError):
            return last
        if unit.index != last + 1 or unit.magic == 0:
            return last
        last += 1


def _confirmed(question: str) -> bool:
    """The user's yes/no, or exit 1 (130 on Ctrl-C) when stdin cannot answer."""
    refused = "cannot ask for confirmation: {}; nothing changed (--yes repairs without asking)"
    if sys.stdin is None:
        fail(refused.format("no standard input (stdin is closed)"))
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            interrupted("nothing changed")
        click.echo(err=True)  # end the prompt's line
        fail(refused.format("the input ended before an answer"))


def _repair(node: Path, config: Any, damage: CorruptStoreError, yes: bool, as_json: bool) -> None:
    """Show what cutting the log at the damage loses; cut once confirmed."""
    try:
        with MmapLogStore.open(node, config, repair=True) as planned:
            keep_end, last = int(planned.end_index), _last_indexed(planned, int(planned.end_index))
    except (DLedgerError, OSError) as exc:
        _fail(f"{damage.message}; cannot repair: {exc}", as_json)
    lost = f"entries {keep_end + 1}..{last} ({last - keep_end} entries)" if last > keep_end else "no indexed entry"
    plan = f"would cut {damage.path} from offset {damage.offset}: {lost}; the log would end at {keep_end}"
    click.echo(f"damage: {damage.message}", err=True)
    click.echo(plan, err=as_json)
    if not yes and not _confirmed("cut the log there?"):
        _fail("nothing changed", as_json, plan=plan)
    writable = sized_config(node, config.data_file_size, config.index_file_size)
    reason = "repaired by `dledger check --repair`"
    try:
        precaution = mark_before_repair(node, reason)  # a repair cut short still leaves it
        with MmapLogStore.open(node, writable, repair=True) as repaired:
            if mark_repaired(repaired, reason) is None and precaution is not None:
                clear_rejoin(node)
    except (DLedgerError, OSError) as exc:
        _fail(f"repair failed: {getattr(exc, 'message', exc)}", as_json, plan=plan)
    if as_json:
        click.echo(json.dumps({"healthy": True, "repaired": plan, "end_index": keep_end}))
    else:
        click.echo(f"cut: the log now ends at {keep_end}")


@click.command(cls=GuardedCommand)
@click.argument("node_dir", type=NonEmptyPath(path_type=Path))
@click.option(
    "--data-file-size",
    type=int,
    default=None,
    callback=_positive,
    help="Data segment size (default: read off the files).",
)
@click.option(
    "--index-file-size",
    type=int,
    default=None,
    callback=_index_size,
    help="Index segment size (default: read off the files).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option(
    "--repair", is_flag=True, help="Cut a damaged tail recovery refuses to cut (shows what first, then asks)."
)
@click.option("--yes", "-y", is_flag=True, help="With --repair: do not ask for confirmation.")
def check(
    node_dir: Path, data_file_size: int | None, index_file_size: int | None, as_json: bool, repair: bool, yes: bool
) -> None:
    """Validate a store without changing it: recovery, every entry and its CRC, begin and
    end, the checkpoint against the log, and every snapshot against its checksum.

    NODE_DIR is a node's `dledger-<selfId>` directory (a storeBaseDir holding exactly one
    also works). Exit 0 when healthy, 1 when a problem is found (or no store is there),
    2 on usage errors. Nothing is written, except by `--repair` once confirmed.
    """
    _option_sizes(data_file_size, index_file_size)
    try:
        node = resolve_node_dir(node_dir)
    except DLedgerError as exc:
        raise click.UsageError(exc.message) from exc
    if not holds_store(node):
        _fail(f"no store here: {node} holds no data/, index/ or checkpoint", as_json)
    report = Report(str(node), facts={"store": str(node)})
    try:
        try:
            config = sized_config(node, data_file_size, index_file_size, read_only=True)
        except ConfigError as exc:  # the user's sizes passed: a file's size is wrong
            _fail(_sizes_on_disk_problem(node, exc), as_json, store=str(node))
        holder = lock_holder(node)
        if holder is not None:
            report.notes.append(f"the store is open for writing by process {holder or '?'}: it may change meanwhile")
        try:
            store = MmapLogStore.open(node, config)
        except CorruptStoreError as exc:
            if not repair:
                raise
            _repair(node, config, exc, yes, as_json)
            return
        with store:
            _inspect(store, node, report)
        _inspect_snapshots(node, report)
    except DLedgerError as exc:
        said = repair or not isinstance(exc, CorruptStoreError) or "check --repair" in exc.message  # once
        hint = "" if said else " (see `dledger check --repair`)"
        _fail(exc.message + hint, as_json, store=str(node))
    except OSError as exc:
        _fail(f"cannot read {exc.filename or node}: {exc.strerror or exc}", as_json, store=str(node))
    if repair and not report.problems:
        report.notes.append("nothing to repair")
    report.show(as_json)
    if report.problems:
        count = len(report.problems)
        fail(f"{count} problem{'s' if count > 1 else ''} in {node}" + ("" if as_json else " (listed above)"))


__all__ = ["check", "read_file"]
