"""Records on the command line: `dledger append --key K --header k=v --timestamp MS`
turns every body into a record (magic 16), and `dledger get` shows a record's key,
timestamp and headers (text, `--json`; `--raw` writes the value)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from dledger.cli.append_input import batches
from dledger.entry import (
    MAGIC_NORMAL,
    MAGIC_RECORD,
    MAX_HEADER_KEY,
    MAX_RECORD_HEADERS,
    MAX_RECORD_KEY,
    MAX_TIMESTAMP_MS,
    Entry,
)
from dledger.record import Record, encode_record, record_of

F = TypeVar("F", bound=Callable[..., Any])


def record_options(fn: F) -> F:
    """--key, --header (repeatable) and --timestamp of `dledger append`."""
    fn = click.option(
        "--timestamp",
        type=click.IntRange(0, MAX_TIMESTAMP_MS),
        help="Event time of the records in ms since the epoch (with --key/--header; default: now).",
    )(fn)
    fn = click.option(
        "--header",
        "headers",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Add a record header (repeatable, order kept, at most {MAX_RECORD_HEADERS}; UTF-8 text).",
    )(fn)
    fn = click.option("--key", help=f"Append records with this key (UTF-8 text, at most {MAX_RECORD_KEY} bytes).")(fn)
    return fn


@dataclass(frozen=True)
class RecordSpec:
    """What `dledger append` puts around each body: key, headers, timestamp (None: now)."""

    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | None

    def encode(self, bodies: Iterable[bytes]) -> list[bytes]:
        """Each body as a record body."""
        return [encode_record(body, self.key, self.timestamp, self.headers) for body in bodies]


def record_spec(key: str | None, headers: tuple[str, ...], timestamp: int | None) -> RecordSpec | None:
    """The records `dledger append` writes, None for plain entries; a usage error (exit
    2) for a bad --header or a field over its limit."""
    if key is None and not headers and timestamp is None:
        return None
    pairs = []
    for text in headers:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="'--header'")
        if len(name.encode("utf-8", "surrogateescape")) > MAX_HEADER_KEY:
            raise click.BadParameter(f"header key over {MAX_HEADER_KEY} bytes", param_hint="'--header'")
        pairs.append((name, value.encode("utf-8", "surrogateescape")))
    if len(pairs) > MAX_RECORD_HEADERS:
        raise click.BadParameter(f"more than {MAX_RECORD_HEADERS} headers", param_hint="'--header'")
    raw_key = None if key is None else key.encode("utf-8", "surrogateescape")
    if raw_key is not None and len(raw_key) > MAX_RECORD_KEY:
        raise click.BadParameter(f"the key is over {MAX_RECORD_KEY} bytes", param_hint="'--key'")
    spec = RecordSpec(raw_key, tuple(pairs), timestamp)
    try:
        spec.encode([b""])
    except (ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None
    return spec


def record_batches(requests: Iterator[list[bytes]], spec: RecordSpec | None) -> Iterator[tuple[list[bytes], int]]:
    """The request batches to send, each with its magic."""
    for batch in requests:
        if spec is None:
            yield batch, MAGIC_NORMAL
            continue
        # a record is larger than its value: split again so a request stays within the
        # member's byte limit
        for part in batches(spec.encode(batch), max(1, len(batch))):
            yield part, MAGIC_RECORD


def _text_or_b64(raw: bytes, name: str, out: dict[str, Any]) -> None:
    try:
        out[name] = raw.decode("utf-8")
    except UnicodeDecodeError:
        out[name + "_b64"] = base64.b64encode(raw).decode("ascii")


def record_json(entry: Entry, out: dict[str, Any]) -> None:
    """Add a record's fields to `get --json`'s object: the value as `body`/`body_b64`,
    `key`/`key_b64` (null: no key), `timestamp` and `headers` ([[key, value], ...],
    values as text or `{"b64": ...}`)."""
    record = record_of(entry)
    out.pop("body", None)
    out.pop("body_b64", None)
    _text_or_b64(record.value, "body", out)
    if record.key is None:
        out["key"] = None
    else:
        _text_or_b64(record.key, "key", out)
    out["timestamp"] = record.timestamp
    headers: list[list[Any]] = []
    for name, value in record.headers:
        shown: dict[str, Any] = {}
        _text_or_b64(value, "v", shown)
        headers.append([name, shown.get("v", {"b64": shown.get("v_b64")})])
    out["headers"] = headers


def record_line(record: Record, show: Callable[[bytes], str]) -> str:
    """A record as `get` prints it: index, term, value, then key, timestamp, headers."""
    key = "-" if record.key is None else show(record.key)
    if key == "-" and record.key is not None:  # the key "-" is not "no key"
        key = "base64:" + base64.b64encode(record.key).decode("ascii")
    fields = [f"key={key}", f"timestamp={record.timestamp}"]
    # a header name goes through `show` too: raw, a writer's control characters reached
    # the terminal of whoever ran `get` (escape sequences, a line split in two)
    fields += [f"{show(name.encode())}={show(value)}" for name, value in record.headers]
    return f"{record.index}\tterm {record.term}\t{show(record.value)}\t{' '.join(fields)}"
