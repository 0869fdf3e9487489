"""Client commands of `dledger`: append, get, status, leadership-transfer, bench.

Every command takes `--peers/-p` and `--group/-g` (DLedger's names) with defaults that
reach the local 3-member cluster `make run` starts, so `dledger append hello` just
works. Errors are one line naming the DLedger code; exit status 0 = success, 1 = the
operation failed (or its outcome is unknown), 2 = usage error.
"""

from __future__ import annotations

import base64
import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import click

from dledger.cli.loadgen import MODES, BenchConfig, BenchResult, run_bench
from dledger.cli.tls_options import client_tls, client_tls_options
from dledger.client import DEFAULT_GROUP, DEFAULT_PEERS, DLedgerClient, NodeMetadata
from dledger.codes import DLedgerError
from dledger.config import ConfigError
from dledger.entry import Entry

F = TypeVar("F", bound=Callable[..., Any])
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def client_options(fn: F) -> F:
    """--peers/-p, --group/-g, --timeout and the TLS options, shared by every client command."""
    fn = client_tls_options(fn)
    fn = click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0.001),
        default=5.0,
        show_default=True,
        help="Seconds for one operation, redirects and safe retries included.",
    )(fn)
    fn = click.option("-g", "--group", default=DEFAULT_GROUP, show_default=True, help="Raft group name.")(fn)
    fn = click.option(
        "-p",
        "--peers",
        default=DEFAULT_PEERS,
        show_default=True,
        help="Members as id-host:port, ';'-separated (DLedger's format).",
    )(fn)
    return fn


def open_client(peers: str, group: str, timeout_s: float) -> DLedgerClient:
    """A client, or a usage error (exit 2) for a bad --peers."""
    try:
        return DLedgerClient(peers, group, timeout_s, tls=client_tls())
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--peers'") from exc


def fail(message: str) -> None:
    """Print one error line and exit 1."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def reports_errors(fn: F) -> F:
    """Turn a DLedgerError into one line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DLedgerError as exc:
            fail(str(exc))

    return wrapper  # type: ignore[return-value]


