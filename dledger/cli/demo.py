"""`dledger demo`: the embedded store in action (what `make run` shows)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click
from rich.console import Console

from dledger.cli.errors import GuardedCommand
from dledger.cli.param_types import NonEmptyPath
from dledger.embedded import open_log
from dledger.entry import HEADER_SIZE, MAX_ENTRY_SIZE
from dledger.store import StoreConfig

console = Console(highlight=False)
MAX_BODY = MAX_ENTRY_SIZE - HEADER_SIZE


@click.command(cls=GuardedCommand)
@click.option(
    "--dir",
    "directory",
    default=".dledger-data",
    show_default=True,
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="storeBaseDir; the log lives in DIR/dledger-demo.",
)
@click.option(
    "--count", type=click.IntRange(1, 100_000_000), default=1_000_000, show_default=True, help="Entries to append."
)
@click.option(
    "--body-size", type=click.IntRange(1, MAX_BODY), default=128, show_default=True, help="Body size in bytes."
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
def demo(directory: Path, count: int, body_size: int, as_json: bool) -> None:
    """Append to a local log, read it back and show where it lives."""
    node_dir = directory / "dledger-demo"
    config = StoreConfig(data_file_size=256 << 20, index_file_size=32 << 20)

    def say(text: str) -> None:
        if not as_json:
            console.print(text)

    with open_log(node_dir, config) as log:
        before = log.end_index
        say(
            f"opened {node_dir}: {log.end_index - log.begin_index + 1 if log.begin_index >= 0 else 0} "
            f"entries already there (begin {log.begin_index}, end {log.end_index})"
        )
        body = os.urandom(body_size)
        log.wait_warm()
        start = time.perf_counter()
        append = log.append
        for _ in range(count):
            append(body)
        append_s = max(time.perf_counter() - start, 1e-9)
        say(
            f"appended {count:,} entries of {body_size} B in {append_s:.3f} s "
            f"= [bold]{count / append_s:,.0f} appends/s[/bold] (one call per entry, CRC on)"
        )
        start = time.perf_counter()
        get_body = log.get_body
        for index in range(before + 1, log.end_index + 1):
            get_body(index)
        read_s = max(time.perf_counter() - start, 1e-9)
        say(f"read them back by index: [bold]{count / read_s:,.0f} gets/s[/bold]")
        last = log.get(log.end_index)
        say(f"last entry: index={last.index} term={last.term} pos={last.pos} size={last.size}")
    if as_json:
        figures = {
            "store": str(node_dir),
            "appended": count,
            "body_size": body_size,
            "first_index": before + 1,
            "last_index": last.index,
            "appends_per_s": count / append_s,
            "gets_per_s": count / read_s,
        }
        click.echo(json.dumps(figures))
        return
    console.print(
        f"closed; inspect it with:\n  .venv/bin/dledger check {node_dir}\n"
        f"  .venv/bin/dledger read-file -d {node_dir}/data -s 4096"
    )
