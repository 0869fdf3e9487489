"""`dledger bench`: load a cluster and report committed entries/s and append latency."""

from __future__ import annotations

import json
import sys

import click

from dledger.cli.client_cmds import CONTEXT, MAX_BODY, client_options, open_client
from dledger.cli.errors import FiniteFloatRange, GuardedCommand, fail
from dledger.cli.loadgen import MODES, BenchConfig, BenchResult, capped_batch_size, run_bench
from dledger.client import DLedgerClient


@click.command(cls=GuardedCommand, context_settings=CONTEXT)
@click.option("-m", "--mode", type=click.Choice(MODES), default="batch", show_default=True, help="Append path to load.")
@click.option("-c", "--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True, help="Threads.")
@click.option(
    "-s", "--body-size", type=click.IntRange(0, MAX_BODY), default=128, show_default=True, help="Bytes per body."
)
@click.option(
    "-b",
    "--batch-size",
    type=click.IntRange(1, 65536),
    default=1000,
    show_default=True,
    help="Bodies per request (batch; fewer when they would exceed 16 MiB) or per producer batch (stream).",
)
@click.option("-d", "--duration", type=FiniteFloatRange(0.1, 1e7), default=10.0, show_default=True, help="Seconds.")
@click.option(
    "--rate",
    type=FiniteFloatRange(0, 1e12),
    default=0.0,
    help="Offered entries/s in total (0: no cap), paced per request: every thread sends at least one request, "
    "so a run offers at least --concurrency x --batch-size entries.",
)
@click.option(
    "--linger-ms", type=click.IntRange(0, 3_600_000), default=2, show_default=True, help="Producer linger (stream)."
)
@click.option(
    "--max-in-flight", type=click.IntRange(1, 65536), default=16, show_default=True, help="Producer batches in flight."
)
@click.option(
    "--multiplex/--no-multiplex",
    default=True,
    show_default=True,
    help="Let concurrent single/batch appends of the threads share requests (--no-multiplex: one RPC per call).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object (no progress bar).")
@client_options
def bench(
    mode: str,
    concurrency: int,
    body_size: int,
    batch_size: int,
    duration: float,
    rate: float,
    linger_ms: int,
    max_in_flight: int,
    multiplex: bool,
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
    capped = capped_batch_size(body_size, batch_size)
    if mode == "batch" and capped < batch_size:
        click.echo(
            f"note: {capped} bodies per request: {batch_size} x {body_size} B would exceed a member's 16 MiB",
            err=True,
        )
    with open_client(peers, group, timeout_s, multiplex) as client:
        result = run_bench(client, config) if as_json else _bench_with_progress(client, config)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
    else:
        _print_bench(result)
    if result.entries == 0:
        fail(f"nothing was committed: {result.first_error or 'no answer'}")


def _bench_with_progress(client: DLedgerClient, config: BenchConfig) -> BenchResult:
    """`run_bench` with a progress bar on stderr when stderr is a terminal (as
    `dledger.cli.progress`: pipes and files get only the result)."""
    if not sys.stderr.isatty():
        return run_bench(client, config)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn(f"{config.mode} x{config.concurrency}"),
        BarColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
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


__all__ = ["bench"]
