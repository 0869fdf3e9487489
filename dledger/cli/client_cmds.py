"""Client commands of `dledger`: append, get, status, leadership-transfer (bench: see
`dledger.cli.bench_cmd`).

Every command takes `--peers/-p` and `--group/-g` (DLedger's names; also DLEDGER_PEERS
and DLEDGER_GROUP) with defaults that reach the local 3-member cluster `make run` starts,
so `dledger append hello` just works. Errors are one line naming the DLedger code; exit
status 0 ok, 1 failed (or the outcome is unknown), 2 usage, 130 interrupted.

Bodies are shown as text when they are printable UTF-8 (and do not start with
`base64:`), else as `base64:` followed by the body in base64; `--json` gives `body`
(text) or `body_b64`, `--raw` the bytes.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import click

from dledger.cli.append_input import MAX_BODY, batches, file_bodies, generated_bodies, stdin_batches
from dledger.cli.append_tally import AppendTally, indexes_text
from dledger.cli.errors import INT64_MAX, FiniteFloatRange, GuardedCommand, fail, interrupted, stdin_binary
from dledger.cli.progress import progress
from dledger.cli.record_opts import record_batches, record_json, record_line, record_options, record_spec
from dledger.cli.tls_options import client_tls, client_tls_options, client_token, remember_client
from dledger.client import DEFAULT_GROUP, DEFAULT_PEERS, DLedgerClient
from dledger.client.interrupts import DeferredCtrlC
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import ConfigError
from dledger.config_bounds import name_problem
from dledger.entry import MAGIC_RECORD, Entry
from dledger.raft.messages import MAX_TERM
from dledger.record import record_of

F = TypeVar("F", bound=Callable[..., Any])
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
BASE64_PREFIX = "base64:"  # how a binary body starts when shown (`base64:AP8=` is the two bytes 00 ff)


def _group_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A group the members could hold (`name_problem`: an empty one went out as it was)."""
    if (problem := name_problem(value, "group")) is not None:
        raise click.BadParameter(problem)
    return value


def client_options(fn: F) -> F:
    """--peers/-p, --group/-g (DLEDGER_PEERS, DLEDGER_GROUP), --timeout and the TLS
    options (DLEDGER_TLS_*), shared by every client command."""
    fn = client_tls_options(fn)
    fn = click.option(
        "--timeout",
        "timeout_s",
        type=FiniteFloatRange(min=0.001, max=1e6),
        default=5.0,
        show_default=True,
        help="Seconds for one operation, redirects and safe retries included.",
    )(fn)
    fn = click.option(
        "-g",
        "--group",
        default=DEFAULT_GROUP,
        show_default=True,
        envvar="DLEDGER_GROUP",
        show_envvar=True,
        callback=_group_name,
        help="Raft group name.",
    )(fn)
    fn = click.option(
        "-p",
        "--peers",
        default=DEFAULT_PEERS,
        show_default=True,
        envvar="DLEDGER_PEERS",
        show_envvar=True,
        help="Members as id-host:port, ';'-separated (DLedger's format).",
    )(fn)
    return fn


def open_client(peers: str, group: str, timeout_s: float, multiplex: bool = True) -> DLedgerClient:
    """A client, or a usage error (exit 2) for a bad --peers."""
    tls = client_tls()
    try:
        client = DLedgerClient(peers, group, timeout_s, tls=tls, token=client_token(), multiplex=multiplex)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--peers'") from exc
    remember_client(client.members.peers, tls)
    return client