def show_body(body: bytes) -> str:
    """A body for humans: the text when it is printable UTF-8, else `0x` + hex."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + body.hex()
    return text if text.isprintable() else repr(text)


def entry_json(entry: Entry) -> dict[str, Any]:
    """An entry as JSON: the body as UTF-8 text, or base64 under `body_b64`."""
    out: dict[str, Any] = {
        "index": entry.index,
        "term": entry.term,
        "pos": entry.pos,
        "magic": entry.magic,
        "body_crc": entry.body_crc,
    }
    try:
        out["body"] = entry.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body_b64"] = base64.b64encode(entry.body).decode("ascii")
    return out


# -------------------------------------------------------------------------- append


def _bodies(body: str | None, files: tuple[Path, ...], count: int, body_size: int | None) -> Iterator[bytes]:
    if body == "-":
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\r\n")
        return
    if body is not None:
        for _ in range(count):
            yield body.encode("utf-8")
        return
    if files:
        for path in files:
            yield path.read_bytes()
        return
    for k in range(count):
        text = f"entry-{k}".encode()
        yield text if body_size is None else (text * (body_size // max(1, len(text)) + 1))[:body_size]


def _batches(bodies: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for body in bodies:
        batch.append(body)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


@click.command(context_settings=CONTEXT)
@click.argument("body", required=False)
@click.option("-d", "--data", help="The body to append (DLedger's option; same as BODY).")
@click.option(
    "-f",
    "--file",
    "files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Append the content of FILE as one body (repeatable).",
)
@click.option(
    "-c",
    "--count",
    type=click.IntRange(min=1),
    help="Append BODY this many times, or without BODY this many generated bodies.",
)
@click.option("--body-size", type=click.IntRange(min=0), help="Size of generated bodies (with --count).")
@click.option(
    "-b", "--batch-size", type=click.IntRange(1, 65536), default=1000, show_default=True, help="Bodies per request."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@client_options
@reports_errors
def append(
    body: str | None,
    data: str | None,
    files: tuple[Path, ...],
    count: int | None,
    body_size: int | None,
    batch_size: int,
    as_json: bool,
    peers: str,
    group: str,
    timeout_s: float,
) -> None:
    """Append entries to the log and print their indexes.

    BODY is appended as UTF-8 text; BODY `-` appends every line of stdin as one entry.
    Bodies go in batches of --batch-size per request; each batch gets consecutive
    indexes. Examples:

    \b
      dledger append hello
      dledger append --count 1000 --body-size 128
      seq 10 | dledger append -
      dledger append --file photo.jpg
    """
    if body is not None and data is not None:
        raise click.UsageError("give the body as BODY or --data, not both")
    body = body if body is not None else data
    if body is not None and files:
        raise click.UsageError("give BODY/--data or --file, not both")
    if body == "-" and count is not None:
        raise click.UsageError("--count does not go with stdin (-)")
    if body is None and not files and count is None:
        raise click.UsageError("nothing to append: give BODY, --file, - (stdin lines) or --count")
    first = last = -1
    appended = 0
    with open_client(peers, group, timeout_s) as client:
        for batch in _batches(_bodies(body, files, count or 1, body_size), batch_size):
            try:
                result = client.append_batch(batch)
            except DLedgerError as exc:
                if not appended:
                    raise
                fail(f"{exc}; before it, {appended} entries were appended at indexes {first}..{last}")
            first = result.first_index if first < 0 else first
            last = result.last_index
            appended += result.count
    if appended == 0:
        fail("nothing to append: stdin was empty")
    if as_json:
        click.echo(json.dumps({"first_index": first, "last_index": last, "count": appended}))
    elif appended == 1:
        click.echo(f"appended at index {first}")
    else:
        click.echo(f"appended {appended} entries at indexes {first}..{last}")


# ----------------------------------------------------------------------------- get


@click.command(context_settings=CONTEXT)
@click.argument("index", type=click.IntRange(min=0), required=False)
@click.option("-i", "--index", "index_option", type=click.IntRange(min=0), help="DLedger's option; same as INDEX.")
@click.option("-c", "--count", type=click.IntRange(min=1), default=1, show_default=True, help="Entries to read.")
@click.option("--node", "node_id", help="Read from this member (default: the leader).")
@click.option("--raw", is_flag=True, help="Write only the bodies, one per line.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry.")
@client_options
@reports_errors
def get(
    index: int | None,
    index_option: int | None,
    count: int,
    node_id: str | None,
    raw: bool,
    as_json: bool,
    peers: str,
    group: str,
    timeout_s: float,
) -> None:
    """Print committed entries from INDEX (at most --count; fewer at the commit index).

    Each line shows the index, the term and the body (UTF-8 text, or 0x-hex).
    """
    if index is not None and index_option is not None and index != index_option:
        raise click.UsageError("give the index as INDEX or --index, not both")
    start = index if index is not None else index_option if index_option is not None else 0
    with open_client(peers, group, timeout_s) as client:
        if node_id is not None and node_id not in client.peers:
            raise click.BadParameter(f"{node_id!r} is not one of {', '.join(client.peers)}", param_hint="'--node'")
        entries = client.get(start, count, node_id=node_id)
    out: BinaryIO | None = sys.stdout.buffer if raw else None
    for entry in entries:
        if out is not None:
            out.write(entry.body + b"\n")
        elif as_json:
            click.echo(json.dumps(entry_json(entry)))
        else:
            noop = " (noop)" if entry.is_noop else ""
            click.echo(f"{entry.index}\tterm {entry.term}\t{show_body(entry.body)}{noop}")


# -------------------------------------------------------------------------- status


def status_rows(members: list[NodeMetadata]) -> list[dict[str, Any]]:
    """One dict per member with its lag behind the leader's ledger end (None when no
    leader answered)."""
    leaders = [m for m in members if m.reachable and m.role == "LEADER"]
    leader = max(leaders, key=lambda m: m.term) if leaders else None
    rows = []
    for m in members:
        lag = leader.end_index - m.end_index if (leader is not None and m.reachable and m.error is None) else None
        rows.append(
            {
                "id": m.node_id,
                "address": m.address,
                "reachable": m.reachable,
                "role": m.role if m.reachable else "UNREACHABLE",
                "term": m.term,
                "leader": m.leader_id,
                "begin_index": m.begin_index,
                "end_index": m.end_index,
                "committed_index": m.committed_index,
                "applied_index": m.applied_index,
                "lag": lag,
                "error": m.error,
            }
        )
    return rows


@click.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list instead of a table.")
@client_options
@reports_errors
def status(as_json: bool, peers: str, group: str, timeout_s: float) -> None:
    """Show every member: role, term, log range, commit index and lag behind the leader.

    Members that do not answer are shown as UNREACHABLE; the exit status is 1 only when
    none answers.
    """
    with open_client(peers, group, timeout_s) as client:
        rows = status_rows(client.status())
    if as_json:
        click.echo(json.dumps(rows))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"group {group}")
        for name, key in (("id", "id"), ("address", "address"), ("role", "role")):
            width = max(len(name), *(len(str(r[key])) for r in rows))
            table.add_column(name, no_wrap=True, min_width=width)
        numbers = ["term", "begin_index", "end_index", "committed_index", "applied_index", "lag"]
        if all(r["applied_index"] in (-1, None) for r in rows):
            numbers.remove("applied_index")  # no state machine anywhere
        for key in numbers:
            table.add_column(key.removesuffix("_index"), justify="right", no_wrap=True)
        style = {"LEADER": "bold green", "FOLLOWER": "cyan", "CANDIDATE": "yellow", "UNREACHABLE": "red"}
        for r in rows:
            cells = ["" if not r["reachable"] or r[key] is None else str(r[key]) for key in numbers]
            role = f"[{style[r['role']]}]{r['role']}[/]" if r["role"] in style else r["role"]
            table.add_row(r["id"], r["address"], role, *cells)
        Console(width=None if sys.stdout.isatty() else 120).print(table)
        for r in rows:
            if r["error"]:
                click.echo(f"{r['id']}: {' '.join(r['error'].split())}")
    if not any(r["reachable"] for r in rows):
        fail("NETWORK_ERROR (302): no member answered")


# ------------------------------------------------------------- leadership-transfer


@click.command("leadership-transfer", context_settings=CONTEXT)
@click.option("-t", "--to", "--transferee-id", "transferee_id", required=True, help="The member that should lead.")
@click.option("-l", "--leader", help="The current leader's id (default: found by asking the members).")
@click.option("--term", type=click.IntRange(min=0), help="The current leader's term (checked when given).")
@client_options
@reports_errors
def leadership_transfer(
    transferee_id: str, leader: str | None, term: int | None, peers: str, group: str, timeout_s: float
) -> None:
    """Ask the leader to hand leadership to another member (DLedger's
    leadershipTransfer); prints the new leader and term."""
    with open_client(peers, group, timeout_s) as client:
        try:
            client.target(transferee_id)
            if leader is not None:
                client.leader = client.target(leader)
        except DLedgerError as exc:
            raise click.BadParameter(exc.message) from exc
        new_term = client.leadership_transfer(transferee_id, term)
    click.echo(f"{transferee_id} leads now (term {new_term})")


# --------------------------------------------------------------------------- bench


@click.command(context_settings=CONTEXT)
@click.option("-m", "--mode", type=click.Choice(MODES), default="batch", show_default=True, help="Append path to load.")
@click.option("-c", "--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True, help="Threads.")
@click.option("-s", "--body-size", type=click.IntRange(min=0), default=128, show_default=True, help="Bytes per body.")
@click.option(
    "-b",
    "--batch-size",
    type=click.IntRange(1, 65536),
    default=1000,
    show_default=True,
    help="Bodies per request (batch) or per producer batch (stream).",
)
@click.option("-d", "--duration", type=click.FloatRange(min=0.1), default=10.0, show_default=True, help="Seconds.")
@click.option("--rate", type=click.FloatRange(min=0), default=0.0, help="Offered entries/s in total (0: no cap).")
@click.option("--linger-ms", type=click.IntRange(min=0), default=2, show_default=True, help="Producer linger (stream).")
@click.option(
    "--max-in-flight", type=click.IntRange(min=1), default=16, show_default=True, help="Producer batches in flight."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object (no progress bar).")
@client_options
@reports_errors
def bench(
    mode: str,
    concurrency: int,
    body_size: int,
    batch_size: int,
    duration: float,
    rate: float,
    linger_ms: int,
    max_in_flight: int,
    as_json: bool,
    peers: str,
    group: str,
    timeout_s: float,
) -> None:
    """Load the cluster and report committed entries/s and append latency.

    Modes: `single` (one body per Append), `batch` (--batch-size bodies per Append),
    `stream` (a Producer over AppendStream batching on the client side). Latency is
    from the call to the commit answer (per request; per body in stream mode).
    """
    config = BenchConfig(
        mode=mode,
        concurrency=concurrency,
        body_size=body_size,
        batch_size=1 if mode == "single" else batch_size,
        duration_s=duration,
        rate=rate,
        linger_ms=linger_ms,
        max_in_flight=max_in_flight,
    )
    with open_client(peers, group, timeout_s) as client:
        result = run_bench(client, config) if as_json else _bench_with_progress(client, config)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
    else:
        _print_bench(result)
    if result.entries == 0:
        fail(f"nothing was committed: {result.first_error or 'no answer'}")


def _bench_with_progress(client: DLedgerClient, config: BenchConfig) -> BenchResult:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn(f"{config.mode} x{config.concurrency}"),
        BarColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("bench", total=config.duration_s, rate="")

        def update(entries: int, elapsed: float) -> None:
            rate = f"{entries / elapsed:,.0f} entries/s" if elapsed > 0 else ""
            bar.update(task, completed=min(elapsed, config.duration_s), rate=rate)

        return run_bench(client, config, update)


def _print_bench(result: BenchResult) -> None:
    from rich.console import Console
    from rich.table import Table

    c = result.config
    table = Table(title=f"{c.mode} x{c.concurrency}, {c.body_size} B", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("committed entries", f"{result.entries:,}")
    table.add_row("entries/s", f"{result.entries_per_s:,.0f}")
    table.add_row("MiB/s", f"{result.mib_per_s:,.2f}")
    table.add_row("requests", f"{result.requests:,}")
    table.add_row("failed / unknown", f"{result.failed} / {result.indeterminate}")
    for name in ("p50", "p99", "p999", "max"):
        if name in result.latency_ms:
            table.add_row(f"latency {name}", f"{result.latency_ms[name]:.2f} ms")
    Console().print(table)
    if result.first_error:
        click.echo(f"first error: {result.first_error}", err=True)


__all__ = ["append", "bench", "get", "leadership_transfer", "status"]
