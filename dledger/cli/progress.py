"""A progress bar for long CLI work, on stderr and only when stderr is a terminal (so
pipes, files and `--json` output stay clean)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress(total: int | None, what: str, unit: str = "entries") -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`: `n` more of `total` units done. With no total (None), or when
    stderr is not a terminal, `advance` does nothing. The bar disappears at the end."""
    if total is None or not sys.stderr.isatty():
        yield lambda _done: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda done: bar.advance(task, done)