def show_body(body: bytes) -> str:
    """A body for humans: printable UTF-8 as text (unless it starts `base64:`), else `base64:` + base64."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable() and not text.startswith(BASE64_PREFIX):
        return text
    return BASE64_PREFIX + base64.b64encode(body).decode("ascii")


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
    if entry.magic == MAGIC_RECORD:
        record_json(entry, out)
    return out


# -------------------------------------------------------------------------- append


def _requests(
    body: str | None, files: tuple[Path, ...], count: int, body_size: int | None, batch_size: int
) -> Iterator[list[bytes]]:
    """The bodies to append in request batches (of at most `batch_size` bodies and
    the member's byte limit), made one batch at a time."""
    if body == "-":
        return stdin_batches(stdin_binary(), batch_size)
    if body is not None:
        return batches((body.encode("utf-8", "surrogateescape") for _ in range(count)), batch_size)
    if files:
        return batches(file_bodies(files), batch_size)
    return batches(generated_bodies(count, body_size), batch_size)


@click.command(cls=GuardedCommand, context_settings=CONTEXT)
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
    type=click.IntRange(1, INT64_MAX),
    help="Append BODY this many times, or without BODY this many generated bodies (not with --file or -).",
)
@click.option("--body-size", type=click.IntRange(0, MAX_BODY), help="Size of generated bodies (with --count).")
@click.option(
    "-b",
    "--batch-size",
    type=click.IntRange(1, 65536),
    default=1000,
    show_default=True,
    help="Bodies per request (fewer when they would exceed 16 MiB).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@record_options
@client_options
def append(
    body: str | None,
    data: str | None,
    files: tuple[Path, ...],
    count: int | None,
    body_size: int | None,
    batch_size: int,
    as_json: bool,
    key: str | None,
    headers: tuple[str, ...],
    timestamp: int | None,
    peers: str,
    group: str,
    timeout_s: float,
) -> None:
    """Append entries to the log and print their indexes.

    BODY is appended as UTF-8 text; BODY `-` appends every line of stdin as one entry,
    as the lines arrive (`tail -f app.log | dledger append -` works): each request
    carries the lines already there, up to --batch-size. Other bodies go in batches of
    --batch-size per request (fewer when they would exceed the member's 16 MiB a
    request); each batch gets consecutive indexes. Ctrl-C stops and
    reports how many entries were appended (exit 130): a first Ctrl-C waits for the
    answer to the request in flight (at most --timeout), a second one stops at once
    (that request's outcome is then unknown). Examples:

    \b
      dledger append hello
      dledger append --count 1000 --body-size 128
      seq 10 | dledger append -
      dledger append --file photo.jpg
      dledger append --key user-7 --header source=web --timestamp 1700000000000 '{"clicks": 3}'

    With --key, --header or --timestamp every body is appended as a record (magic 16:
    key, event time, headers, value; refused by a java_compat group).
    """
    if body is not None and data is not None:
        raise click.UsageError("give the body as BODY or --data, not both")
    body = body if body is not None else data
    if body is not None and files:
        raise click.UsageError("give BODY/--data or --file, not both")
    if body == "-" and count is not None:
        raise click.UsageError("--count does not go with stdin (-)")
    if files and count is not None:
        raise click.UsageError("--count does not go with --file (each file is appended once)")
    if body is None and not files and count is None:
        raise click.UsageError("nothing to append: give BODY, --file, - (stdin lines) or --count")
    if body_size is not None and (body is not None or files):
        raise click.UsageError("--body-size goes with generated bodies (--count without BODY or --file)")
    spec = record_spec(key, headers, timestamp)
    tally = AppendTally()
    long_run = count if count is not None and count > batch_size and not as_json else None
    with open_client(peers, group, timeout_s) as client, progress(long_run, "appending") as advance:
        try:
            for batch, magic in record_batches(_requests(body, files, count or 1, body_size, batch_size), spec):
                try:
                    tally.send(client, batch, magic, advance)  # Ctrl-C: see dledger.cli.append_tally
                except DLedgerError as exc:
                    if not tally.appended:
                        raise
                    fail(f"{exc}; before it, {tally.done()}")
        except KeyboardInterrupt:
            interrupted(tally.report())
    if tally.appended == 0:
        fail("nothing to append: stdin was empty")
    _say_appended(tally, as_json)


def _say_appended(tally: AppendTally, as_json: bool) -> None:
    """Where the entries went (`--json`: one object). When stdout cannot take it (a full
    disk) the error says the entries are in: a retry would append them twice."""
    first, last = tally.first, tally.last
    if tally.appended == 1:
        said = f"appended at index {first}"
    else:
        said = f"appended {tally.appended} entries {indexes_text(tally.appended, first, last)}"
    contiguous = last - first + 1 == tally.appended  # false when other writers' entries came in between
    try:
        if as_json:
            click.echo(
                json.dumps(
                    {"first_index": first, "last_index": last, "count": tally.appended, "contiguous": contiguous}
                )
            )
        else:
            click.echo(said)
    except OSError as exc:  # stdout: the entries are in (a retry would append them twice)
        if isinstance(exc, BrokenPipeError):
            raise
        fail(f"{said}, but cannot write that out: {exc.strerror or exc}")


# ----------------------------------------------------------------------------- get


class _Printer:
    """Writes entries as `get` shows them (text line, JSON object or raw body)."""

    def __init__(self, raw: bool, as_json: bool) -> None:
        self.out: BinaryIO | None = sys.stdout.buffer if raw else None
        self.as_json = as_json
        self.shown = 0

    def __call__(self, entry: Entry) -> None:
        with DeferredCtrlC():  # an entry printed is an entry counted
            if self.out is not None:
                self.out.write(record_of(entry).value + b"\n")
                self.out.flush()
            elif self.as_json:
                click.echo(json.dumps(entry_json(entry)))
            elif entry.magic == MAGIC_RECORD:
                click.echo(record_line(record_of(entry), show_body))
            else:
                noop = " (noop)" if entry.is_noop else ""
                click.echo(f"{entry.index}\tterm {entry.term}\t{show_body(entry.body)}{noop}")
            self.shown += 1


GET_PAGE = 1024
"""Entries `get` asks for per request: it prints each page before asking for the next."""


def _print_committed(client: DLedgerClient, start: int, count: int, node_id: str | None, show: _Printer) -> None:
    """Print committed entries [start, start + count) page by page, stopping at the
    commit index. An index that is not committed yet is an error only for the first."""
    index = start
    while show.shown < count:
        want = min(GET_PAGE, count - show.shown)
        try:
            entries = client.get(index, want, node_id=node_id)
        except DLedgerError as exc:
            if show.shown and exc.code == ResponseCode.INDEX_OUT_OF_RANGE:
                return  # the previous page ended at the commit index
            raise
        for entry in entries:
            show(entry)
        if len(entries) < want:
            return
        index = entries[-1].index + 1


@click.command(cls=GuardedCommand, context_settings=CONTEXT)
@click.argument("index", type=click.IntRange(0, INT64_MAX), required=False)
@click.option(
    "-i", "--index", "index_option", type=click.IntRange(0, INT64_MAX), help="DLedger's option; same as INDEX."
)
@click.option(
    "-c",
    "--count",
    type=click.IntRange(1, INT64_MAX),
    help="Entries to read.  [default: 1; with --follow: no limit]",
)
@click.option("-F", "--follow", is_flag=True, help="Keep printing entries as they are committed, until Ctrl-C.")
@click.option("--node", "node_id", help="Read from this member (default: the leader).")
@click.option("--raw", is_flag=True, help="Write only the bodies, one per line.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry.")
@client_options
def get(
    index: int | None,
    index_option: int | None,
    count: int | None,
    follow: bool,
    node_id: str | None,
    raw: bool,
    as_json: bool,
    peers: str,
    group: str,
    timeout_s: float,
) -> None:
    """Print committed entries from INDEX (at most --count; fewer at the commit index).

    Each line shows the index, the term and the body: the text when it is printable
    UTF-8, else `base64:` and the body in base64. With --follow it waits for new
    entries and prints each once committed (`tail -f` of the log) until Ctrl-C (exit
    130) or --count entries.
    """
    if index is not None and index_option is not None and index != index_option:
        raise click.UsageError("give the index as INDEX or --index, not both")
    if raw and as_json:
        raise click.UsageError("give --raw or --json, not both")
    start = index if index is not None else index_option if index_option is not None else 0
    show = _Printer(raw, as_json)
    with open_client(peers, group, timeout_s) as client:
        if node_id is not None and node_id not in client.peers:
            raise click.BadParameter(f"{node_id!r} is not one of {', '.join(client.peers)}", param_hint="'--node'")
        if not follow:
            _print_committed(client, start, count or 1, node_id, show)
            return
        end = None if count is None else min(start + count, INT64_MAX)
        try:
            for entry in client.iterate(start, end, follow=True, node_id=node_id):
                show(entry)
        except KeyboardInterrupt:
            interrupted(f"{show.shown} entries shown")


# ------------------------------------------------------------- leadership-transfer


@click.command("leadership-transfer", cls=GuardedCommand, context_settings=CONTEXT)
@click.option("-t", "--to", "--transferee-id", "transferee_id", required=True, help="The member that should lead.")
@click.option("-l", "--leader", help="The current leader's id (checked when given: another leader refuses).")
@click.option("--term", type=click.IntRange(1, MAX_TERM), help="The current leader's term (checked when given).")
@click.option("--json", "as_json", is_flag=True, help="Print the new leader and term as JSON.")
@client_options
def leadership_transfer(
    transferee_id: str,
    leader: str | None,
    term: int | None,
    as_json: bool,
    peers: str,
    group: str,
    timeout_s: float,
) -> None:
    """Ask the leader to hand leadership to another member (DLedger's
    leadershipTransfer); prints the new leader and term. --timeout bounds the whole
    operation (finding the leader and the transfer)."""
    with open_client(peers, group, timeout_s) as client:
        for name, member in (("'--to'", transferee_id), ("'--leader'", leader)):
            try:
                if member is not None:
                    client.target(member)
            except DLedgerError as exc:
                raise click.BadParameter(exc.message, param_hint=name) from exc
        new_term = client.leadership_transfer(transferee_id, term, leader=leader, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps({"leader": transferee_id, "term": new_term}))
    else:
        click.echo(f"{transferee_id} leads now (term {new_term})")


__all__ = ["CONTEXT", "MAX_BODY", "append", "client_options", "get", "leadership_transfer", "open_client"]
